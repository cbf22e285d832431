"""The exact recency search: which plain cosine searches prove the top n by cosine + bonus.

A memory's bonus is at most ``weight`` and shrinks with age, so a few cheap plain searches
bound every memory they did not return. ``S`` is the top ``limit`` by raw cosine; tier ``j``
is the top ``limit`` among memories dated within ``A_j`` days. A memory in no result has
raw cosine at most the ``limit``-th raw score of every set it belongs to, and a bonus at
most ``weight * exp(-A_(j-1) / tau)`` if it is older than ``A_(j-1)``. Once the n-th kept
final score beats the largest such bound (or the bound is under the threshold), nothing
unseen can change the answer; otherwise the searches widen. The answer is then exactly
what :class:`~llama_index_recency.RecencyBonusPostprocessor` would keep if it saw every
memory, for any number of memories near the top.

With a lexical weight (:mod:`~llama_index_recency.ranking.lexical`) a memory's relevance is
its cosine plus that weight times the share of the question's term weight it holds; each
term's set is searched like a tier: a memory holding a term no search of it returned has a
cosine at most that search's ``limit``-th, so the bound stays exact.

The plan is engine-neutral: it yields :class:`MemorySearch` descriptions and receives
their results, so every engine (Qdrant Edge, a server, qdrant-client's local mode) runs
the same algorithm, sync or async, and only translates the request.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Optional, Union

from llama_index.core.schema import BaseNode, NodeWithScore
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from llama_index_recency.ranking.lexical import TERMS_KEY, LexicalQuery, terms
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.ranking.ranked import RecencyRanking
from llama_index_recency.records.text import is_one_statement

TIER_BONUS_FRACTIONS: tuple[float, ...] = (1 / 2, 1 / 8, 1 / 32, 1 / 256, 1 / 4096)
"""Tier j holds memories young enough to get at least this share of ``weight``.

A tier is searched only when its age bracket holds the largest bound, so the deep ones
cost nothing unless near-ties among old memories need them."""

FIRST_LIMIT = 16
"""Results per search in the first round; each later round asks for 4x as many."""

# Tier boundaries are widened a little so datetime rounding in an engine can only add
# members to a tier (harmless), never drop one that belongs to it.
_TIER_SLACK = timedelta(minutes=1)
SCORE_SLACK = 1e-6
"""Raw scores come from float32 vectors: a proof needs this margin above that rounding."""
# "Any readable datetime": the lower end of a range that every stored date passes.
EARLIEST_DATE = "0001-01-01T00:00:00+00:00"


@dataclass(frozen=True)
class MemorySearch:
    """One plain cosine search: the top ``limit`` memories, only those dated ``since`` if set.

    ``filters`` is the caller's scope (a user, a kind, ...), applied inside the search;
    ``ids`` restricts it to those memories (to score known ones); ``linked`` = (key, ids)
    to the memories whose list under ``key`` names one of ``ids`` (successor links);
    ``term``: only memories holding that term (:mod:`~llama_index_recency.ranking.lexical`);
    ``min_score``: the engine may leave out memories of a lower cosine (none of them can be
    kept: the plan needs no node of theirs);
    ``with_vectors``: the results carry their embeddings.
    """

    limit: int
    filters: Optional[MetadataFilters] = None
    since: Optional[datetime] = None
    undated_only: bool = False
    term: Optional[str] = None
    min_score: Optional[float] = None
    ids: Optional[tuple[str, ...]] = None
    linked: Optional[tuple[str, tuple[str, ...]]] = None
    with_vectors: bool = False

    def metadata_filters(self, date_key: str) -> Optional[MetadataFilters]:
        """The whole condition as LlamaIndex ``MetadataFilters``: scope AND the date condition."""
        conditions: list[MetadataFilter | MetadataFilters] = []
        if self.filters is not None and self.filters.filters:
            conditions.append(self.filters)
        if self.linked is not None:
            key, ids = self.linked
            conditions.append(MetadataFilter(key=key, operator=FilterOperator.IN, value=list(ids)))
        if self.since is not None:
            conditions.append(_date_since(date_key, self.since.isoformat()))
        if self.term is not None:
            conditions.append(MetadataFilter(key=TERMS_KEY, operator=FilterOperator.EQ,
                                             value=self.term))
        if self.undated_only:
            conditions.append(
                MetadataFilters(filters=[_date_since(date_key, EARLIEST_DATE)],
                                condition=FilterCondition.NOT)
            )
        if not conditions:
            return None
        if len(conditions) == 1 and isinstance(conditions[0], MetadataFilters):
            return conditions[0]
        return MetadataFilters(filters=conditions, condition=FilterCondition.AND)


@dataclass(frozen=True)
class MemorySentences:
    """The sentence vectors of the memories ``ids`` (``texts``: their contents): the reply maps
    each id to its matrix, a row per sentence of
    :func:`~llama_index_recency.ranking.sentences.memory_sentences`, as stored with it; a
    memory left out of the reply takes no part."""

    ids: tuple[str, ...]
    texts: tuple[str, ...]

    @classmethod
    def of(cls, nodes: Iterable[BaseNode]) -> Optional[MemorySentences]:
        """The request for those of ``nodes`` that say several sentences; None for none."""
        several = [node for node in nodes if not is_one_statement(node.get_content())]
        if not several:
            return None
        return cls(ids=tuple(node.node_id for node in several),
                   texts=tuple(node.get_content() for node in several))


Request = Union[MemorySearch, MemorySentences]
"""What a plan asks its engine for."""


def dated_filter(date_key: str) -> MetadataFilters:
    """Memories whose ``date_key`` holds a readable datetime."""
    return MetadataFilters(filters=[_date_since(date_key, EARLIEST_DATE)])


def _date_since(date_key: str, iso: str) -> MetadataFilter:
    return MetadataFilter(key=date_key, operator=FilterOperator.GTE, value=iso)


SetKey = Union[int, str]
"""A searched set: 0 every memory, j >= 1 tier j, a string the memories holding that term."""

SearchPlan = Generator[Request, Any, RecencyRanking]
"""Yields requests and receives each one's reply: a search's results (best raw cosine first),
the sentence matrices by id; returns the ranking."""


def reusing_link_searches(plan: SearchPlan) -> SearchPlan:
    """``plan`` with each link search that an earlier complete one of the same plan answers
    (same key, scope and options, a subset of its ids) answered from that one's results:
    the newer-versions step and the successor walk ask for the same links."""
    complete: list[tuple[MemorySearch, Sequence[NodeWithScore]]] = []
    try:
        search = next(plan)
        while True:
            reused = _answered_by(complete, search)
            if reused is not None:
                search = plan.send(reused)
                continue
            results = yield search
            if isinstance(search, MemorySearch) and search.linked is not None \
                    and len(results) < search.limit:
                complete.append((search, results))
            search = plan.send(results)
    except StopIteration as done:
        return done.value


def _answered_by(complete: Sequence[tuple[MemorySearch, Sequence[NodeWithScore]]],
                 search: Request) -> Optional[list[NodeWithScore]]:
    if not isinstance(search, MemorySearch) or search.linked is None:
        return None
    key, ids = search.linked
    wanted = set(ids)
    for earlier, results in complete:
        assert earlier.linked is not None
        if (earlier.linked[0] == key and wanted <= set(earlier.linked[1])
                and replace(earlier, limit=search.limit, linked=search.linked,
                            with_vectors=search.with_vectors) == search
                and (earlier.with_vectors or not search.with_vectors)):
            return [node for node in results if wanted & _listed(node.node.metadata.get(key))
                    ][:search.limit]
    return None


def _listed(value: object) -> set[str]:
    """A payload value as the engine's IN condition reads it: a list's items, else itself."""
    items = value if isinstance(value, (list, tuple)) else [value]
    return {str(item) for item in items if item is not None}


def linked_memories(
    key: str, ids: tuple[str, ...], filters: Optional[MetadataFilters] = None
) -> Generator[MemorySearch, Sequence[NodeWithScore], list[NodeWithScore]]:
    """Every memory whose list under ``key`` names one of ``ids``, inside ``filters``: one
    filtered search, widened until it comes back short, so none is cut off."""
    limit = max(FIRST_LIMIT, 4 * len(ids))
    while True:
        found = list((yield MemorySearch(limit=limit, filters=filters, linked=(key, ids))))
        if len(found) < limit:
            return found
        limit *= 4


def exact_recency_search(
    policy: RecencyPolicy,
    reference: datetime,
    filters: Optional[MetadataFilters] = None,
    first_limit: int = FIRST_LIMIT,
    lexical: Optional[LexicalQuery] = None,
) -> SearchPlan:
    """The searches that prove the top ``policy.top_n``; returns the policy's ranking of the window.

    The ranking's rows are the seen memories with relevance >= threshold - weight (the
    only ones that can pass), ranked by :meth:`RecencyPolicy.rank` itself; its nodes are
    exactly what the policy would keep over the whole store. With ``lexical`` the results
    it receives carry cosine plus ``policy.lexical_weight`` times their share
    (:func:`~llama_index_recency.ranking.lexical.fused`).

    Raises:
        MemoryDateError: With ``on_missing_date='raise'``, a memory without a usable date
            could pass; raised by the first step, when the plan is run.
    """
    floor = candidate_floor(policy)
    bounds = _Bounds(policy, lexical)
    # The lowest cosine that can still be kept (its words may add lexical_weight): an engine
    # leaves out what is under it, and a search that comes back short bounds the rest by it.
    cut = (floor - bounds.weight - SCORE_SLACK if policy.relevance == "cosine"
           and floor > -math.inf else None)
    if policy.on_missing_date == "raise":
        # A memory without a date anywhere in the window would make the policy raise.
        undated = yield MemorySearch(limit=1, filters=filters, undated_only=True)
        window_undated = [c for c in undated if (c.score or 0.0) >= floor]
        policy.rank(window_undated, reference)  # raises MemoryDateError naming it
    seen: dict[str, NodeWithScore] = {}
    passing: list[float] = []  # finals >= threshold among the seen (the proof needs only these)
    limit = first_limit
    while True:
        # kth[set]: the limit-th cosine of the set, or -inf when the set came back short,
        # i.e. every member of it has been seen.
        kth: dict[SetKey, float] = {}
        while True:
            target = bounds.next_set(kth, _goal(policy, passing))
            if target is None:
                break  # no search at this limit can lower the bound enough: widen
            if isinstance(target, str):
                search = MemorySearch(limit=limit, filters=filters, term=target, min_score=cut)
            else:
                since = None if target == 0 else _tier_start(reference, bounds.ages[target - 1])
                search = MemorySearch(limit=limit, filters=filters, since=since, min_score=cut)
            results = yield search
            for candidate in results:
                if candidate.node.node_id not in seen:
                    seen[candidate.node.node_id] = candidate
                    bounds.saw(candidate)
                    final = policy.final_score(candidate.score or 0.0,
                                               candidate.node.metadata.get(policy.date_key),
                                               reference)
                    if final is not None and final >= policy.threshold:
                        passing.append(final)
            if len(results) >= limit:
                kth[target] = bounds.cosine(results[-1])
            else:  # every member seen, or every one unseen under the cut
                kth[target] = -math.inf if cut is None else cut
            if bounds.unseen(kth) < _goal(policy, passing):
                return _rank_window(policy, reference, seen.values(), floor)
        limit *= 4


class _Bounds:
    """The highest final score a memory no search returned can have, per age bracket and
    set of question terms held, and the search that lowers the highest one."""

    def __init__(self, policy: RecencyPolicy, lexical: Optional[LexicalQuery]) -> None:
        self.policy = policy
        self.ages = [policy.tau_days * math.log(1 / share) for share in TIER_BONUS_FRACTIONS]
        self.lexical = lexical if lexical is not None and policy.lexical_weight > 0 else None
        self.weight = policy.lexical_weight if self.lexical is not None else 0.0
        self.terms = sorted(self.lexical.held) if self.lexical is not None else []
        # Holders of each term not seen yet: at 0 the term's set is complete, unsearched.
        self.unseen_holders = {t: self.lexical.holding.get(t, 0) for t in self.terms
                               } if self.lexical is not None else {}

    def saw(self, result: NodeWithScore) -> None:
        """Count a memory seen for the first time among its terms' holders."""
        if self.unseen_holders:
            for term in terms(result.node.get_content()) & self.unseen_holders.keys():
                self.unseen_holders[term] -= 1

    def _term_kth(self, kth: dict[SetKey, float], term: str) -> float:
        """The limit-th cosine of a term's set: -inf once every holder is seen, +inf while
        it is not searched."""
        if self.unseen_holders.get(term, 1) <= 0:
            return -math.inf
        return kth.get(term, math.inf)

    def cosine(self, result: NodeWithScore) -> float:
        """A result's cosine (its relevance less its lexical part)."""
        score = result.score or 0.0
        if self.lexical is None:
            return score
        return score - self.weight * self.lexical.share_of(result.node)

    def terms_bounds(self, kth: dict[SetKey, float]) -> list[tuple[float, int, tuple[str, ...]]]:
        """(bound, bracket, terms held) for every bracket and every set of terms worth
        checking: those whose searches' limit-th cosines are the highest (unsearched first)."""
        weights = self.lexical.weights if self.lexical is not None else {}
        # Unsearched terms first, the heaviest first: the search the bound asks for next.
        order = sorted(self.terms, key=lambda t: (-self._term_kth(kth, t), -weights.get(t, 0.0)))
        shares = [0.0] * (len(order) + 1)  # shares[m]: the share of the first m terms
        if self.lexical is not None:
            shares = [self.lexical.share(order[:m]) for m in range(len(order) + 1)]
        bounds: list[tuple[float, int, tuple[str, ...]]] = []
        for bracket, (cosine, bonus) in enumerate(self._brackets(kth)):
            bounds.append((cosine + bonus, bracket, ()))
            for m, term in enumerate(order, start=1):
                cap = min(cosine, self._term_kth(kth, term))
                bounds.append((cap + bonus + self.weight * shares[m], bracket,
                               tuple(order[:m])))
        return bounds

    def unseen(self, kth: dict[SetKey, float]) -> float:
        return max(bound for bound, _, _ in self.terms_bounds(kth)) + SCORE_SLACK

    def next_set(self, kth: dict[SetKey, float], goal: float) -> Optional[SetKey]:
        """Every memory first; then, for the highest bound still reaching ``goal``, a term
        it holds whose set is not searched yet, else its bracket's tier. None: no search at
        this limit can help, only a larger limit."""
        if 0 not in kth:
            return 0
        reaching = [b for b in self.terms_bounds(kth) if b[0] + SCORE_SLACK >= goal]
        for _, bracket, held in sorted(reaching, key=lambda b: -b[0]):
            unsearched = [term for term in held if self._term_kth(kth, term) == math.inf]
            if unsearched:
                return unsearched[0]
            tier = bracket + 1  # the youngest tier covering the bracket (the oldest has none)
            if tier <= len(self.ages) and tier not in kth:
                return tier
        return None

    def _brackets(self, kth: dict[SetKey, float]) -> list[tuple[float, float]]:
        """Per age bracket, the highest cosine and bonus an unseen memory in it could have.

        Bracket b (0-based) holds ages in (A_(b-1), A_b], the last one every older or undated
        memory. Its cosine is at most the limit-th cosine of every searched set that covers
        it (every memory, and tiers b+1 and up); its bonus at most the bonus at A_(b-1).
        """
        brackets = []
        for bracket in range(len(self.ages) + 1):
            covering = [kth[0]] + [
                kth[tier] for tier in range(bracket + 1, len(self.ages) + 1) if tier in kth
            ]
            youngest = 0.0 if bracket == 0 else self.ages[bracket - 1]
            brackets.append((min(covering), self.policy.bonus(youngest)))
        return brackets


def candidate_floor(policy: RecencyPolicy) -> float:
    """The lowest relevance a memory can have and still reach the threshold with a full bonus."""
    return policy.threshold - policy.weight - SCORE_SLACK


def _tier_start(reference: datetime, age_days: float) -> datetime:
    """The earliest date in a tier (a little earlier, see _TIER_SLACK); a tier reaching past
    year 1 (a huge tau) holds every dated memory."""
    try:
        return reference - timedelta(days=age_days) - _TIER_SLACK
    except OverflowError:
        return datetime.fromisoformat(EARLIEST_DATE)


def _goal(policy: RecencyPolicy, passing: list[float]) -> float:
    """What every unseen memory's bound must fall under for the answer to be proven: the
    threshold while fewer than n pass, else the n-th best final score."""
    top = heapq.nlargest(policy.top_n, passing)
    return top[-1] if len(top) == policy.top_n else policy.threshold


def _rank_window(
    policy: RecencyPolicy,
    reference: datetime,
    seen: Iterable[NodeWithScore],
    floor: float,
) -> RecencyRanking:
    """Rank the seen memories that can pass (raw >= threshold - weight), best raw first.

    Ties (equal raw cosine) go by node id, so the answer never depends on which search
    happened to see a memory first."""
    window = sorted(
        (c for c in seen if (c.score or 0.0) >= floor),
        key=lambda c: (-(c.score or 0.0), c.node.node_id),
    )
    return policy.rank(window, reference)

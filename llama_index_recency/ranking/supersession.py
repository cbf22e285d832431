"""Newer versions first, without links: a newer memory that nearly repeats an older one goes first.

When a fact changes ("drinks coffee black" in June, "switched to café au lait" in
September) both versions answer the question about equally well, and cosine often prefers
the older wording. Among the question's top candidates by relevance, a newer memory B is
taken as a version of an older memory A when B is A's most similar candidate and A is
among B's two most similar (a chain of versions stays linked), once what all candidates
share is taken out (their mean vector), and their similarity stands
``supersede_z`` sd above the mean of the candidates' pairs (relative to the candidates,
so the same rule holds in languages whose sentences all sit close together). Both must
state one thing (one sentence, as the writer stores a fact): a turn of conversation says
several, and a newer turn on the same topic continues it rather than replacing it. If B's final
score is within ``supersede_margin`` of A's, B is placed right before A; A is never
dropped by this step, only moved below B (it may then fall past ``top_n``). Like a linked
successor, B enters the prompt with a passing A even when B's own score is under the
threshold. Questions about the past or an event skip the step
(``RecencyPolicy.for_intent``). Written links win: a memory with a written successor, or
one that names what it supersedes, is paired by its links only.

:func:`newer_versions_first` is the I/O-free rule; :func:`with_newer_versions` is the step
of a search plan that fetches the candidates' vectors through the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from functools import lru_cache
from typing import Optional

import numpy as np
from llama_index.core.schema import NodeWithScore
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_recency.ranking.plan import (
    MemorySearch,
    MemorySentences,
    SearchPlan,
    candidate_floor,
    linked_memories,
)
from llama_index_recency.ranking.policy import RecencyPolicy, age_in_days
from llama_index_recency.ranking.ranked import RankedMemory, RecencyRanking
from llama_index_recency.ranking.sentences import (
    QuestionSentences,
    mutual_nearest,
    sentence_versions,
)
from llama_index_recency.records.dates import parse_memory_date
from llama_index_recency.records.nodes import SUPERSEDED_BY_KEY, SUPERSEDES_KEY, USER_ID_KEY
from llama_index_recency.records.text import is_one_statement


def with_newer_versions(
    ranking: RecencyRanking,
    policy: RecencyPolicy,
    reference: datetime,
    filters: Optional[MetadataFilters] = None,
    lexical_part: Optional[Callable[[str], float]] = None,
    question: Optional[tuple[str, Sequence[float]]] = None,
) -> SearchPlan:
    """A plan step: the question's top ``supersede_window`` candidates with their vectors (and
    the ranking's other rows), the sentence vectors of those of several sentences (with
    ``question``: its text and vector) and the memories whose ``supersedes`` names one of
    them, then :func:`newer_versions_first` over them."""
    if policy.supersede_margin is None or all(row.age_days is None for row in ranking.rows):
        return ranking
    window = list((yield MemorySearch(limit=policy.supersede_window, filters=filters,
                                      with_vectors=True)))
    have = {candidate.node.node_id for candidate in window}
    missing = tuple(row.node_id for row in ranking.rows if row.node_id not in have)
    if missing:
        window += (yield MemorySearch(limit=len(missing), filters=filters, ids=missing,
                                      with_vectors=True))
    named = tuple(sorted(candidate.node.node_id for candidate in window))
    successors = yield from linked_memories(SUPERSEDES_KEY, named, filters)
    asked = None
    request = MemorySentences.of(c.node for c in window)
    if question is not None and request is not None:
        asked = QuestionSentences(question[0], question[1], (yield request))
    return newer_versions_first(ranking, window, policy, reference, successors, lexical_part,
                                asked)


def newer_versions_first(
    ranking: RecencyRanking,
    candidates: Sequence[NodeWithScore],
    policy: RecencyPolicy,
    reference: datetime,
    successors: Sequence[NodeWithScore] = (),
    lexical_part: Optional[Callable[[str], float]] = None,
    sentences: Optional[QuestionSentences] = None,
) -> RecencyRanking:
    """``ranking`` with each newer version placed right before the older one it nearly repeats.

    ``candidates`` are scored (relevance) nodes carrying their embeddings: the question's
    top candidates, including every row of ``ranking``. ``successors``: memories whose
    ``supersedes`` names a candidate (a candidate with a written successor is paired by
    that link only). Candidates that could pass and are not rows yet become rows. Without
    ``supersede_margin``, fewer than three vectors or no spread among them, ``ranking`` is
    returned as it is. ``lexical_part`` gives a candidate's lexical part by id (the rows
    carry theirs), which the margin leaves out. With ``sentences`` (the question and the
    sentence vectors of candidates of several sentences), those are paired by their
    sentences too (:mod:`~llama_index_recency.ranking.sentences`).
    """
    margin = policy.supersede_margin
    if margin is None:
        return ranking
    nodes = {c.node.node_id: c for c in candidates if c.node.embedding}
    if any(row.node_id not in nodes for row in ranking.rows):
        return ranking
    # The top supersede_window by relevance, as the exact retriever fetches them: the pairs
    # depend on the window's statistics, so both paths must compare the same candidates.
    # (by cosine: the retriever's window search leaves the words' part out)
    words = lexical_part or (lambda _: 0.0)
    window = sorted(nodes.values(), key=lambda c: (-((c.score or 0.0) - words(c.node.node_id)),
                                                   c.node.node_id))
    window = window[:policy.supersede_window]
    by_vectors = _between_statements(window, policy.supersede_z)
    if sentences is not None:
        several = {c.node.node_id for c in window if not is_one_statement(c.node.get_content())}
        ages = {c.node.node_id: _age(c.node.metadata.get(policy.date_key), reference)
                for c in window}
        by_vectors = {**sentence_versions(window, several, sentences, ages, policy.supersede_z),
                      **by_vectors}
    nearest = _with_links(by_vectors, window, successors)
    if not nearest:
        return ranking
    partners = {nearest[row.node_id] for row in ranking.rows if row.node_id in nearest}
    rows = _rows_with_window(ranking, window, partners, policy, reference, lexical_part)
    order, moves = _reordered(rows, nearest, margin)
    if not moves:
        return ranking
    # Like a linked successor, a newer version of a memory that passes enters with it.
    final = {row.node_id: row.final for row in rows}
    admitted = {newer for newer, older in moves if final[older] >= policy.threshold}
    selected = policy.select([(nodes[row.node_id], row) for row in order], admitted=admitted)
    return replace(ranking, rows=selected.rows, nodes=selected.nodes)


def _age(value: object, reference: datetime) -> Optional[float]:
    """A memory's age in days from its stored date; None without a readable one."""
    try:
        return age_in_days(parse_memory_date(value), reference)
    except ValueError:
        return None


def _versions(window: Sequence[NodeWithScore], z: float) -> dict[str, str]:
    """Each candidate's most similar other candidate (vectors centred on the window's mean),
    when the candidate is among that one's two most similar in turn and their similarity
    stands ``z`` sd above the mean of the window's pairs; empty when the window cannot say."""
    if len(window) < 3:
        return {}
    matrix = np.array([c.node.embedding for c in window], dtype=np.float64)
    # What every candidate shares (the question's topic, "The user …", a date) is taken out,
    # so what is left compares what each memory says.
    matrix -= matrix.mean(axis=0)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    if not np.all(norms > 0):
        return {}
    matrix /= norms
    similarity = matrix @ matrix.T
    pairs = similarity[_upper_triangle(len(window))]
    spread = float(pairs.std())
    if spread <= 0.0:
        return {}
    cut = float(pairs.mean()) + z * spread
    np.fill_diagonal(similarity, -np.inf)
    ids = [c.node.node_id for c in window]
    return {ids[a]: ids[b] for a, b in mutual_nearest(similarity, cut)}


@lru_cache(maxsize=64)
def _upper_triangle(size: int) -> tuple[np.ndarray, np.ndarray]:
    """The indices of a ``size``-square matrix's pairs above the diagonal."""
    return np.triu_indices(size, 1)


def _between_statements(window: Sequence[NodeWithScore], z: float) -> dict[str, str]:
    """The pairs of :func:`_versions` whose two memories each state one thing (found among all
    of the window's candidates, so the vectors' statistics stay the window's); none compared
    when fewer than two do, as in a store of conversation turns or document chunks."""
    statements = {c.node.node_id for c in window if is_one_statement(c.node.get_content())}
    if len(statements) < 2:
        return {}
    return {memory: other for memory, other in _versions(window, z).items()
            if memory in statements and other in statements}


def _with_links(nearest: dict[str, str], window: Sequence[NodeWithScore],
                successors: Sequence[NodeWithScore]) -> dict[str, str]:
    """Written links win: a memory that a candidate or a successor ``supersedes`` (or that
    names a candidate in ``superseded_by``, the back link older stores carry) takes that one
    as its version, whatever the vectors say, and a memory naming what it supersedes is no
    other's version by them; nor is one user's memory ever another user's version (as a
    written link may not be)."""
    ids = {candidate.node.node_id for candidate in window}
    linked: dict[str, str] = {}
    writers: set[str] = set()
    for candidate in [*window, *successors]:
        for older in candidate.node.metadata.get(SUPERSEDES_KEY) or []:
            linked.setdefault(str(older), candidate.node.node_id)
            writers.add(candidate.node.node_id)
    superseded: set[str] = set()  # older stores' back links, to a successor here or not
    for candidate in window:
        for newer in candidate.node.metadata.get(SUPERSEDED_BY_KEY) or []:
            superseded.add(candidate.node.node_id)
            if newer in ids:
                linked.setdefault(candidate.node.node_id, str(newer))
    user = {c.node.node_id: c.node.metadata.get(USER_ID_KEY) for c in window}
    by_vectors = {older: newer for older, newer in nearest.items()
                  if older not in linked and older not in superseded and newer not in writers
                  and user[older] == user[newer]}
    return {**by_vectors, **linked}


def _rows_with_window(
    ranking: RecencyRanking, window: Iterable[NodeWithScore], partners: set[str],
    policy: RecencyPolicy, reference: datetime,
    lexical_part: Optional[Callable[[str], float]] = None,
) -> list[RankedMemory]:
    """The ranking's rows plus the window candidates that could pass or are a row's version
    partner, by final score (ties by relevance order, as :meth:`RecencyPolicy.rank` breaks them)."""
    have = {row.node_id for row in ranking.rows}
    floor = candidate_floor(policy)
    extra = [c for c in window if c.node.node_id not in have
             and ((c.score or 0.0) >= floor or c.node.node_id in partners)]
    if not extra:
        return list(ranking.rows)
    added = policy.rank(extra, reference).rows
    if lexical_part is not None:
        added = tuple(replace(row, lexical=lexical_part(row.node_id)) for row in added)
    merged = list(ranking.rows) + list(added)
    return sorted(merged, key=lambda row: -row.final)


def _reordered(
    rows: Sequence[RankedMemory], nearest: dict[str, str], margin: float
) -> tuple[list[RankedMemory], list[tuple[str, str]]]:
    """Move each newer version right before the older row whose nearest candidate it is,
    when its final score is within ``margin``; the notes say who moved below whom.
    Returns the order and the moves as (newer id, older id)."""
    order = list(rows)
    position = 0
    moves: list[tuple[str, str]] = []
    while position < len(order) and len(moves) <= len(order) ** 2:
        older = order[position]
        newer_id = nearest.get(older.node_id)
        later = next((i for i in range(position + 1, len(order))
                      if order[i].node_id == newer_id), None)
        # The margin is read without the words' part: a newer version reworded ("café au
        # lait" for "coffee") shares fewer of the question's words than the old one.
        if later is not None and _is_newer(order[later], older) \
                and order[later].final - order[later].lexical >= \
                older.final - older.lexical - margin:
            newer = order.pop(later)
            order[position:position] = [newer.noted(f"newer version of {older.node_id}")]
            order[position + 1] = older.noted(f"older version, below {newer.node_id}")
            moves.append((newer.node_id, older.node_id))
            continue  # the newer one may have a newer version of its own further down
        position += 1
    return order, moves


def _is_newer(candidate: RankedMemory, other: RankedMemory) -> bool:
    return (candidate.age_days is not None and other.age_days is not None
            and candidate.age_days < other.age_days)

"""The lexical relevance signal: which words of a question a memory holds, weighed by rarity.

A memory's terms are what a question can repeat: English words less stopwords, with plurals
and possessives folded ("cats" and "cat's" are "cat"), numbers, and the character bigrams of
Japanese and Chinese runs. The store keeps each memory's terms (a keyword payload field), so
the engine counts how many memories hold a term and finds the memories that hold one.

:meth:`LexicalQuery.share` is the share of the question's term weight (inverse document
frequency, as BM25 weighs it) that a memory holds: 0 when it shares nothing, 1 when it holds
every term, and 0 for a memory holding one term that carries less than half of it (one word
in common, an everyday one in a small store, is no evidence). The policy adds
``lexical_weight`` times it to the cosine.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Optional, TypeVar

from llama_index.core.schema import BaseNode, NodeWithScore

from llama_index_recency.ranking.intent import without_time_phrases
from llama_index_recency.ranking.ranked import RecencyRanking

T = TypeVar("T")

TERMS_KEY = "recency_terms"
"""Payload key of a memory's terms (a list of strings, indexed as keywords)."""

MAX_QUESTION_TERMS = 16
"""Most terms read from a question (the rarest kept): each one is a count and a search."""

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3005\u30fc"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_]+(?:'[^\W_]+)?")
_CJK_RUN = re.compile(rf"[{_CJK}]+")
_HIRAGANA = re.compile("[\u3040-\u309f]+")
_DATE_PREFIX = re.compile(r"^\s*\d{4}-\d{2}-\d{2}:\s*")

STOPWORDS = frozenset("""
a about above after again against all am an and any are aren't as at be because been before
being below between both but by can can't cannot could couldn't did didn't do does doesn't
doing don't down during each few for from further get got had hadn't has hasn't have haven't
having he he'd he'll he's her here here's hers herself him himself his how how's i i'd i'll
i'm i've if in into is isn't it it's its itself just let's like me more most mustn't my
myself no nor not of off on once only or other ought our ours ourselves out over own really
same shan't she she'd she'll she's should shouldn't so some such than that that's the their
theirs them themselves then there there's these they they'd they'll they're they've this
those through to too under until up very was wasn't we we'd we'll we're we've were weren't
what what's when when's where where's which while who who's whom why why's will with won't
would wouldn't you you'd you'll you're you've your yours yourself yourselves yeah oh ok okay
hey hi um uh also still lately now then again ever even much many well
""".split())
"""English function words and fillers: they say nothing about which memory is meant."""


def _fold(word: str) -> str:
    """A word without its possessive or plural ending: "cats" and "cat's" are "cat"."""
    if word.endswith("'s"):
        word = word[:-2]
    word = word.replace("'", "")
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("sses", "shes", "ches", "xes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


@lru_cache(maxsize=8192)
def terms(text: str) -> frozenset[str]:
    """The terms of ``text`` (a leading ``YYYY-MM-DD:`` date is not one); the texts a store's
    questions meet again are tokenized once."""
    text = unicodedata.normalize("NFKC", _DATE_PREFIX.sub("", text)).lower()
    found: set[str] = set()
    for token in _TOKEN.findall(text):
        if _CJK_RUN.fullmatch(token):
            found.update(gram for i in range(max(1, len(token) - 1))
                         if not _HIRAGANA.fullmatch(gram := token[i:i + 2]))
        elif token not in STOPWORDS:
            word = _fold(token)
            if word and word not in STOPWORDS:
                found.add(word)
    return frozenset(found)


NO_TERMS = [""]
"""What a memory without a term holds under :data:`TERMS_KEY` (so it is not filled in again)."""


def stored_terms(text: str) -> list[str]:
    """The payload value of a memory's terms."""
    return sorted(terms(text)) or NO_TERMS


MIN_HELD_TERMS = 2
"""A memory's share counts once it holds this many of the question's terms..."""
LONE_TERM_SHARE = 0.5
"""...or a share this large in fewer (chosen on the tune split of ``benchmarks/lexical.py``)."""


def idf(memories: int, holding: int) -> float:
    """A term's weight: BM25's inverse document frequency (always above 0)."""
    return math.log(1.0 + (memories - holding + 0.5) / (holding + 0.5))


@dataclass(frozen=True)
class LexicalQuery:
    """A question's terms weighed in one store (or one user's part of it): ``weights`` by
    term, ``held`` the terms some memory holds (the others can only lower every share)."""

    weights: Mapping[str, float]
    held: frozenset[str] = frozenset()
    holding: Mapping[str, int] = field(default_factory=dict)
    """How many memories hold each term."""
    _shares: dict[str, float] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_counts(cls, memories: int, holding: Mapping[str, int]) -> LexicalQuery:
        """The question's terms weighed by how many of ``memories`` hold each one."""
        return cls({term: idf(memories, count) for term, count in holding.items()},
                   frozenset(term for term, count in holding.items() if count > 0),
                   dict(holding))

    def share(self, memory_terms: Iterable[str]) -> float:
        """The share of the question's term weight that a memory with ``memory_terms`` holds,
        counted from :data:`MIN_HELD_TERMS` terms or a :data:`LONE_TERM_SHARE` (never more
        for fewer terms held: the engine's bounds rely on it). Only terms the store's counts
        say some memory holds count: in a store without stored terms (another program's),
        none does, and every memory scores on relevance alone."""
        total = sum(self.weights.values())
        if total <= 0.0:
            return 0.0
        holds = self.held.intersection(memory_terms)
        held = [weight for term, weight in self.weights.items() if term in holds]
        share = sum(held) / total
        return share if len(held) >= MIN_HELD_TERMS or share >= LONE_TERM_SHARE else 0.0

    def part(self, node_id: str, weight: float) -> float:
        """``weight`` times the share of a memory a search returned (0 for any other)."""
        return weight * self._shares.get(node_id, 0.0)

    def share_of(self, node: BaseNode) -> float:
        """:meth:`share` for a memory's text (computed once per memory and question)."""
        if node.node_id not in self._shares:
            self._shares[node.node_id] = self.share(terms(node.get_content()))
        return self._shares[node.node_id]


def with_lexical_parts(ranking: RecencyRanking, lexical: Optional[LexicalQuery],
                       weight: float) -> RecencyRanking:
    """``ranking`` with each row's lexical part recorded (what ``explain()`` shows)."""
    if lexical is None or weight == 0.0:
        return ranking
    parts = [lexical.part(row.node_id, weight) for row in ranking.rows]
    return replace(ranking, rows=tuple(
        row if part == row.lexical else replace(row, lexical=part)
        for row, part in zip(ranking.rows, parts, strict=True)))


def fused(plan: Generator[Any, Any, T], lexical: Optional[LexicalQuery],
          weight: float) -> Generator[Any, Any, T]:
    """``plan`` receiving every search's results with ``weight`` times their share added
    to their cosine (the same order: each search's limit-th cosine is recovered with
    :meth:`LexicalQuery.share_of`), other replies as they are; ``plan`` itself without a
    question's terms or weight."""
    if lexical is None or weight == 0.0:
        return (yield from plan)
    try:
        search = next(plan)
        while True:
            results = yield search
            if isinstance(results, dict):  # sentence matrices, not a search's results
                search = plan.send(results)
                continue
            search = plan.send([
                NodeWithScore(node=r.node, score=(r.score or 0.0) + weight * lexical.share_of(r.node))
                for r in results])
    except StopIteration as done:
        return done.value


def question_terms(question: str) -> tuple[str, ...]:
    """The terms a question is searched by: its terms, at most :data:`MAX_QUESTION_TERMS`
    (the longest first, a stand-in for the rarest before the store is asked), less the
    phrases that say which time it asks about ("these days" is no "day": it says when, and
    the intent's bonus reads it)."""
    found = sorted(terms(without_time_phrases(question)), key=lambda t: (-len(t), t))
    return tuple(sorted(found[:MAX_QUESTION_TERMS]))

"""The lexical signal: a memory's terms, their weights, and the exact search with them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core.schema import NodeWithScore, TextNode

from llama_index_recency import RecencyPolicy
from llama_index_recency.ranking.lexical import (
    LexicalQuery,
    fused,
    idf,
    question_terms,
    stored_terms,
    terms,
)
from llama_index_recency.ranking.plan import MemorySearch, exact_recency_search

from conftest import drive_plan

REFERENCE = datetime(2026, 9, 10, tzinfo=timezone.utc)
WORDS = ("coffee", "walks", "keyboard", "osaka", "sister", "guitar", "ramen", "hiking")


def test_plurals_and_possessives_fold_and_function_words_drop() -> None:
    assert terms("2026-09-01: My sister's cats love the new keyboards.") == {
        "sister", "cat", "love", "new", "keyboard"}


def test_the_date_prefix_is_not_a_term_but_other_numbers_are() -> None:
    assert terms("2026-09-01: I ran 10 km.") == {"ran", "10", "km"}


def test_japanese_runs_give_bigrams_without_pure_hiragana_ones() -> None:
    held = terms("最近は甘いカフェオレ")
    assert {"最近", "甘い", "カフ", "フェ", "ェオ", "オレ"} <= held
    assert "近は" in held  # kanji + hiragana is kept
    assert not any(all("\u3040" <= c <= "\u309f" for c in gram) for gram in held)


def test_a_memory_without_terms_stores_a_marker_no_question_asks() -> None:
    assert stored_terms("... !!") == [""]
    assert "" not in question_terms("... !!")


def test_the_weight_of_a_term_is_bm25s_idf() -> None:
    assert idf(100, 0) == math.log(1 + 100.5 / 0.5)
    assert idf(100, 100) == math.log(1 + 0.5 / 100.5)


def test_the_share_is_the_held_part_of_the_questions_term_weight() -> None:
    query = LexicalQuery.from_counts(100, {"coffee": 1, "walk": 50, "osaka": 0})
    total = idf(100, 1) + idf(100, 50) + idf(100, 0)
    assert query.share({"coffee", "walk", "tea"}) == (idf(100, 1) + idf(100, 50)) / total
    # No memory holds "osaka" (the counts say so): it weighs in the total, never in a share.
    assert query.held == {"coffee", "walk"}
    assert query.share({"coffee", "walk", "osaka"}) == query.share({"coffee", "walk"})
    assert query.share({"osaka"}) == 0.0 < 0.5 <= idf(100, 0) / total
    # One term in common counts only when it carries half of the question's weight.
    assert query.share({"coffee", "tea"}) == 0.0 < idf(100, 1) / total < 0.5
    heavy = LexicalQuery.from_counts(100, {"coffee": 1, "walk": 50})
    assert heavy.share({"coffee"}) == idf(100, 1) / (idf(100, 1) + idf(100, 50)) >= 0.5


def memory(i: int, raw: float, age_days: float, words: Sequence[str]) -> NodeWithScore:
    date = (REFERENCE - timedelta(days=age_days)).isoformat()
    node = TextNode(id_=f"m{i:04d}", text=" ".join(words), metadata={"date": date})
    return NodeWithScore(node=node, score=raw)


def reference_engine(memories: Sequence[NodeWithScore], search: MemorySearch) -> list[NodeWithScore]:
    """The top ``limit`` by cosine among the memories the search selects (as every engine)."""
    def selected(m: NodeWithScore) -> bool:
        if search.term is not None and search.term not in terms(m.node.get_content()):
            return False
        return search.since is None or datetime.fromisoformat(m.node.metadata["date"]) >= search.since
    chosen = [m for m in filter(selected, memories)
              if search.min_score is None or (m.score or 0.0) >= search.min_score]
    return sorted(chosen, key=lambda m: -(m.score or 0.0))[: search.limit]


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.tuples(st.floats(0.70, 0.90), st.floats(0, 400),
                            st.lists(st.sampled_from(WORDS), max_size=4)),
                  min_size=1, max_size=80),
    asked=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
    lexical_weight=st.sampled_from([0.05, 0.1, 0.3]),
    threshold=st.floats(0.7, 0.95),
)
def test_the_search_with_terms_keeps_exactly_what_ranking_every_memory_keeps(
    rows, asked, lexical_weight, threshold
) -> None:
    memories = [memory(i, raw, age, words) for i, (raw, age, words) in enumerate(rows)]
    policy = RecencyPolicy(weight=0.05, tau_days=14, threshold=threshold,
                           lexical_weight=lexical_weight)
    held = [terms(m.node.get_content()) for m in memories]
    query = LexicalQuery.from_counts(len(memories), {
        t: sum(t in h for h in held) for t in question_terms(" ".join(asked))})
    plan = fused(exact_recency_search(policy, REFERENCE, first_limit=2, lexical=query),
                 query, lexical_weight)
    ranking, _ = drive_plan(plan, lambda search: reference_engine(memories, search))
    everything = [NodeWithScore(node=m.node, score=(m.score or 0.0) + lexical_weight
                                * query.share(h)) for m, h in zip(memories, held, strict=True)]
    expected = policy.rank(sorted(everything, key=lambda c: (-(c.score or 0.0), c.node.node_id)),
                           REFERENCE)
    assert [n.node.node_id for n in ranking.nodes] == [n.node.node_id for n in expected.nodes]


def test_a_word_the_stores_counts_say_no_memory_holds_adds_nothing() -> None:
    """A memory's text may hold a word its stored terms lack (a store without them): the
    count is what the engine searches by, so the share follows it."""
    counted = LexicalQuery.from_counts(10, {"coffee": 0, "black": 2, "milk": 3})
    assert counted.share(["coffee", "black", "milk"]) == counted.share(["black", "milk"]) > 0.0
    assert LexicalQuery.from_counts(10, {"coffee": 0, "take": 0}).share(["coffee", "take"]) == 0.0


@pytest.mark.parametrize("question, asked", [
    ("What do I drink these days?", ("drink",)),
    ("Where do I currently work?", ("work",)),
    ("What am I reading at the moment?", ("reading",)),
    ("What did I use to drink?", ("drink",)),
    ("How are you these days?", ()),
    ("最近何を飲んでる？", ("を飲", "何を", "飲ん")),
    # What a question asks about stays, time word or not (found by review: the intent's own
    # lists ate "back", "last summer", 午前, 駅前, 今井 and 現在地).
    ("What are the days of the week?", ("day", "week")),
    ("How is my back in the morning?", ("back", "morning")),
    ("What did I do last summer?", ("last", "summer")),
    ("午前は何をしてる？", ("は何", "何を", "前は", "午前")),
    ("今井さんの誕生日は？", ("の誕", "井さ", "今井", "日は", "生日", "誕生")),
    ("現在地はどこ？", ("在地", "地は", "現在")),
])
def test_the_phrases_that_say_when_are_no_terms_of_a_question(question: str,
                                                               asked: tuple[str, ...]) -> None:
    assert question_terms(question) == asked

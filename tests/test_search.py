"""The exact recency search plan, driven by a reference engine: it must equal ranking every memory."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core.schema import NodeWithScore, TextNode
from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters

from llama_index_recency import RecencyPolicy
from llama_index_recency.ranking.plan import (
    MemorySearch,
    exact_recency_search,
    linked_memories,
    reusing_link_searches,
)
from llama_index_recency.ranking.policy import MemoryDateError, parse_memory_date

from conftest import drive_plan

REFERENCE = datetime(2026, 9, 10, tzinfo=timezone.utc)


def memory(i: int, raw: float, age_days: float | None) -> NodeWithScore:
    date = None if age_days is None else (REFERENCE - timedelta(days=age_days)).isoformat()
    node = TextNode(id_=f"m{i:04d}", text=f"memory {i}", metadata={} if date is None else {"date": date})
    return NodeWithScore(node=node, score=raw)


def dated_since(candidate: NodeWithScore, since: datetime) -> bool:
    try:
        return parse_memory_date(candidate.node.metadata.get("date")) >= since
    except ValueError:
        return False


def reference_engine(memories: Sequence[NodeWithScore], search: MemorySearch) -> list[NodeWithScore]:
    """What any engine must answer: the top ``limit`` by raw cosine among the matching memories."""
    assert search.filters is None
    matching = [
        m for m in memories
        if (search.since is None or dated_since(m, search.since))
        and (not search.undated_only or not dated_since(m, datetime.min.replace(tzinfo=timezone.utc)))
    ]
    matching = [m for m in matching if search.min_score is None or (m.score or 0.0) >= search.min_score]
    return sorted(matching, key=lambda m: -(m.score or 0.0))[: search.limit]


def run(policy: RecencyPolicy, memories: Sequence[NodeWithScore], first_limit: int = 16):
    return drive_plan(exact_recency_search(policy, REFERENCE, first_limit=first_limit),
                      lambda search: reference_engine(memories, search))


def everything(policy: RecencyPolicy, memories: Sequence[NodeWithScore]) -> list[tuple[str, float]]:
    ranked = policy.rank(sorted(memories, key=lambda m: (-(m.score or 0.0), m.node.node_id)),
                         REFERENCE)
    return [(n.node.node_id, n.score) for n in ranked.nodes]


@settings(max_examples=500, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.floats(0.0, 1.0),
            st.one_of(st.none(), st.floats(-30.0, 400.0)),
        ),
        min_size=0,
        max_size=60,
    ),
    weight=st.sampled_from([0.0, 0.01, 0.05, 0.2]),
    tau_days=st.sampled_from([3.0, 14.0, 60.0]),
    threshold=st.floats(0.0, 1.0),
    top_n=st.integers(1, 5),
    first_limit=st.integers(1, 6),
    on_missing_date=st.sampled_from(["no_bonus", "drop"]),
)
@pytest.mark.slow
def test_equals_ranking_every_memory(
    rows, weight, tau_days, threshold, top_n, first_limit, on_missing_date
) -> None:
    memories = [memory(i, raw, age) for i, (raw, age) in enumerate(rows)]
    policy = RecencyPolicy(weight=weight, tau_days=tau_days, threshold=threshold, top_n=top_n,
                           on_missing_date=on_missing_date)
    ranking, _ = run(policy, memories, first_limit)
    found = [(n.node.node_id, n.score) for n in ranking.nodes]
    expected = everything(policy, memories)
    assert [i for i, _ in found] == [i for i, _ in expected]
    assert [s for _, s in found] == pytest.approx([s for _, s in expected], abs=1e-12)


def test_fresh_memories_ranked_3000th_by_raw_cosine_are_found_in_a_few_small_searches() -> None:
    """A daily-habit log: thousands of near-identical old memories, three fresh ones that win."""
    crowd = [memory(i, 0.600 + i * 1e-6, 60 + i % 300) for i in range(3000)]
    # 0.58 + 0.05 * exp(-age / 14) > 0.62 > 0.603 + 0.05 * exp(-60 / 14)
    fresh = [memory(9000 + i, 0.580 - i * 1e-3, 1.0 + i) for i in range(3)]
    policy = RecencyPolicy(weight=0.05, tau_days=14, threshold=0.45, top_n=3)
    ranking, searches = run(policy, [*crowd, *fresh])
    assert [n.node.node_id for n in ranking.nodes] == ["m9000", "m9001", "m9002"]
    assert everything(policy, [*crowd, *fresh]) == [
        (n.node.node_id, n.score) for n in ranking.nodes
    ]
    assert len(searches) <= 3 and max(s.limit for s in searches) == 16


def test_near_ties_in_an_old_crowd_are_still_ranked_exactly() -> None:
    crowd = [memory(i, 0.600 + i * 1e-6, 60 + i % 300) for i in range(3000)]
    policy = RecencyPolicy(weight=0.05, tau_days=14, threshold=0.45, top_n=3)
    ranking, _ = run(policy, crowd)
    assert [(n.node.node_id, n.score) for n in ranking.nodes] == everything(policy, crowd)


def test_a_crowd_of_recent_memories_widens_the_searches_until_proven() -> None:
    crowd = [memory(i, 0.5 - i * 1e-6, (i % 50) / 10) for i in range(500)]  # near-ties
    policy = RecencyPolicy(weight=0.05, tau_days=14, threshold=0.45, top_n=3)
    ranking, searches = run(policy, crowd)
    assert [(n.node.node_id, pytest.approx(n.score)) for n in ranking.nodes] == everything(policy, crowd)
    assert max(s.limit for s in searches) > 16


def test_raise_checks_the_best_undated_memory_that_could_pass() -> None:
    policy = RecencyPolicy(threshold=0.45, on_missing_date="raise")
    harmless = [memory(0, 0.46, 3.0), memory(1, 0.39, None)]  # 0.39 < 0.45 - 0.05
    ranking, searches = run(policy, harmless)
    assert [n.node.node_id for n in ranking.nodes] == ["m0000"]
    assert searches[0] == MemorySearch(limit=1, undated_only=True)
    with pytest.raises(MemoryDateError, match="'m0001'"):
        run(policy, [memory(0, 0.46, 3.0), memory(1, 0.41, None)])


def test_no_memory_needs_one_search() -> None:
    ranking, searches = run(RecencyPolicy(), [])
    assert ranking.nodes == () and len(searches) == 1


@pytest.mark.parametrize("tau_days", [1e5, 1e6, 2e9])
def test_a_huge_tau_makes_tiers_of_every_dated_memory_instead_of_overflowing(tau_days) -> None:
    crowd = [memory(i, 0.5, (i % 40) / 10) for i in range(40)]  # equal raws: tiers are needed
    policy = RecencyPolicy(weight=0.05, tau_days=tau_days, threshold=0.45, top_n=3)
    ranking, _ = run(policy, crowd, first_limit=4)
    assert [(n.node.node_id, n.score) for n in ranking.nodes] == everything(policy, crowd)


def test_a_link_search_widens_until_it_comes_back_short() -> None:
    """Successors are never cut off: a full page asks again for four times as many."""
    def page(n: int) -> list[NodeWithScore]:
        return [NodeWithScore(node=TextNode(id_=f"m{i}", text="m"), score=0.5) for i in range(n)]

    plan = linked_memories("supersedes", ("a", "b"), None)
    first = next(plan)
    assert (first.limit, first.linked) == (16, ("supersedes", ("a", "b")))
    second = plan.send(page(16))
    assert second.limit == 64
    with pytest.raises(StopIteration) as done:
        plan.send(page(40))
    assert [n.node.node_id for n in done.value.value] == [f"m{i}" for i in range(40)]


# --- a link search asked twice in one plan goes to the engine once ----------------------------


def _linked(node_id: str, names: list[str]) -> NodeWithScore:
    return NodeWithScore(node=TextNode(id_=node_id, text=node_id,
                                       metadata={"supersedes": names}), score=0.5)


def _two_link_searches(second: MemorySearch):
    """A plan asking for the memories naming a, b or c, then ``second``; returns both answers."""
    first = yield MemorySearch(limit=16, linked=("supersedes", ("a", "b", "c")))
    again = yield second
    return [n.node.node_id for n in first], [n.node.node_id for n in again]


def _drive(plan, answers: dict) -> tuple[object, list[MemorySearch]]:
    return drive_plan(plan, lambda search: answers[search.linked[1] if search.linked
                                                   else search.ids])


def test_a_link_search_within_an_earlier_complete_one_is_answered_from_it() -> None:
    found = [_linked("x", ["a"]), _linked("y", ["b", "q"]), _linked("z", ["c"])]
    answers = {("a", "b", "c"): found, ("b",): [found[1]]}
    subset = MemorySearch(limit=16, linked=("supersedes", ("b",)))
    result, asked = _drive(reusing_link_searches(_two_link_searches(subset)), answers)
    assert result == (["x", "y", "z"], ["y"])
    assert len(asked) == 1  # the engine was asked once
    assert _drive(_two_link_searches(subset), answers)[0] == result  # as the engine answers


@pytest.mark.parametrize("second", [
    MemorySearch(limit=16, linked=("supersedes", ("d",))),  # an id the first did not cover
    MemorySearch(limit=16, linked=("superseded_by", ("b",))),  # another key
    MemorySearch(limit=16, linked=("supersedes", ("b",)), with_vectors=True),  # vectors wanted
    MemorySearch(limit=16, linked=("supersedes", ("b",)),  # another scope
                 filters=MetadataFilters(filters=[MetadataFilter(key="user_id", value="u")])),
    MemorySearch(limit=16, ids=("b",)),  # not a link search
    MemorySearch(limit=16, linked=("supersedes", ("b",)), ids=("y",)),  # narrowed by id
    MemorySearch(limit=16, linked=("supersedes", ("b",)),  # narrowed by date
                 since=datetime(2026, 9, 1, tzinfo=timezone.utc)),
    MemorySearch(limit=16, linked=("supersedes", ("b",)), undated_only=True),
], ids=["other id", "other key", "vectors", "other scope", "by id", "and ids", "since",
        "undated"])
def test_other_searches_go_to_the_engine(second: MemorySearch) -> None:
    answers = {("a", "b", "c"): [], ("d",): [], ("b",): [], ("y",): []}
    _, asked = _drive(reusing_link_searches(_two_link_searches(second)), answers)
    assert asked == [MemorySearch(limit=16, linked=("supersedes", ("a", "b", "c"))), second]


def test_a_link_search_that_came_back_full_answers_nothing_later() -> None:
    full = [_linked(f"n{i}", ["a"]) for i in range(16)]  # as many as asked: maybe cut off
    answers = {("a", "b", "c"): full, ("a",): full}
    subset = MemorySearch(limit=16, linked=("supersedes", ("a",)))
    _, asked = _drive(reusing_link_searches(_two_link_searches(subset)), answers)
    assert len(asked) == 2

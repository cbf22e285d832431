"""Every ranking reaches an app's LlamaIndex instrumentation as one MemoryRankingEvent."""

from __future__ import annotations

import pytest

from llama_index_recency import (
    QdrantRecencyRetriever,
    RecencyPolicy,
    memory_node,
    open_memory_index,
)

from conftest import QUERY, KnownCosineEmbedding

BLACK = ("Taro drinks his coffee black.", "2026-08-20")
CAFE = ("Taro has been drinking sweet café au lait lately.", "2026-09-01")
POLICY = RecencyPolicy(threshold=0.45, reference_date="2026-09-10")


@pytest.fixture
def retriever() -> QdrantRecencyRetriever:
    cosines = {memory_node(*BLACK).get_content(): 0.471, memory_node(*CAFE).get_content(): 0.441}
    index = open_memory_index(KnownCosineEmbedding(cosines))
    index.insert_nodes([memory_node(*BLACK), memory_node(*CAFE)])
    return QdrantRecencyRetriever.from_index(index, POLICY)


def test_one_event_per_retrieve_with_the_policy_and_unrounded_rows(retriever, collected) -> None:
    nodes = retriever.retrieve(QUERY)
    assert len(collected) == 1
    (event,) = collected
    assert event.policy == POLICY and event.vague is False
    explained = retriever.explain(QUERY)  # explain is a ranking too: a second event
    assert len(collected) == 2
    assert [(r.node_id, r.raw, r.bonus, r.final, r.verdict) for r in event.rows] == [
        (r.node_id, r.raw, r.bonus, r.final, r.reason) for r in explained.rows]
    assert [r.node_id for r in event.rows if r.verdict == "kept"] == [n.node.node_id
                                                                     for n in nodes]
    # The seed's C1 table: black 0.471 + 0.011 = 0.482, café au lait 0.441 + 0.026 = 0.467.
    assert [(round(r.raw, 3), round(r.bonus, 3), round(r.final, 3)) for r in event.rows] == [
        (0.471, 0.011, 0.482), (0.441, 0.026, 0.467)]


async def test_one_event_per_aretrieve(retriever, collected) -> None:
    await retriever.aretrieve(QUERY)
    assert len(collected) == 1 and len(collected[0].rows) == 2


def test_an_empty_store_still_dispatches_its_empty_ranking(collected) -> None:
    index = open_memory_index(KnownCosineEmbedding({"x": 0.5}))
    QdrantRecencyRetriever.from_index(index, POLICY).retrieve(QUERY)
    assert len(collected) == 1 and collected[0].rows == []


def test_the_event_names_the_intent_and_the_newer_version_placed_first(collected) -> None:
    """A present question with an intent policy: café au lait (newer, close to black in
    vector and score) goes first, and the event says so."""
    near = {memory_node(*BLACK).get_content(): 0.471, memory_node(*CAFE).get_content(): 0.441}
    extra = {f"2026-0{month}-05: Unrelated fact {month}.": 0.2 for month in range(1, 5)}
    embed = KnownCosineEmbedding({**near, **extra})
    index = open_memory_index(embed)
    index.insert_nodes([memory_node(*BLACK), memory_node(*CAFE)]
                       + [memory_node(f"Unrelated fact {m}.", f"2026-0{m}-05") for m in range(1, 5)])
    # Both coffee memories lean on the question's axis, so they are each other's nearest,
    # far above the unrelated ones' pairs: café au lait, newer and within 0.05, goes first.
    policy = POLICY.model_copy(update={"present_weight": 0.1, "present_tau_days": 365.0,
                                       "supersede_margin": 0.05})
    nodes = QdrantRecencyRetriever.from_index(index, policy).retrieve("How do I take my coffee now?")
    (event,) = collected
    assert event.intent == "present"
    assert event.policy.weight == 0.1 and event.policy.threshold == pytest.approx(0.45 + 0.05)
    black, cafe = memory_node(*BLACK).node_id, memory_node(*CAFE).node_id
    assert [(row.node_id, row.verdict) for row in event.rows[:2]] == [
        (cafe, f"kept; newer version of {black}"), (black, f"kept; older version, below {cafe}")]
    assert [n.node.node_id for n in nodes] == [cafe, black]


def test_no_event_is_built_when_no_handler_listens(retriever, monkeypatch) -> None:
    """Building the event (a row per candidate, the policy) costs time no one uses."""
    from llama_index_recency.ranking import events

    built: list[object] = []
    monkeypatch.setattr(events, "MemoryRankingEvent",
                        lambda **fields: built.append(fields))  # would be dispatched
    assert not events.listening()
    retriever.retrieve(QUERY)
    assert built == []


def test_a_handler_on_the_root_dispatcher_listens(collected) -> None:
    from llama_index_recency.ranking import events

    assert events.listening()

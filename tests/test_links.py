"""Successor links that are not a clean chain: cycles, self-links, missing ids, long chains.

Links come from an LLM and from users' own nodes; whatever they say, retrieval must end,
stay inside the user's scope and never bring a memory twice.
"""

from __future__ import annotations

import uuid

import pytest
from conftest import QUERY, KnownCosineEmbedding, cosines_for

from llama_index_recency import QdrantRecencyRetriever, RecencyPolicy, memory_node, open_memory_index
from llama_index_recency.memory import SUPERSEDED_BY_KEY, SUPERSEDES_KEY

POLICY = RecencyPolicy(threshold=0.45, reference_date="2026-09-10")


def linked(fact: str, day: str, supersedes: list[str], superseded_by: list[str] = ()) -> object:
    """A memory with links set as a store might hold them (written directly, no checks)."""
    node = memory_node(fact, day, metadata={"user_id": "taro"})
    node.metadata[SUPERSEDES_KEY] = list(supersedes)
    if superseded_by:
        node.metadata[SUPERSEDED_BY_KEY] = list(superseded_by)
    return node


def store(nodes_and_raws):
    embed = KnownCosineEmbedding(cosines_for([n for n, _ in nodes_and_raws],
                                             [raw for _, raw in nodes_and_raws]))
    index = open_memory_index(embed)
    index.insert_nodes([n for n, _ in nodes_and_raws])
    return index


def retrieve(index):
    retriever = QdrantRecencyRetriever.from_index(index, POLICY, user_id="taro")
    return [n.node.node_id for n in retriever.retrieve(QUERY)]


def ids(*names: str) -> list[str]:
    return [str(uuid.uuid5(uuid.NAMESPACE_URL, name)) for name in names]


def test_a_cycle_of_links_ends_and_brings_each_memory_once() -> None:
    a = linked("Taro drinks coffee black.", "2026-08-01", [])
    b = linked("Taro drinks café au lait.", "2026-08-20", [a.node_id])
    a.metadata[SUPERSEDES_KEY] = [b.node_id]  # A and B each claim to update the other
    found = retrieve(store([(a, 0.60), (b, 0.30)]))
    assert len(found) == len(set(found)) and a.node_id in found


def test_a_memory_that_supersedes_itself_is_brought_once() -> None:
    a = linked("Taro drinks coffee black.", "2026-08-01", [])
    a.metadata[SUPERSEDES_KEY] = [a.node_id]
    a.metadata[SUPERSEDED_BY_KEY] = [a.node_id]
    assert retrieve(store([(a, 0.60)])) == [a.node_id]


def test_links_to_missing_ids_are_ignored() -> None:
    ghost_newer, ghost_older = ids("never stored, newer", "never stored, older")
    a = linked("Taro drinks coffee black.", "2026-08-01", [ghost_older], [ghost_newer])
    assert retrieve(store([(a, 0.60)])) == [a.node_id]


@pytest.mark.parametrize("length", [200])
def test_a_chain_of_200_brings_its_newest_first(length: int) -> None:
    chain = [linked("Taro's drink, version 0.", "2026-01-01", [])]
    for i in range(1, length):
        day = f"2026-{1 + i // 28 % 8:02d}-{1 + i % 28:02d}"
        chain.append(linked(f"Taro's drink, version {i}.", day, [chain[-1].node_id]))
    for older, newer in zip(chain, chain[1:], strict=False):
        older.metadata[SUPERSEDED_BY_KEY] = [newer.node_id]
    raws = [(chain[0], 0.60)] + [(node, 0.10) for node in chain[1:]]
    found = retrieve(store(raws))
    assert found[:2] == [chain[-1].node_id, chain[0].node_id]

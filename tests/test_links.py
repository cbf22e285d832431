"""Successor links that are not a clean chain: cycles, self-links, missing ids, long chains.

Links come from an LLM and from users' own nodes; whatever they say, retrieval must end,
stay inside the user's scope and never bring a memory twice.
"""

from __future__ import annotations

import math
import uuid

import pytest

from llama_index_recency import (
    QdrantRecencyRetriever,
    RecencyPolicy,
    memory_node,
    open_memory_index,
)
from llama_index_recency.errors import MemoryNotFoundError
from llama_index_recency.records.nodes import SUPERSEDED_BY_KEY, SUPERSEDES_KEY
from llama_index_recency.storage import amemory_history, memory_history

from conftest import QUERY, KnownCosineEmbedding, cosines_for

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


@pytest.mark.slow
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


def test_a_successor_of_another_user_is_never_brought_even_unscoped() -> None:
    """A link across users (stored with plain insert_nodes, which checks nothing) is not
    followed: the successor search stays inside the memory's own user."""
    a = linked("Taro drinks coffee black.", "2026-08-01", [])
    leak = memory_node("Hanako switched to tea.", "2026-09-09", user_id="hanako",
                       supersedes=[a.node_id])
    index = store([(a, 0.60), (leak, 0.10)])
    for user in ("taro", None):
        found = QdrantRecencyRetriever.from_index(index, POLICY, user_id=user).retrieve(QUERY)
        assert [n.node.node_id for n in found] == [a.node_id]
    assert [n.node_id for n in memory_history(index, a.node_id)] == [a.node_id]


def chain_of(length: int, user: str = "taro") -> list:
    chain = [memory_node("Taro's drink, version 0.", "2026-01-01", user_id=user)]
    for i in range(1, length):
        day = f"2026-{1 + i // 28 % 8:02d}-{1 + i % 28:02d}"
        chain.append(memory_node(f"Taro's drink, version {i}.", day, user_id=user,
                                 supersedes=[chain[-1].node_id]))
    return chain


def test_history_lists_every_version_oldest_first_from_any_of_them() -> None:
    chain = chain_of(4)
    other = memory_node("Taro likes trains.", "2026-01-05", user_id="taro")
    index = store([(node, 0.1) for node in [*chain, other]])
    versions = [node.node_id for node in chain]
    for node in chain:
        assert [n.node_id for n in memory_history(index, node.node_id)] == versions
        assert [n.node_id for n in memory_history(index, node.node_id, user_id="taro")] == versions
    assert [n.node_id for n in memory_history(index, other.node_id)] == [other.node_id]


def test_history_ends_on_cycles_and_self_links_and_ignores_missing_ids() -> None:
    ghost = ids("never stored")[0]
    a = linked("Taro drinks coffee black.", "2026-08-01", [ghost])
    b = linked("Taro drinks café au lait.", "2026-08-20", [a.node_id, "not-a-uuid"])
    a.metadata[SUPERSEDES_KEY].append(b.node_id)  # a cycle
    c = linked("Taro drinks tea.", "2026-09-01", [b.node_id])
    c.metadata[SUPERSEDES_KEY].append(c.node_id)  # and a self-link
    index = store([(a, 0.6), (b, 0.3), (c, 0.2)])
    for start in (a, b, c):
        assert [n.node_id for n in memory_history(index, start.node_id)] == [
            a.node_id, b.node_id, c.node_id]


@pytest.mark.slow
def test_history_of_a_chain_of_200_is_whole() -> None:
    chain = chain_of(200)
    index = store([(node, 0.1) for node in chain])
    history = memory_history(index, chain[100].node_id)
    assert {n.node_id for n in history} == {n.node_id for n in chain} and len(history) == 200


def test_history_of_an_unknown_or_another_users_memory_is_one_line_naming_it() -> None:
    a = linked("Taro drinks coffee black.", "2026-08-01", [])
    index = store([(a, 0.6)])
    ghost = ids("never stored")[0]
    with pytest.raises(MemoryNotFoundError, match=f"^no memory '{ghost}' in the store$"):
        memory_history(index, ghost)
    with pytest.raises(MemoryNotFoundError,
                       match=f"^no memory '{a.node_id}' of user 'hanako' in the store$"):
        memory_history(index, a.node_id, user_id="hanako")
    with pytest.raises(MemoryNotFoundError, match="^no memory 'E1' in the store$"):
        memory_history(index, "E1")


async def test_amemory_history_is_the_same_history() -> None:
    chain = chain_of(3)
    index = store([(node, 0.1) for node in chain])
    assert [n.node_id for n in await amemory_history(index, chain[0].node_id)] == [
        n.node_id for n in chain]


def test_a_kept_successor_reached_by_a_back_link_gets_its_bonus_once() -> None:
    """Both memories pass; B is reached from A through 0.2.0's back link only. B's score is
    its raw cosine + its bonus, not the bonus added to its final score again."""
    a = linked("Taro drinks coffee black.", "2026-08-01", [], [])
    b = linked("Taro drinks café au lait.", "2026-09-01", [])
    a.metadata[SUPERSEDED_BY_KEY] = [b.node_id]
    a.excluded_embed_metadata_keys.append(SUPERSEDED_BY_KEY)
    found = QdrantRecencyRetriever.from_index(store([(a, 0.60), (b, 0.50)]), POLICY,
                                              user_id="taro").retrieve(QUERY)
    assert [n.node.node_id for n in found] == [b.node_id, a.node_id]
    assert found[0].score == pytest.approx(0.50 + 0.05 * math.exp(-9 / 14), abs=1e-6)


def test_on_edge_a_link_written_after_a_question_is_followed_by_the_next(tmp_path) -> None:
    old = linked("Taro drinks coffee black.", "2026-08-01", [])
    new = linked("Taro drinks café au lait.", "2026-08-20", [old.node_id])
    embed = KnownCosineEmbedding(cosines_for([old, new], [0.60, 0.30]))
    index = open_memory_index(embed, path=tmp_path / "store")
    index.insert_nodes([old])
    assert retrieve(index) == [old.node_id]  # no memory lists a link yet
    index.insert_nodes([new])
    assert retrieve(index) == [new.node_id, old.node_id]

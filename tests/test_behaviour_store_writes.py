"""What a user relies on from the writes around a store: the outbox's privacy, its disk
failures and its forget count; link ids kept out of texts; forget keeping every other link;
forget reading only what it needs; a re-added memory not embedded again."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from llama_index.core import MockEmbedding
from llama_index.core.schema import MetadataMode, TextNode

from llama_index_recency import memory_node, open_memory_index
from llama_index_recency.records.nodes import SUPERSEDED_BY_KEY, SUPERSEDES_KEY
from llama_index_recency.storage import Conversation, Outbox, get_memories
from llama_index_recency.writing import updates
from llama_index_recency.writing.updates import forget, insert_memories
from llama_index_recency.writing.writer import Turn

from conftest import KnownCosineEmbedding, cosines_for


def conversation(text: str, user_id: str | None = None) -> Conversation:
    return Conversation(turns=(Turn("user", text), Turn("assistant", "Noted!")),
                        day=date(2026, 9, 10), user_id=user_id)


TEA = conversation("I like green tea.", "hanako")
OSAKA = conversation("I moved to Osaka.", "hanako")
TRAINS = conversation("I like trains.", "taro")


# --- the outbox -----------------------------------------------------------------------------

@pytest.fixture
def open_umask() -> Iterator[None]:
    """No umask: a file's mode is exactly what the code asked for."""
    previous = os.umask(0)
    yield
    os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_outbox_file_is_readable_by_its_owner_only(tmp_path, open_umask) -> None:
    """It holds what the user said: owner read/write only, as appended and as rewritten
    (through its temporary file)."""
    path = tmp_path / "outbox" / "memories.jsonl"
    outbox = Outbox(path)
    outbox.add(TEA)
    assert mode(path) == 0o600
    outbox.add(OSAKA)
    outbox.remove(TEA.id)  # rewritten: a temporary file replaces it
    assert mode(path) == 0o600
    assert Outbox(path).claim_orphans() == [OSAKA]
    assert [p.name for p in path.parent.iterdir()] == ["memories.jsonl"]  # no temporary left


def test_a_disk_failure_keeps_conversations_in_memory_with_one_warning(tmp_path, caplog) -> None:
    blocker = tmp_path / "outbox"
    blocker.write_text("not a directory")  # the outbox's folder cannot be made: an OSError
    path = blocker / "memories.jsonl"
    outbox = Outbox(path)
    with caplog.at_level(logging.WARNING, logger="llama_index_recency"):
        outbox.add(TEA)
        outbox.add(OSAKA)
    (record,) = caplog.records  # once per streak of failures
    assert record.getMessage().startswith(
        f"{path}: could not save the outbox, its conversations are kept in memory only: ")
    assert TEA.id in outbox and OSAKA.id in outbox and len(outbox) == 2

    blocker.unlink()  # the disk recovers
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="llama_index_recency"):
        outbox.add(TRAINS)
        assert caplog.records == [] and path.exists()
        blocker_again = path.parent / "memories.jsonl"
        blocker_again.unlink()
        blocker_again.mkdir()  # a new failure (the file's place taken): a new streak, warned
        outbox.remove(TEA.id)
    (again,) = caplog.records
    assert "kept in memory only" in again.getMessage()
    assert OSAKA.id in outbox and TRAINS.id in outbox and TEA.id not in outbox


def test_conversations_kept_in_memory_during_a_disk_failure_reach_the_disk_once_it_recovers(
        tmp_path) -> None:
    blocker = tmp_path / "outbox"
    blocker.write_text("not a directory")
    path = blocker / "memories.jsonl"
    outbox = Outbox(path)
    outbox.add(TEA)  # kept in memory only
    blocker.unlink()
    outbox.add(OSAKA)  # the disk works again
    assert {c.id for c in Outbox(path).claim_orphans()} == {TEA.id, OSAKA.id}  # a restart's view


def test_dropping_a_user_reports_how_many_of_their_conversations_went(tmp_path) -> None:
    path = tmp_path / "memories.jsonl"
    outbox = Outbox(path)
    for entry in (TEA, TRAINS, OSAKA):
        outbox.add(entry)
    assert outbox.drop_user("nobody") == 0
    assert outbox.drop_user("hanako") == 2
    assert outbox.drop_user("hanako") == 0
    assert Outbox(path).claim_orphans() == [TRAINS]


def test_forgetting_a_user_reports_the_memories_deleted_and_drops_their_outbox(tmp_path) -> None:
    index = open_memory_index(MockEmbedding(embed_dim=4), path=tmp_path)
    nodes = [memory_node(f"Hanako's fact {i}.", "2026-09-01", user_id="hanako") for i in range(3)]
    insert_memories(index, [*nodes, memory_node("Taro's fact.", "2026-09-01", user_id="taro")])
    outbox = Outbox.at(tmp_path / "outbox" / "memories.jsonl")
    outbox.add(TEA)
    outbox.add(TRAINS)
    assert forget(index, user_id="hanako") == 3
    assert TEA.id not in outbox and TRAINS.id in outbox
    assert forget(index, user_id="hanako") == 0
    assert [n.metadata["user_id"] for n in get_memories(index)] == ["taro"]


# --- links ----------------------------------------------------------------------------------

BLACK = memory_node("Taro drinks coffee black.", "2026-05-20", user_id="taro")
LATTE = memory_node("Taro switched to café au lait.", "2026-09-01", user_id="taro")
TEA_NOW = memory_node("Taro now drinks green tea.", "2026-09-05", user_id="taro")


def test_link_ids_stay_out_of_the_texts_of_a_plain_llamaindex_node(tmp_path) -> None:
    """A node not made by memory_node, stored with a link: the id is bookkeeping, never
    embedded (the vector would depend on a UUID) and never shown to the LLM."""
    plain = TextNode(id_="5f1d6e3c-0000-4000-8000-00000000000b",
                     text="2026-09-05: Taro now drinks green tea.",
                     metadata={"date": "2026-09-05", "topic": "drinks", "user_id": "taro",
                               SUPERSEDES_KEY: [BLACK.node_id]})
    embedded: list[str] = []

    class Recording(KnownCosineEmbedding):
        def _get_text_embedding(self, text: str) -> list[float]:
            embedded.append(text)
            return super()._get_text_embedding(text)

    black_text = BLACK.get_content(metadata_mode=MetadataMode.EMBED)
    unlinked = plain.model_copy(deep=True)
    del unlinked.metadata[SUPERSEDES_KEY]
    plain_text = unlinked.get_content(metadata_mode=MetadataMode.EMBED)
    assert "topic: drinks" in plain_text  # its other metadata is embedded, as LlamaIndex does
    index = open_memory_index(Recording({black_text: 0.5, plain_text: 0.6}), path=tmp_path)
    insert_memories(index, [BLACK.model_copy(deep=True), plain])
    assert embedded == [black_text, plain_text]
    (stored,) = get_memories(index, [plain.node_id])
    for text in (stored.get_content(metadata_mode=MetadataMode.EMBED),
                 stored.get_content(metadata_mode=MetadataMode.LLM)):
        assert BLACK.node_id not in text and SUPERSEDES_KEY not in text
    assert stored.metadata[SUPERSEDES_KEY] == [BLACK.node_id]  # still linked


def test_forgetting_one_successor_keeps_the_other_back_links_of_the_same_memory(tmp_path) -> None:
    """A 0.2.0 store: BLACK names two successors in superseded_by. Forgetting one leaves the
    other there, so BLACK still leads to it."""
    black, latte, tea = (n.model_copy(deep=True) for n in (BLACK, LATTE, TEA_NOW))
    black.metadata[SUPERSEDED_BY_KEY] = sorted([LATTE.node_id, TEA_NOW.node_id])
    black.excluded_embed_metadata_keys.append(SUPERSEDED_BY_KEY)
    black.excluded_llm_metadata_keys.append(SUPERSEDED_BY_KEY)
    index = open_memory_index(MockEmbedding(embed_dim=4), path=tmp_path)
    index.insert_nodes([black, latte, tea])
    assert forget(index, [LATTE.node_id]) == 1
    (kept,) = get_memories(index, [BLACK.node_id])
    assert kept.metadata[SUPERSEDED_BY_KEY] == [TEA_NOW.node_id]


# --- updates --------------------------------------------------------------------------------

def test_forgetting_one_memory_reads_only_it_and_the_memories_linked_to_it(
        tmp_path, monkeypatch) -> None:
    """Forget in a store of 40 memories reads the doomed one and its neighbours, not the
    whole store (every memory with its vector)."""
    others = [memory_node(f"Taro's fact number {i}.", "2026-08-01", user_id="taro")
              for i in range(37)]
    latte = memory_node("Taro switched to café au lait.", "2026-09-01", user_id="taro",
                        supersedes=[BLACK.node_id])
    tea = memory_node("Taro now drinks green tea.", "2026-09-05", user_id="taro",
                      supersedes=[latte.node_id])
    index = open_memory_index(MockEmbedding(embed_dim=4), path=tmp_path)
    insert_memories(index, [BLACK.model_copy(deep=True), latte, tea, *others])
    read: list[int] = []
    original = updates.get_memories

    def counted(*args: Any, **kwargs: Any):
        found = original(*args, **kwargs)
        read.append(len(found))
        return found

    monkeypatch.setattr(updates, "get_memories", counted)
    assert forget(index, [latte.node_id]) == 1
    assert sum(read) == 2  # latte, then tea (which named it)
    (relinked,) = get_memories(index, [tea.node_id])
    assert relinked.metadata[SUPERSEDES_KEY] == [BLACK.node_id]  # the chain stays whole


def test_a_re_added_memory_is_not_embedded_again(tmp_path) -> None:
    """Storing a memory again (a rerun, or new metadata that is not in its embedded text)
    reuses its stored vector: no embedding call."""
    calls: list[int] = []

    class Counting(KnownCosineEmbedding):
        def _get_text_embedding(self, text: str) -> list[float]:
            calls.append(1)
            return super()._get_text_embedding(text)

    fact = memory_node("Taro likes trains.", "2026-09-01", user_id="taro")
    index = open_memory_index(Counting(cosines_for([fact], [0.7])), path=tmp_path)
    insert_memories(index, [fact.model_copy(deep=True)])
    assert len(calls) == 1
    (first,) = get_memories(index, [fact.node_id])

    again = insert_memories(index, [fact.model_copy(deep=True)])
    with_kind = memory_node("Taro likes trains.", "2026-09-01", user_id="taro",
                            metadata={"kind": "preference"})
    changed = insert_memories(index, [with_kind])
    assert again.unchanged == (fact.node_id,) and list(changed.changed) == [fact.node_id]
    assert len(calls) == 1
    (stored,) = get_memories(index, [fact.node_id])
    assert stored.metadata["kind"] == "preference"
    assert stored.embedding == pytest.approx(first.embedding)

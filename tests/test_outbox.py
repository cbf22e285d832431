"""The outbox: conversations kept on disk until written, readable after a crash mid-append."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import date

from llama_index_recency.storage import Conversation, Outbox
from llama_index_recency.writing.writer import Turn

TEA = Conversation(turns=(Turn("user", "I like green tea."), Turn("assistant", "Noted!")),
                   day=date(2026, 9, 10), user_id="hanako", user_name="Hanako")
OSAKA = Conversation(turns=(Turn("user", "I moved to Osaka."),), day=date(2026, 9, 11))


def test_entries_are_kept_until_removed_and_the_empty_outbox_leaves_no_file(tmp_path) -> None:
    path = tmp_path / "outbox" / "memories.jsonl"
    outbox = Outbox(path)
    outbox.add(TEA)
    outbox.add(OSAKA)
    assert Outbox(path).claim_orphans() == [TEA, OSAKA]  # what another process would find
    outbox.remove(TEA.id)
    assert Outbox(path).claim_orphans() == [OSAKA]
    outbox.remove(OSAKA.id)
    assert not path.exists() and len(outbox) == 0


def test_a_line_torn_by_a_kill_mid_append_is_dropped_and_the_rest_kept(tmp_path, caplog) -> None:
    path = tmp_path / "memories.jsonl"
    path.write_text(TEA.to_json() + "\n" + OSAKA.to_json()[:30], encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="llama_index_recency"):
        outbox = Outbox(path)
    assert outbox.claim_orphans() == [TEA]
    assert path.read_text(encoding="utf-8") == TEA.to_json() + "\n"  # repaired before any append
    assert "1 unreadable line dropped" in caplog.text


def test_a_line_torn_inside_a_character_is_dropped_and_the_rest_kept(tmp_path, caplog) -> None:
    """A kill mid-append can cut a Japanese character in half: the file is then not UTF-8."""
    path = tmp_path / "memories.jsonl"
    path.write_bytes((TEA.to_json() + "\n").encode() + b'{"turns": [["user", "'
                     + "大".encode()[:2])  # 2 of the character's 3 bytes
    with caplog.at_level(logging.WARNING, logger="llama_index_recency"):
        outbox = Outbox(path)
    assert outbox.claim_orphans() == [TEA]
    assert path.read_text(encoding="utf-8") == TEA.to_json() + "\n"
    assert "1 unreadable line dropped" in caplog.text


def test_one_outbox_per_file_in_a_process_whose_orphans_are_claimed_once(tmp_path) -> None:
    path = tmp_path / "memories.jsonl"
    Outbox(path).add(TEA)
    first, second = Outbox.at(path), Outbox.at(tmp_path / "." / "memories.jsonl")
    assert first is second
    assert first.claim_orphans() == [TEA] and second.claim_orphans() == []
    assert Outbox.at(None) is not Outbox.at(None)  # in memory only: one per block


def test_extracted_memories_survive_a_restart_exactly(tmp_path) -> None:
    from llama_index_recency import memory_node

    path = tmp_path / "outbox" / "memories.jsonl"
    outbox = Outbox(path)
    outbox.add(TEA)
    fact = memory_node("Hanako likes green tea.", "2026-09-10", user_id="hanako",
                       metadata={"kind": "preference"})
    outbox.replace(TEA.with_memories([fact]))
    (found,) = Outbox(path).claim_orphans()
    (memory,) = found.extracted()
    assert (memory.node_id, memory.text, memory.metadata) == (fact.node_id, fact.text,
                                                              fact.metadata)
    assert memory.excluded_embed_metadata_keys == fact.excluded_embed_metadata_keys
    assert TEA.extracted() is None  # not answered yet: the turns go to the LLM


def test_a_conversation_added_again_replaces_its_kept_state(tmp_path) -> None:
    """The memory block holds a turn still awaiting its reply, then the whole exchange, under one id."""
    path = tmp_path / "memories.jsonl"
    outbox = Outbox(path)
    outbox.add(OSAKA)
    answered = replace(OSAKA, turns=(*OSAKA.turns, Turn("assistant", "Big change!")))
    outbox.add(answered)
    assert len(path.read_text("utf-8").splitlines()) == 1
    assert Outbox(path).claim_orphans() == [answered] and len(outbox) == 1

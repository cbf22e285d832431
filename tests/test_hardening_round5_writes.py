"""Issue #39, round 5, writes: a forget sticks against every path that writes conversation
back, and one add never moves a memory to another user or keeps one of two versions of it."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from llama_index.core import MockEmbedding
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory import Memory

from llama_index_recency import RecencyMemory, RecencyMemoryBlock, memory_node, openai_like_llm
from llama_index_recency.errors import InvalidInputError
from llama_index_recency.storage import Conversation, Outbox, count_memories, get_memories
from llama_index_recency.writing import updates
from llama_index_recency.writing.writer import Turn

from conftest import OpenAIServer, ToolCall

OSAKA = "I moved to Osaka last week."
OSAKA_FACT = ToolCall("record_memories", {"memories": [
    {"turn": 1, "kind": "event", "fact": "Alice moved to Osaka last week."}]})
NOTHING = ToolCall("record_memories", {"memories": []})


def llm_at(url: str):
    return openai_like_llm(model="qwen-test", api_base=url, api_key="k", max_retries=0)


def store_at(path: Path) -> RecencyMemory:
    """A RecencyMemory over an Edge store at ``path`` whose embedding takes any text."""
    return RecencyMemory(MockEmbedding(embed_dim=4), path=path)


def sent_texts(server: OpenAIServer) -> str:
    """Everything sent to the extraction server, as one text."""
    return "\n".join(body["messages"][-1]["content"] for body in server.requests)


# --- 1. forget(user_id=) during a live session ---------------------------------------------------

@pytest.mark.parametrize("background", [True, False], ids=["next-turn", "remember-session"])
async def test_what_was_said_before_a_forget_is_never_written_after_it(
        tmp_path, openai_server, extraction_server, background) -> None:
    """Alice says she moved; her memories are forgotten; neither the next turn's hand-over nor
    remember_session at the end sends or stores what she said before."""
    extraction_server.replies = [OSAKA_FACT]
    extraction_server.reply = NOTHING
    openai_server.replies = ["Big change!", "Good night!"]
    memory = store_at(tmp_path)
    block = RecencyMemoryBlock(index=memory.index, llm=llm_at(extraction_server.base_url),
                               user_id="alice", user_name="Alice", background=background)
    session = Memory.from_defaults(session_id="s", memory_blocks=[block])
    mimi = FunctionAgent(tools=[], llm=llm_at(openai_server.base_url), system_prompt="Mimi.")
    await mimi.run(OSAKA, memory=session)
    memory.forget(user_id="alice")
    await mimi.run("Good night.", memory=session)
    await block.await_writes()
    if not background:
        await block.aremember_session(session)
    assert OSAKA not in sent_texts(extraction_server), "a forgotten turn went to the writer"
    if background:  # remember_session's request (of what came after) is answered OSAKA_FACT
        assert count_memories(memory.index) == 0, [n.get_content()
                                                   for n in get_memories(memory.index)]
    memory.close()


async def test_a_restart_honours_a_forget_recorded_with_the_store(tmp_path, openai_server) -> None:
    """A conversation a dead process left in the outbox, said before Alice was forgotten, is
    not written by the next block opened over the store."""
    openai_server.reply = OSAKA_FACT
    memory = store_at(tmp_path)
    said = datetime.now(timezone.utc) - timedelta(minutes=1)
    memory.forget(user_id="alice")
    left = Conversation(turns=(Turn("user", OSAKA), Turn("assistant", "Big change!")),
                        day=said.date(), user_id="alice", user_name="Alice")
    outbox = tmp_path / "outbox" / "memories.jsonl"  # as the dead process wrote it
    outbox.parent.mkdir()
    line = {**json.loads(left.to_json()), "seen": [said.isoformat()] * 2}
    outbox.write_text(json.dumps(line) + "\n", encoding="utf-8")
    block = RecencyMemoryBlock(index=memory.index, llm=llm_at(openai_server.base_url))
    assert await block.await_writes() == 0
    assert count_memories(memory.index) == 0, [n.get_content() for n in get_memories(memory.index)]
    assert openai_server.requests == []
    memory.close()


async def test_a_forget_whose_delete_fails_loses_no_conversation(tmp_path, closed_port_url,
                                                                monkeypatch) -> None:
    memory = store_at(tmp_path)
    memory.add([memory_node("Alice likes green tea.", "2026-09-01", user_id="alice")])
    block = RecencyMemoryBlock(index=memory.index, llm=llm_at(closed_port_url), user_id="alice")
    await block.aput([ChatMessage(role="user", content=OSAKA)])
    assert await block.await_writes() == 1  # the LLM is down: the conversation waits

    def failing(*args, **kwargs):
        raise OSError("the disk went away")

    monkeypatch.setattr(updates, "delete_memories", failing)
    with pytest.raises(OSError):
        memory.forget(user_id="alice")
    assert count_memories(memory.index) == 1
    waiting = Outbox.at(block.outbox_path).waiting("alice")
    assert waiting == 1, "the failed forget dropped the conversation it did not forget"
    memory.close()


# --- 2. add() never moves a memory to another user -----------------------------------------------

def test_adding_a_memory_under_another_user_is_refused(tmp_path) -> None:
    memory = store_at(tmp_path)
    alices = memory_node("Alice likes green tea.", "2026-09-01", user_id="alice")
    memory.add([alices])
    bobs = memory_node("Alice likes green tea.", "2026-09-01", user_id="alice")
    bobs.metadata["user_id"] = "bob"
    with pytest.raises(InvalidInputError) as raised:
        memory.add([bobs])
    assert alices.node_id in str(raised.value) and "\n" not in str(raised.value)
    (kept,) = get_memories(memory.index)
    assert kept.metadata["user_id"] == "alice"
    assert get_memories(memory.index, user_id="bob") == []
    memory.close()


# --- 3. add() refuses two versions of one memory -------------------------------------------------

def test_the_same_memory_twice_in_one_add_is_refused(tmp_path) -> None:
    memory = store_at(tmp_path)
    first = memory_node("The user likes green tea.", "2026-09-01", metadata={"key": "a"})
    second = memory_node("The user likes green tea.", "2026-09-01", metadata={"key": "b"})
    with pytest.raises(InvalidInputError) as raised:
        memory.add([first, second])
    assert first.node_id in str(raised.value) and "\n" not in str(raised.value)
    assert count_memories(memory.index) == 0
    memory.close()

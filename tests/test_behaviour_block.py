"""What a user of a *writing* RecencyMemoryBlock relies on: recall every turn, only the user's
and assistant's words go to the writer, a bounded queue, one warning for a failed write, and
a turn said again after a Memory flush written again."""

from __future__ import annotations

import asyncio
import logging

import pytest
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory import Memory
from test_memory_block import (
    BLOCK,
    COFFEE,
    NOTHING,
    POLICY,
    TALK,
    coffee_index,
    eventually,
    extraction_llm,
    sent_turns,
    tea_index,
)

from llama_index_recency import RecencyMemoryBlock, openai_like_llm


def conversation_text(body: dict) -> str:
    """The text inside <conversation> of one extraction request."""
    content = body["messages"][-1]["content"]
    return content.split("<conversation>\n", 1)[1].split("\n</conversation>", 1)[0]


# --- recall while writing -----------------------------------------------------------------

@pytest.mark.slow
async def test_a_writing_block_recalls_on_every_turn_not_only_the_first(openai_server) -> None:
    """From the second turn on the block also hands the last exchange to the writer; the
    agent must still get the recalled memories that turn."""
    openai_server.reply = NOTHING
    block = RecencyMemoryBlock(index=coffee_index(), policy=POLICY,
                               llm=extraction_llm(openai_server), user_name="Taro")
    first = [ChatMessage(role="user", content="Hello, I'm Taro.")]
    assert await block.aget(first, session_id="s") == ""  # nothing about coffee yet
    second = [*first, ChatMessage(role="assistant", content="Hi Taro!"),
              ChatMessage(role="user", content=COFFEE)]
    assert BLOCK in await block.aget(second, session_id="s")
    assert await block.await_writes() == 0
    assert sent_turns(openai_server) == [[("user", "Hello, I'm Taro."), ("assistant", "Hi Taro!")]]


@pytest.mark.slow
async def test_a_writing_blocks_memory_shows_the_agent_the_recall_on_the_second_turn(
        openai_server) -> None:
    openai_server.reply = NOTHING
    block = RecencyMemoryBlock(index=coffee_index(), policy=POLICY,
                               llm=extraction_llm(openai_server), user_name="Taro")
    memory = Memory.from_defaults(session_id="second", memory_blocks=[block])
    await memory.aput_messages([ChatMessage(role="user", content="Hello, I'm Taro."),
                                ChatMessage(role="assistant", content="Hi Taro!")])
    shown = await memory.aget(input=COFFEE)
    assert BLOCK in shown[0].content
    assert await block.await_writes() == 0 and len(openai_server.requests) == 1


# --- what reaches the writer --------------------------------------------------------------

@pytest.mark.slow
async def test_only_the_users_and_assistants_words_reach_the_writer(openai_server) -> None:
    """An agent's history also holds the system prompt, tool results and assistant turns that
    only call a tool (no text, or blank): none of them is something the user said."""
    openai_server.reply = NOTHING
    block = RecencyMemoryBlock(index=tea_index(), llm=extraction_llm(openai_server))
    call = {"tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "lookup", "arguments": "{}"}}]}
    history = [
        ChatMessage(role="system", content="You are Mimi, a cheerful cat."),
        ChatMessage(role="user", content="I like green tea."),
        ChatMessage(role="assistant", content=None, additional_kwargs=call),
        ChatMessage(role="tool", content="lookup result: 42",
                    additional_kwargs={"tool_call_id": "c1"}),
        ChatMessage(role="assistant", content="   ", additional_kwargs=call),
        ChatMessage(role="assistant", content="Noted!"),
        ChatMessage(role="user", content="Bye."),
    ]
    await block.aget(history, session_id="agent")
    assert await block.await_writes() == 0
    (body,) = openai_server.requests
    assert conversation_text(body).splitlines() == ["1. user: I like green tea.",
                                                    "2. assistant: Noted!"]


async def test_a_turn_said_again_after_a_memory_flush_is_written_again(openai_server) -> None:
    """The user says "Yes, exactly." before Memory flushes it out of the history and again
    after: two turns, each sent once."""
    openai_server.reply = NOTHING
    block = RecencyMemoryBlock(index=tea_index(), llm=extraction_llm(openai_server))
    flushed = [ChatMessage(role="user", content="Yes, exactly.",
                           additional_kwargs={"session_id": "s"}),
               ChatMessage(role="assistant", content="Great.", additional_kwargs={"session_id": "s"})]
    await block.aput(flushed)  # Memory's flush: these left the history
    history = [ChatMessage(role="user", content="Yes, exactly."),
               ChatMessage(role="assistant", content="Glad to hear."),
               ChatMessage(role="user", content="Bye.")]
    await block.aget(history, session_id="s")
    await block.aget(history, session_id="s")  # the same history again: nothing new
    assert await block.await_writes() == 0
    assert sent_turns(openai_server) == [  # the turn before the second one shown again
        [("user", "Yes, exactly."), ("assistant", "Great.")],
        [("assistant", "Great."), ("user", "Yes, exactly."), ("assistant", "Glad to hear.")],
    ]


# --- the pending queue --------------------------------------------------------------------

def said(i: int) -> list[ChatMessage]:
    return [ChatMessage(role="user", content=f"I have hobby number {i}."),
            ChatMessage(role="assistant", content=f"Hobby {i}, noted.")]


@pytest.mark.slow
async def test_a_full_queue_makes_a_flush_wait_but_never_a_turn(openai_server) -> None:
    """max_pending=2 while the writer is stuck on an LLM call: two more flushes queue at once,
    the next waits for room; a turn queues without waiting. Nothing is lost."""
    openai_server.faults = ["hang"]  # the first extraction hangs until released
    openai_server.reply = NOTHING
    block = RecencyMemoryBlock(index=tea_index(), llm=extraction_llm(openai_server),
                               max_pending=2)
    try:
        await block.aput(said(1))
        await eventually(lambda: len(openai_server.requests) == 1)  # the writer is stuck
        await asyncio.wait_for(block.aput(said(2)), 5)
        await asyncio.wait_for(block.aput(said(3)), 5)  # the queue is full now
        waiting = asyncio.create_task(block.aput(said(4)))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        turn = [*said(5), ChatMessage(role="user", content="And you?")]
        await asyncio.wait_for(block.aget(turn, session_id="t"), 5)  # a turn never waits
        assert not waiting.done()
    finally:
        openai_server.release.set()
    await asyncio.wait_for(waiting, 10)
    assert await block.await_writes() == 0  # the hung one failed and was retried
    texts = {turn for request in sent_turns(openai_server) for turn in request}
    assert {("user", f"I have hobby number {i}.") for i in range(1, 6)} <= texts


# --- a failed write -----------------------------------------------------------------------

async def test_the_first_failed_write_is_a_warning_naming_the_block_and_the_error(
        closed_port_url, caplog) -> None:
    llm = openai_like_llm(model="qwen-test", api_base=closed_port_url, api_key="k", max_retries=0)
    block = RecencyMemoryBlock(index=tea_index(), llm=llm)
    with caplog.at_level(logging.WARNING, logger="llama_index_recency"):
        await block.aput(TALK)
        assert await block.await_writes() == 1
    (record,) = caplog.records
    assert record.levelname == "WARNING"
    message = record.getMessage()
    assert message.startswith("recency_memory: could not write memories, kept for a retry: ")
    assert "Connection" in message

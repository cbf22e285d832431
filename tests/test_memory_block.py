"""RecencyMemoryBlock in LlamaIndex's Memory and agents: recall in B format, scoped writes
during the session, each turn sent once, an outbox that survives failures and restarts."""

from __future__ import annotations

import asyncio
import faulthandler
import json
import logging
import math
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path
from typing import Optional

import pytest
from llama_index.core import MockEmbedding
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent, ReActAgent
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.llms.mock import MockFunctionCallingLLMWithChatMemoryOfLastCall
from llama_index.core.memory import Memory
from llama_index.core.schema import TextNode
from llama_index.core.storage.chat_store.base_db import MessageStatus

from llama_index_recency import (
    RecencyMemoryBlock,
    RecencyPolicy,
    memory_node,
    open_memory_index,
    openai_like_llm,
)
from llama_index_recency.errors import MemoryStoreClosedError
from llama_index_recency.integrations import memory_block, writer_threads
from llama_index_recency.records.nodes import Turn
from llama_index_recency.storage import (
    Conversation,
    Outbox,
    check_memory_store,
    close_memory_index,
    count_memories,
    get_memories,
    outbox_path,
)
from llama_index_recency.writing.updates import forget

from conftest import KnownCosineEmbedding, OpenAIServer, ToolCall

TODAY = "2026-09-10"
BLACK = ("The user drinks coffee black.", "2026-08-20", 0.471)
CAFE = ("The user has been drinking sweet café au lait lately.", "2026-09-01", 0.441)
POLICY = RecencyPolicy(reference_date=TODAY)  # the seed's 0.05 / 14 / 0.45, top 3
COFFEE = "How do I take my coffee again?"
BLOCK = (
    "<retrieved_memory>\n"
    "2026-08-20: Taro drinks coffee black.\n\n"
    "2026-09-01: Taro has been drinking sweet café au lait lately.\n"
    "</retrieved_memory>"
)


class CoffeeEmbedding(KnownCosineEmbedding):
    """Known cosines for questions about coffee; any other question is orthogonal to everything."""

    def _get_query_embedding(self, query: str) -> list[float]:
        if "coffee" in query.lower():
            return super()._get_query_embedding(query)
        return [0.0] * (len(self._query) - 1) + [1.0]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)


def coffee_index(users: tuple[str | None, ...] = (None,)):
    nodes = [memory_node(fact, day, user_name="Taro", user_id=user)
             for user in users for fact, day, _ in (BLACK, CAFE)]
    raws = [raw for _ in users for *_, raw in (BLACK, CAFE)]
    cosines = {node.get_content(metadata_mode="embed"): raw for node, raw in zip(nodes, raws)}
    embed = CoffeeEmbedding({**cosines, "filler for the last axis": 0.0})
    index = open_memory_index(embed)
    index.insert_nodes(nodes)
    return index


def extraction_llm(server: OpenAIServer):
    return openai_like_llm(model="qwen-test", api_base=server.base_url, api_key="k", max_retries=0)


@pytest.fixture(autouse=True)
def bounded() -> Iterator[None]:
    """A test that hangs (a writer that never drains its queue, a wait never woken) ends the
    run after 120 s with every thread's traceback, instead of hanging it for ever."""
    faulthandler.dump_traceback_later(120, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


async def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait until ``check()`` holds (the block writes in a worker thread); fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not within the time allowed"
        await asyncio.sleep(0.02)


async def test_the_block_injects_passing_memories_and_nothing_for_a_hit_free_question() -> None:
    block = RecencyMemoryBlock(index=coffee_index(), policy=POLICY)
    memory = Memory.from_defaults(session_id="s1", memory_blocks=[block])

    with_memory = await memory.aget(input=COFFEE)
    system = with_memory[0].content
    assert with_memory[0].role == "system"
    assert f"Today is {TODAY}." in system and BLOCK in system
    assert "trust the one recorded on the newer date" in system

    without = await memory.aget(input="Who won the last World Cup?")
    assert all("retrieved_memory" not in (m.content or "") for m in without)
    assert all("Today is" not in (m.content or "") for m in without)


async def test_a_plain_dated_node_reads_like_a_memory_node() -> None:
    plain = TextNode(text="Taro drinks coffee black.", metadata={"date": "2026-09-09", "kind": "x"})
    embed = CoffeeEmbedding({plain.get_content(metadata_mode="embed"): 0.6,
                             "filler for the last axis": 0.0})
    index = open_memory_index(embed)
    index.insert_nodes([plain])
    memory = Memory.from_defaults(session_id="plain", memory_blocks=[
        RecencyMemoryBlock(index=index, policy=POLICY)])
    system = (await memory.aget(input=COFFEE))[0].content
    assert "<retrieved_memory>\n2026-09-09: Taro drinks coffee black.\n</retrieved_memory>" in system


def test_the_sync_memory_api_gets_the_block_too() -> None:
    memory = Memory.from_defaults(
        session_id="sync", memory_blocks=[RecencyMemoryBlock(index=coffee_index(), policy=POLICY)]
    )
    assert BLOCK in memory.get(input=COFFEE)[0].content


@pytest.mark.slow
async def test_the_query_is_the_latest_user_message_or_a_window_of_them() -> None:
    index = coffee_index()
    history = [ChatMessage(role="user", content="I had a coffee this morning."),
               ChatMessage(role="assistant", content="Nice!"),
               ChatMessage(role="user", content="Anyway, how are you?")]
    assert await RecencyMemoryBlock(index=index, policy=POLICY).aget(history) == ""
    widened = RecencyMemoryBlock(index=index, policy=POLICY, query_turns=2)
    assert BLOCK in await widened.aget(history)


def workflow(llm, system_prompt: str) -> AgentWorkflow:
    return AgentWorkflow(agents=[FunctionAgent(name="mimi", description="the character",
                                               tools=[], llm=llm, system_prompt=system_prompt)])


@pytest.mark.parametrize("make_agent", [
    lambda llm, prompt: FunctionAgent(tools=[], llm=llm, system_prompt=prompt),
    lambda llm, prompt: ReActAgent(tools=[], llm=llm, system_prompt=prompt),
    workflow,
], ids=["FunctionAgent", "ReActAgent", "AgentWorkflow"])
@pytest.mark.slow
async def test_an_agent_sees_the_block_in_its_system_prompt(make_agent) -> None:
    llm = MockFunctionCallingLLMWithChatMemoryOfLastCall()
    block = RecencyMemoryBlock(index=coffee_index(), policy=POLICY)
    memory = Memory.from_defaults(session_id="agent", memory_blocks=[block])
    agent = make_agent(llm, "You are Mimi.")
    await agent.run(COFFEE, memory=memory)
    sent = "\n".join(str(m.content) for m in llm.last_chat_messages or [])
    assert BLOCK in sent

    llm.reset_memory()
    await agent.run("Who won the last World Cup?", memory=memory)
    assert "retrieved_memory" not in "\n".join(str(m.content) for m in llm.last_chat_messages)


async def test_streaming_agent_run_with_the_block() -> None:
    llm = MockFunctionCallingLLMWithChatMemoryOfLastCall()
    memory = Memory.from_defaults(session_id="stream",
                                  memory_blocks=[RecencyMemoryBlock(index=coffee_index(), policy=POLICY)])
    handler = FunctionAgent(tools=[], llm=llm, streaming=True).run(COFFEE, memory=memory)
    async for _ in handler.stream_events():
        pass
    await handler
    assert BLOCK in "\n".join(str(m.content) for m in llm.last_chat_messages)


async def test_two_users_never_see_each_others_memories() -> None:
    index = coffee_index(users=("taro", "hanako"))
    for user in ("taro", "hanako"):
        text = await RecencyMemoryBlock(index=index, policy=POLICY, user_id=user).aget(
            [ChatMessage(role="user", content=COFFEE)])
        ids = {n.node_id for n in get_memories(index) if n.metadata["user_id"] == user}
        assert text.count("Taro drinks coffee black") == 1  # the identical fact appears once
        found = RecencyMemoryBlock(index=index, policy=POLICY, user_id=user).retriever.retrieve(COFFEE)
        assert {n.node.node_id for n in found} == ids


async def test_an_unscoped_block_on_a_store_of_several_users_warns_once(caplog) -> None:
    index = coffee_index(users=("taro", "hanako"))
    question = [ChatMessage(role="user", content=COFFEE)]
    with caplog.at_level(logging.WARNING, logger="llama_index_recency"):
        for user in ("taro", "hanako"):
            await RecencyMemoryBlock(index=index, policy=POLICY, user_id=user).aget(question)
        assert caplog.records == []
        block = RecencyMemoryBlock(index=index, policy=POLICY)
        await block.aget(question)
        await block.aget(question)
    (record,) = caplog.records
    assert record.name.startswith("llama_index_recency.") and record.levelname == "WARNING"
    assert ("QdrantRecencyRetriever without user_id met memories of several users ('hanako', "
            "'taro')") in record.getMessage()


FACTS = {"memories": [{"turn": 1, "kind": "preference", "fact": "The user likes green tea."}]}
TALK = [ChatMessage(role="user", content="I like green tea."),
        ChatMessage(role="assistant", content="Noted!")]


def tea_index():
    """An empty store whose embedding takes any text (the write path is under test here)."""
    return open_memory_index(MockEmbedding(embed_dim=4))


@pytest.mark.slow
async def test_flushed_messages_are_written_in_the_background_under_the_user(openai_server) -> None:
    openai_server.reply = ToolCall("record_memories", FACTS)
    index = tea_index()
    block = RecencyMemoryBlock(index=index, llm=extraction_llm(openai_server), user_id="hanako",
                               user_name="Hanako")
    await block.aput(TALK)  # what Memory calls when it flushes short-term messages
    assert await block.await_writes() == 0
    (stored,) = get_memories(index)
    assert stored.get_content() == f"{date.today().isoformat()}: Hanako likes green tea."
    assert stored.metadata["user_id"] == "hanako"


@pytest.mark.slow
async def test_writes_are_dated_by_the_policys_reference_date(openai_server) -> None:
    openai_server.reply = ToolCall("record_memories", FACTS)
    index = tea_index()
    block = RecencyMemoryBlock(index=index, policy=POLICY, llm=extraction_llm(openai_server),
                               background=False)
    await block.aput(TALK)
    (stored,) = get_memories(index)
    assert stored.get_content() == f"{TODAY}: The user likes green tea."  # the day it reads on


@pytest.mark.slow
async def test_a_failed_extraction_keeps_the_messages_and_retries(openai_server, caplog) -> None:
    openai_server.faults = [500, 500]
    openai_server.reply = ToolCall("record_memories", FACTS)
    index = tea_index()
    block = RecencyMemoryBlock(index=index, llm=extraction_llm(openai_server), user_id="hanako",
                               user_name="Hanako")
    with caplog.at_level(logging.WARNING, logger="llama_index_recency"):
        await block.aput(TALK)
        await block.aput(TALK)
        await eventually(lambda: block.pending_retries == 2)  # both attempts done, both failed
    assert block.pending_retries == 2 and count_memories(index) == 0
    assert len([r for r in caplog.records if "kept for a retry" in r.getMessage()]) == 1
    assert block.wait_for_writes() == 0  # the retries succeed
    assert count_memories(index) == 1


@pytest.mark.slow
async def test_a_partly_invalid_answer_is_written_not_retried(openai_server, caplog) -> None:
    """One valid fact and one from the assistant's turn: the valid one is stored, the other
    named in the writer's warning, and nothing is kept for a retry that would fail again."""
    openai_server.reply = ToolCall("record_memories", {"memories": [
        *FACTS["memories"], {"turn": 2, "kind": "event", "fact": "The user was told it is noted."}]})
    index = tea_index()
    block = RecencyMemoryBlock(index=index, llm=extraction_llm(openai_server), user_id="hanako",
                               user_name="Hanako")
    with caplog.at_level(logging.WARNING, logger="llama_index_recency"):
        await block.aput(TALK)
        assert await block.await_writes() == 0
    assert block.pending_retries == 0 and len(openai_server.requests) == 1
    (stored,) = get_memories(index)
    assert stored.get_content().endswith("Hanako likes green tea.")
    (record,) = caplog.records
    assert record.name == "llama_index_recency.writing.writer"
    assert "turn 2, 'The user was told it is noted.': turn 2 is not a user turn" in record.getMessage()


@pytest.mark.slow
def test_remember_session_writes_the_whole_session_at_its_end(openai_server) -> None:
    openai_server.reply = ToolCall("record_memories", FACTS)
    index = tea_index()
    block = RecencyMemoryBlock(index=index, llm=extraction_llm(openai_server), user_id="hanako",
                               user_name="Hanako")
    memory = Memory.from_defaults(session_id="end", memory_blocks=[block])
    memory.put_messages(TALK)
    (stored,) = block.remember_session(memory)
    assert stored.get_content().endswith("Hanako likes green tea.")
    conversation = openai_server.requests[-1]["messages"][-1]["content"]
    assert "1. user: I like green tea." in conversation


async def test_a_block_without_an_llm_is_read_only(openai_server) -> None:
    index = tea_index()
    block = RecencyMemoryBlock(index=index)
    await block.aput(TALK)
    assert block.wait_for_writes() == 0 and count_memories(index) == 0
    assert openai_server.requests == []


def test_default_policy_is_the_stores_own() -> None:
    """No policy given: the store's (index_policy); an uncalibrated store of an unknown model
    gets the seed's."""
    block = RecencyMemoryBlock(index=tea_index())
    assert (block.policy.weight, block.policy.tau_days, block.policy.threshold,
            block.policy.top_n, block.priority) == (0.05, 14.0, 0.45, 3, 0)
    assert math.isclose(block.policy.bonus(14), 0.05 / math.e)


@pytest.mark.slow
async def test_remember_session_skips_what_memory_already_flushed_to_the_block(openai_server) -> None:
    openai_server.reply = ToolCall("record_memories", FACTS)
    block = RecencyMemoryBlock(index=tea_index(), llm=extraction_llm(openai_server),
                               user_id="hanako", user_name="Hanako")
    memory = Memory.from_defaults(session_id="flush", token_limit=40, chat_history_token_ratio=0.5,
                                  token_flush_size=10, memory_blocks=[block])
    old = "user: I like green tea. " * 4
    await memory.aput_messages([ChatMessage(role="user", content=old.strip()),
                                ChatMessage(role="assistant", content="Noted!")])
    await memory.aput_messages([ChatMessage(role="user", content="Now I drink green tea daily."),
                                ChatMessage(role="assistant", content="Nice!")])
    await block.await_writes()
    flushed_requests = len(openai_server.requests)
    assert flushed_requests >= 1  # Memory flushed the first exchange to the block
    await block.aremember_session(memory)
    last = openai_server.requests[-1]["messages"][-1]["content"]
    assert "Now I drink green tea daily." in last and "I like green tea. user:" not in last


# --- writing during the session, each turn once -------------------------------------------------

RECORD = "record_memories"
NOTHING = ToolCall(RECORD, {"memories": []})
TURN_LINE = re.compile(r"^\d+\. (user|assistant): (.*)$")


def sent_turns(server: OpenAIServer) -> list[list[tuple[str, str]]]:
    """The (role, text) turns of each extraction request the server received, in order."""
    requests = []
    for body in server.requests:
        conversation = body["messages"][-1]["content"].split("</conversation>")[0]
        requests.append([match.groups() for line in conversation.splitlines()
                         if (match := TURN_LINE.match(line))])
    return requests


def without_the_question_answered(request: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """A request's turns without the assistant turn it starts with, sent before as the end of
    the exchange before and shown again for the user's answer to it."""
    return request[1:] if request and request[0][0] == "assistant" else request


def agent(server: OpenAIServer) -> FunctionAgent:
    """A FunctionAgent chatting through ``server``."""
    llm = openai_like_llm(model="qwen-test", api_base=server.base_url, api_key="k", max_retries=0)
    return FunctionAgent(tools=[], llm=llm, system_prompt="You are Mimi.")


@pytest.mark.slow
async def test_what_the_user_says_is_stored_during_the_session_without_a_call_by_the_app(
        openai_server, extraction_server) -> None:
    """Memory's defaults flush nothing in four turns; the block writes turn 2's fact anyway."""
    tea = ToolCall(RECORD, {"memories": [  # turn 1 is the reply it answers, "Hi Taro!"
        {"turn": 2, "kind": "preference", "fact": "The user likes green tea."}]})
    extraction_server.replies = [NOTHING, tea]  # one request per exchange, in order
    extraction_server.reply = NOTHING
    openai_server.replies = ["Hi Taro!", "Green tea, noted.", "Have fun.", "Good night!"]
    index = tea_index()
    block = RecencyMemoryBlock(index=index, llm=extraction_llm(extraction_server), user_id="taro")
    memory = Memory.from_defaults(session_id="live", memory_blocks=[block])
    mimi = agent(openai_server)
    for said in ("Hello, I'm Taro.", "I like green tea.", "I'm hiking tomorrow.", "Good night."):
        await mimi.run(said, memory=memory)
    await eventually(lambda: count_memories(index) == 1)
    (stored,) = get_memories(index)
    assert stored.get_content().endswith("The user likes green tea.")
    assert stored.metadata["user_id"] == "taro"
    assert ("user", "I like green tea.") in sent_turns(extraction_server)[1]
    assert await memory.aget_all(status=MessageStatus.ARCHIVED) == []  # Memory flushed nothing


@pytest.mark.slow
async def test_each_turn_is_sent_for_extraction_once_across_turns_flushes_and_the_end(
        openai_server, extraction_server) -> None:
    """A turn's text is in exactly one extraction request: sent during the session, never again
    on a flush or at the session's end; a user saying the same thing twice said two turns."""
    extraction_server.reply = NOTHING
    said = ["I like green tea.", "Yes, exactly.", "I moved to Osaka last month.",
            "Yes, exactly.", "My sister visits in May.", "Good night."]
    replies = [f"Reply number {n}." for n in range(1, len(said) + 1)]
    openai_server.replies = list(replies)
    block = RecencyMemoryBlock(index=tea_index(), llm=extraction_llm(extraction_server))
    memory = Memory.from_defaults(session_id="once", token_limit=60, chat_history_token_ratio=0.5,
                                  token_flush_size=10, memory_blocks=[block])
    mimi = agent(openai_server)
    for text in said:
        await mimi.run(text, memory=memory)
    assert await memory.aget_all(status=MessageStatus.ARCHIVED)  # Memory did flush
    await block.await_writes()
    during = [turn for request in sent_turns(extraction_server) for turn in request]
    assert ("user", "My sister visits in May.") in during  # written as the session went on

    await block.aremember_session(memory)
    requests = len(extraction_server.requests)
    assert await block.aremember_session(memory) == []
    assert len(extraction_server.requests) == requests  # nothing left to send

    counts = Counter(turn for request in sent_turns(extraction_server)
                     for turn in without_the_question_answered(request))
    assert counts == Counter([("user", text) for text in said]
                             + [("assistant", text) for text in replies])
    assert counts[("user", "Yes, exactly.")] == 2
    assert all(len(request) == len(set(request)) for request in sent_turns(extraction_server))


@pytest.mark.slow
async def test_an_answer_with_no_valid_fact_is_dropped_not_retried(openai_server, caplog) -> None:
    """The LLM answered, but its only fact is invalid: asking again would get the same, so the
    conversation leaves the outbox with one warning; only failed calls or stores are retried."""
    openai_server.reply = ToolCall(RECORD, {"memories": [
        {"turn": 2, "kind": "event", "fact": "The user was told it is noted."}]})
    block = RecencyMemoryBlock(index=tea_index(), llm=extraction_llm(openai_server))
    with caplog.at_level(logging.WARNING, logger="llama_index_recency"):
        await block.aput(TALK)
        assert await block.await_writes() == 0
        assert block.wait_for_writes() == 0
    assert block.pending_retries == 0 and len(openai_server.requests) == 1
    assert block.outbox_path is not None and not block.outbox_path.exists()
    (record,) = caplog.records
    assert "not retried" in record.getMessage() and "turn 2 is not a user turn" in record.getMessage()


# --- the outbox --------------------------------------------------------------------------------

def disk_index(path: Path):
    return open_memory_index(MockEmbedding(embed_dim=4), path=path)


def test_a_writing_block_over_a_store_without_an_outbox_says_a_crash_would_lose_its_queue(
        tmp_path, closed_port_url, caplog: pytest.LogCaptureFixture) -> None:
    """Over qdrant-client's local mode (or a server) no outbox file goes with the store: a
    block that writes says so, and where to set one; one reading only, or given a file, not."""
    from qdrant_client import QdrantClient

    index = open_memory_index(MockEmbedding(embed_dim=4), client=QdrantClient(location=":memory:"))
    llm = openai_like_llm(model="m", api_base=closed_port_url, api_key="k", max_retries=0)
    with caplog.at_level(logging.WARNING, logger=memory_block.__name__):
        RecencyMemoryBlock(index=index)
        RecencyMemoryBlock(index=index, llm=llm, outbox_path=tmp_path / "outbox.jsonl")
        assert caplog.records == []
        RecencyMemoryBlock(index=index, llm=llm)
    assert [r.getMessage() for r in caplog.records] == [
        "recency_memory: this store (not a local Qdrant Edge store) keeps no outbox, so "
        "conversations waiting for the writer are lost if the process dies; set outbox_path= "
        "to keep them on disk"]


async def test_a_failed_write_waits_in_the_outbox_beside_the_store(tmp_path, closed_port_url) -> None:
    index = disk_index(tmp_path)
    llm = openai_like_llm(model="qwen-test", api_base=closed_port_url, api_key="k", max_retries=0)
    block = RecencyMemoryBlock(index=index, llm=llm, user_id="hanako", user_name="Hanako")
    await block.aput(TALK)
    assert await block.await_writes() == 1
    assert block.outbox_path == tmp_path / "outbox" / "memories.jsonl"
    (line,) = block.outbox_path.read_text(encoding="utf-8").splitlines()
    entry = json.loads(line)
    assert (entry["user_id"], entry["user_name"]) == ("hanako", "Hanako")
    assert entry["turns"] == [{"role": "user", "text": "I like green tea."},
                              {"role": "assistant", "text": "Noted!"}]
    close_memory_index(index)
    assert os.listdir(tmp_path / "edge") == ["memories"]  # nothing of the outbox in Edge's part
    check_memory_store(tmp_path, must_exist=True)


PROJECT = Path(__file__).resolve().parents[1]

SESSION_SCRIPT = """
import asyncio, os, signal, sys
from llama_index.core import MockEmbedding
from llama_index.core.base.llms.types import ChatMessage
from llama_index_recency import RecencyMemoryBlock, open_memory_index, openai_like_llm

path, url, end = sys.argv[1:4]
if len(sys.argv) > 4:  # how long the exit waits for a write under way
    from llama_index_recency.integrations import writer_threads
    writer_threads.EXIT_WAIT_SECONDS = float(sys.argv[4])
index = open_memory_index(MockEmbedding(embed_dim=4), path=path)
llm = openai_like_llm(model="qwen-test", api_base=url, api_key="k", max_retries=0)
block = RecencyMemoryBlock(index=index, llm=llm, user_id="hanako", user_name="Hanako")
said = [ChatMessage(role=role, content=text) for role, text in [
    ("user", "I like green tea."), ("assistant", "Noted!"), ("user", "I moved to Osaka."),
    ("assistant", "Big change!"), ("user", "Good night.")]]


async def session():
    await block.aget(said[:3], session_id="s")  # turn 2: the first exchange goes to the writer
    print("failed:", await block.await_writes(), flush=True)
    await block.aget(said, session_id="s")  # turn 3: the second exchange


asyncio.run(session())
if end == "kill":  # no remember_session, no clean exit: whatever is in flight is cut off
    os.kill(os.getpid(), signal.SIGKILL)
"""


def run_session(path: Path, url: str, end: str,
                *exit_wait: str) -> subprocess.CompletedProcess[str]:
    """Run the script's session in another process, which ends without remember_session
    (``exit_wait``: the seconds its exit waits for a write under way)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PROJECT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", SESSION_SCRIPT, str(path), url, end,
                           *exit_wait], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
async def test_a_users_answer_reaches_the_writer_with_the_question_it_answers(
        openai_server, extraction_server) -> None:
    """Sent exchange by exchange, "Yes" would reach the writer without "Are you allergic to
    nuts?", which ended the exchange before: the question is shown again before it."""
    extraction_server.reply = NOTHING
    openai_server.replies = ["Are you allergic to nuts?", "Noted, I'll remember."]
    block = RecencyMemoryBlock(index=tea_index(), llm=extraction_llm(extraction_server))
    memory = Memory.from_defaults(session_id="nuts", memory_blocks=[block])
    mimi = agent(openai_server)
    for said in ("Quick health check.", "Yes"):
        await mimi.run(said, memory=memory)
    await block.aremember_session(memory)
    (answered,) = [request for request in sent_turns(extraction_server)
                   if ("user", "Yes") in request]
    assert answered == [("assistant", "Are you allergic to nuts?"), ("user", "Yes"),
                        ("assistant", "Noted, I'll remember.")]


@pytest.mark.slow
async def test_an_answer_reaches_the_writer_with_the_question_a_flush_took_out(
        openai_server, extraction_server) -> None:
    """Memory flushes the exchange that ended with the question when the answer comes: the
    question is shown again before "Yes" all the same, in the background and at the end."""
    question = ("Before we go on: are you allergic to nuts, or to any other food I should "
                "note in your records?")
    for background in (True, False):
        extraction_server.requests.clear()
        extraction_server.reply = NOTHING
        openai_server.replies = [question, "Noted, I'll remember."]
        block = RecencyMemoryBlock(index=tea_index(), llm=extraction_llm(extraction_server),
                                   background=background)
        memory = Memory.from_defaults(session_id="nuts", token_limit=60,
                                      chat_history_token_ratio=0.5, token_flush_size=10,
                                      memory_blocks=[block])
        mimi = agent(openai_server)
        for said in ("Quick health check.", "Yes"):
            await mimi.run(said, memory=memory)
        await block.aremember_session(memory)
        assert await memory.aget_all(status=MessageStatus.ARCHIVED)  # the question was flushed
        (answered,) = [request for request in sent_turns(extraction_server)
                       if ("user", "Yes") in request]
        assert answered[:2] == [("assistant", question), ("user", "Yes")]


@pytest.mark.slow
async def test_an_agent_calling_a_tool_sends_each_turn_once(openai_server,
                                                            extraction_server) -> None:
    """An agent run that calls a tool reads the memory again with the same user message: no
    turn goes to the writer twice for it."""
    from llama_index.core.tools import FunctionTool

    def get_weather(city: str) -> str:
        """Weather of a city."""
        return "sunny"

    extraction_server.reply = NOTHING
    openai_server.replies = ["Hi Taro!", ToolCall("get_weather", {"city": "Kyoto"}),
                             "It's sunny in Kyoto.", "Enjoy!"]
    block = RecencyMemoryBlock(index=tea_index(), llm=extraction_llm(extraction_server))
    memory = Memory.from_defaults(session_id="tool", memory_blocks=[block])
    llm = openai_like_llm(model="qwen-test", api_base=openai_server.base_url, api_key="k",
                          max_retries=0)
    mimi = FunctionAgent(tools=[FunctionTool.from_defaults(get_weather)], llm=llm,
                         system_prompt="You are Mimi.")
    said = ("Hello, I'm Taro and I like green tea.", "What's the weather in Kyoto?",
            "Thanks, I'm going hiking.")
    for text in said:
        await mimi.run(text, memory=memory)
    await block.aremember_session(memory)
    sent = [turn for request in sent_turns(extraction_server) for turn in request]
    assert Counter(text for role, text in sent if role == "user") == Counter(said)
    assert {text for role, text in sent if role == "assistant"} == {
        "Hi Taro!", "It's sunny in Kyoto.", "Enjoy!"}


@pytest.mark.slow
async def test_an_app_keeping_a_window_of_the_history_sends_each_turn_once(
        openai_server, extraction_server) -> None:
    """The app trims the history itself (``Memory.aset``, no flush): the turns it keeps were
    sent already and are not sent again."""
    extraction_server.reply = NOTHING
    openai_server.replies = [f"Reply {n}." for n in range(1, 6)]
    block = RecencyMemoryBlock(index=tea_index(), llm=extraction_llm(extraction_server))
    memory = Memory.from_defaults(session_id="window", memory_blocks=[block])
    mimi = agent(openai_server)
    said = ("I like green tea.", "I live in Kyoto.", "My sister is Hanako.", "I play the piano.")
    for text in said:
        await mimi.run(text, memory=memory)
        await memory.aset((await memory.aget_all())[-4:])
    await block.aremember_session(memory)
    sent = [turn for request in sent_turns(extraction_server) for turn in request]
    assert Counter(text for role, text in sent if role == "user") == Counter(said)


def said_in(session_id: Optional[str], *turns: tuple[str, str]) -> list[ChatMessage]:
    """``turns`` as Memory hands them to a block (a flush marks each with its session id)."""
    extra = {} if session_id is None else {"session_id": session_id}
    return [ChatMessage(role=role, content=text, additional_kwargs=dict(extra))
            for role, text in turns]


ASKED = [("user", "Quick health check."), ("assistant", "Are you allergic to nuts?"),
         ("user", "Yes"), ("assistant", "Noted. Do you have any pets?"), ("user", "No")]


async def test_the_held_exchange_keeps_the_question_just_before_it_across_flushes(
        tmp_path, extraction_server) -> None:
    """Flushes take the older exchanges out of the history (writing as they go): the turns
    held in the outbox keep the question right before them, "Do you have any pets?" before
    "No", not an older one."""
    extraction_server.reply = NOTHING
    block = RecencyMemoryBlock(index=disk_index(tmp_path), llm=extraction_llm(extraction_server),
                               background=False)
    await block.aget(said_in(None, *ASKED[:3]), session_id="s")
    await block.aput(said_in("s", *ASKED[:2]))  # Memory's flushes, as the history grows
    await block.aget(said_in(None, *ASKED[2:]), session_id="s")
    await block.aput(said_in("s", *ASKED[2:4]))
    assert block.outbox_path is not None
    (held,) = [json.loads(line)["turns"] for line in block.outbox_path.read_text().splitlines()]
    assert [(turn["role"], turn["text"]) for turn in held] == ASKED[3:]


async def test_a_history_cleared_before_the_session_ends_loses_no_turn_and_no_stale_question(
        extraction_server) -> None:
    """``Memory.reset`` ("new chat", same session id) between turns: what the old history still
    held goes to the writer, and the new history's first turn gets no question from before."""
    for background in (True, False):
        extraction_server.requests.clear()
        extraction_server.reply = NOTHING
        block = RecencyMemoryBlock(index=tea_index(), llm=extraction_llm(extraction_server),
                                   background=background)
        await block.aget(said_in(None, *ASKED[:3]), session_id="s")
        await block.aput(said_in("s", *ASKED[:2]))
        await block.aget(said_in(None, *ASKED[2:]), session_id="s")
        fresh = [("user", "What's the weather?"), ("assistant", "Sunny.")]
        await block.aget(said_in(None, fresh[0]), session_id="s")  # after the reset
        memory = Memory.from_defaults(session_id="s", memory_blocks=[block])
        await memory.aput_messages(said_in(None, *fresh))
        await block.aremember_session(memory)
        sent = sent_turns(extraction_server)
        assert sorted(text for request in sent for role, text in request if role == "user") == [
            "No", "Quick health check.", "What's the weather?", "Yes"], background
        assert [request for request in sent if ("user", "What's the weather?") in request] == [
            [("user", "What's the weather?"), ("assistant", "Sunny.")]]


def conversation_requests(server: OpenAIServer, text: str) -> int:
    return sum(1 for request in sent_turns(server) if ("user", text) in request)


@pytest.mark.slow
async def test_a_session_whose_llm_was_down_is_written_when_the_store_is_next_opened(
        tmp_path, closed_port_url, openai_server) -> None:
    done = run_session(tmp_path, closed_port_url, "exit")
    assert done.returncode == 0, done.stderr
    assert "failed: 1" in done.stdout
    openai_server.replies = [ToolCall(RECORD, {"memories": [
        {"turn": 1, "kind": "preference", "fact": "The user likes green tea."}]})]
    openai_server.reply = ToolCall(RECORD, {"memories": [  # after the reply it answers
        {"turn": 2, "kind": "event", "fact": "The user moved to Osaka."}]})
    index = disk_index(tmp_path)
    block = RecencyMemoryBlock(index=index, llm=extraction_llm(openai_server))  # another user's block
    await eventually(lambda: count_memories(index) == 2)
    await eventually(lambda: block.outbox_path is not None and not block.outbox_path.exists())
    assert sorted(n.get_content().split(": ", 1)[1] for n in get_memories(index)) == [
        "Hanako likes green tea.", "Hanako moved to Osaka."]
    assert {n.metadata["user_id"] for n in get_memories(index)} == {"hanako"}  # the entry's own


@pytest.mark.slow
async def test_a_process_ending_while_its_writer_writes_waits_for_that_write(
        tmp_path, openai_server) -> None:
    """The session's last exchange reaches the writer as the script ends and the LLM answers
    1.5 s later: the process waits for that write, stores it and exits cleanly (its writer
    thread is not torn down mid-write at exit, which could abort the process)."""
    openai_server.replies = [ToolCall(RECORD, {"memories": [
        {"turn": 1, "kind": "preference", "fact": "The user likes green tea."}]})]
    openai_server.reply = ToolCall(RECORD, {"memories": [
        {"turn": 2, "kind": "event", "fact": "The user moved to Osaka."}]})
    openai_server.faults = ["ok", "slow"]
    done = run_session(tmp_path, openai_server.base_url, "exit")
    assert done.returncode == 0 and "failed: 0" in done.stdout, done.stderr
    index = disk_index(tmp_path)
    assert sorted(n.get_content().split(": ", 1)[1] for n in get_memories(index)) == [
        "Hanako likes green tea.", "Hanako moved to Osaka."]
    assert "I moved to Osaka." not in outbox_path(index).read_text(encoding="utf-8")  # written


@pytest.mark.slow
async def test_a_process_ending_while_its_llm_never_answers_waits_no_longer_than_its_limit(
        tmp_path, openai_server) -> None:
    """The LLM never answers the last exchange: the process waits its limit (here 0.5 s),
    says the conversation stays in the outbox, exits cleanly; the next block writes it."""
    openai_server.replies = [ToolCall(RECORD, {"memories": [
        {"turn": 1, "kind": "preference", "fact": "The user likes green tea."}]})]
    openai_server.reply = ToolCall(RECORD, {"memories": [
        {"turn": 2, "kind": "event", "fact": "The user moved to Osaka."}]})
    openai_server.faults = ["ok", "hang"]
    done = run_session(tmp_path, openai_server.base_url, "exit", "0.5")
    assert done.returncode == 0 and "failed: 0" in done.stdout, done.stderr
    assert "stays in the outbox for the next process" in done.stderr
    openai_server.release.set()
    openai_server.faults.clear()
    index = disk_index(tmp_path)
    assert "I moved to Osaka." in outbox_path(index).read_text(encoding="utf-8")
    block = RecencyMemoryBlock(index=index, llm=extraction_llm(openai_server))
    await eventually(lambda: count_memories(index) == 2)
    assert await block.await_writes() == 0


async def test_while_the_process_ends_wait_for_writes_counts_what_is_not_written(
        tmp_path, closed_port_url, monkeypatch: pytest.MonkeyPatch) -> None:
    """An exit hook that runs after the block's: nothing is written any more, so
    wait_for_writes returns at once with the conversations left in the outbox."""
    down = openai_like_llm(model="qwen-test", api_base=closed_port_url, api_key="k",
                           max_retries=0)
    block = RecencyMemoryBlock(index=disk_index(tmp_path), llm=down)
    await block.aput(TALK)
    assert await block.await_writes() == 1
    monkeypatch.setattr(writer_threads, "LEAVING", threading.Event())
    monkeypatch.setattr(writer_threads, "_deadline", writer_threads._deadline)
    writer_threads.finish_at_exit()
    assert block.wait_for_writes() == 1
    assert "I like green tea." in block.outbox_path.read_text(encoding="utf-8")


@pytest.mark.slow
async def test_a_killed_process_loses_no_turn_and_resends_none_it_wrote(tmp_path, openai_server) -> None:
    """The first exchange is written, the second is cut off in flight by SIGKILL: the next
    block over the store writes the second and never sends the first again."""
    openai_server.replies = [ToolCall(RECORD, {"memories": [
        {"turn": 1, "kind": "preference", "fact": "The user likes green tea."}]})]
    openai_server.reply = ToolCall(RECORD, {"memories": [  # after the reply it answers
        {"turn": 2, "kind": "event", "fact": "The user moved to Osaka."}]})
    openai_server.faults = ["ok", "hang"]  # the second extraction never answers
    done = run_session(tmp_path, openai_server.base_url, "kill")
    assert done.returncode == -9 and "failed: 0" in done.stdout, done.stderr
    openai_server.faults.clear()  # in case the kill came before the second request
    index = disk_index(tmp_path)
    block = RecencyMemoryBlock(index=index, llm=extraction_llm(openai_server))
    await eventually(lambda: count_memories(index) == 2)
    await eventually(lambda: block.outbox_path is not None and not block.outbox_path.exists())
    assert conversation_requests(openai_server, "I like green tea.") == 1
    assert conversation_requests(openai_server, "I moved to Osaka.") in (1, 2)  # cut off, retried


async def test_forgetting_a_user_drops_their_waiting_conversations(tmp_path, closed_port_url,
                                                                   openai_server) -> None:
    """A user's conversation waiting in the outbox is not written back after forget(user_id=)."""
    index = disk_index(tmp_path)
    down = openai_like_llm(model="qwen-test", api_base=closed_port_url, api_key="k", max_retries=0)
    block = RecencyMemoryBlock(index=index, llm=down, user_id="hanako", user_name="Hanako")
    await block.aput(TALK)
    assert await block.await_writes() == 1 and block.outbox_path.exists()
    forget(index, user_id="hanako")
    assert not block.outbox_path.exists()
    assert await block.await_writes() == 0  # the retry finds it forgotten: nothing asked
    up = openai_like_llm(model="qwen-test", api_base=openai_server.base_url, api_key="k")
    later = RecencyMemoryBlock(index=index, llm=up, user_id="hanako")
    assert await later.await_writes() == 0
    assert openai_server.count("/chat/completions") == 0 and count_memories(index) == 0


@pytest.mark.slow
async def test_a_store_that_failed_after_the_llm_answered_is_retried_without_asking_again(
        openai_server, tmp_path, monkeypatch) -> None:
    """The extracted memories wait in the outbox: a retry stores those, so a second answer
    worded otherwise can never store the same fact twice."""
    openai_server.reply = ToolCall("record_memories", FACTS)
    index = disk_index(tmp_path)
    store_class = type(index.vector_store)
    original, calls = store_class.add, []

    def fail_first(store, nodes, **kwargs):
        calls.append(len(nodes))
        if len(calls) == 1:
            raise OSError("the store hiccuped")
        return original(store, nodes, **kwargs)

    monkeypatch.setattr(store_class, "add", fail_first)
    block = RecencyMemoryBlock(index=index, llm=extraction_llm(openai_server), user_id="hanako",
                               user_name="Hanako")
    await block.aput(TALK)
    await eventually(lambda: block.pending_retries == 1)
    (entry,) = [json.loads(line) for line in block.outbox_path.read_text("utf-8").splitlines()]
    assert len(entry["memories"]) == 1  # what the LLM answered, kept beside the turns
    assert await block.await_writes() == 0
    assert len(openai_server.requests) == 1 and count_memories(index) == 1
    assert not block.outbox_path.exists()


# --- the writer thread, and the turns of a session cut off by a kill ----------------------------

def writers(block: RecencyMemoryBlock) -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == f"{block.name}-writer"]


@pytest.mark.slow
def test_the_writer_drains_its_queue_then_leaves_when_idle(openai_server, monkeypatch) -> None:
    monkeypatch.setattr(memory_block, "_WORKER_IDLE_SECONDS", 0.2)
    openai_server.reply = ToolCall(RECORD, FACTS)
    index = tea_index()
    block = RecencyMemoryBlock(index=index, llm=extraction_llm(openai_server), name="drained")
    for n in range(3):
        asyncio.run(block.aput([ChatMessage(role="user", content=f"I like green tea, cup {n}."),
                                ChatMessage(role="assistant", content="Noted!")]))
    waiting = threading.Thread(target=block.wait_for_writes, daemon=True)
    waiting.start()
    waiting.join(30)
    assert not waiting.is_alive(), "wait_for_writes did not return: the queue never drained"
    assert len(openai_server.requests) == 3 and count_memories(index) == 1
    for writer in writers(block):
        writer.join(10)
    assert writers(block) == []  # idle, the writer thread has left



@pytest.mark.slow
def test_a_cancelled_await_writes_stops_waiting_and_lets_asyncio_run_end(openai_server) -> None:
    """Ctrl-C or a timeout around await_writes: asyncio.run ends while the LLM still holds
    the first of three conversations, instead of its executor waiting for all of them."""
    openai_server.always = "hang"
    block = RecencyMemoryBlock(index=tea_index(), llm=extraction_llm(openai_server))

    async def session() -> None:
        for n in range(3):
            await block.aput([ChatMessage(role="user", content=f"I like green tea, cup {n}."),
                              ChatMessage(role="assistant", content="Noted!")])
        await asyncio.wait_for(block.await_writes(), 0.5)

    with pytest.raises(TimeoutError):
        asyncio.run(session())
    assert len(openai_server.requests) == 1  # the other two still wait in the queue
    openai_server.always = None
    openai_server.release.set()


async def test_a_block_whose_store_was_closed_leaves_its_outbox_file_to_the_next_process(
        tmp_path, openai_server) -> None:
    """The store is closed while the LLM extracts: another process may open it and take the
    outbox file over, so this process's block stores nothing, asks nothing more, never
    rewrites the file, and refuses a new conversation in one line."""
    openai_server.reply = ToolCall(RECORD, FACTS)
    openai_server.faults = ["hang"]
    index = disk_index(tmp_path)
    block = RecencyMemoryBlock(index=index, llm=extraction_llm(openai_server))
    await block.aput(TALK)
    await eventually(lambda: len(openai_server.requests) == 1)  # extracting
    close_memory_index(index)
    theirs = Conversation(turns=(Turn(role="user", text="I have a cat named Tama."),),
                          day=date(2026, 12, 5), user_id=None, user_name=None)
    outbox_path(index).write_text(theirs.to_json() + "\n", encoding="utf-8")  # the next opener's
    openai_server.release.set()
    assert await block.await_writes() == 1  # not stored: the file held it at close
    assert outbox_path(index).read_text(encoding="utf-8") == theirs.to_json() + "\n"
    assert len(openai_server.requests) == 1
    with pytest.raises(MemoryStoreClosedError, match="is closed; open it again"):
        await block.aput(TALK)


async def test_a_store_reopened_in_the_same_process_takes_the_outbox_file_over(
        tmp_path, closed_port_url) -> None:
    """Closed, then opened again here while the first block lives: the new block reads the
    file afresh, so what another process queued meanwhile is retried, never overwritten."""
    down = openai_like_llm(model="qwen-test", api_base=closed_port_url, api_key="k",
                           max_retries=0)
    index = disk_index(tmp_path)
    block = RecencyMemoryBlock(index=index, llm=down)
    await block.aput(TALK)
    assert await block.await_writes() == 1
    close_memory_index(index)
    theirs = Conversation(turns=(Turn(role="user", text="I have a cat named Tama."),),
                          day=date(2026, 12, 5), user_id=None, user_name=None)
    with outbox_path(index).open("a", encoding="utf-8") as file:
        file.write(theirs.to_json() + "\n")
    later = RecencyMemoryBlock(index=disk_index(tmp_path), llm=down)
    with pytest.raises(MemoryStoreClosedError):  # a leftover of the closed index: refused
        RecencyMemoryBlock(index=index, llm=down)
    assert await later.await_writes() == 2  # both retried, both kept
    text = outbox_path(index).read_text(encoding="utf-8")
    assert "I like green tea." in text and "I have a cat named Tama." in text
    assert block.outbox_path == later.outbox_path



KILLED_SESSION_SCRIPT = """
import asyncio, os, signal, sys
from llama_index.core import MockEmbedding
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.memory import Memory
from llama_index_recency import RecencyMemoryBlock, open_memory_index, openai_like_llm

path, chat_url, extraction_url = sys.argv[1:]
index = open_memory_index(MockEmbedding(embed_dim=4), path=path)
extraction = openai_like_llm(model="qwen-test", api_base=extraction_url, api_key="k", max_retries=0)
block = RecencyMemoryBlock(index=index, llm=extraction, user_id="hanako")
memory = Memory.from_defaults(session_id="s", memory_blocks=[block])
chat = openai_like_llm(model="qwen-test", api_base=chat_url, api_key="k", max_retries=0)
mimi = FunctionAgent(tools=[], llm=chat, system_prompt="You are Mimi.")


async def session():
    for said in ("I like green tea.", "I'm hiking tomorrow.", "I moved to Osaka last week."):
        await mimi.run(said, memory=memory)


asyncio.run(session())
os.kill(os.getpid(), signal.SIGKILL)  # before aremember_session
"""


@pytest.mark.slow
async def test_a_session_killed_after_its_last_reply_keeps_that_exchange_in_the_outbox(
        tmp_path, openai_server, closed_port_url) -> None:
    openai_server.replies = ["Nice.", "Have fun!", "Big change!"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PROJECT),
                                                        os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", KILLED_SESSION_SCRIPT, str(tmp_path),
                           openai_server.base_url, closed_port_url], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr
    left = Outbox(tmp_path / "outbox" / "memories.jsonl").claim_orphans()
    turns = Counter((turn.role, turn.text) for entry in left for turn in entry.turns)
    assert turns[("user", "I moved to Osaka last week.")] == 1
    assert turns[("assistant", "Big change!")] == 1
    assert {entry.user_id for entry in left} == {"hanako"}


@pytest.mark.slow
async def test_the_held_exchange_leaves_the_outbox_when_the_session_is_remembered(
        tmp_path, openai_server, extraction_server) -> None:
    extraction_server.reply = NOTHING
    openai_server.replies = ["Nice.", "Big change!"]
    block = RecencyMemoryBlock(index=disk_index(tmp_path), llm=extraction_llm(extraction_server))
    memory = Memory.from_defaults(session_id="held", memory_blocks=[block])
    mimi = agent(openai_server)
    for said in ("I like green tea.", "I moved to Osaka last week."):
        await mimi.run(said, memory=memory)
    assert block.outbox_path is not None and block.outbox_path.exists()
    await block.aremember_session(memory)
    assert not block.outbox_path.exists()
    counts = Counter(turn for request in sent_turns(extraction_server)
                     for turn in without_the_question_answered(request))
    assert counts == Counter([("user", "I like green tea."), ("assistant", "Nice."),
                              ("user", "I moved to Osaka last week."),
                              ("assistant", "Big change!")])

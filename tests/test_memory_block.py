"""RecencyMemoryBlock in LlamaIndex's Memory and agents: recall in B format, scoped writes in the background."""

from __future__ import annotations

import logging
import math
from datetime import date

import pytest
from llama_index.core import MockEmbedding
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent, ReActAgent
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.llms.mock import MockFunctionCallingLLMWithChatMemoryOfLastCall
from llama_index.core.memory import Memory
from llama_index.core.schema import TextNode

from llama_index_recency import (
    RecencyMemoryBlock,
    RecencyPolicy,
    count_memories,
    get_memories,
    memory_node,
    open_memory_index,
    openai_like_llm,
)

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


async def test_writes_are_dated_by_the_policys_reference_date(openai_server) -> None:
    openai_server.reply = ToolCall("record_memories", FACTS)
    index = tea_index()
    block = RecencyMemoryBlock(index=index, policy=POLICY, llm=extraction_llm(openai_server),
                               background=False)
    await block.aput(TALK)
    (stored,) = get_memories(index)
    assert stored.get_content() == f"{TODAY}: The user likes green tea."  # the day it reads on


async def test_a_failed_extraction_keeps_the_messages_and_retries(openai_server, caplog) -> None:
    openai_server.faults = [500, 500]
    openai_server.reply = ToolCall("record_memories", FACTS)
    index = tea_index()
    block = RecencyMemoryBlock(index=index, llm=extraction_llm(openai_server), user_id="hanako",
                               user_name="Hanako")
    with caplog.at_level(logging.WARNING, logger="llama_index_recency"):
        await block.aput(TALK)
        await block.aput(TALK)
        block._jobs.join()  # both attempts done, both failed
    assert block.pending_retries == 2 and count_memories(index) == 0
    assert len([r for r in caplog.records if "kept for a retry" in r.getMessage()]) == 1
    assert block.wait_for_writes() == 0  # the retries succeed
    assert count_memories(index) == 1


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
    assert record.name == "llama_index_recency.writer"
    assert "turn 2, 'The user was told it is noted.': turn 2 is not a user turn" in record.getMessage()


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

"""RecencyMemory.add takes chat messages (role/content dicts, LlamaIndex ChatMessages, one or a
list) and sends them through the writer, over a real HTTP wire to a vLLM-like server; without
an LLM, mixed with facts, or malformed, they are one RecencyError line before any LLM call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole

from llama_index_recency.errors import FinalWriteError, InvalidInputError, RetryableWriteError
from llama_index_recency.models.factories import openai_like_llm
from llama_index_recency.recency_memory import RecencyMemory
from llama_index_recency.storage import index_policy

from conftest import OpenAIServer, ToolCall

TODAY = "2026-09-10"
SAID = "I've switched to green tea."
GREEN_TEA = ToolCall(
    "record_memories",
    {
        "memories": [
            {
                "turn": 1,
                "kind": "habit_change",
                "fact": "The user has switched to green tea.",
                "updates": [],
            }
        ]
    },
)
STORED = "2026-09-09: Taro has switched to green tea."


def llm(server: OpenAIServer):
    return openai_like_llm(
        model="qwen-test", api_base=server.base_url, api_key="k", timeout=5.0, max_retries=0
    )


@pytest.fixture
def memory(e5, tmp_path: Path, extraction_server: OpenAIServer):
    """Taro's memory with an LLM on the loopback server, which answers with GREEN_TEA."""
    extraction_server.reply = GREEN_TEA
    with RecencyMemory(
        e5, path=tmp_path / "store", user_id="taro", user_name="Taro", llm=llm(extraction_server)
    ) as bound:
        bound.policy = index_policy(bound.index, reference_date=TODAY)
        yield bound


def conversation_sent(server: OpenAIServer) -> str:
    """The text of every message the writer sent the LLM."""
    return "\n".join(
        str(message["content"]) for body in server.requests for message in body["messages"]
    )


def test_role_content_dicts_go_through_the_writer_and_return_what_add_returns(
    memory: RecencyMemory, extraction_server: OpenAIServer
) -> None:
    talk = [{"role": "user", "content": SAID}, {"role": "assistant", "content": "Nice!"}]
    stored = memory.add(talk, date="2026-09-09")
    (new,) = stored.new
    assert stored.unchanged == () and stored.changed == {}
    assert memory.get(new).get_content() == STORED
    assert memory.get(new).metadata["user_id"] == "taro"
    assert extraction_server.rejected == [] and SAID in conversation_sent(extraction_server)
    again = memory.add(talk, date="2026-09-09")  # the same conversation: nothing written
    assert again.new == () and again.unchanged == (new,)
    assert [node.node_id for node in memory.get_all()] == [new]


def test_one_message_and_llama_index_chat_messages_are_taken(
    memory: RecencyMemory, extraction_server: OpenAIServer
) -> None:
    (one,) = memory.add({"role": "user", "content": SAID}, date="2026-09-09").new
    system = "You are Mimi, a desk companion."
    messages = [
        ChatMessage(role=MessageRole.SYSTEM, content=system),
        ChatMessage(role=MessageRole.USER, content=SAID),
    ]
    assert memory.add(messages, date="2026-09-09").unchanged == (one,)
    assert memory.add(ChatMessage(role="user", content=SAID), date="2026-09-09").unchanged == (one,)
    assert len(extraction_server.requests) == 3
    sent = json.dumps(extraction_server.requests[1], ensure_ascii=False)
    assert SAID in sent and system not in sent  # the writer reads user and assistant turns


def test_messages_take_metadata_and_a_user_per_call(
    e5, tmp_path: Path, extraction_server: OpenAIServer
) -> None:
    extraction_server.reply = GREEN_TEA
    with RecencyMemory(e5, path=tmp_path / "store", llm=llm(extraction_server)) as shared:
        (new,) = shared.add(
            [{"role": "user", "content": SAID}],
            user_id="hanako",
            date="2026-09-09",
            metadata={"source": "chat"},
        ).new
        stored = shared.get(new, user_id="hanako")
        assert stored.metadata["source"] == "chat" and stored.metadata["user_id"] == "hanako"
        assert stored.get_content() == "2026-09-09: The user has switched to green tea."
        assert shared.get_all(user_id="taro") == []


async def test_the_async_twin_takes_messages(memory: RecencyMemory) -> None:
    stored = await memory.aadd([{"role": "user", "content": SAID}], date="2026-09-09")
    assert [memory.get(new).get_content() for new in stored.new] == [STORED]


def test_a_failed_llm_call_stores_nothing(
    memory: RecencyMemory, extraction_server: OpenAIServer
) -> None:
    extraction_server.faults = [500]
    with pytest.raises(RetryableWriteError):
        memory.add([{"role": "user", "content": SAID}])
    extraction_server.reply = json.dumps(
        {"memories": [{"turn": 1, "kind": "habit_change", "fact": "Switched to green tea."}]}
    )  # no subject
    with pytest.raises(FinalWriteError):
        memory.add([{"role": "user", "content": SAID}])
    assert memory.get_all() == []


def one_line(call, memory: RecencyMemory) -> str:
    with pytest.raises(InvalidInputError) as raised:
        call(memory)
    message = str(raised.value)
    assert "\n" not in message
    return message


def test_messages_without_an_llm_are_refused_in_one_line_saying_how_to_give_one(
    e5, tmp_path: Path
) -> None:
    with RecencyMemory(e5, path=tmp_path / "store", user_id="taro") as no_llm:
        for data in ({"role": "user", "content": SAID}, [ChatMessage(role="user", content=SAID)]):
            message = one_line(lambda m, data=data: m.add(data), no_llm)
            assert "chat messages need an LLM" in message and "llm=" in message
            assert SAID in message  # names what was given
        assert no_llm.get_all() == []
        assert no_llm.add("The user drinks tea.").new  # facts need no LLM


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (
            ["The user likes tea.", {"role": "user", "content": SAID}],
            ["not both in one call", "'The user likes tea.'", SAID],
        ),
        (
            [{"role": "user", "content": SAID}, ("The user likes tea.", "2026-09-01")],
            ["not both in one call", "('The user likes tea.', '2026-09-01')"],
        ),
        ([{"role": "human", "content": SAID}], ["role is one of", "got 'human'"]),
        (
            [{"role": "user", "content": [{"type": "text", "text": SAID}]}],
            ["content is text", "[{'type': 'text'"],
        ),
        ([{"role": "user"}], ["has a 'role' and a 'content'", "{'role': 'user'}"]),
        ([{"role": "user", "content": "caf\ud800"}], ["lone surrogate", "'caf\\ud800'"]),
    ],
    ids=[
        "fact and message",
        "message and pair",
        "unknown role",
        "content not text",
        "no content",
        "lone surrogate",
    ],
)
def test_bad_or_mixed_messages_are_one_line_naming_them_before_any_llm_call(
    memory: RecencyMemory, extraction_server: OpenAIServer, data, named
) -> None:
    message = one_line(lambda m: m.add(data), memory)
    assert all(part in message for part in named), message
    assert extraction_server.requests == [] and memory.get_all() == []


def test_a_metadata_key_the_writer_sets_is_refused_before_any_llm_call(
    memory: RecencyMemory, extraction_server: OpenAIServer
) -> None:
    for key in ("kind", "date", "user_id", "supersedes"):
        message = one_line(
            lambda m, key=key: m.add([{"role": "user", "content": SAID}], metadata={key: "x"}),
            memory,
        )
        assert f"metadata key {key!r}" in message
    assert extraction_server.requests == []


def test_only_system_messages_store_nothing_and_ask_nothing(
    memory: RecencyMemory, extraction_server: OpenAIServer
) -> None:
    stored = memory.add(
        [{"role": "system", "content": "You are Mimi."}, {"role": "user", "content": "  "}]
    )
    assert (stored.new, stored.unchanged) == ((), ())
    assert extraction_server.requests == []

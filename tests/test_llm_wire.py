"""The B-format prompt on the wire: LlamaIndex engines talking to a real loopback OpenAI-compatible server."""

from __future__ import annotations

import json
import re

import httpx
import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.bridge.pydantic import BaseModel
from llama_index.core.prompts import PromptTemplate
from llama_index.core.tools import FunctionTool

from llama_index_recency import (
    MemoryResponseSynthesizer,
    RecencyBonusPostprocessor,
    RecencyChatEngine,
    memory_node,
    open_memory_index,
    openai_like_llm,
)
from llama_index_recency.integrations.prompts import (
    RETRIEVED_MEMORY_CONTEXT_TEMPLATE,
    RETRIEVED_MEMORY_PROMPT,
)

from conftest import QUERY, KnownCosineEmbedding, OpenAIServer, ToolCall, cosines_for

TODAY = "2026-09-10"
MEMORIES = [
    ("Taro drinks coffee black.", "2026-08-20", 0.471),
    ("Taro has been drinking sweet café au lait lately.", "2026-09-01", 0.441),
    ("Taro likes trains.", "2026-04-01", 0.430),
    ("Taro has a cat.", "2026-04-02", 0.200),
]
BLOCK = (
    "<retrieved_memory>\n"
    "2026-08-20: Taro drinks coffee black.\n\n"
    "2026-09-01: Taro has been drinking sweet café au lait lately.\n"
    "</retrieved_memory>"
)


def memory_index(use_async: bool = False):
    nodes = [memory_node(fact, day) for fact, day, _ in MEMORIES]
    embed = KnownCosineEmbedding(cosines_for(nodes, [raw for _, _, raw in MEMORIES]))
    index = open_memory_index(embed, use_async=use_async)
    return index, nodes


@pytest.fixture
def index():
    index, nodes = memory_index()
    index.insert_nodes(nodes)
    return index


def llm(server: OpenAIServer):
    return openai_like_llm(model="qwen-test", api_base=server.base_url, api_key="test-key",
                           max_retries=0)


def recency(**kwargs: object) -> RecencyBonusPostprocessor:
    return RecencyBonusPostprocessor(reference_date=TODAY, **kwargs)


@pytest.mark.slow
def test_query_engine_sends_b_format_with_thinking_off(index, openai_server: OpenAIServer) -> None:
    engine = index.as_query_engine(
        llm=llm(openai_server),
        similarity_top_k=8,
        node_postprocessors=[recency()],
        text_qa_template=RETRIEVED_MEMORY_PROMPT.partial_format(today=TODAY),
    )
    response = engine.query(QUERY)

    assert response.response == openai_server.reply
    assert [round(n.score, 3) for n in response.source_nodes] == [0.482, 0.467]
    (request,) = openai_server.requests
    assert request["model"] == "qwen-test"
    # Thinking off in DashScope's form and in vLLM's / SGLang's.
    assert request["enable_thinking"] is False
    assert request["chat_template_kwargs"] == {"enable_thinking": False}
    assert "tools" not in request and "tool_choice" not in request
    system, user = request["messages"]
    assert system["role"] == "system" and user == {"role": "user", "content": QUERY}
    assert system["content"].startswith(f"Today is {TODAY}.")
    assert system["content"].endswith(BLOCK)
    assert "trains" not in system["content"]  # 0.430 + tiny bonus stays under 0.45


@pytest.mark.slow
def test_no_memory_over_threshold_still_reaches_the_llm_without_a_block(
    index, openai_server: OpenAIServer
) -> None:
    engine = index.as_query_engine(
        llm=llm(openai_server),
        similarity_top_k=8,
        node_postprocessors=[recency(threshold=0.9)],
        response_synthesizer=MemoryResponseSynthesizer(
            llm=llm(openai_server),
            text_qa_template=RETRIEVED_MEMORY_PROMPT.partial_format(today=TODAY),
        ),
    )
    response = engine.query(QUERY)
    assert response.response == openai_server.reply
    assert response.source_nodes == []
    assert openai_server.last_messages() == [
        {"role": "system", "content": f"Today is {TODAY}."},
        {"role": "user", "content": QUERY},
    ]


@pytest.mark.slow
def test_stock_engines_skip_the_llm_when_nothing_passes(index, openai_server: OpenAIServer) -> None:
    """Why MemoryResponseSynthesizer exists: LlamaIndex short-circuits on zero nodes."""
    engine = index.as_query_engine(llm=llm(openai_server), similarity_top_k=8,
                                   node_postprocessors=[recency(threshold=0.9)])
    assert engine.query(QUERY).response == "Empty Response"
    assert openai_server.requests == []


@pytest.mark.slow
def test_stock_context_chat_engine_with_the_b_format_template(
    index, openai_server: OpenAIServer
) -> None:
    chat = index.as_chat_engine(
        chat_mode="context",
        llm=llm(openai_server),
        similarity_top_k=8,
        node_postprocessors=[recency()],
        context_template=RETRIEVED_MEMORY_CONTEXT_TEMPLATE.partial_format(today=TODAY),
        system_prompt="You are Mimi, Taro's desk companion.",
    )
    assert chat.chat(QUERY).response == openai_server.reply
    system = openai_server.system_text()
    assert system.startswith(f"Today is {TODAY}.")
    assert BLOCK in system
    assert system.endswith("You are Mimi, Taro's desk companion.")
    assert openai_server.requests[-1]["enable_thinking"] is False


@pytest.mark.slow
def test_recency_chat_engine_answers_with_and_without_memories(
    index, openai_server: OpenAIServer
) -> None:
    chat = RecencyChatEngine.from_defaults(
        retriever=index.as_retriever(similarity_top_k=8),
        node_postprocessors=[recency(threshold=0.46)],
        llm=llm(openai_server),
        context_template=RETRIEVED_MEMORY_CONTEXT_TEMPLATE.partial_format(today=TODAY),
        system_prompt="You are Mimi.",
    )
    first = chat.chat(QUERY)
    assert [round(n.score, 3) for n in first.source_nodes] == [0.482, 0.467]
    assert BLOCK in openai_server.system_text()

    chat.reset()
    empty = RecencyChatEngine.from_defaults(
        retriever=index.as_retriever(similarity_top_k=8),
        node_postprocessors=[recency(threshold=0.9)],
        llm=llm(openai_server),
        system_prompt="You are Mimi.",
    )
    reply = empty.chat("How are you?")
    assert reply.response == openai_server.reply and reply.source_nodes == []
    assert "retrieved_memory" not in openai_server.system_text()
    assert openai_server.system_text().endswith("You are Mimi.")

    streamed = empty.stream_chat("And now?")
    assert "".join(streamed.response_gen) == openai_server.reply
    assert openai_server.requests[-1]["stream"] is True
    assert [m["content"] for m in openai_server.last_messages()[1:]] == [
        "How are you?", openai_server.reply, "And now?"
    ]


@pytest.mark.slow
async def test_async_chat_engine_over_async_qdrant(openai_server: OpenAIServer) -> None:
    index, nodes = memory_index(use_async=True)
    await index.ainsert_nodes(nodes)
    chat = RecencyChatEngine.from_defaults(
        retriever=index.as_retriever(similarity_top_k=8),
        node_postprocessors=[recency()],
        llm=llm(openai_server),
        context_template=RETRIEVED_MEMORY_CONTEXT_TEMPLATE.partial_format(today=TODAY),
    )
    response = await chat.achat(QUERY)
    assert [round(n.score, 3) for n in response.source_nodes] == [0.482, 0.467]
    assert BLOCK in openai_server.system_text()

    nothing = RecencyChatEngine.from_defaults(
        retriever=index.as_retriever(similarity_top_k=8),
        node_postprocessors=[recency(threshold=0.9)],
        llm=llm(openai_server),
    )
    assert (await nothing.achat("Hi")).response == openai_server.reply
    assert "retrieved_memory" not in openai_server.system_text()


def test_llm_factory_needs_an_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RECENCY_LLM_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="RECENCY_LLM_BASE_URL"):
        openai_like_llm()
    monkeypatch.setenv("RECENCY_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("RECENCY_LLM_MODEL", "qwen-env")
    configured = openai_like_llm()
    assert (configured.api_base, configured.model) == ("http://127.0.0.1:9/v1", "qwen-env")


# -- the loopback server validates like vLLM -------------------------------------------------

USER = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"not json", "the body is not JSON"),
        ({"model": "m"}, "`messages` must be a non-empty list"),
        ({"model": "m", "messages": []}, "`messages` must be a non-empty list"),
        ({"model": "m", "messages": [{"role": "narrator", "content": "x"}]}, "role must be one of"),
        ({"model": "m", "messages": [{"role": "user", "content": 3}]},
         "content must be a string or a list"),
        ({"model": "m", "messages": USER, "tool_choice": "required"},
         "When using `tool_choice`, `tools` must be set."),
        ({"model": "m", "messages": USER, "tools": [], "tool_choice": "auto"},
         "When using `tool_choice`, `tools` must be set."),
        ({"model": "m", "messages": USER,
          "tools": [{"type": "function", "function": {"name": "x"}}]},
         "tools\\[0\\] must be"),
        ({"model": "m", "messages": USER, "tools": [TOOL],
          "tool_choice": {"type": "function", "function": {"name": "other"}}},
         "Tool 'other' has not been passed in `tools`."),
        ({"model": "m", "messages": USER, "response_format": {"type": "yaml"}},
         "`response_format` type must be one of"),
        ({"model": "m", "messages": USER, "response_format": {"type": "json_schema"}},
         "'json_schema' field must be provided"),
    ],
)
@pytest.mark.slow
def test_server_rejects_what_vllm_rejects(openai_server: OpenAIServer, body, error) -> None:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    answer = httpx.post(f"{openai_server.base_url}/chat/completions", content=content,
                        headers={"Content-Type": "application/json"})
    assert answer.status_code == 400
    assert re.search(error, answer.json()["error"]["message"])
    assert len(openai_server.rejected) == 1


def test_server_accepts_extra_fields_tools_and_tool_history(openai_server: OpenAIServer) -> None:
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c", "type": "function",
                 "function": {"name": "lookup", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "42"},
        ],
        "tools": [TOOL],
        "tool_choice": "auto",
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}},
        "enable_thinking": False,
        "chat_template_kwargs": {"enable_thinking": False},
    }
    answer = httpx.post(f"{openai_server.base_url}/chat/completions", json=body)
    assert answer.status_code == 200 and openai_server.rejected == []


def test_structured_predict_sends_its_tool_with_a_named_choice(openai_server: OpenAIServer) -> None:
    """With a function-calling LLM, LlamaIndex's structured_predict offers the schema as a tool;
    "required" with one tool is sent as that tool's name (vLLM before 0.8.3 knows only that)."""

    class Song(BaseModel):
        """A song the user likes."""

        title: str

    openai_server.reply = ToolCall("Song", {"title": "Lemon"})
    prompt = PromptTemplate("Name a song about {x}.")
    song = llm(openai_server).structured_predict(Song, prompt, x="fruit")
    assert song == Song(title="Lemon")
    (request,) = openai_server.requests
    assert [tool["function"]["name"] for tool in request["tools"]] == ["Song"]
    assert request["tool_choice"] == {"type": "function", "function": {"name": "Song"}}


@pytest.mark.slow
async def test_function_agent_calls_a_tool_over_the_wire(openai_server: OpenAIServer) -> None:
    looked_up = []

    def count_memories(topic: str) -> str:
        """How many memories mention ``topic``."""
        looked_up.append(topic)
        return "3 memories mention trains"

    openai_server.replies = [ToolCall("count_memories", {"topic": "trains"})]
    openai_server.reply = "You told me about trains three times!"
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(count_memories)],
                          llm=llm(openai_server), system_prompt="You are Mimi.")
    response = await agent.run("How often did I mention trains?")

    assert str(response) == "You told me about trains three times!"
    assert looked_up == ["trains"]
    assert openai_server.rejected == []
    first, second = openai_server.requests
    assert [tool["function"]["name"] for tool in first["tools"]] == ["count_memories"]
    assert first["chat_template_kwargs"] == {"enable_thinking": False}
    assert second["messages"][-2]["tool_calls"][0]["function"] == {
        "name": "count_memories", "arguments": json.dumps({"topic": "trains"})
    }
    assert second["messages"][-1] == {
        "role": "tool", "content": "3 memories mention trains",
        "tool_call_id": "call-count_memories",
    }

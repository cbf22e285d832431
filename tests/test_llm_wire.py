"""The B-format prompt on the wire: LlamaIndex engines talking to a real loopback OpenAI-compatible server."""

from __future__ import annotations

import pytest

from llama_index_recency import (
    RETRIEVED_MEMORY_CONTEXT_TEMPLATE,
    RETRIEVED_MEMORY_PROMPT,
    MemoryResponseSynthesizer,
    RecencyBonusPostprocessor,
    RecencyChatEngine,
    memory_node,
    open_memory_index,
    openai_like_llm,
)

from conftest import QUERY, OpenAIServer, KnownCosineEmbedding, cosines_for

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
    assert request["enable_thinking"] is False
    system, user = request["messages"]
    assert system["role"] == "system" and user == {"role": "user", "content": QUERY}
    assert system["content"].startswith(f"Today is {TODAY}.")
    assert system["content"].endswith(BLOCK)
    assert "trains" not in system["content"]  # 0.430 + tiny bonus stays under 0.45


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


def test_stock_engines_skip_the_llm_when_nothing_passes(index, openai_server: OpenAIServer) -> None:
    """Why MemoryResponseSynthesizer exists: LlamaIndex short-circuits on zero nodes."""
    engine = index.as_query_engine(llm=llm(openai_server), similarity_top_k=8,
                                   node_postprocessors=[recency(threshold=0.9)])
    assert engine.query(QUERY).response == "Empty Response"
    assert openai_server.requests == []


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

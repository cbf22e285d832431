"""Vague references (issue 19): the detector, its held-out measure, and the note in the prompt."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
from conftest import KnownCosineEmbedding, OpenAIServer, cosines_for
from llama_index.core.memory import Memory
from llama_index.core.query_engine import RetrieverQueryEngine

from llama_index_recency import (
    MemoryResponseSynthesizer,
    QdrantRecencyRetriever,
    RecencyChatEngine,
    RecencyMemoryBlock,
    RecencyPolicy,
    memory_node,
    open_memory_index,
    openai_like_llm,
)
from llama_index_recency.integrations.prompts import MEMORY_RULES, VAGUE_REFERENCE_NOTE, render_memory_block
from llama_index_recency.ranking.vague import VAGUE_REFERENCE_PATTERNS, is_vague_reference

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "vague_reference.py"


@pytest.mark.parametrize(
    "question",
    [
        "How did that thing you were working on go?",
        "How did it go?",
        "So, about the stuff I mentioned the other day...",
        "Did that work out?",
        "What ended up happening with that?",
        "How did what you were up to turn out?",
        "How did the project turn out?",
        "How’d it go?",  # a curly apostrophe
        "前にやってたあれ、どうなった？",
        "あれ、どうなった？",
        "この前言ってたやつ",
        "例の件",
        "例の件、どうなった？",
        "ねー、あれどうなった？",
        "うまくいった？",
    ],
)
def test_vague_references_are_detected(question: str) -> None:
    assert is_vague_reference(question) is True


@pytest.mark.parametrize(
    "question",
    [
        # deixis or a time word, but real content
        "Who won the game the other day?",
        "What did I cook the other day?",
        "How did my dentist appointment go?",
        "Remember that keyboard I was looking at recently?",
        "How did the trip to Nagano go?",
        "この前のワールドカップ、どっちが勝った？",
        "この前のワールドカップ、どうなった？",
        "歯医者の予約、どうなった？",
        "この前のライブ、どうだった？",
        # ordinary questions and chat, no vague referent
        "What's my favorite food?",
        "How do I take my coffee again?",
        "How's it going?",
        "Can you say that again?",
        "That was fun!",
        "What's dark matter, in plain words?",
        "One thing at a time.",
        "Thanks!",
        "おはよう",
        "ありがとう",
        "それ、いいね！",
        "あれ？",
        "",
    ],
)
def test_content_questions_and_chat_are_not_vague(question: str) -> None:
    assert is_vague_reference(question) is False


def test_the_patterns_are_regular_expressions_for_both_languages() -> None:
    compiled = [re.compile(p, re.IGNORECASE) for p in VAGUE_REFERENCE_PATTERNS]
    assert any(p.search("that thing") for p in compiled)
    assert any(p.search("例の件") for p in compiled)


# -- precision and recall on the phrasings written for this issue ------------------------------


@pytest.fixture(scope="module")
def benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vague_reference", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_the_tune_phrasings_are_all_classified_right(benchmark: ModuleType) -> None:
    for row in benchmark.scores():
        if row.split == "tune":
            assert (row.precision, row.recall) == (1.0, 1.0), (row.language, row.missed,
                                                               row.false_alarms)


@pytest.mark.parametrize(("language", "precision", "recall"), [("en", 1.0, 0.6),
                                                                ("ja", 0.9, 0.5)])
def test_heldout_precision_and_recall(benchmark: ModuleType, language, precision, recall) -> None:
    """Held-out phrasings (other referents, predicates and time words; never tuned on):
    English 18/30 found with no false alarm (P 1.00, R 0.60), Japanese 15/30 with one
    (P 0.94, R 0.50). Recall falls short of 0.8: outcome nouns the lists lack ("upshot",
    「結果」) read as content. Precision holds above 0.9."""
    (row,) = [r for r in benchmark.scores() if (r.split, r.language) == ("heldout", language)]
    assert row.precision >= precision and row.recall >= recall, (row.missed, row.false_alarms)
    assert "| heldout | en | 30 | 40 |" in benchmark.table(benchmark.scores())


# -- the prompt says so ------------------------------------------------------------------------


def test_the_note_follows_the_rules_only_when_the_reference_is_vague() -> None:
    memories = "2026-09-08: Taro made mentaiko pasta at home."
    vague = render_memory_block(memories, vague_reference=True)
    assert vague.index(MEMORY_RULES) < vague.index(VAGUE_REFERENCE_NOTE)
    assert vague.index(VAGUE_REFERENCE_NOTE) < vague.index("<retrieved_memory>")
    assert VAGUE_REFERENCE_NOTE not in render_memory_block(memories)
    assert render_memory_block("", vague_reference=True) == ""


TODAY = "2026-09-10"
VAGUE = "How did that thing you were working on go?"
MEMORIES = [
    ("Taro made mentaiko pasta at home.", "2026-09-08", 0.20),
    ("Taro bought a keyboard.", "2026-06-01", 0.30),  # neither passing nor recent
]


def memory_index(use_async: bool = False):
    nodes = [memory_node(fact, day) for fact, day, _ in MEMORIES]
    index = open_memory_index(
        KnownCosineEmbedding(cosines_for(nodes, [raw for *_, raw in MEMORIES])),
        use_async=use_async,
    )
    return index, nodes


def retriever(index) -> QdrantRecencyRetriever:
    return QdrantRecencyRetriever.from_index(index, RecencyPolicy(reference_date=TODAY))


def llm(server: OpenAIServer):
    return openai_like_llm(model="qwen-test", api_base=server.base_url, api_key="test-key",
                           max_retries=0)


def system_of(server: OpenAIServer) -> str:
    system = server.requests[-1]["messages"][0]
    assert system["role"] == "system"
    return system["content"]


@pytest.mark.slow
def test_the_synthesizer_adds_the_note_for_a_vague_reference(openai_server) -> None:
    index, nodes = memory_index()
    index.insert_nodes(nodes)
    engine = RetrieverQueryEngine(
        retriever(index), response_synthesizer=MemoryResponseSynthesizer(llm=llm(openai_server),
                                                                        today=TODAY))
    response = engine.query(VAGUE)
    assert [n.node.get_content() for n in response.source_nodes] == [
        "2026-09-08: Taro made mentaiko pasta at home."]
    system = system_of(openai_server)
    assert VAGUE_REFERENCE_NOTE in system
    assert "2026-09-08: Taro made mentaiko pasta at home." in system
    assert "vague_reference" not in system  # the mark itself never reaches the LLM

    engine.query("What did I buy?")  # not vague, nothing passes: no block, no note
    assert system_of(openai_server) == f"Today is {TODAY}."


@pytest.mark.slow
async def test_the_chat_engine_and_async_query_add_the_note(openai_server) -> None:
    index, nodes = memory_index(use_async=True)
    await index.ainsert_nodes(nodes)
    engine = RecencyChatEngine.from_defaults(retriever=retriever(index), llm=llm(openai_server),
                                             today=TODAY)
    await engine.achat(VAGUE)
    assert VAGUE_REFERENCE_NOTE in system_of(openai_server)
    query_engine = RetrieverQueryEngine(
        retriever(index), response_synthesizer=MemoryResponseSynthesizer(llm=llm(openai_server),
                                                                        today=TODAY))
    await query_engine.aquery(VAGUE)
    assert VAGUE_REFERENCE_NOTE in system_of(openai_server)


async def test_the_memory_block_adds_the_note_for_a_vague_reference() -> None:
    index, nodes = memory_index()
    index.insert_nodes(nodes)
    block = RecencyMemoryBlock(index=index, policy=RecencyPolicy(reference_date=TODAY))
    memory = Memory.from_defaults(session_id="vague", memory_blocks=[block])
    system = (await memory.aget(input=VAGUE))[0].content
    assert VAGUE_REFERENCE_NOTE in system
    assert "2026-09-08: Taro made mentaiko pasta at home." in system
    plain = await Memory.from_defaults(session_id="plain", memory_blocks=[block]).aget(
        input="What did I buy?")
    assert all("retrieved_memory" not in (m.content or "") for m in plain)

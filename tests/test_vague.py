"""Vague references (issue 19, issue 39 item 13): the detector, its held-out measure, and the
note in the prompt."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
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
from llama_index_recency.integrations.prompts import (
    MEMORY_RULES,
    VAGUE_REFERENCE_NOTE,
    render_memory_block,
)
from llama_index_recency.ranking.vague import VAGUE_REFERENCE_PATTERNS, is_vague_reference

from conftest import KnownCosineEmbedding, OpenAIServer, cosines_for

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
        # outcome nouns: "the upshot" points back; "luck", "success", "update" ask how "it" went
        "What was the upshot?",
        "Right, so the matter from a while ago, what's the verdict?",
        "Any luck with it?",
        "Was it a success?",
        "Care to give me an update on that?",
        "Any progress on the thing you were dealing with lately?",
        "Any news on that?",
        # "situation" and "bit" are general nouns
        "Okay so, about the situation from a few days ago...",
        "Uh, the bit I was rambling about earlier... recall it?",
        # outcome nouns 「結果」「進展」「首尾」「具合」「順調」「無事」「〜感じ」
        "結果、出た？",
        "進展あった？",
        "で、結末は？",
        "そういえばさ、あっちの首尾はどう？",
        "この頃取り組んでたの、どんな具合？",
        "そっちの方は順調？",
        "例の話、無事に済んだ？",
        "どんな感じになった？",
        "この頃のあれ、いい感じ？",
        # what was done: a past verb before 「あれ」 or the nominaliser 「の」
        "ほら、ちょっと前に相談したアレ。",
        "先日話してたの、結局どっちにした？",
        "ちょっと前にやってたの、仕上がった？",
        # 「最終的に」 is a time word, 「あの辺」 a general noun, 「間に合った」 a predicate
        "あれって、最終的にどう落ち着いたの？",
        "あの辺のこと、片付いた？",
        "ほら、例のもの、間に合った？",
    ],
)
def test_the_rules_of_issue_39_find_the_tune_phrasings(question: str) -> None:
    """Phrasings of the ``tune2`` split the rules were written for (issue 39 item 13)."""
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
        # an outcome word or a referent with real content, or no referent at all
        "Did you see the news this morning?",
        "What's the plan for growing the business?",
        "Any luck with the job hunt?",
        "Any updates?",
        "Good luck!",
        "面接の結果、どうなった？",
        "検査結果、出た？",
        "いい感じのカフェ知ってる？",
        "先日大家さんのことで話したの、覚えてる？",  # 「大家さん」: a noun before an honorific
        "あれって何の花？",
        "長野の件、どうなった？",
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


def test_the_tune_phrasings_are_classified_right(benchmark: ModuleType) -> None:
    """``tune`` all right; ``tune2`` all right but for three English phrasings the lists
    leave out ("plan" as a general noun would also take "What's the plan for growing the
    business?", a conversation turn of the retrieval benchmark)."""
    for row in benchmark.scores():
        if row.split == "tune" or (row.split, row.language) == ("tune2", "ja"):
            assert (row.precision, row.recall) == (1.0, 1.0), (row.language, row.missed,
                                                               row.false_alarms)
    (tune2_en,) = [r for r in benchmark.scores() if (r.split, r.language) == ("tune2", "en")]
    assert (tune2_en.missed, tune2_en.false_alarms) == (
        ("How did your little mission fare?", "Oh hey, what became of that plan you had?",
         "So? Good news or bad news?"), ())


HELDOUT_ERRORS = {
    # vague, missed: "my asking" and "any word" read as content; a Kansai ending
    # (「なったん」) and a present progressive (「なってる」) are no past frame
    "If you don't mind my asking, how did that turn out?",
    "Any word on that thing?",
    "あれ、どないなったん？",
    "あれ、どうなってる？",
    # near misses taken as vague: content after a preposition ("on rice", "about pasta"),
    # weather "it", a content word in hiragana
    "What's that stuff you put on rice?",
    "What was the thing I asked about pasta?",
    "Did it rain yesterday?",
    "ごはん、どうだった？",
}
"""The held-out phrasings the detector gets wrong (before and after issue 39 item 13)."""


def test_the_heldout_labels_are_what_the_detector_says_but_for_the_listed_errors(
        benchmark: ModuleType) -> None:
    """Every held-out phrasing (written before the issue 39 rules, never tuned on) is
    classified as labelled except :data:`HELDOUT_ERRORS`, each of which is still wrong:
    a fix or a new error both show here."""
    data = json.loads(benchmark.DATA.read_text(encoding="utf-8"))["heldout"]
    for language in ("en", "ja"):
        for label, vague in (("vague", True), ("not_vague", False)):
            for question in data[language][label]:
                expected = vague if question not in HELDOUT_ERRORS else not vague
                assert is_vague_reference(question) is expected, question
    assert "| heldout | en | 20 | 20 | 18/3 |" in benchmark.table(benchmark.scores())
    assert "| heldout | ja | 21 | 20 | 19/1 |" in benchmark.table(benchmark.scores())


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


@pytest.mark.parametrize("question", ["Did you finish that the other day?",
                                      "How did that go the other week?"])
def test_a_pronoun_before_the_other_day_is_still_a_vague_reference(question: str) -> None:
    """"the other day" is a time word, not "the" + content after "that"."""
    assert is_vague_reference(question)

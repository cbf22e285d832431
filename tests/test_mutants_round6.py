"""Behaviour the sixth mutation run (#39 item 14) found unchecked, each test failing under
its mutant: the block's widened query and the exchange it holds for the next process; an
undated memory under on_missing_date='raise' on both engines; no search by a word whose
holders were all seen; newer versions (at exactly the threshold, in a store of three, with
the question's words, identical vectors, in the gate's fit); a question about the present
and its event; a store held by an async client alone; the outbox across a forget and
without a file; the gate's fit (the middle of the gap, each language's threshold, a refused
fit, the bank's languages); the memory object's model, search limit and filters, and the
gate fit after an update or a remembered conversation."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import tempfile
import warnings
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from llama_index.core import MockEmbedding
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.memory import Memory
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilter,
    MetadataFilters,
)
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import AsyncQdrantClient, QdrantClient

from llama_index_recency import (
    QdrantRecencyRetriever,
    RecencyMemory,
    RecencyMemoryBlock,
    RecencyPolicy,
    memory_node,
    open_memory_index,
    openai_like_llm,
)
from llama_index_recency.errors import InvalidInputError
from llama_index_recency.fitting.gate_fit import fit_gate, offtopic_questions
from llama_index_recency.integrations import memory_block
from llama_index_recency.querying.gate import offtopic_best
from llama_index_recency.ranking.intent import question_intent
from llama_index_recency.ranking.lexical import LexicalQuery, fused, question_terms, terms
from llama_index_recency.ranking.plan import MemorySearch, exact_recency_search
from llama_index_recency.ranking.policy import MemoryDateError, parse_memory_date
from llama_index_recency.ranking.supersession import newer_versions_first
from llama_index_recency.records.nodes import Turn
from llama_index_recency.storage import (
    Conversation,
    Outbox,
    QdrantEdgeVectorStore,
    count_memories,
    embedding_of,
    gate_record,
    gate_refusal,
)
from llama_index_recency.storage.engine import run_search
from llama_index_recency.writing.updates import forget

from conftest import ToolCall, drive_plan

# --- the memory block --------------------------------------------------------------------------


class TextVectors(BaseEmbedding):
    """A test embedding that gives questions and memories alike the vector ``_vector`` makes."""

    def _vector(self, text: str) -> list[float]:
        raise NotImplementedError

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vector(text)


class KeywordEmbedding(TextVectors):
    """A text is the count of each keyword it holds as a whole word, plus a little of a
    common axis: what a tokenising model sees of a word, without the model."""

    keywords: tuple[str, ...] = ("coffee", "tea")

    @classmethod
    def class_name(cls) -> str:
        return "KeywordEmbedding"

    def _vector(self, text: str) -> list[float]:
        words = re.findall(r"\w+", text.lower())
        vector = [float(words.count(keyword)) for keyword in self.keywords] + [0.3]
        norm = math.sqrt(sum(x * x for x in vector))
        return [x / norm for x in vector]


async def test_a_widened_query_keeps_the_last_word_of_a_message_without_punctuation() -> None:
    """Chat messages often end without a full stop: with query_turns=2 the earlier message's
    last word still counts as a word of the query, so the memory about it is recalled."""
    index = open_memory_index(KeywordEmbedding(), embedding_name="keywords")
    index.insert_nodes([memory_node("Taro drinks coffee black.", "2026-09-01")])
    history = [
        ChatMessage(role="user", content="I ran out of coffee"),
        ChatMessage(role="assistant", content="Oh no!"),
        ChatMessage(role="user", content="what should I buy"),
    ]
    policy = RecencyPolicy(reference_date="2026-09-10")
    assert await RecencyMemoryBlock(index=index, policy=policy).aget(history) == ""
    widened = await RecencyMemoryBlock(index=index, policy=policy, query_turns=2).aget(history)
    assert "2026-09-01: Taro drinks coffee black." in widened


class Clock:
    """The local calendar day as the block reads it (date.today), set by the test."""

    def __init__(self, day: date) -> None:
        self.day = day

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        clock = self

        class Today(date):
            @classmethod
            def today(cls) -> date:  # type: ignore[override]
                return clock.day

        monkeypatch.setattr(memory_block, "date", Today)


def waiting(path: Path) -> list[Any]:
    """What the next process opening the store would find to write (a fresh outbox's read)."""
    return Outbox(path).claim_orphans()


async def test_the_held_exchange_keeps_the_day_it_was_said_when_read_again_after_midnight(
    tmp_path, closed_port_url, monkeypatch
) -> None:
    """The latest user message is held in the outbox for the next process; read again after
    midnight with nothing new said, it stays dated the day it was said."""
    clock = Clock(date(2026, 9, 10))
    clock.install(monkeypatch)
    index = open_memory_index(MockEmbedding(embed_dim=4), path=tmp_path)
    llm = openai_like_llm(model="qwen-test", api_base=closed_port_url, api_key="k", max_retries=0)
    block = RecencyMemoryBlock(index=index, llm=llm, user_id="hanako")
    said = [ChatMessage(role="user", content="I moved to Osaka.")]
    await block.aget(said, session_id="s")
    clock.day = date(2026, 9, 11)
    await block.aget(said, session_id="s")
    assert block.outbox_path is not None
    (held,) = waiting(block.outbox_path)
    assert [(turn.role, turn.text) for turn in held.turns] == [("user", "I moved to Osaka.")]
    assert held.day == date(2026, 9, 10)


async def test_a_flushed_exchange_that_was_written_is_not_left_for_the_next_process(
    tmp_path, openai_server
) -> None:
    """The block held the latest user message; Memory then flushed that exchange and the
    writer stored it: nothing of it waits in the outbox, so a restart writes nothing twice."""
    openai_server.reply = ToolCall(
        "record_memories",
        {"memories": [{"turn": 1, "kind": "preference", "fact": "The user likes green tea."}]},
    )
    index = open_memory_index(MockEmbedding(embed_dim=4), path=tmp_path)
    llm = openai_like_llm(
        model="qwen-test", api_base=openai_server.base_url, api_key="k", max_retries=0
    )
    block = RecencyMemoryBlock(index=index, llm=llm, user_id="hanako")
    await block.aget([ChatMessage(role="user", content="I like green tea.")], session_id="s")
    assert block.outbox_path is not None and len(waiting(block.outbox_path)) == 1  # held
    flushed = [
        ChatMessage(
            role="user", content="I like green tea.", additional_kwargs={"session_id": "s"}
        ),
        ChatMessage(role="assistant", content="Noted!", additional_kwargs={"session_id": "s"}),
    ]
    await block.aput(flushed)  # what Memory does when it flushes them out of its history
    assert await block.await_writes() == 0
    assert count_memories(index) == 1
    assert waiting(block.outbox_path) == []
    assert len(openai_server.requests) == 1


# --- on_missing_date='raise' on the engines ------------------------------------------------------


def engine_store(engine: str, nodes: list[TextNode]) -> BasePydanticVectorStore:
    if engine == "edge":
        store: BasePydanticVectorStore = QdrantEdgeVectorStore(Path(tempfile.mkdtemp()) / "m")
    else:
        store = QdrantVectorStore(collection_name="m", client=QdrantClient(location=":memory:"))
    store.add(nodes)
    return store


def e0_nodes(rows: list[tuple[str, str | None, float]]) -> list[TextNode]:
    """Nodes whose cosine with the question vector e0 is exactly ``raw``."""
    nodes = []
    for i, (fact, day, raw) in enumerate(rows):
        node = (
            memory_node(fact, day, allow_future=True) if day else TextNode(text=fact, metadata={})
        )
        vector = [0.0] * (len(rows) + 1)
        vector[0], vector[i + 1] = raw, math.sqrt(1.0 - raw * raw)
        node.embedding = vector
        nodes.append(node)
    return nodes


def run_plan(store: BasePydanticVectorStore, policy: RecencyPolicy, dim: int):
    question = [1.0] + [0.0] * (dim - 1)
    ranking, _ = drive_plan(exact_recency_search(policy, policy.reference()),
                            lambda search: run_search(store, search, question,
                                                      policy.date_key, None))
    return ranking


@pytest.mark.parametrize("engine", ["edge", "qdrant-client"])
def test_raise_finds_an_undated_memory_that_could_pass_under_many_dated_ones(engine) -> None:
    """on_missing_date='raise' promises an error when a memory without a date could pass:
    one scoring under twenty dated memories is found on every engine."""
    rows: list[tuple[str, str | None, float]] = [
        (f"Taro noted server fact {i}.", "2026-08-28", 0.60 - 0.005 * i) for i in range(20)
    ]
    rows.append(("An undated note about the server.", None, 0.47))
    store = engine_store(engine, e0_nodes(rows))
    policy = RecencyPolicy(reference_date="2026-09-10", on_missing_date="raise")
    with pytest.raises(MemoryDateError, match="value None"):
        run_plan(store, policy, len(rows) + 1)
    (undated,) = run_search(
        store,
        MemorySearch(limit=1, undated_only=True),
        [1.0] + [0.0] * len(rows),
        policy.date_key,
        None,
    )
    assert undated.node.get_content() == "An undated note about the server."
    harmless = rows[:20] + [("An undated note about the server.", None, 0.30)]
    ranking = run_plan(engine_store(engine, e0_nodes(harmless)), policy, len(rows) + 1)
    assert len(ranking.nodes) == 3  # an undated memory that cannot pass raises nothing


def worded(i: int, raw: float, day: str, text: str) -> NodeWithScore:
    return NodeWithScore(
        node=TextNode(id_=f"m{i:04d}", text=text, metadata={"date": day}), score=raw
    )


def by_cosine(memories: list[NodeWithScore], search: MemorySearch) -> list[NodeWithScore]:
    """What every engine answers: the top ``limit`` by cosine among the memories selected."""
    selected = [
        m
        for m in memories
        if (search.term is None or search.term in terms(m.node.get_content()))
        and (search.since is None or parse_memory_date(m.node.metadata["date"]) >= search.since)
        and (search.min_score is None or (m.score or 0.0) >= search.min_score)
    ]
    return sorted(selected, key=lambda m: -(m.score or 0.0))[: search.limit]


def test_a_word_whose_every_holder_was_already_returned_costs_no_search_by_that_word() -> None:
    """The question's word "keyboard" is held by one memory, the best by cosine, which the
    first search returns: the words' part of every unseen memory is then known to be 0, so
    no search by the word is asked, and the answer is what ranking every memory gives."""
    memories = [worded(0, 0.85, "2026-09-01", "Taro bought a mechanical keyboard.")] + [
        worded(i, 0.84 - 0.004 * i, "2026-08-20", f"Taro walked {i} kilometres by the river.")
        for i in range(1, 40)
    ]
    policy = RecencyPolicy(
        weight=0.05, tau_days=14, threshold=0.8, lexical_weight=0.1, reference_date="2026-09-10"
    )
    holding = {
        t: sum(t in terms(m.node.get_content()) for m in memories)
        for t in question_terms("Which keyboard did I buy?")
    }
    query = LexicalQuery.from_counts(len(memories), holding)
    assert query.held == {"keyboard"}
    plan = fused(exact_recency_search(policy, policy.reference(), lexical=query), query, 0.1)
    ranking, asked = drive_plan(plan, lambda search: by_cosine(memories, search))
    assert [search.term for search in asked] == [None] * len(asked)
    assert [n.node.node_id for n in ranking.nodes] == ["m0000", "m0001", "m0002"]


def test_a_memory_holding_the_questions_word_far_down_by_cosine_costs_one_search_by_it() -> None:
    """The only memory holding "keyboard" sits below sixty others by cosine, yet the words
    lift it to the top: one search by the word finds it, no search is widened."""
    memories = [
        worded(i, 0.80 - 0.002 * i, "2026-08-20", f"Taro walked {i} kilometres by the river.")
        for i in range(60)
    ] + [worded(60, 0.60, "2026-09-01", "Taro bought a mechanical keyboard.")]
    policy = RecencyPolicy(
        weight=0.05, tau_days=14, threshold=0.8, lexical_weight=0.3, reference_date="2026-09-10"
    )
    query = LexicalQuery.from_counts(len(memories), {"keyboard": 1})
    plan = fused(exact_recency_search(policy, policy.reference(), lexical=query), query, 0.3)
    ranking, asked = drive_plan(plan, lambda search: by_cosine(memories, search))
    assert [n.node.node_id for n in ranking.nodes][0] == "m0060"
    assert "keyboard" in [search.term for search in asked]
    assert max(search.limit for search in asked) == 16


# --- newer versions ------------------------------------------------------------------------------


def version_candidates(old: float, new: float) -> list[NodeWithScore]:
    """Candidate "old" (May) and its reworded newer version "new" (November, cosine 0.99 with
    it), among six unrelated low candidates."""
    names = ["old", *(f"f{i}" for i in range(6)), "new"]
    axes = np.eye(len(names) + 1)
    vectors = {
        name: axes[i] + (0.3 * axes[0] if name.startswith("f") else 0.0)
        for i, name in enumerate(names)
    }
    vectors["new"] = 0.99 * vectors["old"] + 0.14 * axes[-1]
    scores = {
        "old": (old, "2026-05-01"),
        "new": (new, "2026-11-01"),
        **{f"f{i}": (0.3, "2026-03-01") for i in range(6)},
    }
    return [
        NodeWithScore(
            node=TextNode(
                id_=name,
                text=name,
                metadata={"date": day},
                embedding=(vectors[name] / np.linalg.norm(vectors[name])).tolist(),
            ),
            score=score,
        )
        for name, (score, day) in scores.items()
    ]


def test_a_memory_passing_at_exactly_the_threshold_brings_its_newer_version() -> None:
    """A memory whose final score equals the threshold passes (>=), and so its reworded newer
    version under the threshold enters right before it, as with any passing older version."""
    nodes = version_candidates(0.52, 0.48)
    base = RecencyPolicy(
        weight=0.004,
        tau_days=14.0,
        threshold=0.5,
        supersede_margin=0.05,
        reference_date="2026-12-01",
    )
    reference = base.reference()
    (old,) = [row for row in base.rank(nodes, reference).rows if row.node_id == "old"]
    policy = base.model_copy(update={"threshold": old.final})  # old passes at exactly it
    ranking = newer_versions_first(policy.rank(nodes, reference), nodes, policy, reference)
    assert [n.node.node_id for n in ranking.nodes] == ["new", "old"]
    just_under = policy.model_copy(update={"threshold": math.nextafter(old.final, 1.0)})
    ranking = newer_versions_first(just_under.rank(nodes, reference), nodes, just_under, reference)
    assert [n.node.node_id for n in ranking.nodes] == []


# --- the gate's fit ------------------------------------------------------------------------------


class TableEmbedding(TextVectors):
    """Each listed text (memory or question) embeds as its given vector; any other text is
    orthogonal to them all (the last axis, which no listed vector uses)."""

    _table: dict[str, list[float]] = PrivateAttr()

    def __init__(self, table: dict[str, list[float]], name: str) -> None:
        super().__init__(model_name=name)
        self._table = table

    @classmethod
    def class_name(cls) -> str:
        return "TableEmbedding"

    def _vector(self, text: str) -> list[float]:
        dim = len(next(iter(self._table.values())))
        return list(self._table.get(text, [0.0] * (dim - 1) + [1.0]))


def unit(vector: np.ndarray) -> np.ndarray:
    return vector / np.linalg.norm(vector)


OFFTOPIC = "What is the capital of France?"


def versions_store(question: str = OFFTOPIC) -> tuple[Any, RecencyPolicy]:
    """A question whose best match (0.80, May) has a reworded newer version (0.76, November)
    among six far memories, and a policy that moves newer versions first."""
    axes = np.eye(11)  # the last axis: any other text
    facts = {
        "The user drinks coffee black.": ("2026-05-01", 0.80, axes[1]),
        "The user drinks sweet café au lait.": (
            "2026-11-01",
            0.76,
            unit(0.99 * axes[1] + 0.14 * axes[9]),
        ),
        **{
            f"The user owns {n} bicycles.": ("2026-03-01", 0.30, unit(axes[2 + n] + 0.3 * axes[1]))
            for n in range(6)
        },
    }
    nodes = [memory_node(fact, day) for fact, (day, _, _) in facts.items()]
    table = {question: axes[0].tolist()}
    for node, (_, raw, direction) in zip(nodes, facts.values(), strict=True):
        table[node.get_content(metadata_mode="embed")] = (
            raw * axes[0] + math.sqrt(1 - raw * raw) * direction
        ).tolist()
    index = open_memory_index(TableEmbedding(table, "round6-versions"))
    index.insert_nodes(nodes)
    policy = RecencyPolicy(reference_date="2026-12-01", supersede_margin=0.05)
    return index, policy


def test_a_fit_measures_the_best_match_though_a_newer_version_of_it_would_go_first() -> None:
    """The gate is fitted on how well an off-topic question can match any memory: the best
    final score, even when that memory's newer version would be placed before it."""
    index, policy = versions_store()
    asked = QdrantRecencyRetriever.from_index(index, policy).retrieve(OFFTOPIC)
    assert [n.node.get_content().split(": ", 1)[1] for n in asked][:2] == [
        "The user drinks sweet café au lait.",
        "The user drinks coffee black.",
    ]  # moved first
    best = offtopic_best(
        index.vector_store, embedding_of(index), policy, questions={"en": [OFFTOPIC]}
    )
    assert best == {"en": [pytest.approx(0.80, abs=2e-3)]}


def test_a_newer_version_goes_first_though_only_the_old_one_holds_the_questions_word() -> None:
    """With the lexical signal on, "drink" and "coffee" lift the old memory, not its reworded
    newer version (which holds "drink" alone: no evidence): the margin is read without the
    words' part, so the current version still goes first."""
    question = "How do I drink my coffee?"
    index, policy = versions_store(question)
    worded = policy.model_copy(update={"lexical_weight": 0.1})
    ranking = QdrantRecencyRetriever.from_index(index, worded).explain(question)
    words = {row.text.split(": ", 1)[1]: row.lexical for row in ranking.rows}
    assert words["The user drinks coffee black."] > 0.03  # the word's part
    assert words["The user drinks sweet café au lait."] == 0.0
    assert [n.node.get_content().split(": ", 1)[1] for n in ranking.nodes][:2] == [
        "The user drinks sweet café au lait.",
        "The user drinks coffee black.",
    ]


def test_a_store_of_three_memories_already_puts_the_newer_version_first() -> None:
    """A new user's store holds three memories: the reworded newer version of the best match
    goes first, as in a larger store."""
    nodes = [c for c in version_candidates(0.80, 0.76) if c.node.node_id in ("old", "new", "f0")]
    policy = RecencyPolicy(
        weight=0.004,
        tau_days=14.0,
        threshold=0.5,
        supersede_margin=0.05,
        reference_date="2026-12-01",
    )
    reference = policy.reference()
    ranking = newer_versions_first(policy.rank(nodes, reference), nodes, policy, reference)
    assert [n.node.node_id for n in ranking.nodes] == ["new", "old"]


def test_a_question_about_the_present_weighs_in_the_fit_as_the_plain_question() -> None:
    """A question about the present gets the larger present bonus and meets a threshold
    raised by as much: in the fit it counts as the same question asked plainly."""
    present, plain = "What is the capital of France these days?", "What is the capital of France?"
    node = memory_node("The user drinks coffee black.", "2026-12-01")  # dated the reference day
    axes = np.eye(3)  # the last axis: any other text
    table = {
        present: axes[0].tolist(),
        plain: axes[0].tolist(),
        node.get_content(metadata_mode="embed"): (
            0.5 * axes[0] + math.sqrt(0.75) * axes[1]
        ).tolist(),
    }
    index = open_memory_index(TableEmbedding(table, "round6-present"))
    index.insert_nodes([node])
    policy = RecencyPolicy(weight=0.05, present_weight=0.1, reference_date="2026-12-01")
    best = offtopic_best(
        index.vector_store, embedding_of(index), policy, questions={"en": [present, plain]}
    )
    assert best["en"] == [pytest.approx(0.55, abs=1e-3), pytest.approx(0.55, abs=1e-3)]


def test_identical_vectors_are_ranked_as_they_are_without_a_numpy_warning() -> None:
    """A store whose memories embed alike (a placeholder model, one fact saved thrice) has
    nothing left to compare once the mean is taken out: the order stays, and no warning
    reaches an app that runs with warnings as errors."""
    same = [0.5, 0.5, 0.5, 0.5]  # what MockEmbedding gives every text
    nodes = [
        NodeWithScore(
            node=TextNode(
                id_=name,
                text=f"The user drinks tea, note {name}.",
                metadata={"date": day},
                embedding=same,
            ),
            score=score,
        )
        for name, day, score in [
            ("a", "2026-05-01", 0.80),
            ("b", "2026-11-01", 0.79),
            ("c", "2026-08-01", 0.78),
        ]
    ]
    policy = RecencyPolicy(
        weight=0.004,
        tau_days=14.0,
        threshold=0.5,
        supersede_margin=0.05,
        reference_date="2026-12-01",
    )
    reference = policy.reference()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ranking = newer_versions_first(policy.rank(nodes, reference), nodes, policy, reference)
    assert [n.node.node_id for n in ranking.nodes] == ["a", "b", "c"]


# --- questions: their intent, vague references, stores with only an async client ----------------


def e0_retriever(rows: list[tuple[str, str | None, float]], policy: RecencyPolicy):
    store = engine_store("edge", e0_nodes(rows))
    return QdrantRecencyRetriever(store, MockEmbedding(embed_dim=1), policy=policy)


def e0_question(text: str, dim: int) -> QueryBundle:
    return QueryBundle(text, embedding=[1.0] + [0.0] * (dim - 1))


@pytest.mark.parametrize("question", ["What do I drink these days?", "What do I drink now?"])
def test_a_question_about_the_present_is_answered_and_its_event_says_so(
    question: str, collected
) -> None:
    """A question about the present is ranked with the present's bonus, and the ranking
    event an app's tracing sees names that intent."""
    rows: list[tuple[str, str | None, float]] = [("Taro drinks café au lait.", "2026-09-01", 0.6)]
    retriever = e0_retriever(rows, RecencyPolicy(reference_date="2026-09-10"))
    found = retriever.retrieve(e0_question(question, len(rows) + 1))
    assert [n.node.get_content() for n in found] == ["2026-09-01: Taro drinks café au lait."]
    assert question_intent(question) == "present"
    ours = [e for e in collected if any(r.node_id == found[0].node.node_id for r in e.rows)]
    assert [event.intent for event in ours] == ["present"]


def test_a_vague_reference_in_the_evening_takes_the_best_recent_memory_by_its_bonus() -> None:
    """Asked at 18:00, today's note is three quarters of a day old while a plan for the
    weekend gets the full bonus: with a hair less cosine, the plan wins the one free place,
    though the first search returned only today's note."""
    rows: list[tuple[str, str | None, float]] = [
        ("Taro fixed the TTS server.", "2026-09-10", 0.300),
        ("Taro goes hiking with Hanako.", "2026-09-12", 0.299),
    ]
    policy = RecencyPolicy(reference_date="2026-09-10T18:00:00+00:00", top_n=1)
    retriever = e0_retriever(rows, policy)
    ranking = retriever.explain(e0_question("How did that thing go?", len(rows) + 1))
    assert ranking.vague
    assert [n.node.get_content() for n in ranking.nodes] == [
        "2026-09-12: Taro goes hiking with Hanako."
    ]


async def test_a_retriever_following_a_store_with_only_an_async_client_answers() -> None:
    """from_index without a policy follows the store's own; over a store held by an
    AsyncQdrantClient alone, async questions are answered (its saved gate is read once)."""
    aclient = AsyncQdrantClient(location=":memory:")
    index = open_memory_index(
        KeywordEmbedding(), aclient=aclient, use_async=True, embedding_name="keywords"
    )
    await index.ainsert_nodes([memory_node("Taro drinks coffee black.", "2026-09-01")])
    retriever = QdrantRecencyRetriever.from_index(index)
    for _ in range(2):
        found = await retriever.aretrieve("How do I take my coffee?")
        assert [n.node.get_content() for n in found] == ["2026-09-01: Taro drinks coffee black."]


# --- the outbox ----------------------------------------------------------------------------------

GREEN_TEA = ToolCall(
    "record_memories",
    {"memories": [{"turn": 1, "kind": "preference", "fact": "The user likes green tea."}]},
)


def test_what_a_forgotten_user_says_afterwards_is_written_and_nothing_from_before(
    openai_server,
) -> None:
    """A session goes on across a forget of its user: at its end, the exchange said after the
    forget is extracted and stored, the one said before is never sent."""
    openai_server.reply = ToolCall(
        "record_memories",
        {"memories": [{"turn": 1, "kind": "event", "fact": "The user moved to Osaka."}]},
    )
    index = open_memory_index(MockEmbedding(embed_dim=4))
    llm = openai_like_llm(
        model="qwen-test", api_base=openai_server.base_url, api_key="k", max_retries=0
    )
    block = RecencyMemoryBlock(index=index, llm=llm, user_id="hanako", background=False)
    memory = Memory.from_defaults(session_id="s", memory_blocks=[block])
    memory.put_messages(
        [
            ChatMessage(role="user", content="I like green tea."),
            ChatMessage(role="assistant", content="Noted!"),
        ]
    )
    memory.get()  # the block sees the first exchange
    forget(index, user_id="hanako")
    memory.put_messages(
        [
            ChatMessage(role="user", content="I moved to Osaka."),
            ChatMessage(role="assistant", content="Big change!"),
        ]
    )
    memory.get()
    (stored,) = block.remember_session(memory)
    assert stored.get_content().endswith("The user moved to Osaka.")
    (request,) = openai_server.requests
    sent = request["messages"][-1]["content"]
    assert "I moved to Osaka." in sent and "green tea" not in sent


def test_a_block_over_a_store_without_an_outbox_file_remembers_the_session(openai_server) -> None:
    """A qdrant-client store has no outbox file (the outbox is in memory only): a session is
    still written at its end and what was stored is returned."""
    openai_server.reply = GREEN_TEA
    index = open_memory_index(MockEmbedding(embed_dim=4), client=QdrantClient(location=":memory:"))
    llm = openai_like_llm(
        model="qwen-test", api_base=openai_server.base_url, api_key="k", max_retries=0
    )
    block = RecencyMemoryBlock(index=index, llm=llm, user_id="hanako")
    assert block.outbox_path is None
    memory = Memory.from_defaults(session_id="s", memory_blocks=[block])
    memory.put_messages(
        [
            ChatMessage(role="user", content="I like green tea."),
            ChatMessage(role="assistant", content="Noted!"),
        ]
    )
    (stored,) = block.remember_session(memory)
    assert stored.get_content().endswith("The user likes green tea.")
    assert count_memories(index) == 1 and block.pending_retries == 0


def test_a_conversation_waiting_in_the_outbox_cannot_be_changed_in_place() -> None:
    """The outbox and the writer thread share each entry: a change is a new entry
    (``dataclasses.replace``), never an edit of the one on disk."""
    conversation = Conversation(
        turns=(Turn(role="user", text="I like green tea."),),
        day=date(2026, 9, 10),
        user_id="hanako",
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        conversation.user_id = "taro"  # type: ignore[misc]
    assert dataclasses.replace(conversation, user_id="taro").id == conversation.id


def test_an_outbox_line_with_a_system_turn_is_refused_naming_what_is_wrong() -> None:
    line = json.dumps(
        {
            "id": "x",
            "day": "2026-09-10",
            "user_id": None,
            "user_name": None,
            "turns": [{"role": "system", "text": "You are Mimi."}],
        }
    )
    with pytest.raises(InvalidInputError, match="user and assistant turns with text"):
        Conversation.from_json(line)


# --- the gate's bank -----------------------------------------------------------------------------


def test_the_off_topic_bank_in_an_unshipped_language_is_refused_in_one_line() -> None:
    with pytest.raises(
        InvalidInputError, match="no off-topic bank in language 'fr'; choose en or ja"
    ):
        offtopic_questions("fr")
    assert len(offtopic_questions("ja")) == 150


def bank(*top: float, rest: int = 18) -> list[float]:
    """A language's off-topic best scores: ``top`` then ``rest`` low ones (20 questions: 5%
    is one question)."""
    return [*top, *(0.2 + 0.001 * i for i in range(rest))]


def test_a_fitted_gate_sits_in_the_middle_of_the_gap_and_holds() -> None:
    """One question in twenty may bring a memory: the threshold sits halfway between the
    best score it lets in and the first it keeps out, and the fit's own policy is not
    reported as letting too many in."""
    fit = fit_gate({"en": bank(0.90, 0.70)}, max_bring_up=0.05, margin=0.001)
    assert fit.refused is None
    assert fit.threshold == pytest.approx(0.80)
    policy = fit.policy(RecencyPolicy())
    assert not fit.lets_too_many_in(policy)
    assert fit.lets_too_many_in(policy.model_copy(update={"threshold": 0.70}))


def test_a_fitted_policy_keeps_each_languages_threshold_and_is_explicit() -> None:
    fit = fit_gate(
        {"en": bank(0.90, 0.70), "ja": bank(0.95, 0.85)}, max_bring_up=0.05, margin=0.001
    )
    policy = fit.policy(RecencyPolicy())
    assert policy.language_thresholds == pytest.approx({"en": 0.80, "ja": 0.90})
    assert policy.for_question("What is the capital of France?").threshold == pytest.approx(0.80)
    assert policy.for_question("フランスの首都はどこ？").threshold == pytest.approx(0.90)
    assert policy.threshold_origin == "explicit"
    assert policy.gate_description() == "threshold en 0.800, ja 0.900 (explicit)"


def test_a_gate_whose_margin_would_keep_every_allowed_question_out_is_refused() -> None:
    """The two best scores sit closer than the margin: a threshold clear of the one kept out
    by the margin also keeps out the one the share allows in, so the fit says why it
    cannot place the gate instead of fitting one stricter than asked."""
    fit = fit_gate({"en": bank(0.8005, 0.8000)}, max_bring_up=0.05, margin=0.001)
    assert fit.refused is not None
    assert fit.refused.startswith("the gate fit is refused: en: its 2 best off-topic scores")


def test_a_gate_letting_no_question_in_is_fitted_just_clear_of_the_best_score() -> None:
    fit = fit_gate({"en": bank(0.8005, 0.8000)}, max_bring_up=0.0, margin=0.001)
    assert fit.refused is None
    assert fit.threshold == pytest.approx(0.8015)
    assert fit.bring_up(fit.threshold) == 0.0


# --- the memory object ---------------------------------------------------------------------------


def test_the_memory_object_opens_its_store_with_the_embedding_model_given(tmp_path) -> None:
    model = KeywordEmbedding()
    with RecencyMemory(model, path=tmp_path) as memory:
        assert embedding_of(memory.index) is model
        memory.add("Taro drinks coffee black.", date="2026-09-01")
        assert [n.node.get_content() for n in memory.search("coffee?").nodes] == [
            "2026-09-01: Taro drinks coffee black."
        ]


def test_the_memory_objects_block_fits_its_gate_at_the_objects_size(tmp_path) -> None:
    with RecencyMemory(KeywordEmbedding(), path=tmp_path, min_fit_memories=5) as memory:
        block = memory.as_memory_block()
        assert block.min_fit_memories == 5


def test_a_search_keeps_at_most_its_limit_and_only_what_its_filters_select(tmp_path) -> None:
    with RecencyMemory(
        KeywordEmbedding(), path=tmp_path, policy=RecencyPolicy(reference_date="2026-09-10")
    ) as memory:
        memory.add(
            [
                memory_node("Taro drinks coffee black.", "2026-09-01", metadata={"kind": "habit"}),
                memory_node("Taro roasts coffee beans.", "2026-09-05", metadata={"kind": "hobby"}),
                memory_node(
                    "Taro buys coffee on Fridays.", "2026-09-08", metadata={"kind": "habit"}
                ),
            ]
        )
        assert len(memory.search("coffee?").nodes) == 3
        (newest,) = memory.search("coffee?", limit=1).nodes
        assert newest.node.get_content() == "2026-09-08: Taro buys coffee on Fridays."
        habits = MetadataFilters(filters=[MetadataFilter(key="kind", value="habit")])
        assert {
            n.node.metadata["kind"] for n in memory.search("coffee?", filters=habits).nodes
        } == {"habit"}


def fit_attempted(index: Any) -> bool:
    """Whether the store records its own gate fit, or why a fit was refused."""
    return gate_record(index) is not None or gate_refusal(index) is not None


def test_a_users_writes_fit_that_users_own_gate(e5, tmp_path) -> None:
    """A store serving several users fits each user's gate on their memories: Alice's three
    memories fit hers (or record why it was refused)."""
    with RecencyMemory(e5, path=tmp_path, user_id="alice", min_fit_memories=3) as alice:
        alice.add(
            [
                ("The user drinks coffee black.", "2026-08-01"),
                ("The user walks at night.", "2026-08-02"),
                ("The user plays the guitar.", "2026-08-03"),
            ]
        )
        assert (
            gate_record(alice.index, "alice") is not None
            or gate_refusal(alice.index, "alice") is not None
        )


def test_an_update_that_brings_the_store_to_the_fit_size_fits_its_gate(e5, tmp_path) -> None:
    with RecencyMemory(e5, path=tmp_path, min_fit_memories=3) as memory:
        stored = memory.add(
            [
                ("The user drinks coffee black.", "2026-08-01"),
                ("The user walks at night.", "2026-08-02"),
            ]
        )
        assert not fit_attempted(memory.index)
        memory.update(stored.new[0], "The user drinks café au lait.", "2026-09-01")
        assert fit_attempted(memory.index)


def test_a_remembered_conversation_that_brings_the_store_to_the_fit_size_fits_its_gate(
    e5, tmp_path, openai_server
) -> None:
    openai_server.reply = GREEN_TEA
    llm = openai_like_llm(
        model="qwen-test", api_base=openai_server.base_url, api_key="k", max_retries=0
    )
    with RecencyMemory(e5, path=tmp_path, min_fit_memories=3, llm=llm) as memory:
        memory.add(
            [
                ("The user drinks coffee black.", "2026-08-01"),
                ("The user walks at night.", "2026-08-02"),
            ]
        )
        assert not fit_attempted(memory.index)
        (stored,) = memory.remember(
            [("user", "I like green tea."), ("assistant", "Noted!")], memory_date="2026-09-01"
        )
        assert stored.get_content() == "2026-09-01: The user likes green tea."
        assert fit_attempted(memory.index)


def test_a_window_that_cannot_tell_its_memories_apart_pairs_none() -> None:
    """Three memories each as far from the others (their similarities all alike): no pair
    stands out, so none is taken as another's version and the order stays by score."""
    axes = np.eye(3)
    nodes = [NodeWithScore(node=TextNode(id_=name, text=f"The user said {name}.",
                                         metadata={"date": day}, embedding=axes[i].tolist()),
                           score=score)
             for i, (name, score, day) in enumerate([("old", 0.80, "2026-05-01"),
                                                     ("new", 0.78, "2026-11-01"),
                                                     ("other", 0.70, "2026-03-01")])]
    policy = RecencyPolicy(weight=0.004, tau_days=14.0, threshold=0.5, supersede_margin=0.05,
                           reference_date="2026-12-01")
    reference = policy.reference()
    ranking = newer_versions_first(policy.rank(nodes, reference), nodes, policy, reference)
    assert [n.node.node_id for n in ranking.nodes] == ["old", "new", "other"]


@pytest.mark.parametrize(("question", "past", "present", "event"), [
    ("When did I go to Nagano?", False, False, True),
    ("What do I drink these days?", False, True, False),
    ("What did I use to drink?", True, False, True),  # the past marker wins the intent
    ("What do I drink?", False, False, False),
])
def test_each_intent_marker_check_says_yes_or_no(question: str, past: bool, present: bool,
                                                 event: bool) -> None:
    from llama_index_recency.ranking.intent import (
        asks_about_event,
        asks_about_present,
        points_to_past,
    )

    assert (points_to_past(question), asks_about_present(question),
            asks_about_event(question)) == (past, present, event)

"""Behaviour a user relies on that mutation testing found unchecked (issue 39, item 14).

Each test states what a user of the package would notice: a question naming a place is not
a vague reference; a vague reference fills only the places left, from the memories recent
as of the question's date; memories far apart are no versions of each other; the intent
phrases nobody asked before; a small store keeps the shipped gate; where the embedding
cache goes; a damaged outbox line never reaches the writer; the block's writes; a
``MemorySearch`` cannot be changed; the one-line error naming the conflicting arguments.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import sys
from collections.abc import Sequence
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from llama_index.core import MockEmbedding
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory import Memory
from llama_index.core.schema import NodeWithScore, TextNode
from test_memory_block import (
    NOTHING,
    TALK,
    eventually,
    extraction_llm,
    sent_turns,
    tea_index,
)

from llama_index_recency import (
    RecencyMemory,
    RecencyMemoryBlock,
    RecencyPolicy,
    memory_node,
    open_memory_index,
    openai_like_llm,
)
from llama_index_recency.errors import InvalidInputError
from llama_index_recency.fitting.gate_fit import MIN_FIT_MEMORIES, REFIT_RATIO, refit_due
from llama_index_recency.models import cohort as cohort_module
from llama_index_recency.models.cohort import cached_embeddings
from llama_index_recency.ranking.intent import question_intent
from llama_index_recency.ranking.plan import MemorySearch, SearchPlan, exact_recency_search
from llama_index_recency.ranking.supersession import newer_versions_first
from llama_index_recency.ranking.vague import (
    RECENT_REASON,
    fill_with_recent,
    is_vague_reference,
    with_recent,
)
from llama_index_recency.records.nodes import Turn
from llama_index_recency.storage import Conversation, Outbox, QdrantEdgeVectorStore
from llama_index_recency.storage.engine import run_search

from conftest import drive_plan

REFERENCE = datetime(2026, 9, 10, tzinfo=timezone.utc)


# --- vague references: the detector ---------------------------------------------------------

def test_a_question_naming_a_place_is_no_vague_reference() -> None:
    """"the thing" is a vague referent, but "Nagano" (capitalised inside the sentence) is
    content: the user asks about something named, not "what you were up to"."""
    assert is_vague_reference("How did the thing go?") is True
    assert is_vague_reference("How did the thing with Nagano go?") is False
    assert is_vague_reference("So, about that stuff in Kyoto, how did it go?") is False


@pytest.mark.parametrize("question", [
    "‘How did that thing go?’",
    "“How did that thing go?”",  # finds a defect: “ is not set aside as " is
    "“That thing you were working on, how did it go?”",  # the same defect
    "Did “that thing” work out?",
    "「あれ、どうなった？」",
    "「例の件」、どうなった？",
])
def test_an_opening_curly_quote_around_a_vague_phrase_still_counts(question: str) -> None:
    """Phones and word processors type curly quotes: a vague question quoted with them is
    as vague as one quoted with straight quotes (the capital after the opening quote starts
    the sentence, it is no proper noun)."""
    assert is_vague_reference(question.replace("“", '"').replace("”", '"')) is True
    assert is_vague_reference(question) is True


@pytest.mark.parametrize("question", [
    '"That thing you were working on, how did it go?"',
    "'How did that thing go?'",
    "(How did it go, that thing?)",
])
def test_a_quote_or_bracket_opening_a_vague_question_still_counts(question: str) -> None:
    assert is_vague_reference(question) is True


@pytest.mark.parametrize("question", ["「面接」、どうなった？", "「ワールドカップ」どうだった？",
                                      '"How did the Nagano trip go?"'])
def test_content_inside_quotes_is_still_content(question: str) -> None:
    assert is_vague_reference(question) is False


# --- vague references: the recent memories fill the places left -------------------------------

POLICY = RecencyPolicy(weight=0.05, tau_days=14, threshold=0.45, top_n=3,
                       reference_date=REFERENCE.date().isoformat())
ROWS = [
    ("Taro bought a keyboard.", "2026-06-01", 0.60),  # old, on topic: passes
    ("Taro likes trains.", "2026-09-09", 0.55),  # recent and on topic: passes
    ("Taro is stabilizing the TTS server.", "2026-08-28", 0.35),  # 0.35 + 0.020 = 0.370
    ("Taro made mentaiko pasta at home.", "2026-09-08", 0.30),  # 0.30 + 0.043 = 0.343
    ("Taro finished the benchmark article.", "2026-09-09", 0.20),  # 0.20 + 0.047 = 0.247
    ("Taro went to a hot spring.", "2026-08-14", 0.40),  # 27 days old: outside the window
]


def edge_store(rows: Sequence[tuple[str, str, float]], path: Path) -> QdrantEdgeVectorStore:
    """An Edge store whose memories have exactly cosine ``raw`` with the question e0."""
    store = QdrantEdgeVectorStore(path / "memories")
    nodes = []
    for i, (fact, day, raw) in enumerate(rows):
        node = memory_node(fact, day)
        node.embedding = [0.0] * (len(rows) + 1)
        node.embedding[0], node.embedding[i + 1] = raw, math.sqrt(1.0 - raw * raw)
        nodes.append(node)
    store.add(nodes)
    return store


def drive(plan: SearchPlan, store: QdrantEdgeVectorStore, dim: int,
          searches: list[MemorySearch]):
    """Run ``plan`` on ``store`` for the question e0, as ExactSearch does; fail on a plan that
    keeps searching (a search that can never come back full enough to stop)."""
    question = [1.0] + [0.0] * (dim - 1)
    ranking, asked = drive_plan(
        plan, lambda search: run_search(store, search, question, "date", None), at_most=12)
    searches.extend(asked)
    return ranking


def vague_plan(policy: RecencyPolicy) -> SearchPlan:
    ranking = yield from exact_recency_search(policy, REFERENCE)
    return (yield from with_recent(ranking, policy, REFERENCE))


def test_a_vague_reference_fills_only_the_places_left_after_the_kept_memories(tmp_path) -> None:
    """Two memories pass for top 3: one place is left, and it goes to the best recent memory
    that is not already kept; the window is searched (the kept ones are not the answer)."""
    store = edge_store(ROWS, tmp_path)
    searches: list[MemorySearch] = []
    ranking = drive(vague_plan(POLICY), store, len(ROWS) + 1, searches)
    facts = [n.node.get_content().split(": ", 1)[1] for n in ranking.nodes]
    assert ranking.vague
    assert facts == [ROWS[0][0], ROWS[1][0], ROWS[2][0]]
    assert [row.reason for row in ranking.rows[:3]] == ["kept", "kept", RECENT_REASON]
    assert any(search.since is not None for search in searches)  # the window was searched
    # Two places left when only one memory passes: both go to the recent ones, best first.
    one_kept = edge_store([ROWS[0], *ROWS[2:]], tmp_path / "one")
    ranking = drive(vague_plan(POLICY), one_kept, len(ROWS), [])
    facts = [n.node.get_content().split(": ", 1)[1] for n in ranking.nodes]
    assert facts == [ROWS[0][0], ROWS[2][0], ROWS[3][0]]


def raw_candidate(name: str, raw: float, day: str) -> NodeWithScore:
    return NodeWithScore(node=TextNode(id_=name, text=name, metadata={"date": day}), score=raw)


def test_the_recent_memory_listed_is_recent_as_of_the_reference_date_given() -> None:
    """A policy ranking as of now, asked for a vague reference as of 2020-06-01: the memory
    of the day before that date is listed, not the one with the better raw score that is
    three months older (both are years old as of today)."""
    policy = RecencyPolicy(weight=0.05, tau_days=14, threshold=0.45, top_n=1)  # as of now
    reference = datetime(2020, 6, 1, tzinfo=timezone.utc)
    day_before = raw_candidate("day-before", 0.30, "2020-05-31")  # 0.30 + 0.0465
    months_before = raw_candidate("months-before", 0.33, "2020-03-01")  # 0.33 + 0.0001
    empty = policy.rank([day_before, months_before], reference)  # none passes 0.45
    assert empty.nodes == ()
    filled = fill_with_recent(empty, [months_before, day_before], policy, reference)
    assert [n.node.node_id for n in filled.nodes] == ["day-before"]
    assert filled.nodes[0].score == pytest.approx(0.30 + 0.05 * math.exp(-1 / 14))


# --- newer versions first: only memories that are versions of each other move -----------------

SUPERSEDING = RecencyPolicy(weight=0.004, tau_days=14.0, threshold=0.5, supersede_margin=0.05,
                            reference_date="2026-12-01")


def with_vectors(specs: dict[str, tuple[float, str, np.ndarray]]) -> list[NodeWithScore]:
    """One-sentence candidates (score, date, vector); every vector also shares 0.3 along
    axis 0 (the question's topic), which the version rule sets aside."""
    nodes = []
    for name, (score, day, vector) in specs.items():
        shared = vector + 0.3 * np.eye(len(vector))[0]
        nodes.append(NodeWithScore(node=TextNode(
            id_=name, text=f"The user has a fact called {name}.", metadata={"date": day},
            embedding=(shared / np.linalg.norm(shared)).tolist()), score=score))
    return nodes


def reordered(nodes: list[NodeWithScore], rows_of: list[NodeWithScore] | None = None):
    reference = SUPERSEDING.reference()
    ranking = SUPERSEDING.rank(nodes if rows_of is None else rows_of, reference)
    return newer_versions_first(ranking, nodes, SUPERSEDING, reference)


def test_memories_whose_vectors_are_far_apart_are_never_reordered_as_versions() -> None:
    """"old" and "new" are each other's nearest candidate, but only barely (their vectors
    are nearly orthogonal once the shared topic is set aside, well below the cut of the
    window's pairs): two unrelated facts, so the cosine + bonus order stands."""
    axis = np.eye(5)
    nodes = with_vectors({
        "old": (0.80, "2026-05-01", axis[1]),
        "new": (0.78, "2026-11-01", axis[2] + 0.02 * axis[1]),
        **{f"f{i}": (0.56 - 0.01 * i, "2026-05-01", vector) for i, vector in enumerate(
            [-axis[1], -axis[2], axis[3], -axis[3], axis[4], -axis[4]])},
    })
    ranking = reordered(nodes)
    assert [row.node_id for row in ranking.rows][:2] == ["old", "new"]
    assert not any("version" in row.reason for row in ranking.rows)
    assert [n.node.node_id for n in ranking.nodes] == ["old", "new", "f0"]


def twins(old: tuple[float, str], new: tuple[float, str], others: dict[str, tuple[float, str]]
          ) -> list[NodeWithScore]:
    """"new" is "old" turned by ~8 degrees (a near-duplicate); the others on their own axes."""
    size = len(others) + 3
    axis = np.eye(size)
    specs = {"old": (*old, axis[1]), "new": (*new, 0.99 * axis[1] + 0.14 * axis[2])}
    specs.update({name: (*spec, axis[i + 3]) for i, (name, spec) in enumerate(others.items())})
    return with_vectors(specs)


def test_which_window_candidates_join_the_reordered_ranking_depends_on_their_score() -> None:
    """A newer version moves up. A window candidate the ranking did not hold yet joins it
    when its score could pass (and takes the place left); candidates that could never pass
    stay out of the explanation."""
    low = {f"low{i}": (0.30, "2026-03-01") for i in range(6)}  # far under 0.5 - 0.004
    nodes = twins((0.80, "2026-05-01"), (0.76, "2026-11-01"),
                  {**low, "late": (0.70, "2026-03-01")})
    rows_of = [n for n in nodes if n.node.node_id in ("old", "new")]  # what the search saw
    ranking = reordered(nodes, rows_of)
    assert [row.node_id for row in ranking.rows] == ["new", "old", "late"]
    assert [n.node.node_id for n in ranking.nodes] == ["new", "old", "late"]


def test_two_versions_of_the_same_day_keep_their_order_by_score() -> None:
    """Neither of two near-duplicates written the same day is the newer: nothing moves,
    the better scoring one stays first, and neither is called a version."""
    nodes = twins((0.80, "2026-11-01"), (0.78, "2026-11-01"),
                  {f"f{i}": (0.55 - 0.01 * i, "2026-03-01") for i in range(6)})
    ranking = reordered(nodes)
    assert [row.node_id for row in ranking.rows][:2] == ["old", "new"]
    assert not any("version" in row.reason for row in ranking.rows)
    swapped = twins((0.78, "2026-11-01"), (0.80, "2026-11-01"),
                    {f"f{i}": (0.55 - 0.01 * i, "2026-03-01") for i in range(6)})
    assert [row.node_id for row in reordered(swapped).rows][:2] == ["new", "old"]


# --- intent: the phrases no other test question uses ------------------------------------------

@pytest.mark.parametrize("question, intent", [
    ("Where do I work at present?", "present"),
    ("What's the latest on my visa application?", "present"),
    ("現時点で住んでいる街は？", "present"),
    ("What did I drink ages ago?", "past"),
    ("What did I drink at the start?", "past"),
    ("Which club did I join at the beginning?", "past"),
    ("以前の仕事は何？", "past"),
])
def test_each_listed_phrase_gives_its_intent(question: str, intent: str) -> None:
    assert question_intent(question) == intent


# --- the gate: a small store keeps the shipped one ---------------------------------------------

@pytest.mark.parametrize("memories, fitted_on", [
    (0, None), (1, None), (MIN_FIT_MEMORIES - 1, None), (MIN_FIT_MEMORIES - 1, 1),
    (MIN_FIT_MEMORIES - 1, 5),
])
def test_a_store_below_the_fit_size_is_never_due_a_fit(memories: int, fitted_on) -> None:
    assert refit_due(memories, fitted_on) is False


def test_a_store_is_due_a_fit_from_the_fit_size_and_as_it_grows() -> None:
    assert refit_due(MIN_FIT_MEMORIES, None) is True
    assert refit_due(3, None, min_memories=4) is False
    assert refit_due(4, None, min_memories=4) is True
    assert refit_due(7, 4, min_memories=4) is False
    assert refit_due(int(REFIT_RATIO * 4), 4, min_memories=4) is True


# --- the cohort: where the embedding cache goes by default --------------------------------------

class CountingEmbedding(BaseEmbedding):
    """Counts the texts it embeds; each text gets a distinct 3-d vector."""

    def __init__(self) -> None:
        super().__init__(model_name="counting (test_behaviour_strength)")
        self.__dict__["calls"] = 0

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._get_text_embedding(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_text_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        self.__dict__["calls"] += 1
        return [1.0, float(len(text)), float(sum(map(ord, text)) % 7)]


def test_without_recency_cache_dir_embeddings_are_cached_in_the_users_cache_folder(
        monkeypatch, tmp_path) -> None:
    monkeypatch.delenv(cohort_module.CACHE_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    if sys.platform != "linux":  # platformdirs reads XDG_CACHE_HOME on Linux only
        import platformdirs

        monkeypatch.setattr(platformdirs, "user_cache_dir",
                            lambda name: str(tmp_path / "cache" / name))
    monkeypatch.setattr(cohort_module, "_CACHE", {})
    monkeypatch.chdir(tmp_path)
    model = CountingEmbedding()
    first = cached_embeddings(model, ["one sentence", "another sentence"], query=False)
    assert model.calls == 2
    (cached,) = (tmp_path / "cache" / "llama-index-recency").glob("embeddings-*.npy")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]  # nothing anywhere else
    monkeypatch.setattr(cohort_module, "_CACHE", {})  # the next process reads the file
    again = CountingEmbedding()
    assert np.allclose(cached_embeddings(again, ["one sentence", "another sentence"],
                                         query=False), first)
    assert again.calls == 0 and cached.exists()


# --- the outbox: a damaged line never reaches the writer ----------------------------------------

TEA = Conversation(turns=(Turn("user", "I like green tea."), Turn("assistant", "Noted!")),
                   day=date(2026, 9, 10), user_id="hanako", user_name="Hanako")


@pytest.mark.parametrize("damage", [
    lambda line: line.replace('"role": "assistant"', '"role": "system"'),
    lambda line: line.replace('"text": "Noted!"', '"text": 42'),
    lambda line: line.replace('"text": "I like green tea."', '"text": null'),
    lambda line: line.replace('"text": "I like green tea."', '"text": ["I like", "tea"]'),
], ids=["system-turn", "number-text", "null-text", "list-text"])
def test_an_outbox_line_with_a_system_turn_or_text_that_is_no_string_is_skipped(
        tmp_path, caplog, damage) -> None:
    path = tmp_path / "memories.jsonl"
    osaka = Conversation(turns=(Turn("user", "I moved to Osaka."),), day=date(2026, 9, 11))
    damaged = damage(TEA.to_json())
    assert damaged != TEA.to_json()
    path.write_text(damaged + "\n" + osaka.to_json() + "\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="llama_index_recency"):
        outbox = Outbox(path)
    assert outbox.claim_orphans() == [osaka]  # what the next block hands to the writer
    assert "1 unreadable line dropped" in caplog.text
    assert path.read_text(encoding="utf-8") == osaka.to_json() + "\n"


# --- the memory block: what reaches the writer, what remember_session returns --------------------

async def test_a_flushed_history_of_assistant_turns_alone_writes_nothing(openai_server) -> None:
    openai_server.reply = NOTHING
    block = RecencyMemoryBlock(index=tea_index(), llm=extraction_llm(openai_server))
    greeting = [ChatMessage(role="assistant", content="Welcome back! What did you do today?",
                            additional_kwargs={"session_id": "s"}),
                ChatMessage(role="assistant", content="Still there?",
                            additional_kwargs={"session_id": "s"})]
    await block.aput(greeting)  # Memory's flush: these left the history
    assert await block.await_writes() == 0
    assert openai_server.requests == [] and block.pending_retries == 0


async def test_a_flush_with_no_user_turn_never_waits_for_a_busy_writer(openai_server) -> None:
    """The writer is stuck on an LLM call and its queue is full: a flush of the user's words
    would wait for room, but one of assistant turns alone has nothing to hand over."""
    openai_server.faults = ["hang"]  # the first extraction hangs until released
    openai_server.reply = NOTHING
    block = RecencyMemoryBlock(index=tea_index(), llm=extraction_llm(openai_server),
                               max_pending=1)
    try:
        await block.aput(TALK)
        await eventually(lambda: len(openai_server.requests) == 1)  # the writer is stuck
        await asyncio.wait_for(block.aput([ChatMessage(role="user", content="I like hiking."),
                                           ChatMessage(role="assistant", content="Noted!")]),
                               5)  # the queue is full now
        alone = [ChatMessage(role="assistant", content="Still there?",
                             additional_kwargs={"session_id": "s"})]
        await asyncio.wait_for(block.aput(alone), 2)
    finally:
        openai_server.release.set()
    await eventually(lambda: block.pending_retries == 1)  # the hung write failed
    assert await block.await_writes() == 0  # and was retried
    assert ("assistant", "Still there?") not in {
        turn for request in sent_turns(openai_server) for turn in request}


async def test_assistant_turns_alone_wait_for_the_users_turn_as_its_context(openai_server) -> None:
    openai_server.reply = NOTHING
    block = RecencyMemoryBlock(index=tea_index(), llm=extraction_llm(openai_server))
    greeting = ChatMessage(role="assistant", content="Welcome back! What did you do today?")
    hiking = ChatMessage(role="user", content="I went hiking.")
    await block.aget([greeting], session_id="s")  # the agent speaks first
    await block.aget([greeting, hiking], session_id="s")  # the greeting is all before it
    assert await block.await_writes() == 0 and openai_server.requests == []
    history = [greeting, hiking, ChatMessage(role="assistant", content="Nice!"),
               ChatMessage(role="user", content="Bye.")]
    await block.aget(history, session_id="s")
    assert await block.await_writes() == 0
    assert sent_turns(openai_server) == [[("assistant", "Welcome back! What did you do today?"),
                                          ("user", "I went hiking."), ("assistant", "Nice!")]]


def test_remember_session_returns_an_empty_list_when_the_write_is_kept_for_a_retry(
        closed_port_url) -> None:
    llm = openai_like_llm(model="qwen-test", api_base=closed_port_url, api_key="k",
                          max_retries=0)
    block = RecencyMemoryBlock(index=tea_index(), llm=llm)
    memory = Memory.from_defaults(session_id="end", memory_blocks=[block])
    memory.put_messages(TALK)
    stored = block.remember_session(memory)
    assert isinstance(stored, list) and stored == []
    assert block.pending_retries == 1  # kept for a retry, not lost


async def test_aremember_session_returns_an_empty_list_when_the_write_is_kept_for_a_retry(
        closed_port_url) -> None:
    llm = openai_like_llm(model="qwen-test", api_base=closed_port_url, api_key="k",
                          max_retries=0)
    block = RecencyMemoryBlock(index=tea_index(), llm=llm)
    memory = Memory.from_defaults(session_id="end", memory_blocks=[block])
    await memory.aput_messages(TALK)
    stored = await block.aremember_session(memory)
    assert isinstance(stored, list) and stored == []
    assert block.pending_retries == 1


# --- a search of the plan cannot be changed -----------------------------------------------------

def test_a_memory_search_cannot_be_changed_once_made() -> None:
    """The plan yields its searches to any engine: none can change one under it."""
    search = MemorySearch(limit=16, since=REFERENCE - timedelta(days=14))
    for field, value in (("limit", 0), ("since", None), ("ids", ("m1",)), ("with_vectors", True)):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(search, field, value)
    assert search == MemorySearch(limit=16, since=REFERENCE - timedelta(days=14))
    assert hash(search) == hash(MemorySearch(limit=16, since=REFERENCE - timedelta(days=14)))


# --- RecencyMemory: the error naming the conflicting arguments -----------------------------------

@pytest.mark.parametrize("arguments, named", [
    ({"path": "store"}, "path"),
    ({"embed_model": MockEmbedding(embed_dim=4)}, "embed_model"),
    ({"url": "http://127.0.0.1:6333", "api_key": "k"}, "url, api_key"),
    ({"path": "store", "collection_name": "notes"}, "path, collection_name"),
])
def test_an_index_with_opening_arguments_is_refused_naming_them(tmp_path, arguments,
                                                                 named) -> None:
    index = open_memory_index(MockEmbedding(embed_dim=4))
    if "path" in arguments:
        arguments = {**arguments, "path": tmp_path / "store"}
    with pytest.raises(InvalidInputError) as refused:
        RecencyMemory(index=index, **arguments)
    assert str(refused.value) == ("RecencyMemory takes an open index or what opens one, not "
                                  f"both: got index and {named}")
    assert not (tmp_path / "store").exists()  # nothing was opened

"""QdrantRecencyRetriever: the recency re-rank computed inside Qdrant over the whole store."""

from __future__ import annotations

import logging
import math
import tempfile
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from llama_index.core import MockEmbedding, VectorStoreIndex
from llama_index.core.chat_engine import ContextChatEngine
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.core.vector_stores.types import BasePydanticVectorStore
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import AsyncQdrantClient, QdrantClient

from llama_index_recency import (
    RecencyBonusPostprocessor,
    RecencyPolicy,
    memory_node,
    open_memory_index,
)
from llama_index_recency.integrations.retriever import QdrantRecencyRetriever
from llama_index_recency.ranking.policy import MemoryDateError
from llama_index_recency.storage import QdrantEdgeVectorStore
from tests.conftest import QUERY, KnownCosineEmbedding, cosines_for

SEED_TODAY = "2026-09-10"
REFERENCE = datetime(2026, 9, 10, tzinfo=timezone.utc)


def known_cosine_nodes(rows: Sequence[tuple[str, str | None, float]],
                       allow_future: bool = False) -> list[TextNode]:
    """Nodes whose embedding has exactly cosine ``raw`` with the query vector e0."""
    nodes = []
    for i, (fact, day, raw) in enumerate(rows):
        node = (memory_node(fact, day, allow_future=allow_future) if day
                else TextNode(text=fact, metadata={}))
        vector = [0.0] * (len(rows) + 1)
        vector[0], vector[i + 1] = raw, math.sqrt(1.0 - raw * raw)
        node.embedding = vector
        nodes.append(node)
    return nodes


ENGINES = ("qdrant-client", "edge")
"""qdrant-client's local mode (stores made by 0.1.0; a server speaks the same client) and Qdrant Edge."""


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return request.param


def empty_store(engine: str, name: str = "memories") -> BasePydanticVectorStore:
    if engine == "edge":
        return QdrantEdgeVectorStore(Path(tempfile.mkdtemp()) / name)
    return QdrantVectorStore(collection_name=name, client=QdrantClient(location=":memory:"))


def store_of(
    nodes: Sequence[TextNode], engine: str, name: str = "memories"
) -> BasePydanticVectorStore:
    store = empty_store(engine, name)
    store.add(list(nodes))
    return store


def e0_query(dim: int) -> QueryBundle:
    return QueryBundle(QUERY, embedding=[1.0] + [0.0] * (dim - 1))


def retriever_for(store: QdrantVectorStore, **policy: object) -> QdrantRecencyRetriever:
    return QdrantRecencyRetriever(
        store,
        MockEmbedding(embed_dim=1),  # never called: the queries carry their embedding
        policy=RecencyBonusPostprocessor(reference_date=SEED_TODAY, **policy),
    )


def all_candidates(store: QdrantVectorStore, query: QueryBundle, k: int) -> list[NodeWithScore]:
    """The top ``k`` by raw cosine through the stock LlamaIndex retriever."""
    index = VectorStoreIndex.from_vector_store(store, embed_model=MockEmbedding(embed_dim=1))
    return index.as_retriever(similarity_top_k=k).retrieve(query)


def texts(nodes: Sequence[NodeWithScore]) -> list[str]:
    return [n.node.get_content() for n in nodes]


def facts(nodes: Sequence[NodeWithScore]) -> list[str]:
    """The fact sentences, without the ``YYYY-MM-DD: `` prefix memory_node adds."""
    return [text.split(": ", 1)[1] for text in texts(nodes)]


H2 = [
    ("Taro is stabilizing the TTS server.", "2026-08-28", 0.456),
    ("Taro made mentaiko pasta at home.", "2026-09-08", 0.421),
    ("Taro finished the benchmark article.", "2026-09-09", 0.408),
    ("Taro bought a keyboard.", "2026-06-01", 0.449),  # old: 0.449 + 0.00004 < 0.45
    ("Taro likes anime.", "2026-09-10", 0.399),  # today: 0.399 + 0.05 = 0.449 < 0.45
]


def test_seed_h2_matches_the_seed_table(engine: str) -> None:
    found = retriever_for(store_of(known_cosine_nodes(H2), engine)).retrieve(e0_query(6))
    assert facts(found) == [fact for fact, _, _ in H2[:3]]
    assert [round(n.score, 3) for n in found] == [0.476, 0.464, 0.455]
    expected = [0.456 + 0.05 * math.exp(-13 / 14), 0.421 + 0.05 * math.exp(-2 / 14),
                0.408 + 0.05 * math.exp(-1 / 14)]
    assert [n.score for n in found] == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize(
    ("threshold", "top_n", "expected_rows"),
    [
        (0.45, 3, [0, 1, 2]),
        (0.45, 2, [0, 1]),
        (0.46, 3, [0, 1]),
        (0.44, 5, [0, 1, 2, 3, 4]),
        (0.48, 3, []),
    ],
)
def test_threshold_and_top_n_are_applied(
    threshold: float, top_n: int, expected_rows: list[int], engine: str
) -> None:
    store = store_of(known_cosine_nodes(H2), engine)
    found = retriever_for(store, threshold=threshold, top_n=top_n).retrieve(e0_query(6))
    assert facts(found) == [H2[row][0] for row in expected_rows]
    assert all(n.score >= threshold for n in found)


def test_future_date_gets_the_full_weight_like_the_postprocessor(engine: str) -> None:
    rows = [("Taro will move in spring.", "2027-03-01", 0.41),
            ("Taro moved last year.", "2025-09-10", 0.44)]
    store = store_of(known_cosine_nodes(rows, allow_future=True), engine)  # a planned move
    (found,) = retriever_for(store).retrieve(e0_query(3))
    # A symmetric exp_decay would give 0.41 + 0.05 * exp(-172 / 14), about 0.41.
    assert found.score == pytest.approx(0.46, abs=1e-6)
    postprocessor = RecencyBonusPostprocessor(reference_date=SEED_TODAY)
    (expected,) = postprocessor.postprocess_nodes(all_candidates(store, e0_query(3), 2))
    assert (found.node.node_id, found.score) == (expected.node.node_id, pytest.approx(expected.score, abs=1e-6))


# --- exactness on a few thousand random memories ------------------------------------------

N_MEMORIES, DIM, N_TOPICS = 3000, 32, 12


@pytest.fixture(scope="module", params=ENGINES)
def random_memories(
    request: pytest.FixtureRequest,
) -> tuple[BasePydanticVectorStore, np.ndarray, np.ndarray]:
    """3000 memories on 12 topic axes (raw cosine 0.2-0.5 to their axis), dated over a year.

    Returns the store, the unit vectors as stored (float32, row i = metadata ``row`` i)
    and each memory's age in days (0 for the few dated in the future).
    """
    rng = np.random.default_rng(20260910)
    topics = rng.integers(0, N_TOPICS, N_MEMORIES)
    raw = rng.uniform(0.2, 0.5, N_MEMORIES)
    noise = rng.normal(size=(N_MEMORIES, DIM))
    noise[np.arange(N_MEMORIES), topics] = 0.0
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    vectors = noise * np.sqrt(1.0 - raw**2)[:, None]
    vectors[np.arange(N_MEMORIES), topics] = raw
    vectors = vectors.astype(np.float32)

    seconds_ago = rng.uniform(-10 * 86_400, 365 * 86_400, N_MEMORIES)
    nodes, ages = [], []
    for i in range(N_MEMORIES):
        when = REFERENCE - timedelta(seconds=float(seconds_ago[i]))
        if i % 2:  # an ISO date (midnight UTC) ...
            when = when.replace(hour=0, minute=0, second=0, microsecond=0)
            stamp: object = when.date()
        else:  # ... or an instant with its own UTC offset (RFC 3339)
            stamp = when.astimezone(timezone(timedelta(hours=9)))
        node = memory_node(f"Memory {i} on topic {topics[i]}.", stamp, metadata={"row": i})  # type: ignore[arg-type]
        node.embedding = vectors[i].tolist()
        nodes.append(node)
        ages.append(max(0.0, (REFERENCE - when).total_seconds() / 86_400))
    unit = vectors.astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    return store_of(nodes, request.param, "random"), unit, np.array(ages)


def brute_force(
    vectors: np.ndarray, ages: np.ndarray, query: np.ndarray, policy: RecencyPolicy
) -> tuple[list[int], list[float], np.ndarray]:
    """Rows and final scores of the top n over the whole collection, plus every raw cosine."""
    raw = vectors @ query
    final = raw + policy.weight * np.exp(-ages / policy.tau_days)
    order = np.argsort(-final, kind="stable")
    top = [int(i) for i in order[: policy.top_n] if final[i] >= policy.threshold]
    return top, [float(final[i]) for i in top], raw


def topic_query(topic: int) -> QueryBundle:
    return QueryBundle(QUERY, embedding=[1.0 if d == topic else 0.0 for d in range(DIM)])


def rows(nodes: Sequence[NodeWithScore]) -> list[int]:
    return [n.node.metadata["row"] for n in nodes]


@pytest.mark.slow
def test_exact_against_brute_force_including_memories_beyond_the_top_8(
    random_memories: tuple[BasePydanticVectorStore, np.ndarray, np.ndarray],
) -> None:
    store, vectors, ages = random_memories
    retriever = retriever_for(store)
    top8 = RecencyBonusPostprocessor(reference_date=SEED_TODAY)
    promoted_from_9th_or_lower = top8_wrong = 0
    for topic in range(N_TOPICS):
        query = topic_query(topic)
        expected, expected_scores, raw = brute_force(
            vectors, ages, np.array(query.embedding), retriever.policy
        )
        found = retriever.retrieve(query)
        assert rows(found) == expected
        assert [n.score for n in found] == pytest.approx(expected_scores, abs=1e-6)

        raw_rank = np.argsort(np.argsort(-raw, kind="stable"), kind="stable")
        promoted_from_9th_or_lower += sum(int(raw_rank[row] >= 8) for row in expected)
        top8_wrong += rows(top8.postprocess_nodes(all_candidates(store, query, 8))) != expected
    # The data exercises the retriever's point: the bonus lifts memories that rank 9th or
    # lower by raw cosine into the top 3, which top-8 + postprocessor cannot see.
    assert promoted_from_9th_or_lower >= 3
    assert top8_wrong >= 3


@pytest.mark.slow
def test_same_scores_and_rows_as_the_postprocessor_on_the_same_candidates(
    random_memories: tuple[BasePydanticVectorStore, np.ndarray, np.ndarray],
) -> None:
    store, _, _ = random_memories
    retriever = retriever_for(store)
    postprocessor = RecencyBonusPostprocessor(reference_date=SEED_TODAY)
    for topic in range(0, N_TOPICS, 3):
        query = topic_query(topic)
        candidates = all_candidates(store, query, N_MEMORIES)
        by_postprocessor = postprocessor.postprocess_nodes(candidates)
        found = retriever.retrieve(query)
        assert rows(found) == rows(by_postprocessor)
        assert [n.score for n in found] == pytest.approx(
            [n.score for n in by_postprocessor], abs=1e-6
        )

        explained = retriever.explain(query)
        assert rows(explained.nodes) == rows(found)
        seen = {row.node_id for row in explained.rows}
        expected = postprocessor.explain([c for c in candidates if c.node.node_id in seen]).rows
        assert [(r.node_id, r.kept, r.reason) for r in explained.rows] == [
            (r.node_id, r.kept, r.reason) for r in expected
        ]
        assert [r.final for r in explained.rows] == pytest.approx([r.final for r in expected])


# --- missing dates and foreign collections -----------------------------------------------

UNDATED = [
    ("Taro is stabilizing the TTS server.", "2026-08-28", 0.456),
    ("An undated note.", None, 0.47),
    ("Taro finished the benchmark article.", "2026-09-09", 0.408),
]


def undated_store(engine: str, garbled: object = None) -> BasePydanticVectorStore:
    nodes = known_cosine_nodes(UNDATED)
    if garbled is not None:
        nodes[1].metadata["date"] = garbled
    return store_of(nodes, engine)


@pytest.mark.parametrize("garbled", [None, "31/08/2026"])
def test_missing_date_no_bonus_ranks_on_raw_cosine_and_warns_once(
    garbled: object, caplog: pytest.LogCaptureFixture, engine: str
) -> None:
    store = undated_store(engine, garbled)
    retriever = retriever_for(store)
    with caplog.at_level(logging.WARNING, logger="llama_index_recency"):
        found = retriever.retrieve(e0_query(4))
        retriever.retrieve(e0_query(4))
    warnings = [r.getMessage() for r in caplog.records]
    assert [text.split(": ")[-1] for text in texts(found)] == [fact for fact, _, _ in UNDATED]
    assert [round(n.score, 6) for n in found] == [
        round(0.456 + 0.05 * math.exp(-13 / 14), 6), 0.47, round(0.408 + 0.05 * math.exp(-1 / 14), 6)
    ]
    expected = RecencyBonusPostprocessor(reference_date=SEED_TODAY).postprocess_nodes(
        all_candidates(store, e0_query(4), 3)
    )
    assert [n.score for n in found] == pytest.approx([n.score for n in expected], abs=1e-6)
    assert len(warnings) == 1
    assert found[1].node.node_id in warnings[0]


def test_missing_date_drop_leaves_the_memory_out(engine: str) -> None:
    found = retriever_for(undated_store(engine), on_missing_date="drop").retrieve(e0_query(4))
    assert facts(found) == [
        "Taro is stabilizing the TTS server.", "Taro finished the benchmark article."
    ]


@pytest.mark.parametrize("garbled", [None, "31/08/2026"])
def test_missing_date_raise_names_the_point_and_value(garbled: object, engine: str) -> None:
    store = undated_store(engine, garbled)
    (undated,) = [n for n in store.get_nodes() if n.metadata.get("date") in (None, garbled)]
    retriever = retriever_for(store, on_missing_date="raise")
    with pytest.raises(MemoryDateError, match=f"'{undated.node_id}'.*value {garbled!r}"):
        retriever.retrieve(e0_query(4))


def test_raise_ignores_undated_memories_that_cannot_reach_the_threshold(engine: str) -> None:
    rows = [("Taro is stabilizing the TTS server.", "2026-08-28", 0.456),
            ("A far-off undated note.", None, 0.30)]
    found = retriever_for(store_of(known_cosine_nodes(rows), engine), on_missing_date="raise").retrieve(
        e0_query(3)
    )
    assert [round(n.score, 3) for n in found] == [0.476]


def test_collection_without_dates_is_a_clear_error(engine: str) -> None:
    foreign = [TextNode(text=f"doc {i}", metadata={"source": "wiki"}, embedding=[1.0, float(i)])
               for i in range(3)]
    with pytest.raises(ValueError, match="none with a datetime under payload key 'date'.*"
                                         "not written by llama-index-recency"):
        retriever_for(store_of(foreign, engine)).retrieve(e0_query(2))


def test_missing_or_empty_collection_retrieves_nothing(engine: str) -> None:
    store = empty_store(engine, "nothing-yet")
    retriever = retriever_for(store)
    assert retriever.retrieve(e0_query(4)) == []
    assert retriever.explain(e0_query(4)).rows == ()
    store.add(known_cosine_nodes(H2))  # the first write creates it; the retriever picks it up
    assert [round(n.score, 3) for n in retriever.retrieve(e0_query(6))] == [0.476, 0.464, 0.455]


# --- async, engines, and the index built by this package ---------------------------------


async def test_async_only_embedded_client() -> None:
    store = QdrantVectorStore(collection_name="memories", aclient=AsyncQdrantClient(location=":memory:"))
    await store.async_add(known_cosine_nodes(H2))
    retriever = retriever_for(store)
    found = await retriever.aretrieve(e0_query(6))
    assert [round(n.score, 3) for n in found] == [0.476, 0.464, 0.455]
    explained = await retriever.aexplain(e0_query(6))
    # The window is raw >= 0.45 - 0.05: the 0.399 memory dated today is not a candidate.
    assert [(round(r.raw, 3), r.reason) for r in explained.rows] == [
        (0.456, "kept"), (0.421, "kept"), (0.408, "kept"), (0.449, "below 0.45")
    ]
    with pytest.raises(ValueError, match="only an async Qdrant client"):
        retriever.retrieve(e0_query(6))


def seed_index():
    """The package's own path: memory_node + open_memory_index, embedded with known cosines."""
    nodes = [memory_node(fact, day) for fact, day, _ in H2]
    index = open_memory_index(KnownCosineEmbedding(cosines_for(nodes, [r for *_, r in H2])))
    index.insert_nodes(nodes)
    return index


def test_from_index_embeds_the_question() -> None:
    retriever = QdrantRecencyRetriever.from_index(
        seed_index(), RecencyBonusPostprocessor(reference_date=SEED_TODAY)
    )
    assert [round(n.score, 3) for n in retriever.retrieve(QUERY)] == [0.476, 0.464, 0.455]


def test_drops_into_retriever_query_engine_and_context_chat_engine() -> None:
    retriever = QdrantRecencyRetriever.from_index(
        seed_index(), RecencyPolicy(reference_date=SEED_TODAY, top_n=2)
    )
    response = RetrieverQueryEngine.from_args(retriever, llm=MockLLM()).query(QUERY)
    assert [round(n.score, 3) for n in response.source_nodes] == [0.476, 0.464]
    chat = ContextChatEngine.from_defaults(retriever=retriever, llm=MockLLM())
    assert [round(n.score, 3) for n in chat.chat(QUERY).source_nodes] == [0.476, 0.464]


# --- a crowded window, scoping, and async on every engine -----------------------------------


def crowded_nodes(n_crowd: int, dim: int = 16) -> list[TextNode]:
    """A daily-habit log: ``n_crowd`` near-identical old memories (raw 0.60-0.61) and three fresh
    ones (raw 0.57-0.58) that the bonus makes the true top 3 from beyond rank ``n_crowd``."""
    rng = np.random.default_rng(7)
    rows = [(f"Taro had tea, day {i}.", (REFERENCE - timedelta(days=60 + i % 700)).date(),
             0.60 + 0.01 * i / n_crowd) for i in range(n_crowd)]
    rows += [(f"Taro switched to coffee, note {i}.", (REFERENCE - timedelta(days=i)).date(),
              0.58 - 0.005 * i) for i in range(3)]
    nodes = []
    for fact, day, raw in rows:
        noise = rng.normal(size=dim - 1)
        noise *= math.sqrt(1.0 - raw * raw) / np.linalg.norm(noise)
        node = memory_node(fact, day)
        node.embedding = [raw, *noise.tolist()]
        nodes.append(node)
    return nodes


@pytest.mark.slow
def test_fresh_memories_beyond_rank_1000_in_a_crowded_window_are_found(engine: str) -> None:
    store = store_of(crowded_nodes(1500), engine)
    query = e0_query(16)
    found = retriever_for(store).retrieve(query)
    assert facts(found) == [f"Taro switched to coffee, note {i}." for i in range(3)]
    by_raw = all_candidates(store, query, 1503)
    ranks = [next(r for r, c in enumerate(by_raw) if c.node.node_id == n.node.node_id) for n in found]
    assert min(ranks) >= 1500  # all three rank last by raw cosine
    expected = RecencyBonusPostprocessor(reference_date=SEED_TODAY).postprocess_nodes(by_raw)
    assert [n.node.node_id for n in found] == [n.node.node_id for n in expected]


def test_a_users_scope_is_applied_inside_every_search(engine: str) -> None:
    """Two users with the identical fact on the same day: neither query sees the other's memory."""
    nodes = []
    for user, raw in (("taro", 0.47), ("hanako", 0.48)):
        for fact, day, _ in H2[:3]:
            node = memory_node(fact, day, metadata={"user_id": user})
            node.id_ = f"{node.node_id[:-4]}{'0001' if user == 'taro' else '0002'}"
            nodes.append(node)
    for i, node in enumerate(nodes):
        raw = [0.456, 0.421, 0.408][i % 3] + (0.02 if i >= 3 else 0.0)  # hanako's score higher
        node.embedding = [raw] + [math.sqrt(1 - raw * raw) if d == i else 0.0 for d in range(6)]
    store = store_of(nodes, engine)
    policy = RecencyBonusPostprocessor(reference_date=SEED_TODAY)
    for user in ("taro", "hanako"):
        retriever = QdrantRecencyRetriever(store, MockEmbedding(embed_dim=1), policy, user_id=user)
        found = retriever.retrieve(e0_query(7))
        assert len(found) == 3
        assert {n.node.metadata["user_id"] for n in found} == {user}
    unscoped = QdrantRecencyRetriever(store, MockEmbedding(embed_dim=1), policy).retrieve(e0_query(7))
    # Unscoped, the two users' memories mix (0.496, 0.484 hanako; 0.476 taro).
    assert [n.node.metadata["user_id"] for n in unscoped] == ["hanako", "hanako", "taro"]


async def test_async_retrieval_matches_sync_and_raises_like_it(engine: str) -> None:
    store = undated_store(engine)
    retriever = retriever_for(store)
    assert texts(await retriever.aretrieve(e0_query(4))) == texts(retriever.retrieve(e0_query(4)))
    assert (await retriever.aexplain(e0_query(4))).rows == retriever.explain(e0_query(4)).rows
    with pytest.raises(MemoryDateError, match="no usable 'date'"):
        await retriever_for(store, on_missing_date="raise").aretrieve(e0_query(4))


async def test_async_on_empty_missing_and_foreign_stores(engine: str) -> None:
    empty = retriever_for(empty_store(engine, "not-yet"))
    assert await empty.aretrieve(e0_query(2)) == []
    assert (await empty.aexplain(e0_query(2))).rows == ()
    foreign = [TextNode(text=f"doc {i}", metadata={}, embedding=[1.0, float(i)]) for i in range(2)]
    with pytest.raises(ValueError, match="not written by llama-index-recency"):
        await retriever_for(store_of(foreign, engine)).aretrieve(e0_query(2))


def test_dates_qdrant_cannot_read_get_no_bonus_on_both_sides(engine: str) -> None:
    """'20260909' parses in Python but not in Qdrant's date filter: it must count as undated
    (no bonus) everywhere, or the exact search would miss it (0.465 + 0.047 would win)."""
    rows = [(f"Old note {i}.", "2023-01-01", 0.47 - i * 1e-4) for i in range(20)]
    rows += [(f"Recent note {i}.", "2026-09-08", 0.46 - i * 1e-3) for i in range(3)]
    nodes = known_cosine_nodes(rows + [("Compact date note.", None, 0.465)])
    nodes[-1].metadata["date"] = "20260909"
    store = store_of(nodes, engine)
    dim = len(rows) + 2
    found = retriever_for(store).retrieve(e0_query(dim))
    expected = RecencyBonusPostprocessor(reference_date=SEED_TODAY).postprocess_nodes(
        all_candidates(store, e0_query(dim), dim)
    )
    assert [n.node.node_id for n in found] == [n.node.node_id for n in expected]
    assert "Compact date note." not in facts(found)


def test_a_question_pointing_to_the_past_gets_the_scaled_bonus_like_the_postprocessor(
    engine: str,
) -> None:
    store = store_of(known_cosine_nodes(H2), engine)
    past = QueryBundle("This is an old story, but what did I do?", embedding=e0_query(6).embedding)
    retriever = retriever_for(store, past_bonus_scale=0.0)
    found = retriever.retrieve(past)
    # No bonus: only raw cosines >= 0.45 pass (0.456 TTS server), as the postprocessor keeps.
    assert [round(n.score, 3) for n in found] == [0.456]
    expected = retriever.policy.postprocess_nodes(all_candidates(store, past, 6), past)
    assert [n.node.node_id for n in found] == [n.node.node_id for n in expected]
    assert [round(n.score, 3) for n in retriever.retrieve(e0_query(6))] == [0.476, 0.464, 0.455]


# --- vague references: the recent memories fill the places left (issue 19) ---------------------

VAGUE = "How did that thing you were working on go?"
RECENT = [
    ("Taro bought a keyboard.", "2026-06-01", 0.60),  # old but on topic: passes, stays first
    ("Taro made mentaiko pasta at home.", "2026-09-08", 0.30),  # 0.30 + 0.043 = 0.343
    ("Taro is stabilizing the TTS server.", "2026-08-28", 0.35),  # 0.35 + 0.020 = 0.370
    ("Taro finished the benchmark article.", "2026-09-09", 0.20),  # 0.20 + 0.047 = 0.247
    ("Taro went to a hot spring.", "2026-08-14", 0.40),  # 27 days old: outside the window
]


def vague_query(dim: int, text: str = VAGUE) -> QueryBundle:
    return QueryBundle(text, embedding=e0_query(dim).embedding)


def test_a_vague_reference_fills_the_places_left_with_recent_memories(engine: str) -> None:
    retriever = retriever_for(store_of(known_cosine_nodes(RECENT), engine))
    ranking = retriever.explain(vague_query(6))
    assert ranking.vague
    assert facts(ranking.nodes) == [RECENT[0][0], RECENT[2][0], RECENT[1][0]]
    assert [(round(r.final, 3), r.reason) for r in ranking.rows[:3]] == [
        (0.6, "kept"), (0.37, "recent (vague reference)"), (0.343, "recent (vague reference)"),
    ]
    assert [n.score for n in ranking.nodes] == [r.final for r in ranking.rows[:3]]
    # Every node says the question was vague, and the mark never reaches the LLM's text.
    for node in ranking.nodes:
        assert node.node.metadata["vague_reference"] is True
        assert "vague_reference" not in node.node.get_content(metadata_mode="llm")
        assert "vague_reference" not in node.node.get_content(metadata_mode="embed")


def test_a_question_that_is_not_vague_is_unaffected(engine: str) -> None:
    retriever = retriever_for(store_of(known_cosine_nodes(RECENT), engine))
    ranking = retriever.explain(vague_query(6, "Which keyboard did I buy?"))
    assert not ranking.vague
    assert facts(ranking.nodes) == [RECENT[0][0]]
    assert "vague_reference" not in ranking.nodes[0].node.metadata


@pytest.mark.slow
def test_nothing_recent_brings_nothing_new_and_the_path_can_be_turned_off(engine: str) -> None:
    old = [RECENT[0], RECENT[4], ("Taro likes trains.", "2026-04-01", 0.44)]
    ranking = retriever_for(store_of(known_cosine_nodes(old), engine)).explain(vague_query(4))
    assert ranking.vague and facts(ranking.nodes) == [RECENT[0][0]]
    store = store_of(known_cosine_nodes(RECENT), engine, "off")
    off = QdrantRecencyRetriever(store, MockEmbedding(embed_dim=1),
                                 RecencyBonusPostprocessor(reference_date=SEED_TODAY),
                                 vague_window_days=None)
    ranking = off.explain(vague_query(6))
    assert not ranking.vague and facts(ranking.nodes) == [RECENT[0][0]]
    with pytest.raises(ValueError, match="vague_window_days"):
        QdrantRecencyRetriever(store, MockEmbedding(embed_dim=1), vague_window_days=0)


def test_the_recent_memories_are_the_best_in_the_window_even_past_the_first_search(
    engine: str,
) -> None:
    """40 memories in the window, the newer ones lower in cosine: the bonus reorders them, so
    the window search must widen until the places are proven (the brute-force answer)."""
    rows = [(f"Note {i}.", (REFERENCE - timedelta(days=13 - i % 14)).date().isoformat(),
             0.30 - 0.002 * i) for i in range(40)]
    store = store_of(known_cosine_nodes(rows), engine)
    retriever = retriever_for(store, top_n=4)
    ranking = retriever.explain(vague_query(41))
    policy = retriever.policy
    expected = policy.rank(all_candidates(store, vague_query(41), 41), REFERENCE,
                           threshold=-math.inf).nodes
    assert [n.node.node_id for n in ranking.nodes] == [n.node.node_id for n in expected]
    assert facts(ranking.nodes) != [r[0] for r in rows[:4]]  # the bonus did reorder them
    assert all(r.reason == "recent (vague reference)" for r in ranking.rows[:4])


def test_a_vague_reference_lists_only_the_users_own_recent_memories(engine: str) -> None:
    rows = [("Taro made curry.", "2026-09-08", 0.30, "taro"),
            ("Hanako ran a marathon.", "2026-09-09", 0.40, "hanako")]
    nodes = []
    for i, (fact, day, raw, user) in enumerate(rows):
        node = memory_node(fact, day, user_id=user)
        node.embedding = [raw] + [0.0] * len(rows)
        node.embedding[i + 1] = math.sqrt(1 - raw * raw)
        nodes.append(node)
    store = store_of(nodes, engine)
    policy = RecencyBonusPostprocessor(reference_date=SEED_TODAY)
    retriever = QdrantRecencyRetriever(store, MockEmbedding(embed_dim=1), policy, user_id="taro")
    assert facts(retriever.retrieve(vague_query(3))) == ["Taro made curry."]


async def test_a_vague_reference_takes_the_same_path_async() -> None:
    store = QdrantVectorStore(collection_name="memories",
                              aclient=AsyncQdrantClient(location=":memory:"))
    await store.async_add(known_cosine_nodes(RECENT))
    retriever = retriever_for(store)
    ranking = await retriever.aexplain(vague_query(6))
    assert ranking.vague
    assert facts(ranking.nodes) == [RECENT[0][0], RECENT[2][0], RECENT[1][0]]
    edge = retriever_for(store_of(known_cosine_nodes(RECENT), "edge", "edge"))
    assert facts(await edge.aretrieve(vague_query(6))) == facts(ranking.nodes)


def test_a_store_that_is_not_qdrant_is_refused_in_one_line_when_the_retriever_is_built() -> None:
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding

    plain = VectorStoreIndex([], embed_model=MockEmbedding(embed_dim=4))  # SimpleVectorStore
    with pytest.raises(TypeError, match=r"memories live in Qdrant Edge or Qdrant .* not in a "
                                        r"SimpleVectorStore$"):
        QdrantRecencyRetriever.from_index(plain, RecencyPolicy())


def test_raise_finds_an_undated_memory_that_could_pass_below_dated_ones(engine: str) -> None:
    """With on_missing_date="raise", an undated memory that could pass raises even when
    dated memories score above it: the plan looks for undated ones on their own."""
    rows = [(f"Taro noted server fact {i}.", "2026-08-28", 0.60 - 0.005 * i) for i in range(20)]
    rows.append(("An undated note about the server.", None, 0.47))
    retriever = retriever_for(store_of(known_cosine_nodes(rows), engine), on_missing_date="raise")
    with pytest.raises(MemoryDateError, match="value None"):
        retriever.retrieve(e0_query(len(rows) + 1))

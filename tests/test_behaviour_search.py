"""What a user relies on from the exact search: the threshold is inclusive, and a question
costs a few searches (the plan's loops end), on the plan itself and on a real Edge store."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest
from llama_index.core import MockEmbedding
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery

from llama_index_recency import (
    QdrantRecencyRetriever,
    RecencyPolicy,
    memory_node,
    open_memory_index,
)
from llama_index_recency.errors import MemoryStoreDamagedError
from llama_index_recency.querying.exact import ExactSearch
from llama_index_recency.ranking.plan import MemorySearch, SearchPlan, exact_recency_search
from llama_index_recency.ranking.policy import parse_memory_date
from llama_index_recency.storage import QdrantEdgeVectorStore, QuestionScans, run_search
from llama_index_recency.storage.edge_points import node_point

from conftest import QUERY, KnownCosineEmbedding, cosines_for, drive_plan

REFERENCE = datetime(2026, 9, 10, tzinfo=timezone.utc)


def memory(i: int, raw: float, age_days: float) -> NodeWithScore:
    day = (REFERENCE - timedelta(days=age_days)).isoformat()
    return NodeWithScore(node=TextNode(id_=f"m{i:04d}", text=f"memory {i}",
                                       metadata={"date": day}), score=raw)


def answer(memories: Sequence[NodeWithScore], search: MemorySearch) -> list[NodeWithScore]:
    """What every engine answers a plain search: the top ``limit`` by raw cosine among the
    memories dated ``since`` (if set)."""
    assert search.filters is None and not search.undated_only
    matching = [m for m in memories if search.since is None
                or parse_memory_date(m.node.metadata["date"]) >= search.since]
    return sorted(matching, key=lambda m: -(m.score or 0.0))[: search.limit]


def drive(plan: SearchPlan, memories: Sequence[NodeWithScore], at_most: int
          ) -> tuple[list[NodeWithScore], list[MemorySearch]]:
    """Run ``plan`` over ``memories``; fails as soon as it asks more than ``at_most`` searches
    (so a plan that never ends fails instead of hanging)."""
    ranking, searches = drive_plan(plan, lambda search: answer(memories, search), at_most)
    return list(ranking.nodes), searches


def a_year_of_memories(count: int, seed: int = 7) -> list[NodeWithScore]:
    rng = random.Random(seed)
    return [memory(i, rng.uniform(0.2, 0.9), rng.uniform(0, 365)) for i in range(count)]


# --- the threshold is inclusive ---------------------------------------------------------------

def test_a_memory_whose_final_score_is_exactly_the_threshold_is_kept() -> None:
    """The specification: kept when cosine + bonus >= threshold. 0.25 + 0.25 (dated on the
    reference day: the whole weight) is 0.5 exactly, in floating point too."""
    policy = RecencyPolicy(weight=0.25, tau_days=14, threshold=0.5, top_n=3)
    exact = memory(1, 0.25, 0.0)
    crowd = [memory(100 + i, 0.3 - i * 1e-4, 400.0) for i in range(40)]  # old, all under 0.5
    below = memory(2, 0.25 - 1e-9, 0.0)
    nodes, _ = drive(exact_recency_search(policy, REFERENCE), [exact, below, *crowd], 10)
    assert [(n.node.node_id, n.score) for n in nodes] == [("m0001", 0.5)]


def test_memories_at_exactly_the_threshold_fill_the_top_n_in_raw_order() -> None:
    """Several memories at exactly the threshold: the top n of them are kept, none dropped
    for sitting on the line."""
    policy = RecencyPolicy(weight=0.25, tau_days=14, threshold=0.5, top_n=2)
    on_the_line = [memory(i, 0.25, 0.0) for i in range(1, 4)]
    nodes, _ = drive(exact_recency_search(policy, REFERENCE), on_the_line, 10)
    assert [(n.node.node_id, n.score) for n in nodes] == [("m0001", 0.5), ("m0002", 0.5)]


# --- a question costs a few searches ----------------------------------------------------------

@pytest.mark.parametrize("top_n, count", [(1, 2), (3, 3), (8, 3)])
def test_a_year_of_memories_is_ranked_in_a_few_searches_of_16(top_n: int, count: int) -> None:
    """2000 memories over a year: one search of every memory, then the youngest tier(s)
    prove the answer; a plan doing several times that work fails here."""
    policy = RecencyPolicy(weight=0.05, tau_days=14, threshold=0.45, top_n=top_n)
    memories = a_year_of_memories(2000)
    nodes, searches = drive(exact_recency_search(policy, REFERENCE), memories, count)
    assert [s.limit for s in searches] == [16] * count
    assert searches[0].since is None and all(s.since is not None for s in searches[1:])
    everything = policy.rank(sorted(memories, key=lambda m: -(m.score or 0.0)), REFERENCE)
    assert [n.node.node_id for n in nodes] == [n.node.node_id for n in everything.nodes]


def test_a_crowd_of_near_ties_widens_a_bounded_number_of_times() -> None:
    """500 recent near-ties need wider searches, but a bounded number of them: each round
    asks 4x as many, so a few rounds cover the whole crowd."""
    crowd = [memory(i, 0.5 - i * 1e-6, (i % 50) / 10) for i in range(500)]
    policy = RecencyPolicy(weight=0.05, tau_days=14, threshold=0.45, top_n=3)
    nodes, searches = drive(exact_recency_search(policy, REFERENCE), crowd, 12)
    assert max(s.limit for s in searches) <= 16 * 4 ** 3  # 1024 >= 500: never wider than needed
    everything = policy.rank(sorted(crowd, key=lambda m: (-(m.score or 0.0), m.node.node_id)),
                             REFERENCE)
    assert [n.node.node_id for n in nodes] == [n.node.node_id for n in everything.nodes]


class ReadsCounted:
    """A real Edge shard whose reads of points by id are recorded (how many ids each)."""

    def __init__(self, shard: Any, reads: list[int]) -> None:
        self.shard, self.reads = shard, reads

    def retrieve(self, *args: Any) -> Any:
        self.reads.append(len(args[0]))
        return self.shard.retrieve(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.shard, name)


def test_the_retriever_asks_a_real_edge_store_four_searches_for_a_question(monkeypatch) -> None:
    """A daily-habit log on Edge: 150 near-identical old memories outscore three fresh ones by
    raw cosine. The exact search's search of every memory and three tier searches (the young
    brackets, down to the one reaching the old crowd) prove the fresh ones win; no memory
    lists a successor, so none is searched for; nothing more."""
    old = [memory_node(f"Taro had his usual coffee, day {i}.",
                       (REFERENCE - timedelta(days=60 + i)).date(), user_id="taro")
           for i in range(150)]
    fresh = [memory_node(f"Taro switched to green tea, note {i}.",
                         (REFERENCE - timedelta(days=1 + i)).date(), user_id="taro")
             for i in range(3)]
    raws = [0.600 + i * 1e-4 for i in range(150)] + [0.580, 0.579, 0.578]
    index = open_memory_index(KnownCosineEmbedding(cosines_for([*old, *fresh], raws)))
    index.insert_nodes([*old, *fresh])
    searches: list[int] = []
    store_class = type(index.vector_store)
    original = store_class.query

    def counted(store, *args, **kwargs):
        searches.append(1)
        assert len(searches) <= 4, "more than 4 searches for one question"
        return original(store, *args, **kwargs)

    monkeypatch.setattr(store_class, "query", counted)
    reads: list[int] = []  # the shard's reads by id: the candidates' vectors come with a query
    monkeypatch.setattr(index.vector_store, "_shard", ReadsCounted(index.vector_store.client,
                                                                   reads))
    policy = RecencyPolicy(reference_date=REFERENCE.date().isoformat(), top_n=3)
    found = QdrantRecencyRetriever.from_index(index, policy, user_id="taro").retrieve(QUERY)
    assert [n.node.node_id for n in found] == [n.node_id for n in fresh]
    assert len(searches) == 4 and reads == []


def test_the_versions_window_is_read_by_id_from_the_questions_one_scan(monkeypatch) -> None:
    """On Edge the exact search and the newer-versions window share one scan of the store
    (ids and scores); the window reads by id, vectors included, only the memories the exact
    search did not return (those under the gate's reach)."""
    versions = [memory_node(f"Taro drinks coffee, way {i}.", (REFERENCE - timedelta(days=9 * i)).date(),
                            user_id="taro") for i in range(5)]
    others = [memory_node(f"Taro noted thing {i}.", (REFERENCE - timedelta(days=i)).date(),
                          user_id="taro") for i in range(20)]
    raws = [0.60, 0.61, 0.62, 0.63, 0.64] + [0.10 + 0.01 * i for i in range(20)]
    index = open_memory_index(KnownCosineEmbedding(cosines_for([*versions, *others], raws)))
    index.insert_nodes([*versions, *others])
    searches: list[int] = []
    store_class = type(index.vector_store)
    original = store_class.query
    monkeypatch.setattr(store_class, "query", lambda store, *args, **kwargs: (
        searches.append(1), original(store, *args, **kwargs))[1])
    reads: list[int] = []
    monkeypatch.setattr(index.vector_store, "_shard", ReadsCounted(index.vector_store.client,
                                                                   reads))
    policy = RecencyPolicy(reference_date=REFERENCE.date().isoformat(), supersede_margin=0.05)
    ranking = QdrantRecencyRetriever.from_index(index, policy, user_id="taro").explain(QUERY)
    assert ranking.rows
    assert len(searches) == 1  # one scan: the exact search's, covering the window
    assert reads == [5, 15]  # the candidates' nodes, then the rest of the window's 20


def _rows_with_and_without_the_shared_scan(
    monkeypatch, retriever: QdrantRecencyRetriever, questions: Sequence[QueryBundle]
) -> tuple[list, list]:
    """Each question's rows (id, verdict, reason, final score) with the question's shared
    scan, then with every search run on its own."""
    def rows() -> list[list[tuple[str, bool, str, float]]]:
        return [[(r.node_id, r.kept, r.reason, round(r.final, 9))
                 for r in retriever.explain(question).rows] for question in questions]

    shared = rows()
    with monkeypatch.context() as patched:
        patched.setattr(ExactSearch, "_scans", lambda *args: None)
        return shared, rows()


def dated_memory(text: str, days_ago: float, vector: Sequence[float]) -> TextNode:
    """Taro's memory ``text`` dated ``days_ago`` before the reference, stored with the unit
    vector along ``vector``."""
    node = memory_node(text, (REFERENCE - timedelta(days=days_ago)).date(), user_id="taro")
    node.embedding = (np.asarray(vector) / np.linalg.norm(vector)).tolist()
    return node


def test_one_scan_per_question_ranks_as_separate_searches_do(monkeypatch) -> None:
    """The shared scan is only a cheaper way to the same searches: over clusters of dated
    near-repeats (the newer-versions step at work, windows widening in crowds), every
    question's rows, verdicts and final scores are those of the plan run search by search."""
    rng = np.random.default_rng(5)
    topics = rng.normal(size=(12, 24))
    nodes = [dated_memory(f"Taro's note {i}.", int(rng.integers(0, 200)),
                          topics[i % 12] + rng.normal(scale=0.35 if i % 3 else 0.15, size=24))
             for i in range(300)]
    # A crowd of recent repeats on the first topic: searches widen.
    nodes += [dated_memory(f"Taro's daily note {i}.", i % 5, topics[0]) for i in range(80)]
    index = open_memory_index(MockEmbedding(embed_dim=24))
    index.insert_nodes(nodes)
    policy = RecencyPolicy(reference_date=REFERENCE.date().isoformat(), threshold=0.8,
                           supersede_margin=0.05)
    retriever = QdrantRecencyRetriever.from_index(index, policy)
    questions = [QueryBundle(QUERY, embedding=(q / np.linalg.norm(q)).tolist())
                 for q in topics + rng.normal(scale=0.2, size=topics.shape)]
    shared, alone = _rows_with_and_without_the_shared_scan(monkeypatch, retriever, questions)
    assert sum("newer version" in r[2] for rows in shared for r in rows) >= 3
    assert alone == shared


def test_memories_stored_under_any_spelling_of_their_uuid_are_found(monkeypatch) -> None:
    """Plain ``insert_nodes`` keeps an id as written ("beb1f665…" without hyphens): the shared
    scan still finds those memories, under the ids they were written with."""
    nodes = [memory_node(f"Taro drinks coffee, way {i}.", (REFERENCE - timedelta(days=9 * i)).date(),
                         user_id="taro") for i in range(5)]
    for node in nodes:
        node.id_ = uuid.UUID(node.node_id).hex
    index = open_memory_index(KnownCosineEmbedding(cosines_for(nodes, [0.60, 0.61, 0.62, 0.63, 0.64])))
    index.insert_nodes(nodes)
    policy = RecencyPolicy(reference_date=REFERENCE.date().isoformat(), supersede_margin=0.05)
    retriever = QdrantRecencyRetriever.from_index(index, policy, user_id="taro")
    shared, alone = _rows_with_and_without_the_shared_scan(monkeypatch, retriever, [QUERY])
    assert {row[0] for row in shared[0]} == {node.node_id for node in nodes}
    assert shared == alone


def test_memories_tied_across_a_searchs_limit_are_ranked_as_edge_ranks_them(monkeypatch) -> None:
    """Forty memories at exactly one cosine: which of them Edge returns for a search depends on
    how many it asks for, so a search whose limit cuts through the tie runs on its own."""
    nodes = [dated_memory(f"Taro's note {i}.", 3 * i + 1, 0.7 * np.eye(64)[0]
                          + np.sqrt(1 - 0.49) * np.eye(64)[1 + i]) for i in range(40)]
    index = open_memory_index(MockEmbedding(embed_dim=64))
    index.insert_nodes(nodes)
    policy = RecencyPolicy(reference_date=REFERENCE.date().isoformat(), threshold=0.6,
                           supersede_margin=0.05)
    retriever = QdrantRecencyRetriever.from_index(index, policy)
    question = QueryBundle(QUERY, embedding=[1.0] + [0.0] * 63)
    shared, alone = _rows_with_and_without_the_shared_scan(monkeypatch, retriever, [question])
    assert shared == alone


def test_a_search_answered_from_the_scan_keeps_what_edge_keeps_at_its_threshold() -> None:
    """``min_score`` as Edge reads it: a score equal to it (as a float32) is left out, one
    just over it kept, whether Edge runs the search or the question's scan answers it."""
    nodes = [memory_node(f"Taro's note {i}.", (REFERENCE - timedelta(days=i)).date())
             for i in range(10)]
    raws = [0.9 - 0.05 * i for i in range(10)]
    index = open_memory_index(KnownCosineEmbedding(cosines_for(nodes, raws)))
    index.insert_nodes(nodes)
    store, question = index.vector_store, [1.0] + [0.0] * len(nodes)
    scores = store.query(VectorStoreQuery(query_embedding=question, similarity_top_k=10)).similarities
    for min_score in [*scores, *(score - 1e-9 for score in scores), 0.0]:
        search = MemorySearch(limit=16, min_score=min_score)
        alone = run_search(store, search, question, "date", None)
        scanned = run_search(store, search, question, "date", None,
                             QuestionScans(store, question, 20))
        assert [n.node.node_id for n in scanned] == [n.node.node_id for n in alone], min_score


@pytest.mark.parametrize("written_id", ["memo-5", "99a29dfe-bb32-4b36-a013-ef1741e399ae"])
def test_a_point_copied_in_under_another_id_than_its_nodes_is_found(monkeypatch,
                                                                     written_id: str) -> None:
    """A point copied in (``upsert_points``) whose node names another id than the point's:
    the shared scan finds it, as Edge alone does, under the id its node names."""
    nodes = [dated_memory(f"Taro's note {i}.", 9 - i, (0.9 - 0.05 * i) * np.eye(8)[0]
                          + np.sqrt(1 - (0.9 - 0.05 * i) ** 2) * np.eye(8)[1 + i])
             for i in range(5)]
    index = open_memory_index(MockEmbedding(embed_dim=8))
    index.insert_nodes(nodes[:4])
    _, vector, payload = node_point(nodes[4], flat_metadata=False)
    payload["_node_content"] = json.dumps({**json.loads(payload["_node_content"]),
                                           "id_": written_id})
    index.vector_store.upsert_points([(nodes[4].node_id, vector, payload)])
    policy = RecencyPolicy(reference_date=REFERENCE.date().isoformat(), threshold=0.0, top_n=10,
                           supersede_margin=0.05)
    retriever = QdrantRecencyRetriever.from_index(index, policy)
    question = QueryBundle(QUERY, embedding=[1.0] + [0.0] * 7)
    shared, alone = _rows_with_and_without_the_shared_scan(monkeypatch, retriever, [question])
    assert written_id in {row[0] for row in shared[0]} and shared == alone


def _notes_and_a_fresh_one() -> tuple[Any, list[TextNode], TextNode]:
    """Twenty old notes of Taro's near the question (cosine 0.850-0.869) and a fresh one
    (0.78) that only its recency bonus lifts over them, on Edge."""
    axes = np.eye(40)
    old = [dated_memory(f"Taro's old note {i}.", 300 + i, (0.85 + 0.001 * i) * axes[0]
                        + np.sqrt(1 - (0.85 + 0.001 * i) ** 2) * axes[1 + i]) for i in range(20)]
    fresh = dated_memory("Taro's fresh note.", 0, 0.78 * axes[0] + np.sqrt(1 - 0.78**2) * axes[39])
    index = open_memory_index(MockEmbedding(embed_dim=40))
    index.insert_nodes([*old, fresh])
    return index, old, fresh


NOTES_QUESTION = QueryBundle(QUERY, embedding=[1.0] + [0.0] * 39)


def _written_before_the_first_read_by_id(monkeypatch, write) -> None:
    """Make another thread's ``write(store)`` land between a question's scan and its first
    read of nodes by id."""
    original, done = QdrantEdgeVectorStore.nodes_by_point, []

    def read(store, points):
        if not done:
            done.append(write(store))
        return original(store, points)

    monkeypatch.setattr(QdrantEdgeVectorStore, "nodes_by_point", read)


def test_a_memory_deleted_between_the_scan_and_the_read_leaves_no_search_short(
        monkeypatch) -> None:
    """A delete landing between the question's scan and its read by id: the question ranks
    the store as the delete left it, the fresh memory first, as Edge alone does."""
    index, old, fresh = _notes_and_a_fresh_one()
    policy = RecencyPolicy(reference_date=REFERENCE.date().isoformat(), threshold=0.8,
                           weight=0.1, top_n=3, supersede_margin=0.05)
    retriever = QdrantRecencyRetriever.from_index(index, policy)
    with monkeypatch.context() as patched:
        _written_before_the_first_read_by_id(
            patched, lambda store: store.delete_nodes([old[-1].node_id]))
        shared = [(r.node_id, r.kept) for r in retriever.explain(NOTES_QUESTION).rows]
    with monkeypatch.context() as patched:
        patched.setattr(ExactSearch, "_scans", lambda *args: None)
        alone = [(r.node_id, r.kept) for r in retriever.explain(NOTES_QUESTION).rows]
    assert shared[0] == (fresh.node_id, True)
    assert shared == alone and old[-1].node_id not in dict(shared)


def test_a_point_rewritten_for_another_user_during_a_question_never_reaches_it(
        monkeypatch) -> None:
    """Another thread rewrites one of Taro's points with Hana's memory between Taro's scan and
    its read by id: Taro's question never returns Hana's memory."""
    index, old, _ = _notes_and_a_fresh_one()
    hana = memory_node("Hana's private note.", REFERENCE.date(), user_id="hana")
    hana.embedding = old[-1].embedding

    def rewrite(store) -> None:
        _, vector, payload = node_point(hana, flat_metadata=False)
        store.upsert_points([(old[-1].node_id, vector, payload)])

    policy = RecencyPolicy(reference_date=REFERENCE.date().isoformat(), threshold=0.8,
                           weight=0.1, top_n=3, supersede_margin=0.05)
    retriever = QdrantRecencyRetriever.from_index(index, policy, user_id="taro")
    with monkeypatch.context() as patched:
        _written_before_the_first_read_by_id(patched, rewrite)
        found = retriever.retrieve(NOTES_QUESTION)
    assert found and {n.node.metadata["user_id"] for n in found} == {"taro"}
    assert hana.node_id not in {n.node.node_id for n in found}


def test_a_damaged_payload_file_is_named_when_a_question_reads_nodes_by_id(tmp_path) -> None:
    """The question's scan reads ids and scores only, so a damaged payload file shows first in
    its read of nodes by id: still the one-line error naming the store."""
    index, _, _ = _notes_and_a_fresh_one()
    nodes = index.vector_store.get_nodes()
    path = tmp_path / "store"
    copy = open_memory_index(MockEmbedding(embed_dim=40), path=path)
    copy.vector_store.add(nodes)
    copy.vector_store.close()
    for page in path.glob("**/payload_storage/page_0.dat"):
        page.write_bytes(b"")
    reopened = open_memory_index(MockEmbedding(embed_dim=40), path=path)
    policy = RecencyPolicy(reference_date=REFERENCE.date().isoformat(), threshold=0.8,
                           supersede_margin=0.05)
    with pytest.raises(MemoryStoreDamagedError, match=f"the store at {path}"):
        QdrantRecencyRetriever.from_index(reopened, policy).explain(NOTES_QUESTION)

"""QdrantEdgeVectorStore on a real Edge shard: LlamaIndex's expectations, exactness, durability."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from llama_index.core import Document, MockEmbedding, StorageContext, VectorStoreIndex
from llama_index.core.schema import (
    ImageNode,
    IndexNode,
    Node,
    NodeRelationship,
    RelatedNodeInfo,
    TextNode,
)
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import QdrantClient

from llama_index_recency.errors import (
    InvalidInputError,
    MemoryStoreClosedError,
    MemoryStoreDamagedError,
    MemoryStoreLockedError,
    RecencyError,
)
from llama_index_recency.ranking.lexical import TERMS_KEY, stored_terms
from llama_index_recency.storage import QdrantEdgeVectorStore, term_counts
from llama_index_recency.storage.edge_cache import WriteAwareCache
from llama_index_recency.storage.edge_files import METADATA_FILE, close_shard, edge_calls

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def shard_path(tmp_path: Path) -> Path:
    return tmp_path / "shard"


@pytest.fixture
def store(shard_path: Path) -> Iterator[QdrantEdgeVectorStore]:
    store = QdrantEdgeVectorStore(shard_path)
    yield store
    store.close()


def node_id(i: int) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"node-{i}"))


def unit(vector: list[float]) -> list[float]:
    return list(np.asarray(vector) / np.linalg.norm(vector))


def rich_node() -> TextNode:
    return TextNode(
        id_=node_id(0),
        text="2026-08-01: Taro visited Nagano. 長野",
        metadata={"date": "2026-08-01", "user_id": "taro", "tags": ["trip", "旅"],
                  "nested": {"a": [1, 2.5, None], "b": True}, "rating": 4.5},
        excluded_embed_metadata_keys=["date"],
        excluded_llm_metadata_keys=["date", "user_id"],
        relationships={
            NodeRelationship.SOURCE: RelatedNodeInfo(node_id="doc-1", metadata={"k": "v"}),
            NodeRelationship.NEXT: RelatedNodeInfo(node_id=node_id(1)),
        },
        start_char_idx=3,
        end_char_idx=40,
        embedding=[3.0, 0.0, 4.0],
    )


def without_embedding(node: Any) -> Any:
    return node.model_copy(update={"embedding": None})


def test_a_node_round_trips_through_get_nodes_and_query(store: QdrantEdgeVectorStore) -> None:
    node = rich_node()
    assert store.add([node]) == [node.node_id]
    (got,) = store.get_nodes()
    assert without_embedding(got) == without_embedding(node)
    assert got.embedding == pytest.approx([0.6, 0.0, 0.8])  # Qdrant keeps cosine vectors unit
    assert got.ref_doc_id == "doc-1"
    result = store.query(VectorStoreQuery(query_embedding=[1.0, 0.0, 0.0], similarity_top_k=5))
    assert result.ids == [node.node_id]
    assert result.similarities == pytest.approx([0.6])
    assert result.nodes[0] == without_embedding(node)  # payloads only, as QdrantVectorStore
    query = VectorStoreQuery(query_embedding=[1.0, 0.0, 0.0], similarity_top_k=5)
    (asked,) = store.query(query, with_vectors=True).nodes  # one query's vectors
    assert asked.embedding == pytest.approx([0.6, 0.0, 0.8])
    assert store.query(query).nodes[0].embedding is None
    store.with_vectors = True  # for a re-ranker that compares them: every query's
    result = store.query(query)
    assert without_embedding(result.nodes[0]) == without_embedding(node)
    assert result.nodes[0].embedding == pytest.approx([0.6, 0.0, 0.8])


def test_a_scan_without_payloads_then_nodes_read_by_id(store: QdrantEdgeVectorStore) -> None:
    """``with_payload=False`` ranks ids without building a node; ``get_nodes`` by ids alone
    reads those (vectors included), skips ids the store does not hold, refuses a non-UUID."""
    near, far = (TextNode(id_=str(uuid.uuid4()), text=text, embedding=vector)
                 for text, vector in (("near", [1.0, 0.1, 0.0]), ("far", [0.0, 1.0, 0.0])))
    store.add([near, far])
    query = VectorStoreQuery(query_embedding=[1.0, 0.0, 0.0], similarity_top_k=5)
    scan = store.query(query, with_payload=False)
    assert scan.nodes is None and scan.ids == [near.node_id, far.node_id]
    assert scan.similarities == pytest.approx([0.995037, 0.0], abs=1e-6)
    got = store.get_nodes(node_ids=[far.node_id, str(uuid.uuid4()), near.node_id])
    assert sorted((n.node_id, n.get_content()) for n in got) == sorted(
        [(near.node_id, "near"), (far.node_id, "far")])
    assert all(n.embedding for n in got)
    with pytest.raises(InvalidInputError, match="'doc-1' is not a UUID"):
        store.get_nodes(node_ids=["doc-1"])


def test_each_node_kind_and_a_legacy_payload_read_back_with_their_vectors(
    store: QdrantEdgeVectorStore,
) -> None:
    """A node is read back as the class it was stored as, and a payload without
    ``_node_content`` (as LlamaIndex's oldest stores wrote one) as a text node; each carries
    its stored vector."""
    kinds = [rich_node(),
             IndexNode(id_=node_id(2), text="2026-08-02: the trip notes.", index_id="trip",
                       metadata={"date": "2026-08-02"}, embedding=[0.0, 2.0, 0.0]),
             ImageNode(id_=node_id(4), text="2026-08-04: a photo.", image_url="file:///a.png",
                       embedding=[0.0, 1.0, 1.0]),
             Node(id_=node_id(5), embedding=[1.0, 1.0, 0.0])]
    store.add(kinds)
    store.upsert_points([(node_id(3), [0.0, 0.0, 1.0],
                          {"text": "2026-08-03: an old line.", "date": "2026-08-03"})])
    got = {node.node_id: node for node in store.get_nodes()}
    for node in kinds:
        assert type(got[node.node_id]) is type(node)
        assert without_embedding(got[node.node_id]) == without_embedding(node)
        assert got[node.node_id].embedding == pytest.approx(unit(node.embedding))
    assert type(got[node_id(3)]) is TextNode
    assert (got[node_id(3)].get_content(), got[node_id(3)].metadata) == (
        "2026-08-03: an old line.", {"date": "2026-08-03"})
    assert got[node_id(3)].embedding == [0.0, 0.0, 1.0]
    scan = store.query(VectorStoreQuery(query_embedding=[1.0, 0.0, 0.0], similarity_top_k=9))
    assert {type(node) for node in scan.nodes} == {TextNode, IndexNode, ImageNode, Node}
    assert all(node.embedding is None for node in scan.nodes)  # payloads only


def test_works_under_a_vector_store_index(store: QdrantEdgeVectorStore) -> None:
    index = VectorStoreIndex.from_documents(
        [Document(text="Taro visited Nagano.", id_="doc-a"), Document(text="Rain.", id_="doc-b")],
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=MockEmbedding(embed_dim=4),
    )
    retrieved = index.as_retriever(similarity_top_k=5).retrieve("where did Taro go?")
    assert sorted(n.node.get_content() for n in retrieved) == ["Rain.", "Taro visited Nagano."]
    index.delete_ref_doc("doc-a")
    assert [n.get_content() for n in store.get_nodes()] == ["Rain."]


def test_payload_is_the_one_qdrant_vector_store_writes(store: QdrantEdgeVectorStore) -> None:
    local = QdrantVectorStore(collection_name="c", client=QdrantClient(location=":memory:"))
    local.add([rich_node()])
    store.add([rich_node()])
    (record,), _ = local.client.scroll("c", with_payload=True, with_vectors=True)
    ((point_id, vector, payload),) = list(store.iter_points())
    assert payload.pop(TERMS_KEY) == stored_terms(rich_node().get_content())  # Edge's own key
    assert (point_id, payload) == (str(record.id), record.payload)
    assert vector == pytest.approx(record.vector)


def test_a_point_copied_from_a_qdrant_client_collection_reads_back_as_the_node(
    store: QdrantEdgeVectorStore,
) -> None:
    local = QdrantVectorStore(collection_name="c", client=QdrantClient(location=":memory:"))
    local.add([rich_node()])
    (record,), _ = local.client.scroll("c", with_payload=True, with_vectors=True)
    store.upsert_points([(str(record.id), record.vector, record.payload)])
    (got,) = store.get_nodes()
    assert without_embedding(got) == without_embedding(rich_node())


def test_datetime_metadata_is_stored_as_iso_text_and_unserialisable_metadata_refused(
    store: QdrantEdgeVectorStore,
) -> None:
    moment = datetime(2026, 8, 1, 9, 30, tzinfo=timezone.utc)
    store.add([TextNode(id_=node_id(1), text="t", metadata={"at": moment}, embedding=[1.0, 0.0])])
    assert store.get_nodes()[0].metadata == {"at": "2026-08-01T09:30:00Z"}
    bad = TextNode(id_=node_id(2), text="t", metadata={"x": object()}, embedding=[1.0, 0.0])
    with pytest.raises(ValueError, match=f"node {node_id(2)} has metadata that is not JSON"):
        store.add([bad])
    assert store.count() == 1


def test_a_non_uuid_node_id_is_refused_by_name(store: QdrantEdgeVectorStore) -> None:
    nodes = [TextNode(id_=node_id(1), text="ok", embedding=[1.0, 0.0]),
             TextNode(id_="memory-42", text="bad", embedding=[1.0, 0.0])]
    with pytest.raises(ValueError, match="node id 'memory-42' is not a UUID"):
        store.add(nodes)
    assert store.count() == 0  # nothing of the batch was written
    with pytest.raises(ValueError, match="node id 'x' is not a UUID"):
        store.get_nodes(node_ids=["x"])


@pytest.mark.parametrize("vector, problem", [
    ([1.0, float("nan")], "holds a number that is not finite as float32"),
    ([1.0, 1e39], "holds a number that is not finite as float32"),  # inf once stored
    ([0.0, -0.0], "has no length float32 can normalize by"),
    ([1e38, 1e38], "has no length float32 can normalize by"),  # stored as [0, 0]
    ([1e-30, 1e-30], "has no length float32 can normalize by"),
])
def test_a_vector_a_cosine_cannot_compare_is_refused_by_node(
        store: QdrantEdgeVectorStore, vector: list[float], problem: str) -> None:
    """Stored, it would never be found again and would poison every export with embeddings."""
    bad = TextNode(id_=node_id(2), text="bad", embedding=vector)
    with pytest.raises(ValueError, match=re.escape(f"node {node_id(2)}'s embedding {problem}")):
        store.add([TextNode(id_=node_id(1), text="ok", embedding=[1.0, 0.0]), bad])
    assert store.count() == 0  # nothing of the batch was written


def random_store(store: QdrantEdgeVectorStore, n: int = 300, dim: int = 32, seed: int = 7):
    """``n`` nodes with random vectors and varied metadata; returns (vectors, metadata list)."""
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, dim))
    words = ["apple", "pie", "banana", "train", "rain", "cat"]
    metadata = []
    for i in range(n):
        row: dict[str, Any] = {}
        if rng.random() < 0.8:
            row["kind"] = str(rng.choice(["note", "task", "event"]))
        if rng.random() < 0.8:
            row["n"] = int(rng.integers(0, 10))
        if rng.random() < 0.7:
            row["score"] = float(rng.choice([0.5, 1.5, 2.5]))
        if rng.random() < 0.8:
            row["tags"] = [str(t) for t in rng.choice(["x", "y", "z"], rng.integers(0, 3), False)]
        if rng.random() < 0.9:
            row["date"] = f"2026-{rng.integers(6, 10):02d}-{rng.integers(1, 29):02d}"
        if rng.random() < 0.8:
            row["title"] = " ".join(rng.choice(words, 2)).capitalize()
        metadata.append(row)
    store.add([
        TextNode(id_=node_id(i), text=f"node {i}", metadata=metadata[i],
                 embedding=vectors[i].tolist(),
                 relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=f"doc-{i % 7}")})
        for i in range(n)
    ])
    return vectors, metadata


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, np.ndarray, list]]:
    """One read-only store of ``random_store`` nodes, shared by the tests that only query."""
    store = QdrantEdgeVectorStore(tmp_path_factory.mktemp("filled") / "shard")
    vectors, metadata = random_store(store)
    yield store, vectors, metadata
    store.close()


def exact_top(vectors: np.ndarray, query: np.ndarray, rows: list[int], k: int) -> list[int]:
    matrix = vectors[rows]
    cosines = matrix @ query / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(query))
    return [rows[i] for i in np.argsort(-cosines)[:k]]


def test_query_ranks_by_exact_cosine(filled) -> None:
    store, vectors, _ = filled
    rng = np.random.default_rng(1)
    for _ in range(5):
        query = rng.normal(size=32)
        result = store.query(VectorStoreQuery(query_embedding=query.tolist(), similarity_top_k=20))
        expected = exact_top(vectors, query, list(range(len(vectors))), 20)
        assert result.ids == [node_id(i) for i in expected]
        cosines = vectors[expected] @ query / (np.linalg.norm(vectors[expected], axis=1)
                                              * np.linalg.norm(query))
        assert result.similarities == pytest.approx(cosines.tolist(), abs=1e-5)
    assert store.client.info().indexed_vectors_count == 0  # plain segments: no HNSW, exact


def values(row: dict[str, Any], key: str) -> list[Any]:
    """Qdrant's view of a payload field: a list of its non-null values."""
    value = row.get(key)
    if value is None:
        return []
    return [v for v in value if v is not None] if isinstance(value, list) else [value]


def instant(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def f(key: str, op: str, value: object) -> MetadataFilter:
    return MetadataFilter(key=key, operator=FilterOperator(op), value=value)


def group(*items: object, condition: str = "and") -> MetadataFilters:
    return MetadataFilters(filters=list(items), condition=FilterCondition(condition))


Row = dict[str, Any]
REFERENCE_CASES: list[tuple[MetadataFilters, Callable[[Row], bool]]] = [
    (group(f("kind", "==", "note")), lambda r: "note" in values(r, "kind")),
    (group(f("score", "==", 1.5)), lambda r: 1.5 in values(r, "score")),
    (group(f("kind", "!=", "note")), lambda r: any(v != "note" for v in values(r, "kind"))),
    (group(f("score", "!=", 1.5)), lambda r: any(v != 1.5 for v in values(r, "score"))),
    (group(f("n", ">", 4)), lambda r: any(v > 4 for v in values(r, "n"))),
    (group(f("n", ">=", 4)), lambda r: any(v >= 4 for v in values(r, "n"))),
    (group(f("score", "<", 1.5)), lambda r: any(v < 1.5 for v in values(r, "score"))),
    (group(f("n", "<=", 4)), lambda r: any(v <= 4 for v in values(r, "n"))),
    (group(f("date", ">=", "2026-08-01")),
     lambda r: any(instant(v) >= instant("2026-08-01") for v in values(r, "date"))),
    (group(f("date", "<", "2026-07-15T12:00:00Z")),
     lambda r: any(instant(v) < instant("2026-07-15T12:00:00+00:00") for v in values(r, "date"))),
    (group(f("kind", "in", ["task", "event"])),
     lambda r: any(v in ("task", "event") for v in values(r, "kind"))),
    (group(f("n", "nin", [1, 2, 3])), lambda r: any(v not in (1, 2, 3) for v in values(r, "n"))),
    (group(f("score", "nin", [0.5, 2.5])),
     lambda r: any(v not in (0.5, 2.5) for v in values(r, "score"))),
    (group(f("tags", "contains", "y")), lambda r: "y" in values(r, "tags")),
    (group(f("tags", "any", ["x", "z"])), lambda r: bool({"x", "z"} & set(values(r, "tags")))),
    (group(f("tags", "all", ["x", "y"])), lambda r: {"x", "y"} <= set(values(r, "tags"))),
    (group(f("title", "text_match", "apple pie")),
     lambda r: any({"apple", "pie"} <= words(v) for v in values(r, "title"))),
    (group(f("tags", "is_empty", None)), lambda r: not values(r, "tags")),
    (group(f("kind", "==", "task"), f("n", ">", 5)),
     lambda r: "task" in values(r, "kind") and any(v > 5 for v in values(r, "n"))),
    (group(f("kind", "==", "task"), f("score", "==", 2.5), condition="or"),
     lambda r: "task" in values(r, "kind") or 2.5 in values(r, "score")),
    (group(f("kind", "==", "task"), f("tags", "is_empty", None), condition="not"),
     lambda r: "task" not in values(r, "kind") and bool(values(r, "tags"))),
    (group(f("kind", "==", "event"),
           group(f("n", "<", 3), group(f("tags", "contains", "z"), condition="not"),
                 condition="or")),
     lambda r: "event" in values(r, "kind")
     and (any(v < 3 for v in values(r, "n")) or "z" not in values(r, "tags"))),
]


@pytest.mark.parametrize(("filters", "predicate"), REFERENCE_CASES,
                         ids=[str(i) for i in range(len(REFERENCE_CASES))])
def test_filters_select_what_a_python_reference_selects(
    filled, filters: MetadataFilters, predicate: Callable[[Row], bool]
) -> None:
    store, vectors, metadata = filled
    expected = [i for i, row in enumerate(metadata) if predicate(row)]
    assert 0 < len(expected) < len(metadata)  # the case discriminates
    query = np.ones(32)
    result = store.query(VectorStoreQuery(query_embedding=query.tolist(), similarity_top_k=10,
                                          filters=filters))
    assert result.ids == [node_id(i) for i in exact_top(vectors, query, expected, 10)]
    assert store.count(filters) == len(expected)
    assert sorted(n.node_id for n in store.get_nodes(filters=filters)) == sorted(
        node_id(i) for i in expected)


def test_query_restricts_to_doc_ids_and_node_ids(filled) -> None:
    store, vectors, _ = filled
    query = np.ones(32)
    by_doc = store.query(VectorStoreQuery(query_embedding=query.tolist(), similarity_top_k=500,
                                          doc_ids=["doc-2", "doc-5"]))
    assert sorted(by_doc.ids) == sorted(node_id(i) for i in range(300) if i % 7 in (2, 5))
    chosen = [3, 30, 299]
    by_id = store.query(VectorStoreQuery(query_embedding=query.tolist(), similarity_top_k=10,
                                         node_ids=[node_id(i) for i in chosen]))
    assert by_id.ids == [node_id(i) for i in exact_top(vectors, query, chosen, 10)]


def test_delete_by_ref_doc_id_by_node_ids_and_by_filter(store: QdrantEdgeVectorStore) -> None:
    _, metadata = random_store(store)
    store.delete("doc-3")
    left = [i for i in range(300) if i % 7 != 3]
    assert store.count() == len(left)
    store.delete_nodes(node_ids=[node_id(left[0]), node_id(left[1])])
    left = left[2:]
    assert store.count() == len(left)
    store.delete_nodes(filters=group(f("kind", "==", "note")))
    left = [i for i in left if metadata[i].get("kind") != "note"]
    assert sorted(n.node_id for n in store.get_nodes()) == sorted(node_id(i) for i in left)
    task = next(i for i in left if metadata[i].get("kind") == "task")
    event = next(i for i in left if metadata[i].get("kind") == "event")
    store.delete_nodes(node_ids=[node_id(task), node_id(event)],
                       filters=group(f("kind", "==", "task")))  # both must hold
    assert store.count() == len(left) - 1
    assert [n.node_id for n in store.get_nodes(node_ids=[node_id(task), node_id(event)])] == [
        node_id(event)]
    for hollow in (group(group()), group(group(), group(condition="or"), condition="not"),
                   group(), None):
        with pytest.raises(ValueError, match="delete_nodes needs node_ids or filters with a cond"):
            store.delete_nodes(filters=hollow)  # each selects everything
    assert store.count() == len(left) - 1


class CountingShard:
    """The real shard, its filtered counts (full scans) counted."""

    def __init__(self, shard: Any) -> None:
        self.shard, self.scans = shard, 0

    def count(self, request: Any) -> int:
        self.scans += 1
        return self.shard.count(request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.shard, name)


def test_a_filtered_count_is_kept_until_the_next_write_of_any_kind(
        store: QdrantEdgeVectorStore) -> None:
    def note(i: int, kind: str = "note") -> TextNode:
        return TextNode(id_=node_id(i), text=f"note {i}", metadata={"kind": kind},
                        embedding=unit([1.0, i, 0.0]),
                        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(
                            node_id=f"doc-{i % 2}")})

    notes = group(f("kind", "==", "note"))
    store.add([note(i) for i in range(6)])
    store._shard = shard = CountingShard(store._shard)  # type: ignore[assignment]
    assert [store.count(notes), store.count(notes), store.count()] == [6, 6, 6]
    assert shard.scans == 1  # the same count again is not a scan
    writes: list[tuple[Callable[[], object], int]] = [
        (lambda: store.add([note(6), note(7, "task")]), 7),
        (lambda: store.upsert_points([(node_id(8), unit([0.0, 1.0, 1.0]), {"kind": "note"})]), 8),
        (lambda: store.set_payloads([(node_id(8), {"kind": "task"})]), 7),
        (lambda: store.delete("doc-1"), 4),  # notes 1, 3, 5 (and the task 7)
        (lambda: store.delete_nodes(node_ids=[node_id(0)]), 3),
        (lambda: store.delete_nodes(node_ids=[node_id(2), node_id(8)], filters=notes), 2),
    ]
    for write, left in writes:
        write()
        assert store.count(notes) == left
    store.clear()  # a new shard: its counts are made afresh
    assert store.count(notes) == 0


def test_a_count_overlapping_a_write_is_returned_but_not_kept() -> None:
    counts = WriteAwareCache()
    with counts.writing():
        assert counts.get("a", lambda: 1) == 1
    assert counts.get("a", lambda: 2) == 2  # the first was made during a write

    def with_a_write_meanwhile() -> int:
        with counts.writing():
            return 3

    assert counts.get("b", with_a_write_meanwhile) == 3
    assert [counts.get("a", lambda: 4), counts.get("b", lambda: 5)] == [4, 5]
    assert [counts.get("a", lambda: 6), counts.get("b", lambda: 7)] == [4, 5]  # kept now
    write = counts.writing()
    write.__enter__()

    def ending_the_write() -> int:
        write.__exit__(None, None, None)
        return 8

    assert counts.get("c", ending_the_write) == 8  # begun while a write was under way
    assert counts.get("c", lambda: 9) == 9


def test_a_count_is_never_kept_apart_from_its_filter_or_its_store(
        store: QdrantEdgeVectorStore, shard_path: Path) -> None:
    store.add([TextNode(id_=node_id(i), text=f"n {i}", metadata={"n": float(i)},
                        embedding=unit([1.0, i, 0.0])) for i in range(5)])
    above = [store.count(group(f("n", ">", bound))) for bound in (-math.inf, math.inf)]
    assert above == [5, 0]  # filters that JSON would write alike are kept apart
    store.close()
    with pytest.raises(MemoryStoreClosedError):
        store.kept("anything", lambda: 1)


def test_nothing_is_kept_before_the_shard_exists(tmp_path: Path) -> None:
    """A handle with no shard yet holds no lock: another one may create the shard."""
    first = QdrantEdgeVectorStore(tmp_path / "shard")
    assert term_counts(first, ["note"], None) == (0, {"note": 0})
    second = QdrantEdgeVectorStore(tmp_path / "shard")
    second.add([TextNode(id_=node_id(1), text="a note", metadata={"kind": "note"},
                         embedding=[1.0, 0.0, 0.0])])
    second.close()
    with pytest.raises(ValueError, match="holds 3-dim vectors"):
        first.add([TextNode(id_=node_id(2), text="wrong", embedding=[1.0, 0.0, 0.0, 0.0])])
    assert term_counts(first, ["note"], None) == (1, {"note": 1})
    first.close()


@pytest.mark.slow
def test_clear_empties_the_store_and_keeps_it_usable(store: QdrantEdgeVectorStore) -> None:
    random_store(store)
    store.update_metadata({"model": "m"})
    store.clear()
    assert store.count() == 0
    assert store.get_nodes() == []
    assert store.metadata == {"model": "m"}
    store.add([TextNode(id_=node_id(1), text="again", embedding=[0.0] * 31 + [1.0])])
    assert store.count() == 1
    with pytest.raises(ValueError, match="has a 2-dim vector; the store at .* holds 32-dim"):
        store.add([TextNode(id_=node_id(2), text="again", embedding=[1.0, 0.0])])


@pytest.mark.slow
def test_reopen_after_close_keeps_everything(shard_path: Path) -> None:
    store = QdrantEdgeVectorStore(shard_path)
    vectors, _ = random_store(store)
    store.update_metadata({"embedding": {"model": "m", "dimensions": 32}})
    before = store.get_nodes()
    store.close()
    with pytest.raises(RuntimeError, match="is closed"):
        store.count()
    reopened = QdrantEdgeVectorStore(shard_path)
    try:
        assert reopened.dimensions == 32
        assert reopened.get_nodes() == before
        assert reopened.metadata == {"embedding": {"model": "m", "dimensions": 32}}
        assert set(reopened.client.info().payload_schema) == {"date", "doc_id", "user_id",
                                                              TERMS_KEY,
                                                              "supersedes"}
        query = np.ones(32)
        result = reopened.query(VectorStoreQuery(query_embedding=query.tolist(),
                                                 similarity_top_k=5))
        assert result.ids == [node_id(i) for i in exact_top(vectors, query, list(range(300)), 5)]
    finally:
        reopened.close()
    with pytest.raises(ValueError, match="holds 32-dim vectors, not 8-dim"):
        QdrantEdgeVectorStore(shard_path, dimensions=8)


def test_dimensions_creates_the_shard_at_once_and_date_key_is_indexed(shard_path: Path) -> None:
    store = QdrantEdgeVectorStore(shard_path, dimensions=4, date_key="when")
    try:
        assert store.count() == 0
        schema = store.client.info().payload_schema
        assert {key: str(info.data_type) for key, info in schema.items()} == {
            "when": "PayloadSchemaType.Datetime", "doc_id": "PayloadSchemaType.Keyword",
            "user_id": "PayloadSchemaType.Keyword", "supersedes": "PayloadSchemaType.Keyword",
            TERMS_KEY: "PayloadSchemaType.Keyword"}
    finally:
        store.close()
    lazy = QdrantEdgeVectorStore(shard_path.parent / "lazy", date_key=None)
    assert (lazy.client, lazy.dimensions, lazy.count(), lazy.get_nodes()) == (None, None, 0, [])
    lazy.close()


def test_metadata_record_round_trips_atomically_inside_the_shard(shard_path: Path) -> None:
    store = QdrantEdgeVectorStore(shard_path)
    store.update_metadata({"embedding": {"model": "m", "dimensions": 2}})
    store.update_metadata({"policy": {"weight": 0.05}})  # merged, not replaced
    store.add([TextNode(id_=node_id(1), text="t", embedding=[1.0, 0.0])])  # shard beside it
    snapshot = store.metadata
    snapshot["embedding"]["model"] = "changed"  # a copy: the record is untouched
    assert store.metadata == {"embedding": {"model": "m", "dimensions": 2},
                              "policy": {"weight": 0.05}}
    with pytest.raises(ValueError, match="collection metadata must be JSON"):
        store.update_metadata({"when": datetime(2026, 1, 1)})
    assert sorted(os.listdir(shard_path)) == sorted(
        ["edge_config.json", METADATA_FILE, "segments", "wal"])
    store.close()
    reopened = QdrantEdgeVectorStore(shard_path)
    assert reopened.metadata["policy"] == {"weight": 0.05}
    assert reopened.count() == 1
    reopened.close()


def test_a_directory_holding_something_else_is_refused(tmp_path: Path) -> None:
    QdrantClient(path=str(tmp_path / "local")).close()  # a qdrant-client local-mode store
    with pytest.raises(ValueError, match="local is not a Qdrant Edge shard but holds"):
        QdrantEdgeVectorStore(tmp_path / "local")


def test_only_dense_queries_with_an_embedding_are_accepted(store: QdrantEdgeVectorStore) -> None:
    with pytest.raises(ValueError, match="dense queries only"):
        store.query(VectorStoreQuery(query_embedding=[1.0], mode=VectorStoreQueryMode.HYBRID))
    with pytest.raises(ValueError, match="no query_embedding"):
        store.query(VectorStoreQuery(query_str="hello"))


@pytest.mark.slow
def test_iter_points_and_upsert_points_copy_a_store(store: QdrantEdgeVectorStore,
                                                     tmp_path: Path) -> None:
    random_store(store)
    copy = QdrantEdgeVectorStore(tmp_path / "copy")
    try:
        points = list(store.iter_points(batch_size=64))
        assert len(points) == 300 and len({p[0] for p in points}) == 300
        copy.upsert_points(points)
        copy.upsert_points(points)  # idempotent
        assert copy.get_nodes() == store.get_nodes()
    finally:
        copy.close()


async def test_async_methods_give_the_same_answers(store: QdrantEdgeVectorStore) -> None:
    nodes = [TextNode(id_=node_id(i), text=f"n{i}", embedding=[1.0, float(i)],
                      metadata={"n": i},
                      relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=f"d{i % 2}")})
             for i in range(6)]
    assert await store.async_add(nodes) == [n.node_id for n in nodes]
    query = VectorStoreQuery(query_embedding=[1.0, 2.0], similarity_top_k=3,
                             filters=group(f("n", ">", 0)))
    assert (await store.aquery(query)).ids == store.query(query).ids == [
        node_id(2), node_id(3), node_id(4)]  # cosines 1.000, 0.990, 0.976
    assert await store.aget_nodes(node_ids=[node_id(4)]) == store.get_nodes(node_ids=[node_id(4)])
    await store.adelete("d0")
    assert sorted(n.node_id for n in await store.aget_nodes()) == sorted(
        node_id(i) for i in (1, 3, 5))
    await store.adelete_nodes(node_ids=[node_id(1)])
    assert store.count() == 2
    await store.aclear()
    assert store.count() == 0


def run_child(code: str, **kwargs: Any) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO,
                            text=True, **kwargs)


@pytest.mark.slow
def test_writes_survive_kill_9_without_flush_or_close(shard_path: Path) -> None:
    child = run_child(f"""
        import os, uuid
        from llama_index.core.schema import TextNode
        from llama_index_recency.storage.edge import QdrantEdgeVectorStore
        store = QdrantEdgeVectorStore({str(shard_path)!r})
        for i in range(120):
            node_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"node-{{i}}"))
            store.add([TextNode(id_=node_id, text=f"memory {{i}}", embedding=[1.0, float(i)])])
        os.kill(os.getpid(), 9)
    """)
    assert child.wait(timeout=120) == -9
    store = QdrantEdgeVectorStore(shard_path)
    try:
        assert store.count() == 120
        assert sorted(n.node_id for n in store.get_nodes()) == sorted(
            node_id(i) for i in range(120))
    finally:
        store.close()


@pytest.mark.slow
def test_a_shard_held_elsewhere_raises_memory_store_locked_error(shard_path: Path) -> None:
    QdrantEdgeVectorStore(shard_path, dimensions=2).close()
    holder = run_child(f"""
        import sys
        from llama_index_recency.storage.edge import QdrantEdgeVectorStore
        store = QdrantEdgeVectorStore({str(shard_path)!r})
        print("holding", flush=True)
        sys.stdin.read()
    """, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == "holding\n"
        with pytest.raises(MemoryStoreLockedError) as error:
            QdrantEdgeVectorStore(shard_path)
        assert str(error.value) == (
            f"the store at {shard_path} is already open in another process or handle")
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    store = QdrantEdgeVectorStore(shard_path)  # released with the process
    with pytest.raises(MemoryStoreLockedError):
        QdrantEdgeVectorStore(shard_path)  # a second handle in this process
    store.close()


def test_two_handles_waiting_for_the_first_add_do_not_both_create(shard_path: Path) -> None:
    first, second = QdrantEdgeVectorStore(shard_path), QdrantEdgeVectorStore(shard_path)
    first.add([TextNode(id_=node_id(1), text="a", embedding=[1.0, 0.0])])
    with pytest.raises(MemoryStoreLockedError):
        second.add([TextNode(id_=node_id(2), text="b", embedding=[0.0, 1.0])])
    first.close()
    second.add([TextNode(id_=node_id(2), text="b", embedding=[0.0, 1.0])])  # loads, then adds
    assert sorted(n.get_content() for n in second.get_nodes()) == ["a", "b"]
    second.close()


@pytest.mark.slow
def test_a_store_missing_an_index_opens_on_a_full_disk_and_a_new_one_is_refused(
        shard_path: Path, monkeypatch, caplog) -> None:
    """An earlier version's store lacks a newer payload index; with too little room to add
    it, the store still opens (list, export, forget are what a full disk needs), slower."""
    import shutil

    from llama_index_recency.errors import MemoryStoreFullError

    old = QdrantEdgeVectorStore(shard_path, dimensions=4, date_key="when")  # no "date" index
    old.add([TextNode(id_=str(uuid.uuid4()), text="x", embedding=[1.0, 0.0, 0.0, 0.0])])
    old.close()  # closed cleanly: opening needs little room
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage",
                        lambda path: real(path)._replace(free=2 << 20))  # 2 MB free
    with caplog.at_level("WARNING", logger="llama_index_recency"):
        store = QdrantEdgeVectorStore(shard_path)
    try:
        assert store.count() == 1 and "date" not in store.client.info().payload_schema
        assert "too full to add the payload indexes date; it works without them" in caplog.text
    finally:
        store.close()
    with pytest.raises(MemoryStoreFullError, match="needed to create its payload indexes"):
        QdrantEdgeVectorStore(shard_path.parent / "new", dimensions=4)


def test_a_call_failing_once_its_store_closed_is_a_closed_store_not_damage(tmp_path) -> None:
    """Another thread's close() lets a running call fail inside Edge ("Shard is not
    initialized"): that call met the close, it did not find a damaged file (found by an
    exploratory user closing a store under a web server's readers)."""
    def failing(closed: bool) -> type[Exception]:
        with pytest.raises(RecencyError) as caught:
            with edge_calls(str(tmp_path), str(tmp_path), lambda: closed):
                raise Exception("Service runtime error: Shard is not initialized")
        return type(caught.value)
    assert failing(closed=True) is MemoryStoreClosedError
    assert failing(closed=False) is MemoryStoreDamagedError


class HeldShard:
    """A shard whose close Edge refuses while ``held`` more calls of other threads run."""

    def __init__(self, held: int) -> None:
        self.held, self.closed = held, False

    def close(self) -> None:
        if self.held:
            self.held -= 1
            raise RuntimeError("Already borrowed")
        self.closed = True


def test_a_shard_is_closed_once_the_calls_holding_it_end() -> None:
    shard = HeldShard(held=3)
    close_shard(shard)
    assert shard.closed
    with pytest.raises(RuntimeError, match="Already borrowed"):
        close_shard(HeldShard(held=10**9), wait=0.01)

"""One MetadataFilters translation: the same ids on qdrant-client local mode and on Edge."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
)
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import QdrantClient

from llama_index_recency.storage import QdrantEdgeVectorStore, to_edge_filter, to_qdrant_filter

# Missing keys, nulls, empty lists, floats, date-only and offset timestamps on purpose.
ROWS = {
    "A": {"kind": "note", "n": 1, "score": 0.5, "tags": ["x", "y"], "date": "2026-07-30",
          "title": "Apple pie recipe"},
    "B": {"kind": "note", "n": 2, "score": 1.5, "tags": ["y"], "date": "2026-08-01",
          "title": "apple"},
    "C": {"kind": "task", "n": 3, "score": 2.5, "tags": [], "date": "2026-08-01T12:00:00+00:00",
          "title": "banana bread"},
    "D": {"kind": "task", "n": 4, "tags": None, "date": "2026-08-02T01:00:00+02:00",
          "title": "pineapple"},
    "E": {"kind": "event", "score": 2.5, "date": "2026-08-15T09:30:00Z",
          "title": "Apple festival"},
    "F": {"kind": "event", "n": 6, "score": -1.0, "tags": ["z"]},
}
NAMES = {str(uuid.uuid5(uuid.NAMESPACE_URL, name)): name for name in ROWS}


def f(key: str, op: str, value: object) -> MetadataFilter:
    return MetadataFilter(key=key, operator=FilterOperator(op), value=value)


def all_of(*items: object, condition: str = "and") -> MetadataFilters:
    return MetadataFilters(filters=list(items), condition=FilterCondition(condition))


CASES = [
    (all_of(f("kind", "==", "note")), "AB"),
    (all_of(f("n", "==", 3)), "C"),
    (all_of(f("score", "==", 2.5)), "CE"),
    (all_of(f("kind", "!=", "note")), "CDEF"),
    (all_of(f("score", "!=", 2.5)), "ABF"),  # D has no score: not "!="
    (all_of(f("n", ">", 2)), "CDF"),
    (all_of(f("score", ">=", 1.5)), "BCE"),
    (all_of(f("score", "<", 0.5)), "F"),
    (all_of(f("n", "<=", 2)), "AB"),
    # D's 2026-08-02T01:00+02:00 is 2026-08-01T23:00Z; a bare date is midnight UTC.
    (all_of(f("date", ">=", "2026-08-01")), "BCDE"),
    (all_of(f("date", ">", "2026-08-01")), "CDE"),
    (all_of(f("date", "<", "2026-08-01T12:00:00Z")), "AB"),
    (all_of(f("date", "<=", "2026-08-01T12:00:00")), "ABC"),  # naive means UTC
    (all_of(f("kind", "in", ["task", "event"])), "CDEF"),
    (all_of(f("n", "in", [1, 4])), "AD"),
    (all_of(f("score", "in", [0.5, -1.0])), "AF"),
    (all_of(f("kind", "nin", ["note"])), "CDEF"),
    (all_of(f("score", "nin", [0.5, 2.5])), "BF"),
    (all_of(f("tags", "contains", "y")), "AB"),
    (all_of(f("tags", "any", ["x", "z"])), "AF"),
    (all_of(f("tags", "all", ["x", "y"])), "A"),
    (all_of(f("title", "text_match", "apple")), "ABE"),  # words, not substrings
    (all_of(f("title", "text_match", "apple pie")), "A"),
    (all_of(f("title", "text_match_insensitive", "APPLE")), "ABE"),
    (all_of(f("tags", "is_empty", None)), "CDE"),
    (all_of(f("kind", "==", "task"), f("n", ">", 3)), "D"),
    (all_of(f("kind", "==", "note"), f("score", ">=", 2.5), condition="or"), "ABCE"),
    (all_of(f("kind", "in", ["note", "task"]), condition="not"), "EF"),
    (all_of(f("kind", "==", "note"), f("n", "==", 3), condition="not"), "DEF"),
    (all_of(f("kind", "==", "event"),
            all_of(f("n", "is_empty", None), f("tags", "contains", "z"), condition="or")), "EF"),
    (all_of(all_of(f("kind", "==", "event"), condition="not"), f("score", "<", 0), condition="or"),
     "ABCDF"),
    (all_of(f("kind", "==", "note"), MetadataFilters(filters=[])), "AB"),
    # Groups inside groups: an AND inside an AND is spelled out in place, any other kept whole.
    (all_of(all_of(f("kind", "==", "task")), all_of(f("n", ">", 3), MetadataFilters(filters=[]))),
     "D"),
    (all_of(all_of(all_of(f("kind", "==", "task")), f("n", ">=", 3)),
            f("date", ">=", "2026-08-01")), "CD"),
    (all_of(all_of(f("kind", "==", "note"), f("n", "==", 1)), condition="not"), "BCDEF"),
    (all_of(all_of(f("kind", "==", "note"), f("n", "==", 2)),
            all_of(f("kind", "==", "event"), f("score", "<", 0)), condition="or"), "BF"),
]


def nodes() -> list[TextNode]:
    return [
        TextNode(id_=node_id, text=f"row {name}", metadata=dict(ROWS[name]),
                 embedding=[1.0, float(i), 0.5])
        for i, (node_id, name) in enumerate(NAMES.items())
    ]


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[object, object]]:
    local = QdrantVectorStore(collection_name="rows", client=QdrantClient(location=":memory:"))
    local.add(nodes())
    edge = QdrantEdgeVectorStore(Path(tmp_path_factory.mktemp("edge")) / "shard")
    edge.add(nodes())
    yield local, edge
    edge.close()


def names(result_ids: list[str]) -> str:
    return "".join(sorted(NAMES[i] for i in result_ids))


@pytest.mark.parametrize(("filters", "expected"), CASES, ids=[str(i) for i in range(len(CASES))])
def test_same_ids_on_local_mode_and_edge(engines, filters: MetadataFilters, expected: str) -> None:
    local, edge = engines
    query = VectorStoreQuery(query_embedding=[1.0, 1.0, 1.0], similarity_top_k=100)
    on_local = local.query(query, qdrant_filters=to_qdrant_filter(filters)).ids
    query.filters = filters
    on_edge = edge.query(query).ids
    assert names(on_local) == expected
    assert names(on_edge) == expected


def test_date_bounds_are_rfc3339_instants() -> None:
    naive = to_qdrant_filter(all_of(f("date", ">=", "2026-08-01")))
    assert naive.must[0].range.gte.isoformat() == "2026-08-01T00:00:00+00:00"
    offset = to_edge_filter(all_of(f("date", "<", "2026-08-01T09:00:00+09:00")))
    assert offset.must[0].range.lt == "2026-08-01 00:00:00 UTC"


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (f("date", ">=", "last week"),
         "GTE on 'date' needs a number or an ISO date, got 'last week'"),
        (f("title", "text_match", 3), "TEXT_MATCH on 'title' needs a string, got 3"),
        (f("kind", "==", ["a", "b"]), "EQ on 'kind' needs one value, got ['a', 'b']"),
        (f("kind", "in", []), "IN on 'kind' needs values, got []"),
        (MetadataFilter.model_construct(key="kind", value="x", operator="regex"),
         "unsupported filter operator 'regex' on 'kind'"),
    ],
)
def test_bad_filters_are_refused_naming_the_value(item: MetadataFilter, message: str) -> None:
    for translate in (to_qdrant_filter, to_edge_filter):
        with pytest.raises(ValueError) as error:
            translate(all_of(item))
        assert str(error.value) == message


def test_an_unsupported_condition_is_refused_by_name() -> None:
    filters = MetadataFilters.model_construct(filters=[f("kind", "==", "x")], condition="xor")
    for translate in (to_qdrant_filter, to_edge_filter):
        with pytest.raises(ValueError, match="unsupported filter condition 'xor'"):
            translate(filters)

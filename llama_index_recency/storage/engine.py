"""How each engine runs a search plan's searches: one :class:`MemorySearch` as a query to
Qdrant Edge, a Qdrant server or qdrant-client's local mode, its results as scored nodes."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Optional, cast

import numpy as np
from llama_index.core.schema import BaseNode, NodeWithScore
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryResult,
)
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import models

from llama_index_recency.errors import InvalidInputError
from llama_index_recency.models.cohort import QueryScale
from llama_index_recency.ranking.lexical import TERMS_KEY
from llama_index_recency.ranking.plan import MemorySearch
from llama_index_recency.records.nodes import SUPERSEDES_KEY, USER_ID_KEY
from llama_index_recency.storage.edge import QdrantEdgeVectorStore
from llama_index_recency.storage.edge_points import point_id
from llama_index_recency.storage.filters import qdrant_selection, to_qdrant_filter


def run_search(store: BasePydanticVectorStore, search: MemorySearch, vector: list[float],
               date_key: str, scale: Optional[QueryScale],
               scans: Optional["QuestionScans"] = None) -> Sequence[NodeWithScore]:
    """``search`` on ``store`` for the question ``vector``: the results (in the policy's
    units when ``scale`` is given, with their vectors when the search asks for them),
    answered from the question's ``scans`` where they can."""
    if search.linked is not None and not _holds_links(store, search.linked[0]):
        return []
    if scans is not None and (scanned := scans.answer(search, date_key)) is not None:
        return _scored(scanned, scale)
    query, kwargs = engine_query(store, search, vector, date_key)
    results = _scored(store.query(query, **kwargs), scale)
    if search.with_vectors and (missing := _missing_vectors(results)):
        _attach_vectors(results, stored_vectors(store, missing))
    return results


class QuestionScans:
    """One question's scans of an Edge store by cosine, ids and scores only, so that a later
    search of its plan over the same memories (the newer-versions window after the first
    search) is answered without scanning the store again.

    A scan asks for at least ``at_least`` memories (the window the plan will want); a search
    reads by id, in one call, only the nodes of its results the question has not read yet.
    A search is answered so only while the store is as the scan found it: after a write
    through the store, or during one, it runs on its own.
    """

    def __init__(self, store: QdrantEdgeVectorStore, vector: list[float], at_least: int) -> None:
        self.store = store
        self.vector = vector
        self.at_least = at_least
        self._scan: Optional[tuple[Optional[MetadataFilters], int, VectorStoreQueryResult]] = None
        self._version: Optional[int] = None  # the store's, when the scan and nodes were read
        self._nodes: dict[str, BaseNode] = {}  # read this question, by point id

    def answer(self, search: MemorySearch, date_key: str) -> Optional[VectorStoreQueryResult]:
        """The results of ``search`` from a scan (made now if none covers it); None for a
        search over a tier, a term, links or given ids, one whose limit cuts through tied
        scores, or one the store changed under: it runs as it is."""
        if (search.since, search.term, search.ids, search.linked) != (None,) * 4 \
                or search.undated_only:
            return None
        scan = self._scan  # a plain search's scope is its filters
        # A scan covers the search when it asked for as many, or came back short (all of them).
        if scan is None or scan[0] != search.filters \
                or len(scan[2].ids or []) == scan[1] < search.limit:
            if (version := self.store.version) != self._version:
                self._nodes, self._version = {}, version
            limit = max(search.limit, self.at_least)
            query = VectorStoreQuery(query_embedding=self.vector, similarity_top_k=limit,
                                     filters=search.metadata_filters(date_key))
            scan = self._scan = (search.filters, limit, self.store.query(query, with_payload=False))
        # Edge keeps a score over the threshold as a float32, not one equal to it.
        cut = -math.inf if search.min_score is None else float(np.float32(search.min_score))
        hits = [(point, score) for point, score
                in zip(scan[2].ids or [], scan[2].similarities or [], strict=True)
                if score > cut]
        if len(hits) > search.limit and hits[search.limit - 1][1] == hits[search.limit][1]:
            return None  # a tie across the limit: which ones Edge keeps depends on the limit
        hits = hits[:search.limit]
        if unread := [point for point, _ in hits if point not in self._nodes]:
            self._nodes.update(self.store.nodes_by_point(unread))
        if self._version is None or self.store.version != self._version \
                or any(point not in self._nodes for point, _ in hits):
            return None  # written since the scan (or during it): the scan is not the store's
        return VectorStoreQueryResult(nodes=[self._nodes[point] for point, _ in hits],
                                      similarities=[score for _, score in hits],
                                      ids=[self._nodes[point].node_id for point, _ in hits])


def _holds_links(store: BasePydanticVectorStore, key: str) -> bool:
    """False when ``store`` is an Edge store where no memory lists anything under ``key``
    (a count it keeps until its next write), so a link search there finds none."""
    if not isinstance(store, QdrantEdgeVectorStore):
        return True
    listing = MetadataFilters(filters=[MetadataFilter(key=key, operator=FilterOperator.IS_EMPTY,
                                                      value=None)],
                              condition=FilterCondition.NOT)
    return bool(store.kept(("lists", key), lambda: store.count(listing)))


async def arun_search(store: BasePydanticVectorStore, search: MemorySearch,
                      vector: list[float], date_key: str,
                      scale: Optional[QueryScale]) -> Sequence[NodeWithScore]:
    """Async :func:`run_search`."""
    query, kwargs = engine_query(store, search, vector, date_key)
    results = _scored(await store.aquery(query, **kwargs), scale)
    if search.with_vectors and (missing := _missing_vectors(results)):
        stored = await store.aget_nodes(node_ids=missing)  # an async client may be the only one
        _attach_vectors(results, {node.node_id: node.embedding for node in stored})
    return results


def term_counts(store: BasePydanticVectorStore, question_terms: Sequence[str],
                filters: Optional[MetadataFilters]) -> tuple[int, dict[str, int]]:
    """How many memories inside ``filters`` there are, and how many hold each term."""
    asked = (None, *question_terms)
    if isinstance(store, QdrantEdgeVectorStore):
        # A question's counts kept as one, until the store's next write.
        key = ("term counts", tuple(question_terms), repr(filters))
        counts = store.kept(key, lambda: tuple(store.count(_with_term(filters, term))
                                               for term in asked))
    else:
        assert isinstance(store, QdrantVectorStore)
        client = sync_client(store)
        counts = tuple(client.count(store.collection_name, exact=True,
                                    count_filter=_qdrant(_with_term(filters, term))).count
                       for term in asked)
    return counts[0], dict(zip(question_terms, counts[1:], strict=True))


async def aterm_counts(store: QdrantVectorStore, question_terms: Sequence[str],
                       filters: Optional[MetadataFilters]) -> tuple[int, dict[str, int]]:
    """Async :func:`term_counts` (a store with an async Qdrant client)."""
    client = store._aclient
    counts = [(await client.count(store.collection_name,
                                  count_filter=_qdrant(_with_term(filters, term)),
                                  exact=True)).count
              for term in (None, *question_terms)]
    return counts[0], dict(zip(question_terms, counts[1:], strict=True))


def _with_term(filters: Optional[MetadataFilters], term: Optional[str]) -> Optional[MetadataFilters]:
    return MemorySearch(limit=1, filters=filters, term=term).metadata_filters("")


def _qdrant(filters: Optional[MetadataFilters]) -> Optional[models.Filter]:
    return None if filters is None else to_qdrant_filter(filters)


def stored_vectors(store: BasePydanticVectorStore, ids: Sequence[str]) -> dict[str, list[float]]:
    """The stored vectors of the memories ``ids`` (UUID strings) that ``store`` holds, by id,
    in one call and without their payloads: what a candidate retrieved without its vector
    needs, never embedded again."""
    if not ids:
        return {}
    if isinstance(store, QdrantEdgeVectorStore):
        shard = store.client
        records = [] if shard is None else shard.retrieve([point_id(i) for i in ids], False, True)
    else:
        assert isinstance(store, QdrantVectorStore)
        records = sync_client(store).retrieve(store.collection_name, ids=list(ids),
                                              with_payload=False, with_vectors=True)
    # One unnamed dense vector per point, as this package stores memories; a hybrid
    # collection names its dense one (QdrantVectorStore's ``dense_vector_name``).
    name = str(getattr(store, "dense_vector_name", ""))
    vectors: dict[str, list[float]] = {}
    for record in records:
        stored: Any = record.vector  # each read converts the whole vector
        vector = stored.get(name) if isinstance(stored, dict) else stored
        if isinstance(vector, list):
            vectors[str(record.id)] = cast(list[float], vector)
    return vectors


def engine_query(
    store: BasePydanticVectorStore, search: MemorySearch, vector: list[float], date_key: str
) -> tuple[VectorStoreQuery, dict[str, Any]]:
    """The engine's form of one search: Edge reads MetadataFilters itself and leaves out
    results under ``min_score``; for qdrant-client they become a Qdrant filter, and the
    search is exact (no HNSW)."""
    filters = search.metadata_filters(date_key)
    ids = None if search.ids is None else list(search.ids)
    if isinstance(store, QdrantVectorStore):
        query = VectorStoreQuery(query_embedding=vector, similarity_top_k=search.limit)
        kwargs: dict[str, Any] = {"qdrant_filters": qdrant_selection(ids, filters)}
        if not is_local(store.client or store._aclient):
            kwargs["search_params"] = models.SearchParams(exact=True)  # server HNSW is approximate
        return query, kwargs
    query = VectorStoreQuery(
        query_embedding=vector, similarity_top_k=search.limit, filters=filters, node_ids=ids
    )
    # Edge leaves out what cannot be kept, so no node is built for it; vectors come with the
    # results in the same call.
    kwargs = {} if search.min_score is None else {"score_threshold": search.min_score}
    return query, {**kwargs, "with_vectors": True} if search.with_vectors else kwargs


def payload_indexes(date_key: str) -> list[tuple[str, Any]]:
    """On a server: a datetime index for the tier searches, a tenant index for users,
    keyword indexes for the successor searches and the term searches."""
    return [
        (date_key, models.PayloadSchemaType.DATETIME),
        (USER_ID_KEY, models.KeywordIndexParams(type="keyword", is_tenant=True)),
        (SUPERSEDES_KEY, models.PayloadSchemaType.KEYWORD),
        (TERMS_KEY, models.PayloadSchemaType.KEYWORD),
    ]


def sync_client(store: QdrantVectorStore) -> Any:
    """The store's sync Qdrant client, refused for a store that has only an async one.

    Raises:
        InvalidInputError: The store has only an async client (use the async calls).
    """
    if store.client is None:
        raise InvalidInputError(
            "this vector store has only an async Qdrant client; use aretrieve / aexplain"
        )
    return store.client


def has_async_client(store: BasePydanticVectorStore) -> bool:
    # QdrantVectorStore has no public accessor for its async client.
    return isinstance(store, QdrantVectorStore) and store._aclient is not None


def is_local(client: Any) -> bool:
    """qdrant-client's embedded mode (in memory or on disk), where payload indexes do nothing."""
    options = client.init_options
    return options.get("location") == ":memory:" or options.get("path") is not None


def _scored(
    result: VectorStoreQueryResult, scale: Optional[QueryScale]
) -> Sequence[NodeWithScore]:
    nodes = result.nodes or []
    scored = [
        NodeWithScore(node=node, score=score)
        for node, score in zip(nodes, result.similarities or [], strict=True)
    ]
    return scored if scale is None else scale.apply(scored)


def _missing_vectors(results: Sequence[NodeWithScore]) -> list[str]:
    return [n.node.node_id for n in results if not n.node.embedding]


def _attach_vectors(results: Sequence[NodeWithScore],
                    vectors: Mapping[str, Optional[list[float]]]) -> None:
    """Give each result its stored embedding (a query returns payloads only)."""
    for result in results:
        if not result.node.embedding:
            result.node.embedding = vectors.get(result.node.node_id)

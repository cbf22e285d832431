"""Every memory's terms in the store: written with each Edge point, filled in for memories
that lack them (a store made before 0.5, or nodes a plain ``QdrantVectorStore`` wrote)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any, Optional

import qdrant_edge as edge
from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.types import BasePydanticVectorStore, MetadataFilters
from llama_index.core.vector_stores.utils import metadata_dict_to_node
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import models

from llama_index_recency.ranking.language import question_language
from llama_index_recency.ranking.lexical import TERMS_KEY, stored_terms
from llama_index_recency.storage.edge import QdrantEdgeVectorStore
from llama_index_recency.storage.edge_points import point_node, point_selection, scroll
from llama_index_recency.storage.engine import sync_client
from llama_index_recency.storage.filters import to_qdrant_filter

logger = logging.getLogger(__name__)

BATCH = 256


def fill_terms(store: BasePydanticVectorStore) -> int:
    """Give every memory of ``store`` that lacks its terms its terms; how many it filled in
    (0 for a read-only store, which is searched as it is: its memories without terms score
    on cosine alone)."""
    if isinstance(store, QdrantEdgeVectorStore):
        filled = _fill_edge(store)
    else:
        assert isinstance(store, QdrantVectorStore)
        filled = _fill_qdrant(store)
    if filled:
        logger.info("llama-index-recency: stored the terms of %d memories that lacked them",
                    filled)
    return filled


def write_terms(store: QdrantVectorStore, nodes: Sequence[BaseNode]) -> None:
    """Store the terms of ``nodes``, just written by LlamaIndex's Qdrant store (which writes
    none), in one call."""
    client: Any = store.client
    if client is None or not nodes:
        return
    client.batch_update_points(store.collection_name, [
        models.SetPayloadOperation(set_payload=models.SetPayload(
            payload={TERMS_KEY: stored_terms(node.get_content())}, points=[node.node_id]))
        for node in nodes])


def memory_languages(store: BasePydanticVectorStore,
                     filters: Optional[MetadataFilters] = None) -> Counter[str]:
    """How many of the memories ``filters`` selects (all without) are written in each language
    (:func:`question_language`'s script rule), from their texts in one pass without vectors.

    Raises:
        InvalidInputError: On Qdrant Edge, a filter Edge cannot express; a Qdrant store with
            only an async client.
    """
    if isinstance(store, QdrantEdgeVectorStore):
        shard = store.client
        if shard is None:
            return Counter()
        points = scroll(shard, point_selection(None, filters), with_vector=False)
        return Counter(question_language(point_node(point).get_content()) for point in points)
    assert isinstance(store, QdrantVectorStore)
    client = sync_client(store)
    if not client.collection_exists(store.collection_name):
        return Counter()
    selection = None if filters is None else to_qdrant_filter(filters)
    return Counter(question_language(page_text(record.payload or {}))
                   for records in pages(client, store.collection_name, selection)
                   for record in records)


def _fill_edge(store: QdrantEdgeVectorStore) -> int:
    shard = store.client
    if shard is None or store.read_only:
        return 0
    lacking = edge.Filter(must=[edge.IsEmptyCondition(TERMS_KEY)])
    points = [(point.id, stored_terms(point_node(point).get_content()))
              for point in scroll(shard, lacking, with_vector=False)]
    store.set_payloads([(point_id, {TERMS_KEY: held}) for point_id, held in points])
    return len(points)


def _fill_qdrant(store: QdrantVectorStore) -> int:
    client: Any = store.client
    if client is None or not client.collection_exists(store.collection_name):
        return 0
    lacking = models.Filter(must=[models.IsEmptyCondition(
        is_empty=models.PayloadField(key=TERMS_KEY))])
    filled = 0
    for records in pages(client, store.collection_name, lacking):
        operations = [models.SetPayloadOperation(set_payload=models.SetPayload(
            payload={TERMS_KEY: stored_terms(page_text(record.payload or {}))}, points=[record.id]))
            for record in records]
        if operations:
            client.batch_update_points(store.collection_name, operations)
        filled += len(operations)
    return filled


def pages(client: Any, collection_name: str,
           selection: Optional[models.Filter]) -> Iterator[list[Any]]:
    """The points ``selection`` selects, payloads without vectors, :data:`BATCH` at a time
    (the next page is read once the caller is done with this one)."""
    offset = None
    while True:
        records, offset = client.scroll(collection_name, scroll_filter=selection, limit=BATCH,
                                        offset=offset, with_payload=True, with_vectors=False)
        yield records
        if offset is None:
            return


def page_text(payload: dict[str, Any]) -> str:
    """A scrolled point's memory text (another program's point: its plain text field, if any)."""
    try:
        return metadata_dict_to_node(payload).get_content()
    except Exception:  # not a LlamaIndex node
        return str(payload.get("text") or "")

"""LlamaIndex nodes as Qdrant Edge points and back (payloads as ``QdrantVectorStore`` writes
them), and the Edge filters and scrolls that select points."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from typing import Any, Optional

import qdrant_edge as edge
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, ImageNode, IndexNode, Node, TextNode
from llama_index.core.vector_stores.types import MetadataFilters, VectorStoreQuery
from llama_index.core.vector_stores.utils import (
    legacy_metadata_dict_to_node,
    node_to_metadata_dict,
)
from pydantic_core import PydanticSerializationError

from llama_index_recency.errors import InvalidInputError
from llama_index_recency.ranking.lexical import TERMS_KEY, stored_terms
from llama_index_recency.ranking.sentences import SENTENCES_KEY, encoded, memory_sentences
from llama_index_recency.records.nodes import vector_problem
from llama_index_recency.records.text import is_one_statement
from llama_index_recency.storage.filters import to_edge_filter

DOCUMENT_ID_KEY = "doc_id"
"""Payload key of a node's source document id."""

BATCH = 256
"""Points read or written in one Edge call."""


def point_id(node_id: str) -> str:
    """``node_id`` if it is a UUID (Edge stores points under UUIDs or integers only).

    Raises:
        InvalidInputError: ``node_id`` is not a UUID.
    """
    try:
        uuid.UUID(str(node_id))
    except ValueError:
        raise InvalidInputError(
            f"node id {node_id!r} is not a UUID; Qdrant Edge needs UUID point ids "
            "(LlamaIndex's default node ids are UUIDs)"
        ) from None
    return str(node_id)


def node_point(node: BaseNode, *, flat_metadata: bool) -> tuple[str, list[float], dict[str, Any]]:
    """``node`` as an Edge point ``(id, vector, payload)``, its payload as ``QdrantVectorStore``
    writes it, with the node's terms (:data:`~llama_index_recency.ranking.lexical.TERMS_KEY`)
    and, for a node of one sentence, the mark that it needs no sentence vectors.

    Raises:
        InvalidInputError: The node's id is not a UUID, it has no embedding or one a cosine
            cannot compare, or its metadata is not JSON.
    """
    identifier = point_id(node.node_id)
    if node.embedding is None:
        raise InvalidInputError(f"node {node.node_id} has no embedding")
    if (problem := vector_problem(node.embedding)) is not None:
        raise InvalidInputError(f"node {node.node_id}'s embedding {problem}")
    try:
        payload = node_to_metadata_dict(
            node, remove_text=False, flat_metadata=flat_metadata)
    except PydanticSerializationError as error:
        raise InvalidInputError(
            f"node {node.node_id} has metadata that is not JSON: {error}"
        ) from None
    payload[TERMS_KEY] = stored_terms(node.get_content())
    if is_one_statement(node.get_content()):  # its own vector serves: none to embed
        payload[SENTENCES_KEY] = encoded([], node.get_content())
    return identifier, node.embedding, payload


def sentence_payloads(embed_model: BaseEmbedding,
                      memories: Sequence[tuple[str, str]]) -> list[tuple[str, dict[str, Any]]]:
    """``(id, payload fields)`` with the sentence vectors of each of ``memories`` (id, text):
    those of several sentences embedded in one batch, the others marked as needing none."""
    split = [(identifier, text, [] if is_one_statement(text) else memory_sentences(text))
             for identifier, text in memories]
    flat = [t for _, _, texts in split for t in texts]
    vectors = embed_model.get_text_embedding_batch(flat) if flat else []
    payloads, start = [], 0
    for identifier, text, texts in split:
        rows = vectors[start:start + len(texts)] if len(texts) > 1 else []
        payloads.append((identifier, {SENTENCES_KEY: encoded(rows, text)}))
        start += len(texts)
    return payloads


def check_sizes(points: Sequence[tuple[str, list[float], Any]], dimensions: Optional[int],
                path: str) -> None:
    """Refuse a point whose vector is not ``dimensions`` long.

    Raises:
        InvalidInputError: A point's vector of another size than the shard's.
    """
    for identifier, vector, _ in points:
        if len(vector) != dimensions:
            raise InvalidInputError(f"point {identifier} has a {len(vector)}-dim vector; the "
                                    f"store at {path} holds {dimensions}-dim vectors")


def point_selection(
    node_ids: Optional[list[str]], filters: Optional[MetadataFilters]
) -> Optional[edge.Filter]:
    """The filter selecting the points with these ids and/or matching ``filters`` (None:
    every point).

    Raises:
        InvalidInputError: An id that is not a UUID, or a filter Edge cannot express.
    """
    must: list[Any] = []
    if node_ids is not None:
        must.append(edge.HasIdCondition({point_id(node_id) for node_id in node_ids}))
    if filters is not None and filters.filters:
        must.append(to_edge_filter(filters))
    return _all_of(must)


def query_filter(query: VectorStoreQuery) -> Optional[edge.Filter]:
    """The filter of ``query``: its ``doc_ids``, ``node_ids`` and ``filters`` (None: none).

    Raises:
        InvalidInputError: A node id that is not a UUID, or a filter Edge cannot express.
    """
    must: list[Any] = []
    if query.doc_ids:
        match = edge.MatchAny(list(query.doc_ids))
        must.append(edge.FieldCondition(key=DOCUMENT_ID_KEY, match=match))
    if query.node_ids:
        must.append(edge.HasIdCondition({point_id(node_id) for node_id in query.node_ids}))
    if query.filters is not None and query.filters.filters:
        must.append(to_edge_filter(query.filters))
    return _all_of(must)


def _all_of(must: list[Any]) -> Optional[edge.Filter]:
    """The filter every one of ``must`` holds for (None: no condition), a filter among them
    that only lists what must hold spelled out in place: Edge plans a flat filter faster."""
    flat: list[Any] = []
    for condition in must:
        if isinstance(condition, edge.Filter) and condition.must and not (
                condition.should or condition.must_not or condition.min_should):
            flat.extend(condition.must)
        else:
            flat.append(condition)
    return edge.Filter(must=flat) if flat else None


def scroll(
    shard: edge.EdgeShard,
    selection: Optional[edge.Filter],
    *,
    with_vector: bool,
    batch_size: int = BATCH,
) -> Iterator[Any]:
    """Every point ``selection`` selects, ``batch_size`` at a time, in id order."""
    offset = None
    while True:
        records, offset = shard.scroll(
            edge.ScrollRequest(
                offset=offset,
                limit=batch_size,
                filter=selection,
                with_payload=True,
                with_vector=with_vector,
            )
        )
        yield from records
        if offset is None:
            return


def nodes_by_point(shard: edge.EdgeShard, points: Sequence[str]) -> dict[str, BaseNode]:
    """The nodes stored under ``points``, vectors included, by point id as Edge spells it, in
    one read by id (a node keeps the id it was written with, which a copied point may not share)."""
    return {str(record.id): point_node(record)
            for record in shard.retrieve(list(points), True, True)}


_NODE_CLASSES: dict[str, type[BaseNode]] = {
    cls.class_name(): cls for cls in (Node, IndexNode, ImageNode)}
"""The node classes a payload's ``_node_type`` names other than ``TextNode`` (the default), as
``metadata_dict_to_node`` reads them."""


def point_node(point: Any) -> BaseNode:
    """A stored point as its node, the way ``QdrantVectorStore.parse_to_query_result`` does,
    its vector given to the node as it is built (one validation, not a second on assignment)."""
    payload = point.payload or {}
    vector = point.vector
    given = {"embedding": vector if isinstance(vector, list) else list(vector)} if vector else {}
    try:
        data = json.loads(payload["_node_content"])
        if data.get("embedding") is not None:
            given = {}
        kind = _NODE_CLASSES.get(str(payload.get("_node_type")), TextNode)
        return kind.from_dict(data, **given)
    except Exception:
        metadata, node_info, relationships = legacy_metadata_dict_to_node(payload)
        return TextNode(
            id_=str(point.id),
            text=payload.get("text"),
            metadata=metadata,
            start_char_idx=node_info.get("start", None),
            end_char_idx=node_info.get("end", None),
            relationships=relationships,
            **given,
        )

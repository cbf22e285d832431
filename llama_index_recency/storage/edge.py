"""LlamaIndex vector store over a Qdrant Edge shard: Qdrant's in-process engine, kept at a path.

Nodes are stored exactly as ``QdrantVectorStore`` stores them (same payload, one unnamed
cosine vector), so a point copied from a qdrant-client collection reads back as the same node.
"""

from __future__ import annotations

import json
import os
import shutil
import weakref
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any, Optional

import qdrant_edge as edge
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)

from llama_index_recency.errors import InvalidInputError, MemoryStoreClosedError
from llama_index_recency.storage.edge_cache import WriteAwareCache
from llama_index_recency.storage.edge_files import (
    EDGE_CONFIG_FILE,
    METADATA_FILE,
    SPACE_HEADROOM,
    check_space,
    close_shard,
    edge_calls,
    read_metadata,
    refuse_foreign_directory,
    remedy,
    write_metadata,
    write_needs,
)
from llama_index_recency.storage.edge_points import (
    BATCH,
    DOCUMENT_ID_KEY,
    check_sizes,
    node_point,
    nodes_by_point,
    point_id,
    point_node,
    point_selection,
    query_filter,
    scroll,
)
from llama_index_recency.storage.edge_shard import (
    SHARD_STATE_KEY,
    create_shard,
    load_shard,
    warn_if_it_cannot_reopen,
)
from llama_index_recency.storage.filters import has_condition, to_edge_filter


class QdrantEdgeVectorStore(BasePydanticVectorStore):
    """Qdrant Edge vector store: cosine search over a shard held in this process.

    The shard at ``path`` is loaded if present, otherwise created with the first ``add``
    (its vector size taken from the first embedding), or at once when ``dimensions`` is
    given. Only one handle may hold a shard: another process or handle gets
    :class:`MemoryStoreLockedError`. Writes go through Edge's write-ahead log, so they
    survive a killed process without ``flush()``.

    A shard its own disk cannot load for writing (a read-only filesystem, or too little
    free space for what loading fills in) is loaded from a temporary copy in the system's
    temporary directory instead, holding the shard's lock meanwhile: reads work, and every
    write raises the reason (:attr:`read_only`). The copy is deleted on ``close``. A shard
    file Edge cannot read (one truncated, say) makes any read or write raise
    :class:`MemoryStoreDamagedError` naming the store.

    Search is always exact: segments stay plain and ``optimize()`` (which builds HNSW,
    minutes with the GIL held, and makes search approximate) is never called.

    Async methods run the sync call inline (LlamaIndex's default): Edge has no async API
    and holds the GIL for each call, so a worker thread would add cost, not concurrency.

    Examples:
        ```python
        store = QdrantEdgeVectorStore("./memories")
        index = VectorStoreIndex.from_vector_store(store, embed_model=embed_model)
        ```
    """

    stores_text: bool = True
    flat_metadata: bool = False

    path: str = Field(description="Directory of the Edge shard.")
    dimensions: Optional[int] = Field(
        default=None,
        description="Vector size; None until the shard exists (created by the first add).",
    )
    date_key: Optional[str] = Field(
        default="date",
        description="Payload key given a datetime index, for date-range filters; None for none.",
    )
    with_vectors: bool = Field(default=False, description="Return each node's stored vector with "
                               "query results, for a re-ranker that compares them (set by "
                               "RecencyBonusPostprocessor.from_index).")

    _shard: Optional[edge.EdgeShard] = PrivateAttr(default=None)
    _closed: bool = PrivateAttr(default=False)
    _written: bool = PrivateAttr(default=False)
    _metadata: dict[str, Any] = PrivateAttr(default_factory=dict)
    _copy: Optional[str] = PrivateAttr(default=None)
    _refusal: Optional[OSError] = PrivateAttr(default=None)
    _release: Optional[weakref.finalize] = PrivateAttr(default=None)
    _kept: WriteAwareCache = PrivateAttr(default_factory=WriteAwareCache)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        dimensions: Optional[int] = None,
        date_key: Optional[str] = "date",
    ) -> None:
        """Load the shard at ``path``, or create it now when ``dimensions`` is given.

        Raises:
            InvalidInputError: ``dimensions`` below 1 or other than the shard's; the shard
                has no unnamed vector; its metadata file is not a JSON object; ``path``
                holds something other than a shard.
            NotADirectoryError: ``path`` (or a directory above it) is a file.
            MemoryStoreLockedError: Another process or handle holds the shard.
            MemoryStoreDamagedError: Edge cannot load the shard (a file missing, truncated or
                foreign).
            MemoryStoreReadOnlyError: The shard's filesystem is read-only and no temporary
                copy can be made.
            MemoryStoreFullError: The disk is too full to load the shard and no temporary
                copy can be made, or too full to create it.
        """
        if dimensions is not None and dimensions < 1:
            raise InvalidInputError(
                f"dimensions must be a positive vector size, got {dimensions!r}")
        super().__init__(path=os.fspath(path), dimensions=dimensions, date_key=date_key,
                         stores_text=True)
        self._metadata = read_metadata(self.path)
        if not os.path.exists(os.path.join(self.path, EDGE_CONFIG_FILE)):
            refuse_foreign_directory(self.path)
        self._open(dimensions)
        if dimensions is not None and dimensions != self.dimensions:
            self.close()
            raise InvalidInputError(f"the shard at {self.path} holds {self.dimensions}-dim "
                                    f"vectors, not {dimensions}-dim")

    @classmethod
    def class_name(cls) -> str:
        return "QdrantEdgeVectorStore"

    @property
    def client(self) -> Optional[edge.EdgeShard]:
        """The ``EdgeShard`` (None until the first add); write through the store (it keeps counts)."""
        return self._shard

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` released the shard (another process may hold it now)."""
        return self._closed

    @property
    def read_only(self) -> bool:
        """Whether the shard is loaded from a temporary copy (its own disk cannot load it
        for writing): reads work, writes raise why."""
        return self._refusal is not None

    def require_writable(self) -> None:
        """Raise why the store cannot be changed (:class:`MemoryStoreReadOnlyError` or
        :class:`MemoryStoreFullError`) when the shard is loaded from a temporary copy.

        Raises:
            MemoryStoreReadOnlyError: The shard's own filesystem is read-only.
            MemoryStoreFullError: The shard's own disk was too full to load it for writing.
        """
        if self._refusal is not None:
            raise type(self._refusal)(
                f"{self._refusal}: it is open read-only, from a temporary copy, so it cannot "
                f"be changed; {remedy(self._refusal)}")

    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> list[str]:
        """Upsert nodes (each with an embedding and a UUID id); returns their ids.

        Raises:
            InvalidInputError: A node without an embedding, with an id that is not a UUID,
                with metadata that is not JSON, or with a vector of another size than the
                shard's.
            MemoryStoreReadOnlyError: The shard is read from a temporary copy (its
                filesystem is read-only).
            MemoryStoreFullError: The disk is too full for the write (or the shard is read
                from a temporary copy for that reason).
            MemoryStoreDamagedError: A shard file Edge cannot read or write.
        """
        self._require_open()
        self._upsert([node_point(node, flat_metadata=self.flat_metadata) for node in nodes])
        return [node.node_id for node in nodes]

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete every node whose source document is ``ref_doc_id``.

        Raises:
            MemoryStoreReadOnlyError: The shard is read from a temporary copy (its
                filesystem is read-only).
            MemoryStoreFullError: The disk is too full for the write (or the shard is read
                from a temporary copy for that reason).
        """
        shard = self._require_open()
        if shard is not None:
            match = edge.Filter(must=[edge.FieldCondition(key=DOCUMENT_ID_KEY,
                                                          match=edge.MatchValue(ref_doc_id))])
            with self._writing(SPACE_HEADROOM, "to delete"):
                shard.update(edge.UpdateOperation.delete_points_by_filter(match))

    def delete_nodes(self, node_ids: Optional[list[str]] = None,
                     filters: Optional[MetadataFilters] = None, **delete_kwargs: Any) -> None:
        """Delete the nodes with these ids and/or matching ``filters`` (both: both must hold).

        With neither (or ``filters`` without a condition, which select everything), it
        refuses: use :meth:`clear`.

        Raises:
            InvalidInputError: Neither ids nor a condition given; an id that is not a UUID; a
                filter Edge cannot express.
            MemoryStoreReadOnlyError: The shard is read from a temporary copy (its
                filesystem is read-only).
            MemoryStoreFullError: The disk is too full for the write (or the shard is read
                from a temporary copy for that reason).
        """
        if node_ids is None and not has_condition(filters):
            raise InvalidInputError(f"delete_nodes needs node_ids or filters with a condition, got "
                                    f"filters={filters!r}; clear() deletes everything")
        shard = self._require_open()
        selection = point_selection(node_ids, filters)
        if shard is not None and selection is not None and node_ids != []:
            with self._writing(SPACE_HEADROOM, "to delete"):
                shard.update(edge.UpdateOperation.delete_points_by_filter(selection))

    def get_nodes(self, node_ids: Optional[list[str]] = None,
                  filters: Optional[MetadataFilters] = None) -> list[BaseNode]:
        """Nodes with these ids and/or matching ``filters`` (neither: all), embeddings
        included (unit-normalised, as Qdrant keeps cosine vectors).

        Raises:
            InvalidInputError: An id that is not a UUID, or a filter Edge cannot express.
            MemoryStoreDamagedError: A shard file Edge cannot read.
        """
        shard = self._require_open()
        selection = point_selection(node_ids, filters)
        if shard is None or node_ids == []:
            return []
        if filters is None and node_ids is not None:  # by id: no scan
            return list(self.nodes_by_point(sorted(set(node_ids))).values())
        with self._edge_calls():
            return [point_node(record) for record in scroll(shard, selection, with_vector=True)]

    def clear(self) -> None:
        """Delete every node and reclaim the disk; the vector size, indexes and collection
        metadata stay.

        Raises:
            MemoryStoreReadOnlyError: The shard is read from a temporary copy (its
                filesystem is read-only).
            MemoryStoreFullError: The shard is read from a temporary copy (its disk was too
                full to load it), or too full to recreate its payload indexes.
        """
        shard = self._require_open()
        if shard is None:
            return
        self.require_writable()
        with self._kept.writing():
            shard.close()
            self._shard = None
            for name in os.listdir(self.path):
                if name != METADATA_FILE:
                    entry = os.path.join(self.path, name)
                    if os.path.isdir(entry):
                        shutil.rmtree(entry)
                    else:
                        os.remove(entry)
            self._open(self.dimensions)  # set: the shard existed

    def count(self, filters: Optional[MetadataFilters] = None) -> int:
        """How many nodes match ``filters`` (all without), kept until this handle's next write.

        Raises:
            InvalidInputError: A filter Edge cannot express.
            MemoryStoreDamagedError: A shard file Edge cannot read.
        """
        shard = self._require_open()
        selection = to_edge_filter(filters) if filters is not None and filters.filters else None
        if shard is None:
            return 0
        with self._edge_calls():
            if selection is None:
                return int(self.kept("", lambda: shard.info().points_count))
            request = edge.CountRequest(exact=True, filter=selection)
            return int(self.kept(repr(filters), lambda: shard.count(request)))  # repr: inf != nan

    def kept(self, key: Hashable, read: Callable[[], Any]) -> Any:
        """``read()`` of the shard, kept under ``key`` until this handle's next write (nothing
        is kept before the shard exists: another handle may create it)."""
        return read() if self._require_open() is None else self._kept.get(key, read)

    @property
    def version(self) -> Optional[int]:
        """Moves with every write through this handle, None while one is under way: two equal
        readings mean the shard did not change between them."""
        return self._kept.version()

    def nodes_by_point(self, points: Sequence[str]) -> dict[str, BaseNode]:
        """The nodes stored under ``points`` (ids as Edge spells them), vectors included, in
        one read by id; a point not stored is left out.

        Raises:
            MemoryStoreDamagedError: A shard file Edge cannot read.
        """
        shard = self._require_open()
        if shard is None or not points:
            return {}
        with self._edge_calls():
            return nodes_by_point(shard, points)

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """Top ``similarity_top_k`` nodes by exact cosine (raw ``similarities``), embeddings
        with ``with_vectors`` (the field, or ``with_vectors=True``), restricted by ``filters``,
        ``doc_ids``, ``node_ids`` and ``score_threshold=``; ``with_payload=False``: ids and
        similarities only (no node is built).

        Raises:
            InvalidInputError: A query that is not a dense one (``mode`` other than
                ``DEFAULT``) or has no ``query_embedding``; a node id that is not a UUID; a
                filter Edge cannot express.
            MemoryStoreDamagedError: A shard file Edge cannot read.
        """
        if query.mode != VectorStoreQueryMode.DEFAULT:
            raise InvalidInputError(
                f"QdrantEdgeVectorStore supports dense queries only, not {query.mode}")
        if query.query_embedding is None:
            raise InvalidInputError("the query has no query_embedding")
        shard, payload = self._require_open(), bool(kwargs.get("with_payload", True))
        selection = query_filter(query)
        if shard is None:
            return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        request = edge.QueryRequest(
            limit=query.similarity_top_k,
            query=edge.Query.Nearest([float(x) for x in query.query_embedding]),
            filter=selection, with_payload=payload,
            with_vector=payload and (self.with_vectors or bool(kwargs.get("with_vectors"))),
            params=edge.SearchParams(exact=True), score_threshold=kwargs.get("score_threshold"),
        )
        with self._edge_calls():
            points = shard.query(request)
        return VectorStoreQueryResult(
            nodes=[point_node(point) for point in points] if payload else None,
            similarities=[point.score for point in points],
            ids=[str(point.id) for point in points],
        )

    # -- raw points, for copying a store without re-embedding -----------------------------

    def iter_points(self, batch_size: int = BATCH) -> Iterator[tuple[str, list[float], dict]]:
        """Every point as ``(id, vector, payload)``, in id order, ``batch_size`` at a time."""
        shard = self._require_open()
        if shard is None:
            return
        with self._edge_calls():
            for record in scroll(shard, None, with_vector=True, batch_size=batch_size):
                yield str(record.id), record.vector, record.payload

    def upsert_points(self, points: Sequence[tuple[str, list[float], dict]]) -> None:
        """Write ``(id, vector, payload)`` points as given (ids must be UUIDs).

        Raises:
            InvalidInputError: An id that is not a UUID, or a vector of another size than
                the shard's.
            MemoryStoreReadOnlyError: The shard is read from a temporary copy (its
                filesystem is read-only).
            MemoryStoreFullError: The disk is too full for the write (or the shard is read
                from a temporary copy for that reason).
        """
        self._require_open()
        self._upsert([(point_id(id_), vector, payload) for id_, vector, payload in points])

    def set_payloads(self, payloads: Sequence[tuple[str, dict[str, Any]]]) -> None:
        """Set the given fields of each point's payload, ``(id, fields)``, keeping the rest."""
        shard = self._require_open()
        for start in range(0, len(payloads), BATCH):
            chunk = payloads[start : start + BATCH]
            with self._writing(write_needs([(i, [], p) for i, p in chunk]), "to update payloads"):
                for identifier, fields in chunk:
                    assert shard is not None
                    shard.update(edge.UpdateOperation.set_payload([identifier], fields))

    # -- collection metadata, persistence ----------------------------------------------------

    @property
    def metadata(self) -> dict[str, Any]:
        """The collection's metadata record (a copy), e.g. the embedding model identity."""
        record = json.loads(json.dumps(self._metadata))
        record.pop(SHARD_STATE_KEY, None)  # the shard's own bookkeeping
        return record

    def update_metadata(self, values: dict[str, Any]) -> None:
        """Merge ``values`` (JSON) into the metadata record and write it atomically.

        Raises:
            InvalidInputError: The merged record is not JSON.
            MemoryStoreReadOnlyError: The shard is read from a temporary copy (its
                filesystem is read-only).
            MemoryStoreFullError: The shard is read from a temporary copy (its disk was too
                full to load it).
            OSError: The file cannot be written (a full disk included: no free space is
                checked first).
        """
        self._require_open()
        self.require_writable()
        merged = {**self._metadata, **values}
        write_metadata(self.path, merged)
        self._metadata = merged

    def flush(self) -> None:
        """Write pending changes into the segments (the WAL already makes them durable)."""
        if (shard := self._require_open()) is not None:
            with self._edge_calls():
                shard.flush()

    def close(self) -> None:
        """Release the shard and its lock (and delete a temporary copy); the store is
        unusable afterwards (its reads and writes raise :class:`MemoryStoreClosedError`).
        Idempotent."""
        if self._shard is not None:
            points = self._shard.count(edge.CountRequest(exact=True)) if self._written else 0
            shard, self._shard = self._shard, None  # a call failing from now on met the close
            close_shard(shard)
            if self._written:  # on a full disk the next load assumes a WAL to replay
                with suppress(OSError):
                    self.update_metadata({SHARD_STATE_KEY: {"closed": True, "points": points}})
        self._closed = True  # before the lock goes: from now on nothing here writes
        if self._release is not None:
            self._release()

    # -- internals -------------------------------------------------------------------------

    def _require_open(self) -> Optional[edge.EdgeShard]:
        if self._closed:
            raise MemoryStoreClosedError(f"the store at {self.path} is closed")
        return self._shard

    def _open(self, size: Optional[int]) -> Optional[edge.EdgeShard]:
        """Load the shard at ``path`` (maybe created by another handle since), or create it
        with vectors of ``size`` when given."""
        if os.path.exists(os.path.join(self.path, EDGE_CONFIG_FILE)):
            loaded = load_shard(self.path, self._metadata, self.date_key, owner=self)
        elif size is not None:
            loaded = create_shard(self.path, size, self.date_key)
        else:
            return None
        self._shard, self.dimensions = loaded.shard, loaded.dimensions
        self._copy, self._refusal, self._release = loaded.copy, loaded.refusal, loaded.release
        return self._shard

    def _upsert(self, points: Sequence[tuple[str, list[float], dict[str, Any]]]) -> None:
        if not points:
            return
        shard = self._shard or self._open(len(points[0][1]))
        assert shard is not None  # _open with a size creates the shard
        check_sizes(points, self.dimensions, self.path)
        for start in range(0, len(points), BATCH):
            chunk = points[start : start + BATCH]
            batch = [
                edge.Point(identifier, [float(x) for x in vector], payload)
                for identifier, vector, payload in chunk
            ]
            with self._writing(write_needs(chunk), f"to write {len(chunk)} more"):
                shard.update(edge.UpdateOperation.upsert_points(batch))
        warn_if_it_cannot_reopen(self.path)

    def _edge_calls(self) -> AbstractContextManager[None]:
        """Calls to the loaded shard (itself or its temporary copy), failures as one-line errors."""
        return edge_calls(self.path, self._copy or self.path, lambda: self._shard is None)

    @contextmanager
    def _writing(self, needed: int, what: str) -> Iterator[None]:
        """One write to the shard: check the store is writable and has the free space,
        record before this handle's first write that the shard is not closed, and drop what
        was kept before it."""
        self.require_writable()
        check_space(self.path, self._copy or self.path, needed, what)
        if not self._written:
            self.update_metadata({SHARD_STATE_KEY: {"closed": False}})
            self._written = True
        with self._kept.writing(), self._edge_calls():
            yield

"""LlamaIndex vector store over a Qdrant Edge shard: Qdrant's in-process engine, kept at a path.

Nodes are stored exactly as ``QdrantVectorStore`` stores them (same payload, one unnamed
cosine vector), so a point copied from a qdrant-client collection reads back as the same node.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import weakref
from collections.abc import Iterator, Sequence
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

from llama_index_recency.storage.edge_files import (
    COPY_PREFIX,
    EDGE_CONFIG_FILE,
    INDEX_BYTES,
    METADATA_FILE,
    SPACE_HEADROOM,
    check_space,
    copy_sparse,
    file_sizes,
    free_bytes,
    hold_shared,
    in_place_refusal,
    load_needs,
    megabytes,
    opened_shard,
    read_metadata,
    read_only,
    refuse_foreign_directory,
    remedy,
    remove_copy,
    write_metadata,
    write_needs,
)
from llama_index_recency.storage.edge_points import (
    BATCH,
    DOCUMENT_ID_KEY,
    node_point,
    point_id,
    point_node,
    point_selection,
    query_filter,
    scroll,
)
from llama_index_recency.errors import InvalidInputError, MemoryStoreClosedError
from llama_index_recency.storage.filters import has_condition, to_edge_filter
from llama_index_recency.records.nodes import SUPERSEDES_KEY, USER_ID_KEY

logger = logging.getLogger(__name__)
_WARNED: set[tuple[Any, ...]] = set()

SHARD_STATE_KEY = "llama_index_recency.shard"
"""Collection-metadata key: ``{"closed": bool, "points": n}``, closed false from a handle's
first write until its ``close``, which records the point count; a shard not closed since may
have write-ahead log left to replay, and one holding fewer points lost segment files."""


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
    write raises the reason (:attr:`read_only`). The copy is deleted on ``close``.

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

    _shard: Optional[edge.EdgeShard] = PrivateAttr(default=None)
    _closed: bool = PrivateAttr(default=False)
    _written: bool = PrivateAttr(default=False)
    _metadata: dict[str, Any] = PrivateAttr(default_factory=dict)
    _copy: Optional[str] = PrivateAttr(default=None)
    _refusal: Optional[OSError] = PrivateAttr(default=None)
    _release: Optional[weakref.finalize] = PrivateAttr(default=None)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        dimensions: Optional[int] = None,
        date_key: Optional[str] = "date",
    ) -> None:
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
            raise InvalidInputError(
                f"the shard at {self.path} holds {self.dimensions}-dim vectors, "
                f"not {dimensions}-dim"
            )

    @classmethod
    def class_name(cls) -> str:
        return "QdrantEdgeVectorStore"

    @property
    def client(self) -> Optional[edge.EdgeShard]:
        """The ``EdgeShard`` (None until the first add creates it)."""
        return self._shard

    @property
    def read_only(self) -> bool:
        """Whether the shard is loaded from a temporary copy (its own disk cannot load it
        for writing): reads work, writes raise why."""
        return self._refusal is not None

    def require_writable(self) -> None:
        """Raise why the store cannot be changed (:class:`MemoryStoreReadOnlyError` or
        :class:`MemoryStoreFullError`) when the shard is loaded from a temporary copy."""
        if self._refusal is not None:
            raise type(self._refusal)(
                f"{self._refusal}: it is open read-only, from a temporary copy, so it cannot "
                f"be changed; {remedy(self._refusal)}")

    # -- nodes ---------------------------------------------------------------------------

    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> list[str]:
        """Upsert nodes (each with an embedding and a UUID id); returns their ids."""
        self._require_open()
        self._upsert([node_point(node, flat_metadata=self.flat_metadata) for node in nodes])
        return [node.node_id for node in nodes]

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete every node whose source document is ``ref_doc_id``."""
        shard = self._require_open()
        if shard is not None:
            self._before_write(SPACE_HEADROOM, "to delete")
            match = edge.FieldCondition(key=DOCUMENT_ID_KEY, match=edge.MatchValue(ref_doc_id))
            shard.update(edge.UpdateOperation.delete_points_by_filter(edge.Filter(must=[match])))

    def delete_nodes(
        self,
        node_ids: Optional[list[str]] = None,
        filters: Optional[MetadataFilters] = None,
        **delete_kwargs: Any,
    ) -> None:
        """Delete the nodes with these ids and/or matching ``filters`` (both: both must hold).

        With neither (or ``filters`` without a condition, which select everything),
        ``ValueError`` is raised: use :meth:`clear`.
        """
        if node_ids is None and not has_condition(filters):
            raise InvalidInputError(f"delete_nodes needs node_ids or filters with a condition, got "
                                    f"filters={filters!r}; clear() deletes everything")
        shard = self._require_open()
        selection = point_selection(node_ids, filters)
        if shard is not None and selection is not None and node_ids != []:
            self._before_write(SPACE_HEADROOM, "to delete")
            shard.update(edge.UpdateOperation.delete_points_by_filter(selection))

    def get_nodes(
        self,
        node_ids: Optional[list[str]] = None,
        filters: Optional[MetadataFilters] = None,
    ) -> list[BaseNode]:
        """Nodes with these ids and/or matching ``filters`` (neither: all), embeddings
        included (unit-normalised, as Qdrant keeps cosine vectors)."""
        shard = self._require_open()
        selection = point_selection(node_ids, filters)
        if shard is None or node_ids == []:
            return []
        records = scroll(shard, selection, with_vector=True)
        return [point_node(record) for record in records]

    def clear(self) -> None:
        """Delete every node and reclaim the disk; the vector size, indexes and collection
        metadata stay."""
        shard = self._require_open()
        if shard is None:
            return
        self.require_writable()
        shard.close()
        self._shard = None
        for name in os.listdir(self.path):
            if name != METADATA_FILE:
                entry = os.path.join(self.path, name)
                if os.path.isdir(entry):
                    shutil.rmtree(entry)
                else:
                    os.remove(entry)
        self._open(self._vector_size)

    def count(self, filters: Optional[MetadataFilters] = None) -> int:
        """How many nodes match ``filters`` (all nodes without), counted exactly."""
        shard = self._require_open()
        selection = to_edge_filter(filters) if filters is not None and filters.filters else None
        if shard is None:
            return 0
        return shard.count(edge.CountRequest(exact=True, filter=selection))

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """Top ``similarity_top_k`` nodes by exact cosine (``similarities`` are raw cosines),
        restricted by ``filters``, ``doc_ids`` and ``node_ids``."""
        if query.mode != VectorStoreQueryMode.DEFAULT:
            raise InvalidInputError(
                f"QdrantEdgeVectorStore supports dense queries only, not {query.mode}")
        if query.query_embedding is None:
            raise InvalidInputError("the query has no query_embedding")
        shard = self._require_open()
        selection = query_filter(query)
        if shard is None:
            return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        points = shard.query(
            edge.QueryRequest(
                limit=query.similarity_top_k,
                query=edge.Query.Nearest([float(x) for x in query.query_embedding]),
                filter=selection,
                with_payload=True,
                params=edge.SearchParams(exact=True),
            )
        )
        return VectorStoreQueryResult(
            nodes=[point_node(point) for point in points],
            similarities=[point.score for point in points],
            ids=[str(point.id) for point in points],
        )

    # -- raw points, for copying a store without re-embedding -----------------------------

    def iter_points(self, batch_size: int = BATCH) -> Iterator[tuple[str, list[float], dict]]:
        """Every point as ``(id, vector, payload)``, in id order, ``batch_size`` at a time."""
        shard = self._require_open()
        if shard is None:
            return
        for record in scroll(shard, None, with_vector=True, batch_size=batch_size):
            yield str(record.id), record.vector, record.payload

    def upsert_points(self, points: Sequence[tuple[str, list[float], dict]]) -> None:
        """Write ``(id, vector, payload)`` points as given (ids must be UUIDs)."""
        self._require_open()
        self._upsert([(point_id(id_), vector, payload) for id_, vector, payload in points])

    # -- collection metadata, persistence ----------------------------------------------------

    @property
    def metadata(self) -> dict[str, Any]:
        """The collection's metadata record (a copy), e.g. the embedding model identity."""
        record = json.loads(json.dumps(self._metadata))
        record.pop(SHARD_STATE_KEY, None)  # the shard's own bookkeeping
        return record

    def update_metadata(self, values: dict[str, Any]) -> None:
        """Merge ``values`` (JSON) into the metadata record and write it atomically."""
        self._require_open()
        self.require_writable()
        merged = {**self._metadata, **values}
        write_metadata(self.path, merged)
        self._metadata = merged

    def flush(self) -> None:
        """Write pending changes into the segments (the WAL already makes them durable)."""
        shard = self._require_open()
        if shard is not None:
            shard.flush()

    def close(self) -> None:
        """Release the shard and its lock (and delete a temporary copy); the store is
        unusable afterwards. Idempotent."""
        if self._shard is not None:
            points = self._shard.count(edge.CountRequest(exact=True)) if self._written else 0
            self._shard.close()
            self._shard = None
            if self._written:
                try:
                    self.update_metadata({SHARD_STATE_KEY: {"closed": True, "points": points}})
                except OSError:  # a full disk: the next load assumes a WAL to replay
                    pass
        if self._release is not None:
            self._release()
        self._closed = True

    # -- internals -------------------------------------------------------------------------

    @property
    def _vector_size(self) -> int:
        assert self.dimensions is not None
        return self.dimensions

    def _require_open(self) -> Optional[edge.EdgeShard]:
        if self._closed:
            raise MemoryStoreClosedError(f"the store at {self.path} is closed")
        return self._shard

    def _locked(self, open_shard: Any, *args: Any) -> edge.EdgeShard:
        """``open_shard(*args)`` for this store, Edge's failures as one-line errors
        (:func:`~llama_index_recency.storage.edge_files.opened_shard`)."""
        return opened_shard(self.path, open_shard, *args)

    def _load_copy(self, refusal: OSError) -> edge.EdgeShard:
        """Load a copy of the shard made in the temporary directory, holding the shard's
        lock (shared) until ``close``; :attr:`read_only` from then on. ``refusal``, naming
        the temporary directory too, when the copy cannot be made there."""
        lock = hold_shared(self.path)
        parent = tempfile.gettempdir()
        try:
            needed = (sum(blocks for _, blocks in file_sizes(self.path))
                      + load_needs(self.path, parent, replay=self._replays()))
            free = free_bytes(parent)
            if read_only(parent) or free < needed:
                problem = ("read-only too" if read_only(parent) else
                           f"{megabytes(free)} free, about {megabytes(needed)} needed")
                raise type(refusal)(f"{refusal}, and no read-only copy can be made in {parent} "
                                    f"({problem}); {remedy(refusal)}")
            copy = tempfile.mkdtemp(prefix=COPY_PREFIX, dir=parent)
        except BaseException:
            os.close(lock)
            raise
        self._release = weakref.finalize(self, remove_copy, copy, lock)
        try:
            shutil.copytree(self.path, copy, copy_function=copy_sparse, dirs_exist_ok=True)
            shard = self._locked(edge.EdgeShard.load, copy)
        except BaseException:
            self._release()
            raise
        self._copy, self._refusal = copy, refusal
        return shard

    def _check_points(self) -> None:
        """Warn in one line when the shard holds fewer points than its last close recorded
        (segment files deleted or lost: Edge loads what is left without a word)."""
        state = self._metadata.get(SHARD_STATE_KEY) or {}
        recorded = state.get("points") if state.get("closed") else None
        if not isinstance(recorded, int) or self._shard is None:
            return
        held = self._shard.count(edge.CountRequest(exact=True))
        if held < recorded and (self.path, held, recorded) not in _WARNED:
            _WARNED.add((self.path, held, recorded))  # once, though a command opens twice
            logger.warning(
                "the store at %s holds %d of the %d memories it held when last closed: segment "
                "files are missing; restore it from an export or backup", self.path, held, recorded)

    def _open(self, size: Optional[int]) -> Optional[edge.EdgeShard]:
        """Load the shard at ``path`` (maybe created by another handle since), or create it
        with vectors of ``size`` when given."""
        if os.path.exists(os.path.join(self.path, EDGE_CONFIG_FILE)):
            refusal = in_place_refusal(self.path, replay=self._replays())
            if refusal is None:
                self._shard = self._locked(edge.EdgeShard.load, self.path)
            else:
                self._shard = self._load_copy(refusal)
            self.dimensions = self._stored_vector_size()
            self._check_points()
            self._ensure_indexes(new=False)
        elif size is not None:
            # One unnamed cosine vector, as QdrantVectorStore creates a collection.
            vectors = edge.EdgeVectorParams(size, edge.Distance.Cosine)
            self._shard = self._locked(edge.EdgeShard.create, self.path, edge.EdgeConfig(vectors))
            self.dimensions = size
            self._ensure_indexes(new=True)
        else:
            return None
        return self._shard

    def _ensure_indexes(self, *, new: bool) -> None:
        """A datetime index on the date key and keyword indexes on doc_id, user_id and
        supersedes (the successor search runs on every retrieval: it must not scan).

        A store without one of them on a disk too full to add it opens
        without it (searches are the same, only slower; logged once): what a user needs on
        a full disk is to list, export and forget."""
        assert self._shard is not None
        wanted = {DOCUMENT_ID_KEY: edge.PayloadSchemaType.Keyword,
                  USER_ID_KEY: edge.PayloadSchemaType.Keyword,
                  SUPERSEDES_KEY: edge.PayloadSchemaType.Keyword}
        if self.date_key is not None:
            wanted[self.date_key] = edge.PayloadSchemaType.Datetime
        existing = self._shard.info().payload_schema
        missing = {key: schema for key, schema in wanted.items() if key not in existing}
        if missing and not new and free_bytes(self._loaded_from) < INDEX_BYTES * len(missing):
            if (self.path, "indexes") not in _WARNED:
                _WARNED.add((self.path, "indexes"))
                logger.warning("the disk holding the store at %s is too full to add the payload "
                               "indexes %s; it works without them, slower", self.path,
                               ", ".join(sorted(missing)))
            return
        if missing:
            check_space(self.path, self._loaded_from, INDEX_BYTES * len(missing),
                        "to create its payload indexes")
        for key, schema in missing.items():
            self._shard.update(edge.UpdateOperation.create_field_index(key, schema))

    def _stored_vector_size(self) -> int:
        with open(os.path.join(self.path, EDGE_CONFIG_FILE), encoding="utf-8") as file:
            vectors = json.load(file).get("vectors", {})
        if "" not in vectors:
            self.close()
            raise InvalidInputError(f"the shard at {self.path} has no unnamed vector")
        return int(vectors[""]["size"])

    def _upsert(self, points: Sequence[tuple[str, list[float], dict[str, Any]]]) -> None:
        if not points:
            return
        shard = self._shard or self._open(len(points[0][1]))
        assert shard is not None  # _open with a size creates the shard
        for identifier, vector, _ in points:
            if len(vector) != self.dimensions:
                raise InvalidInputError(
                    f"point {identifier} has a {len(vector)}-dim vector; the store at "
                    f"{self.path} holds {self.dimensions}-dim vectors"
                )
        for start in range(0, len(points), BATCH):
            chunk = points[start : start + BATCH]
            self._before_write(write_needs(chunk), f"to write {len(chunk)} more")
            batch = [
                edge.Point(identifier, [float(x) for x in vector], payload)
                for identifier, vector, payload in chunk
            ]
            shard.update(edge.UpdateOperation.upsert_points(batch))
        self._warn_if_it_cannot_reopen()

    def _warn_if_it_cannot_reopen(self) -> None:
        """Warn once when the disk holding the shard could not load it for writing as it now
        is, closed cleanly (writing leaves the holes loading fills in)."""
        needed, free = load_needs(self.path, self.path, replay=False), free_bytes(self.path)
        if free < needed and (self.path, "reopen") not in _WARNED:
            _WARNED.add((self.path, "reopen"))
            logger.warning(
                "the disk holding the store at %s has %s free, about %s needed to reopen it for "
                "writing (Edge fills in its mapped files on loading): later commands read it "
                "from a temporary copy and cannot change it; free some space (or move the store "
                "to a larger disk)", self.path, megabytes(free), megabytes(needed))

    def _before_write(self, needed: int, what: str) -> None:
        """Check the store is writable and has the free space, and record before this
        handle's first write that the shard is not closed."""
        self.require_writable()
        check_space(self.path, self._loaded_from, needed, what)
        if not self._written:
            self.update_metadata({SHARD_STATE_KEY: {"closed": False}})
            self._written = True

    @property
    def _loaded_from(self) -> str:
        """The directory Edge has the shard loaded from: the shard's, or its temporary copy."""
        return self._copy or self.path

    def _replays(self) -> bool:
        """Whether loading may replay the write-ahead log (the shard was not closed since
        its last write)."""
        return not (self._metadata.get(SHARD_STATE_KEY) or {}).get("closed")

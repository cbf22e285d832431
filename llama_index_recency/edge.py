"""LlamaIndex vector store over a Qdrant Edge shard: Qdrant's in-process engine, kept at a path.

Nodes are stored exactly as ``QdrantVectorStore`` stores them (same payload, one unnamed
cosine vector), so a point copied from a qdrant-client collection reads back as the same node.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
import shutil
import tempfile
import uuid
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, Optional

import qdrant_edge as edge
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.schema import BaseNode, TextNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from llama_index.core.vector_stores.utils import (
    legacy_metadata_dict_to_node,
    metadata_dict_to_node,
    node_to_metadata_dict,
)
from pydantic_core import PydanticSerializationError

from llama_index_recency.errors import (
    InvalidInputError,
    MemoryStoreClosedError,
    MemoryStorePathError,
    RecencyError,
)
from llama_index_recency.filters import has_condition, to_edge_filter
from llama_index_recency.records import SUPERSEDES_KEY, USER_ID_KEY

logger = logging.getLogger(__name__)
_WARNED: set[tuple[Any, ...]] = set()

METADATA_FILE = "collection_metadata.json"
"""Collection metadata, JSON, kept inside the shard directory (Edge ignores foreign files)."""

DOCUMENT_ID_KEY = "doc_id"

_EDGE_CONFIG_FILE = "edge_config.json"
_BATCH = 256

SHARD_STATE_KEY = "llama_index_recency.shard"
"""Collection-metadata key: ``{"closed": bool, "points": n}``, closed false from a handle's
first write until its ``close``, which records the point count; a shard not closed since may
have write-ahead log left to replay, and one holding fewer points lost segment files."""

# Edge writes through mmap'd files: a page the disk cannot back kills the process with
# SIGBUS, not an error. So free space is checked before Edge touches the disk. Measured
# (384 to 1024 dims, 300 to 3000 payload bytes): the WAL, segments and indexes take 1.5 to
# 2.2 times a point's vector and payload bytes; loading a shard not closed replays its
# WAL, about 2.5 times the WAL's allocated bytes. On tmpfs, loading also fills in the holes
# of the vector and payload-index files (300 memories of 384 dims: 50 MB, on a shard of
# 11 MB), not those of the payload storage (kept cold) nor of the WAL.
_SPACE_FACTOR = 3
_SPACE_HEADROOM = 8 << 20  # index pages touched in MB steps, the flush at close
_INDEX_BYTES = 4 << 20  # creating a payload index: measured 2.1 MB each on tmpfs
_COLD_STORAGE = "payload_storage"  # a segment's directory Edge maps without filling it in
_COPY_PREFIX = "llama-index-recency-copy-"


class MemoryStoreLockedError(RecencyError, RuntimeError):
    """The embedded store at a path is already open in another process or handle."""


class MemoryStoreReadOnlyError(RecencyError, OSError):
    """The embedded store is on a read-only filesystem (errno EROFS). Qdrant Edge loads a
    shard for writing even to read it (qdrant-edge-py has no read-only load), so the store
    is read from a temporary copy: raised by a write, or when no copy can be made."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.EROFS, message)

    def __str__(self) -> str:
        return str(self.strerror)


class MemoryStoreDamagedError(RecencyError, RuntimeError):
    """Edge cannot load the shard: a file of it is missing, truncated or not what it wrote."""


class MemoryStoreFullError(RecencyError, OSError):
    """The disk holding an embedded store has too little free space for what comes next
    (errno ENOSPC); nothing of that was written."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.ENOSPC, message)

    def __str__(self) -> str:
        return str(self.strerror)


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
        self._metadata = _read_metadata(self._metadata_path)
        if not os.path.exists(os.path.join(self.path, _EDGE_CONFIG_FILE)):
            _refuse_foreign_directory(self.path)
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
                f"be changed; {_remedy(self._refusal)}")

    # -- nodes ---------------------------------------------------------------------------

    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> list[str]:
        """Upsert nodes (each with an embedding and a UUID id); returns their ids."""
        self._require_open()
        self._upsert([self._point(node) for node in nodes])
        return [node.node_id for node in nodes]

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete every node whose source document is ``ref_doc_id``."""
        shard = self._require_open()
        if shard is not None:
            self._before_write(_SPACE_HEADROOM, "to delete")
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
        selection = self._selection(node_ids, filters)
        if shard is not None and selection is not None and node_ids != []:
            self._before_write(_SPACE_HEADROOM, "to delete")
            shard.update(edge.UpdateOperation.delete_points_by_filter(selection))

    def get_nodes(
        self,
        node_ids: Optional[list[str]] = None,
        filters: Optional[MetadataFilters] = None,
    ) -> list[BaseNode]:
        """Nodes with these ids and/or matching ``filters`` (neither: all), embeddings
        included (unit-normalised, as Qdrant keeps cosine vectors)."""
        shard = self._require_open()
        selection = self._selection(node_ids, filters)
        if shard is None or node_ids == []:
            return []
        records = self._scroll(shard, selection, with_vector=True)
        return [self._node(record) for record in records]

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
        selection = self._query_filter(query)
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
            nodes=[self._node(point) for point in points],
            similarities=[point.score for point in points],
            ids=[str(point.id) for point in points],
        )

    # -- raw points, for copying a store without re-embedding -----------------------------

    def iter_points(self, batch_size: int = _BATCH) -> Iterator[tuple[str, list[float], dict]]:
        """Every point as ``(id, vector, payload)``, in id order, ``batch_size`` at a time."""
        shard = self._require_open()
        if shard is None:
            return
        for record in self._scroll(shard, None, with_vector=True, batch_size=batch_size):
            yield str(record.id), record.vector, record.payload

    def upsert_points(self, points: Sequence[tuple[str, list[float], dict]]) -> None:
        """Write ``(id, vector, payload)`` points as given (ids must be UUIDs)."""
        self._require_open()
        self._upsert([(_point_id(id_), vector, payload) for id_, vector, payload in points])

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
        try:
            text = json.dumps(merged, indent=2, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise InvalidInputError(f"collection metadata must be JSON: {error}") from None
        os.makedirs(self.path, exist_ok=True)
        temporary = f"{self._metadata_path}.{os.getpid()}.tmp"
        with open(temporary, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self._metadata_path)
        directory = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
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
    def _metadata_path(self) -> str:
        return os.path.join(self.path, METADATA_FILE)

    @property
    def _vector_size(self) -> int:
        assert self.dimensions is not None
        return self.dimensions

    def _require_open(self) -> Optional[edge.EdgeShard]:
        if self._closed:
            raise MemoryStoreClosedError(f"the store at {self.path} is closed")
        return self._shard

    def _locked(self, open_shard: Any, *args: Any) -> edge.EdgeShard:
        """``open_shard(*args)``, with Edge's failures (a plain Exception with the text) as
        :class:`MemoryStoreLockedError`, :class:`MemoryStoreReadOnlyError`,
        :class:`MemoryStoreFullError` or, loading, :class:`MemoryStoreDamagedError`."""
        if _read_only(args[0]):
            raise self._read_only_error() from None
        try:
            return open_shard(*args)
        except Exception as error:
            text = str(error)
            if "WouldBlock" in text:
                raise MemoryStoreLockedError(
                    f"the store at {self.path} is already open in another process or handle"
                ) from None
            if "os error 30" in text or "Read-only file system" in text:
                raise self._read_only_error() from None
            if "os error 28" in text or "No space left" in text:
                raise MemoryStoreFullError(f"the disk holding the store at {self.path} is "
                                           "full; free some space") from None
            if open_shard is not edge.EdgeShard.load or "Permission denied" in text:
                raise
            raise MemoryStoreDamagedError(
                f"the store at {self.path} is damaged: {_edge_reason(text, args[0])}; restore "
                "it from an export or backup"
            ) from None

    def _read_only_error(self) -> MemoryStoreReadOnlyError:
        refusal = MemoryStoreReadOnlyError(f"the store at {self.path} is on a read-only filesystem")
        return MemoryStoreReadOnlyError(f"{refusal}; {_remedy(refusal)}")

    def _in_place_refusal(self) -> Optional[OSError]:
        """Why the shard cannot be loaded where it is (Edge loads for writing, even to
        read): a read-only filesystem, or too little free space; None when it can."""
        if _read_only(self.path):
            return MemoryStoreReadOnlyError(
                f"the store at {self.path} is on a read-only filesystem")
        needed, free = self._load_needs(self.path, replay=self._replays()), _free_bytes(self.path)
        if free < needed:
            return MemoryStoreFullError(
                f"the disk holding the store at {self.path} has {_megabytes(free)} free, about "
                f"{_megabytes(needed)} needed to open it for writing (Edge fills in its mapped "
                "files and replays its write-ahead log)")
        return None

    def _load_copy(self, refusal: OSError) -> edge.EdgeShard:
        """Load a copy of the shard made in the temporary directory, holding the shard's
        lock (shared) until ``close``; :attr:`read_only` from then on. ``refusal``, naming
        the temporary directory too, when the copy cannot be made there."""
        lock = _hold_shared(self.path)
        parent = tempfile.gettempdir()
        try:
            needed = (sum(blocks for _, blocks in _file_sizes(self.path))
                      + self._load_needs(parent, replay=self._replays()))
            free = _free_bytes(parent)
            if _read_only(parent) or free < needed:
                problem = ("read-only too" if _read_only(parent) else
                           f"{_megabytes(free)} free, about {_megabytes(needed)} needed")
                raise type(refusal)(f"{refusal}, and no read-only copy can be made in {parent} "
                                    f"({problem}); {_remedy(refusal)}")
            copy = tempfile.mkdtemp(prefix=_COPY_PREFIX, dir=parent)
        except BaseException:
            os.close(lock)
            raise
        self._release = weakref.finalize(self, _remove_copy, copy, lock)
        try:
            shutil.copytree(self.path, copy, copy_function=_copy_sparse, dirs_exist_ok=True)
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
        if os.path.exists(os.path.join(self.path, _EDGE_CONFIG_FILE)):
            refusal = self._in_place_refusal()
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

        A store from an earlier version on a disk too full for a missing index opens
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
        if missing and not new and _free_bytes(self._loaded_from) < _INDEX_BYTES * len(missing):
            if (self.path, "indexes") not in _WARNED:
                _WARNED.add((self.path, "indexes"))
                logger.warning("the disk holding the store at %s is too full to add the payload "
                               "indexes %s; it works without them, slower", self.path,
                               ", ".join(sorted(missing)))
            return
        if missing:
            self._check_space(_INDEX_BYTES * len(missing), "to create its payload indexes")
        for key, schema in missing.items():
            self._shard.update(edge.UpdateOperation.create_field_index(key, schema))

    def _stored_vector_size(self) -> int:
        with open(os.path.join(self.path, _EDGE_CONFIG_FILE), encoding="utf-8") as file:
            vectors = json.load(file).get("vectors", {})
        if "" not in vectors:
            self.close()
            raise InvalidInputError(f"the shard at {self.path} has no unnamed vector")
        return int(vectors[""]["size"])

    def _point(self, node: BaseNode) -> tuple[str, list[float], dict[str, Any]]:
        point_id = _point_id(node.node_id)
        if node.embedding is None:
            raise InvalidInputError(f"node {node.node_id} has no embedding")
        try:
            payload = node_to_metadata_dict(
                node, remove_text=False, flat_metadata=self.flat_metadata
            )
        except PydanticSerializationError as error:
            raise InvalidInputError(
                f"node {node.node_id} has metadata that is not JSON: {error}"
            ) from None
        return point_id, node.embedding, payload

    def _upsert(self, points: Sequence[tuple[str, list[float], dict[str, Any]]]) -> None:
        if not points:
            return
        shard = self._shard or self._open(len(points[0][1]))
        assert shard is not None  # _open with a size creates the shard
        for point_id, vector, _ in points:
            if len(vector) != self.dimensions:
                raise InvalidInputError(
                    f"point {point_id} has a {len(vector)}-dim vector; the store at "
                    f"{self.path} holds {self.dimensions}-dim vectors"
                )
        for start in range(0, len(points), _BATCH):
            chunk = points[start : start + _BATCH]
            self._before_write(_write_needs(chunk), f"to write {len(chunk)} more")
            batch = [
                edge.Point(point_id, [float(x) for x in vector], payload)
                for point_id, vector, payload in chunk
            ]
            shard.update(edge.UpdateOperation.upsert_points(batch))
        self._warn_if_it_cannot_reopen()

    def _warn_if_it_cannot_reopen(self) -> None:
        """Warn once when the disk holding the shard could not load it for writing as it now
        is, closed cleanly (writing leaves the holes loading fills in)."""
        needed, free = self._load_needs(self.path, replay=False), _free_bytes(self.path)
        if free < needed and (self.path, "reopen") not in _WARNED:
            _WARNED.add((self.path, "reopen"))
            logger.warning(
                "the disk holding the store at %s has %s free, about %s needed to reopen it for "
                "writing (Edge fills in its mapped files on loading): later commands read it "
                "from a temporary copy and cannot change it; free some space (or move the store "
                "to a larger disk)", self.path, _megabytes(free), _megabytes(needed))

    def _before_write(self, needed: int, what: str) -> None:
        """Check the store is writable and has the free space, and record before this
        handle's first write that the shard is not closed."""
        self.require_writable()
        self._check_space(needed, what)
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

    def _load_needs(self, target: str, *, replay: bool) -> int:
        """Free bytes loading the shard on the filesystem of ``target`` may take: little,
        plus with ``replay`` enough to replay the whole write-ahead log; on tmpfs also the
        holes Edge's mmap fills in on loading (those of the segments' files outside the
        payload storage, which stays cold)."""
        needs = _SPACE_HEADROOM // 8
        if replay:
            allocated = sum(blocks for _, blocks in _file_sizes(os.path.join(self.path, "wal")))
            needs += _SPACE_FACTOR * allocated + _SPACE_HEADROOM
        if _allocates_on_read(target):
            segments = os.path.join(self.path, "segments")
            needs += sum(max(0, size - blocks)
                         for size, blocks in _file_sizes(segments, skip=_COLD_STORAGE))
        return needs

    def _check_space(self, needed: int, what: str) -> None:
        """:class:`MemoryStoreFullError` unless the disk holding the shard has ``needed``
        bytes free (Edge would die of SIGBUS writing an mmap'd page the disk cannot back)."""
        free = _free_bytes(self._loaded_from)
        if free < needed:
            raise MemoryStoreFullError(
                f"the disk holding the store at {self.path} is full: {_megabytes(free)} free, "
                f"about {_megabytes(needed)} needed {what}; free some space (or move the "
                "store to a larger disk)"
            )

    def _selection(
        self, node_ids: Optional[list[str]], filters: Optional[MetadataFilters]
    ) -> Optional[edge.Filter]:
        must: list[Any] = []
        if node_ids is not None:
            must.append(edge.HasIdCondition({_point_id(node_id) for node_id in node_ids}))
        if filters is not None and filters.filters:
            must.append(to_edge_filter(filters))
        return edge.Filter(must=must) if must else None

    def _query_filter(self, query: VectorStoreQuery) -> Optional[edge.Filter]:
        must: list[Any] = []
        if query.doc_ids:
            match = edge.MatchAny(list(query.doc_ids))
            must.append(edge.FieldCondition(key=DOCUMENT_ID_KEY, match=match))
        if query.node_ids:
            must.append(edge.HasIdCondition({_point_id(node_id) for node_id in query.node_ids}))
        if query.filters is not None and query.filters.filters:
            must.append(to_edge_filter(query.filters))
        return edge.Filter(must=must) if must else None

    def _scroll(
        self,
        shard: edge.EdgeShard,
        selection: Optional[edge.Filter],
        *,
        with_vector: bool,
        batch_size: int = _BATCH,
    ) -> Iterator[Any]:
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

    def _node(self, point: Any) -> BaseNode:
        """A stored point as its node, the way ``QdrantVectorStore.parse_to_query_result`` does."""
        payload = point.payload or {}
        embedding = point.vector
        try:
            node = metadata_dict_to_node(payload)
        except Exception:
            metadata, node_info, relationships = legacy_metadata_dict_to_node(payload)
            node = TextNode(
                id_=str(point.id),
                text=payload.get("text"),
                metadata=metadata,
                start_char_idx=node_info.get("start", None),
                end_char_idx=node_info.get("end", None),
                relationships=relationships,
            )
        if embedding and node.embedding is None:
            node.embedding = list(embedding)
        return node


def _write_needs(points: Sequence[tuple[str, list[float], dict[str, Any]]]) -> int:
    """Free bytes writing ``points`` may take: vectors and payloads times the measured factor."""
    raw = sum(4 * len(vector) + len(json.dumps(payload, default=str)) + 64
              for _, vector, payload in points)
    return _SPACE_FACTOR * raw + _SPACE_HEADROOM


def _free_bytes(path: str) -> int:
    """Free bytes (for this user) on the filesystem that holds, or will hold, ``path``."""
    return shutil.disk_usage(_existing(path)).free


def _read_only(path: str) -> bool:
    """Whether the filesystem holding ``path`` is mounted read-only."""
    try:
        return bool(os.statvfs(_existing(path)).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _edge_reason(text: str, path: str) -> str:
    """Edge's load failure without its wrappers, paths shown relative to the shard."""
    reason = re.sub(r"(Service runtime error|IO Error|Can't init WAL): ", "", text)
    return reason.replace(os.path.join(path, ""), "").replace(path, "the shard").strip()


def _file_sizes(directory: str, skip: Optional[str] = None) -> Iterator[tuple[int, int]]:
    """``(apparent size, allocated bytes)`` of every file under ``directory``, but not in
    directories named ``skip``."""
    for parent, directories, files in os.walk(directory):
        directories[:] = [name for name in directories if name != skip]
        for name in files:
            try:
                status = os.stat(os.path.join(parent, name))
            except OSError:
                continue
            yield status.st_size, status.st_blocks * 512


def _remedy(refusal: OSError) -> str:
    """What a user can do about a store refused for ``refusal``."""
    if isinstance(refusal, MemoryStoreReadOnlyError):
        return "remount it read-write or copy the store to a writable disk"
    return "free some space (or move the store to a larger disk)"


def _hold_shared(path: str) -> int:
    """A shared lock on the shard's ``wal`` directory, which Edge locks exclusively while it
    has the shard loaded: the descriptor holding it; :class:`MemoryStoreLockedError` when
    another handle has the shard."""
    descriptor = os.open(os.path.join(path, "wal"), os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise MemoryStoreLockedError(
            f"the store at {path} is already open in another process or handle") from None
    return descriptor


def _remove_copy(copy: str, lock: int) -> None:
    """Delete a shard's temporary copy and release the shard's lock."""
    shutil.rmtree(copy, ignore_errors=True)
    os.close(lock)


def _copy_sparse(source: str, target: str) -> None:
    """Copy a file, leaving its holes holes (Edge's files are mostly holes: 300 memories
    take 11 MB in 170 MB of files)."""
    with open(source, "rb") as reader, open(target, "wb") as writer:
        end = os.fstat(reader.fileno()).st_size
        offset = 0
        while offset < end:
            try:
                offset = os.lseek(reader.fileno(), offset, os.SEEK_DATA)
            except OSError:  # ENXIO: nothing but a hole after offset
                break
            stop = os.lseek(reader.fileno(), offset, os.SEEK_HOLE)
            reader.seek(offset)
            writer.seek(offset)
            while offset < stop:
                chunk = reader.read(min(stop - offset, 1 << 20))
                if not chunk:
                    break
                writer.write(chunk)
                offset += len(chunk)
            offset = stop
        writer.truncate(end)


def _allocates_on_read(path: str) -> bool:
    """Whether ``path`` is on tmpfs (or ramfs), where touching a hole of a shared mmap
    allocates memory even to read it; disks map holes to a zero page."""
    target, best, kind = os.path.realpath(_existing(path)), "", ""
    try:
        with open("/proc/self/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                fields = line.split()
                point = fields[1].replace("\\040", " ") if len(fields) > 2 else ""
                inside = target == point or target.startswith(point.rstrip("/") + "/")
                if point and inside and len(point) >= len(best):
                    best, kind = point, fields[2]
    except OSError:  # no /proc: assume a disk
        return False
    return kind in ("tmpfs", "ramfs")


def _existing(path: str) -> str:
    """``path``, or its nearest ancestor that exists."""
    existing = os.path.abspath(path)
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    return existing


def _megabytes(size: int) -> str:
    return f"{size / (1 << 20):.1f} MB"


def _point_id(node_id: str) -> str:
    """``node_id`` if it is a UUID (Edge stores points under UUIDs or integers only)."""
    try:
        uuid.UUID(str(node_id))
    except ValueError:
        raise InvalidInputError(
            f"node id {node_id!r} is not a UUID; Qdrant Edge needs UUID point ids "
            "(LlamaIndex's default node ids are UUIDs)"
        ) from None
    return str(node_id)


def _read_metadata(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as file:
            record = json.load(file)
    except FileNotFoundError:
        return {}
    except json.JSONDecodeError as error:
        raise InvalidInputError(
            f"the collection metadata {path} is not valid JSON: {error}") from None
    if not isinstance(record, dict):
        raise InvalidInputError(f"the collection metadata {path} is not a JSON object")
    return record


def _refuse_foreign_directory(path: str) -> None:
    """Refuse to create a shard in a directory that holds something else (say, a
    qdrant-client local-mode store): the two would be mixed up."""
    if os.path.isfile(path):
        raise MemoryStorePathError(f"{path} is a file, not a Qdrant Edge shard directory")
    if not os.path.isdir(path):
        return
    foreign = sorted(name for name in os.listdir(path) if not name.startswith(METADATA_FILE))
    if foreign:
        raise InvalidInputError(
            f"{path} is not a Qdrant Edge shard but holds {', '.join(foreign[:3])}; "
            "point the store at an empty or new directory"
        )

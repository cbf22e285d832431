"""The memory store: a ``VectorStoreIndex`` over Qdrant Edge on the device, or a Qdrant server.

Where memories live, by what :func:`open_memory_index` is given:

- ``path``: a Qdrant Edge shard under ``<path>/edge/<collection>`` (in-process, exact,
  write-ahead logged). A directory written by 0.1.0 (qdrant-client's local mode) still
  opens as it is, with a notice that ``llama-index-recency migrate`` moves it to Edge.
- ``url``: a Qdrant server through qdrant-client (sync and async).
- neither: an Edge shard in a temporary directory, deleted when the process exits.

Every collection records which embedding model (name and dimension) filled it, and
opening it with another model is an error: vectors from two models are not comparable,
and mixing them would silently corrupt retrieval.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import re
import shutil
import tempfile
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, Optional, Union

import httpx
from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
)
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import AsyncQdrantClient, QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException

from llama_index_recency.edge import (
    MemoryStoreDamagedError,
    MemoryStoreFullError,
    MemoryStoreLockedError,
    MemoryStoreReadOnlyError,
    QdrantEdgeVectorStore,
)
from llama_index_recency.embeddings import EmbeddingMismatchError
from llama_index_recency.errors import (
    InvalidInputError,
    MemoryStorePathError,
    MigrationIncompleteError,
    PermissionDeniedError,
    RecencyError,
    UnsupportedStoreError,
)
from llama_index_recency.gate_fit import fitted_origin
from llama_index_recency.filters import has_condition, memory_scope, to_qdrant_filter
from llama_index_recency.records import is_memory_id
from llama_index_recency.models import CALIBRATED_POLICIES
from llama_index_recency.dates import parse_memory_date
from llama_index_recency.scoring import RecencyPolicy

logger = logging.getLogger(__name__)

DEFAULT_COLLECTION = "memories"

EMBEDDING_METADATA_KEY = "llama_index_recency.embedding"
"""Collection-metadata key holding ``{"model": name, "dimensions": n}``."""

POLICY_METADATA_KEY = "llama_index_recency.policy"
"""Collection-metadata key holding the calibrated policy: weight, tau_days, threshold, top_n."""

GATE_METADATA_KEY = "llama_index_recency.gate"
"""Collection-metadata key holding the store's own gate fit: relevance units, thresholds per
language, the memories it was fitted on and the day (``save_gate_fit``)."""
GATE_REFUSED_METADATA_KEY = "llama_index_recency.gate_refused"
"""Collection-metadata key: relevance units and store size of the last refused gate fit."""

EDGE_DIRECTORY = "edge"
"""Subdirectory of a store path holding one Edge shard per collection."""

_LOCAL_MODE_MARKER = "meta.json"  # what qdrant-client's local mode keeps at a store's root
_DIMENSION_PROBE = "dimension probe"
_COPY_BATCH = 256

__all__ = [
    "DEFAULT_COLLECTION",
    "EMBEDDING_METADATA_KEY",
    "GATE_METADATA_KEY",
    "POLICY_METADATA_KEY",
    "MemoryStoreDamagedError",
    "MemoryStoreFullError",
    "MemoryStoreLockedError",
    "MemoryStoreReadOnlyError",
    "MemoryStoreNotFoundError",
    "MemoryStoreUnreachableError",
    "Migration",
    "check_collection_name",
    "check_memory_store",
    "close_memory_index",
    "count_memories",
    "delete_memories",
    "aget_memories",
    "get_memories",
    "has_saved_policy",
    "index_policy",
    "migrate_store",
    "open_memory_index",
    "open_memory_store",
    "save_gate_fit",
    "save_policy",
]


class MemoryStoreNotFoundError(RecencyError, FileNotFoundError):
    """A command that only reads was pointed at a path that holds no memory store."""


class MemoryStoreUnreachableError(RecencyError, ConnectionError):
    """The Qdrant server at a url did not answer (nothing listening, no route, a timeout)."""


def open_memory_index(
    embed_model: BaseEmbedding,
    *,
    path: Optional[str | os.PathLike[str]] = None,
    url: Optional[str] = None,
    api_key: Optional[str] = None,
    collection_name: str = DEFAULT_COLLECTION,
    client: Optional[QdrantClient] = None,
    aclient: Optional[AsyncQdrantClient] = None,
    use_async: bool = False,
    embedding_name: Optional[str] = None,
) -> VectorStoreIndex:
    """Open (creating if needed) the memory collection as a ``VectorStoreIndex``.

    Where it lives: an embedded store at ``path`` (Qdrant Edge; a 0.1.0 store opens in
    qdrant-client's local mode), a Qdrant server ``url``, ready ``client``/``aclient``
    objects, or (none of these) a temporary Edge shard. Sync and async both work on
    every engine; ``use_async`` only matters for a 0.1.0 store, whose local mode holds
    one client (sync unless ``use_async=True``). Each node's metadata, the memory's
    date included, is stored in the point's payload.

    The embedding's name (``embedding_name``, default ``embed_model.model_name``) and
    dimension (measured on one probe query) are recorded with the collection; a
    collection recorded with another raises :class:`EmbeddingMismatchError`. A store
    open in another process raises :class:`MemoryStoreLockedError`, a server that does not
    answer :class:`MemoryStoreUnreachableError`.
    """
    check_collection_name(collection_name)
    identity = {
        "model": embedding_name or embed_model.model_name,
        "dimensions": len(embed_model.get_query_embedding(_DIMENSION_PROBE)),
    }
    if client is None and aclient is None and url is None:
        if path is None or not is_local_mode_store(path):
            store = _edge_store(path, collection_name, identity)
            return VectorStoreIndex.from_vector_store(store, embed_model=embed_model)
        logger.warning(
            "%s was written by llama-index-recency 0.1.0 (qdrant-client local mode); it works "
            "as is, and `llama-index-recency migrate %s NEW_PATH` moves it to Qdrant Edge "
            "(exact, faster, crash-safe)", path, path,
        )
    if client is None and aclient is None:
        client, aclient = qdrant_clients(path=path, url=url, api_key=api_key, use_async=use_async)
    with _reaching(url):
        _check_embedding(_collection_calls(client, aclient), collection_name, identity)
    vector_store = QdrantVectorStore(
        collection_name=collection_name, client=client, aclient=aclient
    )
    return VectorStoreIndex.from_vector_store(vector_store, embed_model=embed_model)


def open_memory_store(
    *,
    path: Optional[str | os.PathLike[str]] = None,
    url: Optional[str] = None,
    api_key: Optional[str] = None,
    collection_name: str = DEFAULT_COLLECTION,
) -> BasePydanticVectorStore:
    """An existing store's vector store, for reading and maintenance without an embedding model.

    Nothing is created: a path or server without the collection raises
    :class:`MemoryStoreNotFoundError`, a server that does not answer
    :class:`MemoryStoreUnreachableError`. For listing, counting, forgetting and migrating.
    """
    check_collection_name(collection_name)
    if url is not None:
        client, aclient = qdrant_clients(url=url, api_key=api_key)
        assert client is not None
        with _reaching(url):
            exists = client.collection_exists(collection_name)
        if not exists:
            raise MemoryStoreNotFoundError(f"no collection {collection_name!r} at {url}")
        return QdrantVectorStore(collection_name=collection_name, client=client, aclient=aclient)
    if path is None:
        raise InvalidInputError("open_memory_store needs the path or url of an existing store")
    check_memory_store(path, must_exist=True, collection_name=collection_name)
    if is_local_mode_store(path):
        client, _ = qdrant_clients(path=path)
        return QdrantVectorStore(collection_name=collection_name, client=client)
    return _open_edge(Path(path), collection_name)


def is_local_mode_store(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a store written by 0.1.0 (qdrant-client's local mode)."""
    return (Path(path) / _LOCAL_MODE_MARKER).is_file()


def edge_shard_path(path: str | os.PathLike[str], collection_name: str = DEFAULT_COLLECTION) -> Path:
    """Where the Edge shard of ``collection_name`` lives in the store at ``path``."""
    return Path(path) / EDGE_DIRECTORY / check_collection_name(collection_name)


def check_collection_name(name: str) -> str:
    """``name`` if it is a plain collection name: not empty, not ``.`` or ``..``, without a
    path separator or NUL (it names a directory under the store, and a server collection).
    Otherwise ``ValueError`` naming it."""
    if name in ("", ".", "..") or any(bad in name for bad in ("/", "\\", "\0")):
        raise InvalidInputError(
            f"collection name {name!r} is not a plain name: give a non-empty name "
            "without '/', '\\', NUL, and not '.' or '..'")
    return name


def _edge_store(
    path: Optional[str | os.PathLike[str]], collection_name: str, identity: dict[str, Any]
) -> QdrantEdgeVectorStore:
    """The Edge shard for ``collection_name`` at ``path`` (a temporary one for None), checked."""
    temporary = path is None
    if path is None:
        path = tempfile.mkdtemp(prefix="llama-index-recency-")
    elif Path(path).is_file():
        raise MemoryStorePathError(f"the memory store path {path} is a file, not a directory")
    store = _open_edge(Path(path), collection_name)
    if store.dimensions is None:  # a new shard: create it now, so opening holds the lock
        store = _open_edge(Path(path), collection_name, dimensions=identity["dimensions"])
    if temporary:
        weakref.finalize(store, shutil.rmtree, path, ignore_errors=True)
    recorded = store.metadata.get(EMBEDDING_METADATA_KEY)
    if recorded is None and store.dimensions in (None, identity["dimensions"]):
        if not store.read_only:  # a copy's record would be lost: the next writable open does it
            store.update_metadata({EMBEDDING_METADATA_KEY: identity})
    elif recorded != identity:
        store.close()
        raise _mismatch(collection_name, recorded or {"model": "an unrecorded model",
                                                      "dimensions": store.dimensions}, identity)
    return store


def _open_edge(
    root: Path, collection_name: str, dimensions: Optional[int] = None
) -> QdrantEdgeVectorStore:
    """The collection's Edge shard in the store at ``root``; a held one names the store."""
    try:
        return QdrantEdgeVectorStore(edge_shard_path(root, collection_name), dimensions=dimensions)
    except MemoryStoreLockedError:
        raise _locked(root) from None
    except PermissionError:
        raise
    except Exception as error:  # Edge reports OS errors as a plain Exception with the text
        if "Permission denied" in str(error):
            raise PermissionDeniedError(errno.EACCES, "Permission denied", str(root)) from None
        raise


def check_memory_store(
    path: str | os.PathLike[str],
    *,
    must_exist: bool,
    collection_name: str = DEFAULT_COLLECTION,
    writes: bool = False,
) -> None:
    """Fail fast, before any model loads: the store at ``path`` is locked, missing or a file,
    or (for a command that ``writes``) it can only be read.

    Raises :class:`MemoryStoreLockedError` when another process holds it,
    :class:`MemoryStoreNotFoundError` when ``must_exist`` and no store is there,
    ``NotADirectoryError`` when ``path`` is a file, and :class:`MemoryStoreReadOnlyError`
    or :class:`MemoryStoreFullError` when ``writes`` and its disk cannot load it for writing.
    """
    root = Path(path)
    if root.is_file():
        raise MemoryStorePathError(f"the memory store path {root} is a file, not a directory")
    if is_local_mode_store(root):
        _check_local_mode_lock(root)
        return
    shard = edge_shard_path(root, collection_name)
    if not shard.is_dir():
        if must_exist:
            raise MemoryStoreNotFoundError(
                f"no memory store at {root} (collection {collection_name!r}); check the path, "
                "or add a memory first"
            )
        return
    store = _open_edge(root, collection_name)  # raises MemoryStoreLockedError when held
    store.close()
    if writes:
        store.require_writable()


def _check_local_mode_lock(root: Path) -> None:
    import portalocker  # a qdrant-client dependency; it is what local mode locks with

    try:
        with open(root / ".lock", "a") as lock_file:
            portalocker.lock(lock_file, portalocker.LockFlags.EXCLUSIVE
                             | portalocker.LockFlags.NON_BLOCKING)
            portalocker.unlock(lock_file)
    except portalocker.exceptions.LockException:
        raise _locked(root) from None


MemoryStore = Union[VectorStoreIndex, BasePydanticVectorStore]
"""A memory index (open_memory_index) or its vector store (open_memory_store)."""

MemoryVectorStore = Union[QdrantEdgeVectorStore, QdrantVectorStore]
"""The vector stores memories live in: Qdrant Edge, or Qdrant through qdrant-client."""


def vector_store_of(memories: MemoryStore) -> MemoryVectorStore:
    """The vector store of an index, or the store itself; one of another kind is refused."""
    store = memories.vector_store if isinstance(memories, VectorStoreIndex) else memories
    if not isinstance(store, (QdrantEdgeVectorStore, QdrantVectorStore)):
        raise UnsupportedStoreError(
            f"memories live in Qdrant Edge or Qdrant (QdrantEdgeVectorStore, QdrantVectorStore; "
            f"see open_memory_index), not in a {type(store).__name__}"
        )
    return store


def count_memories(index: MemoryStore) -> int:
    """How many memories the index's collection holds (0 when it does not exist yet)."""
    store = vector_store_of(index)
    if isinstance(store, QdrantEdgeVectorStore):
        return store.count()
    if not store.client.collection_exists(store.collection_name):
        return 0
    return store.client.count(store.collection_name, exact=True).count


def get_memories(
    index: MemoryStore,
    ids: Optional[Sequence[str]] = None,
    filters: Optional[MetadataFilters] = None,
    *,
    user_id: Optional[str] = None,
) -> list[BaseNode]:
    """The memories with these ids AND matching ``filters`` AND of ``user_id`` (none given:
    all), newest first (undated last), embeddings included."""
    if user_id is not None:
        filters = memory_scope(user_id=user_id, filters=filters)
    return sorted(select_nodes(vector_store_of(index), ids, filters), key=_newest_first)


class MemoryNotFoundError(RecencyError, LookupError):
    """No memory with that id (in that user's memories, when a user is given)."""

    def __init__(self, node_id: str, user_id: Optional[str] = None) -> None:
        self.node_id, self.user_id = node_id, user_id
        whose = "" if user_id is None else f" of user {user_id!r}"
        super().__init__(f"no memory {node_id!r}{whose} in the store")

    def __str__(self) -> str:  # LookupError would quote the message like a key
        return str(self.args[0])


def get_memory(index: MemoryStore, node_id: str, *, user_id: Optional[str] = None) -> BaseNode:
    """The memory ``node_id`` (of ``user_id`` when given); :class:`MemoryNotFoundError` if none."""
    if not is_memory_id(node_id):
        raise MemoryNotFoundError(node_id, user_id)
    found = get_memories(index, [node_id], user_id=user_id)
    if not found:
        raise MemoryNotFoundError(node_id, user_id)
    return found[0]


async def aget_memories(
    index: MemoryStore,
    ids: Optional[Sequence[str]] = None,
    filters: Optional[MetadataFilters] = None,
    *,
    user_id: Optional[str] = None,
) -> list[BaseNode]:
    """Async :func:`get_memories`, run in a thread (Edge has no async API and holds the GIL
    only per call)."""
    return await asyncio.to_thread(get_memories, index, ids, filters, user_id=user_id)


def _newest_first(node: BaseNode) -> tuple[int, float, str]:
    try:
        stamp = parse_memory_date(node.metadata.get("date")).timestamp()
    except ValueError:
        return (1, 0.0, node.node_id)
    return (0, -stamp, node.node_id)


def select_nodes(
    store: MemoryVectorStore,
    ids: Optional[Sequence[str]] = None,
    filters: Optional[MetadataFilters] = None,
) -> list[BaseNode]:
    """:func:`get_memories` on a vector store (Edge, or qdrant-client with a sync client)."""
    if isinstance(store, QdrantEdgeVectorStore):
        return store.get_nodes(node_ids=None if ids is None else list(ids), filters=filters)
    if not store.client.collection_exists(store.collection_name):
        return []
    nodes: list[BaseNode] = []
    offset = None
    while True:  # QdrantVectorStore.get_nodes stops at 9,999 and ORs ids with filters
        records, offset = store.client.scroll(
            store.collection_name, scroll_filter=qdrant_selection(ids, filters),
            limit=_COPY_BATCH, offset=offset, with_payload=True, with_vectors=True,
        )
        nodes.extend(store.parse_to_query_result(records).nodes or ())
        if offset is None:
            return nodes


def delete_memories(
    index: MemoryStore,
    ids: Optional[Sequence[str]] = None,
    filters: Optional[MetadataFilters] = None,
) -> None:
    """Delete the memories with these ids AND matching ``filters``; one of them is required
    (``filters`` without a condition select everything, so they do not count)."""
    if ids is None and not has_condition(filters):
        raise InvalidInputError(
            f"name the memories to delete: ids, filters with a condition, or both; "
            f"got filters={filters!r}")
    store = vector_store_of(index)
    if isinstance(store, QdrantEdgeVectorStore):
        store.delete_nodes(node_ids=None if ids is None else list(ids), filters=filters)
    elif store.client.collection_exists(store.collection_name):
        selection = qdrant_selection(ids, filters)
        assert selection is not None  # a condition was required above
        store.client.delete(store.collection_name,
                            points_selector=models.FilterSelector(filter=selection))


def qdrant_selection(
    ids: Optional[Sequence[str]], filters: Optional[MetadataFilters]
) -> Optional[models.Filter]:
    must: list[Any] = []
    if ids is not None:
        must.append(models.HasIdCondition(has_id=list(ids)))
    if filters is not None and filters.filters:
        must.append(to_qdrant_filter(filters))
    return models.Filter(must=must) if must else None


def close_memory_index(index: MemoryStore) -> None:
    """Release the store (an embedded store's lock) so another process can open it."""
    store = vector_store_of(index)
    if isinstance(store, QdrantEdgeVectorStore):
        store.close()
    elif store.client is not None:
        store.client.close()


def save_policy(index: MemoryStore, policy: RecencyPolicy) -> None:
    """Record ``policy`` (relevance units, weight, tau_days, thresholds, top_n) with the
    collection: an explicit policy, which wins over the store's own gate fit."""
    _update_metadata(index, {POLICY_METADATA_KEY: {
        "relevance": policy.relevance, "weight": policy.weight, "tau_days": policy.tau_days,
        "threshold": policy.threshold, "top_n": policy.top_n,
        "language_thresholds": dict(policy.language_thresholds),
    }})


def save_gate_fit(index: MemoryStore, relevance: str, thresholds: dict[str, float],
                  memories: int, fitted_on: date) -> None:
    """Record the store's own gate fit: per-language ``thresholds`` in ``relevance`` units,
    fitted on ``memories`` memories on ``fitted_on`` (read by :func:`index_policy`)."""
    _update_metadata(index, {GATE_METADATA_KEY: {
        "relevance": relevance, "thresholds": dict(thresholds), "memories": memories,
        "fitted_on": fitted_on.isoformat(),
    }})


def save_gate_refusal(index: MemoryStore, relevance: str, memories: int) -> None:
    """Record that a fit on ``memories`` memories was refused, so the store is not fitted
    again before it grows as much as after a fit (:func:`gate_record` keeps the last fit)."""
    _update_metadata(index, {GATE_REFUSED_METADATA_KEY: {
        "relevance": relevance, "memories": memories}})


def gate_refusal(index: MemoryStore) -> Optional[dict[str, Any]]:
    """The store's last refused gate fit (:func:`save_gate_refusal`), if any."""
    record = _collection_metadata(vector_store_of(index)).get(GATE_REFUSED_METADATA_KEY)
    return dict(record) if isinstance(record, dict) else None


def gate_record(index: MemoryStore) -> Optional[dict[str, Any]]:
    """The store's own gate fit (:func:`save_gate_fit`), if any."""
    record = _collection_metadata(vector_store_of(index)).get(GATE_METADATA_KEY)
    return dict(record) if isinstance(record, dict) else None


def _update_metadata(index: MemoryStore, record: dict[str, Any]) -> None:
    store = vector_store_of(index)
    if isinstance(store, QdrantEdgeVectorStore):
        store.update_metadata(record)
        return
    call = _collection_calls(store.client, store._aclient)
    metadata = dict(call("get_collection", store.collection_name).config.metadata or {})
    call("update_collection", store.collection_name, metadata={**metadata, **record})


def embedding_identity(index: MemoryStore) -> Optional[dict[str, Any]]:
    """The embedding model (name and dimensions) the store records, if any."""
    identity = _collection_metadata(vector_store_of(index)).get(EMBEDDING_METADATA_KEY)
    return dict(identity) if isinstance(identity, dict) else None


def has_saved_policy(index: MemoryStore) -> bool:
    """Whether a policy was calibrated and saved with this store (``save_policy``)."""
    return POLICY_METADATA_KEY in _collection_metadata(vector_store_of(index))


def index_policy(index: MemoryStore, **overrides: Any) -> RecencyPolicy:
    """The policy to rank this store with: the one calibrated and saved with it
    (:func:`save_policy`, origin "explicit"), else the shipped one for its embedding model
    (``models.CALIBRATED_POLICIES``; else the seed's) with the store's own gate fit in the
    same units (:func:`save_gate_fit`, origin "fitted on N memories on DATE") or as shipped.

    ``overrides`` (e.g. ``reference_date=...``) are applied on top; a ``threshold`` among
    them is the one for every language (origin "explicit").
    """
    metadata = _collection_metadata(vector_store_of(index))
    model = (metadata.get(EMBEDDING_METADATA_KEY) or {}).get("model")
    shipped = CALIBRATED_POLICIES.get(model or "", {})
    saved = metadata.get(POLICY_METADATA_KEY)
    gate = metadata.get(GATE_METADATA_KEY)
    if saved is not None:
        # A saved calibration fits the gate and the bonus; the intent and version rules
        # the model ships with (in the same units) still apply.
        same_units = saved.get("relevance", "cosine") == shipped.get("relevance", "cosine")
        values = {**(shipped if same_units else {}), "language_thresholds": {}, **saved,
                  "threshold_origin": "explicit"}
    elif isinstance(gate, dict) and gate.get("relevance") == shipped.get("relevance", "cosine"):
        thresholds = dict(gate["thresholds"])
        values = {**shipped, "threshold": max(thresholds.values()),
                  "language_thresholds": thresholds,
                  "threshold_origin": fitted_origin(gate["memories"],
                                                    date.fromisoformat(gate["fitted_on"]))}
    else:
        values = {**shipped, "threshold_origin": "shipped"}
    if "threshold" in overrides:  # a threshold given is the one for every language
        values = {**values, "language_thresholds": {}, "threshold_origin": "explicit"}
    return RecencyPolicy(**{**values, **overrides})


def _collection_metadata(store: MemoryVectorStore) -> dict[str, Any]:
    if isinstance(store, QdrantEdgeVectorStore):
        return store.metadata
    call = _collection_calls(store.client, store._aclient)  # an async-only store too
    if not call("collection_exists", store.collection_name):
        return {}
    return dict(call("get_collection", store.collection_name).config.metadata or {})


@dataclass(frozen=True)
class Migration:
    """What :func:`migrate_store` did: memories in the source, copied, and now in the target."""

    source_count: int
    copied: int
    target_count: int
    target: Path


def migrate_store(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    collection_name: str = DEFAULT_COLLECTION,
    progress: Optional[Callable[[int], None]] = None,
) -> Migration:
    """Copy a 0.1.0 store (qdrant-client local mode) into a Qdrant Edge store at ``target``.

    Every memory keeps its id, vector and payload, and the collection its embedding
    identity; no embedding model is needed. ``source`` is only read. The identity is
    recorded before any point is copied, so an interrupted copy is never adopted by
    another model; rerunning finishes it (same ids overwrite themselves). The counts are
    verified; a shortfall is an error. ``progress`` is called with the number of
    memories copied per batch.
    """
    check_collection_name(collection_name)
    if not is_local_mode_store(source):
        raise MemoryStoreNotFoundError(
            f"{source} is not a llama-index-recency 0.1.0 store (no {_LOCAL_MODE_MARKER}); "
            "migrate copies those into Qdrant Edge"
        )
    if is_local_mode_store(target):
        raise InvalidInputError(
            f"the target {target} is itself a 0.1.0 store; give a new directory")
    client, _ = qdrant_clients(path=os.fspath(source))
    assert client is not None
    try:
        if not client.collection_exists(collection_name):
            raise MemoryStoreNotFoundError(f"{source} has no collection {collection_name!r}")
        config = client.get_collection(collection_name).config
        vectors = config.params.vectors
        size = vectors.size if isinstance(vectors, models.VectorParams) else None
        identity = (config.metadata or {}).get(EMBEDDING_METADATA_KEY)
        source_count = client.count(collection_name, exact=True).count
        edge = _open_edge(Path(target), collection_name, dimensions=size)
        try:
            recorded = edge.metadata.get(EMBEDDING_METADATA_KEY)
            if identity is not None and recorded is not None and recorded != identity:
                raise _mismatch(collection_name, recorded, identity)
            if identity is not None:
                edge.update_metadata({EMBEDDING_METADATA_KEY: identity})
            copied = 0
            for batch in _local_points(client, collection_name):
                edge.upsert_points(batch)
                copied += len(batch)
                if progress is not None:
                    progress(len(batch))
            edge.flush()
            target_count = edge.count()
        finally:
            edge.close()
    finally:
        client.close()
    if copied != source_count or target_count < source_count:
        raise MigrationIncompleteError(
            f"migrating {source} copied {copied} of {source_count} memories and the target "
            f"holds {target_count}; the source is untouched, rerun to complete"
        )
    return Migration(source_count, copied, target_count, Path(target))


def _local_points(
    client: QdrantClient, collection_name: str
) -> Any:
    """Batches of ``(id, vector, payload)`` from a local-mode collection, in id order."""
    offset = None
    while True:
        records, offset = client.scroll(collection_name, limit=_COPY_BATCH, offset=offset,
                                        with_payload=True, with_vectors=True)
        batch = []
        for record in records:
            vector: Any = record.vector
            if isinstance(vector, dict):  # a named dense vector: the only one there is
                (vector,) = vector.values()
            batch.append((str(record.id), list(vector), dict(record.payload or {})))
        if batch:
            yield batch
        if offset is None:
            return


def _check_embedding(
    call: Callable[..., Any], collection_name: str, identity: dict[str, Any]
) -> None:
    """Create the collection with ``identity`` recorded, or refuse one recorded differently."""
    if not call("collection_exists", collection_name):
        call(
            "create_collection",
            collection_name,
            vectors_config=models.VectorParams(
                size=identity["dimensions"], distance=models.Distance.COSINE
            ),
            metadata={EMBEDDING_METADATA_KEY: identity},
        )
        # As QdrantVectorStore does when it creates the collection itself. Embedded mode
        # warns that it ignores payload indexes; that is expected here, not news.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Payload indexes have no effect")
            call("create_payload_index", collection_name, field_name="doc_id",
                 field_schema=models.PayloadSchemaType.KEYWORD)
        return
    config = call("get_collection", collection_name).config
    recorded = (config.metadata or {}).get(EMBEDDING_METADATA_KEY)
    if recorded is None:
        # A collection from before identities were recorded: adopt it if the size fits.
        vectors = config.params.vectors
        if isinstance(vectors, models.VectorParams) and vectors.size != identity["dimensions"]:
            raise EmbeddingMismatchError(
                f"collection {collection_name!r} holds {vectors.size}-dimensional vectors but "
                f"{identity['model']!r} makes {identity['dimensions']}-dimensional ones"
            )
        call("update_collection", collection_name,
             metadata={EMBEDDING_METADATA_KEY: identity})
    elif recorded != identity:
        raise _mismatch(collection_name, recorded, identity)


def _mismatch(
    collection_name: str, recorded: dict[str, Any], identity: dict[str, Any]
) -> EmbeddingMismatchError:
    return EmbeddingMismatchError(
        f"collection {collection_name!r} was written with {recorded['model']!r} "
        f"({recorded['dimensions']} dims); refusing to use it with "
        f"{identity['model']!r} ({identity['dimensions']} dims): vectors of different "
        "models are not comparable. Use the same model, or another collection."
    )


def _collection_calls(
    client: Optional[QdrantClient], aclient: Optional[AsyncQdrantClient]
) -> Callable[..., Any]:
    """``call(method, *args)`` on the sync client, or on the async one run to completion."""
    if client is not None:
        return lambda method, *args, **kwargs: getattr(client, method)(*args, **kwargs)

    def call_async(method: str, *args: Any, **kwargs: Any) -> Any:
        # A worker thread has no running loop, so this works inside async code too.
        with ThreadPoolExecutor(max_workers=1) as worker:
            coroutine = getattr(aclient, method)(*args, **kwargs)
            return worker.submit(asyncio.run, coroutine).result()

    return call_async


def qdrant_clients(
    *,
    path: Optional[str | os.PathLike[str]] = None,
    url: Optional[str] = None,
    api_key: Optional[str] = None,
    use_async: bool = False,
) -> tuple[Optional[QdrantClient], Optional[AsyncQdrantClient]]:
    """Sync and/or async qdrant-client clients for a server ``url``, a local-mode ``path`` or memory.

    A local path already held by another client raises :class:`MemoryStoreLockedError`.
    """
    if url is not None:
        if path is not None:
            raise InvalidInputError("give either a Qdrant server url or a local path, not both")
        return QdrantClient(url=url, api_key=api_key), AsyncQdrantClient(url=url, api_key=api_key)
    location: dict[str, Any] = (
        {"path": os.fspath(path)} if path is not None else {"location": ":memory:"}
    )
    try:
        if use_async:
            return None, AsyncQdrantClient(**location)
        return QdrantClient(**location), None
    except RuntimeError as error:
        if "already accessed by another instance" not in str(error):
            raise
        raise _locked(Path(path or "")) from None


@contextmanager
def _reaching(url: Optional[str]) -> Iterator[None]:
    """Calls to the server at ``url``: one that does not answer raises
    :class:`MemoryStoreUnreachableError` naming it (qdrant-client wraps the network error)."""
    try:
        yield
    except ResponseHandlingException as error:
        if url is None or not isinstance(error.source, httpx.TransportError):
            raise
        reason = re.sub(r"^\[Errno -?\d+\] ", "", str(error.source)) or type(error.source).__name__
        raise MemoryStoreUnreachableError(
            f"cannot reach the Qdrant server at {url}: {reason[0].lower()}{reason[1:]}"
        ) from error


def _locked(path: Path) -> MemoryStoreLockedError:
    return MemoryStoreLockedError(
        f"the memory store at {path} is already open in another process (or by another "
        "client in this one); an embedded store allows one at a time. Close the other "
        "one, or run a Qdrant server and pass url= (--url) to share it."
    )

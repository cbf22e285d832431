"""The memory store: a ``VectorStoreIndex`` over Qdrant Edge on the device, or a Qdrant server.

Where memories live, by what :func:`open_memory_index` is given:

- ``path``: a Qdrant Edge shard under ``<path>/edge/<collection>`` (in-process, exact,
  write-ahead logged). A qdrant-client local-mode store (written by 0.1.0) still opens as
  it is, with a notice that ``llama-index-recency migrate`` moves it to Edge.
- ``url``: a Qdrant server through qdrant-client (sync and async).
- neither: an Edge shard in a temporary directory, deleted when the process exits.

Every collection records which embedding model (name and dimension) filled it, and
opening it with another model is an error: vectors from two models are not comparable,
and mixing them would silently corrupt retrieval.
"""

from __future__ import annotations

import inspect
import logging
import os
import shutil
import tempfile
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
)
from llama_index.vector_stores.qdrant import QdrantVectorStore
from llama_index.vector_stores.qdrant.base import DEFAULT_DENSE_VECTOR_NAME
from qdrant_client import AsyncQdrantClient, QdrantClient, models

from llama_index_recency.errors import (
    InvalidInputError,
    MemoryNotFoundError,
    MemoryStoreNotFoundError,
    MemoryStorePathError,
)
from llama_index_recency.models.embeddings import EmbeddingMismatchError
from llama_index_recency.records.dates import parse_memory_date
from llama_index_recency.records.nodes import is_memory_id
from llama_index_recency.storage.access import (
    DEFAULT_COLLECTION,
    MemoryStore,
    MemoryVectorStore,
    check_collection_name,
    check_store_path,
    collection_calls,
    edge_shard_path,
    is_local_mode_store,
    locked_error,
    open_edge,
    qdrant_clients,
    reaching,
    vector_store_of,
)
from llama_index_recency.storage.edge import QdrantEdgeVectorStore
from llama_index_recency.storage.filters import (
    has_condition,
    memory_scope,
    qdrant_selection,
    to_qdrant_filter,
)
from llama_index_recency.storage.metadata import (
    EMBEDDING_METADATA_KEY,
    embedding_mismatch,
)
from llama_index_recency.storage.sentences import fill_sentences
from llama_index_recency.twins import in_thread

logger = logging.getLogger(__name__)

_DIMENSION_PROBE = "dimension probe"
_SCROLL_BATCH = 256  # points one scroll call reads

__all__ = [
    "aget_memories",
    "check_memory_store",
    "close_memory_index",
    "count_memories",
    "delete_memories",
    "embedding_of",
    "get_memories",
    "get_memory",
    "open_memory_index",
    "open_memory_store",
    "select_nodes",
]


def check_open_options(options: Mapping[str, Any]) -> None:
    """Refuse, by name, an argument that :func:`open_memory_index` does not take.

    Raises:
        InvalidInputError: An unknown argument.
    """
    known = [name for name in inspect.signature(open_memory_index).parameters
             if name != "embed_model"]
    for name in options:
        if name not in known:
            raise InvalidInputError(
                f"unknown argument {name!r}: a store opens with {', '.join(known)}; ranking "
                "settings go in policy=RecencyPolicy(...)")


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

    Where it lives: an embedded store at ``path`` (Qdrant Edge; a qdrant-client local-mode
    store, written by 0.1.0, opens in that mode), a Qdrant server ``url``, ready
    ``client``/``aclient`` objects, or (none of these) a temporary Edge shard. Sync and
    async both work on every engine; ``use_async`` only matters for a local-mode store,
    which holds one client (sync unless ``use_async=True``). Each node's metadata, the
    memory's date included, is stored in the point's payload.

    The embedding's name (``embedding_name``, default ``embed_model.model_name``) and
    dimension (measured on one probe query) are recorded with the collection; a
    collection recorded with another raises :class:`EmbeddingMismatchError`.

    Raises:
        InvalidInputError: ``collection_name`` is not a plain name; ``path`` is empty;
            ``path`` and ``url`` both given; the collection's shard directory holds
            something else.
        MemoryStorePathError: ``path`` is a file, not a directory.
        MemoryStoreLockedError: The embedded store is open in another process (or handle).
        MemoryStoreDamagedError: The Edge shard cannot be loaded (a file missing or
            truncated).
        PermissionDeniedError: Edge is refused the shard's files.
        MemoryStoreUnreachableError: The server at ``url`` does not answer.
        EmbeddingMismatchError: The collection records another embedding model, or holds
            vectors of another size.
    """
    check_collection_name(collection_name)
    check_store_path(path)
    identity = {
        "model": embedding_name or embed_model.model_name,
        "dimensions": len(embed_model.get_query_embedding(_DIMENSION_PROBE)),
    }
    if client is None and aclient is None and url is None:
        if path is None or not is_local_mode_store(path):
            store = _edge_store(path, collection_name, identity)
            try:
                fill_sentences(store, embed_model)  # an older store's, once
            except BaseException:  # an interrupt: the lock is not kept by a half-open store
                store.close()
                raise
            return VectorStoreIndex.from_vector_store(store, embed_model=embed_model)
        logger.warning(
            "%s was written by llama-index-recency 0.1.0 (qdrant-client local mode); it works "
            "as is, and `llama-index-recency migrate %s NEW_PATH` moves it to Qdrant Edge "
            "(exact, faster, crash-safe)", path, path,
        )
    if client is None and aclient is None:
        client, aclient = qdrant_clients(path=path, url=url, api_key=api_key, use_async=use_async)
    with reaching(url):
        _check_embedding(collection_calls(client, aclient), collection_name, identity)
    vector_store = QdrantVectorStore(
        collection_name=collection_name, client=client, aclient=aclient
    )
    if client is not None:
        with reaching(url):
            fill_sentences(vector_store, embed_model)
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

    Raises:
        InvalidInputError: Neither ``path`` nor ``url`` given, ``path`` empty, or
            ``collection_name`` not a plain name.
        MemoryStoreNotFoundError: The server has no such collection, or ``path`` holds
            neither a local-mode store nor the collection's Edge shard (a local-mode store
            is not checked for the collection).
        MemoryStorePathError: ``path`` is a file, not a directory.
        MemoryStoreLockedError: The embedded store is open in another process (or handle).
        MemoryStoreDamagedError: The Edge shard cannot be loaded.
        MemoryStoreUnreachableError: The server at ``url`` does not answer.
    """
    check_collection_name(collection_name)
    check_store_path(path)
    if url is not None:
        client, aclient = qdrant_clients(url=url, api_key=api_key)
        assert client is not None
        with reaching(url):
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
    return open_edge(Path(path), collection_name)


def _edge_store(
    path: Optional[str | os.PathLike[str]], collection_name: str, identity: dict[str, Any]
) -> QdrantEdgeVectorStore:
    """The Edge shard for ``collection_name`` at ``path`` (a temporary one for None), checked."""
    temporary = path is None
    if path is None:
        path = tempfile.mkdtemp(prefix="llama-index-recency-")
    else:
        _check_not_a_file(Path(path))
    store = open_edge(Path(path), collection_name)
    if store.dimensions is None:  # a new shard: create it now, so opening holds the lock
        store = open_edge(Path(path), collection_name, dimensions=identity["dimensions"])
    if temporary:
        weakref.finalize(store, shutil.rmtree, path, ignore_errors=True)
    recorded = store.metadata.get(EMBEDDING_METADATA_KEY)
    if recorded is None and store.dimensions in (None, identity["dimensions"]):
        if not store.read_only:  # a copy's record would be lost: the next writable open does it
            store.update_metadata({EMBEDDING_METADATA_KEY: identity})
    elif recorded != identity:
        store.close()
        raise embedding_mismatch(collection_name, recorded or {"model": "an unrecorded model",
                                                      "dimensions": store.dimensions}, identity)
    return store


def _check_not_a_file(path: Path) -> None:
    """Refuse a store path that is a file, or lies under one (it could never be created).

    Raises:
        MemoryStorePathError: ``path`` or a folder above it is a file.
    """
    for place in (path, *path.parents):
        if place.is_file():
            where = "is a file" if place == path else f"lies under the file {place}"
            raise MemoryStorePathError(
                f"the memory store path {path} {where}, not a directory")
        if place.exists():
            return


def check_memory_store(
    path: str | os.PathLike[str],
    *,
    must_exist: bool,
    collection_name: str = DEFAULT_COLLECTION,
    writes: bool = False,
) -> None:
    """Fail fast, before any model loads: the store at ``path`` is locked, missing or a file,
    or (for a command that ``writes``) it can only be read.

    Raises:
        MemoryStoreLockedError: Another process holds the store.
        MemoryStoreNotFoundError: ``must_exist`` and no store is there.
        MemoryStorePathError: ``path`` is a file, not a directory.
        MemoryStoreReadOnlyError: ``writes`` and the Edge store is on a read-only
            filesystem.
        MemoryStoreFullError: ``writes`` and the Edge store's disk is too full to load it
            for writing.
        InvalidInputError: ``collection_name`` is not a plain name, or the collection's
            shard directory holds something else.
    """
    root = Path(path)
    _check_not_a_file(root)
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
    store = open_edge(root, collection_name)  # raises MemoryStoreLockedError when held
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
        raise locked_error(root) from None


def embedding_of(index: VectorStoreIndex) -> BaseEmbedding:
    """The embedding model ``index`` embeds with: the one place that reads it, as LlamaIndex
    keeps it private (``VectorStoreIndex._embed_model``; its own ``as_retriever`` reads it too)."""
    return index._embed_model


def count_memories(index: MemoryStore, user_id: Optional[str] = None) -> int:
    """How many memories the index's collection (or ``user_id``'s part of it) holds (0 when
    it does not exist yet)."""
    store = vector_store_of(index)
    scope = memory_scope(user_id=user_id)
    if isinstance(store, QdrantEdgeVectorStore):
        return store.count(scope)
    if not store.client.collection_exists(store.collection_name):
        return 0
    return store.client.count(store.collection_name, exact=True,
                              count_filter=None if scope is None else to_qdrant_filter(scope)
                              ).count


def get_memories(
    index: MemoryStore,
    ids: Optional[Sequence[str]] = None,
    filters: Optional[MetadataFilters] = None,
    *,
    user_id: Optional[str] = None,
) -> list[BaseNode]:
    """The memories with these ids AND matching ``filters`` AND of ``user_id`` (none given:
    all), newest first (undated last), embeddings included.

    Raises:
        InvalidInputError: On Qdrant Edge, an id that is not a UUID.
    """
    if user_id is not None:
        filters = memory_scope(user_id=user_id, filters=filters)
    return sorted(select_nodes(vector_store_of(index), ids, filters), key=_newest_first)


def get_memory(index: MemoryStore, node_id: str, *, user_id: Optional[str] = None) -> BaseNode:
    """The memory ``node_id`` (of ``user_id`` when given); :class:`MemoryNotFoundError` if none.

    Raises:
        MemoryNotFoundError: ``node_id`` is not a memory id (a UUID), or no memory (of
            ``user_id``) has it.
    """
    if not is_memory_id(node_id):
        raise MemoryNotFoundError(node_id, user_id)
    found = get_memories(index, [node_id], user_id=user_id)
    if not found:
        raise MemoryNotFoundError(node_id, user_id)
    return found[0]


aget_memories = in_thread(get_memories)


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
            limit=_SCROLL_BATCH, offset=offset, with_payload=True, with_vectors=True,
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
    (``filters`` without a condition select everything, so they do not count).

    Raises:
        InvalidInputError: Neither ``ids`` nor ``filters`` with a condition given; on Qdrant
            Edge, an id that is not a UUID.
        MemoryStoreReadOnlyError: An Edge store read from a temporary copy (its filesystem
            is read-only).
        MemoryStoreFullError: An Edge store's disk is too full for the delete.
    """
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


def close_memory_index(index: MemoryStore) -> None:
    """Release the store (an embedded store's lock) so another process can open it."""
    store = vector_store_of(index)
    if isinstance(store, QdrantEdgeVectorStore):
        store.close()
        return
    try:
        if store.client is not None:
            store.client.close()
    finally:
        if store._aclient is not None:  # an async-only local-mode store holds its lock here
            collection_calls(None, store._aclient)("close")


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
        # A collection from before identities were recorded, or another program's: adopt it
        # if the dense vector QdrantVectorStore searches (unnamed, else "text-dense") has the
        # model's size.
        vectors = config.params.vectors
        if isinstance(vectors, dict):
            if DEFAULT_DENSE_VECTOR_NAME not in vectors:
                raise EmbeddingMismatchError(
                    f"collection {collection_name!r} has no dense vector named "
                    f"{DEFAULT_DENSE_VECTOR_NAME!r} (it has {sorted(vectors)}), the one "
                    "LlamaIndex's Qdrant store searches")
            vectors = vectors[DEFAULT_DENSE_VECTOR_NAME]
        if isinstance(vectors, models.VectorParams) and vectors.size != identity["dimensions"]:
            raise EmbeddingMismatchError(
                f"collection {collection_name!r} holds {vectors.size}-dimensional vectors but "
                f"{identity['model']!r} makes {identity['dimensions']}-dimensional ones"
            )
        call("update_collection", collection_name,
             metadata={EMBEDDING_METADATA_KEY: identity})
    elif recorded != identity:
        raise embedding_mismatch(collection_name, recorded, identity)



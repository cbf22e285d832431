"""Qdrant-backed memory index: a ``VectorStoreIndex`` over a cosine ``QdrantVectorStore``.

The collection records which embedding model (name and dimension) filled it, and
opening it with another model is an error: vectors from two models are not comparable,
and mixing them would silently corrupt retrieval.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import AsyncQdrantClient, QdrantClient, models

from llama_index_recency.embeddings import EmbeddingMismatchError

DEFAULT_COLLECTION = "memories"

EMBEDDING_METADATA_KEY = "llama_index_recency.embedding"
"""Collection-metadata key holding ``{"model": name, "dimensions": n}``."""

_DIMENSION_PROBE = "dimension probe"


class MemoryStoreLockedError(RuntimeError):
    """The embedded store at a path is already open (Qdrant local mode allows one client)."""


class MemoryStoreNotFoundError(FileNotFoundError):
    """A command that only reads was pointed at a path that holds no memory store."""


def check_memory_store(path: str, *, must_exist: bool) -> None:
    """Fail fast, before any model loads: the store at ``path`` is locked, missing or not a directory.

    Raises :class:`MemoryStoreLockedError` when another process holds it,
    :class:`MemoryStoreNotFoundError` when ``must_exist`` and no store is there, and
    ``NotADirectoryError`` when ``path`` is a file.
    """
    raise NotImplementedError  # filled in with the Edge engine


def open_memory_index(
    embed_model: BaseEmbedding,
    *,
    path: Optional[str] = None,
    url: Optional[str] = None,
    api_key: Optional[str] = None,
    collection_name: str = DEFAULT_COLLECTION,
    client: Optional[QdrantClient] = None,
    aclient: Optional[AsyncQdrantClient] = None,
    use_async: bool = False,
    embedding_name: Optional[str] = None,
) -> VectorStoreIndex:
    """Open (creating if needed) the memory collection as a ``VectorStoreIndex``.

    Where it lives: a Qdrant server ``url``, an embedded store persisted at ``path``, or
    (neither) an embedded in-memory store; or pass ready ``client``/``aclient`` objects.
    Embedded mode holds one client per store, so it is sync unless ``use_async=True``;
    a server gets both. The collection uses cosine distance, and each node's metadata,
    the memory's date included, is stored in the point's payload.

    The embedding's name (``embedding_name``, default ``embed_model.model_name``) and
    dimension (measured on one probe query) are recorded with the collection; a
    collection recorded with another raises :class:`EmbeddingMismatchError`. A path
    already open elsewhere raises :class:`MemoryStoreLockedError`.
    """
    if client is None and aclient is None:
        client, aclient = qdrant_clients(path=path, url=url, api_key=api_key, use_async=use_async)
    identity = {
        "model": embedding_name or embed_model.model_name,
        "dimensions": len(embed_model.get_query_embedding(_DIMENSION_PROBE)),
    }
    _check_embedding(_collection_calls(client, aclient), collection_name, identity)
    vector_store = QdrantVectorStore(
        collection_name=collection_name, client=client, aclient=aclient
    )
    return VectorStoreIndex.from_vector_store(vector_store, embed_model=embed_model)


def count_memories(index: VectorStoreIndex) -> int:
    """How many memories the index's collection holds (0 when it does not exist yet)."""
    store = index.vector_store
    if not store.client.collection_exists(store.collection_name):
        return 0
    return store.client.count(store.collection_name, exact=True).count


def get_memories(index: VectorStoreIndex) -> list[BaseNode]:
    """Every memory node in the index's collection, in storage order."""
    return index.vector_store.get_nodes()


def close_memory_index(index: VectorStoreIndex) -> None:
    """Release the store (the embedded store's lock) so another process can open it."""
    index.vector_store.client.close()


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
        raise EmbeddingMismatchError(
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
    path: Optional[str] = None,
    url: Optional[str] = None,
    api_key: Optional[str] = None,
    use_async: bool = False,
) -> tuple[Optional[QdrantClient], Optional[AsyncQdrantClient]]:
    """Sync and/or async clients for a server ``url``, a local ``path`` or in-memory storage.

    A local path already held by another client raises :class:`MemoryStoreLockedError`.
    """
    if url is not None:
        if path is not None:
            raise ValueError("give either a Qdrant server url or a local path, not both")
        return QdrantClient(url=url, api_key=api_key), AsyncQdrantClient(url=url, api_key=api_key)
    location = {"path": path} if path is not None else {"location": ":memory:"}
    try:
        if use_async:
            return None, AsyncQdrantClient(**location)
        return QdrantClient(**location), None
    except RuntimeError as error:
        if "already accessed by another instance" not in str(error):
            raise
        raise MemoryStoreLockedError(
            f"the memory store at {path} is already open in another process (or by another "
            "client in this one); Qdrant local mode allows one at a time. Close the other "
            "one, or run a Qdrant server and pass url= to share it."
        ) from None

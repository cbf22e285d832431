"""Qdrant-backed memory index: a ``VectorStoreIndex`` over a cosine ``QdrantVectorStore``."""

from __future__ import annotations

from typing import Optional

from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import AsyncQdrantClient, QdrantClient

DEFAULT_COLLECTION = "memories"


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
) -> VectorStoreIndex:
    """Open (creating on first write) the memory collection as a ``VectorStoreIndex``.

    Where it lives: a Qdrant server ``url``, an embedded store persisted at ``path``, or
    (neither) an embedded in-memory store; or pass ready ``client``/``aclient`` objects.
    Embedded mode holds one client per store, so it is sync unless ``use_async=True``;
    a server gets both. The collection uses cosine distance, and each node's metadata,
    the memory's date included, is stored in the point's payload.
    """
    if client is None and aclient is None:
        client, aclient = _connect(path=path, url=url, api_key=api_key, use_async=use_async)
    vector_store = QdrantVectorStore(
        collection_name=collection_name, client=client, aclient=aclient
    )
    return VectorStoreIndex.from_vector_store(vector_store, embed_model=embed_model)


def _connect(
    *, path: Optional[str], url: Optional[str], api_key: Optional[str], use_async: bool
) -> tuple[Optional[QdrantClient], Optional[AsyncQdrantClient]]:
    if url is not None:
        if path is not None:
            raise ValueError("give either a Qdrant server url or a local path, not both")
        return QdrantClient(url=url, api_key=api_key), AsyncQdrantClient(url=url, api_key=api_key)
    location = {"path": path} if path is not None else {"location": ":memory:"}
    if use_async:
        return None, AsyncQdrantClient(**location)
    return QdrantClient(**location), None

"""Moving a qdrant-client local-mode store (written by 0.1.0) into Qdrant Edge, without
re-embedding."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from qdrant_client import QdrantClient, models

from llama_index_recency.errors import (
    InvalidInputError,
    MemoryStoreNotFoundError,
    MigrationIncompleteError,
)
from llama_index_recency.storage.access import (
    DEFAULT_COLLECTION,
    LOCAL_MODE_MARKER,
    check_collection_name,
    check_store_path,
    is_local_mode_store,
    open_edge,
    qdrant_clients,
)
from llama_index_recency.storage.metadata import EMBEDDING_METADATA_KEY, embedding_mismatch

_COPY_BATCH = 256

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
    """Copy a qdrant-client local-mode store (written by 0.1.0) into a Qdrant Edge store at
    ``target``.

    Every memory keeps its id, vector and payload, and the collection its embedding
    identity; no embedding model is needed. ``source`` is only read. The identity is
    recorded before any point is copied, so an interrupted copy is never adopted by
    another model; rerunning finishes it (same ids overwrite themselves). The counts are
    verified; a shortfall is an error. ``progress`` is called with the number of
    memories copied per batch.

    Raises:
        MemoryStoreNotFoundError: ``source`` is not a local-mode store, or has no collection
            ``collection_name``.
        InvalidInputError: ``collection_name`` is not a plain name, ``target`` is empty or
            itself a local-mode store, or the shard directory under ``target`` holds
            something else.
        MemoryStoreLockedError: ``source`` or ``target`` is open in another process.
        EmbeddingMismatchError: ``target`` records another embedding model than ``source``.
        MigrationIncompleteError: Fewer memories were copied than ``source`` holds (it is
            untouched; rerunning completes the copy).
    """
    check_collection_name(collection_name)
    check_store_path(target)
    if not is_local_mode_store(source):
        raise MemoryStoreNotFoundError(
            f"{source} is not a llama-index-recency 0.1.0 store (no {LOCAL_MODE_MARKER}); "
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
        edge = open_edge(Path(target), collection_name, dimensions=size)
        try:
            recorded = edge.metadata.get(EMBEDDING_METADATA_KEY)
            if identity is not None and recorded is not None and recorded != identity:
                raise embedding_mismatch(collection_name, recorded, identity)
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

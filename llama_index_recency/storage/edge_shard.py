"""Loading or creating a Qdrant Edge shard on disk: in place, or from a temporary copy when its
own disk cannot load it for writing; its payload indexes; the warnings its files call for."""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from typing import Any, Optional

import qdrant_edge as edge

from llama_index_recency.errors import InvalidInputError
from llama_index_recency.ranking.lexical import TERMS_KEY
from llama_index_recency.records.nodes import SUPERSEDES_KEY, USER_ID_KEY
from llama_index_recency.storage.edge_files import (
    COPY_PREFIX,
    EDGE_CONFIG_FILE,
    INDEX_BYTES,
    check_space,
    copy_sparse,
    file_sizes,
    free_bytes,
    hold_shared,
    in_place_refusal,
    load_needs,
    megabytes,
    opened_shard,
    read_only,
    remedy,
    remove_copy,
)
from llama_index_recency.storage.edge_points import DOCUMENT_ID_KEY

logger = logging.getLogger(__name__)
_WARNED: set[tuple[Any, ...]] = set()

SHARD_STATE_KEY = "llama_index_recency.shard"
"""Collection-metadata key: ``{"closed": bool, "points": n}``, closed false from a handle's
first write until its ``close``, which records the point count; a shard not closed since may
have write-ahead log left to replay, and one holding fewer points lost segment files."""


@dataclass
class LoadedShard:
    """A shard as loaded or created: the ``EdgeShard``, its vector size, and for a temporary
    copy, the copy's directory, why the shard itself could not be loaded, and the finalizer
    that deletes the copy and releases the shard's lock."""

    shard: edge.EdgeShard
    dimensions: int
    copy: Optional[str] = None
    refusal: Optional[OSError] = None
    release: Optional[weakref.finalize] = None


def load_shard(path: str, metadata: dict[str, Any], date_key: Optional[str],
               owner: object) -> LoadedShard:
    """Load the shard at ``path`` in place, or from a temporary copy held until ``owner`` is
    released (or the copy's ``release`` called) when its own disk cannot load it for writing.

    Raises:
        InvalidInputError: The shard has no unnamed vector.
        MemoryStoreLockedError: Another process or handle holds the shard.
        MemoryStoreDamagedError: Edge cannot load the shard.
        MemoryStoreReadOnlyError: The filesystem is read-only and no copy can be made.
        MemoryStoreFullError: The disk is too full to load the shard and no copy can be made.
    """
    refusal = in_place_refusal(path, replay=replays(metadata))
    if refusal is None:
        loaded = LoadedShard(opened_shard(path, edge.EdgeShard.load, path), 0)
    else:
        loaded = _load_copy(path, refusal, metadata, owner)
    try:
        loaded.dimensions = _stored_vector_size(path)
        _check_points(path, loaded.shard, metadata)
        ensure_indexes(loaded.shard, path, loaded.copy or path, date_key, new=False)
    except BaseException:
        loaded.shard.close()
        if loaded.release is not None:
            loaded.release()
        raise
    return loaded


def create_shard(path: str, size: int, date_key: Optional[str]) -> LoadedShard:
    """Create a shard at ``path`` with one unnamed cosine vector of ``size``, as
    ``QdrantVectorStore`` creates a collection, and its payload indexes.

    Raises:
        MemoryStoreLockedError: Another process or handle holds the shard.
        MemoryStoreReadOnlyError: The filesystem is read-only.
        MemoryStoreFullError: The disk is full.
    """
    vectors = edge.EdgeVectorParams(size, edge.Distance.Cosine)
    shard = opened_shard(path, edge.EdgeShard.create, path, edge.EdgeConfig(vectors))
    ensure_indexes(shard, path, path, date_key, new=True)
    return LoadedShard(shard, size)


def replays(metadata: dict[str, Any]) -> bool:
    """Whether loading may replay the write-ahead log (the shard was not closed since its
    last write)."""
    return not (metadata.get(SHARD_STATE_KEY) or {}).get("closed")


def ensure_indexes(shard: edge.EdgeShard, path: str, loaded_from: str, date_key: Optional[str],
                   *, new: bool) -> None:
    """A datetime index on the date key and keyword indexes on doc_id, user_id, supersedes
    and the memories' terms (the successor and term searches run on every retrieval: they
    must not scan).

    A store without one of them on a disk too full to add it opens
    without it (searches are the same, only slower; logged once): what a user needs on
    a full disk is to list, export and forget.

    Raises:
        MemoryStoreFullError: A new shard's disk is too full for its indexes.
    """
    wanted = {DOCUMENT_ID_KEY: edge.PayloadSchemaType.Keyword,
              USER_ID_KEY: edge.PayloadSchemaType.Keyword,
              SUPERSEDES_KEY: edge.PayloadSchemaType.Keyword,
              TERMS_KEY: edge.PayloadSchemaType.Keyword}
    if date_key is not None:
        wanted[date_key] = edge.PayloadSchemaType.Datetime
    existing = shard.info().payload_schema
    missing = {key: schema for key, schema in wanted.items() if key not in existing}
    if missing and not new and free_bytes(loaded_from) < INDEX_BYTES * len(missing):
        if (path, "indexes") not in _WARNED:
            _WARNED.add((path, "indexes"))
            logger.warning("the disk holding the store at %s is too full to add the payload "
                           "indexes %s; it works without them, slower", path,
                           ", ".join(sorted(missing)))
        return
    if missing:
        check_space(path, loaded_from, INDEX_BYTES * len(missing), "to create its payload indexes")
    for key, schema in missing.items():
        shard.update(edge.UpdateOperation.create_field_index(key, schema))


def warn_if_it_cannot_reopen(path: str) -> None:
    """Warn once when the disk holding the shard could not load it for writing as it now
    is, closed cleanly (writing leaves the holes loading fills in)."""
    needed, free = load_needs(path, path, replay=False), free_bytes(path)
    if free < needed and (path, "reopen") not in _WARNED:
        _WARNED.add((path, "reopen"))
        logger.warning(
            "the disk holding the store at %s has %s free, about %s needed to reopen it for "
            "writing (Edge fills in its mapped files on loading): later commands read it "
            "from a temporary copy and cannot change it; free some space (or move the store "
            "to a larger disk)", path, megabytes(free), megabytes(needed))


def _load_copy(path: str, refusal: OSError, metadata: dict[str, Any],
               owner: object) -> LoadedShard:
    """Load a copy of the shard made in the temporary directory, holding the shard's lock
    (shared) until the copy is released; ``refusal``, naming the temporary directory too,
    when the copy cannot be made there."""
    lock = hold_shared(path)
    parent = tempfile.gettempdir()
    try:
        needed = (sum(blocks for _, blocks in file_sizes(path))
                  + load_needs(path, parent, replay=replays(metadata)))
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
    release = weakref.finalize(owner, remove_copy, copy, lock)
    try:
        shutil.copytree(path, copy, copy_function=copy_sparse, dirs_exist_ok=True)
        shard = opened_shard(path, edge.EdgeShard.load, copy)
    except BaseException:
        release()
        raise
    return LoadedShard(shard, 0, copy=copy, refusal=refusal, release=release)


def _check_points(path: str, shard: edge.EdgeShard, metadata: dict[str, Any]) -> None:
    """Warn in one line when the shard holds fewer points than its last close recorded
    (segment files deleted or lost: Edge loads what is left without a word)."""
    state = metadata.get(SHARD_STATE_KEY) or {}
    recorded = state.get("points") if state.get("closed") else None
    if not isinstance(recorded, int):
        return
    held = shard.count(edge.CountRequest(exact=True))
    if held < recorded and (path, held, recorded) not in _WARNED:
        _WARNED.add((path, held, recorded))  # once, though a command opens twice
        logger.warning(
            "the store at %s holds %d of the %d memories it held when last closed: segment "
            "files are missing; restore it from an export or backup", path, held, recorded)


def _stored_vector_size(path: str) -> int:
    with open(os.path.join(path, EDGE_CONFIG_FILE), encoding="utf-8") as file:
        vectors = json.load(file).get("vectors", {})
    if "" not in vectors:
        raise InvalidInputError(f"the shard at {path} has no unnamed vector")
    return int(vectors[""]["size"])

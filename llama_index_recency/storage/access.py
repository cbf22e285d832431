"""Reaching a memory store: where it lives (a path's Edge shards or a qdrant-client
local-mode directory, written by 0.1.0; a server), the Edge shard or qdrant-client clients
for it, and an index's vector store."""

from __future__ import annotations

import asyncio
import errno
import os
import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional, Union

import httpx
from llama_index.core import VectorStoreIndex
from llama_index.core.vector_stores.types import BasePydanticVectorStore
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import AsyncQdrantClient, QdrantClient
from qdrant_client.http.exceptions import ResponseHandlingException

from llama_index_recency.errors import (
    InvalidInputError,
    MemoryStoreLockedError,
    MemoryStoreUnreachableError,
    PermissionDeniedError,
    UnsupportedStoreError,
)
from llama_index_recency.records.nodes import control_character
from llama_index_recency.storage.edge import QdrantEdgeVectorStore

WRITES = threading.RLock()
"""One write of memories at a time in this process: a re-added memory is read, merged and
written back; forget rewrites the links of the memories around the deleted ones and records
when a user was forgotten, which a write of what was said checks; a fill of sentence vectors
checks the texts it embedded, then writes."""

DEFAULT_COLLECTION = "memories"


EDGE_DIRECTORY = "edge"
"""Subdirectory of a store path holding one Edge shard per collection."""


LOCAL_MODE_MARKER = "meta.json"  # what qdrant-client's local mode keeps at a store's root


MemoryStore = Union[VectorStoreIndex, BasePydanticVectorStore]
"""A memory index (open_memory_index) or its vector store (open_memory_store)."""


MemoryVectorStore = Union[QdrantEdgeVectorStore, QdrantVectorStore]
"""The vector stores memories live in: Qdrant Edge, or Qdrant through qdrant-client."""


def vector_store_of(memories: MemoryStore) -> MemoryVectorStore:
    """The vector store of an index, or the store itself; one of another kind is refused.

    Raises:
        UnsupportedStoreError: The store is neither a ``QdrantEdgeVectorStore`` nor a
            ``QdrantVectorStore``.
    """
    store = memories.vector_store if isinstance(memories, VectorStoreIndex) else memories
    if not isinstance(store, (QdrantEdgeVectorStore, QdrantVectorStore)):
        raise UnsupportedStoreError(
            f"memories live in Qdrant Edge or Qdrant (QdrantEdgeVectorStore, QdrantVectorStore; "
            f"see open_memory_index), not in a {type(store).__name__}"
        )
    return store


def is_local_mode_store(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a qdrant-client local-mode store (written by 0.1.0)."""
    return (Path(path) / LOCAL_MODE_MARKER).is_file()


def edge_shard_path(path: str | os.PathLike[str], collection_name: str = DEFAULT_COLLECTION) -> Path:
    """Where the Edge shard of ``collection_name`` lives in the store at ``path``.

    Raises:
        InvalidInputError: ``collection_name`` is not a plain name
            (:func:`check_collection_name`).
    """
    return Path(path) / EDGE_DIRECTORY / check_collection_name(collection_name)


def check_store_path(path: Optional[str | os.PathLike[str]]) -> None:
    """Refuse an empty ``path`` (an unset variable, say), which would put the store in the
    working directory.

    Raises:
        InvalidInputError: ``path`` is empty or only blanks.
    """
    if path is not None and not os.fspath(path).strip():
        raise InvalidInputError(f"the store path {os.fspath(path)!r} is empty: name the store's "
                                "directory, or give no path for a temporary store")


def check_collection_name(name: str) -> str:
    """``name`` if it is a plain collection name: not empty nor only blanks, not ``.`` or
    ``..``, without a path separator or a control character (it names a directory under the
    store, and a server collection). Otherwise ``InvalidInputError`` naming it.

    Raises:
        InvalidInputError: ``name`` is empty or only blanks, ``.`` or ``..``, or holds a path
            separator or a control character (NUL, a tab, an escape, a line break).
    """
    if (not name.strip() or name in (".", "..") or "/" in name or "\\" in name
            or control_character(name) is not None):
        raise InvalidInputError(
            f"collection name {name!r} is not a plain name: give a name of printable text, "
            "not only blanks, without '/' or '\\', and not '.' or '..'")
    return name


def open_edge(
    root: Path, collection_name: str, dimensions: Optional[int] = None
) -> QdrantEdgeVectorStore:
    """The collection's Edge shard in the store at ``root``; a held one names the store.

    Raises:
        MemoryStoreLockedError: The shard is open in another process or handle.
        PermissionDeniedError: Edge is refused the shard's files (a refusal met outside
            Edge passes as a plain ``PermissionError``).
        InvalidInputError: ``collection_name`` is not a plain name, the shard holds vectors
            of other than ``dimensions``, or its directory holds something else.
        MemoryStoreDamagedError: The shard cannot be loaded (a file missing or truncated).
        MemoryStoreReadOnlyError: The store is on a read-only filesystem and no read-only
            copy can be made.
        MemoryStoreFullError: The disk is too full to open or create the shard.
    """
    try:
        return QdrantEdgeVectorStore(edge_shard_path(root, collection_name), dimensions=dimensions)
    except MemoryStoreLockedError:
        raise locked_error(root) from None
    except PermissionError:
        raise
    except Exception as error:  # Edge reports OS errors as a plain Exception with the text
        if "Permission denied" in str(error):
            raise PermissionDeniedError(errno.EACCES, "Permission denied", str(root)) from None
        raise


def locked_error(path: Path) -> MemoryStoreLockedError:
    return MemoryStoreLockedError(
        f"the memory store at {path} is already open in another process (or by another "
        "client in this one); an embedded store allows one at a time. Close the other "
        "one, or run a Qdrant server and pass url= (--url) to share it."
    )


def qdrant_clients(
    *,
    path: Optional[str | os.PathLike[str]] = None,
    url: Optional[str] = None,
    api_key: Optional[str] = None,
    use_async: bool = False,
) -> tuple[Optional[QdrantClient], Optional[AsyncQdrantClient]]:
    """Sync and/or async qdrant-client clients for a server ``url``, a local-mode ``path``
    or memory.

    A local path already held by another client raises :class:`MemoryStoreLockedError`.

    Returns:
        ``(client, aclient)``: both for a server; for a path or memory only the sync one,
        or with ``use_async`` only the async one (the other is None).

    Raises:
        InvalidInputError: Both ``url`` and ``path`` given, or a ``url`` that cannot be
            parsed (a bad host or port, an unknown scheme).
        MemoryStoreLockedError: ``path`` is already open in another client or process.
    """
    if url is not None:
        if path is not None:
            raise InvalidInputError("give either a Qdrant server url or a local path, not both")
        try:
            return (QdrantClient(url=url, api_key=api_key),
                    AsyncQdrantClient(url=url, api_key=api_key))
        except ValueError as error:  # urllib3's LocationParseError, an unknown scheme
            raise InvalidInputError(
                f"the Qdrant server url {url!r} is not a valid URL: {error}; give one such as "
                "http://localhost:6333") from None
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
        raise locked_error(Path(path or "")) from None


@contextmanager
def reaching(url: Optional[str]) -> Iterator[None]:
    """Calls to the server at ``url``: one that does not answer raises
    :class:`MemoryStoreUnreachableError` naming it (qdrant-client wraps the network error).

    Raises:
        MemoryStoreUnreachableError: A call in the block failed to reach ``url`` (no
            answer, no route, a timeout); other errors pass unchanged.
    """
    try:
        yield
    except ResponseHandlingException as error:
        if url is None or not isinstance(error.source, httpx.TransportError):
            raise
        reason = re.sub(r"^\[Errno -?\d+\] ", "", str(error.source)) or type(error.source).__name__
        raise MemoryStoreUnreachableError(
            f"cannot reach the Qdrant server at {url}: {reason[0].lower()}{reason[1:]}"
        ) from error


def collection_calls(
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

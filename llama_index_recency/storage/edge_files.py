"""The file-system side of a Qdrant Edge shard: its metadata file, free space and read-only
disks, the shared lock, and the sparse temporary copy a shard is read from when its own disk
cannot load it."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Optional

import qdrant_edge as edge

from llama_index_recency.errors import (
    InvalidInputError,
    MemoryStoreClosedError,
    MemoryStoreDamagedError,
    MemoryStoreFullError,
    MemoryStoreLockedError,
    MemoryStorePathError,
    MemoryStoreReadOnlyError,
    RecencyError,
)

METADATA_FILE = "collection_metadata.json"
"""Collection metadata, JSON, kept inside the shard directory (Edge ignores foreign files)."""

EDGE_CONFIG_FILE = "edge_config.json"
"""The file Edge keeps at a shard's root: its vector parameters."""

SHARD_DIRECTORIES = ("segments", "wal")
"""The directories Edge keeps beside its ``edge_config.json`` in a shard."""

# Edge writes through mmap'd files: a page the disk cannot back kills the process with
# SIGBUS, not an error. So free space is checked before Edge touches the disk. Measured
# (384 to 1024 dims, 300 to 3000 payload bytes): the WAL, segments and indexes take 1.5 to
# 2.2 times a point's vector and payload bytes; loading a shard not closed replays its
# WAL, about 2.5 times the WAL's allocated bytes. On tmpfs, loading also fills in the holes
# of the vector and payload-index files (300 memories of 384 dims: 50 MB, on a shard of
# 11 MB), not those of the payload storage (kept cold) nor of the WAL.
SPACE_FACTOR = 3
SPACE_HEADROOM = 8 << 20  # index pages touched in MB steps, the flush at close
INDEX_BYTES = 4 << 20  # creating a payload index: measured 2.1 MB each on tmpfs
_COLD_STORAGE = "payload_storage"  # a segment's directory Edge maps without filling it in
COPY_PREFIX = "llama-index-recency-copy-"


def write_needs(points: Sequence[tuple[str, list[float], dict[str, Any]]]) -> int:
    """Free bytes writing ``points`` may take: vectors and payloads times the measured factor."""
    raw = sum(4 * len(vector) + len(json.dumps(payload, default=str)) + 64
              for _, vector, payload in points)
    return SPACE_FACTOR * raw + SPACE_HEADROOM


def free_bytes(path: str) -> int:
    """Free bytes (for this user) on the filesystem that holds, or will hold, ``path``."""
    return shutil.disk_usage(_existing(path)).free


def read_only(path: str) -> bool:
    """Whether the filesystem holding ``path`` is mounted read-only."""
    try:
        return bool(os.statvfs(_existing(path)).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def edge_reason(text: str, path: str) -> str:
    """Edge's load failure without its wrappers, paths shown relative to the shard."""
    reason = re.sub(r"(Service runtime error|IO Error|Can't init WAL): ", "", text)
    return reason.replace(os.path.join(path, ""), "").replace(path, "the shard").strip()


def file_sizes(directory: str, skip: Optional[str] = None) -> Iterator[tuple[int, int]]:
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


def remedy(refusal: OSError) -> str:
    """What a user can do about a store refused for ``refusal``."""
    if isinstance(refusal, MemoryStoreReadOnlyError):
        return "remount it read-write or copy the store to a writable disk"
    return "free some space (or move the store to a larger disk)"


def hold_shared(path: str) -> int:
    """A shared lock on the shard's ``wal`` directory, which Edge locks exclusively while it
    has the shard loaded: the descriptor holding it; :class:`MemoryStoreLockedError` when
    another handle has the shard.

    Raises:
        MemoryStoreLockedError: Another process or handle has the shard loaded.
        OSError: The ``wal`` directory cannot be opened (missing, or not readable).
    """
    descriptor = os.open(os.path.join(path, "wal"), os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise MemoryStoreLockedError(
            f"the store at {path} is already open in another process or handle") from None
    return descriptor


def remove_copy(copy: str, lock: int) -> None:
    """Delete a shard's temporary copy and release the shard's lock."""
    shutil.rmtree(copy, ignore_errors=True)
    os.close(lock)


def copy_sparse(source: str, target: str) -> None:
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


def allocates_on_read(path: str) -> bool:
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


def megabytes(size: int) -> str:
    return f"{size / (1 << 20):.1f} MB"


RECORD_PREFIX = "llama_index_recency."
"""The prefix of the package's records in the collection metadata, each a JSON object."""


def read_metadata(directory: str) -> dict[str, Any]:
    """The collection metadata kept in the shard directory ``directory``; empty when none.

    Raises:
        MemoryStoreDamagedError: The metadata file is not valid JSON, not a JSON object, or
            holds one of the package's records as anything but an object (or null).
        OSError: The file cannot be read (``NotADirectoryError`` when ``directory`` is a
            file).
    """
    path = os.path.join(directory, METADATA_FILE)
    try:
        with open(path, encoding="utf-8") as file:
            record = json.load(file)
    except FileNotFoundError:
        return {}
    except json.JSONDecodeError as error:
        raise _damaged_metadata(directory, f"is not valid JSON: {error}") from None
    if not isinstance(record, dict):
        raise _damaged_metadata(directory, "is not a JSON object")
    for key, value in record.items():
        if key.startswith(RECORD_PREFIX) and not isinstance(value, (dict, type(None))):
            raise _damaged_metadata(directory, f"holds {key!r} as {json.dumps(value)[:40]}, "
                                    "not an object")
    return record


def _damaged_metadata(directory: str, problem: str) -> MemoryStoreDamagedError:
    """A metadata file that cannot be used, and what can be done: the points do not depend
    on it (it records the embedding model, the saved policy and the last close)."""
    return MemoryStoreDamagedError(
        f"the store at {directory} is damaged: its collection metadata "
        f"{os.path.join(directory, METADATA_FILE)} {problem}; restore that file from a "
        "backup, or move it away: the memories stay, the saved policy is lost and the next "
        "command that opens the store with a model records that model")


def refuse_foreign_directory(path: str) -> None:
    """Refuse to create a shard in a directory that holds something else (say, a
    qdrant-client local-mode store): the two would be mixed up.

    Raises:
        MemoryStorePathError: ``path`` is a file.
        MemoryStoreDamagedError: ``path`` holds a shard's own directories (``segments``,
            ``wal``) without its ``edge_config.json``: a shard that lost that file.
        InvalidInputError: ``path`` is a directory holding anything else but a metadata
            file.
    """
    if os.path.isfile(path):
        raise MemoryStorePathError(f"{path} is a file, not a Qdrant Edge shard directory")
    if not os.path.isdir(path):
        return
    foreign = sorted(name for name in os.listdir(path) if not name.startswith(METADATA_FILE))
    if set(foreign) & set(SHARD_DIRECTORIES):
        raise MemoryStoreDamagedError(
            f"the store at {path} is damaged: {EDGE_CONFIG_FILE} is missing (it holds "
            f"{', '.join(foreign[:3])}); restore it from an export or backup")
    if foreign:
        raise InvalidInputError(
            f"{path} is not a Qdrant Edge shard but holds {', '.join(foreign[:3])}; "
            "point the store at an empty or new directory"
        )


def load_needs(path: str, target: str, *, replay: bool) -> int:
    """Free bytes loading the shard at ``path`` on the filesystem of ``target`` may take:
    little, plus with ``replay`` enough to replay the whole write-ahead log; on tmpfs also the
    holes Edge's mmap fills in on loading (those of the segments' files outside the payload
    storage, which stays cold)."""
    needs = SPACE_HEADROOM // 8
    if replay:
        allocated = sum(blocks for _, blocks in file_sizes(os.path.join(path, "wal")))
        needs += SPACE_FACTOR * allocated + SPACE_HEADROOM
    if allocates_on_read(target):
        segments = os.path.join(path, "segments")
        needs += sum(max(0, size - blocks)
                     for size, blocks in file_sizes(segments, skip=_COLD_STORAGE))
    return needs


def in_place_refusal(path: str, *, replay: bool) -> Optional[OSError]:
    """Why the shard at ``path`` cannot be loaded where it is (Edge loads for writing, even
    to read): a read-only filesystem, or too little free space; None when it can."""
    if read_only(path):
        return MemoryStoreReadOnlyError(f"the store at {path} is on a read-only filesystem")
    needed, free = load_needs(path, path, replay=replay), free_bytes(path)
    if free < needed:
        return MemoryStoreFullError(
            f"the disk holding the store at {path} has {megabytes(free)} free, about "
            f"{megabytes(needed)} needed to open it for writing (Edge fills in its mapped "
            "files and replays its write-ahead log)")
    return None


def read_only_error(path: str) -> MemoryStoreReadOnlyError:
    """The refusal of the store at ``path`` on a read-only filesystem, with its remedy."""
    refusal = MemoryStoreReadOnlyError(f"the store at {path} is on a read-only filesystem")
    return MemoryStoreReadOnlyError(f"{refusal}; {remedy(refusal)}")


def check_space(path: str, loaded_from: str, needed: int, what: str) -> None:
    """:class:`MemoryStoreFullError` unless the disk holding ``loaded_from`` (the shard at
    ``path`` or its temporary copy) has ``needed`` bytes free (Edge would die of SIGBUS
    writing an mmap'd page the disk cannot back).

    Args:
        what: What the space is for, ending the message (``"to delete"``).

    Raises:
        MemoryStoreFullError: Fewer than ``needed`` bytes free.
    """
    free = free_bytes(loaded_from)
    if free < needed:
        raise MemoryStoreFullError(
            f"the disk holding the store at {path} is full: {megabytes(free)} free, "
            f"about {megabytes(needed)} needed {what}; free some space (or move the "
            "store to a larger disk)"
        )


_REVISIONS: dict[str, int] = {}


def metadata_revision(path: str) -> int:
    """How many times this process wrote the metadata of the shard directory ``path``: a
    reader following a store's gate compares it instead of reading the record again."""
    return _REVISIONS.get(path, 0)


def write_metadata(path: str, record: dict[str, Any]) -> None:
    """Write ``record`` (JSON) as the collection metadata of the shard directory ``path``,
    atomically.

    Raises:
        InvalidInputError: ``record`` is not JSON (a value JSON cannot hold, NaN and
            infinity included).
        OSError: The file cannot be written (a full disk included).
    """
    try:
        text = json.dumps(record, indent=2, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise InvalidInputError(f"collection metadata must be JSON: {error}") from None
    os.makedirs(path, exist_ok=True)
    metadata_path = os.path.join(path, METADATA_FILE)
    temporary = f"{metadata_path}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, metadata_path)
    _REVISIONS[path] = _REVISIONS.get(path, 0) + 1
    directory = os.open(path, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def opened_shard(path: str, open_shard: Any, *args: Any) -> Any:
    """``open_shard(*args)`` (Edge's ``EdgeShard.load`` or ``create``) for the store at ``path``,
    with Edge's failures (a plain Exception with the text) as one-line errors
    (:func:`edge_error`; any failure to load, but a refused permission, is damage).

    Raises:
        MemoryStoreLockedError: the shard is open in another process or handle.
        MemoryStoreReadOnlyError: the shard's directory is on a read-only filesystem.
        MemoryStoreFullError: the disk is full.
        MemoryStoreDamagedError: loading failed on a missing, truncated or foreign file
            (Edge's panic on one included).
        Exception: Edge's own error, as is, for anything else (``Permission denied``, or
            any failure to create a shard).
    """
    if read_only(args[0]):
        raise read_only_error(path) from None
    try:
        return open_shard(*args)
    except BaseException as error:
        if not isinstance(error, Exception) and not is_edge_panic(error):
            raise  # an interrupt stays one
        loading = open_shard is edge.EdgeShard.load
        known = edge_error(path, args[0], error, damaged=loading and (
            is_edge_panic(error) or "Permission denied" not in str(error)))
        if known is None:
            raise
        raise known from None


def close_shard(shard: Any, wait: float = 5.0) -> None:
    """Close ``shard`` once no other thread's call holds it (Edge refuses a close during one
    with "Already borrowed"): the caller has already stopped handing it to new calls.

    Raises:
        RuntimeError: A call still held it after ``wait`` seconds.
    """
    deadline = time.monotonic() + wait
    while True:
        try:
            return shard.close()
        except RuntimeError as error:
            if "Already borrowed" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.001)


def is_edge_panic(error: BaseException) -> bool:
    """Whether ``error`` is a panic inside Edge (pyo3's ``PanicException``, a BaseException
    no ``except Exception`` catches): a file it cannot read, such as a truncated vector
    status file."""
    return type(error).__name__ == "PanicException"


def edge_error(path: str, loaded_from: str, error: BaseException, *, damaged: bool
               ) -> Optional[Exception]:
    """The one-line error for a failure Edge reports as a plain Exception with its text, on
    the shard at ``path`` loaded from ``loaded_from`` (itself or a temporary copy): another
    handle holds it, its disk is read-only or full, or (when the caller knows the failure
    means a bad file: ``damaged``) it is damaged; None for any other failure."""
    text = str(error)
    if "WouldBlock" in text:
        return MemoryStoreLockedError(
            f"the store at {path} is already open in another process or handle")
    if "os error 30" in text or "Read-only file system" in text:
        return read_only_error(path)
    if "os error 28" in text or "No space left" in text:
        return MemoryStoreFullError(f"the disk holding the store at {path} is full; free "
                                    "some space")
    if damaged:
        return MemoryStoreDamagedError(
            f"the store at {path} is damaged: {edge_reason(text, loaded_from)}; restore it "
            "from an export or backup")
    return None


@contextmanager
def edge_calls(path: str, loaded_from: str,
               closed: Callable[[], bool] = lambda: False) -> Iterator[None]:
    """Calls to the shard at ``path`` loaded from ``loaded_from``, failures as one-line errors
    naming the store (Edge reports a file it cannot read as a plain "Service runtime error:
    …": the store is damaged).

    Raises:
        MemoryStoreClosedError: A call failed once its handle was ``closed`` (by another
            thread while it ran).
        MemoryStoreDamagedError: Edge could not read a file of the store; and the other
            errors of :func:`edge_error`.
    """
    try:
        yield
    except RecencyError:
        raise
    except Exception as error:
        if closed():
            raise MemoryStoreClosedError(f"the store at {path} is closed") from None
        text = str(error)
        known = edge_error(path, loaded_from, error,
                           damaged=text.startswith("Service runtime error")
                           and "Permission denied" not in text)
        if known is None:
            raise
        raise known from None

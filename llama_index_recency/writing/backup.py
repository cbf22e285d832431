"""Backing up and restoring memories: one memory a line of JSON (JSON Lines).

Each line is an object with these fields, in this order::

    {"id": "ad39ed2e-…", "text": "The user likes tea.", "date": "2026-09-01",
     "user_id": "taro", "supersedes": ["5f1d6e3c-…"], "metadata": {"key": "tea"}}

- ``id``: the memory's id, kept on import in canonical form (optional there: omitted, it
  is :func:`~llama_index_recency.records.nodes.memory_node`'s id for the line).
- ``text``: the fact sentence, without the ``"YYYY-MM-DD: "`` prefix the stored text
  starts with (the prefix is rebuilt from ``date``).
- ``date``: the memory's date exactly as stored: ``YYYY-MM-DD`` for a day, the full ISO
  instant with its UTC offset (``2026-09-01T10:00:00+09:00``) for an instant. Exact,
  because the id is derived from it.
- ``user_id``: the memory's user, ``null`` for none.
- ``supersedes``: the ids of the earlier memories it updates, sorted, ``[]`` for none.
  The back link ``superseded_by`` older stores carry (on the older memory; written by
  0.2.0) is written the other way round: B listed in A's ``superseded_by`` puts A in B's
  ``supersedes``. A link to another user's memory (never followed, and refused by every
  write since) is left out.
- ``metadata``: the rest of the metadata (``key``, ``kind``, …), without the fields above.
- ``embedding_model`` and ``embedding`` (``with_embeddings=True`` only): the store's
  recorded embedding identity (``{"model": name, "dimensions": n}``, see
  :data:`~llama_index_recency.storage.metadata.EMBEDDING_METADATA_KEY`) and the memory's vector,
  written with 9 significant digits, which restore the stored float32 values exactly.
  Every line carries its own identity, so files can be concatenated or filtered.
- ``sentences`` (``with_embeddings=True``, a memory of several sentences only): its stored
  sentence vectors, so an import embeds nothing; vectors that do not fit the line's text
  or the store are embedded again instead.

Lines are written newest first (undated cannot occur: every exported memory has a date),
memories of one instant by id, so the same store always exports the same file.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Optional

from llama_index.core import VectorStoreIndex
from llama_index.core.schema import BaseNode

from llama_index_recency.errors import InvalidInputError, MemoryFileError
from llama_index_recency.ranking.sentences import SENTENCES_KEY
from llama_index_recency.records.dates import parse_memory_date
from llama_index_recency.records.links import linked_ids
from llama_index_recency.records.nodes import (
    SUPERSEDED_BY_KEY,
    SUPERSEDES_KEY,
    USER_ID_KEY,
)
from llama_index_recency.storage import (
    MemoryStore,
    embedding_identity,
    get_memories,
    stored_sentences,
    vector_store_of,
)
from llama_index_recency.twins import in_thread
from llama_index_recency.writing.memory_file import (
    DATE_KEY,
    FIELDS,
    OWN_FIELDS,
    MemoryFile,
    link_problem,
    read_memory_file,
)
from llama_index_recency.writing.updates import Progress, insert_memories

__all__ = [
    "FIELDS",
    "MemoryFile",
    "MemoryFileError",
    "aexport_memories",
    "aimport_memories",
    "export_memories",
    "import_memories",
    "link_problem",
    "memory_lines",
    "read_memory_file",
    "write_memory_file",
]


# --- export ---------------------------------------------------------------------------


def memory_lines(
    index: MemoryStore, *, user_id: Optional[str] = None, with_embeddings: bool = False
) -> Iterator[str]:
    """The lines :func:`export_memories` writes (each without its newline), newest first.

    The memories are read (and checked: each must have a readable date its text starts
    with, as :func:`~llama_index_recency.records.nodes.memory_node` makes it) before the first
    line is yielded; a memory that is not raises :class:`InvalidInputError` naming it.

    Raises:
        InvalidInputError: A memory without a readable date its text starts with;
            ``with_embeddings`` on a store that records no embedding model, or a memory
            whose vector is not of the recorded dimension (raised as its line is due).
    """
    nodes = get_memories(index, user_id=user_id)
    identity = embedding_identity(index) if with_embeddings else None
    if with_embeddings and identity is None:
        raise InvalidInputError("the store records no embedding model, so its vectors could not be "
                                "checked on import; export without embeddings")
    owners = {node.node_id: node.metadata.get(USER_ID_KEY) for node in nodes}
    outside = sorted({link for node in nodes for link in linked_ids(node, SUPERSEDES_KEY)}
                     - owners.keys())
    if outside:
        owners.update((node.node_id, node.metadata.get(USER_ID_KEY))
                      for node in get_memories(index, outside))
    newer: dict[str, set[str]] = {}  # superseded_by back links, turned round: newer -> older
    for node in nodes:
        for successor in linked_ids(node, SUPERSEDED_BY_KEY):
            if successor in owners:
                newer.setdefault(successor, set()).add(node.node_id)
    records = [_record(node, newer.get(node.node_id, set()), owners) for node in nodes]
    held = {} if identity is None else dict(
        stored_sentences(vector_store_of(index), [node.node_id for node in nodes]))
    for node, record in zip(nodes, records, strict=True):
        line = json.dumps(record, ensure_ascii=False)
        if identity is None:
            yield line
            continue
        vector = node.embedding or []
        if len(vector) != identity["dimensions"]:
            raise InvalidInputError(
                f"memory {node.node_id} has a {len(vector)}-dimensional vector; the "
                f"store records {identity['dimensions']} dimensions")
        numbers = ", ".join(map("{:.9g}".format, vector))
        model = json.dumps({"model": identity["model"], "dimensions": identity["dimensions"]},
                           ensure_ascii=False)
        sentences = (held.get(node.node_id) or {}).get(SENTENCES_KEY) or {}
        extra = f', "sentences": {json.dumps(sentences)}' if sentences.get("rows") else ""
        yield f'{line[:-1]}, "embedding_model": {model}, "embedding": [{numbers}]{extra}}}'


def _record(node: BaseNode, superseded_by_others: set[str],
            owners: dict[str, Optional[str]]) -> dict[str, Any]:
    """One line's fields. Links to another user's memory (never followed, and refused by
    every write) are left out; links to memories no longer stored are kept."""
    metadata = node.metadata
    day = metadata.get(DATE_KEY)
    try:
        parse_memory_date(day)
    except ValueError:
        raise InvalidInputError(f"memory {node.node_id} has no readable date ({day!r}); only dated "
                                "memories (memory_node's) can be exported") from None
    prefix = f"{str(day)[:10]}: "
    text = node.get_content()
    if not text.startswith(prefix):
        raise InvalidInputError(f"memory {node.node_id}'s text does not start with its date "
                                f"{prefix!r} as memory_node writes it: {text[:40]!r}")
    user = metadata.get(USER_ID_KEY)
    links = set(linked_ids(node, SUPERSEDES_KEY)) | superseded_by_others
    return {
        "id": node.node_id,
        "text": text[len(prefix):],
        "date": day,
        "user_id": user,
        "supersedes": sorted(link for link in links if owners.get(link, user) == user),
        "metadata": {key: value for key, value in metadata.items() if key not in OWN_FIELDS},
    }


def export_memories(
    index: MemoryStore,
    path: str | os.PathLike[str],
    *,
    user_id: Optional[str] = None,
    with_embeddings: bool = False,
) -> int:
    """Write the memories (of ``user_id``, when given) to ``path`` as JSON Lines (see the
    module's doc for the fields); returns how many were written.

    Newest first, then by id. With ``with_embeddings`` each line also holds the vector and
    the store's recorded embedding identity (``embedding_model``), so
    :func:`import_memories` stores it without embedding again, and refuses it in a store of
    another model. ``index`` may be a store opened without a model
    (:func:`~llama_index_recency.storage.store.open_memory_store`).

    The file is written atomically (:func:`write_memory_file`): a failure leaves ``path``
    as it was.

    Raises:
        InvalidInputError: A memory that cannot be exported (:func:`memory_lines`), or a
            ``path`` that is not a regular file (:func:`write_memory_file`).
        OSError: ``path`` cannot be written.
    """
    return write_memory_file(path, memory_lines(index, user_id=user_id,
                                                with_embeddings=with_embeddings))


aexport_memories = in_thread(export_memories)


def write_memory_file(path: str | os.PathLike[str], lines: Iterable[str]) -> int:
    """Write ``lines`` (each without its newline) to ``path`` atomically; returns how many.

    A symlink is followed: the file it points to is what is written (a link to a backup
    disk stays a link). They go to a temporary file beside that file (readable by its owner
    only: memories are personal), which is synced and then renamed over it; any failure (a
    line that cannot be made, a full disk) removes it and leaves the file as it was.

    Raises:
        InvalidInputError: ``path`` (or what it links to) exists and is not a regular file:
            a directory, a device, a FIFO or a socket, named.
        OSError: The file cannot be written (no such directory, a full disk, a symlink
            loop); an error from ``lines`` passes through as is.
    """
    path = _regular_file(Path(path))
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                                             suffix=".tmp")
    count = 0
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8", newline="\n") as file:
            for line in lines:
                file.write(line)
                file.write("\n")
                count += 1
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return count


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISSOCK, "a socket"))


def _regular_file(path: Path) -> Path:
    """The file ``path`` names, its symlinks resolved: renaming a file over the link itself
    would replace the link (or a device node) and leave what it names untouched."""
    target = Path(os.path.realpath(path))
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return target
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "a special file")
        raise InvalidInputError(f"{target} is {kind}, not a regular file: give the path of a "
                                "file to write")
    return target


# --- import ---------------------------------------------------------------------------


def import_memories(
    index: VectorStoreIndex,
    path: str | os.PathLike[str],
    *,
    replace: bool = False,
    user_id: Optional[str] = None,
    on_progress: Optional[Progress] = None,
) -> int:
    """Store the memories of a JSON Lines file (as :func:`export_memories` writes it);
    returns how many the store did not hold before (0 when the file is imported again).
    ``replace`` lets a line give a stored memory another user or metadata (its text and
    date never change); without it such a line is refused. With ``user_id``, a line of
    another user (or of none) is refused too.

    Every line is checked before anything is stored (:func:`read_memory_file`, then against
    the store: vectors only of its recorded embedding model and dimension, links only to
    the same user's memories and without a cycle, and a stored memory only as it is stored,
    links aside); the first problem raises :class:`MemoryFileError` naming the line, and
    nothing of the file is stored. Ids (canonical), texts, dates, users, links and metadata
    are kept exactly. Lines with an ``embedding`` are stored with it, the others embedded
    with the index's model; everything goes through
    :func:`~llama_index_recency.writing.updates.insert_memories` (idempotent, links united with
    what a memory already has, batches, ``on_progress``, ``PartialWriteError`` with the
    exact count stored when a batch fails).

    Raises:
        MemoryFileError: A line that cannot be imported, named; nothing was stored.
        PartialWriteError: A batch failed; it says how many memories were stored.
        OSError: ``path`` cannot be read.
    """
    memory_file = read_memory_file(path)
    if user_id is not None:
        for node, line in zip(memory_file.nodes, memory_file.lines, strict=True):
            if node.metadata.get(USER_ID_KEY) != user_id:
                raise MemoryFileError(memory_file.path, line, (
                    f"a memory of user {node.metadata.get(USER_ID_KEY)!r}, not {user_id!r}; "
                    "import it without a user"))
    nodes = memory_file.checked_for(index, replace=replace)
    return len(insert_memories(index, nodes, on_progress=on_progress, replace=replace,
                               sentences=memory_file.given_sentences()).new)


aimport_memories = in_thread(import_memories)

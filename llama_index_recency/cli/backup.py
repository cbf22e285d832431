"""The subcommands export, import and history, and ``--json`` output: backing up, restoring and
inspecting a store's memories (the JSON Lines of :mod:`llama_index_recency.writing.backup`; a
memory in ``list --json`` and ``history --json`` is an object of those lines)."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterable, Sequence
from typing import Any

from llama_index.core.schema import BaseNode

from llama_index_recency.cli.rendering import (
    literal,
    memory_table,
    reader_gone,
    shown_user,
    summary,
)
from llama_index_recency.cli.session import CommandError, Location, Session, default_store_path
from llama_index_recency.errors import MemoryNotFoundError
from llama_index_recency.records.nodes import USER_ID_KEY
from llama_index_recency.storage import (
    MemoryStore,
    close_memory_index,
    count_memories,
    memory_history,
)
from llama_index_recency.writing.backup import (
    MemoryFile,
    MemoryFileError,
    memory_lines,
    read_memory_file,
    write_memory_file,
)


def _whose(user: str | None) -> str:
    return "" if user is None else f" of user {shown_user(user)}"


def _memories(count: int) -> str:
    return f"{count} memor{'y' if count == 1 else 'ies'}"


def _lines(store: MemoryStore, user: str | None, with_embeddings: bool) -> list[str]:
    """The export's lines, or a one-line error naming a memory that cannot be exported."""
    try:
        return list(memory_lines(store, user_id=user, with_embeddings=with_embeddings))
    except ValueError as error:
        raise CommandError(str(error), 1) from None


def run_export(args: argparse.Namespace, session: Session) -> int:
    """Write the store's memories (of --user) to a JSON Lines file; needs no model.

    Raises:
        CommandError: ``--store`` and ``--url`` both given, a memory that cannot be exported,
            or a file that cannot be written.
        MemoryStoreNotFoundError: No store at the location (nothing is created).
    """
    location = Location.of(args, default_store_path())
    store = location.open_existing()
    try:
        lines = _lines(store, args.user, args.with_embeddings)
    finally:
        close_memory_index(store)
    try:
        count = write_memory_file(args.path, lines)
    except OSError as error:
        raise CommandError(f"cannot write {args.path}: {error.strerror or error}", 1) from None
    if args.json:
        users = {json.loads(line)["user_id"] for line in lines}
        print_json(session, {"path": str(args.path), "store": str(location), "count": count,
                             "users": sorted(users - {None}) + [None] * (None in users),
                             "with_embeddings": args.with_embeddings})
        return 0
    vectors = " with their embeddings" if args.with_embeddings else ""
    session.console.print(literal(f"exported {_memories(count)}{_whose(args.user)}{vectors} "
                                  f"from {location} to {args.path}"))
    return 0


def read_file(path: os.PathLike[str]) -> MemoryFile:
    """Every line of a memory file, checked; a one-line error naming the file and the line.

    Raises:
        CommandError: The file is missing or unreadable, or a line cannot be imported.
    """
    try:
        return read_memory_file(path)
    except MemoryFileError as error:
        raise CommandError(f"memory file {error}") from None
    except FileNotFoundError:
        raise CommandError(f"memory file {path} does not exist") from None
    except OSError as error:
        raise CommandError(f"cannot read memory file {path}: {error.strerror or error}") from None


def run_import(args: argparse.Namespace, session: Session) -> int:
    """Store the memories of a JSON Lines file (export's), every line checked first.

    Raises:
        CommandError: The file is missing or unreadable, a line cannot be imported (into
            this store), ``--store`` and ``--url`` both given, or the model cannot be loaded.
        PartialWriteError: A batch failed; it says how many memories were stored.
    """
    memories = read_file(args.path)  # before the store opens or the model loads
    location = Location.of(args, default_store_path())
    with session.store(args.model, location, writes=True) as index:
        try:
            nodes = memories.checked_for(index, replace=args.replace)
        except MemoryFileError as error:
            raise CommandError(f"memory file {error}") from None
        replaced = memories.replacing(index) if args.replace else []
        written = session.insert(index, nodes, replace=args.replace,
                                 sentences=memories.given_sentences())
        total = count_memories(index)
        warning = session.gate_after_write(index)
    session.console.print(summary(written, location, total))
    if replaced:
        session.console.print(literal(
            f"replaced the user or metadata of {len(replaced)} stored "
            f"memor{'y' if len(replaced) == 1 else 'ies'}: {', '.join(replaced)}"))
    if warning:
        session.console.print(literal(warning, "yellow"))
    return 0


def run_history(args: argparse.Namespace, session: Session) -> int:
    """Every version of one memory's fact, oldest first (``--json``: as ``list --json`` shows
    a memory); needs no model.

    Raises:
        CommandError: No such memory (of ``--user``), ``--store`` and ``--url`` both given,
            or (``--json``) a memory of its user that cannot be exported.
        MemoryStoreNotFoundError: No store at the location.
    """
    location = Location.of(args, default_store_path())
    store = location.open_existing()
    try:
        versions = memory_history(store, args.id, user_id=args.user)
        records = _records_of(store, versions) if args.json else None
    except MemoryNotFoundError:
        raise CommandError(f"no memory {args.id}{_whose(args.user)} in {location}", 1) from None
    finally:
        close_memory_index(store)
    if records is not None:
        print_json(session, records)
        return 0
    title = f"{len(versions)} version{'' if len(versions) == 1 else 's'} of memory {args.id}"
    session.console.print(memory_table(f"{title}, oldest first", versions, ordered=True))
    return 0


def memory_records(store: MemoryStore, user: str | None) -> list[dict[str, Any]]:
    """``list --json``: the objects of the export's lines (no embeddings), newest first.

    Raises:
        CommandError: A memory that cannot be exported (no readable date, say).
    """
    return [json.loads(line) for line in _lines(store, user, with_embeddings=False)]


def _records_of(store: MemoryStore, versions: Sequence[BaseNode]) -> list[dict[str, Any]]:
    """``versions`` (of one user, from :func:`memory_history`) as :func:`memory_records` has
    them, in their order."""
    by_id = {record["id"]: record
             for record in memory_records(store, versions[0].metadata.get(USER_ID_KEY))}
    return [by_id[node.node_id] for node in versions]


def print_json(session: Session, document: object) -> None:
    """``document`` on stdout as one JSON document (UTF-8, indented), without rich."""
    write_raw(session, [json.dumps(document, ensure_ascii=False, indent=2, allow_nan=False)])


def write_raw(session: Session, lines: Iterable[str]) -> None:
    """Lines to stdout without rich (no wrapping, no markup); a reader that stops early
    (``| head``) ends the output quietly."""
    out = session.console.file
    try:
        for line in lines:
            out.write(line + "\n")
        out.flush()
    except BrokenPipeError:
        reader_gone()

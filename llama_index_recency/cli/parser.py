"""The ``llama-index-recency`` argument parser: subcommands, their options, argument types."""

from __future__ import annotations

import argparse
import math
import uuid
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Any, NoReturn

from llama_index_recency.cli.backup import run_export, run_history, run_import
from llama_index_recency.cli.calibrate import run_calibrate
from llama_index_recency.cli.commands import (
    run_add,
    run_ask,
    run_demo,
    run_forget,
    run_list,
    run_migrate,
    run_remember,
)
from llama_index_recency.cli.session import (
    DEFAULT_MODEL,
    EMBEDDING_MODELS,
    LLM_RETRIES,
    CommandError,
    default_store_path,
)
from llama_index_recency.fitting.calibration import SEED_GRID
from llama_index_recency.fitting.policy_fit import SPREAD_KS, SPREAD_TAUS
from llama_index_recency.models.factories import LLM_BASE_URL_ENV
from llama_index_recency.querying.gate import MAX_BRING_UP
from llama_index_recency.records.examples import EXAMPLE_LANGUAGES
from llama_index_recency.records.nodes import control_character
from llama_index_recency.storage import DEFAULT_COLLECTION, check_collection_name

# --- argument parsing -------------------------------------------------------------------


def checked_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` unchanged, or an error naming the first argument that is not UTF-8.

    Python hands undecodable bytes over as lone surrogates, which could neither be
    stored nor printed.

    Raises:
        CommandError: An argument that is not UTF-8 (named by its position).
    """
    for number, arg in enumerate(argv, start=1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            raw = arg.encode("utf-8", "surrogateescape")
            raise CommandError(f"argument {number} is not UTF-8 text: {raw!r}") from None
    return list(argv)


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (through :func:`main`), not usage text."""

    def error(self, message: str) -> NoReturn:
        raise CommandError(f"{self.prog}: {message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    """The ``llama-index-recency`` parser, each subcommand's ``run`` set as a default; for bad
    arguments its ``parse_args`` raises :class:`CommandError` (one line) where argparse would
    print the usage and exit."""
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
    demo.add_argument("--top-k", type=_positive_int, default=8,
                      help="candidates taken by raw cosine")
    _chat_options(demo)
    demo.add_argument("--question-ids", type=_id_list, default=None, metavar="IDS",
                      help="only these questions, comma-separated (e.g. C1,H2)")
    demo.set_defaults(run=run_demo, shows_only=True)

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
        "sd. --seed runs the four-candidate pass at one threshold instead (smallest "
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
                             "--seed the four "
                             + ", ".join(f"{w:g}:{t:g}" for w, t in SEED_GRID) + ")")
    calibration.add_argument("--seed", action="store_true",
                             help="the four-candidate pass: every candidate at one threshold, the "
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
    calibration.add_argument("--top-k", type=_positive_int, default=8,
                             help="candidates taken by raw cosine")
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
    calibration.set_defaults(run=run_calibrate)

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
                     "{'memories': [{'fact', 'date', 'key', 'user_id', 'supersedes'}], "
                     "'user_name'}; an entry's user_id wins over --user, supersedes lists the "
                     "ids of the memories it updates")
    add.add_argument("--allow-future", action="store_true",
                     help="store memories dated after tomorrow (refused by default: such a "
                     "memory keeps the full recency bonus until its date)")
    add.set_defaults(run=run_add)

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
    _json_option(ask, "one JSON object (the policy, the memories that enter the prompt with "
                 "their scores, every candidate, the replies) instead of tables")
    ask.set_defaults(run=run_ask, shows_only=True)

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
    remember_command.set_defaults(run=run_remember)

    forgetting = commands.add_parser(
        "forget",
        help="delete memories for real: by id, by user and date, or by matching text",
        description="Show the memories that match, ask for confirmation (unless --yes), delete "
        "them, and keep the successor links of the others consistent. Needs no model.",
    )
    _store_options(forgetting)
    forgetting.add_argument("ids", nargs="*", type=_memory_id, metavar="ID",
                            help="memory ids (see `list`)")
    _user_option(forgetting, "only this user's memories")
    forgetting.add_argument("--before", type=_iso_date, default=None,
                            help="only memories dated before this day, YYYY-MM-DD")
    forgetting.add_argument("--match", default=None, metavar="TEXT",
                            help="only memories whose text contains TEXT (case-insensitive)")
    forgetting.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    forgetting.set_defaults(run=run_forget)

    migration = commands.add_parser(
        "migrate",
        help="copy a 0.1.0 store (qdrant-client local mode) into a Qdrant Edge store",
        description="Copy every memory (id, vector, payload) and the embedding identity from "
        "SOURCE, a store written by llama-index-recency 0.1.0, into a new Qdrant Edge store at "
        "TARGET; verify the counts. SOURCE is only read; rerunning is harmless. Needs no model.",
    )
    migration.add_argument("source", type=_store_path, help="the 0.1.0 store directory")
    migration.add_argument("target", type=_store_path, help="the new store directory")
    migration.add_argument("--collection", type=_collection, default=DEFAULT_COLLECTION,
                           help=f"the collection to copy (default: {DEFAULT_COLLECTION})")
    migration.set_defaults(run=run_migrate)

    listing = commands.add_parser("list", help="show the memories in a store (no model needed)")
    _store_options(listing)
    _user_option(listing, "only this user's memories")
    _json_option(listing, "one JSON list of the memories (export's fields, newest first) "
                 "instead of a table")
    listing.set_defaults(run=run_list, shows_only=True)

    history = commands.add_parser("history", help="every version of one memory's fact, oldest "
                                  "first (no model needed)")
    _store_options(history)
    history.add_argument("id", type=_memory_id, metavar="ID", help="a memory id (see `list`)")
    _user_option(history, "only if the memory is this user's")
    _json_option(history, "one JSON list of the versions (list --json's fields, oldest first) "
                 "instead of a table")
    history.set_defaults(run=run_history, shows_only=True)

    exporting = commands.add_parser(
        "export", help="write the memories to a JSON Lines file (no model needed)",
        description="One memory a line: id, text, date, user_id, supersedes, metadata (and "
        "with --with-embeddings the vector and its model). Written atomically.")
    _store_options(exporting)
    exporting.add_argument("path", type=Path, metavar="PATH", help="the file to write")
    _user_option(exporting, "only this user's memories")
    exporting.add_argument("--with-embeddings", action="store_true",
                           help="include the vectors, so import need not embed again (only "
                           "into a store of the same model)")
    _json_option(exporting, "a JSON object (path, store, count, users, with_embeddings) "
                 "instead of a line")
    exporting.set_defaults(run=run_export)

    importing = commands.add_parser(
        "import", help="store the memories of a JSON Lines file (export's)",
        description="Every line is checked before anything is stored; ids, dates, users and "
        "links are kept. Lines without a vector are embedded. Importing again stores nothing.")
    _model_options(importing)
    _store_options(importing)
    importing.add_argument("path", type=Path, metavar="PATH", help="the file to read")
    importing.add_argument(
        "--replace", action="store_true",
        help="let a line give a stored memory another user or metadata (reported); without "
        "it such a line is refused")
    importing.set_defaults(run=run_import)
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


def _json_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--json", action="store_true", help=f"print {what} on stdout")


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
    parser.add_argument("--llm-timeout", type=_seconds, default=60.0, metavar="SECONDS",
                        help="give up on an LLM answer after this long (per attempt; "
                        f"{LLM_RETRIES + 1} attempts)")


def _store_options(parser: argparse.ArgumentParser, store_help: str | None = None) -> None:
    parser.add_argument("--store", type=_store_path, default=None,
                        help=store_help or f"local store directory (default: {default_store_path()})")
    parser.add_argument("--url", default=None,
                        help="a Qdrant server (e.g. http://localhost:6333) instead of --store")
    parser.add_argument("--collection", type=_collection, default=DEFAULT_COLLECTION,
                        help=f"the collection holding the memories (default: {DEFAULT_COLLECTION})")


def _share(value: str) -> float:
    try:
        share = float(value)
    except ValueError:
        share = math.nan
    if not 0 <= share < 1:
        raise argparse.ArgumentTypeError(f"expected a share in [0, 1), got {value!r}")
    return share


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {value!r}")
    return seconds


MAX_TOP_K = 10_000
"""Most candidates a question takes (an engine's limit is a machine integer)."""


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if not 1 <= number <= MAX_TOP_K:
        raise argparse.ArgumentTypeError(
            f"expected a whole number from 1 to {MAX_TOP_K}, got {value!r}")
    return number


def _memory_id(value: str) -> str:
    """A memory id (a UUID) in the form ``list`` shows and the store keeps."""
    try:
        return str(uuid.UUID(value.strip()))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a memory id (a UUID, see `list`), got {value!r}") from None


def _id_list(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


def _iso_date(value: str) -> date:
    try:
        return date.fromisoformat(value.strip())
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"expected a date YYYY-MM-DD, got {value!r} ({error})"
        ) from None


def _collection(value: str) -> str:
    try:
        return check_collection_name(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _store_path(value: str) -> Path:
    """A store directory; an empty one (an unset variable) is refused, not the working one."""
    if not value.strip():
        raise argparse.ArgumentTypeError(f"the store path {value!r} is empty: name the store's "
                                         "directory")
    return Path(value)


def _non_blank(what: str) -> Any:
    def check(value: str) -> str:
        if not value.strip():
            raise argparse.ArgumentTypeError(f"the {what} is empty")
        return value

    return check


def _user_id(value: str) -> str:
    """A user id exactly as typed, as the library takes it (" alice" is not "alice", whose
    memories it must never reach); one printable line."""
    bad = control_character(value)
    if bad is not None:
        raise argparse.ArgumentTypeError(f"the user {value!r} contains the control character "
                                         f"{bad!r}; a user id is one line of printable text")
    return _non_blank("user")(value)


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

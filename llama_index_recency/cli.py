"""Command line ``llama-index-recency``: demo, calibrate, and add / ask / list on a local store.

One function per subcommand (``_demo``, ``_calibrate``, ``_add``, ``_ask``, ``_list``), each
taking the parsed arguments and a :class:`_Session` (console, embedding model, timings).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import platformdirs
from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode
from llama_index.vector_stores.qdrant import QdrantVectorStore
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from llama_index_recency.calibration import (
    DEFAULT_KEY,
    SEED_GRID,
    Calibration,
    RetrievedCandidates,
    ThresholdFit,
    calibrate,
    fit_threshold,
    format_score,
    retrieve_candidates,
)
from llama_index_recency.chat import MemoryResponseSynthesizer
from llama_index_recency.embeddings import EmbeddingMismatchError
from llama_index_recency.examples import (
    EXAMPLE_REFERENCE_DATE,
    ExampleQuestion,
    example_memories,
    example_questions,
)
from llama_index_recency.memory import memory_node
from llama_index_recency.models import (
    LLM_BASE_URL_ENV,
    offline_embedding,
    openai_like_llm,
    qwen3_embedding,
)
from llama_index_recency.postprocessor import RecencyBonusPostprocessor
from llama_index_recency.prompts import RETRIEVED_MEMORY_PROMPT
from llama_index_recency.scoring import RecencyPolicy, RecencyRanking
from llama_index_recency.store import (
    DEFAULT_COLLECTION,
    MemoryStoreLockedError,
    open_memory_index,
    qdrant_clients,
)
from llama_index_recency.writer import MemoryWriteError, remember_transcript

# The seed's 0.45 belongs to Qwen3-Embedding-0.6B at 256 dims. For all-MiniLM-L6-v2,
# `llama-index-recency calibrate --fit-threshold` on the bundled data (bonus 0.05/14)
# finds the hit-free max at 0.230 (N2) and the lowest target above it at 0.274 (C1's
# café au lait); the gap's middle, 0.252, rounds to 0.25: 0.020 over the one, 0.024
# under the other. (H2's targets, 0.12-0.18, sit under the hit-free max: no threshold
# reaches them with MiniLM.) tests/test_calibration.py pins this.
DEFAULT_THRESHOLDS = {"minilm": 0.25, "qwen3": 0.45}

EMBED_BATCH_SIZE = 16


def default_store_path() -> Path:
    """Where ``add``, ``ask`` and ``list`` keep memories: the user's data directory."""
    return platformdirs.user_data_path("llama-index-recency") / "qdrant"


def main(argv: Sequence[str] | None = None, *, embed_model: BaseEmbedding | None = None) -> int:
    """Entry point of the ``llama-index-recency`` console script.

    ``embed_model`` replaces the model ``--model`` would load (notebooks and tests
    reuse one loaded model this way).
    """
    args = _parser().parse_args(argv)
    session = _Session(Console(), embed_model)
    try:
        return int(args.run(args, session) or 0)
    except (MemoryStoreLockedError, EmbeddingMismatchError, MemoryWriteError) as error:
        session.console.print(f"[red]error:[/] {error}", highlight=False)
        return 1


# --- argument parsing -------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
    _ranking_options(demo)
    _chat_options(demo)
    demo.add_argument("--question-ids", type=_id_list, default=None, metavar="IDS",
                      help="only these questions, comma-separated (e.g. C1,H2)")
    demo.set_defaults(run=_demo)

    calibration = commands.add_parser(
        "calibrate",
        help="choose (weight, tau_days) and the threshold from labelled questions",
        description="Rerun the seed's four-candidate pass: for each (weight, tau_days), the "
        "hit-free max must stay under the threshold (a) and every target memory must reach "
        "it (b, c, ...). Adopts the smallest passing weight (ties: smaller tau). Without "
        "--store it uses the bundled memories and questions. Exits 1 when no candidate passes.",
    )
    _model_options(calibration)
    calibration.add_argument("--store", type=Path, default=None,
                             help="a local store to calibrate on (needs --questions)")
    calibration.add_argument("--questions", type=Path, default=None,
                             help="labelled questions, JSON like the bundled questions.json; "
                             "targets name memories by their 'key' metadata or node id")
    calibration.add_argument("--question-ids", type=_id_list, default=None, metavar="IDS",
                             help="only these questions, comma-separated")
    calibration.add_argument("--grid", type=_grid_point, action="append", default=None,
                             metavar="WEIGHT:TAU",
                             help="a candidate, repeatable (default: the seed's four "
                             + ", ".join(f"{w:g}:{t:g}" for w, t in SEED_GRID) + ")")
    calibration.add_argument("--threshold", type=float, default=None,
                             help="post-bonus cutoff (default: the model's, see --model)")
    calibration.add_argument("--fit-threshold", action="store_true",
                             help="first place the threshold between the hit-free max and the "
                             "targets (at --weight/--tau-days), then run the grid at it")
    calibration.add_argument("--weight", type=float, default=0.05,
                             help="bonus weight for --fit-threshold")
    calibration.add_argument("--tau-days", type=float, default=14.0,
                             help="bonus decay for --fit-threshold")
    calibration.add_argument("--top-k", type=int, default=8, help="candidates taken by raw cosine")
    calibration.add_argument("--today", type=date.fromisoformat, default=None,
                             help="reference date (default: 2026-09-10 for the bundled data, "
                             "else today)")
    calibration.set_defaults(run=_calibrate)

    add = commands.add_parser(
        "add",
        help="store a memory (or a JSON file of them) in the local store",
        description="Embed and store dated memories. The same fact and date stored twice "
        "keeps one copy.",
    )
    _model_options(add)
    _store_option(add)
    add.add_argument("fact", nargs="?", help="the fact sentence, e.g. 'The user likes tea.'")
    add.add_argument("--date", type=date.fromisoformat, default=None,
                     help="the memory's date, YYYY-MM-DD (default: today)")
    add.add_argument("--key", default=None, help="a name for the memory (calibration targets)")
    add.add_argument("--user-name", default=None,
                     help="replaces the generic subject 'the user' with this name")
    add.add_argument("--file", type=Path, default=None,
                     help="JSON like the bundled memories.json: {'memories': [{'fact', 'date', "
                     "'key'}], 'user_name'}")
    add.set_defaults(run=_add)

    ask = commands.add_parser(
        "ask",
        help="rank the local store's memories for a question (and ask the LLM)",
        description="Retrieve, re-rank and print the candidates for QUESTION with per-stage "
        f"timings. With {LLM_BASE_URL_ENV} set, also send the B-format prompt.",
    )
    _model_options(ask)
    _store_option(ask)
    _ranking_options(ask)
    _chat_options(ask)
    ask.add_argument("question")
    ask.add_argument("--today", type=date.fromisoformat, default=None,
                     help="reference date (default: today)")
    ask.set_defaults(run=_ask)

    remember = commands.add_parser(
        "remember",
        help="store the durable facts about the user from a conversation transcript",
        description="Read a transcript ('user: …' / 'assistant: …' lines, '#' comments), ask "
        f"the LLM ({LLM_BASE_URL_ENV}) for durable facts about the user and store them, dated. "
        "Any failure stores nothing.",
    )
    _model_options(remember)
    _store_option(remember)
    remember.add_argument("transcript", type=Path, help="transcript file (UTF-8)")
    remember.add_argument("--date", type=date.fromisoformat, default=None,
                          help="the conversation's day, YYYY-MM-DD (default: today)")
    remember.add_argument("--user-name", default=None,
                          help="replaces the generic subject 'the user' with this name")
    remember.set_defaults(run=_remember)

    listing = commands.add_parser("list", help="show the memories in the local store")
    _store_option(listing)
    listing.set_defaults(run=_list)
    return parser


def _model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", choices=sorted(DEFAULT_THRESHOLDS), default="minilm",
                        help="embedding model (qwen3 needs Qwen3-Embedding-0.6B available "
                        "locally); a store must always be used with the same one")


def _ranking_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threshold", type=float, default=None,
                        help="post-bonus cutoff (default: the model's, see --model)")
    parser.add_argument("--weight", type=float, default=0.05, help="bonus weight")
    parser.add_argument("--tau-days", type=float, default=14.0, help="bonus decay in days")
    parser.add_argument("--top-k", type=int, default=8, help="candidates taken by raw cosine")


def _chat_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-llm", action="store_true",
                        help=f"do not call the LLM even if {LLM_BASE_URL_ENV} is set")
    parser.add_argument("--compare", action="store_true",
                        help="also ask without memory (OFF) and show OFF and B side by side")


def _store_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", type=Path, default=None,
                        help=f"local Qdrant directory (default: {default_store_path()})")


def _id_list(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


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


@dataclass
class _Session:
    """What every subcommand needs: the console, the (lazily loaded) embedding, timings."""

    console: Console
    embed_model: BaseEmbedding | None = None
    timings: _Timings = field(default_factory=_Timings)

    def embedding(self, model: str) -> BaseEmbedding:
        if self.embed_model is None:
            from transformers.utils import logging as transformers_logging

            transformers_logging.disable_progress_bar()  # the status line below says it
            with self.console.status(f"loading the {model} embedding model"), \
                    self.timings.stage("embedding model load"):
                self.embed_model = offline_embedding() if model == "minilm" else qwen3_embedding()
        return self.embed_model

    @contextmanager
    def store(self, model: str, path: Path | None) -> Iterator[VectorStoreIndex]:
        """The memory index at ``path`` (in memory for ``None``); closes Qdrant's lock after."""
        embed_model = self.embedding(model)
        index = open_memory_index(embed_model, path=None if path is None else str(path))
        try:
            yield index
        finally:
            index.vector_store.client.close()

    def insert(self, index: VectorStoreIndex, nodes: Sequence[TextNode]) -> None:
        """Embed ``nodes`` in batches behind a progress bar, then store them."""
        embed_model = self.embed_model
        assert embed_model is not None, "open the store first"
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn())
        with Progress(*columns, console=self.console, transient=True) as progress, \
                self.timings.stage(f"embedding and storing {len(nodes)} memories"):
            task = progress.add_task("embedding memories", total=len(nodes))
            for start in range(0, len(nodes), EMBED_BATCH_SIZE):
                batch = nodes[start:start + EMBED_BATCH_SIZE]
                texts = [node.get_content(metadata_mode=MetadataMode.EMBED) for node in batch]
                vectors = embed_model.get_text_embedding_batch(texts)
                for node, vector in zip(batch, vectors, strict=True):
                    node.embedding = vector
                progress.advance(task, len(batch))
            index.insert_nodes(list(nodes))


def _threshold(args: argparse.Namespace) -> float:
    return args.threshold if args.threshold is not None else DEFAULT_THRESHOLDS[args.model]


def _llm(args: argparse.Namespace) -> LLM | None:
    """The chat LLM when an endpoint is configured and not switched off, else ``None``."""
    if args.no_llm or not os.environ.get(LLM_BASE_URL_ENV):
        return None
    return openai_like_llm()


def _memory_label(node: NodeWithScore) -> str:
    key = node.node.metadata.get(DEFAULT_KEY)
    return str(key) if key else _shorten(node.node.get_content(), 48)


def _shorten(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


@dataclass(frozen=True)
class _Answer:
    ranking: RecencyRanking
    reply: str | None = None
    reply_without_memory: str | None = None


def _answer(
    session: _Session,
    index: VectorStoreIndex,
    question: str,
    postprocessor: RecencyBonusPostprocessor,
    top_k: int,
    llm: LLM | None,
    compare: bool,
) -> _Answer:
    """One question through the timed stages: embed, Qdrant search, re-rank, chat (B, OFF)."""
    timings = session.timings
    assert session.embed_model is not None, "open the store first"
    with timings.stage("question embedding"):
        embedding = session.embed_model.get_query_embedding(question)
    with timings.stage(f"Qdrant search (top {top_k})"):
        candidates = index.as_retriever(similarity_top_k=top_k).retrieve(
            QueryBundle(query_str=question, embedding=embedding)
        )
    with timings.stage("re-rank (bonus, sort, cutoff)"):
        ranking = postprocessor.explain(candidates)
    if llm is None:
        return _Answer(ranking)
    today = postprocessor.reference().date().isoformat()
    with timings.stage("chat, B format"):
        reply = _chat(llm, question, ranking.nodes, today)
    if not compare:
        return _Answer(ranking, reply)
    with timings.stage("chat, OFF (no memory)"):
        without = _chat(llm, question, (), today)
    return _Answer(ranking, reply, without)


def _chat(llm: LLM, question: str, memories: Sequence[NodeWithScore], today: str) -> str:
    """Send the B-format prompt (no memory block when ``memories`` is empty); return the reply."""
    synthesizer = MemoryResponseSynthesizer(
        llm=llm, text_qa_template=RETRIEVED_MEMORY_PROMPT.partial_format(today=today)
    )
    return str(synthesizer.synthesize(question, list(memories)))


def _print_answer(console: Console, title: str, answer: _Answer) -> None:
    console.print(_ranking_table(title, answer.ranking))
    if answer.reply is None:
        return
    replies = Table(show_header=True, expand=True)
    if answer.reply_without_memory is not None:
        replies.add_column("OFF (no memory)", ratio=1)
        replies.add_column("B format", ratio=1)
        replies.add_row(answer.reply_without_memory, answer.reply)
    else:
        replies.add_column("Reply (B format)")
        replies.add_row(answer.reply)
    console.print(replies)


def _ranking_table(title: str, ranking: RecencyRanking) -> Table:
    table = Table(title=title, title_justify="left", caption_justify="left")
    table.add_column("Memory", overflow="fold")
    for column in ("Raw cosine", "Bonus", "Final"):
        table.add_column(column, justify="right")
    table.add_column("Verdict")
    for row in ranking.rows:
        style = "bold green" if row.kept else "dim"
        table.add_row(row.text, f"{row.raw:.3f}", f"+{row.bonus:.3f}", f"{row.final:.3f}",
                      row.reason, style=style)
    if ranking.nodes:
        table.caption = "→ into the prompt: " + ", ".join(_memory_label(n) for n in ranking.nodes)
    else:
        table.caption = "→ no memory enters the prompt"
    return table


def _postprocessor(args: argparse.Namespace, today: Any) -> RecencyBonusPostprocessor:
    return RecencyBonusPostprocessor(
        weight=args.weight, tau_days=args.tau_days, threshold=_threshold(args), reference_date=today
    )


def _llm_line(llm: LLM | None) -> str:
    if llm is None:
        return f"LLM: off (set {LLM_BASE_URL_ENV} to send the B-format prompt)"
    return f"LLM: {getattr(llm, 'model', '?')} at {getattr(llm, 'api_base', '?')}"


# --- subcommands ------------------------------------------------------------------------


def _demo(args: argparse.Namespace, session: _Session) -> int:
    """The bundled 16 memories and 10 questions through an in-memory Qdrant."""
    console = session.console
    postprocessor = _postprocessor(args, EXAMPLE_REFERENCE_DATE)
    llm = _llm(args)
    console.print(
        f"[bold]llama-index-recency demo[/]: model={args.model}, today={EXAMPLE_REFERENCE_DATE}, "
        f"bonus={args.weight:g}·exp(−days/{args.tau_days:g}), "
        f"threshold={postprocessor.threshold:g}, "
        f"top {args.top_k} → at most {postprocessor.top_n}"
    )
    console.print(_llm_line(llm))
    questions = _select(example_questions(), args.question_ids)
    with session.store(args.model, None) as index:
        session.insert(index, example_memories())
        for question in questions:
            answer = _answer(session, index, question.text, postprocessor, args.top_k, llm,
                             args.compare)
            _print_answer(console, f"{question.id} ({question.kind}): {question.text}", answer)
    console.print(session.timings.table())
    return 0


def _calibrate(args: argparse.Namespace, session: _Session) -> int:
    """The four-candidate pass (or any grid) on the bundled data or a labelled local store."""
    console = session.console
    if args.store is not None and args.questions is None:
        console.print("[red]calibrating a store needs --questions with labelled questions[/]")
        return 2
    bundled = args.store is None
    questions = _load_questions(args.questions) if args.questions else example_questions()
    questions = _select(questions, args.question_ids)
    today = args.today or (EXAMPLE_REFERENCE_DATE if bundled else None)
    policy = RecencyPolicy(weight=args.weight, tau_days=args.tau_days,
                           threshold=_threshold(args), reference_date=today)
    with session.store(args.model, args.store) as index:
        if bundled:
            session.insert(index, example_memories())
        with session.timings.stage(f"retrieving top {args.top_k} for {len(questions)} questions"):
            retrieved = retrieve_candidates(index.as_retriever(similarity_top_k=args.top_k),
                                            questions)
    source = "bundled memories" if bundled else str(args.store)
    console.print(f"[bold]calibration[/] on {source}: model={args.model}, today="
                  f"{policy.reference().date()}, {len(questions)} questions, top {args.top_k}")
    try:
        return _report_calibration(console, retrieved, policy, args)
    except ValueError as error:  # labels that cannot be calibrated on
        console.print(f"[red]{error}[/]")
        return 2
    finally:
        console.print(session.timings.table())


def _report_calibration(console: Console, retrieved: list[RetrievedCandidates],
                        policy: RecencyPolicy, args: argparse.Namespace) -> int:
    """Print the threshold fit (with --fit-threshold) and the grid; 0 when one is adopted."""
    if args.fit_threshold:
        fit = fit_threshold(retrieved, policy)
        console.print(_fit_table(fit))
        if fit.threshold is None:
            console.print("[red]No threshold separates the targets from the hit-free max; "
                          f"running the grid at {policy.threshold:g}.[/]")
        else:
            policy = policy.model_copy(update={"threshold": fit.threshold})
    result = calibrate(retrieved, policy, args.grid or SEED_GRID)
    console.print(_calibration_table(result))
    console.print(("[bold green]" if result.adopted else "[bold red]") + result.summary() + "[/]")
    return 0 if result.adopted else 1


def _add(args: argparse.Namespace, session: _Session) -> int:
    """Store one memory (FACT) or a JSON file of them, with a progress bar."""
    if (args.fact is None) == (args.file is None):
        session.console.print("[red]give either a FACT or --file[/]")
        return 2
    if args.file is not None:
        data = json.loads(args.file.read_text("utf-8"))
        user_name = args.user_name or data.get("user_name")
        nodes = [
            memory_node(item["fact"], item["date"], user_name=user_name,
                        metadata={DEFAULT_KEY: item["key"]} if item.get("key") else None)
            for item in data["memories"]
        ]
    else:
        nodes = [memory_node(args.fact, args.date or date.today(), user_name=args.user_name,
                             metadata={DEFAULT_KEY: args.key} if args.key else None)]
    path = args.store or default_store_path()
    with session.store(args.model, path) as index:
        session.insert(index, nodes)
        total = index.vector_store.client.count(index.vector_store.collection_name).count
    session.console.print(f"stored {len(nodes)} memor{'y' if len(nodes) == 1 else 'ies'} "
                          f"in {path} ({total} in total)")
    return 0


def _remember(args: argparse.Namespace, session: _Session) -> int:
    """Extract durable facts from a transcript with the LLM and store them."""
    if not os.environ.get(LLM_BASE_URL_ENV):
        session.console.print(f"[red]remember needs an LLM: set {LLM_BASE_URL_ENV}[/]")
        return 2
    path = args.store or default_store_path()
    with session.store(args.model, path) as index:
        stored = remember_transcript(args.transcript, index, openai_like_llm(),
                                     memory_date=args.date, user_name=args.user_name)
    for node in stored:
        session.console.print(node.get_content(), highlight=False)
    session.console.print(f"stored {len(stored)} memor{'y' if len(stored) == 1 else 'ies'} "
                          f"in {path}")
    return 0


def _ask(args: argparse.Namespace, session: _Session) -> int:
    """Rank the store's memories for one question, optionally asking the LLM."""
    path = args.store or default_store_path()
    postprocessor = _postprocessor(args, args.today)
    llm = _llm(args)
    session.console.print(_llm_line(llm))
    with session.store(args.model, path) as index:
        if not _has_memories(index):
            session.console.print(f"[red]no memories stored in {path}; add some first[/]")
            return 1
        answer = _answer(session, index, args.question, postprocessor, args.top_k, llm,
                         args.compare)
    _print_answer(session.console, args.question, answer)
    session.console.print(session.timings.table())
    return 0


def _list(args: argparse.Namespace, session: _Session) -> int:
    """Print the store's memories, oldest first."""
    path = args.store or default_store_path()
    client, _ = qdrant_clients(path=str(path))  # listing needs no embedding model
    assert client is not None
    try:
        exists = client.collection_exists(DEFAULT_COLLECTION)
        nodes = (QdrantVectorStore(collection_name=DEFAULT_COLLECTION, client=client).get_nodes()
                 if exists else [])
    finally:
        client.close()
    if not nodes:
        session.console.print(f"no memories stored in {path}")
        return 0
    table = Table(title=f"{len(nodes)} memories in {path}", title_justify="left")
    table.add_column("Date")
    table.add_column("Key")
    table.add_column("Memory", overflow="fold")
    table.add_column("Id", overflow="fold")
    for node in sorted(nodes, key=lambda n: str(n.metadata.get("date", ""))):
        table.add_row(str(node.metadata.get("date", "")), str(node.metadata.get(DEFAULT_KEY, "")),
                      node.get_content(), node.node_id)
    session.console.print(table)
    return 0


# --- helpers for the subcommands --------------------------------------------------------


def _select(
    questions: list[ExampleQuestion], ids: tuple[str, ...] | None
) -> list[ExampleQuestion]:
    if ids is None:
        return questions
    unknown = sorted(set(ids) - {q.id for q in questions})
    if unknown:
        raise SystemExit(f"unknown question ids: {', '.join(unknown)}")
    return [q for q in questions if q.id in ids]


def _load_questions(path: Path) -> list[ExampleQuestion]:
    """Labelled questions from JSON: ``{"questions": [{"id", "text", "targets"}]}``."""
    items = json.loads(path.read_text("utf-8"))["questions"]
    return [
        ExampleQuestion(q["id"], q.get("kind") or ("hit" if q["targets"] else "hit_free"),
                        q["text"], tuple(q["targets"]))
        for q in items
    ]


def _has_memories(index: VectorStoreIndex) -> bool:
    """Whether the collection (which ``open_memory_index`` always creates) holds any point."""
    store = index.vector_store
    return store.client.count(store.collection_name).count > 0


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
    table.add_row("    where", *(f"{row.hit_free.question_id} {row.hit_free.key}"
                               for row in result.results), style="dim")
    table.add_row("    headroom", *(f"{row.headroom:.3f}" for row in result.results), style="dim")
    for index, (letter, _) in enumerate(result.conditions[1:]):
        label = result.results[0].targets[index].label
        table.add_row(f"({letter}) {label}", *(
            _cell(format_score(row.targets[index].final, result.top_k), letter in row.failed)
            for row in result.results
        ))
    table.add_row("Verdict", *(
        _cell(result.verdict(row), not row.passed, "bold green" if row is result.adopted else "")
        for row in result.results
    ), end_section=True)
    return table


def _cell(text: str, failed: bool, style: str = "") -> str:
    return f"[red]{text}[/]" if failed else (f"[{style}]{text}[/]" if style else text)


def _fit_table(fit: ThresholdFit) -> Table:
    table = Table(title="Threshold fit", title_justify="left", show_header=False)
    table.add_column("Item")
    table.add_column("Value", overflow="fold")
    for item, value in fit.rows():
        table.add_row(item, value)
    return table


if __name__ == "__main__":
    sys.exit(main())

"""The subcommands demo, add, remember, ask, list, forget and migrate (one function each),
and the ranking and LLM steps demo and ask share."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import date
from typing import Any

from llama_index.core import VectorStoreIndex
from llama_index.core.llms import LLM
from llama_index.core.schema import NodeWithScore, QueryBundle
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

from llama_index_recency.cli.backup import memory_records, print_json
from llama_index_recency.cli.inputs import (
    check_file_links,
    file_memories,
    future_date,
    memory,
    select,
    transcript,
)
from llama_index_recency.cli.rendering import (
    ask_document,
    literal,
    llm_line,
    memory_table,
    policy_line,
    ranking_table,
    shown_user,
    summary,
    wraps,
)
from llama_index_recency.cli.session import (
    LLM_RETRIES,
    Location,
    Session,
    Written,
    default_store_path,
    ranking_option_error,
    ranking_options,
    reason,
)
from llama_index_recency.errors import CommandError, InvalidSettingError, LLMError
from llama_index_recency.integrations.chat import MemoryResponseSynthesizer
from llama_index_recency.integrations.postprocessor import RecencyBonusPostprocessor
from llama_index_recency.integrations.prompts import RETRIEVED_MEMORY_PROMPT
from llama_index_recency.integrations.retriever import QdrantRecencyRetriever
from llama_index_recency.models.factories import LLM_BASE_URL_ENV, is_http_url, openai_like_llm
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.ranking.ranked import RecencyRanking
from llama_index_recency.ranking.vague import is_vague_reference
from llama_index_recency.records.examples import (
    EXAMPLE_REFERENCE_DATE,
    example_memories,
    example_questions,
)
from llama_index_recency.records.nodes import FutureMemoryDateError, check_not_future
from llama_index_recency.storage import (
    Outbox,
    close_memory_index,
    count_memories,
    get_memories,
    index_policy,
    memory_scope,
    migrate_store,
    outbox_path,
)
from llama_index_recency.writing.updates import forget
from llama_index_recency.writing.writer import remember


def _policy(index: VectorStoreIndex, today: Any, explicit: dict[str, Any]) -> RecencyPolicy:
    """The store's policy (saved, else the model's shipped one) with the explicit options
    (:func:`ranking_options`) on top."""
    try:
        return index_policy(index, reference_date=today, **explicit)
    except InvalidSettingError as error:
        raise ranking_option_error(error) from None


def _llm(args: argparse.Namespace) -> LLM | None:
    """The chat LLM when an endpoint is configured and not switched off, else ``None``."""
    if args.no_llm or not os.environ.get(LLM_BASE_URL_ENV):
        return None
    return _endpoint_llm(args.llm_timeout)


def _endpoint_llm(timeout: float) -> LLM:
    """The chat LLM at ``RECENCY_LLM_BASE_URL`` (set), refused unless that is an http(s) URL."""
    url = os.environ[LLM_BASE_URL_ENV]
    if not is_http_url(url):
        raise CommandError(f"{LLM_BASE_URL_ENV} {url!r} is not an http(s) URL such as "
                           "http://localhost:8000/v1")
    return openai_like_llm(timeout=timeout, max_retries=LLM_RETRIES)


@contextmanager
def _waiting(console: Console, what: str) -> Iterator[None]:
    """A spinner with the elapsed time while the LLM thinks (on a terminal only)."""
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True,
                  disable=not console.is_terminal) as progress:
        progress.add_task(f"waiting for the LLM ({what})", total=None)
        yield


def _search(session: Session, retriever: QdrantRecencyRetriever, question: str
            ) -> RecencyRanking:
    """One question through the timed stages: embed, exact recency search over the store."""
    assert session.embed_model is not None, "open the store first"
    with session.timings.stage("question embedding"):
        embedding = session.embed_model.get_query_embedding(question)
    with session.timings.stage("exact recency search (Qdrant)"):
        return retriever.explain(QueryBundle(query_str=question, embedding=embedding))


def _rank(session: Session, index: VectorStoreIndex, question: str,
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


def _replies(session: Session, llm: LLM, question: str, ranking: RecencyRanking, today: str,
             compare: bool, console: Console) -> tuple[str, str | None]:
    """Ask the LLM in B format (and, for ``compare``, with no memory: else None), a spinner on
    ``console`` meanwhile."""
    with session.timings.stage("chat, B format"), _waiting(console, "B format"):
        reply = _chat(llm, question, ranking.nodes, today)
    if not compare:
        return reply, None
    with session.timings.stage("chat, OFF (no memory)"), _waiting(console, "no memory"):
        return reply, _chat(llm, question, (), today)


def _reply(session: Session, llm: LLM, question: str, ranking: RecencyRanking,
           today: str, compare: bool) -> Table:
    """Ask the LLM in B format (and with no memory for ``compare``); the replies as a table
    (filling the width of a terminal; piped, each reply on one line)."""
    reply, without = _replies(session, llm, question, ranking, today, compare, session.console)
    replies = Table(show_header=True, expand=wraps(session.console))
    if without is None:
        replies.add_column("Reply (B format)")
        replies.add_row(literal(reply))
        return replies
    replies.add_column("OFF (no memory)", ratio=1)
    replies.add_column("B format", ratio=1)
    replies.add_row(literal(without), literal(reply))
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
    return f"unreadable answer ({reason(error)})"


# --- subcommands ------------------------------------------------------------------------


# The demo's closing lines: paths in the project's checkout, and commands that work as
# printed on a fresh default store.
WHERE_NEXT = "\n".join((
    "Where next:",
    "  the notebook: notebooks/recency_bonus_experiments.ipynb (the calibration tables, score plots)",
    "  the docs: docs/README.md (one page a topic: ranking, agent memory, the store, the CLI, ...)",
    "  your own memories, in the default store:",
    '    llama-index-recency add "The user has switched to green tea."',
    '    llama-index-recency ask "What do I drink these days?"',
))


def run_demo(args: argparse.Namespace, session: Session) -> int:
    """The bundled 16 memories and 10 questions through an in-memory Qdrant.

    Raises:
        CommandError: A ranking option the policy refuses, unknown ``--question-ids``, an
            LLM endpoint that is not an http(s) URL, or a model that cannot be loaded.
        LLMError: The LLM call failed (with an endpoint set and no ``--no-llm``).
    """
    console = session.console
    explicit: dict[str, Any] = ranking_options(args)
    llm = _llm(args)
    questions = select(example_questions(args.lang), args.question_ids)
    today = EXAMPLE_REFERENCE_DATE.isoformat()
    with session.store(args.model, Location(None, None), writes=True) as index:
        policy = _policy(index, EXAMPLE_REFERENCE_DATE, explicit)
        # The store's own policy, as _policy checked it; candidates' vectors from the store.
        postprocessor = RecencyBonusPostprocessor.from_index(
            index, reference_date=EXAMPLE_REFERENCE_DATE, **explicit)
        console.print(
            f"[bold]llama-index-recency demo[/]: model={args.model}, lang={args.lang}, "
            f"today={EXAMPLE_REFERENCE_DATE}, top {args.top_k} → at most {policy.top_n}"
        )
        console.print(policy_line(policy))
        console.print(llm_line(llm))
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
            console.print(ranking_table(literal(title), ranking))
            if llm is not None:
                console.print(_reply(session, llm, question.text, ranking, today, args.compare))
    console.print(session.timings.table())
    console.print(literal(WHERE_NEXT))
    return 0


def run_add(args: argparse.Namespace, session: Session) -> int:
    """Store one memory (FACT) or a JSON file of them.

    Raises:
        CommandError: Both or neither of FACT and ``--file``; a fact, date, user or file the
            memories cannot be made of (named); a ``supersedes`` link to no memory, to
            another user's or in a cycle; ``--store`` and ``--url`` both given; a model that
            cannot be loaded.
        PartialWriteError: A batch failed; it says how many memories were stored.
    """
    if (args.fact is None) == (args.file is None):
        raise CommandError("give either a FACT or --file")
    if args.file is not None:
        nodes, labels = file_memories(args.file, args.user_name, args.user, args.allow_future)
    else:
        nodes = [memory(args.fact, args.date or date.today(), args.key, args.user_name,
                        args.user, "the memory", args.allow_future)]
        labels = ["the memory"]
    location = Location.of(args, default_store_path())
    with session.store(args.model, location, writes=True) as index:
        check_file_links(index, nodes, labels)
        written = session.insert(index, nodes)
        total = count_memories(index)
        warning = session.gate_after_write(index)
    for text, old, new in written.replaced_keys:
        session.console.print(literal(f"replaced the key of {text!r}: {old or '(none)'} → {new}"))
    session.console.print(summary(written, location, total))
    if warning:
        session.console.print(literal(warning, "yellow"))
    return 0


def run_remember(args: argparse.Namespace, session: Session) -> int:
    """Extract durable facts from a transcript with the LLM and store them.

    Raises:
        CommandError: A transcript that cannot be read, a ``--date`` after tomorrow without
            ``--allow-future``, no LLM endpoint or one that is not an http(s) URL,
            ``--store`` and ``--url`` both given, or a model that cannot be loaded.
        RetryableWriteError: The LLM call failed; nothing was stored.
        FinalWriteError: The LLM answered but no valid fact came of it.
        PartialWriteError: A batch failed; it says how many memories were stored.
    """
    turns = transcript(args.transcript)
    if args.date is not None and not args.allow_future:
        try:
            check_not_future(args.date)
        except FutureMemoryDateError as error:
            raise CommandError(future_date(error)) from None
    if not os.environ.get(LLM_BASE_URL_ENV):
        raise CommandError(f"remember needs an LLM: set {LLM_BASE_URL_ENV}")
    llm = _endpoint_llm(args.llm_timeout)
    location = Location.of(args, default_store_path())
    with session.store(args.model, location, writes=True) as index:
        before = count_memories(index)
        with session.timings.stage("extraction (LLM) and storing"), \
                _waiting(session.console, "extracting memories"):
            stored = remember(turns, index, llm, memory_date=args.date, user_name=args.user_name,
                              user_id=args.user, allow_future=args.allow_future)
        total = count_memories(index)
        warning = session.gate_after_write(index)
    for node in stored:
        session.console.print(literal(node.get_content()))
    new = total - before
    session.console.print(summary(Written(new, len(stored) - new), location, total))
    if warning:
        session.console.print(literal(warning, "yellow"))
    return 0


def run_ask(args: argparse.Namespace, session: Session) -> int:
    """Rank the store's memories for one question, then (optionally) ask the LLM; ``--json``:
    all of it as one JSON document (:func:`ask_document`), printed once the LLM answered.

    Raises:
        CommandError: No memories stored, a ranking option the policy refuses, an LLM
            endpoint that is not an http(s) URL, ``--store`` and ``--url`` both given, or a
            model that cannot be loaded.
        MemoryStoreNotFoundError: No store at the location (nothing is created).
        LLMError: The LLM call failed; the ranking is printed first (not with ``--json``).
    """
    explicit = ranking_options(args)
    llm = _llm(args)
    show = (lambda *_: None) if args.json else session.console.print
    show(llm_line(llm))
    location = Location.of(args, default_store_path())
    with session.store(args.model, location, writes=False) as index:
        if count_memories(index) == 0:
            raise CommandError(f"no memories stored in {location}; add some first", 1)
        policy = _policy(index, args.today, explicit)
        show(policy_line(policy))
        retriever = QdrantRecencyRetriever.from_index(index, policy, user_id=args.user)
        ranking = _search(session, retriever, args.question)
    today = policy.reference().date().isoformat()
    if args.json:  # the spinner on stderr: stdout is the document alone
        replies = (None, None) if llm is None else _replies(
            session, llm, args.question, ranking, today, args.compare, session.errors)
        print_json(session, ask_document(args.question, args.user, today, policy, ranking,
                                         *replies))
        return 0
    show(ranking_table(literal(args.question), ranking))
    if llm is not None:  # the table above stays on screen if the LLM fails
        show(_reply(session, llm, args.question, ranking, today, args.compare))
    show(session.timings.table())
    return 0


def run_list(args: argparse.Namespace, session: Session) -> int:
    """Print the store's memories, oldest first (``--json``: one JSON list of the export's
    objects, newest first); needs no embedding model.

    Raises:
        CommandError: ``--store`` and ``--url`` both given, or (``--json``) a memory that
            cannot be exported.
        MemoryStoreNotFoundError: No store at the location.
    """
    location = Location.of(args, default_store_path())
    store = location.open_existing()
    try:
        if args.json:
            records = memory_records(store, args.user)
        else:
            nodes = get_memories(store, filters=memory_scope(user_id=args.user))
    finally:
        close_memory_index(store)
    if args.json:
        print_json(session, records)
        return 0
    whose = "" if args.user is None else f" of user {shown_user(args.user)}"
    if not nodes:
        session.console.print(literal(f"no memories{whose} stored in {location}"))
        return 0
    session.console.print(memory_table(f"{_memories(len(nodes))}{whose} in {location}", nodes))
    return 0


def _memories(count: int) -> str:
    """``1 memory``, ``2 memories``."""
    return f"{count} memor{'y' if count == 1 else 'ies'}"


def run_forget(args: argparse.Namespace, session: Session) -> int:
    """Delete the selected memories after showing them (and a yes, unless --yes); a whole
    user (``--user`` alone) also loses their conversations waiting in the outbox, whether or
    not they have memories yet.

    Returns:
        The exit code: 0 (also when nothing matches), 1 when the deletion is not confirmed.

    Raises:
        CommandError: No selection (ids, ``--user``, ``--before`` or ``--match``), no
            terminal to confirm on without ``--yes``, or ``--store`` and ``--url`` both given.
        MemoryStoreNotFoundError: No store at the location.
    """
    if not (args.ids or args.user or args.before or args.match):
        raise CommandError("forget needs memory ids, --user, --before or --match")
    whole_user = args.user is not None and not (args.ids or args.before or args.match)
    location = Location.of(args, default_store_path())
    store = location.open_existing()
    try:
        scope = memory_scope(user_id=args.user, before=args.before)
        chosen = get_memories(store, args.ids or None, scope)
        if args.match:
            needle = args.match.casefold()
            chosen = [node for node in chosen if needle in node.get_content().casefold()]
        path = outbox_path(store) if whole_user else None
        outbox = None if path is None else Outbox.at(path)
        waiting = 0 if outbox is None else outbox.waiting(args.user)
        if not chosen and not waiting:
            session.console.print(literal(f"no memory in {location} matches; nothing deleted"))
            return 0
        doomed = []
        if chosen:
            doomed.append(_memories(len(chosen)))
            session.console.print(memory_table(f"{doomed[-1]} to forget in {location}", chosen))
        if waiting:
            doomed.append(_conversations(waiting))
            session.console.print(literal(f"{doomed[-1]} of user {shown_user(args.user)} "
                                          "waiting in the outbox (not written yet) to drop"))
        if not args.yes and not _confirmed(f"Delete these {' and '.join(doomed)} for good?"):
            session.console.print("nothing deleted")
            return 1
        dropped = waiting
        if whole_user:  # forget drops the user's waiting conversations once the delete is done
            deleted = forget(store, user_id=args.user)
        else:
            deleted = forget(store, [node.node_id for node in chosen], user_id=args.user)
    finally:
        close_memory_index(store)
    if dropped:
        session.console.print(literal(f"dropped {_conversations(dropped)} of user "
                                      f"{shown_user(args.user)} waiting in the outbox"))
    session.console.print(literal(f"deleted {_memories(deleted)} from {location}"))
    return 0


def _conversations(count: int) -> str:
    """``1 conversation``, ``2 conversations``."""
    return f"{count} conversation{'' if count == 1 else 's'}"


def _confirmed(question: str) -> bool:
    """Ask on the terminal; with no terminal to ask on, the answer is no."""
    if not sys.stdin or not sys.stdin.isatty():
        raise CommandError("forget asks for confirmation on a terminal; pass --yes to delete "
                           "without asking")
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def run_migrate(args: argparse.Namespace, session: Session) -> int:
    """Copy a qdrant-client local-mode store (written by 0.1.0) into Qdrant Edge, with a
    progress bar; the source is not modified.

    Raises:
        MemoryStoreNotFoundError: The source is not a local-mode store, or lacks the collection.
        InvalidInputError: The target is itself a local-mode store (or its shard directory
            holds something else).
        MemoryStoreLockedError: The source or the target is open in another process.
        EmbeddingMismatchError: The target records another embedding model than the source.
        MigrationIncompleteError: Fewer memories were copied than the source holds.
    """
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=session.console, transient=True,
                  disable=not session.console.is_terminal) as progress, \
            session.timings.stage("migrating"):
        task = progress.add_task("copying memories", total=None)
        done = migrate_store(args.source, args.target, collection_name=args.collection,
                             progress=lambda copied: progress.advance(task, copied))
    session.console.print(literal(
        f"migrated {done.copied} memories from {args.source} (0.1.0, qdrant-client local mode) "
        f"to {args.target} (Qdrant Edge, {done.target_count} in total); {args.source} is unchanged"
    ))
    return 0

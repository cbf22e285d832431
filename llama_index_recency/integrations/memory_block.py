"""A LlamaIndex ``Memory`` block: dated facts recalled by cosine + recency, written in session.

``Memory.from_defaults(memory_blocks=[RecencyMemoryBlock(index=...)])`` gives an agent
(``FunctionAgent``, ``AgentWorkflow``, ``ReActAgent``) a long-term memory that prefers what
is recent: each turn it ranks the user's memories exactly (:class:`QdrantRecencyRetriever`)
and injects the passing ones in B format, or nothing at all when none passes. As the
session goes on, the block hands each finished exchange to the writer, which extracts
dated facts off the voice turn, in a worker thread; an outbox beside the store keeps
what is not written yet (the latest exchange included) across failures and restarts.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any, List, Optional, Sequence

from llama_index.core import VectorStoreIndex
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr, field_validator
from llama_index.core.llms import LLM
from llama_index.core.memory import Memory
from llama_index.core.memory.memory import BaseMemoryBlock
from llama_index.core.schema import TextNode
from llama_index.core.storage.chat_store.base_db import MessageStatus

from llama_index_recency.errors import FinalWriteError, MemoryStoreClosedError, OneLineValidation
from llama_index_recency.integrations import writer_threads
from llama_index_recency.integrations.prompts import (
    RETRIEVED_MEMORY_CONTEXT_TEMPLATE,
    memory_context,
)
from llama_index_recency.integrations.retriever import QdrantRecencyRetriever
from llama_index_recency.integrations.session_turns import SessionTurns, chat_turns
from llama_index_recency.querying.gate import MIN_FIT_MEMORIES, refit_after_write
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.ranking.vague import is_vague_ranking
from llama_index_recency.records.nodes import check_user_id
from llama_index_recency.records.text import memory_text
from llama_index_recency.storage import (
    Conversation,
    Outbox,
    QdrantEdgeVectorStore,
    forgotten_at,
    index_policy,
    outbox_path,
)
from llama_index_recency.twins import in_thread
from llama_index_recency.writing.updates import insert_memories
from llama_index_recency.writing.writer import Turn, extract_memories

logger = logging.getLogger(__name__)

_WORKER_IDLE_SECONDS = 5.0  # a writer thread with nothing to do for this long exits

class RecencyMemoryBlock(OneLineValidation, BaseMemoryBlock[str]):
    """Long-term memory for an agent: recall ranked by cosine + recency, dated facts written.

    Reading (every turn): the latest user message (``query_turns`` > 1 joins that many of
    the latest user messages) is the query; the passing memories come back as the
    B-format text (today's date from the policy's reference date, the rules, the escaped
    ``<retrieved_memory>`` block), or "" so the LLM sees no memory at all. Priority 0:
    ``Memory`` never truncates it, and ``top_n`` keeps it small.

    Writing (with an ``llm``): during the session, each turn hands the exchanges before the
    latest user message (after the assistant turn they answer, shown again: "Are you
    allergic to nuts?" before "Yes") to a worker thread that extracts facts and stores them
    under ``user_id``, dated as the block reads (the policy's reference date if set, else
    today), so the turn never waits for the LLM. Each turn is sent once: a ``Memory`` flush and
    :meth:`remember_session` (at session end) send only what was not sent yet. A session id
    names one conversation: give each its own (a new ``Memory`` under an old id is taken for
    the same conversation, and what its user says again is not sent again). Every
    conversation waits in the outbox (:attr:`outbox_path`) until it is stored; a failed
    write (LLM or store down) is kept there for :meth:`wait_for_writes` and for the next
    block opened over the store, while an answer that gives no valid fact is dropped. The
    turns not sent yet (the latest exchange, from its user message to the reply once an
    agent reads the memory again) are held there too, so a process that dies before the
    next turn or :meth:`remember_session` loses none of them: the next block opened with an
    ``llm`` writes them.

    The gate: without a ``policy`` the block ranks with the store's own, which fits itself
    (:func:`~llama_index_recency.querying.gate.refit_gate`): the worker refits it after storing a
    batch once the store is due, and the block's retriever refits a store grown by other
    writers on a background thread; a turn always ranks with the gate in place meanwhile.
    """

    # A setting it does not have is refused: a typo would otherwise leave the default.
    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    name: str = Field(default="recency_memory", description="The block's name in the prompt.")
    priority: int = Field(default=0, description="0: Memory never truncates this block.")
    index: VectorStoreIndex = Field(description="The memory index (open_memory_index).")
    policy: Optional[RecencyPolicy] = Field(
        default=None,
        description="Recency parameters (a RecencyBonusPostprocessor is one); None: the store's "
        "own (index_policy: calibrated and saved with it, else its model's, else the defaults).",
    )
    user_id: Optional[str] = Field(
        default=None, description="Whose memories: every read and write is scoped to it; None = unscoped."
    )
    user_name: Optional[str] = Field(
        default=None, description="Replaces the generic subject of written facts ('The user' → 'Taro')."
    )
    llm: Optional[LLM] = Field(
        default=None, description="The LLM that extracts facts to write; None makes the block read-only."
    )
    query_turns: int = Field(
        default=1, ge=1, description="How many of the latest user messages make the query."
    )
    background: bool = Field(
        default=True, description="Write in a worker thread during the session and on flushes "
        "(True), or only within the flush and remember_session (False).",
    )
    max_pending: int = Field(
        default=8, ge=1, description="Most conversations queued for writing; a full queue makes a "
        "flush wait (a turn never waits).",
    )
    outbox_path: Optional[Path] = Field(
        default=None, description="The JSON-lines file keeping conversations not yet written, "
        "retried by the next block opened with an llm. Default: DIR/outbox/<collection>.jsonl "
        "for a local Edge store (open_memory_index(path=DIR)); other stores (qdrant-client local "
        "mode, a server) need it set, else the outbox is in memory only and lost on exit. One "
        "process at a time per file.",
    )

    min_fit_memories: int = Field(
        default=MIN_FIT_MEMORIES, ge=1, description="The store size at which the store's own "
        "gate is first fitted (refitted as it doubles).",
    )

    _retriever: Optional[QdrantRecencyRetriever] = PrivateAttr(default=None)
    _follows_store: bool = PrivateAttr(default=False)
    _outbox: Outbox = PrivateAttr()
    _lock: threading.Condition = PrivateAttr(default_factory=threading.Condition)
    _queue: "deque[Conversation]" = PrivateAttr(default_factory=deque)
    _writing: int = PrivateAttr(default=0)
    _failed: list[Conversation] = PrivateAttr(default_factory=list)
    _worker: Optional[threading.Thread] = PrivateAttr(default=None)
    _sessions: "dict[Optional[str], SessionTurns]" = PrivateAttr(default_factory=dict)

    @field_validator("user_id")
    @classmethod
    def _one_line_of_text(cls, user_id: Optional[str]) -> Optional[str]:
        return None if user_id is None else check_user_id(user_id)

    def model_post_init(self, __context: Any) -> None:
        """Fill in the store's policy and outbox; with an llm, retry what a past process left.
        A store already closed is refused (MemoryStoreClosedError)."""
        self._require_store()
        if self.policy is None:
            self._follows_store = True
            self.policy = index_policy(self.index)
        if self.outbox_path is None:
            self.outbox_path = outbox_path(self.index)
            if self.outbox_path is None and self.llm is not None:
                logger.warning("%s: this store (not a local Qdrant Edge store) keeps no outbox, so "
                               "conversations waiting for the writer are lost if the process "
                               "dies; set outbox_path= to keep them on disk", self.name)
        self._outbox = Outbox.at(self.outbox_path, self.index.vector_store)
        orphans = self._outbox.claim_orphans() if self.llm is not None else []
        if orphans:  # a past process's conversations: retried in the background
            logger.info("%s: retrying %d conversation(s) left in %s", self.name, len(orphans),
                        self.outbox_path)
            with self._lock:
                self._queue.extend(orphans)
                self._start_worker()

    @property
    def retriever(self) -> QdrantRecencyRetriever:
        """The exact recency retriever this block reads with (scoped to ``user_id``)."""
        if self._retriever is None:
            self._retriever = QdrantRecencyRetriever.from_index(
                self.index, None if self._follows_store else self.policy,
                user_id=self.user_id, min_fit_memories=self.min_fit_memories,
            )
        return self._retriever

    @property
    def _policy(self) -> RecencyPolicy:
        """The policy the block reads and dates with: its retriever's (the store's own,
        refitted, when no policy was given)."""
        return self.retriever.policy

    @property
    def pending_retries(self) -> int:
        """Conversations whose write failed and wait for a retry (they are in the outbox)."""
        with self._lock:
            return len(self._failed)

    # --- reading (and handing the session's finished exchanges to the writer) ------------------

    async def _aget(self, messages: Optional[List[ChatMessage]] = None, **block_kwargs: Any) -> str:
        """Recall for the latest user message; meanwhile keep the session's turns for the writer."""
        messages = messages or []
        if self.llm is None:
            return await self._recall(messages)
        # Keeping them in the outbox (an fsync or two) overlaps the retrieval; the LLM runs later.
        _, recalled = await asyncio.gather(
            in_thread(self._keep)(messages, block_kwargs.get("session_id")),
            self._recall(messages))
        return recalled

    async def _recall(self, messages: List[ChatMessage]) -> str:
        """The B-format block for the latest user message(s), or "" when no memory passes."""
        query = self._query(messages)
        if not query:
            return ""
        found = await self.retriever.aretrieve(query)
        if not found:
            return ""
        texts = [memory_text(n.node, self._policy.date_key) for n in found]
        return RETRIEVED_MEMORY_CONTEXT_TEMPLATE.format(
            context_str=memory_context(texts), today=self._today().isoformat(),
            vague_reference=is_vague_ranking(found),
        ).strip()

    def _today(self) -> date:
        """The day memories are read and written on: the policy's reference date if set (so
        what the block writes is dated as it reads), else the local calendar day."""
        reference = self._policy.reference_date
        return date.today() if reference is None else self._policy.reference().date()

    def _query(self, messages: List[ChatMessage]) -> str:
        user_texts = [m.content for m in messages if m.role == MessageRole.USER and m.content]
        return "\n".join(user_texts[-self.query_turns:]).strip()

    def _keep(self, messages: List[ChatMessage], session_id: Optional[str]) -> None:
        """Hand the session's unsent turns before its latest user message (whose reply may
        still be to come) to the background writer, then hold the rest in the outbox."""
        turns = chat_turns(messages)
        start = 0
        if self.background:
            start = max((i for i, turn in enumerate(turns) if turn.role == "user"), default=0)
            said = self._take(session_id, turns[:start])
            if said is not None:
                self._submit(said)
        self._hold(session_id, turns, start)

    def _hold(self, session_id: Optional[str], turns: Optional[Sequence[Turn]] = None,
              start: int = 0) -> None:
        """Keep the session's unsent turns of ``turns[start:]`` (None: of those held before) in
        the outbox as one entry, replaced as they change and dropped once they are sent. Only
        a process that ends before sending them leaves it there, for the next block opened
        with an llm to write; a kill between a send and this call leaves a turn in both, so
        it is at worst extracted twice, never lost."""
        with self._lock:
            session = self._sessions.setdefault(session_id, SessionTurns())
            pending = (session.unsent_of(session.held_turns) if turns is None
                       else session.unsent(turns, start))
            old, old_turns = session.held, session.held_turns
            # Held user turns gone from the history unsent: it was cleared (a reset, say). A
            # text still in it is no sign: an agent calling a tool shows its message twice.
            said = {(turn.role, turn.text) for turn in turns or ()}
            if old is not None and turns is not None and any(
                    key not in session.sent and (turn.role, turn.text) not in said
                    for key, turn in old_turns if turn.role == "user"):
                self._submit(old)
                old = session.flushed_last = None  # nor is what a flush took before them
                pending = session.unsent(turns, start)
            session.held_turns = pending
            if old is not None and old.turns == tuple(turn for _, turn in pending):
                return
            if any(turn.role == "user" for _, turn in pending):
                held = Conversation(turns=tuple(turn for _, turn in pending), day=self._today(),
                                    user_id=self.user_id, user_name=self.user_name,
                                    seen=session.seen_at(pending))
                session.held = held if old is None else replace(held, id=old.id)
                self._outbox.add(session.held)
            else:
                session.held = None
                if old is not None:
                    self._outbox.remove(old.id)

    # --- writing -------------------------------------------------------------------------------

    async def _aput(self, messages: List[ChatMessage]) -> None:
        """Memory flushed ``messages`` out of its history: write those not sent yet."""
        if self.llm is None or not messages:
            return
        session_id = messages[0].additional_kwargs.get("session_id")  # set by Memory's flush
        said = self._take(session_id, chat_turns(messages), leaving=True)
        if said is None:
            return
        if self.background:
            await in_thread(self._hand_over)(said, session_id)
        else:
            await in_thread(self._write_now)(said, session_id)

    def _hand_over(self, conversation: Conversation, session_id: Optional[str]) -> None:
        """Queue flushed turns for the worker (waiting only for a full queue); the session's
        turns they did not take stay held."""
        self._submit(conversation, wait=True)
        self._hold(session_id)

    def remember_session(self, memory: Memory) -> list[TextNode]:
        """Wait for the queued writes, then write the session's turns not sent yet (those
        ``memory`` still holds); call it when the session ends (before closing the store: a
        closed one raises MemoryStoreClosedError). Returns what it stored."""
        if self.llm is None:
            return []
        self.wait_for_writes()
        turns = chat_turns(memory.get_all(status=MessageStatus.ACTIVE))
        said = self._take(memory.session_id, turns)
        return [] if said is None else self._write_now(said, memory.session_id)

    async def aremember_session(self, memory: Memory) -> list[TextNode]:
        """Async :meth:`remember_session`."""
        if self.llm is None:
            return []
        await self.await_writes()
        turns = chat_turns(await memory.aget_all(status=MessageStatus.ACTIVE))
        said = self._take(memory.session_id, turns)
        return [] if said is None else await in_thread(self._write_now)(said,
                                                                memory.session_id)

    def wait_for_writes(self) -> int:
        """Retry failed writes once, wait for every queued one; returns how many still failed.
        While the process ends, or once the store is closed, it waits for nothing: returns how
        many are not written yet (they stay in the outbox)."""
        return self._wait_for_writes(threading.Event())

    def _wait_for_writes(self, stop: threading.Event) -> int:
        """:meth:`wait_for_writes`, given up when ``stop`` is set (its awaiting task was
        cancelled): returns how many are not written yet."""
        with self._lock:
            if self._stopped():
                return len(self._failed) + len(self._queue) + self._writing
            self._queue.extend(self._failed)
            self._failed.clear()
            if self._queue:
                self._start_worker()
                self._lock.notify_all()
            self._lock.wait_for(lambda: stop.is_set() or (
                (not self._queue or self._stopped()) and not self._writing))
            return len(self._failed) + len(self._queue) + self._writing

    async def await_writes(self) -> int:
        """Async :meth:`wait_for_writes`, run in a worker thread; cancelled (Ctrl-C in
        ``asyncio.run``, a timeout), it stops waiting at once."""
        stop = threading.Event()
        try:
            return await in_thread(self._wait_for_writes)(stop)
        except asyncio.CancelledError:
            stop.set()
            with self._lock:
                self._lock.notify_all()
            raise

    def _take(self, session_id: Optional[str], turns: Sequence[Turn], *,
              leaving: bool = False) -> Optional[Conversation]:
        """The session's ``turns`` not sent yet, marked sent, as a conversation if one of them
        is the user's (assistant turns alone wait, as context for the next). ``leaving``:
        ``turns`` left Memory's history (a flush), so all are marked and counted as gone."""
        with self._lock:
            session = self._sessions.setdefault(session_id, SessionTurns())
            new = session.unsent(turns)
            if leaving:
                session.flush(turns)
            elif any(turn.role == "user" for _, turn in new):
                session.sent_now(new)
        if not any(turn.role == "user" for _, turn in new):
            return None
        return Conversation(turns=tuple(turn for _, turn in new), day=self._today(),
                            user_id=self.user_id, user_name=self.user_name,
                            seen=session.seen_at(new))

    def _submit(self, conversation: Conversation, *, wait: bool = False) -> None:
        """Keep ``conversation`` in the outbox, then queue it for the worker (``wait``: for
        room); refused once the store is closed."""
        self._require_store()
        self._outbox.add(conversation)
        with self._lock:
            if wait:
                self._start_worker()  # a worker must be there to make room
                self._lock.wait_for(lambda: len(self._queue) < self.max_pending
                                    or self._stopped())
            self._queue.append(conversation)
            self._start_worker()
            self._lock.notify_all()

    def _start_worker(self) -> None:
        """Start the writer thread unless it runs (one at a time; it leaves when idle, or when
        the process ends). Hold ``_lock``."""
        if self._stopped():
            return  # the outbox keeps the queue for the next process
        if self._worker is None or not self._worker.is_alive():
            self._worker = writer_threads.start_writer(self._work, f"{self.name}-writer", self._lock)

    def _stopped(self) -> bool:
        """Whether nothing more is written here: the process ends, or the store is closed."""
        return writer_threads.LEAVING.is_set() or self._store_closed()

    def _require_store(self) -> None:
        """Refuse a conversation a closed store could only lose (its outbox file is the next
        opener's): raises MemoryStoreClosedError."""
        if self._store_closed():
            raise MemoryStoreClosedError(f"{self.name}: the store at "
                                         f"{getattr(self.index.vector_store, 'path', '')} is "
                                         "closed; open it again and make a new block")

    def _store_closed(self) -> bool:
        """Whether the block's store was closed (nothing can be stored through it any more;
        its outbox file is left to whichever process opens the store next)."""
        store = self.index.vector_store
        return isinstance(store, QdrantEdgeVectorStore) and store.closed

    def _work(self) -> None:
        """The writer thread: write queued conversations one at a time; leave when idle, when
        the process ends (once the queue is stored or the time is up) or the store is closed."""
        try:
            while True:
                with self._lock:
                    if not self._lock.wait_for(lambda: self._queue or self._stopped(),
                                               timeout=_WORKER_IDLE_SECONDS) \
                            or not self._queue or writer_threads.past_deadline() \
                            or self._store_closed():
                        self._worker = None
                        self._lock.notify_all()  # nothing more is written: waiters return
                        return
                    conversation = self._queue.popleft()
                    self._writing += 1
                try:
                    self._write(conversation)
                finally:
                    with self._lock:
                        self._writing -= 1
                        self._lock.notify_all()
        finally:
            writer_threads.writer_left()

    def _write_now(self, conversation: Conversation, session_id: Optional[str]) -> list[TextNode]:
        """Write in this thread, kept in the outbox until done (the session's turns it did not
        take stay held); refused once the store is closed."""
        self._require_store()
        self._outbox.add(conversation)
        self._hold(session_id)
        return self._write(conversation)

    def _write(self, conversation: Conversation) -> list[TextNode]:
        """Extract (unless done before), keep what was extracted in the outbox, store, then
        drop ``conversation`` from the outbox. The turns seen before its user was last
        forgotten are left out, and so is all of it when a forget comes during the write. A
        failed call or store keeps it for a retry (logged once per streak), which only
        stores once the LLM has answered; an answer with no valid fact is not retried."""
        assert self.llm is not None  # only a block with an llm hands conversations over
        if conversation.id not in self._outbox:  # its user was forgotten meanwhile
            return []
        try:
            remembered = conversation.said_after(forgotten_at(self.index, conversation.user_id))
            if remembered is None:  # all the user said before a forget of them
                self._outbox.remove(conversation.id)
                return []
            if remembered is not conversation:
                conversation = remembered
                self._outbox.replace(conversation)
            stored = conversation.extracted()
            if stored is None:
                # The conversation's own day (the policy's reference date if set), never a typo.
                stored = extract_memories(
                    list(conversation.turns), self.llm, memory_date=conversation.day,
                    user_name=conversation.user_name, user_id=conversation.user_id,
                    index=self.index, allow_future=True)
                conversation = conversation.with_memories(stored)
                self._outbox.replace(conversation)
            if stored:
                left_out = insert_memories(self.index, stored,
                                           said_at=conversation.first_seen).forgotten
                stored = [node for node in stored if node.node_id not in left_out]
        except Exception as error:  # noqa: BLE001 - whatever failed, the turns must survive
            if _answered(error):
                self._outbox.remove(conversation.id)
                logger.warning("%s: no memory written from a conversation, not retried (asking "
                               "again would get the same): %s", self.name, error)
                return []
            with self._lock:
                first = not self._failed
                self._failed.append(conversation)
            if first:
                logger.warning("%s: could not write memories, kept for a retry: %s", self.name, error)
            return []
        self._outbox.remove(conversation.id)
        if stored and not writer_threads.LEAVING.is_set():  # a fit now would outlive it
            refit_after_write(self.index, min_memories=self.min_fit_memories, writer=self.name,
                              users=(self.user_id,))
        return stored


def _answered(error: Exception) -> bool:
    """Whether the LLM answered but no valid fact came of it: a retry would only ask the
    same again."""
    return isinstance(error, FinalWriteError)

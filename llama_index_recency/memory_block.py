"""A LlamaIndex ``Memory`` block: dated facts recalled by cosine + recency, written in the background.

``Memory.from_defaults(memory_blocks=[RecencyMemoryBlock(index=...)])`` gives an agent
(``FunctionAgent``, ``AgentWorkflow``, ``ReActAgent``) a long-term memory that prefers what
is recent: each turn it ranks the user's memories exactly (:class:`QdrantRecencyRetriever`)
and injects the passing ones in B format, or nothing at all when none passes. When
``Memory`` flushes old messages, the block extracts dated facts from them with the writer,
off the voice turn, in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from datetime import date
from typing import Any, List, Optional

from llama_index.core import VectorStoreIndex
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.llms import LLM
from llama_index.core.memory import Memory
from llama_index.core.memory.memory import BaseMemoryBlock
from llama_index.core.schema import TextNode
from llama_index.core.storage.chat_store.base_db import MessageStatus

from llama_index_recency.prompts import (
    RETRIEVED_MEMORY_CONTEXT_TEMPLATE,
    memory_context,
    memory_text,
)
from llama_index_recency.retriever import QdrantRecencyRetriever
from llama_index_recency.scoring import RecencyPolicy
from llama_index_recency.store import index_policy
from llama_index_recency.vague import is_vague_ranking
from llama_index_recency.writer import Turn, remember

logger = logging.getLogger(__name__)

_WORKER_IDLE_SECONDS = 5.0  # a writer thread with nothing to do for this long exits


class RecencyMemoryBlock(BaseMemoryBlock[str]):
    """Long-term memory for an agent: recall ranked by cosine + recency, dated facts written.

    Reading (every turn): the latest user message (``query_turns`` > 1 joins that many of
    the latest user messages) is the query; the passing memories come back as the
    B-format text (today's date from the policy's reference date, the rules, the escaped
    ``<retrieved_memory>`` block), or "" so the LLM sees no memory at all. Priority 0:
    ``Memory`` never truncates it, and ``top_n`` keeps it small.

    Writing (when ``Memory`` flushes short-term messages, or :meth:`remember_session`):
    with an ``llm``, facts are extracted and stored under ``user_id``, dated as the block
    reads (the policy's reference date if set, else today). In background mode
    (the default) a worker thread does it so the turn never waits for the LLM; call
    :meth:`wait_for_writes` at session end. A failed extraction keeps its messages for a
    retry (logged once) instead of losing them.
    """

    name: str = Field(default="recency_memory", description="The block's name in the prompt.")
    priority: int = Field(default=0, description="0: Memory never truncates this block.")
    index: VectorStoreIndex = Field(description="The memory index (open_memory_index).")
    policy: Optional[RecencyPolicy] = Field(
        default=None,
        description="Recency parameters (a RecencyBonusPostprocessor is one); None: the store's "
        "own (index_policy: calibrated and saved with it, else its model's, else the seed's).",
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
        default=True, description="Write in a worker thread (True) or within the flush (False)."
    )
    max_pending: int = Field(
        default=8, ge=1, description="Most conversations queued for writing; a full queue makes the flush wait."
    )

    _retriever: Optional[QdrantRecencyRetriever] = PrivateAttr(default=None)
    _jobs: "queue.Queue[list[Turn]]" = PrivateAttr()
    _worker: Optional[threading.Thread] = PrivateAttr(default=None)
    _failed: list[list[Turn]] = PrivateAttr(default_factory=list)
    _failed_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _worker_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def model_post_init(self, __context: Any) -> None:
        self._jobs = queue.Queue(maxsize=self.max_pending)
        if self.policy is None:
            self.policy = index_policy(self.index)

    @property
    def retriever(self) -> QdrantRecencyRetriever:
        """The exact recency retriever this block reads with (scoped to ``user_id``)."""
        if self._retriever is None:
            self._retriever = QdrantRecencyRetriever.from_index(
                self.index, self._policy, user_id=self.user_id
            )
        return self._retriever

    @property
    def _policy(self) -> RecencyPolicy:
        assert self.policy is not None  # set in model_post_init
        return self.policy

    @property
    def pending_retries(self) -> int:
        """Conversations whose extraction failed and wait for a retry."""
        with self._failed_lock:
            return len(self._failed)

    # --- reading -------------------------------------------------------------------------------

    async def _aget(self, messages: Optional[List[ChatMessage]] = None, **block_kwargs: Any) -> str:
        query = self._query(messages or [])
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

    # --- writing -------------------------------------------------------------------------------

    async def _aput(self, messages: List[ChatMessage]) -> None:
        if self.llm is None:
            return
        turns = _turns(messages)
        if not any(turn.role == "user" for turn in turns):
            return
        if self.background:
            await asyncio.to_thread(self._enqueue, turns)  # waits only when the queue is full
        else:
            await asyncio.to_thread(self._write, turns)

    def remember_session(self, memory: Memory) -> list[TextNode]:
        """Write the session's messages still in ``memory``'s short-term history (those it
        flushed earlier were queued for writing then); call it when the session ends."""
        self.wait_for_writes()
        return self._write(_turns(memory.get_all(status=MessageStatus.ACTIVE)))

    async def aremember_session(self, memory: Memory) -> list[TextNode]:
        """Async :meth:`remember_session`."""
        await self.await_writes()
        messages = await memory.aget_all(status=MessageStatus.ACTIVE)
        return await asyncio.to_thread(self._write, _turns(messages))

    def wait_for_writes(self) -> int:
        """Retry failed extractions once, wait for every queued write; returns how many still failed."""
        with self._failed_lock:
            retries, self._failed = self._failed, []
        for turns in retries:
            self._enqueue(turns)
        self._jobs.join()
        return self.pending_retries

    async def await_writes(self) -> int:
        """Async :meth:`wait_for_writes`."""
        return await asyncio.to_thread(self.wait_for_writes)

    def _enqueue(self, turns: list[Turn]) -> None:
        self._jobs.put(turns)
        with self._worker_lock:  # one worker at a time; it leaves when idle
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._work, name=f"{self.name}-writer",
                                                daemon=True)
                self._worker.start()

    def _work(self) -> None:
        while True:
            try:
                turns = self._jobs.get(timeout=_WORKER_IDLE_SECONDS)
            except queue.Empty:
                with self._worker_lock:
                    if self._jobs.empty():
                        self._worker = None
                        return
                continue
            try:
                self._write(turns)
            finally:
                self._jobs.task_done()

    def _write(self, turns: list[Turn]) -> list[TextNode]:
        """Extract and store; on failure keep ``turns`` for a retry and log (once per streak)."""
        if not turns or self.llm is None:
            return []
        try:
            # The block's own today (the policy's reference date if set), never a typo.
            stored = remember(turns, self.index, self.llm, memory_date=self._today(),
                              user_name=self.user_name, user_id=self.user_id, allow_future=True)
        except Exception as error:  # noqa: BLE001 - whatever failed, the messages must survive
            with self._failed_lock:
                first = not self._failed
                self._failed.append(turns)
            if first:
                logger.warning("%s: could not write memories, kept for a retry: %s", self.name, error)
            return []
        return stored


def _turns(messages: List[ChatMessage]) -> list[Turn]:
    """The user and assistant messages with text, as the writer's turns."""
    return [
        Turn(role=message.role.value, text=message.content.strip())  # type: ignore[arg-type]
        for message in messages
        if message.role in (MessageRole.USER, MessageRole.ASSISTANT)
        and message.content and message.content.strip()
    ]

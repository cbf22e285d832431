""":class:`RecencyMemory`: one object for a memory store, its embedding, its policy and a user.

It binds what the module-level functions take on every call (index, policy, user id) and
delegates to them: writes through :func:`~llama_index_recency.writing.updates.insert_memories`,
search through the exact retriever, the integrations over the same store and policy. Every
blocking method ``X`` has an async twin ``aX`` running ``X`` in a worker thread.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, Optional

from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM
from llama_index.core.schema import BaseNode, TextNode
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_recency.errors import InvalidInputError
from llama_index_recency.integrations.chat import RecencyChatEngine
from llama_index_recency.integrations.memory_block import RecencyMemoryBlock
from llama_index_recency.integrations.retriever import QdrantRecencyRetriever
from llama_index_recency.models.factories import offline_embedding
from llama_index_recency.querying.gate import (
    MAX_BRING_UP,
    MIN_FIT_MEMORIES,
    GateFit,
    calibrate_gate,
    refit_after_write,
)
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.ranking.ranked import RecencyRanking
from llama_index_recency.records.given import (
    Fact,
    MemoryDate,
    Message,
    as_turn,
    call_user,
    check_limit,
    check_question,
    to_add,
)
from llama_index_recency.storage import (
    check_open_options,
    close_memory_index,
    get_memories,
    get_memory,
    index_policy,
    memory_history,
    memory_scope,
    open_memory_index,
    save_policy,
)
from llama_index_recency.twins import in_thread
from llama_index_recency.writing.backup import export_memories, import_memories
from llama_index_recency.writing.updates import (
    Progress,
    StoredMemories,
    forget,
    insert_memories,
    update_memory,
)
from llama_index_recency.writing.writer import Turn, extract_memories, remember


class RecencyMemory:
    """A memory store with its embedding model, ranking policy and (optionally) user.

    ``RecencyMemory(path="./memories")`` opens (or creates) a Qdrant Edge store on disk
    with the bundled offline model; ``url=`` a Qdrant server; neither, a temporary store.

    Args:
        embed_model: The embedding model (default: :func:`offline_embedding`, the bundled
            multilingual e5-small). A store records its model: another one raises
            :class:`~llama_index_recency.errors.EmbeddingMismatchError`.
        path: Directory of an embedded store, created if needed.
        url: A Qdrant server's url (``api_key`` for it); not with ``path``.
        index: An index already opened with :func:`open_memory_index` (then ``embed_model``,
            ``path``, ``url`` and ``open_options`` must not be given).
        policy: The ranking policy, used as given. Default: the store's own
            (:func:`index_policy`), read afresh as the store refits its gate: every write
            refits it once the store holds ``min_fit_memories`` memories, and again each
            time it doubles (:func:`~llama_index_recency.querying.gate.refit_gate`).
        user_id: Whose memories: every read and write is scoped to this user; None, unscoped.
        user_name: Replaces the generic subject ("The user") of the facts written.
        llm: The LLM :meth:`remember`, :meth:`as_memory_block` and :meth:`chat_engine` use.
        min_fit_memories: The store size at which its own gate is first fitted.
        open_options: More arguments for :func:`open_memory_index` (``collection_name``, ...).
    """

    def __init__(
        self,
        embed_model: Optional[BaseEmbedding] = None,
        *,
        path: Optional[str | os.PathLike[str]] = None,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        index: Optional[VectorStoreIndex] = None,
        policy: Optional[RecencyPolicy] = None,
        user_id: Optional[str] = None,
        user_name: Optional[str] = None,
        llm: Optional[LLM] = None,
        min_fit_memories: int = MIN_FIT_MEMORIES,
        **open_options: Any,
    ) -> None:
        """Open the store (unless ``index`` is given); the arguments are in the class docstring.

        Raises:
            InvalidInputError: ``index`` given with the arguments that open one; ``path`` and
                ``url`` both given; a ``collection_name`` that is not a plain name; an
                argument neither takes.
            MemoryStorePathError: ``path`` is a file, not a directory.
            MemoryStoreLockedError: The embedded store is open in another process.
            MemoryStoreUnreachableError: The server at ``url`` does not answer.
            EmbeddingMismatchError: The store was written with another embedding model.
        """
        if index is not None:
            given = [name for name, value in (("embed_model", embed_model), ("path", path),
                                              ("url", url), ("api_key", api_key))
                     if value is not None] + sorted(open_options)
            if given:
                raise InvalidInputError(f"RecencyMemory takes an open index or what opens one, not "
                                        f"both: got index and {', '.join(given)}")
        else:
            check_open_options(open_options)
            index = open_memory_index(embed_model or offline_embedding(), path=path, url=url,
                                      api_key=api_key, **open_options)
        self.index: VectorStoreIndex = index
        """The memory index (a ``VectorStoreIndex`` over the store)."""
        self._policy = policy
        self.user_id = call_user(None, user_id)
        self.user_name, self.llm = user_name, llm
        self.min_fit_memories = min_fit_memories
        self._searchers: dict[tuple[Optional[str], int], tuple[Any, QdrantRecencyRetriever]] = {}

    @property
    def policy(self) -> RecencyPolicy:
        """The policy every search and integration ranks with: the one given, else the
        store's own (:func:`index_policy`) as it stands."""
        return self._policy or index_policy(self.index)

    @policy.setter
    def policy(self, policy: Optional[RecencyPolicy]) -> None:
        self._policy = policy

    # --- writing ----------------------------------------------------------------------

    def add(
        self,
        data: str | Fact | BaseNode | Message | Iterable[str | Fact | BaseNode | Message],
        *,
        date: Optional[MemoryDate] = None,
        user_id: Optional[str] = None,
        metadata: Optional[dict[str, Any]] = None,
        on_progress: Optional[Progress] = None,
    ) -> StoredMemories:
        """Store memories: facts, facts with their dates, nodes made with :func:`memory_node`,
        or the facts the LLM finds in chat messages.

        Args:
            data: One fact (``"The user drinks tea."``), one ``(fact, date)`` pair, one node,
                or a list of them: facts become memories of this object's user and user name,
                nodes are stored as given. Or chat messages (``{"role": "user", "content":
                "..."}``, ``ChatMessage`` or :class:`Turn`; one or a list): the writer extracts
                the facts with this object's LLM, as :meth:`remember` does (system, tool and
                empty messages are left out).
            date: The facts' date when not given with them, or the conversation's (default today).
            user_id: Whose memories (default: this object's user); a node must be theirs.
            metadata: More metadata for the facts, given or extracted (not the nodes).
            on_progress: Called with ``(phase, done, total)`` as batches are embedded and stored.

        Returns:
            What was stored, by memory id: new, changed (with the metadata they had) and
            unchanged (already stored as given: storing twice writes nothing); for messages,
            the facts extracted (the same conversation again: unchanged).

        Raises:
            InvalidInputError: A fact that is empty, too long or not one line of text; a date
                that cannot be read; one memory given twice; other text or another user
                under a stored memory's id; a node superseding another user's memory; a
                ``user_id`` other than this object's, or a node of another user than the one
                written for; chat messages on an object without an LLM, mixed with memories,
                with a role or content no message has, or a ``metadata`` key the writer sets.
            FutureMemoryDateError: A fact (or conversation) dated after tomorrow.
            RetryableWriteError: The LLM call failed (messages); nothing was stored.
            FinalWriteError: The LLM answered but no valid fact came of it (messages).
            PartialWriteError: A batch failed; it says how many memories were stored.
        """
        user = self._user(user_id)
        given = to_add(data, date, user, self.user_name, metadata, has_llm=self.llm is not None)
        nodes = given.nodes if given.turns is None else given.with_metadata(extract_memories(
            given.turns, self._llm(None), memory_date=date, user_name=self.user_name,
            user_id=user, index=self.index))
        stored = insert_memories(self.index, nodes, on_progress=on_progress,
                                 said_at=given.said_at)
        refit_after_write(self.index, min_memories=self.min_fit_memories, users=(user,))
        return stored

    def update(self, memory_id: str, text: str, memory_date: MemoryDate, *,
               user_id: Optional[str] = None, **node_options: Any) -> TextNode:
        """Store a new version of a memory: a fact that supersedes it (the old one is kept).

        Args:
            memory_id: The memory to update (of this object's user, when it has one).
            text: The new fact.
            memory_date: Its date, no earlier than the old memory's.
            user_id: Whose memory it is (default: this object's user).
            node_options: More arguments for :func:`memory_node` (``user_name``, ``metadata``).

        Returns:
            The new memory, as stored.

        Raises:
            MemoryNotFoundError: No such memory (of this user).
            InvalidInputError: A date before the old memory's, a fact or date
                :func:`memory_node` refuses, or a ``user_id`` other than this object's.
            FutureMemoryDateError: A date after tomorrow (without ``allow_future=True`` in
                ``node_options``).
        """
        node_options.setdefault("user_name", self.user_name)
        updated = update_memory(self.index, memory_id, text, memory_date,
                                user_id=(user := self._user(user_id)), **node_options)
        refit_after_write(self.index, min_memories=self.min_fit_memories, users=(user,))
        return updated

    def forget(
        self,
        ids: Optional[Sequence[str]] = None,
        *,
        user_id: Optional[str] = None,
        before: Optional[MemoryDate] = None,
        filters: Optional[MetadataFilters] = None,
    ) -> int:
        """Delete memories for real, keeping every chain of versions whole.

        Selects the memories with ``ids`` AND of ``user_id`` AND dated before ``before`` AND
        matching ``filters``, always within this object's user. At least one of them is
        required, so nothing deletes a whole user by accident: pass ``user_id`` to forget
        one (their conversations waiting in the outbox go too).

        Returns:
            How many memories were deleted.

        Raises:
            InvalidInputError: No condition given, or a ``user_id`` other than this object's.
        """
        if ids is None and user_id is None and before is None and memory_scope(
                filters=filters) is None:
            raise InvalidInputError(
                f"forget needs ids, user_id, before or filters with a condition, "
                f"got filters={filters!r}; it never deletes everything")
        return forget(self.index, ids, user_id=self._user(user_id), before=before,
                      filters=filters)

    def remember(
        self,
        turns: Sequence[Turn],
        *,
        user_id: Optional[str] = None,
        memory_date: Optional[MemoryDate] = None,
        llm: Optional[LLM] = None,
        allow_future: bool = False,
    ) -> list[TextNode]:
        """Extract dated facts from a conversation with the LLM and store them.

        Args:
            turns: The conversation, e.g. ``[Turn("user", "I've switched to green tea.")]``.
            memory_date: The conversation's day (default: today).
            llm: The LLM to extract with (default: this object's).
            allow_future: Accept a ``memory_date`` after tomorrow.

        Returns:
            The memories stored (a fact that updates existing ones names them in
            ``supersedes``).

        Raises:
            RetryableWriteError: The LLM call failed; nothing was stored.
            FinalWriteError: The LLM answered but no valid fact came of it.
            FutureMemoryDateError: ``memory_date`` after tomorrow, before any LLM call.
            InvalidInputError: No LLM given here or to the object, a turn that is neither
                a :class:`Turn` nor a ``(role, text)`` pair, or a ``user_id`` other than this
                object's.
        """
        turns = [as_turn(turn) for turn in turns]
        stored = remember(turns, self.index, self._llm(llm), memory_date=memory_date,
                          user_name=self.user_name, user_id=(user_id := self._user(user_id)),
                          allow_future=allow_future)
        refit_after_write(self.index, min_memories=self.min_fit_memories, users=(user_id,))
        return stored

    def import_(self, path: str | os.PathLike[str], *, user_id: Optional[str] = None,
                on_progress: Optional[Progress] = None) -> int:
        """Store the memories of a JSON Lines file written by :meth:`export` (as it holds
        them, users included; for ``user_id``, default this object's user, only theirs).

        Returns:
            How many memories the store did not hold before (0 for a file imported again).

        Raises:
            MemoryFileError: A line that cannot be imported (named), or of another user than
                the one imported for; nothing was stored.
            InvalidInputError: A ``user_id`` other than this object's.
            PartialWriteError: A batch failed; it says how many were stored.
            OSError: ``path`` cannot be read.
        """
        new = import_memories(self.index, path, user_id=(user_id := self._user(user_id)),
                              on_progress=on_progress)
        refit_after_write(self.index, min_memories=self.min_fit_memories, users=(user_id,))
        return new

    # --- reading ----------------------------------------------------------------------

    def search(self, query: str, *, user_id: Optional[str] = None, limit: Optional[int] = None,
               filters: Optional[MetadataFilters] = None) -> RecencyRanking:
        """Rank the memories for ``query`` exactly: cosine + recency bonus over the whole
        store (``user_id``'s part, default this object's user; ``filters`` narrowing it),
        gated by the policy's threshold, at most ``limit`` kept (default the policy's
        ``top_n``).

        Returns:
            The ranking: ``nodes`` are the memories that pass (each node's score its final
            score), ``rows`` every candidate with its raw score, age, bonus, final score and
            verdict; ``str()`` of it is a table.

        Raises:
            InvalidInputError: ``query`` is not text, is blank, or holds a lone surrogate; a
                ``limit`` that is not a whole number >= 1; a ``user_id`` other than this
                object's.
        """
        check_question(query)
        user = self._user(user_id)
        check_limit(limit)
        if limit is not None or filters is not None:  # the user's own gate, as without them
            top = {} if limit is None else {"top_n": limit}
            given = None if self._policy is None else self._policy.model_copy(update=top)
            return self.retriever(user_id=user, policy=given, filters=filters,
                                  **(top if given is None else {})).explain(query)
        # One retriever per user and fit size while the policy stays: it counts the store once
        # and follows its gate, instead of a new one (and a count) per search.
        kept = self._searchers.get((user, self.min_fit_memories))
        if kept is None or kept[0] is not self._policy:
            kept = self._searchers[user, self.min_fit_memories] = (
                self._policy, self.retriever(user_id=user))
        return kept[1].explain(query)

    def get(self, memory_id: str, *, user_id: Optional[str] = None) -> BaseNode:
        """The memory ``memory_id`` (of ``user_id``, default this object's user, when there
        is one).

        Raises:
            MemoryNotFoundError: No such memory (of this user).
            InvalidInputError: A ``user_id`` other than this object's.
        """
        return get_memory(self.index, memory_id, user_id=self._user(user_id))

    def get_all(self, *, user_id: Optional[str] = None, limit: Optional[int] = None,
                filters: Optional[MetadataFilters] = None) -> list[BaseNode]:
        """The memories of ``user_id`` (default: this object's user; none, all) matching
        ``filters``, newest first (the ``limit`` newest), with their vectors.

        Raises:
            InvalidInputError: A ``user_id`` other than this object's, or a ``limit`` that is
                not a whole number >= 1.
        """
        check_limit(limit)
        found = get_memories(self.index, filters=filters, user_id=self._user(user_id))
        return found if limit is None else found[:limit]

    def history(self, memory_id: str, *, user_id: Optional[str] = None) -> list[BaseNode]:
        """Every version of the fact a memory holds, oldest first: the memories it
        supersedes and those superseding it, transitively, within its user.

        Raises:
            MemoryNotFoundError: No such memory (of this user).
            InvalidInputError: A ``user_id`` other than this object's.
        """
        return memory_history(self.index, memory_id, user_id=self._user(user_id))

    def export(self, path: str | os.PathLike[str], *, user_id: Optional[str] = None,
               with_embeddings: bool = False) -> int:
        """Write ``user_id``'s memories (default this object's user; all, without a user) to
        ``path`` as JSON Lines, atomically; ``with_embeddings`` keeps the vectors so an
        import need not embed.

        Returns:
            How many memories were written.

        Raises:
            InvalidInputError: A stored memory without a readable date its text starts with
                (only :func:`memory_node`'s can be exported), or ``with_embeddings`` on a
                store that records no embedding model, or a ``user_id`` other than this
                object's; ``path`` is left as it was.
            OSError: ``path`` cannot be written (it is left as it was).
        """
        return export_memories(self.index, path, user_id=self._user(user_id),
                               with_embeddings=with_embeddings)

    # --- integrations -----------------------------------------------------------------

    def retriever(self, *, user_id: Optional[str] = None, **kwargs: Any
                  ) -> QdrantRecencyRetriever:
        """The exact recency retriever over this store's (``user_id``'s, default this object's
        user's) memories, with this policy; ``kwargs`` go to :class:`QdrantRecencyRetriever`
        (``policy``, ``filters``, ``vague_window_days``).

        Raises:
            InvalidInputError: A ``user_id`` other than this object's.
        """
        kwargs.setdefault("min_fit_memories", self.min_fit_memories)
        return QdrantRecencyRetriever.from_index(self.index, kwargs.pop("policy", self._policy),
                                                 user_id=self._user(user_id), **kwargs)

    def as_memory_block(self, **kwargs: Any) -> RecencyMemoryBlock:
        """An agent memory block reading (and, with an LLM, writing) this user's memories;
        ``kwargs`` go to :class:`RecencyMemoryBlock` (``name``, ``background``, ...). A
        ``user_id`` other than this object's raises InvalidInputError."""
        options: dict[str, Any] = {"index": self.index, "policy": self._policy,
                                   "user_id": self._user(kwargs.pop("user_id", None)),
                                   "user_name": self.user_name,
                                   "llm": self.llm, "min_fit_memories": self.min_fit_memories}
        return RecencyMemoryBlock(**{**options, **kwargs})

    def chat_engine(self, *, llm: Optional[LLM] = None, user_id: Optional[str] = None,
                    **kwargs: Any) -> RecencyChatEngine:
        """A chat engine answering from ``user_id``'s memories (default this object's user),
        one LLM call per message.

        ``kwargs`` go to :meth:`RecencyChatEngine.from_defaults` (``system_prompt``,
        ``today``; default today: the policy's reference date, else the current date).

        Raises:
            InvalidInputError: No LLM given here or to the object.
        """
        reference = self.policy.reference_date
        kwargs.setdefault("today", None if callable(reference) else reference)
        return RecencyChatEngine.from_defaults(retriever=self.retriever(user_id=user_id),
                                               llm=self._llm(llm), **kwargs)

    # --- fitting ----------------------------------------------------------------------

    def calibrate(self, *, save: bool = False, max_bring_up: float = MAX_BRING_UP) -> GateFit:
        """Fit the relevance threshold on this store from the shipped off-topic questions.

        Args:
            save: Also save the fitted policy with the store and rank with it from now on.
            max_bring_up: The largest share of off-topic questions allowed to bring a memory.

        Returns:
            The fit: its ``threshold``, and ``summary(current)`` comparing a threshold.

        Raises:
            InvalidInputError: The store (this user's part) is empty, or ``save`` on an object
                bound to a user (the saved policy ranks every user's questions).
        """
        if save and self.user_id is not None:
            raise InvalidInputError(
                f"calibrate(save=True) saves the whole store's policy, and this memory is bound "
                f"to user {self.user_id!r}: save it from a RecencyMemory without a user_id")
        fit = calibrate_gate(self.index, self.policy, max_bring_up=max_bring_up,
                             user_id=self.user_id)
        if save:
            self.policy = fit.policy(self.policy)
            save_policy(self.index, self.policy)
        return fit

    # --- lifetime ---------------------------------------------------------------------

    def close(self) -> None:
        """Release the store (its lock) for another process; its blocks' writers stop."""
        close_memory_index(self.index)

    def __enter__(self) -> RecencyMemory:
        return self

    def __exit__(self, kind: Optional[type[BaseException]], error: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        self.close()

    aadd = in_thread(add)
    aupdate = in_thread(update)
    aforget = in_thread(forget)
    aremember = in_thread(remember)
    aimport_ = in_thread(import_)
    asearch = in_thread(search)
    aget = in_thread(get)
    aget_all = in_thread(get_all)
    ahistory = in_thread(history)
    aexport = in_thread(export)
    acalibrate = in_thread(calibrate)

    def _llm(self, llm: Optional[LLM]) -> LLM:
        if (chosen := llm or self.llm) is None:
            raise InvalidInputError("no LLM: pass llm= to RecencyMemory or to this call")
        return chosen

    def _user(self, user_id: Optional[str]) -> Optional[str]:
        return call_user(self.user_id, user_id)

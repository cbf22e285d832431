"""A retriever that returns the top memories by cosine + recency bonus over the whole store, exactly.

The top-8-then-re-rank window of :class:`RecencyBonusPostprocessor` can lose a memory
for good: one ranked 9th by raw cosine never gets its bonus. This retriever runs the
exact search of :mod:`llama_index_recency.ranking.plan` (a few plain cosine searches whose
results bound everything they did not return) and ranks with the same
:class:`RecencyPolicy`, so it keeps exactly what the postprocessor would keep if it saw
every memory. It works on Qdrant Edge (the embedded default), a Qdrant server and
stores written by 0.1.0 (qdrant-client's local mode); each engine only translates the
search request.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from datetime import date
from typing import Any, List, Optional, Sequence

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager
from llama_index.core.indices.vector_store import VectorStoreIndex
from llama_index.core.schema import NodeWithScore, QueryBundle, QueryType
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
)
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import models

from llama_index_recency.errors import InvalidInputError
from llama_index_recency.models.cohort import QueryScale, cached_embeddings, relevance_cohort
from llama_index_recency.storage.edge import QdrantEdgeVectorStore
from llama_index_recency.storage.engine import (
    arun_search,
    has_async_client,
    is_local,
    payload_indexes,
    run_search,
    sync_client,
)
from llama_index_recency.ranking.events import dispatch_ranking
from llama_index_recency.storage.filters import memory_scope, to_qdrant_filter
from llama_index_recency.ranking.successors import with_successors
from llama_index_recency.ranking.news import about_the_news, asks_about_the_news
from llama_index_recency.records.nodes import SeveralUsersWarning
from llama_index_recency.fitting.gate_fit import (
    BANK_LANGUAGES,
    MIN_FIT_MEMORIES,
    REFIT_RATIO,
    GateFit,
    fit_gate,
    noise_margin,
    offtopic_questions,
    refit_due,
)
from llama_index_recency.ranking.intent import question_intent
from llama_index_recency.ranking.ranked import RecencyRanking
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.ranking.plan import (
    SearchPlan,
    dated_filter,
    exact_recency_search,
    reusing_link_searches,
)
from llama_index_recency.ranking.supersession import with_newer_versions
from llama_index_recency.storage.store import (
    MemoryVectorStore,
    collection_metadata,
    count_memories,
    embedding_identity,
    gate_record,
    gate_refusal,
    has_saved_policy,
    index_policy,
    policy_records,
    save_gate_fit,
    save_gate_refusal,
    vector_store_of,
)
from llama_index_recency.ranking.vague import VAGUE_WINDOW_DAYS, is_vague_reference, with_recent

logger = logging.getLogger(__name__)

_OPEN = -1e9  # a threshold every memory passes: the search then returns the best one

STORE_CHECK_SECONDS = 60.0
"""How often a retriever over a Qdrant server or qdrant-client's local mode reads the store's
saved gate and size (its collection metadata and count); an in-process Edge store is read at
every question."""

_clock = time.monotonic  # the throttle's clock, one name for tests to move


class QdrantRecencyRetriever(BaseRetriever):
    """Retrieve memories ranked by ``cosine + weight * exp(-age_days / tau_days)``, exactly.

    Returns what :class:`RecencyBonusPostprocessor` with the same ``policy`` would keep if
    it saw every memory in scope: at most ``top_n`` nodes with final score >=
    ``threshold``, each node's score its final score. ``filters`` and ``user_id`` scope
    every search (they are applied inside the engine, never after); without ``user_id``,
    meeting memories of several users logs one warning.

    A vague reference ("How did that thing you were working on go?",
    :func:`~llama_index_recency.ranking.vague.is_vague_reference`) scores high against no memory,
    so it takes its own path: the places left under ``top_n`` go to the memories dated
    within ``vague_window_days`` (best cosine + bonus first, whatever their score), so the
    character can ask back which one is meant; the ranking says ``vague=True`` and the
    nodes carry :data:`~llama_index_recency.ranking.vague.VAGUE_REFERENCE_KEY` for the prompt.
    ``vague_window_days=None`` turns that path off.

    Built by :meth:`from_index` without a policy, it ranks with the store's own
    (:func:`~llama_index_recency.storage.store.index_policy`) and keeps the store's gate fitted: a
    store grown to ``min_fit_memories`` (then to :data:`~llama_index_recency.fitting.gate_fit.REFIT_RATIO`
    times its last fit) is refitted on a background thread (:func:`refit_store_gate`)
    while questions are ranked with the current gate, and a fit saved by any writer is
    adopted at the next question (:meth:`wait_for_refit` waits for it). A Qdrant Edge store
    is read for this at every question; a server or local-mode store at most every
    ``check_store_every`` seconds (a store with only an async client is not followed).
    """

    def __init__(
        self,
        vector_store: BasePydanticVectorStore,
        embed_model: BaseEmbedding,
        policy: Optional[RecencyPolicy] = None,
        *,
        filters: Optional[MetadataFilters] = None,
        user_id: Optional[str] = None,
        vague_window_days: Optional[float] = VAGUE_WINDOW_DAYS,
        callback_manager: Optional[CallbackManager] = None,
        min_fit_memories: int = MIN_FIT_MEMORIES,
        check_store_every: float = STORE_CHECK_SECONDS,
    ) -> None:
        """``policy`` holds the parameters (a ``RecencyBonusPostprocessor`` is one);
        ``min_fit_memories``: the store size at which a retriever following the store's own
        policy fits its gate; ``check_store_every``: seconds between two reads of a server
        or local-mode store's gate and size (0: at every question)."""
        super().__init__(callback_manager=callback_manager)
        if vague_window_days is not None and not 0 < vague_window_days < float("inf"):
            raise InvalidInputError(
                f"vague_window_days must be > 0 days or None, got {vague_window_days!r}")
        self._vector_store = vector_store_of(vector_store)  # Edge or Qdrant, else one line
        self._embed_model = embed_model
        self._policy = policy or RecencyPolicy()
        self._filters = memory_scope(user_id=user_id, filters=filters)
        self._several_users = SeveralUsersWarning(type(self).__name__, scoped=user_id is not None)
        self._vague_window_days = vague_window_days
        self._ready = False
        self._min_fit_memories = min_fit_memories
        self._follows_store = False  # set by from_index without a policy
        self._adopted: Any = None  # the store's saved policy and gate fit the policy came from
        self._next_try = 0  # fewest memories before this retriever launches a refit again
        self._refit: Optional[_Refit] = None
        if not 0 <= check_store_every < float("inf"):
            raise InvalidInputError(
                f"check_store_every must be >= 0 seconds, got {check_store_every!r}")
        self._check_every = check_store_every
        self._checked: Optional[float] = None  # when a server store was last read (monotonic)

    @classmethod
    def from_index(
        cls,
        index: VectorStoreIndex,
        policy: Optional[RecencyPolicy] = None,
        **kwargs: Any,
    ) -> "QdrantRecencyRetriever":
        """The retriever over a memory index from ``open_memory_index``, with its embedding model.

        Without ``policy`` it ranks with the store's own (:func:`~llama_index_recency.storage.store.index_policy`:
        calibrated and saved with it, else its model's shipped one, else the defaults).
        """
        # VectorStoreIndex keeps its embedding model private; its own as_retriever reads it too.
        if policy is not None:
            return cls(index.vector_store, index._embed_model, policy=policy, **kwargs)
        metadata = collection_metadata(index)
        retriever = cls(index.vector_store, index._embed_model, policy=index_policy(metadata),
                        **kwargs)
        retriever._follows_store = True
        retriever._adopted = policy_records(metadata)
        return retriever

    @property
    def policy(self) -> RecencyPolicy:
        """The recency parameters this retriever ranks with."""
        return self._policy

    def wait_for_refit(self) -> Optional[GateFit]:
        """Wait for the gate refit this retriever launched (if any) and rank with its result
        from now on; returns the fit (None: none ran, or it failed)."""
        refit = self._refit
        if refit is None:
            return None
        refit.wait()
        self._follow_store(read_now=True)
        return refit.fit

    def explain(self, query: QueryType) -> RecencyRanking:
        """The ranking behind :meth:`retrieve`: every memory seen that could pass, with its numbers.

        Its ``nodes`` are what :meth:`retrieve` returns; its rows are what
        ``RecencyBonusPostprocessor.explain`` shows for the same candidates. Each ranking is
        also dispatched as a :class:`~llama_index_recency.ranking.events.MemoryRankingEvent`.
        """
        bundle = _bundle(query)
        ranking = self._explain(bundle)
        dispatch_ranking(self._policy_for(bundle), ranking)
        return ranking

    async def aexplain(self, query: QueryType) -> RecencyRanking:
        """Async :meth:`explain`. Without an async client (Edge, qdrant-client's local mode)
        the searches run inline, as those engines' own async methods do; the question is
        still embedded asynchronously."""
        bundle = _bundle(query)
        ranking = await self._aexplain(bundle)
        dispatch_ranking(self._policy_for(bundle), ranking)
        return ranking

    def _explain(self, bundle: QueryBundle) -> RecencyRanking:
        self._follow_store()
        if not self._prepare():
            return RecencyRanking(rows=(), nodes=(), relevance=self._policy.relevance)
        vector = self._embed(bundle)
        return self._drive(self._plan(bundle), vector, self._scale(vector))

    async def _aexplain(self, bundle: QueryBundle) -> RecencyRanking:
        if has_async_client(self._vector_store):  # its reads are sync: off the event loop
            await asyncio.to_thread(self._follow_store)
        else:
            self._follow_store()
        empty = RecencyRanking(rows=(), nodes=(), relevance=self._policy.relevance)
        if not has_async_client(self._vector_store):
            vector = await self._aembed(bundle)
            if not self._prepare():
                return empty
            return self._drive(self._plan(bundle), vector, self._scale(vector))
        if not await self._aprepare():
            return empty
        vector = await self._aembed(bundle)
        return await self._adrive(self._plan(bundle), vector, self._scale(vector))

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return list(self.explain(query_bundle).nodes)

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return list((await self.aexplain(query_bundle)).nodes)

    # --- one plan, two drivers ---------------------------------------------------------------

    def _plan(self, bundle: QueryBundle) -> SearchPlan:
        """The question's search plan (:meth:`_steps`), its repeated link searches answered once."""
        return reusing_link_searches(self._steps(bundle))

    def _steps(self, bundle: QueryBundle) -> SearchPlan:
        """The exact ranking with the bonus the question's intent calls for, newer versions
        placed before the older ones they repeat, each superseded memory's newest linked
        successor placed before it, then for a vague reference the recent memories in the
        places left; for a question about the news, no memory."""
        policy = self._policy.for_question(bundle.query_str)
        reference = policy.reference()
        ranking = yield from exact_recency_search(policy, reference, self._filters)
        ranking = self._policy.asked(ranking, bundle.query_str)
        ranking = yield from with_newer_versions(ranking, policy, reference, self._filters)
        ranking = yield from with_successors(ranking, policy, reference, self._filters)
        if self._vague_window_days is not None and is_vague_reference(bundle.query_str):
            ranking = yield from with_recent(ranking, policy, reference, self._filters,
                                             self._vague_window_days)
        return about_the_news(ranking, bundle.query_str)

    def _policy_for(self, bundle: QueryBundle) -> RecencyPolicy:
        """The policy a question is ranked with (:meth:`RecencyPolicy.for_question`)."""
        return self._policy.for_question(bundle.query_str)

    def _follow_store(self, read_now: bool = False) -> None:
        """Following the store's policy: adopt a gate (or explicit policy) saved since, and
        refit when the store grew enough for one: on a background thread, but in this
        thread for qdrant-client's local mode, which is not safe to use from two threads."""
        store = self._vector_store
        if not self._follows_store or not (read_now or self._store_read_due(store)):
            return
        metadata = collection_metadata(store)
        records = policy_records(metadata)
        if records != self._adopted:
            self._policy, self._adopted = index_policy(metadata), records
        if self._refit is not None and self._refit.running():
            return
        memories = count_memories(store)
        if memories < self._next_try or not _due(metadata, self._min_fit_memories, memories):
            return
        self._next_try = math.ceil(REFIT_RATIO * memories)  # a failed or refused fit waits
        embed_model, least = self._embed_model, self._min_fit_memories
        inline = not isinstance(store, QdrantEdgeVectorStore) and is_local(store.client)
        self._refit = _Refit(lambda: refit_store_gate(store, embed_model, min_memories=least),
                             background=not inline)
        if inline:
            self._follow_store(read_now=True)  # adopt it for this question already

    def _store_read_due(self, store: MemoryVectorStore) -> bool:
        """Whether to read the store's gate and size now: an Edge store always (in process),
        a server or local-mode store every ``check_store_every`` seconds, async-only never."""
        if isinstance(store, QdrantEdgeVectorStore):
            return True
        if store.client is None:
            return False
        now = _clock()
        if self._checked is not None and now - self._checked < self._check_every:
            return False
        self._checked = now
        return True

    def _scale(self, vector: List[float]) -> Optional[QueryScale]:
        """The question's cohort scale when the policy is in cohort units, else None (cosine)."""
        if self._policy.relevance == "cosine":
            return None
        return relevance_cohort(self._embed_model).scale(vector)

    def _drive(
        self, plan: SearchPlan, vector: List[float], scale: Optional[QueryScale]
    ) -> RecencyRanking:
        """Run the plan on the engine; with a cohort scale every result's cosine is moved to
        the policy's units first (one affine map per question, so the plan stays exact)."""
        try:
            search = next(plan)
            while True:
                results = run_search(self._vector_store, search, vector,
                                     self._policy.date_key, scale)
                self._several_users.check(n.node for n in results)
                search = plan.send(results)
        except StopIteration as done:
            return done.value

    async def _adrive(
        self, plan: SearchPlan, vector: List[float], scale: Optional[QueryScale]
    ) -> RecencyRanking:
        try:
            search = next(plan)
            while True:
                results = await arun_search(self._vector_store, search, vector,
                                            self._policy.date_key, scale)
                self._several_users.check(n.node for n in results)
                search = plan.send(results)
        except StopIteration as done:
            return done.value

    # --- collection checks, done once --------------------------------------------------------

    def _prepare(self) -> bool:
        """Check the store once; False while it is empty (or its collection does not exist)."""
        store = self._vector_store
        if isinstance(store, QdrantEdgeVectorStore):
            if not self._ready:
                self._check_counts(store.count(), store.count(filters=self._dated_filters))
            return self._ready
        client = sync_client(store)
        if not self._ready and client.collection_exists(store.collection_name):
            if not is_local(client):
                for key, schema in payload_indexes(self._policy.date_key):
                    client.create_payload_index(store.collection_name, key, field_schema=schema)
            self._check_counts(
                client.count(store.collection_name, exact=True).count,
                client.count(store.collection_name, count_filter=self._dated(), exact=True).count,
            )
        return self._ready

    async def _aprepare(self) -> bool:
        """Async :meth:`_prepare` (for a store with an async Qdrant client)."""
        store = self._vector_store
        assert isinstance(store, QdrantVectorStore)
        client = store._aclient
        if not self._ready and await client.collection_exists(store.collection_name):
            if not is_local(client):
                for key, schema in payload_indexes(self._policy.date_key):
                    await client.create_payload_index(
                        store.collection_name, key, field_schema=schema
                    )
            self._check_counts(
                (await client.count(store.collection_name, exact=True)).count,
                (await client.count(
                    store.collection_name, count_filter=self._dated(), exact=True
                )).count,
            )
        return self._ready

    def _check_counts(self, total: int, dated: int) -> None:
        """Ready once there is a memory; a store of undated points is someone else's."""
        if total and not dated:
            raise InvalidInputError(
                f"the store has memories but none with a datetime under payload key "
                f"{self._policy.date_key!r}: it was not written by llama-index-recency "
                "(memory_node / open_memory_index), or date_key is wrong"
            )
        self._ready = total > 0

    @property
    def _dated_filters(self) -> MetadataFilters:
        return dated_filter(self._policy.date_key)

    def _dated(self) -> models.Filter:
        return to_qdrant_filter(self._dated_filters)

    # --- plumbing ------------------------------------------------------------------------------

    def _embed(self, bundle: QueryBundle) -> List[float]:
        if bundle.embedding is None:
            bundle.embedding = self._embed_model.get_agg_embedding_from_queries(
                bundle.embedding_strs
            )
        return bundle.embedding

    async def _aembed(self, bundle: QueryBundle) -> List[float]:
        if bundle.embedding is None:
            bundle.embedding = await self._embed_model.aget_agg_embedding_from_queries(
                bundle.embedding_strs
            )
        return bundle.embedding


# --- the store's own gate --------------------------------------------------------------------


def offtopic_best(
    store: BasePydanticVectorStore,
    embed_model: BaseEmbedding,
    policy: RecencyPolicy,
    *,
    questions: Optional[Mapping[str, Sequence[str]]] = None,
    user_id: Optional[str] = None,
    filters: Optional[MetadataFilters] = None,
) -> dict[str, list[float]]:
    """Per language, each off-topic question's best final score on the store (default: the
    shipped bank), ranked with ``policy`` by the exact retriever inside the scope, less the
    threshold's rise for a question about the present."""
    retriever = QdrantRecencyRetriever(
        store, embed_model,
        # Every memory passes and no newer version is moved first; a linked successor may
        # still be, so the best final score is taken over all nodes returned.
        policy.model_copy(update={"threshold": _OPEN, "top_n": 1, "language_thresholds": {},
                                  "supersede_margin": None}),
        user_id=user_id, filters=filters,
    )
    banks = questions or {lang: offtopic_questions(lang) for lang in BANK_LANGUAGES}
    identity = embedding_identity(vector_store_of(store)) or {}
    best: dict[str, list[float]] = {}
    for lang, asked in banks.items():
        texts = [text for text in asked if not asks_about_the_news(text)]  # they bring nothing
        vectors = cached_embeddings(embed_model, list(texts), query=True,
                                    dimensions=identity.get("dimensions"))
        for text, vector in zip(texts, vectors, strict=True):
            nodes = retriever.retrieve(QueryBundle(query_str=text, embedding=vector.tolist()))
            if not nodes:
                raise InvalidInputError(
                    "the store (or this user's part of it) is empty: there is no "
                    "gate to fit")
            # A question about the present meets a threshold raised by its larger bonus:
            # its score is recorded against the policy's own threshold.
            raised = policy.for_intent(question_intent(text)).threshold - policy.threshold
            best.setdefault(lang, []).append(
                max(float(n.score or 0.0) for n in nodes) - raised)
    return best


def refit_store_gate(
    store: BasePydanticVectorStore,
    embed_model: BaseEmbedding,
    *,
    min_memories: int = MIN_FIT_MEMORIES,
    ratio: float = REFIT_RATIO,
    check: bool = False,
    today: Optional[date] = None,
) -> Optional[GateFit]:
    """Fit the store's own gate when it is due and save it (``store.save_gate_fit``).

    Due: no explicit policy is saved (``save_policy`` wins, always), the store holds
    ``min_memories`` and was never fitted in its policy's units or holds ``ratio`` times the
    memories of its last fit, or (``check``) the current gate lets more than the share of
    the bank in. Returns the fit (None: not due); a fit whose
    :attr:`~llama_index_recency.fitting.gate_fit.GateFit.refused` says why is logged and not saved,
    the previous gate stays. One fit at a time per store.
    """
    vectors = vector_store_of(store)
    with _fit_lock(vectors):
        memories = count_memories(vectors)
        metadata = collection_metadata(vectors)
        if has_saved_policy(metadata) or memories < min_memories:
            return None
        policy = index_policy(metadata)
        best = None
        if not _due(metadata, min_memories, memories, ratio):
            if not check:
                return None
            best = offtopic_best(vectors, embed_model, policy)
            if not fit_gate(best, margin=noise_margin(policy)).lets_too_many_in(policy):
                return None
        best = best or offtopic_best(vectors, embed_model, policy)
        fit = fit_gate(best, margin=noise_margin(policy))
        if fit.refused:
            logger.warning("%s; the gate stays %s", fit.refused, policy.threshold_origin)
            save_gate_refusal(vectors, policy.relevance, memories)
            return fit
        save_gate_fit(vectors, policy.relevance, fit.thresholds, memories, today or date.today())
        return fit


def _due(metadata: Mapping[str, Any], min_memories: int, memories: int,
         ratio: float = REFIT_RATIO) -> bool:
    """Whether a store of ``memories`` with this collection ``metadata`` is due for a fit by
    its size (:func:`refit_due`)."""
    if memories < min_memories:
        return False
    if has_saved_policy(metadata):
        return False
    units = index_policy(metadata).relevance
    tried = [record["memories"] for record in (gate_record(metadata), gate_refusal(metadata))
             if record and record.get("relevance") == units]
    return refit_due(memories, max(tried, default=None), min_memories, ratio)


_FIT_LOCKS: dict[int, threading.Lock] = {}
_FIT_LOCKS_GUARD = threading.Lock()


def _fit_lock(store: MemoryVectorStore) -> threading.Lock:
    """The lock that lets one gate fit run at a time on ``store``."""
    with _FIT_LOCKS_GUARD:
        return _FIT_LOCKS.setdefault(id(store), threading.Lock())


class _Refit:
    """A gate fit on a background thread (or run at once): a failure is one warning line,
    never the caller's. Not a daemon: a process exiting mid-fit waits the few seconds a fit
    takes, instead of cutting the thread inside the engine."""

    def __init__(self, fit: Callable[[], Optional[GateFit]], background: bool = True) -> None:
        self.fit: Optional[GateFit] = None
        self._run = fit
        self._thread: Optional[threading.Thread] = None
        if background:
            self._thread = threading.Thread(target=self._work, name="gate-refit")
            self._thread.start()
        else:
            self._work()

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def _work(self) -> None:
        try:
            self.fit = self._run()
        except Exception as error:  # noqa: BLE001 - a refit never breaks a turn
            logger.warning("the gate was not refitted: %s: %s", type(error).__name__, error)


def _bundle(query: QueryType) -> QueryBundle:
    return QueryBundle(query_str=query) if isinstance(query, str) else query

"""A retriever returning the top memories by cosine + recency bonus over the whole store, exactly.

The top-8-then-re-rank window of :class:`RecencyBonusPostprocessor` can lose a memory
for good: one ranked 9th by raw cosine never gets its bonus. This retriever runs the
exact search of :mod:`llama_index_recency.querying.exact` (a few plain cosine searches whose
results bound everything they did not return) and ranks with the same
:class:`RecencyPolicy`, so it keeps exactly what the postprocessor would keep if it saw
every memory. It works on Qdrant Edge (the embedded default), a Qdrant server and
qdrant-client local-mode stores (written by 0.1.0); each engine only translates the
search request.
"""

from __future__ import annotations

import logging
import math
import weakref
from typing import Any, List, Optional

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager
from llama_index.core.indices.vector_store import VectorStoreIndex
from llama_index.core.schema import NodeWithScore, QueryBundle, QueryType
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
)

from llama_index_recency.errors import InvalidInputError
from llama_index_recency.fitting.gate_fit import (
    MIN_FIT_MEMORIES,
    REFIT_RATIO,
    GateFit,
)
from llama_index_recency.querying.exact import ExactSearch
from llama_index_recency.querying.gate import (
    STORE_CHECK_SECONDS,
    Refit,
    StoreReads,
    due_by_size,
    refit_store_gate,
)
from llama_index_recency.ranking.events import dispatch_ranking, listening
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.ranking.ranked import RecencyRanking
from llama_index_recency.ranking.vague import VAGUE_WINDOW_DAYS
from llama_index_recency.records.nodes import SeveralUsersWarning
from llama_index_recency.storage import (
    QdrantEdgeVectorStore,
    collection_metadata,
    count_memories,
    embedding_of,
    has_async_client,
    index_policy,
    is_local,
    made_here,
    memory_scope,
    policy_records,
)
from llama_index_recency.twins import in_thread

logger = logging.getLogger(__name__)


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
    (:func:`~llama_index_recency.storage.metadata.index_policy`) and keeps the store's gate
    fitted (with ``user_id``, the user's own, fitted on their memories alone, so no other
    user's memories move it): a store grown to ``min_fit_memories`` (then to
    :data:`~llama_index_recency.fitting.gate_fit.REFIT_RATIO` times its last fit) is refitted
    on a background thread (:func:`refit_store_gate`) while questions are ranked with the
    current gate, and a fit saved by any writer is adopted at the next question
    (:meth:`wait_for_refit` waits for it). A Qdrant Edge store is read for this at every
    question; a server or local-mode store at most every ``check_store_every`` seconds (a
    store with only an async client is not followed).
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
        or local-mode store's gate and size (0: at every question).

        Raises:
            InvalidInputError: ``vague_window_days`` is not a finite number of days above 0
                (nor None), or ``check_store_every`` not a finite number of seconds >= 0.
            UnsupportedStoreError: ``vector_store`` is neither Qdrant Edge nor Qdrant.
        """
        super().__init__(callback_manager=callback_manager)
        if vague_window_days is not None and not 0 < vague_window_days < float("inf"):
            raise InvalidInputError(
                f"vague_window_days must be > 0 days or None, got {vague_window_days!r}")
        self._search = ExactSearch(
            vector_store, embed_model, policy or RecencyPolicy(),
            filters=memory_scope(user_id=user_id, filters=filters),
            several_users=SeveralUsersWarning(type(self).__name__, scoped=user_id is not None),
            vague_window_days=vague_window_days,
        )
        self._min_fit_memories = min_fit_memories
        self._user_id = user_id  # whose gate it follows (None: the store's)
        self._follows_store = False  # set by from_index without a policy
        # from_index's settings over the store's policy, and the index's model
        self._overrides: dict[str, Any] = {}
        self._adopted: Any = None  # the store's saved policy and gate fit the policy came from
        self._next_try = 0  # fewest memories before this retriever launches a refit again
        self._refit: Optional[Refit] = None
        if not 0 <= check_store_every < float("inf"):
            raise InvalidInputError(
                f"check_store_every must be >= 0 seconds, got {check_store_every!r}")
        self._reads = StoreReads(self._search.vector_store, check_store_every)

    @classmethod
    def from_index(
        cls,
        index: VectorStoreIndex,
        policy: Optional[RecencyPolicy] = None,
        **kwargs: Any,
    ) -> "QdrantRecencyRetriever":
        """The retriever over a memory index from ``open_memory_index``, with its embedding model.

        Without ``policy`` it ranks with the store's own
        (:func:`~llama_index_recency.storage.metadata.index_policy`: calibrated and saved with
        it, else its model's shipped one, else the defaults), the policy's settings among
        ``kwargs`` (``date_key=``, ``top_n=``, ...) on top.

        Raises:
            InvalidInputError: A ``vague_window_days`` or ``check_store_every`` in ``kwargs``
                that the constructor refuses.
            UnsupportedStoreError: The index's store is neither Qdrant Edge nor Qdrant.
        """
        if policy is not None:
            return cls(index.vector_store, embedding_of(index), policy=policy, **kwargs)
        metadata = collection_metadata(index)
        user_id, embed_model = kwargs.get("user_id"), embedding_of(index)
        overrides = {name: kwargs.pop(name) for name in list(kwargs)
                     if name in RecencyPolicy.model_fields}  # e.g. date_key=, top_n=
        # A store another program made records no model: the index's names the shipped policy.
        overrides["model"] = embed_model.model_name
        retriever = cls(index.vector_store, embed_model, policy=index_policy(
            metadata, user_id=user_id, **overrides), **kwargs)
        retriever._follows_store, retriever._overrides = True, overrides
        retriever._adopted = policy_records(metadata, user_id)
        if not made_here(index, metadata):
            _only_read(index.vector_store)
        return retriever

    @property
    def policy(self) -> RecencyPolicy:
        """The recency parameters this retriever ranks with."""
        return self._search.policy

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

        Raises:
            InvalidInputError: The store holds memories but none dated under the policy's
                ``date_key`` (it was not written by this package).
        """
        bundle = _bundle(query)
        ranking = self._explain(bundle)
        if listening():
            dispatch_ranking(self._search.policy.for_question(bundle.query_str), ranking)
        return ranking

    async def aexplain(self, query: QueryType) -> RecencyRanking:
        """Async :meth:`explain`. Without an async client (Edge, qdrant-client's local mode)
        the searches run inline, as those engines' own async methods do; the question is
        still embedded asynchronously.

        Raises:
            InvalidInputError: The store holds memories but none dated under the policy's
                ``date_key`` (it was not written by this package).
        """
        bundle = _bundle(query)
        ranking = await self._aexplain(bundle)
        if listening():
            dispatch_ranking(self._search.policy.for_question(bundle.query_str), ranking)
        return ranking

    def _explain(self, bundle: QueryBundle) -> RecencyRanking:
        self._follow_store()
        return self._search.rank(bundle)

    async def _aexplain(self, bundle: QueryBundle) -> RecencyRanking:
        if has_async_client(self._search.vector_store):  # its reads are sync: off the loop
            await in_thread(self._follow_store)()
        else:
            self._follow_store()
        return await self._search.arank(bundle)

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return list(self.explain(query_bundle).nodes)

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return list((await self.aexplain(query_bundle)).nodes)

    def _follow_store(self, read_now: bool = False) -> None:
        """Following the store's policy: adopt a gate (or explicit policy) saved since, and
        refit when the store grew enough for one: on a background thread, but in this
        thread for qdrant-client's local mode, which is not safe to use from two threads."""
        store = self._search.vector_store
        if not self._follows_store or not (read_now or self._reads.due()):
            return
        metadata = collection_metadata(store)
        user = self._user_id
        records = policy_records(metadata, user)
        if records != self._adopted:
            self._search.policy, self._adopted = index_policy(
                metadata, user_id=user, **self._overrides), records
        if not made_here(store, metadata) or (self._refit is not None
                                              and self._refit.running()):
            return
        memories = count_memories(store, user)
        if memories < self._next_try or not due_by_size(metadata, self._min_fit_memories,
                                                        memories, user_id=user):
            return
        self._next_try = math.ceil(REFIT_RATIO * memories)  # a failed or refused fit waits
        embed_model, least = self._search.embed_model, self._min_fit_memories
        inline = not isinstance(store, QdrantEdgeVectorStore) and is_local(store.client)
        self._refit = Refit(lambda: refit_store_gate(store, embed_model, min_memories=least,
                                                     user_id=user),
                            background=not inline)
        if inline:
            self._follow_store(read_now=True)  # adopt it for this question already


_SAID_ONLY_READ: set[int] = set()


def _only_read(store: BasePydanticVectorStore) -> None:
    """Say once per store object that a store another program made is only read."""
    if id(store) in _SAID_ONLY_READ:
        return
    _SAID_ONLY_READ.add(id(store))
    weakref.finalize(store, _SAID_ONLY_READ.discard, id(store))
    logger.warning("collection %r records no embedding model (open_memory_index did not make "
                   "it): it is only read, its gate is not fitted and the shipped threshold "
                   "ranks; open it with open_memory_index(client=...) to let it fit one "
                   "(not said again)", getattr(store, "collection_name", ""))


def _bundle(query: QueryType) -> QueryBundle:
    return QueryBundle(query_str=query) if isinstance(query, str) else query

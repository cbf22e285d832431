"""The exact search over one store: the question's plan, its two drivers, and the store's
one-time preparation, shared by the retriever and the gate.

The plan (:mod:`llama_index_recency.ranking.plan` and the steps after it) does no I/O: it
yields plain cosine searches and receives their results. :meth:`ExactSearch.rank` and
:meth:`ExactSearch.arank` drive it on the engine, sync or async; that is the package's async
convention wherever there is I/O to plan (docs/architecture.md).
"""

from __future__ import annotations

from functools import partial
from typing import Any, List, Optional

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import QueryBundle
from llama_index.core.vector_stores.types import BasePydanticVectorStore, MetadataFilters
from llama_index.vector_stores.qdrant import QdrantVectorStore

from llama_index_recency.errors import EmbeddingMismatchError, InvalidInputError
from llama_index_recency.models.cohort import QueryScale, relevance_cohort
from llama_index_recency.ranking.lexical import (
    LexicalQuery,
    fused,
    question_terms,
    with_lexical_parts,
)
from llama_index_recency.ranking.news import about_the_news
from llama_index_recency.ranking.plan import (
    MemorySentences,
    SearchPlan,
    dated_filter,
    exact_recency_search,
    reusing_link_searches,
)
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.ranking.ranked import RecencyRanking
from llama_index_recency.ranking.small_talk import about_small_talk
from llama_index_recency.ranking.successors import with_successors
from llama_index_recency.ranking.supersession import with_newer_versions
from llama_index_recency.ranking.vague import is_vague_reference, with_recent
from llama_index_recency.records.nodes import SeveralUsersWarning
from llama_index_recency.storage import (
    QdrantEdgeVectorStore,
    QuestionScans,
    SentenceReader,
    arun_search,
    aterm_counts,
    fill_terms,
    has_async_client,
    is_local,
    made_here,
    payload_indexes,
    run_search,
    sync_client,
    term_counts,
    to_qdrant_filter,
    vector_store_of,
)


class ExactSearch:
    """The exact top memories of one store for a question, ranked with :attr:`policy`.

    ``filters`` scope every search inside the engine; ``several_users`` is told every
    memory met (it warns once when an unscoped search meets several users);
    ``vague_window_days`` (None: off) is the window of recent memories a vague reference
    fills the places left with.

    Raises:
        UnsupportedStoreError: ``vector_store`` is neither Qdrant Edge nor Qdrant.
    """

    def __init__(
        self,
        vector_store: BasePydanticVectorStore,
        embed_model: BaseEmbedding,
        policy: RecencyPolicy,
        *,
        filters: Optional[MetadataFilters] = None,
        several_users: Optional[SeveralUsersWarning] = None,
        vague_window_days: Optional[float] = None,
    ) -> None:
        self.vector_store = vector_store_of(vector_store)  # Edge or Qdrant, else one line
        self.embed_model = embed_model
        self.policy = policy
        self.filters = filters
        self._several_users = several_users
        self._vague_window_days = vague_window_days
        self._ready = False
        self._size: Optional[int] = None  # a Qdrant collection's vector size, read once
        # Whether open_memory_index made the store: only then does a search write to it
        # (payload indexes on a server, the memories' terms).
        self._ours = isinstance(self.vector_store, QdrantEdgeVectorStore)
        self._sentences = SentenceReader(self.vector_store)

    def empty(self) -> RecencyRanking:
        """The ranking of a store with no memory."""
        return RecencyRanking(rows=(), nodes=(), relevance=self.policy.relevance)

    def rank(self, bundle: QueryBundle) -> RecencyRanking:
        """The question's ranking: its plan driven on the engine.

        Raises:
            InvalidInputError: the store holds memories but none dated under the policy's
                ``date_key``.
            EmbeddingMismatchError: the question's vector is not the size of the store's.
        """
        if not self._prepare():
            return self.empty()
        vector = self._sized(self._embed(bundle))
        lexical = self._lexical(bundle.query_str)
        return self._drive(self.plan(bundle, vector, lexical), vector, self._scale(vector),
                           self._scans(bundle, vector))

    async def arank(self, bundle: QueryBundle) -> RecencyRanking:
        """Async :meth:`rank`. Without an async client (Edge, qdrant-client's local mode)
        the searches run inline, as those engines' own async methods do; the question is
        still embedded asynchronously.

        Raises:
            InvalidInputError: the store holds memories but none dated under the policy's
                ``date_key``.
            EmbeddingMismatchError: the question's vector is not the size of the store's.
        """
        if not has_async_client(self.vector_store):
            vector = await self._aembed(bundle)
            if not self._prepare():
                return self.empty()
            vector = self._sized(vector)
            lexical = self._lexical(bundle.query_str)
            return self._drive(self.plan(bundle, vector, lexical), vector, self._scale(vector),
                               self._scans(bundle, vector))
        if not await self._aprepare():
            return self.empty()
        vector = self._sized(await self._aembed(bundle))
        lexical = await self._alexical(bundle.query_str)
        return await self._adrive(self.plan(bundle, vector, lexical), vector, self._scale(vector))

    def plan(self, bundle: QueryBundle, vector: List[float],
             lexical: Optional[LexicalQuery] = None) -> SearchPlan:
        """The question's search plan (:meth:`_steps`): its repeated link searches answered
        once, every result's relevance its cosine plus its lexical part (with ``lexical``)."""
        return reusing_link_searches(
            fused(self._steps(bundle, vector, lexical), lexical,
                  self.policy.for_question(bundle.query_str).lexical_weight))

    def _lexical(self, question: str) -> Optional[LexicalQuery]:
        """The question's terms weighed in the scope's memories; None when the policy reads
        cosine alone or the question has no term."""
        asked = question_terms(question)
        if self.policy.for_question(question).lexical_weight == 0.0 or not asked:
            return None
        return LexicalQuery.from_counts(*term_counts(self.vector_store, asked, self.filters))

    async def _alexical(self, question: str) -> Optional[LexicalQuery]:
        asked = question_terms(question)
        if self.policy.for_question(question).lexical_weight == 0.0 or not asked:
            return None
        assert isinstance(self.vector_store, QdrantVectorStore)
        return LexicalQuery.from_counts(
            *await aterm_counts(self.vector_store, asked, self.filters))

    def _steps(self, bundle: QueryBundle, vector: List[float],
               lexical: Optional[LexicalQuery]) -> SearchPlan:
        """The exact ranking with the bonus the question's intent calls for, newer versions
        placed before the older ones they repeat, each superseded memory's newest linked
        successor placed before it, then for a vague reference the recent memories in the
        places left; for a question about the news or small talk, no memory."""
        policy = self.policy.for_question(bundle.query_str)
        reference = policy.reference()
        ranking = yield from exact_recency_search(policy, reference, self.filters,
                                                  lexical=lexical)
        ranking = self.policy.asked(ranking, bundle.query_str, policy)
        ranking = with_lexical_parts(ranking, lexical, policy.lexical_weight)
        part = None if lexical is None else (
            partial(lexical.part, weight=policy.lexical_weight))
        ranking = yield from with_newer_versions(ranking, policy, reference, self.filters, part,
                                                 (bundle.query_str, vector))
        ranking = yield from with_successors(ranking, policy, reference, self.filters)
        if self._vague_window_days is not None and is_vague_reference(bundle.query_str):
            ranking = yield from with_recent(ranking, policy, reference, self.filters,
                                             self._vague_window_days)
        return about_small_talk(about_the_news(
            with_lexical_parts(ranking, lexical, policy.lexical_weight), bundle.query_str),
            bundle.query_str)

    def _scale(self, vector: List[float]) -> Optional[QueryScale]:
        """The question's cohort scale when the policy is in cohort units, else None (cosine)."""
        if self.policy.relevance == "cosine":
            return None
        return relevance_cohort(self.embed_model).scale(vector)

    def _scans(self, bundle: QueryBundle, vector: List[float]) -> Optional[QuestionScans]:
        """On Edge, when the question's plan will ask for the newer-versions window: its
        scans, so that window is read by id rather than found by a second scan."""
        policy = self.policy.for_question(bundle.query_str)
        if not isinstance(self.vector_store, QdrantEdgeVectorStore) \
                or policy.supersede_margin is None:
            return None
        return QuestionScans(self.vector_store, vector, policy.supersede_window)

    def _drive(
        self, plan: SearchPlan, vector: List[float], scale: Optional[QueryScale],
        scans: Optional[QuestionScans] = None,
    ) -> RecencyRanking:
        """Run the plan on the engine; with a cohort scale every result's cosine is moved to
        the policy's units first (one affine map per question, so the plan stays exact)."""
        try:
            search = next(plan)
            while True:
                if isinstance(search, MemorySentences):
                    search = plan.send(self._sentences.matrices(search, len(vector)))
                    continue
                results = run_search(self.vector_store, search, vector,
                                     self.policy.date_key, scale, scans)
                if self._several_users is not None:
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
                if isinstance(search, MemorySentences):
                    search = plan.send(await self._sentences.amatrices(search, len(vector)))
                    continue
                results = await arun_search(self.vector_store, search, vector,
                                            self.policy.date_key, scale)
                if self._several_users is not None:
                    self._several_users.check(n.node for n in results)
                search = plan.send(results)
        except StopIteration as done:
            return done.value

    # --- collection checks, done once --------------------------------------------------------

    def _prepare(self) -> bool:
        """Check the store once; False while it is empty (or its collection does not exist)."""
        store = self.vector_store
        if isinstance(store, QdrantEdgeVectorStore):
            if not self._ready:
                self._check_counts(store.count(), store.count(filters=self._dated_filters))
                self._fill_terms()
            return self._ready
        client = sync_client(store)
        if not self._ready and client.collection_exists(store.collection_name):
            collection = client.get_collection(store.collection_name)
            self._size = _dense_size(store, collection)
            self._ours = made_here(store, collection.config.metadata or {})
            if self._ours and not is_local(client):
                for key, schema in payload_indexes(self.policy.date_key):
                    client.create_payload_index(store.collection_name, key, field_schema=schema)
            dated = to_qdrant_filter(self._dated_filters)
            self._check_counts(
                client.count(store.collection_name, exact=True).count,
                client.count(store.collection_name, count_filter=dated, exact=True).count,
            )
            self._fill_terms()
        return self._ready

    async def _aprepare(self) -> bool:
        """Async :meth:`_prepare` (for a store with an async Qdrant client)."""
        store = self.vector_store
        assert isinstance(store, QdrantVectorStore)
        client = store._aclient
        if not self._ready and await client.collection_exists(store.collection_name):
            collection = await client.get_collection(store.collection_name)
            self._size = _dense_size(store, collection)
            self._ours = made_here(store, collection.config.metadata or {})
            if self._ours and not is_local(client):
                for key, schema in payload_indexes(self.policy.date_key):
                    await client.create_payload_index(
                        store.collection_name, key, field_schema=schema
                    )
            dated = to_qdrant_filter(self._dated_filters)
            self._check_counts(
                (await client.count(store.collection_name, exact=True)).count,
                (await client.count(
                    store.collection_name, count_filter=dated, exact=True
                )).count,
            )
        return self._ready

    def _fill_terms(self) -> None:
        """Store the terms of the memories that lack them, once, when the lexical signal is on
        (a store another program made is only read: its memories without terms score on
        relevance alone)."""
        if self._ready and self.policy.reads_words and self._ours:
            fill_terms(self.vector_store)

    def _check_counts(self, total: int, dated: int) -> None:
        """Ready once there is a memory; a store of undated points is someone else's."""
        if total and not dated:
            raise InvalidInputError(
                f"the store has memories but none with a datetime under payload key "
                f"{self.policy.date_key!r}: it was not written by llama-index-recency "
                "(memory_node / open_memory_index), or date_key is wrong"
            )
        self._ready = total > 0

    @property
    def _dated_filters(self) -> MetadataFilters:
        return dated_filter(self.policy.date_key)

    # --- the question's vector ---------------------------------------------------------------

    def _embed(self, bundle: QueryBundle) -> List[float]:
        if bundle.embedding is None:
            bundle.embedding = self.embed_model.get_agg_embedding_from_queries(
                bundle.embedding_strs
            )
        return bundle.embedding

    async def _aembed(self, bundle: QueryBundle) -> List[float]:
        if bundle.embedding is None:
            bundle.embedding = await self.embed_model.aget_agg_embedding_from_queries(
                bundle.embedding_strs
            )
        return bundle.embedding

    def _sized(self, vector: List[float]) -> List[float]:
        """``vector`` if the store's vectors have its size.

        Raises:
            EmbeddingMismatchError: They have another: another model embedded the store.
        """
        size = self.vector_store.dimensions if isinstance(
            self.vector_store, QdrantEdgeVectorStore) else self._size
        if size is not None and len(vector) != size:
            raise EmbeddingMismatchError(
                f"the question's vector has {len(vector)} dimensions "
                f"({self.embed_model.model_name!r}) but the store holds {size}-dimensional "
                "vectors: rank it with the model that embedded it")
        return vector


def _dense_size(store: QdrantVectorStore, collection: Any) -> Optional[int]:
    """The size of the collection's dense vectors: unnamed, or named as ``store`` names them."""
    vectors = collection.config.params.vectors
    if isinstance(vectors, dict):
        vectors = vectors.get(store.dense_vector_name)
    return getattr(vectors, "size", None)

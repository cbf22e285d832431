"""A node postprocessor that adds a recency bonus to retrieved memories and applies the cutoff."""

from __future__ import annotations

import logging
from functools import partial
from typing import Any, List, Optional

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr, model_validator
from llama_index.core.indices.vector_store import VectorStoreIndex
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from llama_index_recency.errors import InvalidInputError, UnsupportedStoreError
from llama_index_recency.models.cohort import relevance_cohort
from llama_index_recency.querying.gate import STORE_CHECK_SECONDS, StoreReads
from llama_index_recency.ranking.lexical import LexicalQuery, question_terms, with_lexical_parts
from llama_index_recency.ranking.news import about_the_news
from llama_index_recency.ranking.plan import MemorySentences, candidate_floor
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.ranking.ranked import RecencyRanking
from llama_index_recency.ranking.sentences import QuestionSentences
from llama_index_recency.ranking.small_talk import about_small_talk
from llama_index_recency.ranking.supersession import newer_versions_first
from llama_index_recency.records.nodes import USER_ID_KEY, check_user_id, is_memory_id
from llama_index_recency.storage import (
    MemoryVectorStore,
    QdrantEdgeVectorStore,
    SentenceReader,
    collection_metadata,
    embedding_of,
    fill_sentences,
    fill_terms,
    index_policy,
    made_here,
    memory_scope,
    policy_records,
    stored_vectors,
    term_counts,
    vector_store_of,
)

logger = logging.getLogger(__name__)


class RecencyBonusPostprocessor(BaseNodePostprocessor, RecencyPolicy):
    """Re-rank retrieved memories by cosine + ``weight * exp(-age_days / tau_days)``.

    Retrieve generously (``similarity_top_k=8``), then this keeps at most ``top_n``
    memories whose post-bonus score reaches ``threshold``; each returned node's score
    is its final score. :meth:`explain` shows the numbers behind the decision.

    On a memory index, :meth:`from_index` makes the one to use: the store's whole policy,
    its gate followed as it is refitted, and the candidates' vectors read from the store.
    """

    past_bonus_scale: float = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description=(
            "Bonus multiplier for questions that explicitly point to the past ('this is "
            "an old story, but…', 'back in the summer…'; see intent.PAST_POINTING_PATTERNS) "
            "when past_weight is None. 1.0 (default) turns the option off; 0.0 removes "
            "the bonus for them."
        ),
    )

    embed_model: Optional[BaseEmbedding] = Field(
        default=None,
        exclude=True,
        description=(
            "The index's embedding model; needed with relevance='cohort' to scale the "
            "question against the cohort (its vector is reused when the retriever set it), "
            "and with supersede_margin for candidates retrieved without their embeddings."
        ),
    )

    _warned_no_vectors: bool = PrivateAttr(default=False)
    _warned_embedded: bool = PrivateAttr(default=False)
    _warned_no_store: bool = PrivateAttr(default=False)
    _warned_other_users: bool = PrivateAttr(default=False)
    _user_id: Optional[str] = PrivateAttr(default=None)
    _store: Optional[MemoryVectorStore] = PrivateAttr(default=None)
    _reads: Optional[StoreReads] = PrivateAttr(default=None)
    _overrides: dict[str, Any] = PrivateAttr(default_factory=dict)
    _adopted: Any = PrivateAttr(default=None)
    _sentences: Optional[SentenceReader] = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _without_its_class_name(cls, data: Any) -> Any:
        """Its own dump (``model_dump``) names its class, as every LlamaIndex component's does:
        no setting, so a copy rebuilt from one is not refused."""
        if isinstance(data, dict) and data.get("class_name") == cls.class_name():
            return {name: value for name, value in data.items() if name != "class_name"}
        return data

    @model_validator(mode="after")
    def _cohort_needs_the_model(self) -> "RecencyBonusPostprocessor":
        if self.relevance == "cohort" and self.embed_model is None:
            raise InvalidInputError(
                "relevance='cohort' needs embed_model= (the index's embedding model) to "
                "scale each question against the cohort"
            )
        return self

    @classmethod
    def class_name(cls) -> str:
        return "RecencyBonusPostprocessor"

    @classmethod
    def from_index(cls, index: VectorStoreIndex, *, user_id: Optional[str] = None,
                   check_store_every: float = STORE_CHECK_SECONDS,
                   **overrides: Any) -> "RecencyBonusPostprocessor":
        """The postprocessor for a memory index from ``open_memory_index``.

        It ranks with the store's own policy (:func:`~llama_index_recency.storage.index_policy`:
        calibrated and saved with it, else its model's shipped one (the model the store records,
        else the index's), with the store's gate),
        ``overrides`` on top (e.g. ``reference_date=``); it adopts a gate saved since (read at
        every question on Edge, every ``check_store_every`` seconds on a server or local-mode
        store); an Edge store is set to return the candidates' vectors with them
        (``with_vectors``), another store's are read in one call: none is embedded again.
        With ``user_id`` it ranks that user's memories alone, with that user's gate and words:
        another user's candidates are dropped (said once), never passed on.

        Raises:
            InvalidInputError: A ``user_id`` that is not a non-blank line of text.
            InvalidSettingError: An override the policy refuses.
            UnsupportedStoreError: The index's vector store is neither Qdrant Edge nor Qdrant.
        """
        if user_id is not None:
            overrides["user_id"] = check_user_id(user_id)  # index_policy: this user's gate
        try:
            store = vector_store_of(index.vector_store)
        except UnsupportedStoreError as error:
            raise UnsupportedStoreError(
                f"{error}: from_index reads the store's policy and vectors; for this index, make "
                "the postprocessor by hand (RecencyBonusPostprocessor(weight=..., threshold=...) "
                "ranks the candidates it is given)") from None
        if isinstance(store, QdrantEdgeVectorStore):
            store.with_vectors = True  # the candidates come with their vectors: none read again
        own = {"embed_model": embedding_of(index)}  # the postprocessor's fields, not a policy's
        own.update((name, overrides.pop(name)) for name in set(cls.model_fields).difference(
            RecencyPolicy.model_fields) if name in overrides)
        # A store another program made records no model: the index's names the shipped policy.
        overrides["model"] = own["embed_model"].model_name
        metadata = collection_metadata(store)
        made = cls(**dict(index_policy(metadata, **overrides)), **own)
        made._store, made._reads = store, StoreReads(store, check_store_every)
        made._overrides, made._adopted = overrides, policy_records(metadata, user_id)
        made._user_id = user_id
        made._sentences = SentenceReader(store)
        if made_here(store, metadata):  # what plain insert_nodes left without
            if made.reads_words:
                fill_terms(store)
            if made.supersede_margin is not None:
                fill_sentences(store, own["embed_model"])
        return made

    def explain(
        self,
        nodes: List[NodeWithScore],
        query_bundle: Optional[QueryBundle] = None,
    ) -> RecencyRanking:
        """Score every candidate and say which are kept and why (raw, age, bonus, final),
        with the bonus the question's intent calls for and newer versions placed first (when
        some candidate can reach the threshold; none kept for a question about the news or
        small talk). Without ``query_bundle`` the policy ranks as it stands: no intent, words
        or language's gate, so pass the question a query engine gives.

        Raises:
            InvalidInputError: With ``relevance='cohort'``, no ``query_bundle`` to scale by;
                with ``lexical_weight``, no question or no store (:meth:`from_index`); or a
                candidate without a finite similarity score.
            MemoryDateError: A candidate without a usable date, with
                ``on_missing_date='raise'``.
        """
        self._follow_store()
        nodes = self._in_scope(nodes)
        policy = self if query_bundle is None else self.for_question(query_bundle.query_str)
        if self.relevance == "cohort":
            nodes = self._cohort_scaled(nodes, query_bundle)
        lexical = self._lexical(query_bundle, policy.lexical_weight)
        if lexical is not None:  # a candidate without a score is left for rank to refuse
            nodes = [n if n.score is None else NodeWithScore(
                node=n.node, score=n.score + policy.lexical_weight * lexical.share_of(n.node))
                for n in nodes]
        reference = policy.reference()
        ranking = with_lexical_parts(policy.rank(nodes, reference), lexical, policy.lexical_weight)
        if query_bundle is not None:
            ranking = self.asked(ranking, query_bundle.query_str, policy)
        # With no candidate that can pass, no version can enter the prompt: none is compared
        # (as the retriever, which ranks only candidates that can pass).
        floor = candidate_floor(policy)
        if policy.supersede_margin is not None and any((n.score or 0.0) >= floor for n in nodes):
            part = None if lexical is None else (
                partial(lexical.part, weight=policy.lexical_weight))
            candidates = self._with_vectors(nodes)
            ranking = newer_versions_first(ranking, candidates, policy, reference,
                                           lexical_part=part,
                                           sentences=self._sentence_view(candidates, query_bundle))
        if query_bundle is None:
            return ranking
        return about_small_talk(about_the_news(ranking, query_bundle.query_str),
                                query_bundle.query_str)

    def _lexical(self, query_bundle: Optional[QueryBundle],
                 weight: float) -> Optional[LexicalQuery]:
        """With a lexical ``weight``, the question's terms weighed in the store (from
        :meth:`from_index`, one count per term); None without the signal or terms. Without
        the store, a language's weight (a shipped policy copied by hand) is left out, said
        once.

        Raises:
            InvalidInputError: ``lexical_weight`` set without the question or without the
                store to weigh its terms in.
        """
        if weight == 0.0:
            return None
        if query_bundle is None or self._store is None:
            if self.lexical_weight == 0.0:  # only a language's weight: leave the words out
                if not self._warned_no_store:
                    self._warned_no_store = True
                    logger.warning("the question's words are left out: they are weighed in "
                                   "the store, and this postprocessor has none (make it with "
                                   "RecencyBonusPostprocessor.from_index(index); not said "
                                   "again)")
                return None
            raise InvalidInputError(
                "lexical_weight needs the question and the store's term counts: make the "
                "postprocessor with RecencyBonusPostprocessor.from_index(index) and give it "
                "the query")
        asked = question_terms(query_bundle.query_str)
        if not asked:
            return None
        return LexicalQuery.from_counts(*term_counts(
            self._store, asked, memory_scope(user_id=self._user_id)))

    def _in_scope(self, nodes: List[NodeWithScore]) -> List[NodeWithScore]:
        """With ``user_id`` (:meth:`from_index`), the candidates stored under it; the others,
        another user's or no user's, are dropped (logged once): they never reach its prompt."""
        if self._user_id is None:
            return nodes
        own = [n for n in nodes if n.node.metadata.get(USER_ID_KEY) == self._user_id]
        if len(own) < len(nodes) and not self._warned_other_users:
            self._warned_other_users = True
            logger.warning("%d of %d candidates are not memories of user %r and were dropped: "
                           "filter the retriever on the user's id to rank that user's top k "
                           "(not reported again)",
                           len(nodes) - len(own), len(nodes), self._user_id)
        return own

    def _follow_store(self) -> None:
        """From :meth:`from_index`: adopt the store's policy when its saved records changed
        (a gate fitted or a policy saved since), ``overrides`` still on top."""
        if self._store is None or self._reads is None or not self._reads.due():
            return
        metadata = collection_metadata(self._store)
        records = policy_records(metadata, self._user_id)
        if records != self._adopted:
            adopted = index_policy(metadata, **self._overrides)
            # The fields as they are (an assigned threshold would drop the languages' ones).
            self.__dict__.update({name: getattr(adopted, name)
                                  for name in type(adopted).model_fields})
            self.forget_derived()
            self._adopted = records

    def _with_vectors(self, nodes: List[NodeWithScore]) -> List[NodeWithScore]:
        """The candidates with embeddings: their own, else the store's (from :meth:`from_index`,
        one read), else computed by ``embed_model`` (logged once); without any, versions are
        not compared (logged once)."""
        missing = [n.node.node_id for n in nodes if not n.node.embedding]
        if not missing:
            return nodes
        filled: dict[str, List[float]] = {}
        if self._store is not None:
            filled = stored_vectors(self._store, [i for i in missing if is_memory_id(i)])
        elsewhere = [n for n in nodes if not n.node.embedding and not filled.get(n.node.node_id)]
        if elsewhere and self.embed_model is None:
            if not self._warned_no_vectors:
                self._warned_no_vectors = True
                logger.warning("supersede_margin is set but %d candidates carry no embedding "
                               "and no embed_model is given: newer versions are not placed "
                               "first (not reported again)", len(elsewhere))
        elif elsewhere:
            assert self.embed_model is not None
            if self._store is not None and not self._warned_embedded:
                self._warned_embedded = True
                logger.warning("%d candidates are not in the store: embedded again to compare "
                               "versions (not reported again)", len(elsewhere))
            texts = [n.node.get_content(metadata_mode=MetadataMode.EMBED) for n in elsewhere]
            vectors = self.embed_model.get_text_embedding_batch(texts)
            filled.update((n.node.node_id, vector)
                          for n, vector in zip(elsewhere, vectors, strict=True))
        return [n if n.node.embedding else NodeWithScore(
            node=n.node.model_copy(update={"embedding": filled[n.node.node_id]}), score=n.score)
            for n in nodes if n.node.embedding or filled.get(n.node.node_id)]

    def _sentence_view(self, candidates: List[NodeWithScore],
                       query_bundle: Optional[QueryBundle]) -> Optional[QuestionSentences]:
        """The question and the stored sentence vectors of its candidates of several
        sentences (from :meth:`from_index`); None without the store or the question's vector
        (a retriever sets it), so nothing is embedded here."""
        request = MemorySentences.of(c.node for c in candidates)
        if self._sentences is None or query_bundle is None or not query_bundle.embedding \
                or request is None:
            return None
        vector = query_bundle.embedding
        return QuestionSentences(query_bundle.query_str, vector,
                                 self._sentences.matrices(request, len(vector)))

    def _cohort_scaled(
        self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle]
    ) -> List[NodeWithScore]:
        """The candidates' cosines in the question's cohort units."""
        if query_bundle is None:
            raise InvalidInputError(
                "relevance='cohort' needs the question (query_bundle) to scale by")
        assert self.embed_model is not None  # checked at construction
        vector = query_bundle.embedding or self.embed_model.get_agg_embedding_from_queries(
            query_bundle.embedding_strs
        )
        return relevance_cohort(self.embed_model).scale(vector).apply(nodes)

    def _postprocess_nodes(
        self,
        nodes: List[NodeWithScore],
        query_bundle: Optional[QueryBundle] = None,
    ) -> List[NodeWithScore]:
        return list(self.explain(nodes, query_bundle).nodes)

    async def _apostprocess_nodes(
        self,
        nodes: List[NodeWithScore],
        query_bundle: Optional[QueryBundle] = None,
    ) -> List[NodeWithScore]:
        # Pure arithmetic on a handful of nodes: no reason to hop to a thread.
        return self._postprocess_nodes(nodes, query_bundle)

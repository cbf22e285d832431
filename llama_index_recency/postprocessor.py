"""A node postprocessor that adds a recency bonus to retrieved memories and applies the cutoff."""

from __future__ import annotations

from typing import List, Optional

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field, model_validator
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_recency.cohort import relevance_cohort
from llama_index_recency.past import points_to_past
from llama_index_recency.scoring import RecencyPolicy, RecencyRanking


class RecencyBonusPostprocessor(BaseNodePostprocessor, RecencyPolicy):
    """Re-rank retrieved memories by cosine + ``weight * exp(-age_days / tau_days)``.

    Retrieve generously (``similarity_top_k=8``), then this keeps at most ``top_n``
    memories whose post-bonus score reaches ``threshold``; each returned node's score
    is its final score. :meth:`explain` shows the numbers behind the decision.
    """

    past_bonus_scale: float = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description=(
            "Bonus multiplier for questions that explicitly point to the past ('this is "
            "an old story, but…', 'back in the summer…'; see past.PAST_POINTING_PATTERNS). "
            "1.0 (default) turns the option off; 0.0 removes the bonus for them."
        ),
    )

    embed_model: Optional[BaseEmbedding] = Field(
        default=None,
        exclude=True,
        description=(
            "The index's embedding model; needed with relevance='cohort' to scale the "
            "question against the cohort (its vector is reused when the retriever set it)."
        ),
    )

    @model_validator(mode="after")
    def _cohort_needs_the_model(self) -> "RecencyBonusPostprocessor":
        if self.relevance == "cohort" and self.embed_model is None:
            raise ValueError(
                "relevance='cohort' needs embed_model= (the index's embedding model) to "
                "scale each question against the cohort"
            )
        return self

    @classmethod
    def class_name(cls) -> str:
        return "RecencyBonusPostprocessor"

    def explain(
        self,
        nodes: List[NodeWithScore],
        query_bundle: Optional[QueryBundle] = None,
    ) -> RecencyRanking:
        """Score every candidate and say which are kept and why (raw, age, bonus, final)."""
        if self.relevance == "cohort":
            nodes = self._cohort_scaled(nodes, query_bundle)
        return self.rank(nodes, bonus_scale=self._bonus_scale(query_bundle))

    def _cohort_scaled(
        self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle]
    ) -> List[NodeWithScore]:
        """The candidates' cosines in the question's cohort units."""
        if query_bundle is None:
            raise ValueError("relevance='cohort' needs the question (query_bundle) to scale by")
        assert self.embed_model is not None  # checked at construction
        vector = query_bundle.embedding or self.embed_model.get_agg_embedding_from_queries(
            query_bundle.embedding_strs
        )
        return relevance_cohort(self.embed_model).scale(vector).apply(nodes)

    def _bonus_scale(self, query_bundle: Optional[QueryBundle]) -> float:
        """``past_bonus_scale`` if the question points to the past, else 1.0."""
        if query_bundle is not None and points_to_past(query_bundle.query_str):
            return self.past_bonus_scale
        return 1.0

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

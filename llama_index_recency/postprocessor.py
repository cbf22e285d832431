"""A node postprocessor that adds a recency bonus to retrieved memories and applies the cutoff."""

from __future__ import annotations

from typing import List, Optional

from llama_index.core.bridge.pydantic import Field
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

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

    @classmethod
    def class_name(cls) -> str:
        return "RecencyBonusPostprocessor"

    def explain(
        self,
        nodes: List[NodeWithScore],
        query_bundle: Optional[QueryBundle] = None,
    ) -> RecencyRanking:
        """Score every candidate and say which are kept and why (raw, age, bonus, final)."""
        return self.rank(nodes, bonus_scale=self._bonus_scale(query_bundle))

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

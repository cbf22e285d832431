"""A node postprocessor that adds a recency bonus to retrieved memories and applies the cutoff."""

from __future__ import annotations

from typing import List, Optional

from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_recency.scoring import RecencyPolicy, RecencyRanking


class RecencyBonusPostprocessor(BaseNodePostprocessor, RecencyPolicy):
    """Re-rank retrieved memories by cosine + ``weight * exp(-age_days / tau_days)``.

    Retrieve generously (``similarity_top_k=8``), then this keeps at most ``top_n``
    memories whose post-bonus score reaches ``threshold``; each returned node's score
    is its final score. :meth:`explain` shows the numbers behind the decision.
    """

    @classmethod
    def class_name(cls) -> str:
        return "RecencyBonusPostprocessor"

    def explain(
        self,
        nodes: List[NodeWithScore],
        query_bundle: Optional[QueryBundle] = None,
    ) -> RecencyRanking:
        """Score every candidate and say which are kept and why (raw, age, bonus, final)."""
        del query_bundle  # the bonus depends on the memory's date, not on the question
        return self.rank(nodes)

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

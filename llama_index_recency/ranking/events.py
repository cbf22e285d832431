"""Instrumentation: why a memory entered the prompt, as a LlamaIndex event an app's tracing sees.

Every ranking by :class:`~llama_index_recency.QdrantRecencyRetriever` (so every turn of
the memory block) dispatches one :class:`MemoryRankingEvent` on LlamaIndex's
instrumentation dispatcher, carrying the policy and the numbers behind each candidate
shown, unrounded: the same rows as ``explain()``.
"""

from __future__ import annotations

from typing import Any, Optional

from llama_index.core.bridge.pydantic import BaseModel, Field
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import NullEventHandler
from llama_index.core.instrumentation.events.base import BaseEvent

from llama_index_recency.ranking.intent import Intent
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.ranking.ranked import RecencyRanking

dispatcher = get_dispatcher(__name__)


class MemoryRankingRow(BaseModel):
    """One candidate of a ranking: its scores in the policy's units and what happened to it."""

    node_id: str
    raw: float = Field(description="Relevance: the raw cosine (or cohort units) before the bonus.")
    bonus: float = Field(description="The recency bonus added to it.")
    final: float = Field(description="raw + bonus: what the threshold and top_n apply to.")
    verdict: str = Field(
        description="kept, below <threshold>, over top <n>, successor of <id>, "
        "recent (vague reference), dropped: no date, ...; a note may follow after '; ' "
        "(newer version of <id>, older version, below <id>, superseded by <id>)"
    )


class MemoryRankingEvent(BaseEvent):
    """A memory ranking: the policy it used (for the question's language and intent), one row
    per candidate shown, the question's intent, the vague-path and news flags, and which threshold it
    met: the question's language, the language whose threshold was used (None: one for
    every language) and where that threshold came from."""

    policy: RecencyPolicy
    rows: list[MemoryRankingRow]
    intent: Intent = "neutral"
    vague: bool = False
    news: bool = False
    language: str = "en"
    threshold_language: Optional[str] = None
    threshold_origin: str = "shipped"

    @classmethod
    def class_name(cls) -> str:
        return "MemoryRankingEvent"


def listening() -> bool:
    """Whether any handler (but LlamaIndex's default null one) would see an event of this
    module's dispatcher or a parent's it propagates to: without one, no event is built."""
    current: Optional[Any] = dispatcher
    while current is not None:
        if any(not isinstance(h, NullEventHandler) for h in current.event_handlers):
            return True
        current = current.parent if current.propagate else None
    return False


def dispatch_ranking(policy: RecencyPolicy, ranking: RecencyRanking) -> None:
    """Send ``ranking`` to the handlers on LlamaIndex's dispatcher (none: nothing happens)."""
    dispatcher.event(MemoryRankingEvent(
        policy=policy,
        rows=[MemoryRankingRow(node_id=row.node_id, raw=row.raw, bonus=row.bonus,
                               final=row.final, verdict=row.reason) for row in ranking.rows],
        intent=ranking.intent,
        vague=ranking.vague,
        news=ranking.news,
        language=ranking.language,
        threshold_language=ranking.threshold_language,
        threshold_origin=ranking.threshold_origin,
    ))

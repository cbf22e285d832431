"""Recency-aware long-term memory for LlamaIndex over Qdrant (Edge on the device, or a server).

:class:`RecencyMemory` is the way in: one object over a store, its embedding model, its
ranking policy and (optionally) a user, with ``add``, ``search``, ``get_all``, ``update``,
``forget``, ``history``, ``export`` / ``import_``, ``remember`` and the integrations.
Memories are dated facts (:func:`memory_node`) ranked by cosine +
``weight * exp(-age_days / tau_days)`` (:class:`RecencyPolicy`; each embedding model has
its own, :func:`index_policy`): exactly over the whole store by
:class:`QdrantRecencyRetriever`, or over a retriever's candidates by
:class:`RecencyBonusPostprocessor`. :class:`MemoryResponseSynthesizer`,
:class:`RecencyChatEngine` and the agent :class:`RecencyMemoryBlock` put them into the
prompt. Every error raised on purpose is a :class:`RecencyError`.

Everything else is imported from its module (``llama_index_recency.calibration``,
``.backup``, ``.store``, ...).
"""

import importlib
import warnings
from typing import Any

from llama_index_recency.chat import MemoryResponseSynthesizer, RecencyChatEngine
from llama_index_recency.errors import RecencyError
from llama_index_recency.events import MemoryRankingEvent
from llama_index_recency.intent import question_intent
from llama_index_recency.records import Turn, memory_node
from llama_index_recency.memory_block import RecencyMemoryBlock
from llama_index_recency.models import offline_embedding, openai_like_llm
from llama_index_recency.postprocessor import RecencyBonusPostprocessor
from llama_index_recency.recency_memory import RecencyMemory
from llama_index_recency.retriever import QdrantRecencyRetriever
from llama_index_recency.scoring import RecencyPolicy
from llama_index_recency.store import index_policy, open_memory_index

__all__ = [
    "index_policy",
    "memory_node",
    "MemoryRankingEvent",
    "MemoryResponseSynthesizer",
    "offline_embedding",
    "open_memory_index",
    "openai_like_llm",
    "QdrantRecencyRetriever",
    "question_intent",
    "RecencyBonusPostprocessor",
    "RecencyChatEngine",
    "RecencyError",
    "RecencyMemory",
    "RecencyMemoryBlock",
    "RecencyPolicy",
    "Turn",
]

_MOVED: dict[str, tuple[str, ...]] = {
    "backup": ("aexport_memories", "aimport_memories", "export_memories", "import_memories"),
    "calibration": (
        "calibrate", "Calibration", "CandidateResult", "fit_policy", "fit_threshold", "HitFreeMax",
        "PolicyCandidate", "PolicyFit", "raw_cosine_sd", "retrieve_candidates",
        "RetrievedCandidates", "SEED_GRID", "TargetScore", "ThresholdFit",
    ),
    "edge": ("QdrantEdgeVectorStore",),
    "embeddings": ("FallbackEmbedding",),
    "errors": (
        "EmbeddingAPIError", "EmbeddingMismatchError", "FutureMemoryDateError", "MemoryDateError",
        "MemoryFileError", "MemoryNotFoundError", "MemoryStoreDamagedError",
        "MemoryStoreFullError", "MemoryStoreLockedError", "MemoryStoreNotFoundError",
        "MemoryStoreReadOnlyError", "MemoryStoreUnreachableError", "MemoryWriteError",
        "PartialWriteError",
    ),
    "events": ("MemoryRankingRow",),
    "examples": (
        "example_memories", "example_questions", "EXAMPLE_REFERENCE_DATE", "ExampleQuestion",
    ),
    "gate": ("calibrate_gate", "check_gate", "GateFit"),
    "intent": ("PAST_POINTING_PATTERNS", "points_to_past"),
    "links": ("amemory_history", "memory_history"),
    "models": ("CALIBRATED_POLICIES", "minilm_embedding", "qwen3_embedding"),
    "prompts": ("RETRIEVED_MEMORY_CONTEXT_TEMPLATE", "RETRIEVED_MEMORY_PROMPT"),
    "scoring": ("RankedMemory", "RecencyRanking"),
    "store": (
        "aget_memories", "close_memory_index", "count_memories", "get_memories", "get_memory",
        "migrate_store", "Migration", "open_memory_store", "save_policy",
    ),
    "updates": (
        "aforget", "ainsert_memories", "aupdate_memory", "forget", "insert_memories",
        "StoredMemories", "update_memory",
    ),
    "vague": ("is_vague_reference", "VAGUE_REFERENCE_PATTERNS", "VAGUE_WINDOW_DAYS"),
    "writer": (
        "aextract_memories", "aremember", "extract_memories", "MEMORY_EXTRACTION_PROMPT",
        "parse_transcript", "remember", "remember_transcript",
    ),
}
"""The other names 0.2 exported here, by the module that holds them."""

_MODULE_OF = {name: module for module, names in _MOVED.items() for name in names}


def __getattr__(name: str) -> Any:
    """A 0.2 name from its module, with a DeprecationWarning naming the new spelling."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"llama_index_recency.{name} moved: use `from llama_index_recency.{module} import "
        f"{name}`; the top-level name goes in a later version",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)

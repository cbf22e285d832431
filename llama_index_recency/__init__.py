"""Recency-aware long-term memory for LlamaIndex over Qdrant (Edge on the device, or a server).

Memories are dated facts (:func:`memory_node`) in a store from :func:`open_memory_index`.
They are ranked by cosine + ``weight * exp(-age_days / tau_days)`` (the seed: 0.05, 14
days, threshold 0.45, top 3; each embedding model has its own, see :func:`index_policy`):
exactly over the whole store by :class:`QdrantRecencyRetriever`, or over a retriever's
candidates by :class:`RecencyBonusPostprocessor`. :class:`MemoryResponseSynthesizer`,
:class:`RecencyChatEngine` and the agent :class:`RecencyMemoryBlock` put them into the
prompt in B format; :func:`remember` writes them from a conversation.
"""

from llama_index_recency.calibration import (
    SEED_GRID,
    Calibration,
    CandidateResult,
    HitFreeMax,
    PolicyCandidate,
    PolicyFit,
    RetrievedCandidates,
    TargetScore,
    ThresholdFit,
    calibrate,
    fit_policy,
    fit_threshold,
    raw_cosine_sd,
    retrieve_candidates,
)
from llama_index_recency.chat import MemoryResponseSynthesizer, RecencyChatEngine
from llama_index_recency.edge import QdrantEdgeVectorStore
from llama_index_recency.embeddings import (
    EmbeddingAPIError,
    EmbeddingMismatchError,
    FallbackEmbedding,
)
from llama_index_recency.events import MemoryRankingEvent, MemoryRankingRow
from llama_index_recency.examples import (
    EXAMPLE_REFERENCE_DATE,
    ExampleQuestion,
    example_memories,
    example_questions,
)
from llama_index_recency.gate import GateFit, calibrate_gate, check_gate
from llama_index_recency.memory import FutureMemoryDateError, memory_node
from llama_index_recency.memory_block import RecencyMemoryBlock
from llama_index_recency.models import (
    CALIBRATED_POLICIES,
    minilm_embedding,
    offline_embedding,
    openai_like_llm,
    qwen3_embedding,
)
from llama_index_recency.past import PAST_POINTING_PATTERNS, points_to_past
from llama_index_recency.postprocessor import RecencyBonusPostprocessor
from llama_index_recency.prompts import (
    RETRIEVED_MEMORY_CONTEXT_TEMPLATE,
    RETRIEVED_MEMORY_PROMPT,
)
from llama_index_recency.retriever import QdrantRecencyRetriever
from llama_index_recency.scoring import (
    MemoryDateError,
    RankedMemory,
    RecencyPolicy,
    RecencyRanking,
)
from llama_index_recency.store import (
    MemoryStoreDamagedError,
    MemoryStoreFullError,
    MemoryStoreLockedError,
    MemoryStoreNotFoundError,
    MemoryStoreReadOnlyError,
    MemoryStoreUnreachableError,
    Migration,
    close_memory_index,
    count_memories,
    aget_memories,
    get_memories,
    index_policy,
    migrate_store,
    open_memory_index,
    open_memory_store,
    save_policy,
)
from llama_index_recency.updates import aforget, forget, insert_memories
from llama_index_recency.vague import (
    VAGUE_REFERENCE_PATTERNS,
    VAGUE_WINDOW_DAYS,
    is_vague_reference,
)
from llama_index_recency.writer import (
    MEMORY_EXTRACTION_PROMPT,
    MemoryWriteError,
    Turn,
    aextract_memories,
    aremember,
    extract_memories,
    parse_transcript,
    remember,
    remember_transcript,
)

__all__ = [
    "CALIBRATED_POLICIES",
    "Calibration",
    "CandidateResult",
    "EXAMPLE_REFERENCE_DATE",
    "EmbeddingAPIError",
    "EmbeddingMismatchError",
    "ExampleQuestion",
    "FallbackEmbedding",
    "FutureMemoryDateError",
    "GateFit",
    "MemoryRankingEvent",
    "MemoryRankingRow",
    "HitFreeMax",
    "MEMORY_EXTRACTION_PROMPT",
    "MemoryDateError",
    "MemoryResponseSynthesizer",
    "MemoryStoreDamagedError",
    "MemoryStoreFullError",
    "MemoryStoreLockedError",
    "MemoryStoreNotFoundError",
    "MemoryStoreReadOnlyError",
    "MemoryStoreUnreachableError",
    "MemoryWriteError",
    "Migration",
    "PAST_POINTING_PATTERNS",
    "PolicyCandidate",
    "PolicyFit",
    "QdrantEdgeVectorStore",
    "QdrantRecencyRetriever",
    "RETRIEVED_MEMORY_CONTEXT_TEMPLATE",
    "RETRIEVED_MEMORY_PROMPT",
    "RankedMemory",
    "RecencyBonusPostprocessor",
    "RecencyChatEngine",
    "RecencyMemoryBlock",
    "RecencyPolicy",
    "RecencyRanking",
    "RetrievedCandidates",
    "SEED_GRID",
    "TargetScore",
    "ThresholdFit",
    "Turn",
    "VAGUE_REFERENCE_PATTERNS",
    "VAGUE_WINDOW_DAYS",
    "aextract_memories",
    "aremember",
    "calibrate",
    "calibrate_gate",
    "check_gate",
    "close_memory_index",
    "count_memories",
    "example_memories",
    "example_questions",
    "extract_memories",
    "fit_policy",
    "fit_threshold",
    "forget",
    "aforget",
    "aget_memories",
    "get_memories",
    "index_policy",
    "insert_memories",
    "is_vague_reference",
    "memory_node",
    "migrate_store",
    "minilm_embedding",
    "offline_embedding",
    "open_memory_index",
    "open_memory_store",
    "openai_like_llm",
    "parse_transcript",
    "points_to_past",
    "qwen3_embedding",
    "raw_cosine_sd",
    "remember",
    "remember_transcript",
    "retrieve_candidates",
    "save_policy",
]

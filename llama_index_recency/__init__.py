"""Recency-aware memory retrieval for LlamaIndex over Qdrant.

Add :class:`RecencyBonusPostprocessor` to any retriever, query engine or chat engine:
it re-ranks retrieved memories by cosine + ``0.05 * exp(-age_days / 14)`` and keeps the
best 3 at or above 0.45. :data:`RETRIEVED_MEMORY_PROMPT` puts them into the prompt.
"""

from llama_index_recency.calibration import (
    SEED_GRID,
    Calibration,
    CandidateResult,
    HitFreeMax,
    RetrievedCandidates,
    TargetScore,
    ThresholdFit,
    calibrate,
    fit_threshold,
    retrieve_candidates,
)
from llama_index_recency.chat import MemoryResponseSynthesizer, RecencyChatEngine
from llama_index_recency.embeddings import (
    EmbeddingAPIError,
    EmbeddingMismatchError,
    FallbackEmbedding,
)
from llama_index_recency.examples import (
    EXAMPLE_REFERENCE_DATE,
    ExampleQuestion,
    example_memories,
    example_questions,
)
from llama_index_recency.memory import memory_node
from llama_index_recency.memory_block import RecencyMemoryBlock
from llama_index_recency.models import offline_embedding, openai_like_llm, qwen3_embedding
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
from llama_index_recency.edge import QdrantEdgeVectorStore
from llama_index_recency.store import (
    MemoryStoreLockedError,
    MemoryStoreNotFoundError,
    Migration,
    close_memory_index,
    count_memories,
    get_memories,
    index_policy,
    migrate_store,
    open_memory_index,
    open_memory_store,
    save_policy,
)
from llama_index_recency.updates import forget, insert_memories
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
    "Calibration",
    "CandidateResult",
    "EXAMPLE_REFERENCE_DATE",
    "EmbeddingAPIError",
    "EmbeddingMismatchError",
    "ExampleQuestion",
    "FallbackEmbedding",
    "HitFreeMax",
    "MEMORY_EXTRACTION_PROMPT",
    "MemoryDateError",
    "MemoryResponseSynthesizer",
    "MemoryStoreLockedError",
    "MemoryStoreNotFoundError",
    "Migration",
    "MemoryWriteError",
    "PAST_POINTING_PATTERNS",
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
    "aextract_memories",
    "aremember",
    "calibrate",
    "close_memory_index",
    "count_memories",
    "example_memories",
    "example_questions",
    "extract_memories",
    "fit_threshold",
    "forget",
    "get_memories",
    "index_policy",
    "insert_memories",
    "memory_node",
    "migrate_store",
    "offline_embedding",
    "open_memory_index",
    "open_memory_store",
    "openai_like_llm",
    "parse_transcript",
    "points_to_past",
    "qwen3_embedding",
    "remember",
    "remember_transcript",
    "retrieve_candidates",
    "save_policy",
]

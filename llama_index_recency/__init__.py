"""Recency-aware long-term memory for LlamaIndex over Qdrant (Edge on the device, or a server).

Memories are dated facts (:func:`memory_node`) in a store from :func:`open_memory_index`.
They are ranked by cosine + ``weight * exp(-age_days / tau_days)`` (the seed: 0.05, 14
days, threshold 0.45, top 3; each embedding model has its own, see :func:`index_policy`):
exactly over the whole store by :class:`QdrantRecencyRetriever`, or over a retriever's
candidates by :class:`RecencyBonusPostprocessor`. :class:`MemoryResponseSynthesizer`,
:class:`RecencyChatEngine` and the agent :class:`RecencyMemoryBlock` put them into the
prompt in B format; :func:`remember` writes them from a conversation.
"""

from llama_index_recency.backup import (
    MemoryFileError,
    aexport_memories,
    aimport_memories,
    export_memories,
    import_memories,
)
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
from llama_index_recency.intent import PAST_POINTING_PATTERNS, points_to_past, question_intent
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
    MemoryNotFoundError,
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
    get_memory,
    index_policy,
    migrate_store,
    open_memory_index,
    open_memory_store,
    save_policy,
)
from llama_index_recency.links import amemory_history, memory_history
from llama_index_recency.updates import (
    PartialWriteError,
    StoredMemories,
    aforget,
    ainsert_memories,
    aupdate_memory,
    forget,
    insert_memories,
    update_memory,
)
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
    "aexport_memories",
    "aextract_memories",
    "aforget",
    "aget_memories",
    "aimport_memories",
    "ainsert_memories",
    "amemory_history",
    "aremember",
    "aupdate_memory",
    "calibrate",
    "calibrate_gate",
    "CALIBRATED_POLICIES",
    "Calibration",
    "CandidateResult",
    "check_gate",
    "close_memory_index",
    "count_memories",
    "EmbeddingAPIError",
    "EmbeddingMismatchError",
    "example_memories",
    "example_questions",
    "export_memories",
    "EXAMPLE_REFERENCE_DATE",
    "ExampleQuestion",
    "extract_memories",
    "FallbackEmbedding",
    "fit_policy",
    "fit_threshold",
    "forget",
    "FutureMemoryDateError",
    "GateFit",
    "get_memories",
    "get_memory",
    "HitFreeMax",
    "import_memories",
    "index_policy",
    "insert_memories",
    "is_vague_reference",
    "MEMORY_EXTRACTION_PROMPT",
    "memory_history",
    "memory_node",
    "MemoryDateError",
    "MemoryFileError",
    "MemoryNotFoundError",
    "MemoryRankingEvent",
    "MemoryRankingRow",
    "MemoryResponseSynthesizer",
    "MemoryStoreDamagedError",
    "MemoryStoreFullError",
    "MemoryStoreLockedError",
    "MemoryStoreNotFoundError",
    "MemoryStoreReadOnlyError",
    "MemoryStoreUnreachableError",
    "MemoryWriteError",
    "migrate_store",
    "Migration",
    "minilm_embedding",
    "offline_embedding",
    "open_memory_index",
    "open_memory_store",
    "openai_like_llm",
    "parse_transcript",
    "PartialWriteError",
    "PAST_POINTING_PATTERNS",
    "points_to_past",
    "question_intent",
    "PolicyCandidate",
    "PolicyFit",
    "QdrantEdgeVectorStore",
    "QdrantRecencyRetriever",
    "qwen3_embedding",
    "RankedMemory",
    "raw_cosine_sd",
    "RecencyBonusPostprocessor",
    "RecencyChatEngine",
    "RecencyMemoryBlock",
    "RecencyPolicy",
    "RecencyRanking",
    "remember",
    "remember_transcript",
    "retrieve_candidates",
    "RETRIEVED_MEMORY_CONTEXT_TEMPLATE",
    "RETRIEVED_MEMORY_PROMPT",
    "RetrievedCandidates",
    "save_policy",
    "SEED_GRID",
    "StoredMemories",
    "TargetScore",
    "ThresholdFit",
    "Turn",
    "update_memory",
    "VAGUE_REFERENCE_PATTERNS",
    "VAGUE_WINDOW_DAYS",
]

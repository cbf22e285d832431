"""Recency-aware memory retrieval for LlamaIndex over Qdrant.

Add :class:`RecencyBonusPostprocessor` to any retriever, query engine or chat engine:
it re-ranks retrieved memories by cosine + ``0.05 * exp(-age_days / 14)`` and keeps the
best 3 at or above 0.45. :data:`RETRIEVED_MEMORY_PROMPT` puts them into the prompt.
"""

from llama_index_recency.chat import MemoryResponseSynthesizer, RecencyChatEngine
from llama_index_recency.examples import (
    EXAMPLE_REFERENCE_DATE,
    ExampleQuestion,
    example_memories,
    example_questions,
)
from llama_index_recency.memory import memory_node
from llama_index_recency.models import offline_embedding, openai_like_llm, qwen3_embedding
from llama_index_recency.postprocessor import RecencyBonusPostprocessor
from llama_index_recency.prompts import (
    RETRIEVED_MEMORY_CONTEXT_TEMPLATE,
    RETRIEVED_MEMORY_PROMPT,
)
from llama_index_recency.scoring import (
    MemoryDateError,
    RankedMemory,
    RecencyPolicy,
    RecencyRanking,
)
from llama_index_recency.store import open_memory_index

__all__ = [
    "EXAMPLE_REFERENCE_DATE",
    "ExampleQuestion",
    "MemoryDateError",
    "MemoryResponseSynthesizer",
    "RETRIEVED_MEMORY_CONTEXT_TEMPLATE",
    "RETRIEVED_MEMORY_PROMPT",
    "RankedMemory",
    "RecencyBonusPostprocessor",
    "RecencyChatEngine",
    "RecencyPolicy",
    "RecencyRanking",
    "example_memories",
    "example_questions",
    "memory_node",
    "offline_embedding",
    "open_memory_index",
    "openai_like_llm",
    "qwen3_embedding",
]

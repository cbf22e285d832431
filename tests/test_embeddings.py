"""API-first embedding with local fallback, and the embedding identity recorded with the collection."""

from __future__ import annotations

import logging
import math

import pytest
from conftest import KnownCosineEmbedding, OpenAIServer

from llama_index_recency import memory_node, open_memory_index
from llama_index_recency.embeddings import (
    EmbeddingAPIError,
    EmbeddingMismatchError,
    FallbackEmbedding,
)
from llama_index_recency.store import EMBEDDING_METADATA_KEY

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
TEXT = "2026-09-01: Taro has been drinking sweet café au lait lately."


@pytest.fixture
def minilm_server(openai_server: OpenAIServer, minilm) -> OpenAIServer:
    """The embeddings endpoint serves the same model as the local fallback."""
    openai_server.embed = minilm.get_text_embedding_batch
    return openai_server


def fallback(server_url: str, local, **kwargs) -> FallbackEmbedding:
    # Generous by default so a loaded machine never times out by accident; "hang" tests pass 0.5.
    kwargs.setdefault("timeout", 5.0)
    return FallbackEmbedding(model_name=MINILM, local=local, api_base=server_url, **kwargs)


def close_to(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(math.isclose(x, y, abs_tol=1e-5) for x, y in zip(a, b, strict=True))


def test_api_answers_and_local_is_not_needed(minilm_server, minilm) -> None:
    embed = fallback(minilm_server.base_url, minilm, api_key="secret", dimensions=384)
    vectors = embed.get_text_embedding_batch([TEXT, "Taro likes trains."])
    assert close_to(vectors[0], minilm.get_text_embedding(TEXT))
    (body,) = minilm_server.requests
    assert minilm_server.paths == ["/v1/embeddings"]
    assert body == {"model": MINILM, "input": [TEXT, "Taro likes trains."],
                    "encoding_format": "float", "dimensions": 384}


@pytest.mark.parametrize(
    ("fault", "logged"),
    [(500, "HTTP 500"), (503, "HTTP 503"), (429, "HTTP 429"), ("hang", "timeout")],
)
def test_falls_back_to_local_on_transient_failure(
    minilm_server, minilm, caplog, fault, logged
) -> None:
    minilm_server.faults = [fault]
    embed = fallback(minilm_server.base_url, minilm, timeout=0.5)
    with caplog.at_level(logging.WARNING, logger="llama_index_recency.embeddings"):
        vector = embed.get_query_embedding("How do I take my coffee again?")
    assert close_to(vector, minilm.get_query_embedding("How do I take my coffee again?"))
    assert minilm_server.count("/embeddings") == 1
    (record,) = caplog.records
    assert logged in record.getMessage() and "local model" in record.getMessage()


def test_falls_back_when_nothing_listens(closed_port_url, minilm, caplog) -> None:
    embed = fallback(closed_port_url, minilm)
    with caplog.at_level(logging.WARNING, logger="llama_index_recency.embeddings"):
        vector = embed.get_text_embedding(TEXT)
    assert close_to(vector, minilm.get_text_embedding(TEXT))
    assert "connection error" in caplog.records[0].getMessage()


def test_cooldown_skips_the_api_after_a_fallback(minilm_server, minilm) -> None:
    minilm_server.faults = [500]
    embed = fallback(minilm_server.base_url, minilm, fallback_cooldown=3600)
    embed.get_text_embedding(TEXT)
    embed.get_text_embedding(TEXT)
    assert minilm_server.count("/embeddings") == 1  # the second call went straight to local


def test_zero_cooldown_tries_the_api_again(minilm_server, minilm) -> None:
    minilm_server.faults = [500]
    embed = fallback(minilm_server.base_url, minilm, fallback_cooldown=0)
    embed.get_text_embedding(TEXT)
    embed.get_text_embedding(TEXT)
    assert minilm_server.count("/embeddings") == 2


@pytest.mark.parametrize("status", [400, 401, 404])
def test_client_errors_are_not_hidden_by_the_fallback(minilm_server, minilm, status) -> None:
    minilm_server.faults = [status]
    embed = fallback(minilm_server.base_url, minilm)
    with pytest.raises(EmbeddingAPIError, match=f"HTTP {status}"):
        embed.get_text_embedding(TEXT)


def test_a_different_model_behind_the_api_is_refused(openai_server, minilm) -> None:
    # Same dimension, different space: MiniLM's vectors with their components reversed.
    openai_server.embed = lambda texts: [v[::-1] for v in minilm.get_text_embedding_batch(texts)]
    embed = fallback(openai_server.base_url, minilm)
    with pytest.raises(EmbeddingMismatchError, match="disagree: cosine"):
        embed.get_text_embedding(TEXT)


def test_a_different_dimension_behind_the_api_is_refused(openai_server, minilm) -> None:
    openai_server.embed = lambda texts: [v[:256] for v in minilm.get_text_embedding_batch(texts)]
    with pytest.raises(EmbeddingMismatchError, match="returns 256 dimensions .* 384"):
        fallback(openai_server.base_url, minilm).get_text_embedding(TEXT)
    with pytest.raises(EmbeddingMismatchError, match="API embedding returned 256 dimensions, expected 384"):
        fallback(openai_server.base_url, minilm, dimensions=384).get_text_embedding(TEXT)


def test_local_side_must_have_the_configured_dimension(closed_port_url, minilm) -> None:
    embed = fallback(closed_port_url, minilm, dimensions=256)
    with pytest.raises(EmbeddingMismatchError, match="local fallback embedding returned 384"):
        embed.get_text_embedding(TEXT)


async def test_async_path_uses_the_api_then_falls_back(minilm_server, minilm) -> None:
    embed = fallback(minilm_server.base_url, minilm, fallback_cooldown=0, timeout=0.5)
    first = await embed.aget_query_embedding("coffee?")
    minilm_server.faults = ["hang"]
    second = await embed.aget_text_embedding(TEXT)
    assert close_to(first, minilm.get_query_embedding("coffee?"))
    assert close_to(second, minilm.get_text_embedding(TEXT))
    assert minilm_server.count("/embeddings") == 2


def test_collection_records_the_embedding(minilm_server, minilm, tmp_path) -> None:
    index = open_memory_index(fallback(minilm_server.base_url, minilm), path=str(tmp_path))
    index.insert_nodes([memory_node("Taro likes trains.", "2026-09-01")])
    config = index.vector_store.client.get_collection("memories").config
    assert config.metadata == {EMBEDDING_METADATA_KEY: {"model": MINILM, "dimensions": 384}}
    index.vector_store.client.close()
    # Reopened with the same model: accepted, and the memory is still there.
    reopened = open_memory_index(fallback(minilm_server.base_url, minilm), path=str(tmp_path))
    assert reopened.vector_store.client.count("memories").count == 1


def test_collection_refuses_another_model(tmp_path) -> None:
    node = memory_node("Taro likes trains.", "2026-09-01")
    embed = KnownCosineEmbedding({node.get_content(metadata_mode="embed"): 0.5})
    open_memory_index(embed, path=str(tmp_path)).vector_store.client.close()
    with pytest.raises(EmbeddingMismatchError, match="written with 'known-cosine' \\(2 dims\\).*'other'"):
        open_memory_index(embed, path=str(tmp_path), embedding_name="other")


def test_collection_refuses_another_dimension(tmp_path) -> None:
    two = KnownCosineEmbedding({"a": 0.5})
    three = KnownCosineEmbedding({"a": 0.5, "b": 0.5})
    open_memory_index(two, path=str(tmp_path)).vector_store.client.close()
    with pytest.raises(EmbeddingMismatchError, match="\\(2 dims\\).*\\(3 dims\\)"):
        open_memory_index(three, path=str(tmp_path))


def test_unrecorded_collection_is_adopted_only_if_the_size_fits(tmp_path) -> None:
    from qdrant_client import QdrantClient, models

    client = QdrantClient(path=str(tmp_path))
    for name, size in (("fits", 2), ("too_big", 5)):
        client.create_collection(
            name, vectors_config=models.VectorParams(size=size, distance=models.Distance.COSINE)
        )
    embed = KnownCosineEmbedding({"a": 0.5})
    open_memory_index(embed, client=client, collection_name="fits")
    assert client.get_collection("fits").config.metadata == {
        EMBEDDING_METADATA_KEY: {"model": "known-cosine", "dimensions": 2}
    }
    with pytest.raises(EmbeddingMismatchError, match="holds 5-dimensional vectors"):
        open_memory_index(embed, client=client, collection_name="too_big")

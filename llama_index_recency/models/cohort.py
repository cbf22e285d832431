"""Relevance on a scale that transfers: each question's cosines measured against a cohort.

Raw cosines do not transfer. e5's sit between 0.72 and 0.90, a short vague question scores
high against everything, and an absolute threshold fitted on one store lets memories in on
off-topic questions in another. Speaker verification's answer is score normalisation
against an impostor cohort (T-norm): score the question against a fixed background set of
unrelated memories and express each cosine in units of that question's own spread,

    relevance = (cosine - mean_cohort(question)) / sd_cohort(question)

so a threshold of 3 means "three standard deviations above what unrelated memories score
for this question", on any store, for any question. The transform is affine per question,
so ranking by it (plus a bonus in the same units) keeps the exact search exact.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Optional

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import NodeWithScore

from llama_index_recency.errors import InvalidInputError

logger = logging.getLogger(__name__)

COHORT_LANGUAGES = ("en", "ja")
"""The cohort's languages, one group of 300 sentences each, in this order."""


@functools.cache
def cohort_texts() -> tuple[str, ...]:
    """The shipped cohort: memory-like fact sentences about fictional people, grouped by
    language."""
    data = json.loads(
        resources.files("llama_index_recency.data").joinpath("cohort.json").read_text("utf-8")
    )
    return tuple(f"2026-01-01: {text}" for lang in COHORT_LANGUAGES for text in data[lang])


@dataclass(frozen=True)
class QueryScale:
    """One question's cohort statistics: relevance = (cosine - mean) / sd."""

    mean: float
    sd: float

    def relevance(self, cosine: float) -> float:
        """``cosine`` in this question's cohort units."""
        return (cosine - self.mean) / self.sd

    def cosine(self, relevance: float) -> float:
        """The cosine with this ``relevance``."""
        return self.mean + relevance * self.sd

    def apply(self, results: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        """``results`` with each score moved to cohort units (order unchanged: the map is
        monotone)."""
        return [
            NodeWithScore(node=r.node, score=None if r.score is None else self.relevance(r.score))
            for r in results
        ]


class RelevanceCohort:
    """The cohort's vectors for one embedding model, in language groups; :meth:`scale`
    normalises a question against the group of its own language."""

    def __init__(self, vectors: np.ndarray, model_name: str, groups: int = 1) -> None:
        """Normalise ``vectors`` (one row a sentence, ``groups`` equal language groups in
        order) for ``model_name``.

        Raises:
            InvalidInputError: ``vectors`` is not 2-D, or cannot be split into ``groups``
                equal groups of at least two vectors.
        """
        if vectors.ndim != 2 or len(vectors) < 2 * groups or len(vectors) % groups:
            raise InvalidInputError(f"a cohort of {groups} equal groups of at least two vectors "
                                    f"cannot have shape {vectors.shape}")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        self.vectors = (vectors / np.where(norms == 0, 1.0, norms)).astype(np.float32)
        self.model_name = model_name
        self.groups = groups

    def scale(self, query_vector: Sequence[float]) -> QueryScale:
        """The question's mean and sd of cosines over the cohort group of its language.

        A question scores higher against sentences in its own language, so a cohort that
        mixed languages would measure a two-humped spread; the group with the highest mean
        is the question's own language (or, for another language, the nearest one). The
        whole group, not its nearest members (adaptive T-norm): on LoCoMo the nearest 100
        or 200 let 6-15% of off-topic questions through where the whole group holds 5%.

        Raises:
            InvalidInputError: ``query_vector`` has another dimension than the cohort (another
                model's), or the group's cosines have no spread to scale by.
        """
        query = np.asarray(query_vector, dtype=np.float32)
        if query.shape != (self.vectors.shape[1],):
            raise InvalidInputError(
                f"the question's embedding has {query.size} dimensions, the cohort of "
                f"{self.model_name!r} {self.vectors.shape[1]}: a cohort belongs to one model"
            )
        norm = float(np.linalg.norm(query))
        cosines = (self.vectors @ (query / (norm or 1.0))).astype(np.float64)
        cosines = max(np.split(cosines, self.groups), key=lambda group: float(group.mean()))
        sd = float(cosines.std())
        if not (sd > 0 and math.isfinite(sd)):
            raise InvalidInputError(
                f"the cohort cannot scale this question (sd {sd!r} of its cosines)")
        return QueryScale(mean=float(cosines.mean()), sd=sd)


CACHE_DIR_ENV = "RECENCY_CACHE_DIR"
"""Environment variable naming where embedded cohorts and banks are cached (default: the
user cache directory)."""

_CACHE: dict[str, np.ndarray] = {}
_CACHE_LOCK = threading.Lock()
_COHORTS: dict[str, RelevanceCohort] = {}  # by model name: the cohort's texts are fixed


def relevance_cohort(embed_model: BaseEmbedding) -> RelevanceCohort:
    """The shipped cohort embedded with ``embed_model``, built once per model and process (a
    question on the hot path costs one matrix product, not a hash of 600 sentences)."""
    cohort = _COHORTS.get(embed_model.model_name)
    if cohort is None:
        vectors = cached_embeddings(embed_model, cohort_texts(), query=False)
        cohort = RelevanceCohort(vectors, embed_model.model_name, groups=len(COHORT_LANGUAGES))
        _COHORTS[embed_model.model_name] = cohort
    return cohort


def cached_embeddings(embed_model: BaseEmbedding, texts: Sequence[str], *, query: bool,
                      dimensions: Optional[int] = None) -> np.ndarray:
    """``texts`` embedded with ``embed_model``: once per process, and on disk per model
    (and per ``dimensions``, when given: one model name can serve vectors of several sizes,
    as Qwen3-Embedding truncated to 256 or not).

    Embedding hundreds of sentences takes seconds on a small CPU, so the vectors are kept
    under the model name and the texts' hash in ``RECENCY_CACHE_DIR`` (default: the user
    cache directory); the offline default model's cohort ships with the package.
    """
    key: list[Any] = [embed_model.model_name, "query" if query else "passage", list(texts)]
    if dimensions is not None:
        key.append(dimensions)
    digest = hashlib.sha256(json.dumps(key, ensure_ascii=False).encode()).hexdigest()[:16]
    with _CACHE_LOCK:
        if digest in _CACHE:
            return _CACHE[digest]
        vectors = _shipped_vectors(digest)
        path = _cache_dir() / f"embeddings-{digest}.npy"
        if vectors is None and path.exists():
            vectors = _load(path)
        if vectors is None:
            logger.info("embedding %d sentences with %r once (cached in %s)",
                        len(texts), embed_model.model_name, path.parent)
            if query:
                embedded = [embed_model.get_query_embedding(text) for text in texts]
            else:
                embedded = embed_model.get_text_embedding_batch(list(texts))
            # Kept at the cache's float16 precision, so a first run and a cached one agree.
            vectors = np.asarray(embedded, dtype=np.float16).astype(np.float32)
            _save(path, vectors)
        _CACHE[digest] = vectors
        return vectors


def _shipped_vectors(digest: str) -> Optional[np.ndarray]:
    shipped = resources.files("llama_index_recency.data").joinpath(f"embeddings-{digest}.npy")
    if not shipped.is_file():
        return None
    with shipped.open("rb") as stream:
        return np.load(stream).astype(np.float32)


def _cache_dir() -> Path:
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV])
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("llama-index-recency"))


def _load(path: Path) -> Optional[np.ndarray]:
    try:
        return np.load(path).astype(np.float32)
    except (OSError, ValueError):
        logger.warning("ignoring an unreadable embedding cache %s; embedding again", path)
        return None


def _save(path: Path, vectors: Any) -> None:
    """Write the cache atomically; a read-only or full disk only costs the next process time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial.npy")
        np.save(partial, np.asarray(vectors, dtype=np.float16))
        partial.replace(path)
    except OSError as error:
        logger.warning("could not cache embeddings at %s (%s)", path, error)

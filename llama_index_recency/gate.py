"""The relevance gate on the live store: fitted without labels, re-checked as memories accumulate.

The seed fitted its threshold on 16 memories and said the pass must be rerun as the
device accumulates memories, checking the hit-free headroom each time. Here that pass
needs no labelled questions: a shipped bank of off-topic questions (English and
Japanese: general knowledge and small talk no personal memory answers) is asked of the
store itself, and the threshold is the lowest at which at most ``max_bring_up`` of them
bring any memory into the prompt. The more memories a store holds, the higher an
off-topic question's best match, so the same check after writes says when the gate no
longer holds (:func:`check_gate`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Optional

from llama_index.core.indices.vector_store import VectorStoreIndex
from llama_index.core.schema import QueryBundle
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_recency.errors import InvalidInputError
from llama_index_recency.calibration import NOISE_MARGIN as COSINE_NOISE_MARGIN
from llama_index_recency.cohort import cached_embeddings
from llama_index_recency.intent import question_intent
from llama_index_recency.retriever import QdrantRecencyRetriever
from llama_index_recency.scoring import RecencyPolicy
from llama_index_recency.store import index_policy

MAX_BRING_UP = 0.05
"""Share of off-topic questions allowed to bring a memory into the prompt."""

NOISE_MARGIN = 0.05
"""Smallest gap, in cohort units, a threshold keeps from the off-topic scores around it.

Another CPU moves e5 cosines by ~1e-4; a question's cohort sd is ~0.02 cosine, so 0.05
here is ~0.001 cosine, the margin labelled calibration keeps (``calibration.NOISE_MARGIN``,
used for a policy in cosine units): a threshold closer than that to an off-topic
question's best score could let it in on another machine."""

BANK_LANGUAGES = ("en", "ja")
"""Languages of the shipped off-topic bank (150 questions each)."""

_OPEN = -1e9  # a threshold every memory passes: the search then returns the best one


def offtopic_questions(lang: Optional[str] = None) -> list[str]:
    """The shipped off-topic bank: ``lang`` "en" or "ja", or both (None)."""
    data = json.loads(
        resources.files("llama_index_recency.data").joinpath("offtopic.json").read_text("utf-8")
    )
    languages = BANK_LANGUAGES if lang is None else (lang,)
    if any(code not in BANK_LANGUAGES for code in languages):
        raise InvalidInputError(f"no off-topic bank in language {lang!r}; choose en or ja")
    return [question for code in languages for question in data[code]]


@dataclass(frozen=True)
class GateFit:
    """The off-topic bank's best scores on one store, per language, and the threshold they call for.

    Each language is held to ``max_bring_up`` on its own: a Japanese question scores low on
    an English store, so pooling them would let twice the share of English ones in.
    """

    best: dict[str, tuple[float, ...]]
    """Per language, per bank question, the highest final score any memory reaches (best first)."""
    threshold: float
    """The lowest threshold holding every language to ``max_bring_up``, :data:`NOISE_MARGIN` clear."""
    max_bring_up: float

    def bring_up(self, threshold: float) -> float:
        """The largest share of one language's bank that brings a memory at ``threshold``."""
        return max(sum(score >= threshold for score in best) / len(best)
                   for best in self.best.values())

    def headroom(self, threshold: float) -> float:
        """How far ``threshold`` sits above the best score it must keep out (negative: too low)."""
        return min(threshold - best[math.floor(self.max_bring_up * len(best))]
                   for best in self.best.values())

    def policy(self, base: RecencyPolicy) -> RecencyPolicy:
        """``base`` with this threshold."""
        return base.model_copy(update={"threshold": self.threshold})

    def summary(self, current: float) -> str:
        """One line: the fitted threshold and how the current one fares."""
        questions = sum(len(best) for best in self.best.values())
        return (
            f"gate: threshold {self.threshold:.3g} lets at most {self.bring_up(self.threshold):.1%} "
            f"of a language's off-topic questions in ({questions} asked, at most "
            f"{self.max_bring_up:.0%}); the current {current:.3g} lets {self.bring_up(current):.1%} "
            f"in, headroom {self.headroom(current):+.3g}"
        )


def noise_margin(policy: RecencyPolicy) -> float:
    """The gap a threshold keeps from off-topic scores, in ``policy``'s units (~0.001 cosine)."""
    return COSINE_NOISE_MARGIN if policy.relevance == "cosine" else NOISE_MARGIN


def fit_gate(
    best: Mapping[str, Sequence[float]],
    max_bring_up: float = MAX_BRING_UP,
    margin: float = NOISE_MARGIN,
) -> GateFit:
    """The threshold for off-topic best scores ``best`` (per language): at most ``max_bring_up``
    of each language's questions pass.

    Per language it sits in the middle of the gap above the first score it keeps out, and
    at least ``margin`` (see :func:`noise_margin`) above it, so machine noise cannot let
    that question in.
    """
    if not best or not all(best.values()):
        raise InvalidInputError(
            "fitting the gate needs at least one off-topic question per language")
    if not 0 <= max_bring_up < 1:
        raise InvalidInputError(f"max_bring_up must be in [0, 1), got {max_bring_up!r}")
    ordered = {lang: tuple(sorted(scores, reverse=True)) for lang, scores in best.items()}
    thresholds = []
    for scores in ordered.values():
        allowed = math.floor(max_bring_up * len(scores))
        kept_out = scores[allowed]
        middle = kept_out if allowed == 0 else (kept_out + scores[allowed - 1]) / 2
        thresholds.append(max(middle, kept_out + margin))
    return GateFit(ordered, max(thresholds), max_bring_up)


def calibrate_gate(
    index: VectorStoreIndex,
    policy: Optional[RecencyPolicy] = None,
    *,
    questions: Optional[dict[str, Sequence[str]]] = None,
    max_bring_up: float = MAX_BRING_UP,
    user_id: Optional[str] = None,
    filters: Optional[MetadataFilters] = None,
) -> GateFit:
    """Fit the threshold on the live store from off-topic questions (default: the shipped bank,
    per language).

    Each question is ranked with ``policy`` (default: the store's, :func:`index_policy`)
    by the exact retriever, inside the scope, and its best final score recorded (less the
    threshold's rise for a question about the present); no labelled question is needed.
    ``fit.policy(policy)`` is the policy to save.
    """
    policy = policy or index_policy(index)
    retriever = QdrantRecencyRetriever.from_index(
        index, policy.model_copy(update={"threshold": _OPEN, "top_n": 1}),
        user_id=user_id, filters=filters,
    )
    banks = questions or {lang: offtopic_questions(lang) for lang in BANK_LANGUAGES}
    best: dict[str, list[float]] = {}
    for lang, texts in banks.items():
        vectors = cached_embeddings(index._embed_model, list(texts), query=True)
        for text, vector in zip(texts, vectors, strict=True):
            nodes = retriever.retrieve(QueryBundle(query_str=text, embedding=vector.tolist()))
            if not nodes:
                raise InvalidInputError(
                    "the store (or this user's part of it) is empty: there is no "
                    "gate to fit")
            # A question about the present meets a threshold raised by its larger bonus:
            # its score is recorded against the policy's own threshold.
            raised = policy.for_intent(question_intent(text)).threshold - policy.threshold
            best.setdefault(lang, []).append(float(nodes[0].score or 0.0) - raised)
    return fit_gate(best, max_bring_up, noise_margin(policy))


def check_gate(
    index: VectorStoreIndex,
    policy: Optional[RecencyPolicy] = None,
    *,
    max_bring_up: float = MAX_BRING_UP,
    user_id: Optional[str] = None,
) -> Optional[str]:
    """A one-line warning when the store's threshold lets more than ``max_bring_up`` of the
    off-topic bank in (its headroom is no longer above zero as memories accumulated: at zero
    the question scoring exactly the threshold is let in), else None."""
    policy = policy or index_policy(index)
    fit = calibrate_gate(index, policy, max_bring_up=max_bring_up, user_id=user_id)
    if fit.headroom(policy.threshold) > 0:
        return None
    return (
        f"the relevance gate no longer holds: threshold {policy.threshold:.3g} lets "
        f"{fit.bring_up(policy.threshold):.1%} of off-topic questions bring a memory "
        f"(at most {fit.max_bring_up:.0%}); rerun calibrate --save (it fits {fit.threshold:.3g})"
    )

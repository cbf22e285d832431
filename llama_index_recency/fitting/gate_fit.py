"""The gate's fit without I/O: the off-topic bank, the threshold it calls for per language,
and when a store is due for a new fit.

:mod:`llama_index_recency.querying.gate` asks the bank of a live store and saves the fit; the
exact retriever refits a store it sees grow (:mod:`llama_index_recency.integrations.retriever`).
Both use what is here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from importlib import resources
from typing import Optional

from llama_index_recency.errors import InvalidInputError
from llama_index_recency.ranking.policy import RecencyPolicy

MAX_BRING_UP = 0.05
"""Share of off-topic questions allowed to bring a memory into the prompt."""

COSINE_NOISE_MARGIN = 0.001
"""Cosine a threshold keeps from the off-topic scores it keeps out (another CPU moves e5's
cosines by ~1e-4; ``calibration.NOISE_MARGIN`` is the same margin for labelled fits)."""

NOISE_MARGIN = 0.05
"""Smallest gap, in cohort units, a threshold keeps from the off-topic scores it keeps out.

Another CPU moves e5 cosines by ~1e-4; a question's cohort sd is ~0.02 cosine, so 0.05
here is ~0.001 cosine (:data:`COSINE_NOISE_MARGIN`): a threshold closer than that to an
off-topic question's best score could let it in on another machine."""

BANK_LANGUAGES = ("en", "ja")
"""Languages of the shipped off-topic bank (150 questions each)."""

MIN_FIT_MEMORIES = 20
"""Fewest memories a store holds before it fits its own gate; below, the shipped policy applies.

``benchmarks/gate_fit.py``: a fit on 20 memories holds 2.7–4.3% of the held-out bank in,
while the shipped gate lets 19–51% in on stores of 20–40 raw turns."""

REFIT_RATIO = 2.0
"""A fitted store fits again once it holds this many times the memories of its last fit."""

MIN_LANGUAGE_MEMORIES = MIN_FIT_MEMORIES // 2
"""Fewest memories in a language before its threshold may be fitted under the shipped one: an
English store of 24 memories fitted Japanese at 0.797 (shipped 0.829), which let 111 of the
bank's 150 Japanese questions in once 16 Japanese memories came."""


def offtopic_questions(lang: Optional[str] = None) -> list[str]:
    """The shipped off-topic bank: ``lang`` "en" or "ja", or both (None).

    Raises:
        InvalidInputError: ``lang`` is neither "en" nor "ja".
    """
    data = json.loads(
        resources.files("llama_index_recency.data").joinpath("offtopic.json").read_text("utf-8")
    )
    languages = BANK_LANGUAGES if lang is None else (lang,)
    if any(code not in BANK_LANGUAGES for code in languages):
        raise InvalidInputError(f"no off-topic bank in language {lang!r}; choose en or ja")
    return [question for code in languages for question in data[code]]


@dataclass(frozen=True)
class GateFit:
    """The off-topic bank's best scores on one store, per language, and the thresholds they
    call for.

    Each language is held to ``max_bring_up`` on its own: a Japanese question scores low on
    an English store, so pooling them would let twice the share of English ones in.
    """

    best: dict[str, tuple[float, ...]]
    """Per language, per bank question, the highest final score any memory reaches (best first)."""
    threshold: float
    """The lowest threshold holding every language to ``max_bring_up``, the noise margin
    clear (:func:`noise_margin`)."""
    max_bring_up: float
    thresholds: dict[str, float] = field(default_factory=dict)
    """Per language, the lowest threshold holding its own bank to ``max_bring_up``, margin clear."""
    refused: Optional[str] = None
    """Why the fit must not be adopted (one line), or None: a language's scores around its
    cut sit so close that keeping the margin clear of them keeps out every question the
    share lets in, so the bank cannot place that gate."""

    def bring_up(self, threshold: float) -> float:
        """The largest share of one language's bank that brings a memory at ``threshold``."""
        return max(sum(score >= threshold for score in best) / len(best)
                   for best in self.best.values())

    def headroom(self, threshold: float) -> float:
        """How far ``threshold`` sits above the best score it must keep out (negative: too low)."""
        return min(threshold - best[math.floor(self.max_bring_up * len(best))]
                   for best in self.best.values())

    def lets_too_many_in(self, policy: RecencyPolicy) -> bool:
        """Whether ``policy`` (each language's bank met by that language's threshold) lets
        more than ``max_bring_up`` of a language's bank in: its headroom is not above zero."""
        return any(language_threshold(policy, lang)
                   - best[math.floor(self.max_bring_up * len(best))] <= 0
                   for lang, best in self.best.items())

    def let_in(self, policy: RecencyPolicy) -> dict[str, tuple[float, float]]:
        """Per language, the threshold ``policy`` meets that language's questions with and the
        share of its bank let in there."""
        return {lang: (threshold := language_threshold(policy, lang),
                       sum(score >= threshold for score in best) / len(best))
                for lang, best in self.best.items()}

    def policy(self, base: RecencyPolicy, origin: str = "explicit") -> RecencyPolicy:
        """``base`` with these thresholds (per language, and their max for the rest) and
        ``origin``."""
        return base.model_copy(update={"threshold": self.threshold,
                                       "language_thresholds": dict(self.thresholds),
                                       "threshold_origin": origin})

    def summary(self, current: Optional[float | RecencyPolicy]) -> str:
        """One line: the fitted threshold and how the current one fares (a policy: each
        language's threshold on that language's questions, as it ranks them; None: a gate in
        other units, which these scores cannot measure)."""
        questions = sum(len(best) for best in self.best.values())
        fitted = (f"gate: threshold {self.threshold:.3g} lets at most "
                  f"{self.bring_up(self.threshold):.1%} of a language's off-topic questions in "
                  f"({questions} asked, at most {self.max_bring_up:.0%})")
        if current is None:
            return fitted
        if isinstance(current, RecencyPolicy):
            shares = ", ".join(f"{lang} {threshold:.3g} lets {share:.1%}"
                               for lang, (threshold, share) in self.let_in(current).items())
            return f"{fitted}; the current {shares} in"
        return (f"{fitted}; the current {current:.3g} lets {self.bring_up(current):.1%} in, "
                f"headroom {self.headroom(current):+.3g}")


def language_threshold(policy: RecencyPolicy, lang: str) -> float:
    """The threshold ``policy`` meets a question in ``lang`` with."""
    chosen = policy.threshold_language(lang)
    return policy.threshold if chosen is None else policy.language_thresholds[chosen]


def noise_margin(policy: RecencyPolicy) -> float:
    """The gap a threshold keeps from off-topic scores, in ``policy``'s units (~0.001 cosine)."""
    return COSINE_NOISE_MARGIN if policy.relevance == "cosine" else NOISE_MARGIN


def fit_gate(
    best: Mapping[str, Sequence[float]],
    max_bring_up: float = MAX_BRING_UP,
    margin: float = NOISE_MARGIN,
    floors: Optional[Mapping[str, float]] = None,
) -> GateFit:
    """The thresholds for off-topic best scores ``best`` (per language): at most
    ``max_bring_up`` of each language's questions pass, and none under its ``floors``
    (a language the store holds too few memories in keeps its shipped threshold at least).

    Per language it sits in the middle of the gap above the first score it keeps out, and
    at least ``margin`` (see :func:`noise_margin`) above every score it keeps out, so
    machine noise cannot let one of them in. When that margin keeps out every question the
    share allows in (the scores around the cut closer than the margin), the fit says so in
    :attr:`GateFit.refused`.

    Raises:
        InvalidInputError: No language, or a language without scores, in ``best``; or
            ``max_bring_up`` outside [0, 1).
    """
    if not best or not all(best.values()):
        raise InvalidInputError(
            "fitting the gate needs at least one off-topic question per language")
    if not 0 <= max_bring_up < 1:
        raise InvalidInputError(f"max_bring_up must be in [0, 1), got {max_bring_up!r}")
    ordered = {lang: tuple(sorted(scores, reverse=True)) for lang, scores in best.items()}
    thresholds: dict[str, float] = {}
    refused = []
    for lang, scores in ordered.items():
        allowed = math.floor(max_bring_up * len(scores))
        kept_out = scores[allowed]
        middle = kept_out if allowed == 0 else (kept_out + scores[allowed - 1]) / 2
        threshold = max(middle, kept_out + margin)
        for score in reversed(scores[:allowed]):  # a score it now keeps out, within the margin
            if threshold - margin < score < threshold:
                threshold = score + margin
        thresholds[lang] = max(threshold, (floors or {}).get(lang, threshold))
        if allowed and threshold > scores[0]:
            refused.append(
                f"{lang}: its {allowed + 1} best off-topic scores ({scores[0]:.4f} to "
                f"{kept_out:.4f}) sit closer than the {margin:g} margin, which keeps all out")
    reason = ("the gate fit is refused: " + "; ".join(refused)) if refused else None
    return GateFit(ordered, max(thresholds.values()), max_bring_up, thresholds, reason)


def refit_due(memories: int, fitted_on: Optional[int], min_memories: int = MIN_FIT_MEMORIES,
              ratio: float = REFIT_RATIO) -> bool:
    """Whether a store of ``memories`` fits its gate again: it holds ``min_memories`` and was
    never fitted (``fitted_on`` None) or holds ``ratio`` times the memories of its last fit."""
    if memories < min_memories:
        return False
    return fitted_on is None or memories >= ratio * fitted_on


def fitted_origin(memories: int, day: date) -> str:
    """The :attr:`RecencyPolicy.threshold_origin` of a gate fitted on a store."""
    return f"fitted on {memories} memories on {day.isoformat()}"

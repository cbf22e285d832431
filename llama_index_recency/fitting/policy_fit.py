"""The policy fit: bonus candidates scaled to the embedding model's own cosine spread (e5's
cosines sit in 0.72-0.90 with an sd of ~0.027, Qwen3's spread wider), each with its own
fitted threshold, and the rule that adopts one (:func:`fit_policy`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from llama_index_recency.errors import InvalidInputError
from llama_index_recency.fitting.calibration import (
    DEFAULT_KEY,
    CandidateResult,
    RetrievedCandidates,
    ThresholdFit,
    calibrate,
    check_labels,
    fit_threshold,
    is_vague,
    with_bonus,
)
from llama_index_recency.fitting.gate_fit import COSINE_NOISE_MARGIN
from llama_index_recency.ranking.policy import DROPPED_NO_DATE, RecencyPolicy

SPREAD_KS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.5, 1.0, 1.5, 2.0)
"""Bonus weights :func:`fit_policy` tries, in units of the raw-cosine sd: ``weight = k * sd``.

From a bonus too small to reorder anything (0.1 sd) to one that outweighs a typical
difference in relevance (2 sd: the default 0.05 is ~1.5 sd for Qwen3 and ~2 sd for e5).
"""

SPREAD_TAUS: tuple[float, ...] = (14.0, 30.0)
"""Bonus decays :func:`fit_policy` tries, in days: the two of
:data:`~llama_index_recency.fitting.calibration.SEED_GRID`."""

NOISE_MARGIN = COSINE_NOISE_MARGIN
"""Cosine a fitted threshold must keep from both sides of its gap for a candidate to pass.

Another CPU moves e5's cosines by ~1e-4 (a different build of the same 4-bit kernels), so
a candidate that passes only by less than this would pass on one machine and fail on the
next: it must still pass with every cosine moved by ±0.001."""


def raw_cosine_sd(*stores: Sequence[RetrievedCandidates]) -> float:
    """The model's score spread: the sd of raw cosines over every (question, memory) pair.

    Retrieve every memory for it (``similarity_top_k`` = the store's size). Given several
    stores (e.g. one per language), each is measured from its own mean (pooled
    within-store sd), so an offset between languages does not count as spread.

    Raises:
        InvalidInputError: Fewer than two scored candidates, or no spread (each store's
            cosines all equal).
    """
    squares, count = 0.0, 0
    for retrieved in stores:
        scores = [n.score for item in retrieved for n in item.candidates if n.score is not None]
        if scores:
            mean = sum(scores) / len(scores)
            squares += sum((score - mean) ** 2 for score in scores)
            count += len(scores)
    if count < 2 or squares <= 0:
        raise InvalidInputError(
            "the spread needs at least two different raw cosines; is the store empty?")
    return math.sqrt(squares / count)


def spread_grid(
    sd: float, ks: Sequence[float] = SPREAD_KS, taus: Sequence[float] = SPREAD_TAUS
) -> tuple[tuple[float, float], ...]:
    """(weight, tau_days) candidates with ``weight = k * sd`` (rounded to 5 decimals).

    Raises:
        InvalidInputError: ``sd`` is not finite and > 0.
    """
    if not (0 < sd < math.inf):
        raise InvalidInputError(f"the raw-cosine sd must be finite and > 0, got {sd}")
    return tuple((round(k * sd, 5), tau) for tau in taus for k in ks)


@dataclass(frozen=True)
class PolicyCandidate:
    """One (weight, tau_days) with its own fitted threshold and what it does."""

    fit: ThresholdFit
    result: CandidateResult | None
    """The conditions checked at the fitted threshold; ``None`` when no threshold separates."""
    newer_first: tuple[str, ...]
    """Contradiction questions whose target (the newer memory) ranks first after the bonus."""
    contradictions: int
    sd: float
    crowded_out: tuple[str, ...] = ()
    """Targets that reach the threshold but not the prompt: ``top_n`` newer memories beat them."""

    @property
    def weight(self) -> float:
        return self.fit.weight

    @property
    def tau_days(self) -> float:
        return self.fit.tau_days

    @property
    def threshold(self) -> float | None:
        return self.fit.threshold

    @property
    def k(self) -> float:
        """The weight in sd units."""
        return self.weight / self.sd

    @property
    def passed(self) -> bool:
        """Every target enters the prompt (reaches the fitted threshold, within ``top_n``),
        no hit-free memory reaches the threshold, and both hold :data:`NOISE_MARGIN` clear."""
        margin = self.fit.margin
        return (self.result is not None and self.result.passed and not self.crowded_out
                and margin is not None and margin >= NOISE_MARGIN)

    @property
    def headroom_sd(self) -> float | None:
        """The fitted threshold's distance to the nearer side of its gap, in sd units."""
        margin = self.fit.margin
        return None if margin is None else margin / self.sd


@dataclass(frozen=True)
class PolicyFit:
    """Every spread-scaled candidate, the spread they were scaled to, and the adopted one."""

    sd: float
    top_k: int
    candidates: tuple[PolicyCandidate, ...]
    adopted: PolicyCandidate | None
    """See :func:`fit_policy` for the rule; ``None`` when no candidate passes."""

    def policy(self, base: RecencyPolicy) -> RecencyPolicy:
        """``base`` with the adopted weight, tau_days and threshold, in cosine units (the
        candidates' scores are raw cosines); the threshold is every language's (explicit).

        Raises:
            InvalidInputError: No candidate was adopted.
        """
        if self.adopted is None or self.adopted.threshold is None:
            raise InvalidInputError(
                "no candidate passes every condition; there is no policy to adopt")
        adopted = self.adopted
        return base.model_copy(update={"relevance": "cosine", "weight": adopted.weight,
                                       "tau_days": adopted.tau_days,
                                       "threshold": adopted.threshold,
                                       "language_thresholds": {},
                                       "threshold_origin": "explicit"})

    def verdict(self, candidate: PolicyCandidate) -> str:
        """``"adopted"``, ``"passes"``, ``"no threshold"``, ``"fails (b), (c)"``, ``"crowded
        out: …"`` or ``"within noise"`` (passes by less than :data:`NOISE_MARGIN`)."""
        if candidate.result is None:
            return "no threshold"
        if candidate.result.failed:
            return "fails " + ", ".join(f"({letter})" for letter in candidate.result.failed)
        if candidate.crowded_out:
            return "crowded out: " + ", ".join(candidate.crowded_out)
        if not candidate.passed:
            return "within noise"
        return "adopted" if candidate is self.adopted else "passes"

    def summary(self) -> str:
        """One sentence: the adopted policy, its headroom and recency effect, or none."""
        if self.adopted is None:
            return ("No candidate passes every condition at any fitted threshold; none adopted. "
                    "Check the labels, or whether this model separates the targets at all.")
        best = self.adopted
        assert best.threshold is not None and best.headroom_sd is not None
        return (
            f"Adopted weight={best.weight:g} ({best.k:.1f} sd), tau_days={best.tau_days:g}, "
            f"threshold={best.threshold:.4g}: the newer memory first on "
            f"{len(best.newer_first)} of {best.contradictions} contradiction questions; "
            f"headroom {best.headroom_sd:.2f} sd (raw-cosine sd {self.sd:.4f})."
        )

    def to_table(self) -> str:
        """A Markdown table: one row per candidate."""
        header = ["k (sd)", "weight", "tau (days)", "Threshold", "Hit-free max",
                  "Lowest target", "Headroom (sd)", "Newer first", "Verdict"]
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for c in self.candidates:
            lowest = c.fit.lowest_target
            cells = [
                f"{c.k:.1f}", f"{c.weight:g}", f"{c.tau_days:g}",
                "–" if c.threshold is None else f"{c.threshold:.4g}",
                f"{c.fit.hit_free.final:.3f} ({c.fit.hit_free.question_id})",
                "–" if lowest is None else f"{lowest.final:.3f} ({lowest.label})",
                "–" if c.headroom_sd is None else f"{c.headroom_sd:.2f}",
                f"{len(c.newer_first)}/{c.contradictions}",
                self.verdict(c),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def __str__(self) -> str:
        return f"{self.to_table()}\n\n{self.summary()}"


def fit_policy(
    retrieved: Sequence[RetrievedCandidates],
    policy: RecencyPolicy,
    sd: float,
    grid: Sequence[tuple[float, float]] | None = None,
    *,
    key: str = DEFAULT_KEY,
) -> PolicyFit:
    """Fit threshold and (weight, tau_days) together, on the model's own scale.

    Each candidate of ``grid`` (default :func:`spread_grid` of ``sd``, the raw-cosine sd
    from :func:`raw_cosine_sd`) gets its threshold from :func:`fit_threshold` and is
    checked with :func:`calibrate` at it; it passes when every condition does and no
    target is crowded out of the prompt (``top_n``) by newer memories. The adopted
    candidate is, among the passing ones: the one whose newer memory comes first on the most
    contradiction questions (all of them when any candidate does: a bonus too small to
    reorder anything keeps no recency effect), then the largest headroom in sd units,
    then the smaller weight. ``policy`` supplies the reference date and date handling.

    Raises:
        InvalidInputError: Labels that cannot be calibrated on
            (:func:`~llama_index_recency.fitting.calibration.check_labels`), ``sd`` not finite
            and > 0 (without ``grid``), or a grid point without a finite weight >= 0 and
            tau_days > 0.
    """
    check_labels(retrieved)
    candidates = []
    for weight, tau_days in spread_grid(sd) if grid is None else grid:
        bonus = with_bonus(policy, weight, tau_days)
        fit = fit_threshold(retrieved, bonus, key=key)
        result: CandidateResult | None = None
        crowded_out: tuple[str, ...] = ()
        if fit.threshold is not None:
            fitted = bonus.model_copy(update={"threshold": fit.threshold})
            result = calibrate(retrieved, fitted, [(weight, tau_days)], key=key).results[0]
            crowded_out = _crowded_out(retrieved, fitted, key)
        newer_first, contradictions = _newer_first(retrieved, bonus, key)
        candidates.append(
            PolicyCandidate(fit, result, newer_first, contradictions, sd, crowded_out)
        )
    passing = [c for c in candidates if c.passed]
    adopted = max(
        passing, key=lambda c: (len(c.newer_first), c.headroom_sd or 0.0, -c.weight), default=None
    )
    top_k = max((len(item.candidates) for item in retrieved), default=0)
    return PolicyFit(sd, top_k, tuple(candidates), adopted)


def _crowded_out(
    retrieved: Sequence[RetrievedCandidates], policy: RecencyPolicy, key: str
) -> tuple[str, ...]:
    """``"H1 favorite_food"`` for each target at or over the threshold but not kept (top_n)."""
    reference = policy.reference()
    crowded = []
    for item in retrieved:
        if is_vague(item.question):
            continue  # checked by vague_listed
        keys = {n.node.node_id: n.node.metadata.get(key, n.node.node_id) for n in item.candidates}
        ranking = policy.rank(item.candidates, reference)
        kept = {keys[node.node.node_id] for node in ranking.nodes}
        reached = {keys[row.node_id] for row in ranking.rows if row.final >= policy.threshold
                   and row.reason != DROPPED_NO_DATE}
        crowded += [f"{item.question.id} {target}" for target in item.question.targets
                    if target in reached and target not in kept]
    return tuple(crowded)


def _newer_first(
    retrieved: Sequence[RetrievedCandidates], policy: RecencyPolicy, key: str
) -> tuple[tuple[str, ...], int]:
    """The contradiction questions whose best post-bonus memory is a target, and how many."""
    reference = policy.reference()
    first, count = [], 0
    for item in retrieved:
        if item.question.kind != "contradiction":
            continue
        count += 1
        keys = {n.node.node_id: n.node.metadata.get(key, n.node.node_id) for n in item.candidates}
        rows = [row for row in policy.rank(item.candidates, reference).rows
                if row.reason != DROPPED_NO_DATE]
        if rows and keys[max(rows, key=lambda row: row.final).node_id] in item.question.targets:
            first.append(item.question.id)
    return tuple(first), count

"""Calibration: choose the bonus (weight, tau_days) and the threshold from labelled questions.

:func:`calibrate` runs the "four-candidate pass" over any store and grid: (a) no hit-free
question may put a memory at or over the threshold, and every target memory of a hit
question must reach it. :func:`fit_threshold` places the threshold for a new embedding
model, whose cosines live on their own scale. Candidates are retrieved once (top-k by raw
cosine) and re-scored per grid point with
:class:`~llama_index_recency.ranking.policy.RecencyPolicy`, so the numbers are the postprocessor's.
The policy fit, which scales the candidate weights to the model's own spread, is in
:mod:`llama_index_recency.fitting.policy_fit`.

A vague reference ("How did that thing you were working on go?",
:func:`~llama_index_recency.ranking.vague.is_vague_reference`) scores high against no memory, so
its targets do not place the threshold; they reach the prompt through the vague path
(the recent memories fill the places left), which is what its condition checks: at least
half its targets listed (:func:`vague_listed`).
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence
from dataclasses import dataclass

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore

from llama_index_recency.errors import InvalidInputError
from llama_index_recency.ranking.policy import DROPPED_NO_DATE, RecencyPolicy
from llama_index_recency.ranking.vague import (
    VAGUE_WINDOW_DAYS,
    fill_with_recent,
    is_vague_reference,
    recent_candidates,
)
from llama_index_recency.records.examples import ExampleQuestion

SEED_GRID: tuple[tuple[float, float], ...] = (
    (0.03, 30.0), (0.04, 30.0), (0.04, 14.0), (0.05, 14.0)
)
"""The four (weight, tau_days) candidates :func:`calibrate` runs by default, smallest bonus
first."""

DEFAULT_KEY = "key"
"""Metadata key naming a memory in questions' ``targets`` (the node id when it is absent)."""

@dataclass(frozen=True)
class RetrievedCandidates:
    """One labelled question and its top-k memories by raw cosine, retrieved once."""

    question: ExampleQuestion
    candidates: tuple[NodeWithScore, ...]

    def top(self, top_k: int) -> RetrievedCandidates:
        """The same question with only its ``top_k`` best candidates by raw cosine."""
        best = sorted(self.candidates, key=lambda n: n.score or 0.0, reverse=True)
        return RetrievedCandidates(self.question, tuple(best[:top_k]))


@dataclass(frozen=True)
class TargetScore:
    """A target memory's post-bonus score for one question; ``None`` when it was not retrieved."""

    question_id: str
    key: str
    final: float | None

    @property
    def label(self) -> str:
        """``"C1 cafe_au_lait"``: the question and the memory, as table headers show them."""
        return f"{self.question_id} {self.key}"


@dataclass(frozen=True)
class HitFreeMax:
    """The highest post-bonus score on any hit-free question, and where it came from."""

    final: float
    question_id: str
    key: str


@dataclass(frozen=True)
class VagueCheck:
    """A vague question's condition: which of its targets the vague path listed."""

    letter: str
    question_id: str
    targets: tuple[str, ...]
    listed: tuple[str, ...]

    @property
    def needed(self) -> int:
        """At least half the targets, rounded up."""
        return math.ceil(len(self.targets) / 2)

    @property
    def passed(self) -> bool:
        return len(self.listed) >= self.needed

    @property
    def label(self) -> str:
        """``"H2 (vague)"``, as table headers show it."""
        return f"{self.question_id} (vague)"

    @property
    def cell(self) -> str:
        """``"2/3 listed"``."""
        return f"{len(self.listed)}/{len(self.targets)} listed"


@dataclass(frozen=True)
class CandidateResult:
    """One (weight, tau_days) candidate: its scores and the conditions it failed."""

    weight: float
    tau_days: float
    threshold: float
    hit_free: HitFreeMax
    targets: tuple[TargetScore, ...]
    failed: tuple[str, ...]
    """Condition letters not met: ``"a"`` (the hit-free max), ``"b"``, ... (the targets)."""
    vague: tuple[VagueCheck, ...] = ()
    """The vague questions' conditions (their targets are not in ``targets``)."""

    @property
    def passed(self) -> bool:
        return not self.failed

    @property
    def headroom(self) -> float:
        """How far the hit-free max stays under the threshold (negative: condition (a) fails)."""
        return self.threshold - self.hit_free.final


@dataclass(frozen=True)
class Calibration:
    """The grid's results, the conditions they were held to, and the adopted candidate."""

    threshold: float
    top_k: int
    conditions: tuple[tuple[str, str], ...]
    """(letter, description) pairs, e.g. ``("b", "C1 cafe_au_lait ≥ 0.45")``."""
    results: tuple[CandidateResult, ...]
    adopted: CandidateResult | None
    """The smallest passing weight (ties: smaller tau); ``None`` when no candidate passes."""

    def verdict(self, result: CandidateResult) -> str:
        """``"adopted"``, ``"passes"`` or ``"fails (a), (c)"`` for one row."""
        if result.failed:
            return "fails " + ", ".join(f"({letter})" for letter in result.failed)
        return "adopted" if result is self.adopted else "passes"

    def summary(self) -> str:
        """One sentence: what was adopted and its headroom, or that nothing passed."""
        if self.adopted is None:
            return (
                "No candidate passes every condition; none adopted. Widen the grid, "
                "fit the threshold for this embedding model, or revisit the labels."
            )
        best = self.adopted
        return (
            f"Adopted weight={best.weight:g}, tau_days={best.tau_days:g}: the smallest passing "
            f"weight; hit-free headroom under {self.threshold:g} is {best.headroom:.3f}."
        )

    def to_table(self) -> str:
        """A Markdown table: candidate, hit-free max, headroom, each target, verdict."""
        target_labels = [score.label for score in self.results[0].targets] if self.results else []
        target_labels += [check.label for check in self.results[0].vague] if self.results else []
        header = ["weight", "tau (days)", "Hit-free max", "Headroom", *target_labels, "Verdict"]
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for result in self.results:
            cells = [
                f"{result.weight:g}",
                f"{result.tau_days:g}",
                f"{result.hit_free.final:.3f}",
                f"{result.headroom:.3f}",
                *(format_score(score.final, self.top_k) for score in result.targets),
                *(check.cell for check in result.vague),
                self.verdict(result),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def __str__(self) -> str:
        legend = "\n".join(f"- ({letter}) {text}" for letter, text in self.conditions)
        return f"{self.to_table()}\n\n{legend}\n\n{self.summary()}"


@dataclass(frozen=True)
class ThresholdFit:
    """Where the threshold goes for one (weight, tau_days): between hit-free and target scores.

    ``threshold`` sits in the middle of the gap between the hit-free max and the lowest
    target above it (rounded to the fewest decimals, two to four, that stay inside the
    gap), so both sides get the same margin. Targets at or under the hit-free max are
    ``unreachable``:
    no threshold that keeps hit-free questions clean lets them into the prompt.
    """

    weight: float
    tau_days: float
    hit_free: HitFreeMax
    lowest_target: TargetScore | None
    threshold: float | None
    unreachable: tuple[TargetScore, ...]

    @property
    def margin(self) -> float | None:
        """Distance from the threshold to the nearer side of the gap (``None``: no gap)."""
        if self.threshold is None or self.lowest_target is None:
            return None
        assert self.lowest_target.final is not None
        return min(self.threshold - self.hit_free.final, self.lowest_target.final - self.threshold)

    def rows(self) -> list[tuple[str, str]]:
        """(item, value) pairs: the bonus, both sides of the gap, threshold, margin, unreachable."""
        lowest = self.lowest_target
        return [
            ("Bonus", f"{self.weight:g} · exp(−days/{self.tau_days:g})"),
            ("Hit-free max", f"{self.hit_free.final:.3f} ({self.hit_free.question_id} "
                             f"{self.hit_free.key})"),
            ("Lowest target above it", "none" if lowest is None
             else f"{lowest.final:.3f} ({lowest.label})"),
            ("Threshold", "none separates them" if self.threshold is None
             else f"{self.threshold:g}"),
            ("Margin", "–" if self.margin is None else f"{self.margin:.3f}"),
            ("Unreachable targets", ", ".join(
                f"{score.label} {format_score(score.final)}" for score in self.unreachable
            ) or "none"),
        ]

    def to_table(self) -> str:
        """A Markdown table of :meth:`rows`."""
        lines = ["| Item | Value |", "|---|---|"]
        lines += [f"| {item} | {value} |" for item, value in self.rows()]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_table()


def format_score(final: float | None, top_k: int | None = None) -> str:
    """``0.455``, or a dash saying the memory was not among the retrieved candidates."""
    if final is not None:
        return f"{final:.3f}"
    return f"– (not in top {top_k})" if top_k else "– (not retrieved)"


def retrieve_candidates(
    retriever: BaseRetriever, questions: Sequence[ExampleQuestion]
) -> list[RetrievedCandidates]:
    """Retrieve each question's candidates once, e.g. ``index.as_retriever(similarity_top_k=8)``.

    Each node's score is its raw cosine; calibration re-scores these for every candidate.
    """
    return [
        RetrievedCandidates(question, tuple(retriever.retrieve(question.text)))
        for question in questions
    ]


def calibrate(
    retrieved: Sequence[RetrievedCandidates],
    policy: RecencyPolicy,
    grid: Sequence[tuple[float, float]] = SEED_GRID,
    *,
    key: str = DEFAULT_KEY,
) -> Calibration:
    """Score every (weight, tau_days) in ``grid`` against the labelled questions.

    ``policy`` supplies the threshold, reference date and date handling; only weight
    and tau_days vary. Condition (a): the hit-free max stays under the threshold;
    (b), (c), ...: each question's targets reach it, in question order; a vague
    reference gets one condition instead: at least half its targets listed
    (:func:`vague_listed`). Among passing candidates the smallest weight is adopted
    (ties: the smaller tau); none passing means none adopted.

    Raises:
        InvalidInputError: Labels that cannot be calibrated on (:func:`check_labels`), or a
            grid point without a finite weight >= 0 and tau_days > 0.
    """
    check_labels(retrieved)
    # One check per target, or one per vague question: (question, target or None).
    checks = [
        (item, target)
        for item in retrieved
        for target in ((None,) if is_vague(item.question) else item.question.targets)
    ]
    letters = _letters(1 + len(checks))
    conditions = ((letters[0], f"hit-free max < {policy.threshold:g}"),) + tuple(
        (letter, f"{item.question.id} {target} ≥ {policy.threshold:g}" if target is not None
         else f"{item.question.id} lists ≥ {math.ceil(len(item.question.targets) / 2)} of "
              f"{', '.join(item.question.targets)} (vague reference: recent memories, "
              f"{VAGUE_WINDOW_DAYS:g} days)")
        for letter, (item, target) in zip(letters[1:], checks, strict=True)
    )
    results = []
    for weight, tau_days in grid:
        candidate = with_bonus(policy, weight, tau_days)
        hit_free, scores = _score(retrieved, candidate, key)
        finals = iter(scores)
        failed = [letters[0]] if hit_free.final >= policy.threshold else []
        vague = []
        for letter, (item, target) in zip(letters[1:], checks, strict=True):
            if target is None:
                vague.append(VagueCheck(letter, item.question.id, tuple(item.question.targets),
                                        vague_listed(item, candidate, key)))
                passes = vague[-1].passed
            else:
                final = next(finals).final
                passes = final is not None and final >= policy.threshold
            if not passes:
                failed.append(letter)
        results.append(
            CandidateResult(weight, tau_days, policy.threshold, hit_free, scores, tuple(failed),
                            tuple(vague))
        )
    passing = [result for result in results if result.passed]
    adopted = min(passing, key=lambda r: (r.weight, r.tau_days)) if passing else None
    top_k = max((len(item.candidates) for item in retrieved), default=0)
    return Calibration(policy.threshold, top_k, conditions, tuple(results), adopted)


def is_vague(question: ExampleQuestion) -> bool:
    """A question with targets that is a vague reference: its targets come by the vague path."""
    return bool(question.targets) and is_vague_reference(question.text)


def vague_listed(
    item: RetrievedCandidates, policy: RecencyPolicy, key: str = DEFAULT_KEY
) -> tuple[str, ...]:
    """The targets of a vague question that reach the prompt through the vague path.

    The path of :class:`~llama_index_recency.QdrantRecencyRetriever` over the retrieved
    candidates: what passes the threshold, then the places left under ``top_n`` filled
    with the candidates dated within :data:`~llama_index_recency.ranking.vague.VAGUE_WINDOW_DAYS`
    (the retriever searches the whole window; retrieve every memory to match it exactly).
    """
    reference = policy.reference()
    keys = {n.node.node_id: n.node.metadata.get(key, n.node.node_id) for n in item.candidates}
    ranking = fill_with_recent(policy.rank(item.candidates, reference),
                               recent_candidates(item.candidates, policy, reference),
                               policy, reference)
    kept = {keys[n.node.node_id] for n in ranking.nodes}
    return tuple(target for target in item.question.targets if target in kept)


def fit_threshold(
    retrieved: Sequence[RetrievedCandidates],
    policy: RecencyPolicy,
    *,
    key: str = DEFAULT_KEY,
) -> ThresholdFit:
    """Place the threshold for ``policy``'s bonus between hit-free and target scores.

    Use it for a new embedding model, whose cosines live on their own scale (the default
    0.45 belongs to Qwen3-Embedding-0.6B at 256 dims); ``policy.threshold`` is ignored.

    Raises:
        InvalidInputError: Labels that cannot be calibrated on (:func:`check_labels`).
    """
    check_labels(retrieved)
    hit_free, scores = _score(retrieved, policy, key)
    above = [s for s in scores if s.final is not None and s.final > hit_free.final]
    unreachable = tuple(s for s in scores if s not in above)
    if not above:
        return ThresholdFit(policy.weight, policy.tau_days, hit_free, None, None, unreachable)
    lowest = min(above, key=lambda s: s.final or 0.0)
    assert lowest.final is not None
    middle = (hit_free.final + lowest.final) / 2
    inside = [round(middle, digits) for digits in (2, 3, 4)
              if hit_free.final < round(middle, digits) <= lowest.final]
    threshold = inside[0] if inside else middle
    return ThresholdFit(policy.weight, policy.tau_days, hit_free, lowest, threshold, unreachable)


def with_bonus(policy: RecencyPolicy, weight: float, tau_days: float) -> RecencyPolicy:
    """``policy`` with the candidate's bonus (``weight``, ``tau_days``).

    Raises:
        InvalidInputError: ``weight`` not finite and >= 0, or ``tau_days`` not finite and > 0.
    """
    if not (0 <= weight < math.inf and 0 < tau_days < math.inf):
        raise InvalidInputError(
            f"a candidate needs finite weight >= 0 and tau_days > 0, got ({weight}, {tau_days})"
        )
    return policy.model_copy(update={"weight": weight, "tau_days": tau_days})


def _score(
    retrieved: Sequence[RetrievedCandidates], policy: RecencyPolicy, key: str
) -> tuple[HitFreeMax, tuple[TargetScore, ...]]:
    """Post-bonus scores under ``policy``: the hit-free max and every target's score (but a
    vague question's: those do not place the threshold)."""
    reference = policy.reference()
    hit_free: HitFreeMax | None = None
    scores: list[TargetScore] = []
    for item in retrieved:
        if is_vague(item.question):
            continue
        keys = {node.node.node_id: node.node.metadata.get(key, node.node.node_id)
                for node in item.candidates}
        finals = {
            keys[row.node_id]: row.final
            for row in policy.rank(item.candidates, reference).rows
            if row.reason != DROPPED_NO_DATE
        }
        if not item.question.targets:
            for memory, final in finals.items():
                if hit_free is None or final > hit_free.final:
                    hit_free = HitFreeMax(final, item.question.id, memory)
        scores += [TargetScore(item.question.id, t, finals.get(t)) for t in item.question.targets]
    assert hit_free is not None  # check_labels: a hit-free question with candidates exists
    return hit_free, tuple(scores)


def check_labels(retrieved: Sequence[RetrievedCandidates]) -> None:
    """Refuse labels a calibration cannot place a threshold with.

    Raises:
        InvalidInputError: No question with targets, or no hit-free question (no targets)
            with retrieved candidates.
    """
    if not any(item.question.targets for item in retrieved):
        raise InvalidInputError("calibration needs at least one question with target memories")
    if not any(not item.question.targets and item.candidates for item in retrieved):
        raise InvalidInputError(
            "calibration needs at least one hit-free question (no targets) with retrieved "
            "candidates; is the store empty?"
        )


def _letters(count: int) -> list[str]:
    """Condition names a, b, c, ... (then a2, b2, ... past z)."""
    alphabet = string.ascii_lowercase
    return [alphabet[i % 26] + (str(i // 26 + 1) if i >= 26 else "") for i in range(count)]

"""The recency math: one definition of the date parsing, the bonus and the ranking.

Everything that scores a memory (the postprocessor, the Qdrant retriever, calibration)
goes through :class:`RecencyPolicy`, so the formula is written exactly once. Its defaults
are the specification's: a bonus of 0.05 * exp(-age_days / 14) on raw cosine, at most 3
memories at or above 0.45.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import date, datetime, timezone
from typing import Annotated, Any, Literal, Optional, Self

from llama_index.core.bridge.pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_serializer,
    field_validator,
    model_validator,
)
from llama_index.core.schema import NodeWithScore

from llama_index_recency.errors import InvalidInputError, MemoryDateError, OneLineValidation
from llama_index_recency.ranking.intent import Intent, question_intent
from llama_index_recency.ranking.language import nearest_language, question_language
from llama_index_recency.ranking.ranked import RankedMemory, RecencyRanking, Relevance
from llama_index_recency.records.dates import parse_memory_date

logger = logging.getLogger(__name__)

SECONDS_PER_DAY = 86_400.0

MissingDatePolicy = Literal["no_bonus", "drop", "raise"]

DROPPED_NO_DATE = "dropped: no date"
"""``RankedMemory.reason`` of a candidate left out by ``on_missing_date='drop'``."""


def age_in_days(memory_date: datetime, reference: datetime) -> float:
    """Days from ``memory_date`` to ``reference``; a future memory is 0 days old."""
    return max(0.0, (reference - memory_date).total_seconds() / SECONDS_PER_DAY)


def recency_bonus(age_days: float, weight: float, tau_days: float) -> float:
    """``weight * exp(-age_days / tau_days)``: at most ``weight``, halving every ~0.69 tau."""
    return weight * math.exp(-max(0.0, age_days) / tau_days)


class RecencyPolicy(OneLineValidation, BaseModel):
    """Parameters of the recency re-rank and the ranking itself.

    final = relevance + weight * exp(-age_days / tau_days); re-sort by final and keep
    at most ``top_n`` candidates with final >= ``threshold``. Relevance is the raw cosine
    (the specification's units), or with ``relevance="cohort"`` that cosine in units of the
    question's spread over a background cohort (:mod:`llama_index_recency.models.cohort`), where
    a threshold and a bonus mean the same on every store and question.

    A setting it refuses (a negative weight, an unreadable ``reference_date``, ...) raises
    :class:`~llama_index_recency.errors.InvalidSettingError` naming it in one line, as does
    a setting it does not have (``treshold=``: a typo would otherwise leave the default).
    """

    model_config = ConfigDict(extra="forbid")

    relevance: Relevance = Field(
        default="cosine",
        description=(
            "Units of weight and threshold: 'cosine' (raw cosine, as the defaults 0.05/0.45) or "
            "'cohort' (standard deviations above what unrelated memories score for the question)."
        ),
    )

    weight: float = Field(
        default=0.05,
        ge=0.0,
        allow_inf_nan=False,
        description="Largest bonus, given to a memory dated today.",
    )
    tau_days: float = Field(
        default=14.0,
        gt=0.0,
        allow_inf_nan=False,
        description="Decay constant of the bonus, in days.",
    )
    threshold: float = Field(
        default=0.45,
        allow_inf_nan=False,
        description="Lowest post-bonus score that may enter the prompt.",
    )
    top_n: int = Field(default=3, ge=1, description="Most memories kept for the prompt.")
    lexical_weight: float = Field(
        default=0.0,
        ge=0.0,
        allow_inf_nan=False,
        description=(
            "Relevance added for a memory holding every term of the question, in proportion "
            "to the share of the question's term weight it holds (0: cosine alone; "
            ":mod:`llama_index_recency.ranking.lexical`)."
        ),
    )
    language_lexical_weights: dict[str, Annotated[float, Field(ge=0.0, allow_inf_nan=False)]] = Field(
        default_factory=dict,
        description=(
            "A lexical_weight per question language ('en', 'ja', ...); a question in a "
            "language without one uses lexical_weight."
        ),
    )
    present_weight: Optional[float] = Field(
        default=None,
        ge=0.0,
        allow_inf_nan=False,
        description=(
            "Largest bonus for a question about the present ('…these days?'); the threshold "
            "rises by present_weight - weight, so a memory dated today passes as it would "
            "otherwise and older ones rank lower. None: the same bonus for every question."
        ),
    )
    present_tau_days: Optional[float] = Field(
        default=None,
        gt=0.0,
        allow_inf_nan=False,
        description="Decay constant of the present bonus, in days (None: tau_days).",
    )
    past_weight: Optional[float] = Field(
        default=None,
        ge=0.0,
        allow_inf_nan=False,
        description=(
            "Largest bonus for a question that points to the past ('…used to…?'); 0 ranks "
            "them on relevance alone. None: weight."
        ),
    )
    supersede_margin: Optional[float] = Field(
        default=None,
        ge=0.0,
        allow_inf_nan=False,
        description=(
            "Newer versions first: a newer candidate whose final score is within this margin "
            "of an older one it nearly repeats is placed right before it (never for questions "
            "about the past). None: off."
        ),
    )
    supersede_z: float = Field(
        default=0.5,
        allow_inf_nan=False,
        description=(
            "How far (in sd of the similarity between the question's top candidates, once "
            "their mean vector is taken out) two memories' similarity must stand above the "
            "mean for one to be a version of the other; the newer must also be the older's "
            "most similar candidate, and the older among the newer's two most similar."
        ),
    )
    supersede_window: int = Field(
        default=20, ge=2,
        description="How many top candidates by relevance the version comparison looks at.",
    )
    date_key: str = Field(
        default="date", description="Metadata / payload key holding the memory's date."
    )
    reference_date: Any = Field(
        default=None,
        description=(
            "'Today' for the age computation: None (now), a date, a datetime, an ISO "
            "string, or a zero-argument callable returning one of those."
        ),
    )
    language_thresholds: dict[str, float] = Field(
        default_factory=dict,
        description=(
            "A threshold per question language ('en', 'ja', ...; see language.question_language); "
            "a question in a language without one uses the nearest "
            "(language.nearest_language). Empty: threshold for every language."
        ),
    )
    threshold_origin: str = Field(
        default="shipped",
        description=(
            "Where the threshold came from: 'shipped', 'explicit' (calibrated and saved, or "
            "given: a threshold set without an origin is explicit), 'fitted on N memories on "
            "DATE' (the store's own gate)."
        ),
    )
    on_missing_date: MissingDatePolicy = Field(
        default="no_bonus",
        description=(
            "A candidate without a readable date: 'no_bonus' (keep, raw score, warn "
            "once), 'drop' (leave it out) or 'raise' (MemoryDateError)."
        ),
    )

    _warned: set[str] = PrivateAttr(default_factory=set)
    """What this policy warned about once, shared with the policies it derives per question."""
    _by_question: dict[tuple[str, Intent], "RecencyPolicy"] = PrivateAttr(default_factory=dict)
    """:meth:`for_question`'s policies by (question language, intent), until a field changes."""

    @model_validator(mode="after")
    def _given_threshold_is_explicit(self) -> "RecencyPolicy":
        fields = self.model_fields_set
        if "threshold_origin" not in fields and fields & {"threshold", "language_thresholds"}:
            self.threshold_origin = "explicit"
        return self

    def model_copy(self, *, update: Optional[Mapping[str, Any]] = None,
                   deep: bool = False) -> Self:
        """A copy with ``update``: a ``threshold`` in it without ``language_thresholds`` is the
        threshold for every language (the per-language ones dropped), and explicit unless
        ``threshold_origin`` is given too."""
        if update and "threshold" in update:
            update = {"language_thresholds": {}, "threshold_origin": "explicit", **update}
        copy = super().model_copy(update=update, deep=deep)
        copy.forget_derived()
        copy._warned = set()  # a policy of its own warns for itself
        return copy

    def __setattr__(self, name: str, value: Any) -> None:
        """Setting ``threshold`` makes it the threshold for every language, explicit."""
        super().__setattr__(name, value)
        if name in type(self).model_fields:
            self.forget_derived()
        if name == "threshold":
            super().__setattr__("language_thresholds", {})
            super().__setattr__("threshold_origin", "explicit")

    @field_validator("date_key")
    @classmethod
    def _check_date_key(cls, value: str) -> str:
        if not value.strip():
            raise InvalidInputError("a blank key names no metadata (the dates are under 'date')")
        return value

    @field_validator("reference_date")
    @classmethod
    def _check_reference_date(cls, value: Any) -> Any:
        if value is None or callable(value):
            return value
        if isinstance(value, (str, date)):
            parse_memory_date(value)  # fail at construction, not at query time
            return value
        raise InvalidInputError(
            f"reference_date must be a date, datetime, ISO string or callable, got {value!r}"
        )

    @field_serializer("reference_date")
    def _serialize_reference_date(self, value: Any) -> Optional[str]:
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, date):
            return value.isoformat()
        raise InvalidInputError(
            "reference_date is a callable and cannot be serialized; "
            "pass None (now), a date or an ISO string instead"
        )

    def reference(self) -> datetime:
        """The reference instant ('today') as an aware UTC datetime.

        Raises:
            InvalidInputError: A ``reference_date`` callable returned no readable date.
        """
        value = self.reference_date
        if callable(value):
            value = value()
        if value is None:
            return datetime.now(timezone.utc)
        return parse_memory_date(value)

    def gate_description(self) -> str:
        """The gate and where it came from: "threshold en 0.818, ja 0.801 (fitted on 40
        memories on 2026-12-03)", "threshold 0.820 (shipped)"."""
        thresholds = ", ".join(f"{lang} {value:.3f}"
                               for lang, value in sorted(self.language_thresholds.items()))
        return f"threshold {thresholds or f'{self.threshold:.3f}'} ({self.threshold_origin})"

    def for_question(self, text: str) -> "RecencyPolicy":
        """The plain policy that ranks the question ``text``: its language's threshold
        (:attr:`language_thresholds`, the nearest fitted language's for another one) and
        lexical weight (:attr:`language_lexical_weights`), then the bonus its intent calls
        for (:meth:`for_intent`)."""
        key = (question_language(text), question_intent(text))
        derived = self._by_question.get(key)
        if derived is None:
            policy = self
            chosen = self.threshold_language(key[0])
            if chosen is not None:
                policy = self.model_copy(update={"threshold": self.language_thresholds[chosen],
                                                 "threshold_origin": self.threshold_origin})
            derived = policy.for_intent(key[1])
            if self.language_lexical_weights.get(key[0], self.lexical_weight) \
                    != derived.lexical_weight:
                derived = derived.model_copy(update={
                    "lexical_weight": self.language_lexical_weights[key[0]]})
            derived._warned = self._warned  # said once for all the questions it ranks
            self._by_question[key] = derived
        return derived

    def forget_derived(self) -> None:
        """Drop the policies :meth:`for_question` derived: a field changed (done by assignment
        and :meth:`model_copy`; code that writes fields past them calls it)."""
        self._by_question = {}

    @property
    def reads_words(self) -> bool:
        """Whether the lexical signal ranks some question (a lexical weight above 0)."""
        return self.lexical_weight > 0.0 or any(
            weight > 0.0 for weight in self.language_lexical_weights.values())

    @property
    def gate_units(self) -> str:
        """The units a gate fitted for this policy is in: its relevance, "+words" when the
        lexical signal adds to it (a gate fitted in other units never ranks for it)."""
        return f"{self.relevance}+words" if self.reads_words else self.relevance

    def threshold_language(self, language: str) -> Optional[str]:
        """The language whose threshold ranks a question in ``language``; None without
        :attr:`language_thresholds` (one threshold for every language)."""
        if not self.language_thresholds:
            return None
        return nearest_language(language, self.language_thresholds)

    def asked(self, ranking: RecencyRanking, text: str,
              chosen: Optional["RecencyPolicy"] = None) -> RecencyRanking:
        """``ranking`` of the question ``text`` labelled with its intent, language and the
        threshold it met (that of ``chosen``, its :meth:`for_question` when the caller has
        it already) and where that came from."""
        language = question_language(text)
        return replace(ranking, intent=question_intent(text), language=language,
                       threshold_language=self.threshold_language(language),
                       threshold=(chosen or self.for_question(text)).threshold,
                       threshold_origin=self.threshold_origin)

    def for_intent(self, intent: Intent) -> "RecencyPolicy":
        """The plain policy that ranks a question of this intent: the present bonus (and the
        threshold raised by ``present_weight - weight``), the past bonus without version
        reordering, the policy without version reordering for an event, or the policy itself
        for a neutral one."""
        if intent == "present" and self.present_weight is not None:
            changes: dict[str, Any] = {
                "weight": self.present_weight,
                "tau_days": self.present_tau_days or self.tau_days,
                "threshold": self.threshold + self.present_weight - self.weight,
                "present_weight": None,  # the copy ranks as it is: for_intent is idempotent
            }
        elif intent == "past" and (self._past_weight() != self.weight
                                   or self.supersede_margin is not None):
            changes = {"weight": self._past_weight(), "supersede_margin": None}
        elif intent == "event" and self.supersede_margin is not None:
            changes = {"supersede_margin": None}
        else:
            return self
        values = {name: getattr(self, name) for name in RecencyPolicy.model_fields}
        return RecencyPolicy(**{**values, **changes})

    def _past_weight(self) -> float:
        """The bonus for a question about the past: ``past_weight``, else ``weight``
        (scaled by a postprocessor's ``past_bonus_scale``)."""
        if self.past_weight is not None:
            return self.past_weight
        return self.weight * float(getattr(self, "past_bonus_scale", 1.0))

    def bonus(self, age_days: float) -> float:
        """The recency bonus for a memory ``age_days`` old."""
        return recency_bonus(age_days, self.weight, self.tau_days)

    def rank(
        self,
        nodes: Sequence[NodeWithScore],
        reference: Optional[datetime] = None,
        threshold: Optional[float] = None,
    ) -> RecencyRanking:
        """Re-rank retrieved candidates by post-bonus score and pick the prompt's memories.

        ``threshold`` replaces the policy's cutoff
        (``-math.inf``: keep the best ``top_n`` whatever their score, as the vague-reference
        path does among recent memories). Returns new ``NodeWithScore`` objects carrying the
        final score; the caller's nodes and their metadata are left untouched.

        Raises:
            InvalidInputError: A candidate without a finite score; also a ``reference_date``
                callable that returns no readable date (no ``reference`` given).
            MemoryDateError: A candidate without a readable date when ``on_missing_date`` is
                ``"raise"``.
        """
        threshold = self.threshold if threshold is None else threshold
        reference = reference or self.reference()
        scored: list[tuple[float, int, NodeWithScore, RankedMemory]] = []
        for position, candidate in enumerate(nodes):
            row = self._score(candidate, reference)
            scored.append((row.final, position, candidate, row))
        # Stable: equal finals keep the retriever's (raw cosine) order.
        scored.sort(key=lambda item: (-item[0], item[1]))
        return self.select([(candidate, row) for _, _, candidate, row in scored], threshold)

    def select(
        self,
        ordered: Sequence[tuple[NodeWithScore, RankedMemory]],
        threshold: Optional[float] = None,
        admitted: Collection[str] = (),
    ) -> RecencyRanking:
        """Verdicts for candidates already in ranking order: the first ``top_n`` whose final
        score reaches ``threshold`` (the policy's by default), or whose id is ``admitted``
        (a newer version of a memory that reaches it), are kept."""
        threshold = self.threshold if threshold is None else threshold
        rows: list[RankedMemory] = []
        kept: list[NodeWithScore] = []
        for candidate, row in ordered:
            if row.reason == DROPPED_NO_DATE:
                rows.append(row)
                continue
            if row.final < threshold and row.node_id not in admitted:
                reason = f"below {threshold:g}"
            elif len(kept) >= self.top_n:
                reason = f"over top {self.top_n}"
            else:
                reason = "kept"
                kept.append(NodeWithScore(node=candidate.node, score=row.final))
            rows.append(row.judged(reason))
        return RecencyRanking(rows=tuple(rows), nodes=tuple(kept), relevance=self.relevance)

    def final_score(self, raw: float, date_value: Any, reference: datetime) -> Optional[float]:
        """A candidate's final score from its raw cosine and stored date, without building a row:
        raw + bonus, raw alone for an unreadable date, None when ``on_missing_date`` drops it.
        (For searches that must compare many candidates cheaply; :meth:`rank` decides.)"""
        try:
            memory_date = parse_memory_date(date_value)
        except ValueError:
            return None if self.on_missing_date == "drop" else raw
        return raw + self.bonus(age_in_days(memory_date, reference))

    def _score(
        self, candidate: NodeWithScore, reference: datetime
    ) -> RankedMemory:
        node = candidate.node
        raw = math.nan if candidate.score is None else float(candidate.score)
        if not math.isfinite(raw):
            raise InvalidInputError(
                f"node {node.node_id!r} has no similarity score ({candidate.score!r}); "
                "the recency bonus re-ranks retriever results, which carry a finite one"
            )
        date_value = node.metadata.get(self.date_key)
        try:
            memory_date = parse_memory_date(date_value)
        except ValueError as error:
            return self._undated(node.node_id, node.get_content(), raw, date_value, error)
        age = age_in_days(memory_date, reference)
        bonus = self.bonus(age)
        return RankedMemory(
            node_id=node.node_id,
            text=node.get_content(),
            date=str(date_value),
            raw=raw,
            age_days=age,
            bonus=bonus,
            final=raw + bonus,
            kept=False,
            reason="",
        )

    def _warn_undated_once(self, node_id: str, value: Any) -> None:
        """Log the first memory ranked without a bonus for want of a date (``no_bonus``)."""
        if "undated" in self._warned:
            return
        self._warned.add("undated")
        logger.warning(
            "node %r has no usable %r (value %r); ranking it on raw cosine with no "
            "bonus (dates under another metadata key: set date_key=; further undated "
            "nodes are not reported)",
            node_id,
            self.date_key,
            value,
        )

    def _undated(
        self, node_id: str, text: str, raw: float, value: Any, error: ValueError
    ) -> RankedMemory:
        if self.on_missing_date == "raise":
            raise MemoryDateError(
                f"node {node_id!r} has no usable {self.date_key!r} "
                f"(value {value!r}): {error}"
            ) from None
        dropped = self.on_missing_date == "drop"
        if not dropped:
            self._warn_undated_once(node_id, value)
        return RankedMemory(
            node_id=node_id,
            text=text,
            date=None if value is None else str(value),
            raw=raw,
            age_days=None,
            bonus=0.0,
            final=raw,
            kept=False,
            reason=DROPPED_NO_DATE if dropped else "",
        )


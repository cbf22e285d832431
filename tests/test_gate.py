"""The relevance gate fitted on the live store from the off-topic bank, and re-checked after writes."""

from __future__ import annotations

import pytest

from llama_index_recency import RecencyPolicy, index_policy, memory_node, open_memory_index
from llama_index_recency.models.cohort import cohort_texts, relevance_cohort
from llama_index_recency.querying.gate import (
    MAX_BRING_UP,
    NOISE_MARGIN,
    calibrate_gate,
    check_gate,
    fit_gate,
    noise_margin,
    offtopic_questions,
)
from llama_index_recency.records.examples import EXAMPLE_REFERENCE_DATE, example_memories
from llama_index_recency.storage import embedding_of, save_policy


def test_fit_gate_holds_each_language_to_the_share_in_the_middle_of_the_gap() -> None:
    # 20 questions each: 5% lets one in. English: 9.0 in, 8.0 kept out -> 8.5.
    english = [9.0, 8.0] + [1.0] * 18
    japanese = [3.0, 2.9] + [1.0] * 18  # 2.9 kept out; the middle (2.95) is too close: 2.9 + margin
    fit = fit_gate({"en": english, "ja": japanese}, max_bring_up=0.05)
    assert fit.threshold == 8.5
    assert fit.bring_up(8.5) == 0.05 and fit.bring_up(7.0) == 0.1
    assert fit.headroom(8.5) == pytest.approx(0.5)  # English decides
    assert fit_gate({"ja": japanese}).threshold == pytest.approx(2.9 + NOISE_MARGIN)
    assert fit.policy(RecencyPolicy()).threshold == 8.5


@pytest.mark.parametrize("best, share, message", [
    ({}, 0.05, "at least one off-topic question per language"),
    ({"en": []}, 0.05, "at least one off-topic question per language"),
    ({"en": [1.0]}, 1.0, "max_bring_up must be in"),
])
def test_fit_gate_refuses_what_cannot_be_fitted(best, share, message) -> None:
    with pytest.raises(ValueError, match=message):
        fit_gate(best, share)


def test_the_shipped_bank_has_both_languages() -> None:
    english, japanese = offtopic_questions("en"), offtopic_questions("ja")
    assert len(english) == len(japanese) == 150
    assert offtopic_questions() == english + japanese
    with pytest.raises(ValueError, match="no off-topic bank in language 'fr'"):
        offtopic_questions("fr")


@pytest.fixture
def bundled(e5):
    index = open_memory_index(e5)
    index.insert_nodes(example_memories())
    return index


@pytest.mark.slow
def test_the_gate_fitted_on_a_store_keeps_each_languages_bank_to_the_share(bundled) -> None:
    policy = index_policy(bundled, reference_date=EXAMPLE_REFERENCE_DATE)
    fit = calibrate_gate(bundled, policy)
    assert set(fit.best) == {"en", "ja"} and all(len(b) == 150 for b in fit.best.values())
    assert fit.bring_up(fit.threshold) <= MAX_BRING_UP
    margin = noise_margin(policy)  # 0.001 in cosine: clear of machine noise
    assert fit.headroom(fit.threshold) >= margin - 1e-9
    # A lower threshold lets more in: the fit is the lowest holding the share.
    assert fit.bring_up(fit.threshold - 2 * margin - 0.01) > MAX_BRING_UP


@pytest.mark.slow
def test_the_gate_of_one_user_is_fitted_on_that_users_memories(e5) -> None:
    index = open_memory_index(e5)
    index.insert_nodes([memory_node("The user has a cat named Mochi.", "2026-09-01", user_id="a"),
                        memory_node("The user plays chess on Sundays.", "2026-09-01", user_id="b")])
    with pytest.raises(ValueError, match="empty: there is no gate to fit"):
        calibrate_gate(index, user_id="nobody")
    only_a = calibrate_gate(index, user_id="a")
    both = calibrate_gate(index)
    # "today" is now, a moment apart between the two runs: equal up to the bonus's drift
    # (the present bonus, 0.054 over 365 days, moves ~1e-9 a second)
    assert all(a <= b + 1e-6 for a, b in zip(only_a.best["en"], both.best["en"], strict=True))


@pytest.mark.slow
def test_a_store_that_grew_past_its_gate_says_so_after_writes(bundled) -> None:
    """The seed's "rerun the pass as the device accumulates memories": the gate fitted on 16
    memories no longer holds once 600 more on every topic are stored, and check_gate says so."""
    policy = index_policy(bundled, reference_date=EXAMPLE_REFERENCE_DATE)
    save_policy(bundled, calibrate_gate(bundled, policy).policy(policy))
    assert check_gate(bundled) is None
    grown = [memory_node(*reversed(text.split(": ", 1))) for text in cohort_texts()]
    for node, vector in zip(grown, relevance_cohort(embedding_of(bundled)).vectors, strict=True):
        node.embedding = vector.tolist()  # e5's own vectors for these texts, shipped
    bundled.insert_nodes(grown)
    warning = check_gate(bundled)
    assert warning is not None and "rerun calibrate --save" in warning
    assert "\n" not in warning

"""Past-pointing questions: the phrase list and the option that scales the bonus down."""

from __future__ import annotations

import pytest
from llama_index.core.schema import NodeWithScore, TextNode

from llama_index_recency import RecencyBonusPostprocessor, open_memory_index
from llama_index_recency.ranking.intent import points_to_past
from llama_index_recency.records.examples import (
    EXAMPLE_REFERENCE_DATE,
    example_memories,
    example_questions,
)

SEED_TODAY = "2026-09-10"
PAST_PREFIX = "This is an old story, but "


@pytest.mark.parametrize(
    "question",
    [
        "This is an old story, but what's my favorite food?",
        "Back in the summer, where did I go?",
        "back in 2024 I had a cat, right?",
        "A long time ago I told you about a hot spring.",
        "What was I into years ago?",
        "a while back I mentioned a keyboard",
        "What did I use to drink in the morning?",
        "I used to walk in the morning, didn't I?",
        "Last summer, what did I do?",
        "昔の話だけど、温泉に行ったよね？",
        "去年の夏どこ行ったっけ？",
    ],
)
def test_past_pointing_phrases_are_detected(question: str) -> None:
    assert points_to_past(question) is True


@pytest.mark.parametrize(
    "question",
    [q.text for q in example_questions()]
    + [
        "What did I do the other day?",
        "How do I take my coffee lately?",
        "I'm used to black coffee.",
        "Do you remember what I told you before?",
        "この前のあれ、どうなった？",
    ],
)
def test_other_questions_are_not_past_pointing(question: str) -> None:
    assert points_to_past(question) is False


def candidates() -> list[NodeWithScore]:
    """An old memory with the better cosine and a recent one the bonus lifts above it."""
    return [
        NodeWithScore(node=TextNode(text="old", metadata={"date": "2026-05-01"}), score=0.47),
        NodeWithScore(node=TextNode(text="recent", metadata={"date": "2026-09-09"}), score=0.44),
    ]


def ranked(postprocessor: RecencyBonusPostprocessor, question: str) -> list[tuple[str, float]]:
    kept = postprocessor.postprocess_nodes(candidates(), query_str=question)
    return [(n.node.get_content(), round(n.score, 3)) for n in kept]


def test_option_is_off_by_default() -> None:
    postprocessor = RecencyBonusPostprocessor(reference_date=SEED_TODAY)
    assert postprocessor.past_bonus_scale == 1.0
    assert ranked(postprocessor, "This is an old story, but what was it?") == [
        ("recent", 0.487), ("old", 0.47)
    ]


@pytest.mark.parametrize(
    ("scale", "expected"),
    # With no bonus the recent memory (0.44) falls under the 0.45 cutoff.
    [(0.0, [("old", 0.47)]), (0.5, [("old", 0.47), ("recent", 0.463)])],
)
def test_past_pointing_question_scales_the_bonus(
    scale: float, expected: list[tuple[str, float]]
) -> None:
    postprocessor = RecencyBonusPostprocessor(reference_date=SEED_TODAY, past_bonus_scale=scale)
    assert ranked(postprocessor, "This is an old story, but what was it?") == expected
    # A question that does not point to the past keeps the full bonus.
    assert ranked(postprocessor, "What was it?") == [("recent", 0.487), ("old", 0.47)]


def test_explain_shows_the_scaled_bonus() -> None:
    from llama_index.core.schema import QueryBundle

    postprocessor = RecencyBonusPostprocessor(reference_date=SEED_TODAY, past_bonus_scale=0.5)
    rows = postprocessor.explain(candidates(), QueryBundle("Back in the summer, what was it?")).rows
    assert [(r.text, round(r.bonus, 4)) for r in rows] == [("old", 0.0), ("recent", 0.0233)]


def test_scale_outside_0_1_is_rejected() -> None:
    with pytest.raises(ValueError, match="past_bonus_scale"):
        RecencyBonusPostprocessor(past_bonus_scale=1.5)


MINILM_THRESHOLD = 0.25  # cli.DEFAULT_THRESHOLDS["minilm"]


@pytest.fixture(scope="module")
def bundled_retriever(minilm):
    index = open_memory_index(minilm)
    index.insert_nodes(example_memories())
    return index.as_retriever(similarity_top_k=8)


def kept_keys(retriever, question: str, past_bonus_scale: float) -> list[tuple[str, float]]:
    postprocessor = RecencyBonusPostprocessor(
        threshold=MINILM_THRESHOLD,
        reference_date=EXAMPLE_REFERENCE_DATE,
        past_bonus_scale=past_bonus_scale,
    )
    kept = postprocessor.postprocess_nodes(retriever.retrieve(question), query_str=question)
    return [(n.node.metadata["key"], round(n.score, 3)) for n in kept]


@pytest.mark.parametrize("question_id", ["H1", "H3", "H4"])
@pytest.mark.slow
def test_option_changes_nothing_for_h1_h3_h4(bundled_retriever, question_id: str) -> None:
    (question,) = [q for q in example_questions() if q.id == question_id]
    assert kept_keys(bundled_retriever, question.text, 0.0) == kept_keys(
        bundled_retriever, question.text, 1.0
    )


# Measured with all-MiniLM-L6-v2 at threshold 0.25: prefixed with "This is an old story,
# but", H1/H3/H4 keep the same memories in the same order with the bonus removed (scores
# drop by the bonus only); the target stays first.
PREFIXED = {
    "H1": ([("favorite_food", 0.297)], [("favorite_food", 0.296)]),
    "H3": ([("hot_spring", 0.38), ("typhoon", 0.266)], [("hot_spring", 0.373), ("typhoon", 0.257)]),
    "H4": ([("keyboard", 0.483), ("cat", 0.266)], [("keyboard", 0.468), ("cat", 0.263)]),
}


@pytest.mark.parametrize("question_id", sorted(PREFIXED))
def test_past_pointing_variants_of_h1_h3_h4_keep_their_target(
    bundled_retriever, question_id: str
) -> None:
    (question,) = [q for q in example_questions() if q.id == question_id]
    text = PAST_PREFIX + question.text[0].lower() + question.text[1:]
    off, on = PREFIXED[question_id]
    assert kept_keys(bundled_retriever, text, 1.0) == off
    assert kept_keys(bundled_retriever, text, 0.0) == on
    assert on[0][0] == question.targets[0]

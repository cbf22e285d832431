"""Question intent: the fixed rule, and the bonus and gate each intent gets from the policy."""

from __future__ import annotations

import pytest
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llama_index_recency import RecencyBonusPostprocessor, RecencyPolicy, question_intent
from llama_index_recency.ranking.intent import PRESENT_PATTERNS


@pytest.mark.parametrize("question", [
    "What do I drink in the mornings these days?",
    "Where do I live now?",
    "Am I still learning Korean?",
    "What have I been reading lately?",
    "Which phone am I currently using?",
    "Do I eat meat any more?",
    "Do I eat meat anymore?",
    "What am I working on at the moment?",
    "Nowadays, how do I get to work?",
    "最近どんなコーヒー飲んでるんだっけ？",
    "今どこに住んでるんだっけ？",
    "いまの仕事って何だっけ？",
    "現在の体重ってどれくらい？",
    "まだ韓国語の勉強してる？",
    "結局、引っ越しはどうなった？",
    "近頃は何時に起きてる？",
])
def test_present_questions(question: str) -> None:
    assert question_intent(question) == "present"


@pytest.mark.parametrize("question", [
    "What did I use to drink in the morning?",
    "I used to walk in the morning, didn't I?",
    "What did I drink before?",
    "Where did I live before I moved?",
    "Which phone did I have previously?",
    "What was my job at first?",
    "Where was I originally from?",
    "This is an old story, but I still haven't decided which keyboard to buy.",
    "Back in the summer, where did I go?",
    "前はどんなコーヒー飲んでたっけ？",
    "以前はどこに住んでた？",
    "最初はどの言語を勉強してた？",
    "もともと何の仕事してたっけ？",
    "去年の夏どこ行ったっけ？",
])
def test_past_questions(question: str) -> None:
    assert question_intent(question) == "past"


@pytest.mark.parametrize("question", [
    "How do I take my coffee?",
    "What's my favorite food?",
    "Do you remember what I told you before?",
    "What do I drink before bed?",
    "I'm used to black coffee.",
    "I was wondering how I take my coffee.",
    "What was my dog's name again?",
    "What was my coffee order?",
    "What did I say I drink in the morning?",
    "Where did I tell you I work?",
    "Today is a good day for a walk, isn't it?",
    "コーヒーってどう飲んでるんだっけ？",
    "今日の天気はどう？",
    "今度の旅行どこだっけ？",
    "この前のあれ、どうなった？",
    "毎朝コーヒーを飲んでいますか？",
    "名前は何だっけ？",
])
def test_neutral_questions(question: str) -> None:
    assert question_intent(question) == "neutral"


@pytest.mark.parametrize("question", [
    "When did I go to Kyoto?",
    "What did Caroline paint?",
    "How did that thing you were working on go?",
    "What did I do the other day?",
    "Where was the party?",
    "Who were you with at the concert?",
])
def test_questions_about_an_event(question: str) -> None:
    assert question_intent(question) == "event"


@pytest.mark.parametrize("question", [
    "What did I say I drink these days?",
    "Which keyboard did I end up buying?",
    "Where did we go in the end?",
    "Where was I living now, again?",
])
def test_a_present_marker_wins_over_the_simple_past(question: str) -> None:
    assert question_intent(question) == "present"


def test_the_present_list_is_extensible(monkeypatch: pytest.MonkeyPatch) -> None:
    assert question_intent("What's my routine as of today?") == "neutral"
    monkeypatch.setattr("llama_index_recency.ranking.intent.PRESENT_PATTERNS",
                        [*PRESENT_PATTERNS, r"\bas of today\b"])
    assert question_intent("What's my routine as of today?") == "present"


INTENT_POLICY = RecencyPolicy(weight=0.004, tau_days=14.0, threshold=0.82, present_weight=0.054,
                              present_tau_days=365.0, past_weight=0.0, supersede_margin=0.05,
                              reference_date="2026-12-01")


def test_each_intent_gets_its_bonus_and_the_present_gate_rises_by_the_extra_bonus() -> None:
    present = INTENT_POLICY.for_intent("present")
    assert (present.weight, present.tau_days) == (0.054, 365.0)
    assert present.threshold == pytest.approx(0.82 + 0.054 - 0.004)
    assert present.for_intent("present") is present  # applying it twice changes nothing
    past = INTENT_POLICY.for_intent("past")
    assert (past.weight, past.supersede_margin) == (0.0, None)
    event = INTENT_POLICY.for_intent("event")
    assert (event.weight, event.threshold, event.supersede_margin) == (0.004, 0.82, None)
    assert INTENT_POLICY.for_intent("neutral") is INTENT_POLICY


def test_the_seed_policy_ranks_every_intent_alike() -> None:
    seed = RecencyPolicy()
    for intent in ("present", "past", "event", "neutral"):
        assert seed.for_intent(intent) is seed


def test_a_memory_dated_today_passes_the_present_gate_as_it_passes_the_neutral_one() -> None:
    def kept(question: str, raw: float) -> bool:
        node = NodeWithScore(node=TextNode(text="m", metadata={"date": "2026-12-01"}), score=raw)
        postprocessor = RecencyBonusPostprocessor(**INTENT_POLICY.model_dump(
            exclude={"reference_date"}), reference_date="2026-12-01")
        return bool(postprocessor.explain([node], QueryBundle(question)).nodes)

    for raw in (0.815, 0.8159, 0.8161, 0.83):
        assert kept("Where do I live now?", raw) == kept("Where do I live?", raw)


def test_explain_says_which_intent_applied() -> None:
    postprocessor = RecencyBonusPostprocessor(**INTENT_POLICY.model_dump(
        exclude={"reference_date"}), reference_date="2026-12-01")
    node = NodeWithScore(node=TextNode(text="m", metadata={"date": "2026-06-01"}), score=0.9)
    for question, intent in (("Where do I live now?", "present"),
                             ("Where did I use to live?", "past"),
                             ("When did I move?", "event"), ("Where do I live?", "neutral")):
        assert postprocessor.explain([node], QueryBundle(question)).intent == intent

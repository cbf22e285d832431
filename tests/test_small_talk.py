"""Small talk (a greeting, thanks, the day's weather or date) brings no memory into the prompt;
a question that goes on past it is a question like any other."""

from __future__ import annotations

import pytest
from llama_index.core.schema import QueryBundle

from llama_index_recency import QdrantRecencyRetriever, RecencyBonusPostprocessor, open_memory_index
from llama_index_recency.ranking.small_talk import SMALL_TALK_VERDICT, is_small_talk
from llama_index_recency.records.examples import EXAMPLE_REFERENCE_DATE, example_memories
from llama_index_recency.storage import embedding_of, index_policy

SMALL_TALK = ["こんにちは", "こんにちはー", "今日の天気は？", "ありがとね", "おはようございます", "今、何時？",
              "Hello!", "Hi Taro!", "thanks mom", "Thank you so much 😊", "Hello! 👋 How are you?",
              "What day is it today?", "What’s the date?", "how's the weather?", "Bye!",
              # an exploratory user's: the seed's "These days Taro goes for walks" entered
              "How are you these days?", "How have you been lately?"]
QUESTIONS = ["Thanks! How do I take my coffee?", "Hi, what do I drink these days?",
             "What was the weather in Hakone?", "What's the weather like in Kyoto?",
             "こんにちは、最近何飲んでる？", "天気のいい日にどこ行った？", "How do I take my coffee?",
             "Did that work out?", "Nice hot spring, right?", "How are you and your sister?",
             "How are you feeling about the move these days?",
             # a greeting or "ok" with a topic word is a short question, not a greeting to a name
             "ok coffee?", "thanks, hakone", "great trip", "morning run?", "hey remember"]


@pytest.mark.parametrize("message", SMALL_TALK)
def test_small_talk_is_recognised_whole(message: str) -> None:
    assert is_small_talk(message)


@pytest.mark.parametrize("message", QUESTIONS)
def test_a_message_that_goes_on_past_small_talk_is_a_question(message: str) -> None:
    assert not is_small_talk(message)


@pytest.fixture(scope="module", params=["en", "ja"])
def bundled(request: pytest.FixtureRequest, e5):
    index = open_memory_index(e5)
    index.insert_nodes(example_memories(lang=request.param))
    return index


@pytest.mark.slow
def test_small_talk_brings_no_memory_where_it_passed_the_gate(bundled) -> None:
    """On the bundled stores at the shipped gate, 「こんにちは」 and 「今日の天気は？」 brought
    three memories each into the prompt; every row now says why none is given."""
    policy = index_policy(bundled, reference_date=EXAMPLE_REFERENCE_DATE)
    retriever = QdrantRecencyRetriever.from_index(bundled, policy)
    postprocessor = RecencyBonusPostprocessor.from_index(bundled,
                                                         reference_date=EXAMPLE_REFERENCE_DATE)
    rows = []
    for message in ["こんにちは", "今日の天気は？", "What day is it today?",
                    "What's the weather today?"]:
        ranking = retriever.explain(message)
        assert ranking.nodes == ()
        rows += ranking.rows
        candidates = bundled.as_retriever(similarity_top_k=8).retrieve(message)
        assert postprocessor.explain(candidates, QueryBundle(message)).nodes == ()
    assert rows and all(row.reason.startswith(SMALL_TALK_VERDICT) for row in rows)
    assert retriever.explain("Thanks! How do I take my coffee?").nodes or \
        retriever.explain("ありがとう！コーヒーはどう飲んでる？").nodes


def test_a_bank_question_of_small_talk_is_left_out_of_the_fit(bundled) -> None:
    """It brings nothing whatever the threshold, as a question about the news."""
    from llama_index_recency.querying.gate import offtopic_best

    policy = index_policy(bundled, reference_date=EXAMPLE_REFERENCE_DATE)
    best = offtopic_best(bundled.vector_store, embedding_of(bundled), policy,
                         questions={"en": ["What is the capital of France?", "Hello!"]})
    assert len(best["en"]) == 1

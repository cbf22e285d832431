"""Questions about the news bring no memory: the phrase rule, and the default path on the
bundled sets (where no threshold keeps them out and H3 in)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from llama_index.core.schema import NodeWithScore, TextNode

from llama_index_recency import QdrantRecencyRetriever, RecencyBonusPostprocessor, open_memory_index
from llama_index_recency.querying.gate import offtopic_best
from llama_index_recency.ranking.news import NEWS_VERDICT, asks_about_the_news
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.records.examples import (
    EXAMPLE_REFERENCE_DATE,
    example_memories,
    example_questions,
)
from llama_index_recency.storage import index_policy

DEIXIS = json.loads((Path(__file__).resolve().parents[1] / "benchmarks" / "data"
                     / "deixis_offtopic.json").read_text("utf-8"))


@pytest.mark.parametrize("question", [
    "What was that earthquake on the news recently?",
    "Was there anything in the news about the election?",
    "What did the news say about the typhoon?",
    "最近ニュースでやってた地震って何だっけ？",
    "この間ニュースで言ってた台風、どこに上陸したんだっけ？",
    "あの事故って報道されてた？",
])
def test_questions_about_the_news(question: str) -> None:
    assert asks_about_the_news(question)


@pytest.mark.parametrize("question", [
    "Any news on that thing you were working on?",
    "Good news, I got the job!",
    "Where do I get my news from?",
    "Which newspaper do I read?",
    "この前のワールドカップってどこが優勝したの？",
    "私ってどこでニュースを読んでるんだっけ？",
    "それはいいニュースですね、私の昇進の話覚えてる？",
    "嬉しいニュースでした！覚えてる？",
    "私がニュースで取り上げられた話、覚えてる？",
    "Remember when I was on the news?",
    "My daughter was on the news last week, what was her name?",
    "What did I say about my job on the news desk?",
])
def test_other_questions_are_not_about_the_news(question: str) -> None:
    assert not asks_about_the_news(question)


@pytest.fixture(params=["e5", "e5_other_machine"])
def bundled(request) -> dict[str, QdrantRecencyRetriever]:
    """The bundled memories per language, each in its own store, ranked by the default path."""
    embed = request.getfixturevalue(request.param)
    retrievers = {}
    for lang in ("en", "ja"):
        index = open_memory_index(embed)
        index.insert_nodes(example_memories(lang=lang))
        retrievers[lang] = QdrantRecencyRetriever.from_index(
            index, index_policy(index, reference_date=EXAMPLE_REFERENCE_DATE))
    return retrievers


@pytest.mark.slow
def test_the_bundled_sets_bring_nothing_for_deixis_questions_and_keep_h3(bundled) -> None:
    for lang, retriever in bundled.items():
        for question in DEIXIS[lang]:
            assert retriever.retrieve(question) == [], (lang, question)
        h3 = next(q for q in example_questions(lang) if q.id == "H3")
        assert {n.node.metadata["key"] for n in retriever.retrieve(h3.text)} >= set(h3.targets)


def test_a_vague_question_about_the_news_lists_nothing_to_ask_back(bundled) -> None:
    ranking = bundled["en"].explain("What was that thing on the news the other day?")
    assert ranking.news and not ranking.vague and ranking.nodes == ()


def test_every_candidate_says_why_it_was_not_given(bundled) -> None:
    ranking = bundled["ja"].explain("最近ニュースでやってた地震って何だっけ？")
    assert ranking.news and ranking.nodes == () and ranking.rows
    assert {row.reason for row in ranking.rows} == {NEWS_VERDICT}
    assert not bundled["ja"].explain("私が行った温泉のこと、覚えてる？").news


def test_the_postprocessor_keeps_nothing_for_a_question_about_the_news() -> None:
    node = NodeWithScore(node=TextNode(text="A typhoon delayed the user's train.",
                                       metadata={"date": "2026-09-01"}), score=0.95)
    postprocessor = RecencyBonusPostprocessor(reference_date="2026-09-10")
    assert postprocessor.postprocess_nodes([node], query_str="What was the typhoon on the news?") == []
    assert postprocessor.postprocess_nodes([node], query_str="Do you remember the typhoon?")


def test_the_ranking_event_says_the_question_was_about_the_news(bundled, collected) -> None:
    bundled["en"].retrieve("What was that earthquake on the news recently?")
    assert collected[-1].news


def test_a_gate_fit_leaves_questions_about_the_news_out(bundled, e5) -> None:
    store = bundled["en"]._search.vector_store
    policy = RecencyPolicy(reference_date=EXAMPLE_REFERENCE_DATE)
    best = offtopic_best(store, e5, policy, questions={
        "en": ["How do quantum computers work?", "What was that earthquake on the news?"]})
    assert len(best["en"]) == 1

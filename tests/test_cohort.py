"""Cohort units: each question's cosines in units of its own spread over the shipped cohort."""

from __future__ import annotations

import math

import numpy as np
import pytest
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_recency import (
    QdrantRecencyRetriever,
    RecencyBonusPostprocessor,
    RecencyPolicy,
    memory_node,
    open_memory_index,
)
from llama_index_recency.models.cohort import (
    COHORT_LANGUAGES,
    QueryScale,
    RelevanceCohort,
    cohort_texts,
    relevance_cohort,
)
from llama_index_recency.records.examples import EXAMPLE_REFERENCE_DATE, example_memories

from conftest import KnownCosineEmbedding


def test_a_question_is_scaled_by_its_own_language_group() -> None:
    """Two groups: the question is closer to the second, so only that group's spread counts."""
    rng = np.random.default_rng(0)
    far = rng.normal(size=(50, 8))
    near = rng.normal(size=(50, 8)) + np.array([6.0] + [0.0] * 7)
    cohort = RelevanceCohort(np.vstack([far, near]), "toy", groups=2)
    question = np.array([1.0] + [0.0] * 7)
    cosines = cohort.vectors[50:] @ question
    scale = cohort.scale(question)
    assert scale == QueryScale(mean=pytest.approx(cosines.mean()), sd=pytest.approx(cosines.std()))
    assert scale.relevance(scale.cosine(2.5)) == pytest.approx(2.5)


def test_a_cohort_refuses_another_models_question_naming_both_sizes() -> None:
    cohort = RelevanceCohort(np.eye(4), "toy")
    with pytest.raises(ValueError, match="3 dimensions, the cohort of 'toy' 4"):
        cohort.scale([1.0, 0.0, 0.0])


def test_the_shipped_cohort_is_two_language_groups_of_memory_like_sentences(e5) -> None:
    texts = cohort_texts()
    assert len(texts) == 300 * len(COHORT_LANGUAGES) == len(set(texts))
    assert all(text.startswith("2026-01-01: ") for text in texts)
    cohort = relevance_cohort(e5)  # the vectors shipped for e5: no embedding at run time
    assert cohort.vectors.shape == (600, 384) and cohort.groups == 2
    english = cohort.scale(e5.get_query_embedding("How do I take my coffee again?"))
    japanese = cohort.scale(e5.get_query_embedding("コーヒーってどうやって飲んでたっけ？"))
    assert english.sd > 0 and japanese.sd > 0 and english != japanese


def test_the_shipped_vectors_are_e5s_own_embedding_of_the_cohort(e5) -> None:
    """A cohort shipped with stale vectors would scale every question wrongly."""
    shipped = relevance_cohort(e5).vectors
    for i in (0, 299, 300, 599):
        fresh = np.asarray(e5.get_text_embedding(cohort_texts()[i]))
        assert float(shipped[i] @ fresh) > 0.999, i


def test_another_model_embeds_the_cohort_once_and_caches_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RECENCY_CACHE_DIR", str(tmp_path))
    calls: list[int] = []

    class Counting(KnownCosineEmbedding):
        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            calls.append(len(texts))
            return [[1.0, float(i % 7), float(i % 3)] for i, _ in enumerate(texts)]

    model = Counting({"q": 1.0})
    model.model_name = "counting-model"
    first = relevance_cohort(model)
    assert sum(calls) == 600 and len(list(tmp_path.glob("embeddings-*.npy"))) == 1
    assert np.allclose(relevance_cohort(model).vectors, first.vectors)
    assert sum(calls) == 600  # the second time from the process cache


def cohort_store(e5):
    index = open_memory_index(e5)
    index.insert_nodes(example_memories())
    return index


def test_the_retriever_ranks_in_cohort_units_exactly_as_scaled_cosines(e5) -> None:
    """Cohort units are one affine map per question: same order as cosine + scaled bonus,
    the final score (relevance + bonus) in sd units, and the ranking says so."""
    index = cohort_store(e5)
    policy = RecencyPolicy(relevance="cohort", weight=0.5, tau_days=14, threshold=-1e9, top_n=16,
                           reference_date=EXAMPLE_REFERENCE_DATE)
    question = "How do I take my coffee again?"
    ranking = QdrantRecencyRetriever.from_index(index, policy).explain(question)
    assert ranking.relevance == "cohort" and "Relevance (sd)" in ranking.to_table()

    vector = e5.get_query_embedding(question)
    scale = relevance_cohort(e5).scale(vector)
    cosine = RecencyPolicy(weight=0.5 * scale.sd, tau_days=14, threshold=-1e9, top_n=16,
                           reference_date=EXAMPLE_REFERENCE_DATE)
    raw = QdrantRecencyRetriever.from_index(index, cosine).explain(question)
    assert [r.node_id for r in ranking.rows] == [r.node_id for r in raw.rows]
    for z, c in zip(ranking.rows, raw.rows, strict=True):
        assert z.raw == pytest.approx(scale.relevance(c.raw), abs=1e-6)
        assert z.final == pytest.approx(scale.relevance(c.final), abs=1e-6)


def test_the_postprocessor_in_cohort_units_matches_the_retriever(e5) -> None:
    index = cohort_store(e5)
    policy = RecencyPolicy(relevance="cohort", weight=0.5, tau_days=14, threshold=2.0,
                           reference_date=EXAMPLE_REFERENCE_DATE)
    question = "When do I go for walks again?"
    retrieved = index.as_retriever(similarity_top_k=16).retrieve(question)
    post = RecencyBonusPostprocessor(**policy.model_dump(), embed_model=e5)
    kept = post.postprocess_nodes(retrieved, QueryBundle(question))
    exact = QdrantRecencyRetriever.from_index(index, policy).retrieve(question)
    assert [n.node.node_id for n in kept] == [n.node.node_id for n in exact]
    assert [n.score for n in kept] == pytest.approx([n.score for n in exact], abs=1e-6)


def test_a_cohort_postprocessor_without_the_model_is_one_line() -> None:
    with pytest.raises(ValueError, match="relevance='cohort' needs embed_model="):
        RecencyBonusPostprocessor(relevance="cohort")


def test_a_cohort_scale_moves_scores_and_keeps_none() -> None:
    node = memory_node("A fact.", "2026-09-01")
    scaled = QueryScale(mean=0.8, sd=0.02).apply([NodeWithScore(node=node, score=0.86),
                                                 NodeWithScore(node=node, score=None)])
    assert scaled[0].score == pytest.approx(3.0) and scaled[1].score is None
    assert not math.isnan(scaled[0].score)


def test_embeddings_are_the_same_on_a_first_and_a_cached_run(
    e5, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gate fitted right after embedding and one fitted from the disk cache see one vector."""
    from llama_index_recency.models import cohort

    monkeypatch.setenv(cohort.CACHE_DIR_ENV, str(tmp_path))
    texts = ["What is the capital of Peru?", "日本で一番高い山は？"]
    first = cohort.cached_embeddings(e5, texts, query=True)
    [cached] = tmp_path.glob("embeddings-*.npy")
    assert np.array_equal(first, np.load(cached).astype(np.float32))


def test_the_off_topic_bank_ships_embedded_for_e5(e5, tmp_path, monkeypatch) -> None:
    """A store's first gate fit asks 300 questions: for the default model their vectors ship
    with the package (nothing is embedded), and they are the model's own."""
    from llama_index_recency.fitting.gate_fit import BANK_LANGUAGES, offtopic_questions
    from llama_index_recency.models import cohort

    monkeypatch.setenv(cohort.CACHE_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(cohort, "_CACHE", {})
    for lang in BANK_LANGUAGES:
        questions = offtopic_questions(lang)
        shipped = cohort.cached_embeddings(e5, questions, query=True, dimensions=384)
        for i in (0, len(questions) - 1):
            fresh = np.asarray(e5.get_query_embedding(questions[i]))
            assert float(shipped[i] @ fresh) > 0.999, (lang, i)
    assert list(tmp_path.iterdir()) == []  # read from the package, not embedded and cached

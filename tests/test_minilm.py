"""The bundled example with the real all-MiniLM-L6-v2 (the [minilm] extra) through embedded Qdrant,
ranked with the policy shipped for it (``models.CALIBRATED_POLICIES``)."""

from __future__ import annotations

import math

import pytest

from llama_index_recency import RecencyBonusPostprocessor, index_policy, open_memory_index
from llama_index_recency.models.factories import CALIBRATED_POLICIES, MINILM_EMBEDDING
from llama_index_recency.records.examples import (
    EXAMPLE_REFERENCE_DATE,
    example_memories,
    example_questions,
)

pytestmark = pytest.mark.slow  # loads torch and MiniLM: slow


@pytest.fixture(scope="module")
def rankings(minilm):
    index = open_memory_index(minilm)
    index.insert_nodes(example_memories())
    retriever = index.as_retriever(similarity_top_k=8)
    policy = index_policy(index, reference_date=EXAMPLE_REFERENCE_DATE)
    shipped = CALIBRATED_POLICIES[MINILM_EMBEDDING]
    assert (policy.weight, policy.tau_days, policy.threshold) == (
        shipped["weight"], shipped["tau_days"], shipped["threshold"])
    postprocessor = RecencyBonusPostprocessor.from_index(
        index, reference_date=EXAMPLE_REFERENCE_DATE)  # the store's policy: the shipped one
    return {q.id: postprocessor.explain(retriever.retrieve(q.text)) for q in example_questions()}


def kept_keys(ranking) -> list[str]:
    return [n.node.metadata["key"] for n in ranking.nodes]


def test_model_is_384_dimensional_and_normalized(minilm) -> None:
    assert minilm.model_name == MINILM_EMBEDDING
    vector = minilm.get_text_embedding("2026-09-01: Taro has been drinking sweet café au lait lately.")
    assert len(vector) == 384
    assert sum(v * v for v in vector) == pytest.approx(1.0, abs=1e-5)


def test_hit_free_questions_put_no_memory_in_the_prompt(rankings) -> None:
    for question in ("N1", "N2", "N3", "N4"):
        assert rankings[question].nodes == (), question


def test_hit_questions_bring_their_memory_into_the_prompt(rankings) -> None:
    """A newer memory MiniLM pairs with it as a version (the typhoon on the way back from
    the hot spring) may lead it; the memory asked about is in the prompt."""
    assert "favorite_food" in kept_keys(rankings["H1"])
    assert "hot_spring" in kept_keys(rankings["H3"])
    assert kept_keys(rankings["H4"])[0] == "keyboard"


def test_contradictions_bring_the_newer_version_first(rankings) -> None:
    """C2's newer evening walks reach the prompt; C1's café au lait (raw ~0.25, under the
    threshold on its own) enters as the newer version of the black coffee, before it."""
    assert "walk_evening" in kept_keys(rankings["C2"])
    assert kept_keys(rankings["C1"]) == ["cafe_au_lait", "coffee_black"]


def test_bonus_matches_the_memory_age(rankings) -> None:
    (row,) = [r for r in rankings["C1"].rows if r.date == "2026-09-01"]
    assert row.age_days == 9.0
    shipped = CALIBRATED_POLICIES[MINILM_EMBEDDING]
    assert row.bonus == pytest.approx(shipped["weight"] * math.exp(-9 / shipped["tau_days"]))
    assert row.final == pytest.approx(row.raw + row.bonus)

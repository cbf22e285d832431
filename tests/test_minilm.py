"""The bundled example with the real offline all-MiniLM-L6-v2 model through embedded Qdrant."""

from __future__ import annotations

import pytest

from llama_index_recency import (
    EXAMPLE_REFERENCE_DATE,
    RecencyBonusPostprocessor,
    example_memories,
    example_questions,
    open_memory_index,
)
from llama_index_recency.cli import DEFAULT_THRESHOLDS


@pytest.fixture(scope="module")
def rankings(minilm):
    index = open_memory_index(minilm)
    index.insert_nodes(example_memories())
    retriever = index.as_retriever(similarity_top_k=8)
    postprocessor = RecencyBonusPostprocessor(
        reference_date=EXAMPLE_REFERENCE_DATE, threshold=DEFAULT_THRESHOLDS["minilm"]
    )
    return {q.id: postprocessor.explain(retriever.retrieve(q.text)) for q in example_questions()}


def kept_keys(ranking) -> list[str]:
    return [n.node.metadata["key"] for n in ranking.nodes]


def test_model_is_384_dimensional_and_normalized(minilm) -> None:
    vector = minilm.get_text_embedding("2026-09-01: Taro has been drinking sweet café au lait lately.")
    assert len(vector) == 384
    assert sum(v * v for v in vector) == pytest.approx(1.0, abs=1e-5)


def test_hit_free_questions_put_no_memory_in_the_prompt(rankings) -> None:
    for question in ("N1", "N2", "N3", "N4"):
        assert rankings[question].nodes == (), question


def test_hit_questions_find_their_memory_first(rankings) -> None:
    assert kept_keys(rankings["H1"])[0] == "favorite_food"
    assert kept_keys(rankings["H3"])[:2] == ["hot_spring", "typhoon"]
    assert kept_keys(rankings["H4"])[0] == "keyboard"


def test_contradiction_questions_carry_both_versions(rankings) -> None:
    assert set(kept_keys(rankings["C1"])) == {"coffee_black", "cafe_au_lait"}
    assert set(kept_keys(rankings["C2"])) >= {"walk_morning", "walk_evening"}


def test_bonus_matches_the_memory_age(rankings) -> None:
    (row,) = [r for r in rankings["C1"].rows if r.date == "2026-09-01"]
    assert row.age_days == 9.0
    assert row.bonus == pytest.approx(0.0263, abs=1e-4)
    assert row.final == pytest.approx(row.raw + row.bonus)

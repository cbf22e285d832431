"""Calibration: the seed's four-candidate pass, generalized, on exact and on measured cosines."""

from __future__ import annotations

import pytest
from conftest import KnownCosineEmbedding, cosines_for
from llama_index.core.schema import NodeWithScore

from llama_index_recency import (
    EXAMPLE_REFERENCE_DATE,
    ExampleQuestion,
    RecencyBonusPostprocessor,
    RecencyPolicy,
    example_memories,
    example_questions,
    memory_node,
    open_memory_index,
)
from llama_index_recency.calibration import (
    SEED_GRID,
    RetrievedCandidates,
    calibrate,
    fit_threshold,
    retrieve_candidates,
)
from llama_index_recency.cli import DEFAULT_THRESHOLDS

SEED_POLICY = RecencyPolicy(threshold=0.45, reference_date="2026-09-10")


def memory(key: str, day: str, raw: float) -> NodeWithScore:
    return NodeWithScore(node=memory_node(f"fact {key}", day, metadata={"key": key}), score=raw)


def question(qid: str, *targets: str) -> ExampleQuestion:
    return ExampleQuestion(qid, "hit" if targets else "hit_free", f"question {qid}", targets)


@pytest.fixture
def seed_cosines() -> list[RetrievedCandidates]:
    """The seed's published Qwen3 raw cosines: its hit-free max was 0.404 on a 7-day-old memory."""
    return [
        RetrievedCandidates(question("C1", "cafe_au_lait"), (
            memory("coffee_black", "2026-08-20", 0.471),
            memory("cafe_au_lait", "2026-09-01", 0.441),
        )),
        RetrievedCandidates(question("H2", "benchmark_article"), (
            memory("tts_server", "2026-08-28", 0.456),
            memory("mentaiko_pasta", "2026-09-08", 0.421),
            memory("benchmark_article", "2026-09-09", 0.408),
        )),
        RetrievedCandidates(question("N1"), (
            memory("walk_evening", "2026-09-03", 0.404), memory("keyboard", "2026-08-24", 0.380),
        )),
    ]


def test_seed_table_reproduced_and_smallest_passing_weight_adopted(seed_cosines) -> None:
    grid = [*SEED_GRID, (0.05, 30.0), (0.09, 14.0)]
    result = calibrate(seed_cosines, SEED_POLICY, grid)
    assert result.to_table() == "\n".join([
        "| weight | tau (days) | Hit-free max | Headroom | C1 cafe_au_lait "
        "| H2 benchmark_article | Verdict |",
        "|---|---|---|---|---|---|---|",
        "| 0.03 | 30 | 0.428 | 0.022 | 0.463 | 0.437 | fails (c) |",
        "| 0.04 | 30 | 0.436 | 0.014 | 0.471 | 0.447 | fails (c) |",
        "| 0.04 | 14 | 0.428 | 0.022 | 0.462 | 0.445 | fails (c) |",
        "| 0.05 | 14 | 0.434 | 0.016 | 0.467 | 0.455 | adopted |",
        "| 0.05 | 30 | 0.444 | 0.006 | 0.478 | 0.456 | passes |",
        "| 0.09 | 14 | 0.459 | -0.009 | 0.488 | 0.492 | fails (a) |",
    ])
    assert (result.adopted.weight, result.adopted.tau_days) == (0.05, 14.0)  # tie with 0.05/30
    assert result.conditions == (
        ("a", "hit-free max < 0.45"),
        ("b", "C1 cafe_au_lait ≥ 0.45"),
        ("c", "H2 benchmark_article ≥ 0.45"),
    )
    hit_free = result.adopted.hit_free
    assert (hit_free.question_id, hit_free.key) == ("N1", "walk_evening")
    assert "Adopted weight=0.05, tau_days=14" in str(result)


def test_no_candidate_passes_names_each_failed_condition(seed_cosines) -> None:
    result = calibrate(seed_cosines, SEED_POLICY, [(0.03, 30.0), (0.09, 14.0), (0.0, 14.0)])
    assert result.adopted is None
    assert [(r.failed, result.verdict(r)) for r in result.results] == [
        (("c",), "fails (c)"),
        (("a",), "fails (a)"),
        (("b", "c"), "fails (b), (c)"),
    ]
    assert "none adopted" in result.summary()


def test_target_outside_top_k_fails_its_condition(seed_cosines) -> None:
    seed_cosines[1] = RetrievedCandidates(seed_cosines[1].question, seed_cosines[1].candidates[:2])
    result = calibrate(seed_cosines, SEED_POLICY, [(0.05, 14.0)])
    assert result.results[0].failed == ("c",)
    assert result.results[0].targets[1].final is None
    assert "– (not in top 2) | fails (c)" in result.to_table()


def test_fit_threshold_sits_in_the_gap_and_lists_unreachable_targets(seed_cosines) -> None:
    fit = fit_threshold(seed_cosines, SEED_POLICY)
    assert (round(fit.hit_free.final, 3), round(fit.lowest_target.final, 3)) == (0.434, 0.455)
    assert fit.lowest_target.label == "H2 benchmark_article"
    assert fit.threshold == 0.44 and round(fit.margin, 4) == 0.0057
    assert fit.unreachable == ()

    seed_cosines.append(RetrievedCandidates(question("H9", "dentist"), (
        memory("dentist", "2026-08-30", 0.300),
    )))
    fit = fit_threshold(seed_cosines, SEED_POLICY)
    assert [score.label for score in fit.unreachable] == ["H9 dentist"]
    assert fit.threshold == 0.44
    assert "| Unreachable targets | H9 dentist 0.323 |" in fit.to_table()


def test_no_threshold_when_every_target_is_under_the_hit_free_max(seed_cosines) -> None:
    loud = RetrievedCandidates(question("N5"), (memory("fall_anime", "2026-09-09", 0.420),))
    fit = fit_threshold([seed_cosines[1], loud], SEED_POLICY)
    assert fit.threshold is None and fit.margin is None and fit.lowest_target is None
    assert "| Threshold | none separates them |" in fit.to_table()


def test_threshold_is_inclusive_like_the_postprocessor() -> None:
    """Scores exactly at the threshold: the postprocessor keeps final >= threshold, so such
    a memory enters the prompt. A hit-free one there therefore fails (a), a target passes."""
    at_threshold = [
        RetrievedCandidates(question("C1", "target"), (memory("target", "2026-09-01", 0.45),)),
        RetrievedCandidates(question("N1"), (memory("noise", "2026-09-01", 0.45),)),
    ]
    # weight 0 makes every final exactly its raw cosine, 0.45 == threshold.
    (result,) = calibrate(at_threshold, SEED_POLICY, [(0.0, 14.0)]).results
    assert (result.hit_free.final, result.targets[0].final) == (0.45, 0.45)
    assert result.failed == ("a",)

    just_under = RetrievedCandidates(question("N1"), (memory("noise", "2026-09-01", 0.4499),))
    (result,) = calibrate([at_threshold[0], just_under], SEED_POLICY, [(0.0, 14.0)]).results
    assert result.passed and result.headroom == pytest.approx(0.0001)


@pytest.mark.parametrize(
    "candidate", [(float("nan"), 14.0), (float("inf"), 14.0), (0.05, float("inf")),
                  (0.05, float("nan")), (-0.01, 14.0), (0.05, 0.0)],
)
def test_unusable_grid_candidate_is_refused(seed_cosines, candidate) -> None:
    with pytest.raises(ValueError, match="a candidate needs finite weight >= 0 and tau_days > 0"):
        calibrate(seed_cosines, SEED_POLICY, [candidate])


def test_labels_need_a_target_and_a_hit_free_question(seed_cosines) -> None:
    with pytest.raises(ValueError, match="hit-free"):
        calibrate(seed_cosines[:2], SEED_POLICY)
    with pytest.raises(ValueError, match="target"):
        calibrate(seed_cosines[2:], SEED_POLICY)


def test_calibration_scores_equal_the_postprocessors_through_qdrant() -> None:
    """KnownCosineEmbedding gives every question the same cosines, so one store serves both."""
    nodes = [memory_node("Taro drinks coffee black.", "2026-08-20", metadata={"key": "black"}),
             memory_node("Taro drinks café au lait.", "2026-09-01", metadata={"key": "cafe"})]
    index = open_memory_index(KnownCosineEmbedding(cosines_for(nodes, [0.471, 0.441])))
    index.insert_nodes(nodes)
    retriever = index.as_retriever(similarity_top_k=8)
    retrieved = retrieve_candidates(retriever, [question("C1", "cafe"), question("N1")])
    result = calibrate(retrieved, SEED_POLICY, [(0.05, 14.0)])
    assert [round(s.final, 3) for s in result.results[0].targets] == [0.467]
    kept = RecencyBonusPostprocessor(reference_date="2026-09-10").postprocess_nodes(
        retriever.retrieve("C1")
    )
    assert [round(n.score, 3) for n in kept] == [0.482, 0.467]
    assert result.results[0].hit_free.final == pytest.approx(kept[0].score)


@pytest.fixture(scope="module")
def bundled_minilm(minilm) -> list[RetrievedCandidates]:
    index = open_memory_index(minilm)
    index.insert_nodes(example_memories())
    return retrieve_candidates(index.as_retriever(similarity_top_k=8), example_questions())


def test_minilm_default_threshold_is_the_calibrated_one(bundled_minilm) -> None:
    """cli.DEFAULT_THRESHOLDS['minilm'] is what fit_threshold gives on the bundled data."""
    fit = fit_threshold(bundled_minilm, RecencyPolicy(reference_date=EXAMPLE_REFERENCE_DATE))
    assert fit.threshold == DEFAULT_THRESHOLDS["minilm"] == 0.25
    assert (round(fit.hit_free.final, 3), fit.hit_free.question_id) == (0.230, "N2")
    lowest = fit.lowest_target
    assert (round(lowest.final, 3), lowest.label) == (0.274, "C1 cafe_au_lait")
    # MiniLM cannot place H2's vague "that thing you were working on" above unrelated memories.
    assert [s.label for s in fit.unreachable] == [
        "H2 tts_server", "H2 mentaiko_pasta", "H2 benchmark_article",
    ]


def test_minilm_four_candidate_pass_on_bundled_data(bundled_minilm) -> None:
    policy = RecencyPolicy(threshold=0.25, reference_date=EXAMPLE_REFERENCE_DATE)
    everything = calibrate(bundled_minilm, policy)
    assert everything.adopted is None
    assert {r.failed for r in everything.results} == {("c", "d", "e")}
    without_h2 = calibrate([r for r in bundled_minilm if r.question.id != "H2"], policy)
    assert [(r.weight, r.tau_days, round(r.hit_free.final, 3)) for r in without_h2.results] == [
        (0.03, 30.0, 0.221), (0.04, 30.0, 0.229), (0.04, 14.0, 0.223), (0.05, 14.0, 0.230),
    ]
    assert (without_h2.adopted.weight, without_h2.adopted.tau_days) == (0.03, 30.0)

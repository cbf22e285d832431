"""Per-user gates: a store serving several users fits each user's gate on their memories
alone, so one user's writes never move another user's gate."""

from __future__ import annotations

from pathlib import Path

from llama_index_recency import QdrantRecencyRetriever, RecencyMemory
from llama_index_recency.querying.gate import offtopic_best, refit_after_write
from llama_index_recency.records.examples import example_memories
from llama_index_recency.storage import collection_metadata, gate_record, index_policy

QUESTION = "What do I like to drink?"


def chatter(count: int, start: int = 0) -> list[tuple[str, str]]:
    """Everyday turns of many topics, as a raw chat log is: they raise a store's fitted gate."""
    topics = ["coffee", "the weather", "a movie", "football", "cooking", "the train",
              "a book", "music", "the office", "a holiday", "the dentist", "shopping"]
    return [(f"Bob talked about {topics[i % len(topics)]} again today, item {i}.",
             f"2026-0{1 + i % 8}-{10 + i % 18}") for i in range(start, start + count)]


def test_one_users_writes_never_change_another_users_gate(e5, tmp_path: Path) -> None:
    with RecencyMemory(e5, path=tmp_path / "store", user_id="alice", min_fit_memories=12) as alice:
        bob = RecencyMemory(index=alice.index, user_id="bob", min_fit_memories=12)
        alice.add([(n.get_content().split(": ", 1)[1], n.metadata["date"])
                   for n in example_memories()])  # 16 memories: Alice's own gate is fitted
        mine = gate_record(alice.index, "alice")
        assert mine is not None and mine["memories"] == 16
        before = alice.search(QUESTION)
        bob.add(chatter(60))  # Bob's 60 memories: his gate and the store's are fitted
        metadata = collection_metadata(alice.index)
        assert gate_record(metadata, "alice") == mine
        assert gate_record(metadata, "bob")["memories"] == 60
        assert gate_record(metadata)["memories"] == 76  # the store's, for unscoped readers
        after = alice.search(QUESTION)
        assert (after.threshold, after.threshold_origin) == (before.threshold,
                                                            before.threshold_origin)
        assert index_policy(metadata, user_id="alice").language_thresholds == mine["thresholds"]
        assert index_policy(metadata, user_id="bob").language_thresholds == gate_record(
            metadata, "bob")["thresholds"]


def test_a_users_retriever_fits_that_users_gate_when_it_is_due(e5, tmp_path: Path) -> None:
    """Memories written past the memory object (plain writes, another process): the reader
    of that user fits the user's own gate."""
    with RecencyMemory(e5, path=tmp_path / "store", min_fit_memories=1000) as memory:
        memory.add(chatter(30), user_id="bob")
        assert gate_record(memory.index, "bob") is None
        retriever = QdrantRecencyRetriever.from_index(memory.index, user_id="bob",
                                                      min_fit_memories=20)
        retriever.explain(QUESTION)
        fit = retriever.wait_for_refit()
        assert fit is not None and gate_record(memory.index, "bob")["memories"] == 30
        assert gate_record(memory.index) is None  # the store's own is not the user's
        assert "fitted on 30 memories" in retriever.explain(QUESTION).threshold_origin


def test_a_write_for_a_user_refits_that_users_gate(e5, tmp_path: Path) -> None:
    with RecencyMemory(e5, path=tmp_path / "store", min_fit_memories=1000) as memory:
        memory.add(chatter(25), user_id="bob")  # no fit: the object's size is 1000
        assert gate_record(memory.index, "bob") is None
        refit_after_write(memory.index, min_memories=20, users=["bob", None, "bob"])
        assert gate_record(memory.index, "bob")["memories"] == 25
        assert gate_record(memory.index)["memories"] == 25


def test_a_bank_questions_gate_score_is_what_it_scores_when_asked(e5, tmp_path: Path) -> None:
    """The fit asks each bank question as a question (query-embedded), and records a
    question about the present less its threshold's rise."""
    with RecencyMemory(e5, path=tmp_path / "store") as memory:
        memory.add(chatter(12), user_id="bob")
        policy = index_policy(memory.index, reference_date="2026-09-10")
        open_gate = policy.model_copy(update={"threshold": -1e9, "top_n": 1,
                                              "supersede_margin": None})
        retriever = QdrantRecencyRetriever.from_index(memory.index, open_gate)
        for question in ("Tell me a joke.", "What do I watch these days?"):
            (best,) = offtopic_best(memory.index.vector_store, e5, policy,
                                    questions={"en": [question]})["en"]
            (node,) = retriever.retrieve(question)
            rise = policy.for_question(question).threshold - policy.for_question(
                "Tell me a joke.").threshold
            assert abs(best - ((node.score or 0.0) - rise)) < 1e-4, question  # float16 bank
        assert policy.for_question("What do I watch these days?").threshold > policy.threshold


def test_the_fit_scores_every_bank_question_whatever_the_language_thresholds(
        e5, tmp_path: Path) -> None:
    """The fit reads each bank question's best score under an open gate: a policy whose
    per-language thresholds are above every score still gets a score per question."""
    with RecencyMemory(e5, path=tmp_path / "store") as memory:
        memory.add(chatter(12), user_id="bob")
        policy = index_policy(memory.index, reference_date="2026-09-10")
        asked = {"en": ["Tell me a joke.", "How far is the moon?"], "ja": ["冗談を言って。"]}
        closed = policy.model_copy(update={"language_thresholds": {"en": 0.99, "ja": 0.99}})
        best = offtopic_best(memory.index.vector_store, e5, closed, questions=asked)
        assert {lang: len(scores) for lang, scores in best.items()} == {"en": 2, "ja": 1}
        assert all(score < 0.99 for scores in best.values() for score in scores)
        assert best == offtopic_best(memory.index.vector_store, e5, policy, questions=asked)


def test_a_gate_fitted_without_the_words_is_refitted_with_them(e5, tmp_path: Path) -> None:
    """e5's policy reads an English question's words: a gate a store fitted on cosine alone
    (before the words were on) is not applied to the fused score, and the store fits again."""
    from datetime import date

    from llama_index_recency.storage import save_gate_fit

    with RecencyMemory(e5, path=tmp_path / "store", min_fit_memories=1000) as memory:
        memory.add(chatter(25))
        assert memory.policy.gate_units == "cosine+words"
        save_gate_fit(memory.index, "cosine", {"en": 0.5, "ja": 0.5}, 25, date(2026, 9, 10))
        assert index_policy(memory.index).threshold_origin == "shipped"
        retriever = QdrantRecencyRetriever.from_index(memory.index, min_fit_memories=20)
        retriever.explain(QUESTION)
        assert retriever.wait_for_refit() is not None
        assert gate_record(memory.index)["relevance"] == "cosine+words"
        assert "fitted on 25 memories" in index_policy(memory.index).threshold_origin


def test_a_search_with_a_limit_or_filters_keeps_the_users_own_gate(e5, tmp_path: Path) -> None:
    """``limit`` caps, ``filters`` narrow: neither swaps Alice's gate for the store's, which
    Bob's chatter raised (found by an exploratory user: limit=3 kept none of her memories)."""
    from datetime import date

    from llama_index.core.vector_stores.types import (
        FilterOperator,
        MetadataFilter,
        MetadataFilters,
    )

    from llama_index_recency.storage import save_gate_fit

    with RecencyMemory(e5, path=tmp_path / "store", min_fit_memories=1000) as memory:
        memory.add([(n.get_content().split(": ", 1)[1], n.metadata["date"])
                    for n in example_memories()], user_id="alice")
        memory.add(chatter(30), user_id="bob")
        units = memory.policy.gate_units
        save_gate_fit(memory.index, units, {"en": 0.80, "ja": 0.80}, 16, date(2026, 9, 10),
                      user_id="alice")
        save_gate_fit(memory.index, units, {"en": 1.5, "ja": 1.5}, 46, date(2026, 9, 10))
        recent = MetadataFilters(filters=[MetadataFilter(
            key="date", operator=FilterOperator.GTE, value="2026-01-01")])
        plain = memory.search(QUESTION, user_id="alice")
        assert plain.threshold == 0.80 and plain.nodes
        for ranking in (memory.search(QUESTION, user_id="alice", limit=1),
                        memory.search(QUESTION, user_id="alice", filters=recent)):
            assert (ranking.threshold, ranking.threshold_origin) == (plain.threshold,
                                                                    plain.threshold_origin)
            assert [n.node.node_id for n in ranking.nodes] == [
                n.node.node_id for n in plain.nodes][:len(ranking.nodes)]
            assert ranking.nodes

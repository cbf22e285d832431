"""The store's own gate on stores that cannot keep a fit, and on stores of several users
(issue #39, items 6 and 8)."""

from __future__ import annotations

import gc
import logging
from pathlib import Path

import pytest

from llama_index_recency import QdrantRecencyRetriever, RecencyMemory, memory_node
from llama_index_recency.errors import MemoryStoreReadOnlyError
from llama_index_recency.models.cohort import cohort_texts
from llama_index_recency.querying import gate
from llama_index_recency.storage import index_policy, open_memory_index

QUESTION = "What do I like to drink?"


def facts(count: int, start: int = 0) -> list[tuple[str, str]]:
    """``count`` distinct general facts (the cohort's sentences), all dated 2026-09-05."""
    return [(text.split(": ", 1)[1], "2026-09-05") for text in cohort_texts()[start:start + count]]


def test_a_store_that_cannot_save_its_due_fit_is_fitted_once_per_size(
        e5, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    """A store read from a temporary copy cannot save a fit: a retriever per question (as
    RecencyMemory.search builds them) tries it once, warns once, and tries again only when
    the store's size changes."""
    fits = []
    real = gate.offtopic_best
    monkeypatch.setattr(gate, "offtopic_best", lambda *a, **k: fits.append(1) or real(*a, **k))

    def read_only(*args: object, **kwargs: object) -> None:
        raise MemoryStoreReadOnlyError("the store at x is on a read-only filesystem")

    monkeypatch.setattr(gate, "save_gate_fit", read_only)
    index = open_memory_index(e5, path=tmp_path / "store")
    index.insert_nodes([memory_node(fact, day) for fact, day in facts(4)])
    for _ in range(5):
        retriever = QdrantRecencyRetriever.from_index(index, min_fit_memories=4)
        retriever.explain(QUESTION)
        retriever.wait_for_refit()
    warned = [r for r in caplog.records if "not refitted" in r.getMessage()]
    assert len(fits) == 1 and len(warned) == 1
    index.insert_nodes([memory_node(fact, day) for fact, day in facts(4, start=4)])
    retriever = QdrantRecencyRetriever.from_index(index, min_fit_memories=4)
    retriever.explain(QUESTION)
    retriever.wait_for_refit()
    assert len(fits) == 2  # the store changed: tried again


def test_a_failed_fit_is_forgotten_with_its_store_object(
        e5, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fit that failed is remembered per store object, by its id: once the object is gone
    the record goes too, so a new store object that Python gives the same id is fitted."""

    def read_only(*args: object, **kwargs: object) -> None:
        raise MemoryStoreReadOnlyError("the store at x is on a read-only filesystem")

    monkeypatch.setattr(gate, "save_gate_fit", read_only)
    index = open_memory_index(e5, path=tmp_path / "store")
    index.insert_nodes([memory_node(fact, day) for fact, day in facts(4)])
    retriever = QdrantRecencyRetriever.from_index(index, min_fit_memories=4)
    retriever.explain(QUESTION)
    retriever.wait_for_refit()
    store_id = id(index.vector_store)
    assert store_id in gate._FAILED_FITS
    index.vector_store.close()
    del index, retriever
    gc.collect()
    assert store_id not in gate._FAILED_FITS


def test_the_package_own_fit_does_not_warn_about_several_users(
        e5, tmp_path: Path, caplog) -> None:
    """Two user-scoped objects over one store: the refit after their writes ranks the
    off-topic bank over every user's memories, and says nothing about it."""
    with RecencyMemory(e5, path=tmp_path / "store", user_id="alice", min_fit_memories=8) as alice:
        bob = RecencyMemory(index=alice.index, user_id="bob", min_fit_memories=8)
        alice.add(facts(4))
        with caplog.at_level(logging.WARNING):
            bob.add(facts(4, start=4))  # 8 memories: the gate is fitted on the whole store
            assert "fitted on 8 memories" in index_policy(alice.index).threshold_origin
            # Alice's questions meet her own gate, which Bob's memories do not move.
            assert alice.search(QUESTION).threshold_origin == "shipped"
    assert not [r for r in caplog.records if "several users" in r.getMessage()]

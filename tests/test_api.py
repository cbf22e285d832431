"""The package's top level: about 20 names, and every 0.2 name (top-level or of a renamed
module) still importable for a while."""

from __future__ import annotations

import importlib
import inspect
import re
import sys
import warnings

import pytest

import llama_index_recency
from llama_index_recency import _moved

API_0_2 = [
    "aexport_memories", "aextract_memories", "aforget", "aget_memories", "aimport_memories",
    "ainsert_memories", "amemory_history", "aremember", "aupdate_memory", "calibrate",
    "calibrate_gate", "CALIBRATED_POLICIES", "Calibration", "CandidateResult", "check_gate",
    "close_memory_index", "count_memories", "EmbeddingAPIError", "EmbeddingMismatchError",
    "example_memories", "example_questions", "export_memories", "EXAMPLE_REFERENCE_DATE",
    "ExampleQuestion", "extract_memories", "FallbackEmbedding", "fit_policy", "fit_threshold",
    "forget", "FutureMemoryDateError", "GateFit", "get_memories", "get_memory", "HitFreeMax",
    "import_memories", "index_policy", "insert_memories", "is_vague_reference",
    "MEMORY_EXTRACTION_PROMPT", "memory_history", "memory_node", "MemoryDateError",
    "MemoryFileError", "MemoryNotFoundError", "MemoryRankingEvent", "MemoryRankingRow",
    "MemoryResponseSynthesizer", "MemoryStoreDamagedError", "MemoryStoreFullError",
    "MemoryStoreLockedError", "MemoryStoreNotFoundError", "MemoryStoreReadOnlyError",
    "MemoryStoreUnreachableError", "MemoryWriteError", "migrate_store", "Migration",
    "minilm_embedding", "offline_embedding", "open_memory_index", "open_memory_store",
    "openai_like_llm", "parse_transcript", "PartialWriteError", "PAST_POINTING_PATTERNS",
    "points_to_past", "question_intent", "PolicyCandidate", "PolicyFit",
    "QdrantEdgeVectorStore", "QdrantRecencyRetriever", "qwen3_embedding", "RankedMemory",
    "raw_cosine_sd", "RecencyBonusPostprocessor", "RecencyChatEngine", "RecencyMemoryBlock",
    "RecencyPolicy", "RecencyRanking", "remember", "remember_transcript",
    "retrieve_candidates", "RETRIEVED_MEMORY_CONTEXT_TEMPLATE", "RETRIEVED_MEMORY_PROMPT",
    "RetrievedCandidates", "save_policy", "SEED_GRID", "StoredMemories", "TargetScore",
    "ThresholdFit", "Turn", "update_memory", "VAGUE_REFERENCE_PATTERNS", "VAGUE_WINDOW_DAYS",
]
"""``llama_index_recency.__all__`` in 0.2."""


def test_the_top_level_is_small() -> None:
    assert len(llama_index_recency.__all__) <= 25
    assert len(set(llama_index_recency.__all__)) == len(llama_index_recency.__all__)
    for name in llama_index_recency.__all__:
        assert getattr(llama_index_recency, name) is not None


@pytest.mark.parametrize("name", API_0_2)
def test_every_0_2_name_still_imports_and_says_where_it_went(name: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        namespace: dict[str, object] = {}
        exec(f"from llama_index_recency import {name}", namespace)
    found = namespace[name]
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    if name in llama_index_recency.__all__:
        assert deprecations == []
        return
    # ``from package import name`` looks the name up twice: the same warning each time.
    (message,) = {str(warning.message) for warning in deprecations}
    new_spelling = re.search(r"`from (llama_index_recency\.[\w.]+) import (\w+)`", message)
    assert new_spelling is not None and new_spelling.group(2) == name
    assert getattr(importlib.import_module(new_spelling.group(1)), name) is found


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(ImportError, match="no_such_name"):
        exec("from llama_index_recency import no_such_name", {})


MEMORY_MODULE_0_2 = [
    "calendar_day", "canonical_id", "check_not_future", "check_user_name", "control_character",
    "FutureMemoryDateError", "has_subject", "is_memory_id", "MAX_FACT_CHARS", "memory_id",
    "MEMORY_NAMESPACE", "memory_node", "Role", "SeveralUsersWarning", "SUBJECT_PLACEHOLDERS",
    "SUPERSEDED_BY_KEY", "SUPERSEDES_KEY", "Turn", "USER_ID_KEY", "with_subject",
]
"""The public names of ``llama_index_recency.memory`` in 0.2, now ``llama_index_recency.records.nodes``."""


def test_the_0_2_memory_module_still_imports_and_says_where_it_went(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "llama_index_recency.memory", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = importlib.import_module("llama_index_recency.memory")
    (message,) = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert "`from llama_index_recency.records.nodes import" in message
    records = importlib.import_module("llama_index_recency.records.nodes")
    for name in MEMORY_MODULE_0_2:
        assert getattr(old, name) is getattr(records, name), name


@pytest.mark.parametrize("old", sorted(_moved.MOVED_MODULES))
def test_every_0_3_module_path_still_imports_and_says_where_it_went(
        old: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, f"llama_index_recency.{old}", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(f"llama_index_recency.{old}")
    (message,) = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    moved = _moved.MOVED_MODULES[old]
    news = [f"llama_index_recency.{new}" for new in ((moved,) if isinstance(moved, str) else moved)]
    assert f"`from {' or '.join(news)} import" in message
    if len(news) == 1:
        assert module is importlib.import_module(news[0]) and module.__spec__.name == news[0]
        return
    for new in news:  # a split module: each part's names, from the old path
        part = importlib.import_module(new)
        public = [name for name in vars(part) if not name.startswith("_")
                  and getattr(getattr(part, name), "__module__", None) == new]
        assert public and all(getattr(module, name) is getattr(part, name) for name in public)


async def test_an_async_twin_runs_its_blocking_twin_in_a_worker_thread() -> None:
    import threading

    from llama_index_recency.twins import in_thread
    from llama_index_recency.writing.updates import aforget, forget

    def where(value: int, *, twice: bool = False) -> tuple[int, str]:
        """Doc."""
        return value * (2 if twice else 1), threading.current_thread().name

    value, thread = await in_thread(where)(3, twice=True)
    assert value == 6 and thread != threading.current_thread().name
    assert in_thread(where).__name__ == "awhere" and in_thread(where).__doc__.endswith("Doc.")
    assert aforget.__name__ == "aforget" and ":func:`forget`" in (aforget.__doc__ or "")
    assert inspect.signature(aforget) == inspect.signature(forget)

"""Where the names of earlier versions went: one table per kind, each read with a
``DeprecationWarning`` naming the new spelling.

- :data:`MOVED_MODULES`: the 0.3 modules, now in the layer folders (``llama_index_recency.store``
  is the storage layer's front, ``llama_index_recency.storage``); importing an old path gives
  the new module.
- :data:`MOVED_NAMES`: the names 0.2 exported from the package root, by the module that holds
  them now.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Any, Optional, Sequence

PACKAGE = "llama_index_recency"

MOVED_MODULES: dict[str, str | tuple[str, ...]] = {
    "backup": "writing.backup",
    "calibration": ("fitting.calibration", "fitting.policy_fit"),
    "chat": "integrations.chat",
    "cohort": "models.cohort",
    "dates": "records.dates",
    "edge": "storage.edge",
    "edge_files": "storage.edge_files",
    "edge_points": "storage.edge_points",
    "embeddings": "models.embeddings",
    "engine": "storage.engine",
    "events": "ranking.events",
    "examples": "records.examples",
    "extraction": "writing.extraction",
    "filters": "storage.filters",
    "gate": "querying.gate",
    "gate_fit": "fitting.gate_fit",
    "intent": "ranking.intent",
    "language": "ranking.language",
    "links": ("storage.history", "ranking.successors", "records.links"),
    "memory": "records.nodes",
    "memory_block": "integrations.memory_block",
    "memory_file": "writing.memory_file",
    "migration": "storage.migration",
    "news": "ranking.news",
    "outbox": "storage.outbox",
    "policy_fit": "fitting.policy_fit",
    "postprocessor": "integrations.postprocessor",
    "prompts": "integrations.prompts",
    "ranked": "ranking.ranked",
    "retriever": "integrations.retriever",
    "scoring": "ranking.policy",
    "search": "ranking.plan",
    "store": "storage",
    "store_access": "storage.access",
    "store_metadata": "storage.metadata",
    "supersession": "ranking.supersession",
    "text": "records.text",
    "updates": "writing.updates",
    "vague": "ranking.vague",
    "writer": "writing.writer",
}
"""The 0.3 module paths under the package (and 0.2's ``memory``), by the module now holding
their names, or the modules a split one's names went to (an old path then gives a module that
reads each name from the first of them holding it). ``records`` and ``models`` are folders now
and export 0.3's names themselves."""

MOVED_NAMES: dict[str, tuple[str, ...]] = {
    "writing.backup": ("aexport_memories", "aimport_memories", "export_memories", "import_memories"),
    "fitting.calibration": (
        "calibrate", "Calibration", "CandidateResult", "fit_threshold", "HitFreeMax",
        "retrieve_candidates", "RetrievedCandidates", "SEED_GRID", "TargetScore", "ThresholdFit",
    ),
    "fitting.policy_fit": ("fit_policy", "PolicyCandidate", "PolicyFit", "raw_cosine_sd"),
    "storage.edge": ("QdrantEdgeVectorStore",),
    "models.embeddings": ("FallbackEmbedding",),
    "errors": (
        "EmbeddingAPIError", "EmbeddingMismatchError", "FutureMemoryDateError", "MemoryDateError",
        "MemoryFileError", "MemoryNotFoundError", "MemoryStoreDamagedError",
        "MemoryStoreFullError", "MemoryStoreLockedError", "MemoryStoreNotFoundError",
        "MemoryStoreReadOnlyError", "MemoryStoreUnreachableError", "MemoryWriteError",
        "PartialWriteError",
    ),
    "ranking.events": ("MemoryRankingRow",),
    "records.examples": (
        "example_memories", "example_questions", "EXAMPLE_REFERENCE_DATE", "ExampleQuestion",
    ),
    "querying.gate": ("calibrate_gate", "check_gate", "GateFit"),
    "ranking.intent": ("PAST_POINTING_PATTERNS", "points_to_past"),
    "storage.history": ("amemory_history", "memory_history"),
    "models.factories": ("CALIBRATED_POLICIES", "minilm_embedding", "qwen3_embedding"),
    "integrations.prompts": ("RETRIEVED_MEMORY_CONTEXT_TEMPLATE", "RETRIEVED_MEMORY_PROMPT"),
    "ranking.ranked": ("RankedMemory", "RecencyRanking"),
    "storage": (
        "aget_memories", "close_memory_index", "count_memories", "get_memories", "get_memory",
        "migrate_store", "Migration", "open_memory_store", "save_policy",
    ),
    "writing.updates": (
        "aforget", "ainsert_memories", "aupdate_memory", "forget", "insert_memories",
        "StoredMemories", "update_memory",
    ),
    "ranking.vague": ("is_vague_reference", "VAGUE_REFERENCE_PATTERNS", "VAGUE_WINDOW_DAYS"),
    "writing.writer": (
        "aextract_memories", "aremember", "extract_memories", "MEMORY_EXTRACTION_PROMPT",
        "parse_transcript", "remember", "remember_transcript",
    ),
}
"""The other names 0.2 exported from the package root, by the module that holds them now."""

_MODULE_OF_NAME = {name: module for module, names in MOVED_NAMES.items() for name in names}


def moved_name(name: str) -> Any:
    """A 0.2 top-level name from its module, with a DeprecationWarning naming the new spelling.

    Raises:
        AttributeError: ``name`` was never a top-level name.
    """
    module = _MODULE_OF_NAME.get(name)
    if module is None:
        raise AttributeError(f"module {PACKAGE!r} has no attribute {name!r}")
    warnings.warn(
        f"{PACKAGE}.{name} moved: use `from {PACKAGE}.{module} import {name}`; "
        "the top-level name goes in a later version",
        DeprecationWarning,
        stacklevel=3,
    )
    return getattr(importlib.import_module(f"{PACKAGE}.{module}"), name)


class _OldModulePaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds a 0.3 module path and loads the module that holds its names now, warning once."""

    def __init__(self) -> None:
        self._specs: dict[str, Optional[importlib.machinery.ModuleSpec]] = {}

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None,
                  target: Optional[ModuleType] = None) -> Optional[importlib.machinery.ModuleSpec]:
        old = fullname.removeprefix(f"{PACKAGE}.")
        if old == fullname or old not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        moved = MOVED_MODULES[spec.name.removeprefix(f"{PACKAGE}.")]
        news = [f"{PACKAGE}.{new}" for new in ((moved,) if isinstance(moved, str) else moved)]
        warnings.warn(
            f"{spec.name} moved: use `from {' or '.join(news)} import ...`; the old path goes "
            "in a later version",
            DeprecationWarning,
            stacklevel=_caller_level(),
        )
        if len(news) == 1:
            module = importlib.import_module(news[0])
            self._specs[news[0]] = module.__spec__
            return module
        return _split_module(spec.name, [importlib.import_module(new) for new in news])

    def exec_module(self, module: ModuleType) -> None:
        """Give a moved module back its own spec (the import system set the old path's on it)."""
        if module.__name__ in self._specs:
            module.__spec__ = self._specs[module.__name__]


def _split_module(name: str, parts: Sequence[ModuleType]) -> ModuleType:
    """A module named ``name`` whose names are read from the first of ``parts`` holding each."""
    module = ModuleType(name, f"Where the names of {name} went: " + ", ".join(
        part.__name__ for part in parts))

    def __getattr__(attribute: str) -> Any:
        for part in parts:
            if hasattr(part, attribute):
                return getattr(part, attribute)
        raise AttributeError(f"module {name!r} has no attribute {attribute!r}")

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    return module


def _caller_level() -> int:
    """The stack level of the first frame outside the import machinery (the importing code)."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and (frame.f_code.co_filename.startswith("<frozen importlib")
                                 or frame.f_code.co_filename == __file__):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def install() -> None:
    """Let the 0.3 module paths import (once per process)."""
    if not any(isinstance(finder, _OldModulePaths) for finder in sys.meta_path):
        sys.meta_path.append(_OldModulePaths())

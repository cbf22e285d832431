"""The package's layers: every module imports only its own layer or those below, and no
import circle. Read from the source (every import, a function's own included)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "llama_index_recency"

LAYERS: dict[str, tuple[str, ...]] = {
    # what a memory is: keys, ids, memory_node, the errors, the demo data
    "records": ("errors", "dates", "records", "memory", "examples", "data"),
    # the policy math, the I/O-free search plan and its steps, relevance units, text rules
    "ranking": ("ranked", "scoring", "search", "supersession", "cohort", "events", "intent", "news", "vague",
                "text", "language", "gate_fit"),
    # stores, engines, embedding models
    "storage": ("filters", "engine", "edge_points", "edge_files", "edge", "store_access", "store_metadata",
                "migration", "store", "embeddings", "models"),
    # the one write, update / forget / relink, extraction, outbox, backup
    "writing": ("updates", "links", "extraction", "writer", "outbox", "memory_file", "backup"),
    # LlamaIndex integrations and fitting, side by side
    "integrations": ("retriever", "postprocessor", "memory_block", "chat", "prompts",
                     "calibration", "policy_fit", "gate"),
    "api": ("recency_memory", "__init__"),
    "cli": ("cli", "__main__"),
}
RANK = {module: rank for rank, modules in enumerate(LAYERS.values()) for module in modules}

KNOWN_DOWNWARD_BREAKS: set[tuple[str, str]] = set()
"""Imports of a higher layer still to remove; a new one fails the test."""

KNOWN_CIRCLES: list[set[str]] = []


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def layer_of(module: str) -> int:
    return RANK[module.split(".")[0]]


def imports() -> dict[str, set[str]]:
    """Per module, the package modules it imports (``from pkg import submodule`` included)."""
    graph: dict[str, set[str]] = {}
    modules = {module_name(path) for path in PACKAGE.rglob("*.py")}
    for path in PACKAGE.rglob("*.py"):
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                if name.startswith("llama_index_recency."):
                    inner = name.removeprefix("llama_index_recency.")
                    if inner in modules:
                        found.add(inner)
        graph[module_name(path)] = found - {module_name(path)}
    return graph


def test_every_module_has_a_layer() -> None:
    assert [module for module in imports() if module.split(".")[0] not in RANK] == []


def test_imports_only_go_down() -> None:
    upward = {(module, used) for module, used_ones in imports().items() for used in used_ones
              if module.split(".")[0] != used.split(".")[0] and layer_of(used) > layer_of(module)}
    assert upward == KNOWN_DOWNWARD_BREAKS


def test_no_import_circle() -> None:
    graph = imports()
    circles = [set(component) for component in strongly_connected(graph) if len(component) > 1]
    assert sorted(map(sorted, circles)) == sorted(map(sorted, KNOWN_CIRCLES))


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of ``graph``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph.get(node, ()):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components

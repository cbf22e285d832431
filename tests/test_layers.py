"""The package's layers as ``make lint``'s contract states them: every module is in a layer, imports
only its own layer or those below (side-by-side layers neither way), and sits in no import circle.
Read from the source (every import, a function's own included)."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "llama_index_recency"

CONTRACT = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text("utf-8"))[
    "tool"]["importlinter"]["contracts"][0]
"""The import-linter ``layers`` contract that ``make lint`` runs: the layers, top first."""

RANK = {name.strip(): -rank for rank, layer in enumerate(CONTRACT["layers"])
        for name in layer.split("|")}
"""Each top-level module or folder of the package by layer, higher imports lower."""

KNOWN_UPWARD = {tuple(rule.removeprefix("llama_index_recency.").split(" -> llama_index_recency."))
                for rule in CONTRACT.get("ignore_imports", [])}
"""Imports of a higher layer still to remove (the contract's ignored imports)."""


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
    assert [module for module in imports()
            if module != "__init__" and module.split(".")[0] not in RANK] == []


def test_imports_only_go_down() -> None:
    upward = {(module, used) for module, used_ones in imports().items() for used in used_ones
              if module != "__init__" and module.split(".")[0] != used.split(".")[0]
              and layer_of(used) >= layer_of(module)}
    assert upward == KNOWN_UPWARD


def test_no_import_circle() -> None:
    graph = imports()
    assert [component for component in strongly_connected(graph) if len(component) > 1] == []


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


def test_the_root_holds_the_front_and_every_module_stays_readable() -> None:
    """The package root keeps the front (at most 5 modules of over 30 lines), the layers are
    folders (at least 6 besides ``cli/`` and ``data/``), and no module runs past 500 lines."""
    lines = {path: len(path.read_text("utf-8").splitlines()) for path in PACKAGE.rglob("*.py")}
    assert len([path for path in PACKAGE.glob("*.py") if lines[path] > 30]) <= 5
    folders = {path.parent.name for path in PACKAGE.glob("*/__init__.py")} - {"cli", "data"}
    assert len(folders) >= 6 and folders <= set(RANK)
    assert {path.relative_to(PACKAGE).as_posix(): n for path, n in lines.items() if n > 500} == {}


def test_the_architecture_page_names_every_module_in_its_folder() -> None:
    """docs/architecture.md's table lists each folder's modules: a module added, moved or
    removed without the page changing fails here."""
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text("utf-8")
    named = set()
    for row in re.findall(r"^\| [^|]+ \| ([^|]+) \| ([^|]+) \|", page, re.MULTILINE):
        folders = re.findall(r"`(\w+)/`", row[0]) or ([""] if "(root)" in row[0] else [])
        for module in re.findall(r"`(\w+)`", row[1]):
            named.add((folders[0], module))
    named.discard(("", "__init__"))
    actual = {(path.parent.relative_to(PACKAGE).as_posix().replace(".", ""), path.stem)
              for path in PACKAGE.rglob("*.py") if path.stem != "__init__"
              and path.parent.name not in {"data"}}
    assert named == actual

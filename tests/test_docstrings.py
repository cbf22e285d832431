"""Every public function or method that raises on purpose says so: a ``Raises:`` section in its
docstring naming each error class it raises itself. Read from the source."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "llama_index_recency"


def raised_names(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The error classes ``function``'s own body raises by name (not those of nested functions,
    nor a bare ``raise`` that re-raises)."""
    names: set[str] = set()
    todo: list[ast.AST] = list(function.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Raise) and node.exc is not None:
            error = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(error, ast.Name) and error.id[:1].isupper():
                names.add(error.id)
            elif isinstance(error, ast.Attribute):
                names.add(error.attr)
        todo.extend(ast.iter_child_nodes(node))
    return names


def public_functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Each public function and method of the package (module, class or function name
    without a leading underscore, dunder ``__init__`` and ``__call__`` included), by place."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if any(part.startswith("_") and part not in {"__init__.py", "__main__.py"}
               for part in path.relative_to(PACKAGE).parts):
            continue
        tree = ast.parse(path.read_text("utf-8"))
        scopes: list[tuple[str, ast.AST]] = [(path.relative_to(PACKAGE).as_posix(), tree)]
        while scopes:
            where, scope = scopes.pop()
            for node in getattr(scope, "body", []):
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    scopes.append((f"{where}:{node.name}", node))
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                        not node.name.startswith("_") or node.name in {"__init__", "__call__"}):
                    found.append((f"{where}:{node.name}", node))
    return found


def test_every_public_function_that_raises_has_a_raises_section() -> None:
    missing = {}
    for where, function in public_functions():
        raised = raised_names(function) - {"NotImplementedError"}
        doc = ast.get_docstring(function) or ""
        section = doc.split("Raises:", 1)[1] if "Raises:" in doc else ""
        unnamed = sorted(name for name in raised if name not in section)
        if unnamed:
            missing[where] = unnamed
    assert missing == {}

"""Re-execute the experiments notebook in place, saving its outputs: ``make notebook``.

    HF_HUB_OFFLINE=1 .venv/bin/python notebooks/execute.py

A fresh kernel runs every cell offline (``HF_HUB_OFFLINE=1``) with matplotlib's Agg backend;
no timings are recorded, so a re-run on the same machine writes the same file (figures'
pixels aside). ``tests/test_notebook.py`` runs the same function and compares.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().with_name("recency_bonus_experiments.ipynb")


def execute(path: Path = NOTEBOOK) -> nbformat.NotebookNode:
    """The notebook at ``path`` run top to bottom in a fresh kernel, its saved outputs replaced."""
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    # The "python3" kernel spec runs `python`, which jupyter_client maps to this interpreter.
    client = NotebookClient(notebook, kernel_name="python3", timeout=600, record_timing=False,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute(env={**os.environ, "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg"})
    return notebook


def main() -> None:
    nbformat.write(execute(), NOTEBOOK)
    print(f"executed and saved {NOTEBOOK.name}")


if __name__ == "__main__":
    main()

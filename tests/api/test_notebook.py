"""examples/quickstart.ipynb executed end to end in a real Jupyter kernel (nbclient, ipykernel running this
venv's Python) against the real server of ``api_server``; each cell's output is checked."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx
import nbformat
import pytest
from nbclient import NotebookClient

from tests.support import ADMIN_TOKEN, Server

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"
KERNEL = "driftwarden-test"


def _kernel(home: Path) -> None:
    """A kernelspec of this interpreter under ``home`` (found through JUPYTER_PATH): the kernel runs the
    venv's Python whatever the user's own Jupyter holds."""
    spec = home / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"})
    )


def _outputs(nb: Any, cell_id: str) -> tuple[str, str]:
    """A cell's printed text and its rich HTML output."""
    cell = next(c for c in nb.cells if c.get("id") == cell_id)
    text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    html = "".join(o.get("data", {}).get("text/html", "") for o in cell.outputs if "data" in o)
    return text, html


def test_the_quickstart_notebook_runs_in_a_real_kernel(
    api_server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _kernel(tmp_path / "jupyter")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("DRIFTWARDEN_URL", api_server.url)
    monkeypatch.setenv("DRIFTWARDEN_TOKEN", ADMIN_TOKEN)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")  # kept without outputs
    NotebookClient(
        nb, kernel_name=KERNEL, timeout=300, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()

    _, inline = _outputs(nb, "compare")
    assert 'class="driftwarden-report"' in inline and "<table" in inline and "srcdoc=" in inline
    assert "dataset DRIFTED (3 of 10 features drifted)" in inline and "income" in inline
    _, summary = _outputs(nb, "summary")
    assert "<table" in summary and "verdict" in summary and "drift" in summary
    printed, _ = _outputs(nb, "verdict")
    drifted = printed.split("drifted: ")[-1].strip().split(", ")
    assert sorted(drifted) == ["age", "credit_score", "income"]
    printed, _ = _outputs(nb, "profile")
    assert "same report after the round trip: True" in printed and "10 features, 5,000 rows" in printed
    printed, _ = _outputs(nb, "predict")
    assert "200 predictions by version 1" in printed
    printed, _ = _outputs(nb, "feedback")
    assert "labels stored: 200" in printed
    _, history = _outputs(nb, "history")
    runs = httpx.get(
        f"{api_server.url}/v1/models/credit/drift/history",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        params={"limit": 1000},
    ).json()["runs"]
    assert runs and history.count("<tr") == len(runs) + 1  # the header row and one row per run
    assert f"<td>{runs[0]['run_id']}</td>" in history

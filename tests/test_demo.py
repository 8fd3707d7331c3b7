"""`driftwarden demo`, the README's main job, end to end on the embedded default (a fresh ./var)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.training.helpers import pid_alive


@pytest.mark.cluster
def test_demo_trains_serves_flags_the_planted_drift_and_closes_the_loop(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRIFTWARDEN_")}
    proc = subprocess.run(
        [sys.executable, "-m", "service.cli", "demo", "--rows", "8000", "--epochs", "2"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    assert (tmp_path / "var" / "driftwarden.db").exists()
    assert (tmp_path / "var" / "models" / "credit" / "1" / "saved_model.pb").exists()
    assert "credit:1 is now serving" in out
    assert "HTTP 400" in out and "feature 'income'" in out
    assert "rows dropped 0" in " ".join(out.split())
    for phase in ("baseline", "covariate shift", "new category"):
        assert f"{phase} flagged exactly what was planted" in " ".join(out.split()), out[-5000:]
    assert (
        "Prometheus metrics: http://127.0.0.1:" in out
        and 'driftwarden_dataset_drifted{model="credit"}' in out
    )
    assert "driftwarden-drift: model drift & quality" in out and "runbooks: docs/operations.md" in out
    # the loop closed unattended: every stage of the summary table is there and ok (the demo exits 2 if not)
    flat = " ".join(out.split())
    assert "The loop, closed unattended" in out
    for stage in (
        "baseline traffic",
        "drift detected",
        "alert fires",
        "signed webhook received",
        "retraining job starts",
        "trained on the cluster",
        "passes the gate",
        "promoted",
        "new version serves",
        "next monitor run clean",
        "bad candidate rejected",
    ):
        assert f"│ {stage}" in out and f"{stage} │ ok" in " ".join(out.replace("│", " │ ").split()), stage
    assert "signature verified with standardwebhooks" in flat and "(trigger alert," in flat
    assert "credit: serving version 1 -> 2" in out  # the server switched to the retrained version
    assert "job 2: rejected" in flat and "gate: FAIL metric: roc_auc" in flat  # the drill, with its reason
    from sqlalchemy import create_engine, text

    engine = create_engine(f"sqlite:///{tmp_path / 'var' / 'driftwarden.db'}")
    with engine.connect() as conn:
        states = dict(conn.execute(text("select version, state from model_versions")).all())
        jobs = conn.execute(text("select state, trigger from training_jobs order by id")).all()
    engine.dispose()
    assert states == {1: "archived", 2: "serving", 3: "rejected"}, states
    assert [tuple(j) for j in jobs] == [("promoted", "alert"), ("rejected", "api")], jobs
    report = tmp_path / "var" / "demo" / "drift-report.html"
    assert report.exists() and "loan_purpose" in report.read_text()
    pids = json.loads(next((tmp_path / "var" / "checkpoints").glob("*/nodes/pids.json")).read_text())
    assert not [p for node, ps in pids.items() if node != "launcher" for p in ps if pid_alive(p)]


def test_the_dashboards_the_demo_names_are_the_provisioned_ones() -> None:
    from service.demo import DASHBOARDS

    folder = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "dashboards"
    uids = {json.loads(p.read_text())["uid"] for p in folder.glob("*.json")}
    assert set(DASHBOARDS) == uids

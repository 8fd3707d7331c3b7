"""`driftwarden demo`, the README's main job, end to end on the embedded default (a fresh ./var)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.training.helpers import pid_alive

STAGES = (
    "baseline traffic",
    "drift detected",
    "alert fires",
    "signed webhook received",
    "retraining job starts",
    "trained on the cluster",
    "passes the gate",
    "promoted",
    "new version serves",
    "next run: green",
    "bad candidate rejected",
)


def run_demo(folder: Path) -> str:
    """``driftwarden demo`` (small sizes) in ``folder`` on the embedded default; its output (exit 0)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRIFTWARDEN_")}
    proc = subprocess.run(
        [sys.executable, "-m", "service.cli", "demo", "--rows", "8000", "--epochs", "2"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    return out


def assert_loop_closed(out: str) -> None:
    """Every stage of the summary table is there and ok (the demo exits 2 if not)."""
    assert "The loop, closed unattended" in out
    for stage in STAGES:
        assert f"│ {stage}" in out and f"{stage} │ ok" in " ".join(out.replace("│", " │ ").split()), stage


def model_states(folder: Path, model: str) -> tuple[dict[int, str], list[tuple[str, str]]]:
    """The model's versions and their states, and its jobs' (state, trigger), oldest first."""
    from sqlalchemy import create_engine, text

    engine = create_engine(f"sqlite:///{folder / 'var' / 'driftwarden.db'}")
    with engine.connect() as conn:
        states: dict[int, str] = dict(
            conn.execute(
                text("select version, state from model_versions where model_name = :m"), {"m": model}
            ).all()
        )
        jobs = conn.execute(
            text("select state, trigger from training_jobs where model_name = :m order by id"), {"m": model}
        ).all()
    engine.dispose()
    return states, [tuple(j) for j in jobs]


@pytest.mark.cluster
def test_demo_trains_serves_flags_the_planted_drift_and_closes_the_loop(tmp_path: Path) -> None:
    out = run_demo(tmp_path)
    assert (tmp_path / "var" / "driftwarden.db").exists()
    assert (tmp_path / "var" / "models" / "credit" / "1" / "saved_model.pb").exists()
    assert "credit:1 is now serving" in out
    # the tour names its log file, which holds the log records and each serving request with its answer
    log = (tmp_path / "var" / "demo" / "demo.log").read_text()
    assert "var/demo/demo.log" in out
    assert "HTTP 400" in log and "feature 'income'" in log and "feature 'income'" in out
    assert "rows dropped 0" in " ".join(out.split())
    # the tour reads as a story: no log line, no Python repr, no warning on a healthy run (the log has them)
    timestamp = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}")
    assert not timestamp.search(out), [line for line in out.splitlines() if timestamp.search(line)]
    assert timestamp.search(log) and "train.progress step=" in log and "driftwarden.training" in log
    # dict and list reprs (strings, or three numbers and more: "in [0, 1]" is an interval), tracebacks
    repr_ = re.compile(r"\{'|\['|\[-?[\d.e+-]+, -?[\d.e+-]+, |Traceback")
    assert not repr_.search(out), [line for line in out.splitlines() if repr_.search(line)]
    assert "no findings: No findings" not in out and "ATTENTION: Attention" not in out
    warning = re.compile(r"\bWARNING\b|Warning:|thread setting")
    assert not warning.search(out), [line for line in out.splitlines() if warning.search(line)]
    assert "thread setting" not in log  # the model calls' threads were set before TensorFlow first ran
    for phase in ("baseline", "covariate shift", "new category"):
        assert f"{phase} flagged exactly what was planted" in " ".join(out.split()), out[-5000:]
    assert (
        "Prometheus metrics: http://127.0.0.1:" in out
        and 'driftwarden_dataset_drifted{model="credit"}' in out
    )
    assert "driftwarden-drift: model drift & quality" in out and "runbooks: docs/operations.md" in out
    # the loop closed unattended: every stage of the summary table is there and ok (the demo exits 2 if not)
    flat = " ".join(out.split())
    assert_loop_closed(out)
    assert "signature verified with standardwebhooks" in flat and "(trigger alert," in flat
    # it says when the alert fired and what the log held of its traffic then: every drifted row was in
    assert "alert harmful_drift fired at " in flat  # the retraining rule: the shift hurts (issue 42)
    assert (
        "at that moment the log held 24000 labelled predictions of credit from this run (2000 baseline, "
        "2000 new_category, 20000 covariate_shift)" in flat
    )
    assert "credit: serving version 1 -> 2" in log  # the server switched to the retrained version
    # the next run, on clean traffic for the retrained version, is green: its stage quotes the headline
    table = " ".join(out.replace("│", " │ ").split())
    row = table.split("next run: green │ ok │", 1)[1].split("│ bad candidate rejected", 1)[0]
    assert "no feature drifted; headline: No findings:" in row, row
    assert "job 2: rejected" in flat and "gate: FAIL metric: roc_auc" in flat  # the drill, with its reason
    states, jobs = model_states(tmp_path, "credit")
    assert states == {1: "archived", 2: "serving", 3: "rejected"}, states
    assert jobs == [("promoted", "alert"), ("rejected", "api")], jobs
    report = tmp_path / "var" / "demo" / "drift-report.html"
    assert report.exists() and "loan_purpose" in report.read_text()
    pids = json.loads(next((tmp_path / "var" / "checkpoints").glob("*/nodes/pids.json")).read_text())
    assert not [p for node, ps in pids.items() if node != "launcher" for p in ps if pid_alive(p)]

    # run again in the same folder (issue 41): the first run's alerts still fire and its model is in its
    # retraining cooldown, so the second run takes a model of its own, says so, and closes the loop too
    again = run_demo(tmp_path)
    flat = " ".join(again.split())
    assert "model 'credit' exists already" in flat and "this run uses credit-2," in flat
    assert_loop_closed(again)
    assert "at that moment the log held 24000 labelled predictions of credit-2 from this run" in flat
    assert model_states(tmp_path, "credit") == (states, jobs)  # the first run's model is untouched
    states, jobs = model_states(tmp_path, "credit-2")
    assert states == {1: "archived", 2: "serving", 3: "rejected"}, states
    assert jobs == [("promoted", "alert"), ("rejected", "api")], jobs


LOG_TO_FILE = """
import logging, logging.config, sys
from pathlib import Path
from core.logs import log_to_file

log_to_file(Path("var/demo/demo.log"), verbose=sys.argv[1] == "verbose")
logging.getLogger("driftwarden.demo").info("a step's record")
# what uvicorn does when the demo starts a server in its process: every handler is closed
logging.config.dictConfig({"version": 1, "disable_existing_loggers": False})
logging.getLogger("driftwarden.demo").warning("something is wrong")
logging.getLogger("tensorflow").info("library chatter")
"""


@pytest.mark.parametrize("verbose", [False, True])
def test_the_demo_logs_to_its_file_and_shows_warnings_only_unless_verbose(
    tmp_path: Path, verbose: bool
) -> None:
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.run(
        [sys.executable, "-c", LOG_TO_FILE, "verbose" if verbose else "quiet"],
        cwd=tmp_path,
        env={k: v for k, v in env.items() if not k.startswith("DRIFTWARDEN_")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    log = (tmp_path / "var" / "demo" / "demo.log").read_text().splitlines()
    timestamp = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")
    assert [line.split(" ", 2)[2] for line in log] == [
        "INFO driftwarden.demo a step's record",
        "WARNING driftwarden.demo something is wrong",
    ]
    assert all(timestamp.match(line) for line in log)
    shown = proc.stderr.splitlines()
    if verbose:  # every record, as the other commands show them
        assert len(shown) == 2 and "a step's record" in shown[0] and timestamp.match(shown[0])
    else:  # the warning alone, one line without a timestamp
        assert shown == ["WARNING driftwarden.demo: something is wrong"]
    assert "library chatter" not in proc.stderr


def test_the_dashboards_the_demo_names_are_the_provisioned_ones() -> None:
    from service.demo import DASHBOARDS

    folder = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "dashboards"
    uids = {json.loads(p.read_text())["uid"] for p in folder.glob("*.json")}
    assert set(DASHBOARDS) == uids


def test_a_demo_wait_lasts_while_there_is_progress_and_names_what_stalled() -> None:
    from service.demo_loop import DemoFailed, follow

    calls = iter(range(1_000_000))

    def moving() -> tuple[int | None, str]:  # progress at each look, done after 25: longer than stall_s
        n = next(calls)
        return (n if n >= 25 else None), f"{n} of 25 rows written"

    assert follow("the log", moving, console=None, every_s=0.1, stall_s=1.0) == 25

    def stuck() -> tuple[int | None, str]:
        return None, "job 7: queued"

    with pytest.raises(
        DemoFailed, match=r"for the retraining job: no progress for 0s \(last seen: job 7: queued\)"
    ):
        follow("the retraining job", stuck, console=None, every_s=0.01, stall_s=0.05)

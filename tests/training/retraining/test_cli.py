"""`driftwarden jobs ...` and `driftwarden worker --once` on the embedded SQLite of the test's workspace."""

from __future__ import annotations

import json
import os

from typer.testing import CliRunner

from service.cli import app
from tests.support import TrainedModels, seed_registry

runner = CliRunner()


def _run(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


def test_jobs_commands_queue_show_and_cancel(trained: TrainedModels) -> None:
    seed_registry(os.environ["DRIFTWARDEN_DATABASE_URL"], trained, serving=1)
    code, out, _ = _run("jobs", "list")
    assert code == 0 and out.startswith("no retraining jobs yet")
    code, _, err = _run("jobs", "submit", "--model", "ghost")
    assert code == 2 and err.startswith("error: no model 'ghost' in the registry")
    code, _, err = _run("jobs", "submit", "--model", "credit", "--drill", "fire")
    assert code == 2 and "drill: Input should be 'shuffled_labels'" in err
    code, _, err = _run("jobs", "submit", "--model", "credit", "--mode", "local", "--workers", "2")
    assert code == 2 and "workers does not apply to mode local" in err
    code, out, _ = _run("jobs", "submit", "--model", "credit", "--mode", "local", "--epochs", "2")
    assert (code, out.strip()) == (0, "job 1 queued for credit: `driftwarden jobs show 1` follows it")
    code, out, _ = _run("jobs", "submit", "--model", "credit")
    assert code == 0 and out.startswith("no new job: job 1 of model 'credit' is queued already")
    code, out, _ = _run("jobs", "list", "--json")
    docs = json.loads(out)
    assert [(d["id"], d["state"], d["trigger"]) for d in docs] == [(1, "queued", "cli")]
    assert docs[0]["params"] == {"mode": "local", "epochs": 2.0}
    assert docs[0]["requested_by"].startswith("cli:")
    code, out, _ = _run("jobs", "list", "--model", "credit", "--state", "queued")
    assert code == 0 and "Retraining jobs" in out and "credit" in out and "queued" in out
    code, _, err = _run("jobs", "list", "--state", "done")
    assert code == 2 and "state 'done' is not a job state" in err
    code, out, _ = _run("jobs", "show", "1")
    assert code == 0 and out.startswith("job 1: queued  model credit")
    assert "log tail:" in out and "queued by cli (cli:" in out
    code, out, _ = _run("jobs", "cancel", "1")
    assert (code, out.strip()) == (0, "job 1 cancelled")
    code, _, err = _run("jobs", "cancel", "1")
    assert code == 2 and "job 1 has ended (cancelled)" in err
    code, _, err = _run("jobs", "show", "99")
    assert code == 2 and err.startswith("error: no job 99")


def test_worker_once_exit_codes(trained: TrainedModels) -> None:
    seed_registry(os.environ["DRIFTWARDEN_DATABASE_URL"], trained, serving=1)
    code, out, _ = _run("worker", "--once")
    assert (code, out.strip()) == (0, "no job waiting")
    assert _run("jobs", "submit", "--model", "credit", "--mode", "local")[0] == 0
    code, out, _ = _run("worker", "--once", "--poll", "0.1")  # no labelled predictions: the job fails
    assert (code, out.strip()) == (1, "job 1 ended: failed")
    code, out, _ = _run("jobs", "show", "1")
    assert "error: model credit has 0 labelled predictions in the window" in out
    code, out, _ = _run("jobs", "list", "--state", "failed", "--json")
    assert [d["id"] for d in json.loads(out)] == [1]

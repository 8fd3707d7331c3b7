"""The scheduler: in the serving process (started by the lifespan), and as ``driftwarden monitor``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from core.config import get_settings
from core.database import open_database
from monitors.config import config_path
from monitors.service import list_runs
from registry.schema import ModelSchema
from service.cli import app
from tests.monitors.logdata import log_columns, plain, register_profile
from tests.support import Server, TrainedModels, auth, seed_registry, serve_settings
from training.cluster.datagen import TARGET, generate


def test_scheduler_runs_in_the_server_process(
    trained: TrainedModels,
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'sched.db'}"
    seed_registry(url, trained, serving=1)
    settings = serve_settings(url, tmp_path / "spool", monitor_interval_s=0.3, monitor_min_rows=20)
    cols = generate(200, seed=31)
    rows = [{k: plain(v[i]) for k, v in cols.items() if k != TARGET} for i in range(200)]
    with Server(settings) as srv, srv.client() as c:
        assert c.post("/v1/models/credit:predict", json={"instances": rows}).status_code == 200
        deadline = time.monotonic() + 30
        runs: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not runs:
            runs = c.get("/v1/models/credit/drift/history").json()["runs"]
            time.sleep(0.2)
        assert runs, "the in-process scheduler stored no run within 30 s"
        assert runs[0]["rows"] == 200 and runs[0]["model_version"] == 1
        latest = c.get("/v1/models/credit/drift")
        assert latest.status_code == 200 and latest.json()["window"]["rows"] == 200


def test_scheduler_is_off_when_disabled(
    trained: TrainedModels,
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'off.db'}"
    seed_registry(url, trained, serving=1)
    settings = serve_settings(
        url, tmp_path / "spool", monitor_enabled=False, monitor_interval_s=0.2, monitor_min_rows=1
    )
    cols = generate(50, seed=32)
    rows = [{k: plain(v[i]) for k, v in cols.items() if k != TARGET} for i in range(50)]
    with Server(settings) as srv:
        assert httpx.post(f"{srv.url}/v1/models/credit:predict", json={"instances": rows}).status_code == 200
        time.sleep(1.0)  # five intervals
        assert httpx.get(f"{srv.url}/v1/models/credit/drift/history", headers=auth()).json()["runs"] == []


def test_monitor_command_once(
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    profile_dict: dict[str, Any],
    schema: ModelSchema,
) -> None:
    """``driftwarden monitor --once`` evaluates every serving model with its own window config."""
    monkeypatch.setenv("DRIFTWARDEN_DATABASE_URL", database_url)
    monkeypatch.setenv("DRIFTWARDEN_MONITOR_MIN_ROWS", "10")
    get_settings.cache_clear()
    registry = get_settings().registry_path
    db = open_database(database_url)
    register_profile(db, registry, profile_dict, model="credit")
    register_profile(db, registry, profile_dict, model="quiet")  # serving, but no traffic yet
    config_path(registry=registry, model_name="credit").write_text(json.dumps({"window_rows": 300}))
    features = list(schema.feature_names)
    log_columns(db.engine, generate(500, seed=33), features=features)
    log_columns(db.engine, generate(400, scenario="covariate_shift", seed=34), features=features)
    result = CliRunner().invoke(app, ["monitor", "--once"])
    # "quiet" has too few predictions: reported as skipped, credit's drift decides (1)
    assert result.exit_code == 1, result.output
    assert "1 model(s) skipped for too few predictions: quiet" in result.stderr
    assert "credit:1 run" in result.output and "300 rows" in result.output and "DRIFTED" in result.output
    assert "quiet: skipped" in result.output and "fewer than the minimum of 10" in result.output
    with db.session() as s:
        runs = list_runs(session=s, model_name="credit")
        assert len(runs) == 1 and runs[0].rows == 300 and runs[0].dataset_drifted
        assert runs[0].report["window"]["spec"]["rows"] == 300
        assert list_runs(session=s, model_name="quiet") == []
    db.dispose()


def test_monitor_help_does_not_import_tensorflow() -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from service.cli import app\n"
        "r = CliRunner().invoke(app, ['monitor', '--help'])\n"
        "assert r.exit_code == 0 and '--once' in r.output, r.output\n"
        "print('tensorflow' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "False", out.stdout + out.stderr


def test_broken_config_or_profile_is_a_409_naming_the_file(
    database_url: str, tmp_path: Path, profile_dict: dict[str, Any], schema: ModelSchema
) -> None:
    from monitors.flows import InvalidConfig, NoProfile, run_monitor

    settings = get_settings().model_copy(update={"monitor_min_rows": 10})
    db = open_database(database_url)
    path = register_profile(db, settings.registry_path, profile_dict, model="credit")
    log_columns(db.engine, generate(100, seed=35), features=list(schema.feature_names))
    cfg = config_path(registry=settings.registry_path, model_name="credit")
    cfg.write_text("{not json")
    with pytest.raises(InvalidConfig, match="monitor.json is invalid") as bad_json:
        run_monitor(db=db, settings=settings, model_name="credit")
    assert bad_json.value.status_code == 409
    cfg.write_text(json.dumps({"numeric_test": "t_test"}))
    with pytest.raises(InvalidConfig, match="unknown numeric test 't_test'"):
        run_monitor(db=db, settings=settings, model_name="credit")
    cfg.unlink()
    assert run_monitor(db=db, settings=settings, model_name="credit").window.rows == 100
    (path / "driftwarden" / "profile.json").write_text('{"format": "something else"}')
    from monitors import flows

    flows._profiles.clear()
    with pytest.raises(NoProfile, match="unreadable"):
        run_monitor(db=db, settings=settings, model_name="credit")
    db.dispose()


def test_two_schedulers_at_the_same_moment_evaluate_a_model_once(
    database_url: str, tmp_path: Path, profile_dict: dict[str, Any], schema: ModelSchema
) -> None:
    """Passes of two schedulers that start together (replicas on one database): one evaluates, the other
    skips the model (the lock across processes, then the due check under it)."""
    import threading

    from monitors.scheduled import run_pass

    settings = get_settings().model_copy(
        update={"database_url": database_url, "monitor_min_rows": 10, "monitor_interval_s": 3600.0}
    )
    db = open_database(database_url)
    register_profile(db, settings.registry_path, profile_dict, model="credit")
    log_columns(db.engine, generate(3000, seed=35), features=list(schema.feature_names))
    start = threading.Barrier(4)
    passes: list[list[Any]] = []

    def scheduler() -> None:
        start.wait()
        passes.append(run_pass(db=db, settings=settings))

    threads = [threading.Thread(target=scheduler) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    evaluated = [r for results in passes for r in results if r.outcome is not None]
    skipped = [r.skipped for results in passes for r in results if r.outcome is None]
    assert len(passes) == 4 and len(evaluated) == 1, (evaluated, skipped)
    assert len(skipped) == 3 and all(
        s and ("another scheduler" in s or "less than an interval" in s) for s in skipped
    )
    with db.session() as s:
        assert len(list_runs(session=s, model_name="credit")) == 1
    db.dispose()


def test_the_monitor_command_raises_alerts_and_other_commands_do_not_load_them(
    tmp_path: Path, profile_dict: dict[str, Any], schema: ModelSchema
) -> None:
    """`driftwarden monitor` installs the alert rules' subscriptions (its drifted run fires the default
    dataset-drift rule); a command that publishes nothing (e.g. `config`) never imports the alerts."""
    import os

    from alerts.service import list_alerts

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    env = {
        **os.environ,
        "DRIFTWARDEN_DATABASE_URL": url,
        "DRIFTWARDEN_REGISTRY_PATH": str(tmp_path / "models"),
        "DRIFTWARDEN_MONITOR_MIN_ROWS": "10",
    }
    db = open_database(url)
    register_profile(db, tmp_path / "models", profile_dict, model="credit")
    log_columns(
        db.engine, generate(400, scenario="covariate_shift", seed=36), features=list(schema.feature_names)
    )
    run = subprocess.run(
        [sys.executable, "-m", "service.cli", "monitor", "--once"], env=env, capture_output=True, text=True
    )
    assert run.returncode == 1 and "DRIFTED" in run.stdout, run.stdout + run.stderr  # 1: drifted
    with db.session() as s:
        fired = {a.rule_name for a in list_alerts(session=s, model_name="credit", state="firing")}
    assert "dataset_drift" in fired, fired
    db.dispose()
    probe = "import sys, service.cli; print('alerts.flows' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert loaded.stdout.strip() == "False", loaded.stdout + loaded.stderr

"""A model's monitor settings by route (GET / PUT /v1/models/{name}/monitor) and by command (`driftwarden
monitor config`), stored as its monitor.json; a window in minutes bounds the window read by time; the drift
history a page at a time (since, until, cursor). Real uvicorn on SQLite and PostgreSQL, no TensorFlow."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from access.service import create_token
from core.config import get_settings
from core.database import Database, open_database
from monitors.config import config_path
from monitors.engine import evaluate
from monitors.flows import run_monitor
from monitors.profile import profile_from_dict
from monitors.service import record_run
from monitors.sketch import WindowSketch
from registry.schema import ModelSchema
from service.cli import app
from tests.monitors.logdata import log_columns, register_profile
from tests.support import ADMIN_TOKEN, Server, serve_settings
from training.cluster.datagen import generate

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
runner = CliRunner()


def _register(db: Database, registry: Path, profile: dict[str, Any], schema: ModelSchema, model: str) -> Path:
    """A serving version with its profile and its contract (schema.json)."""
    path = register_profile(db, registry, profile, model=model)
    (path / "driftwarden" / "schema.json").write_text(json.dumps(schema.to_dict()))
    return path


@pytest.fixture
def served(
    database_url: str, tmp_path: Path, profile_dict: dict[str, Any], schema: ModelSchema
) -> Iterator[tuple[Server, Database]]:
    settings = serve_settings(
        database_url, tmp_path / "spool", registry_path=tmp_path / "models", monitor_enabled=False
    )
    db = open_database(database_url, upgrade=True)
    _register(db, settings.registry_path, profile_dict, schema, "credit")
    with Server(settings) as server:
        yield server, db
    db.dispose()


def test_settings_route_reads_validates_and_stores_monitor_json(served: tuple[Server, Database]) -> None:
    server, _ = served
    url = f"{server.url}/v1/models/credit/monitor"
    stored = config_path(registry=server.settings.registry_path, model_name="credit")
    first = httpx.get(url, headers=AUTH)
    assert first.status_code == 200, first.text
    assert first.json()["stored"] == {} and first.json()["window"]["source"] == "server default"
    assert first.json()["window"]["rows"] == server.settings.monitor_window_rows
    body = {"window_minutes": 60, "false_alarms_per_30d": 2, "features": {"age": {"enabled": False}}}
    put = httpx.put(url, json=body, headers=AUTH)
    assert put.status_code == 200, put.text
    assert json.loads(stored.read_text()) == body  # monitor.json stays the stored form
    doc = httpx.get(url, headers=AUTH).json()
    assert doc["window"] == {
        "rows": None,
        "minutes": 60,
        "source": "model",
        "describe": "last 60 minutes",
    }
    assert (
        doc["settings"]["false_alarms_per_30d"] == 2
        and doc["settings"]["features"]["age"]["enabled"] is False
    )
    refused = {
        "window_minutes": ({"window_minutes": 0}, "window_minutes: Input should be greater than 0"),
        "window_rows": ({"window_rows": 1.5}, "window_rows: "),
        "false_alarms_per_30d": (
            {"false_alarms_per_30d": -1},
            "false_alarms_per_30d: Input should be greater",
        ),
        "interval_s": ({"interval_s": "often"}, "interval_s: "),
        "unknown": ({"window_row": 10}, "unknown monitor setting(s) window_row"),
        "feature": ({"features": {"nope": {"enabled": False}}}, "features.nope: 'nope' is not a feature"),
        "feature field": ({"features": {"age": {"enabeld": False}}}, "features.age.enabeld"),
        "test": ({"numeric_test": "magic"}, "numeric_test"),
        "a bool for a number": ({"quality_min_increase": False}, "quality_min_increase: "),
        "text for a count": ({"window_rows": "100"}, "window_rows: "),
    }
    for why, (bad, words) in refused.items():
        r = httpx.put(url, json=bad, headers=AUTH)
        assert r.status_code == 400, (why, r.text)
        assert words in r.json()["error"], (why, r.json())
    not_object = httpx.put(url, json=[1], headers=AUTH)
    assert not_object.status_code == 400 and "JSON object" in not_object.json()["error"]
    assert json.loads(stored.read_text()) == body  # nothing written on a refusal
    assert httpx.put(url, json=body).status_code == 401
    with served[1].session() as s:
        secret = create_token(session=s, name="r", scopes=["read"], expires_in=None).secret
    reader = {"Authorization": f"Bearer {secret}"}
    for denied in (httpx.get(url, headers=reader), httpx.put(url, json={}, headers=reader)):
        assert denied.status_code == 403 and "admin" in denied.json()["error"]  # both: scope admin
    unknown = httpx.put(f"{server.url}/v1/models/nobody/monitor", json={}, headers=AUTH)
    assert unknown.status_code == 404, unknown.text
    assert httpx.get(f"{server.url}/v1/models/nobody/monitor", headers=AUTH).status_code == 404
    back = httpx.put(url, json={}, headers=AUTH)
    assert back.status_code == 200 and json.loads(stored.read_text()) == {}
    assert back.json()["window"]["source"] == "server default"


def test_segment_settings_are_checked_against_the_contract(served: tuple[Server, Database]) -> None:
    server, _ = served
    url = f"{server.url}/v1/models/credit/monitor"
    stored = config_path(registry=server.settings.registry_path, model_name="credit")
    body = {
        "segments": [{"feature": "region"}, {"feature": "age", "bins": [30, 50]}],
        "segment_max_levels": 5,
    }
    put = httpx.put(url, json=body, headers=AUTH)
    assert put.status_code == 200, put.text
    assert json.loads(stored.read_text()) == body
    assert put.json()["settings"]["segments"][1] == {"feature": "age", "bins": [30.0, 50.0]}
    refused = {
        "unknown feature": (
            {"segments": [{"feature": "nope"}]},
            "segments[0].feature: 'nope' is not a feature",
        ),
        "bins of a category": (
            {"segments": [{"feature": "age"}, {"feature": "region", "bins": [1]}]},
            "segments[1].bins: 'region' is categorical",
        ),
        "edges not increasing": ({"segments": [{"feature": "age", "bins": [50, 30]}]}, "segments.0.bins: "),
        "an unknown key": ({"segments": [{"feature": "age", "edges": [1]}]}, "segments.0.edges: "),
        "twice": ({"segments": [{"feature": "age"}, {"feature": "age"}]}, "age named more than once"),
        "too many levels": ({"segment_max_levels": 1000}, "segment_max_levels: "),
        "too few rows": ({"segment_min_rows": 1}, "segment_min_rows: "),
    }
    for why, (bad, words) in refused.items():
        r = httpx.put(url, json=bad, headers=AUTH)
        assert r.status_code == 400, (why, r.text)
        assert words in r.json()["error"], (why, r.json())
    assert json.loads(stored.read_text()) == body  # nothing written on a refusal


def test_monitor_config_segment_options(
    tmp_path: Path, profile_dict: dict[str, Any], schema: ModelSchema
) -> None:
    settings = get_settings()
    db = open_database(settings.database_url.get_secret_value(), upgrade=True)
    _register(db, settings.registry_path, profile_dict, schema, "credit")
    db.dispose()
    stored = config_path(registry=settings.registry_path, model_name="credit")
    done = runner.invoke(
        app, ["monitor", "config", "credit", "--segment", "region", "--segment", "age:30,50"]
    )
    assert done.exit_code == 0, done.output
    want = {"segments": [{"feature": "region"}, {"feature": "age", "bins": [30.0, 50.0]}]}
    assert json.loads(stored.read_text()) == want
    for args, words in (
        (["--segment", "nope"], "segments[0].feature: 'nope' is not a feature of model 'credit'"),
        (["--segment", "age:30,x"], "--segment 'age:30,x': the bin edges must be numbers"),
        (["--segment", "region:1,2"], "segments[0].bins: 'region' is categorical"),
        (["--segment", "age:50,30"], "bin edges must increase strictly"),
        (["--segment", "age", "--no-segments"], "--segment and --no-segments"),
    ):
        bad = runner.invoke(app, ["monitor", "config", "credit", *args])
        assert bad.exit_code == 2, (args, bad.output)
        lines = bad.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], (args, lines)
        assert json.loads(stored.read_text()) == want  # nothing written
    assert runner.invoke(app, ["monitor", "config", "credit", "--no-segments"]).exit_code == 0
    assert json.loads(stored.read_text()) == {}


def test_a_window_in_minutes_bounds_the_window_by_time(
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    profile_dict: dict[str, Any],
    schema: ModelSchema,
) -> None:
    """60 minutes: only the last hour's predictions, however many (the server's row default does not cap
    a model's own time window); the run's window says so."""
    monkeypatch.setenv("DRIFTWARDEN_DATABASE_URL", database_url)  # the command's database too
    get_settings.cache_clear()
    settings = get_settings().model_copy(
        update={"database_url": database_url, "monitor_min_rows": 10, "monitor_window_rows": 100}
    )
    db = open_database(database_url, upgrade=True)
    _register(db, settings.registry_path, profile_dict, schema, "credit")
    now = datetime.now(UTC)
    features = list(schema.feature_names)
    log_columns(db.engine, generate(300, seed=41), features=features, when=now - timedelta(hours=5))
    log_columns(db.engine, generate(250, seed=42), features=features, when=now, spacing=timedelta(seconds=1))
    result = runner.invoke(app, ["monitor", "config", "credit", "--window-minutes", "60"])
    assert result.exit_code == 0, result.output
    assert json.loads(config_path(registry=settings.registry_path, model_name="credit").read_text()) == {
        "window_minutes": 60.0
    }
    outcome = run_monitor(db=db, settings=settings, model_name="credit", now=now)
    assert outcome.window.rows == 250  # not the server's 100 rows, not the 5-hour-old 300
    assert outcome.window.start is not None and outcome.window.start >= now - timedelta(minutes=60)
    result = runner.invoke(app, ["monitor", "config", "credit", "--server-window"])
    assert result.exit_code == 0, result.output
    assert run_monitor(db=db, settings=settings, model_name="credit", now=now).window.rows == 100
    db.dispose()


def test_monitor_config_command(tmp_path: Path, profile_dict: dict[str, Any], schema: ModelSchema) -> None:
    settings = get_settings()
    db = open_database(settings.database_url.get_secret_value(), upgrade=True)
    _register(db, settings.registry_path, profile_dict, schema, "credit")
    db.dispose()
    stored = config_path(registry=settings.registry_path, model_name="credit")
    shown = runner.invoke(app, ["monitor", "config", "credit"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["window"]["source"] == "server default" and not stored.exists()
    changed = runner.invoke(
        app,
        ["monitor", "config", "credit", "--window", "5000", "--ignore", "age", "--false-alarms-per-30d", "1"],
    )
    assert changed.exit_code == 0, changed.output
    want = {"window_rows": 5000, "false_alarms_per_30d": 1.0, "features": {"age": {"enabled": False}}}
    assert json.loads(stored.read_text()) == want
    assert json.loads(changed.stdout)["window"]["describe"] == "last 5000 predictions"
    for args, words in (
        (["--window", "0"], "--window: Input should be greater than 0"),
        (["--window-minutes", "-5"], "--window-minutes: Input should be greater than 0"),
        (["--false-alarms-per-30d", "0"], "--false-alarms-per-30d: Input should be greater than 0"),
        (["--ignore", "nope"], "features.nope: 'nope' is not a feature of model 'credit'"),
        (["--window", "10", "--server-window"], "--window and --server-window"),
    ):
        bad = runner.invoke(app, ["monitor", "config", "credit", *args])
        assert bad.exit_code == 2, (args, bad.output)
        lines = bad.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], (args, lines)
        assert json.loads(stored.read_text()) == want  # nothing written
    unknown = runner.invoke(app, ["monitor", "config", "nobody"])
    assert unknown.exit_code == 2 and "no model 'nobody'" in unknown.stderr
    again = runner.invoke(app, ["monitor", "config", "credit", "--include", "age", "--window-minutes", "30"])
    assert again.exit_code == 0, again.output
    assert json.loads(stored.read_text()) == {
        "window_minutes": 30.0,
        "false_alarms_per_30d": 1.0,
        "features": {},
    }
    assert runner.invoke(app, ["monitor", "config", "credit", "--reset"]).exit_code == 0
    assert json.loads(stored.read_text()) == {}
    stored.write_text('{"window_rows": -1}')  # edited by hand, broken
    broken = runner.invoke(app, ["monitor", "config", "credit"])
    assert (
        broken.exit_code == 2
        and "monitor config of 'credit'" in broken.stderr
        and "is invalid" in broken.stderr
    )
    assert runner.invoke(app, ["monitor", "config", "credit", "--reset"]).exit_code == 0  # mends it
    assert json.loads(stored.read_text()) == {}


def test_drift_history_pages_by_cursor_within_since_and_until(
    served: tuple[Server, Database], profile_dict: dict[str, Any]
) -> None:
    server, db = served
    profile = profile_from_dict(profile_dict)
    report = evaluate(profile=profile, sketch=_sketch(profile), config=None)
    base = datetime(2026, 11, 1, tzinfo=UTC)
    with db.session() as s:
        for hour in range(7):  # two runs stored at the same time too: the cursor keeps them apart
            for _ in range(2 if hour == 3 else 1):
                record_run(
                    session=s,
                    model_name="credit",
                    model_version=1,
                    report=report,
                    created_at=base + timedelta(hours=hour),
                )
    url = f"{server.url}/v1/models/credit/drift/history"
    params: dict[str, str | int] = {
        "since": "2026-11-01T01:00:00Z",
        "until": "2026-11-01T06:00:00+00:00",
        "limit": 2,
    }
    seen: list[str] = []
    ids: list[int] = []
    cursor = None
    for _ in range(10):
        r = httpx.get(url, params={**params, **({"cursor": cursor} if cursor else {})}, headers=AUTH)
        assert r.status_code == 200, r.text
        page = r.json()
        assert len(page["runs"]) <= 2
        seen += [run["created_at"] for run in page["runs"]]
        ids += [run["run_id"] for run in page["runs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    hours = [datetime.fromisoformat(t).hour for t in seen]
    assert hours == [5, 4, 3, 3, 2, 1], seen  # newest first, [since, until), each run once
    assert len(set(ids)) == 6
    everything = httpx.get(url, headers=AUTH).json()
    assert len(everything["runs"]) == 8 and everything["next_cursor"] is None
    for query, field in (
        ({"since": "yesterday"}, "since"),
        ({"until": "2026-11-01T06:00:00"}, "until"),  # no zone
        ({"cursor": "bm90LWEtY3Vyc29y"}, "cursor"),
        ({"cursor": "%%%"}, "cursor"),
        ({"since": "2026-11-02T00:00:00Z", "until": "2026-11-01T00:00:00Z"}, "since"),
        ({"limit": 0}, "limit"),
    ):
        bad = httpx.get(url, params=query, headers=AUTH)
        assert bad.status_code == 400, (query, bad.text)
        assert field in bad.json()["error"], (query, bad.json())


def _sketch(profile: Any) -> WindowSketch:
    cols = generate(200, seed=43)
    sketch = WindowSketch(threshold=0.5)
    sketch.update(profile, {name: cols[name] for name in profile.features})
    sketch.rows = 200
    return sketch


def test_a_models_own_interval_spaces_its_scheduled_runs(
    tmp_path: Path, profile_dict: dict[str, Any], schema: ModelSchema
) -> None:
    """interval_s of monitor.json: a pass skips the model until its own interval has passed (the server's
    interval is a millisecond here, so without it every pass evaluates it again)."""
    from monitors.scheduled import run_pass

    settings = get_settings().model_copy(update={"monitor_min_rows": 10, "monitor_interval_s": 0.001})
    db = open_database(settings.database_url.get_secret_value(), upgrade=True)
    _register(db, settings.registry_path, profile_dict, schema, "credit")
    log_columns(db.engine, generate(200, seed=44), features=list(schema.feature_names))
    first, again = run_pass(db=db, settings=settings), run_pass(db=db, settings=settings)
    assert first[0].outcome is not None and again[0].outcome is not None  # the server's interval: due
    result = runner.invoke(app, ["monitor", "config", "credit", "--interval", "3600"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["interval_s"] == 3600
    skipped = run_pass(db=db, settings=settings)
    assert skipped[0].outcome is None and "less than an interval ago" in str(skipped[0].skipped)
    db.dispose()


def test_monitor_config_sets_what_harmful_drift_judges(
    tmp_path: Path, profile_dict: dict[str, Any], schema: ModelSchema
) -> None:
    settings = get_settings()
    db = open_database(settings.database_url.get_secret_value(), upgrade=True)
    _register(db, settings.registry_path, profile_dict, schema, "credit")
    db.dispose()
    stored = config_path(registry=settings.registry_path, model_name="credit")
    changed = runner.invoke(
        app, ["monitor", "config", "credit", "--harm-metric", "accuracy", "--harm-tolerance", "0.03"]
    )
    assert changed.exit_code == 0, changed.output
    assert json.loads(stored.read_text()) == {"harm_metric": "accuracy", "harm_tolerance": 0.03}
    shown = json.loads(changed.stdout)["settings"]
    assert (shown["harm_metric"], shown["harm_tolerance"], shown["harm_min_labels"]) == (
        "accuracy",
        0.03,
        500,
    )
    for args, words in (
        (["--harm-metric", "auc"], "--harm-metric: Input should be 'roc_auc', 'accuracy'"),
        (["--harm-tolerance", "2"], "--harm-tolerance: Input should be less than or equal to 1"),
        (["--harm-tolerance", "-0.1"], "--harm-tolerance: Input should be greater than or equal to 0"),
    ):
        bad = runner.invoke(app, ["monitor", "config", "credit", *args])
        assert bad.exit_code == 2, (args, bad.output)
        lines = bad.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], (args, lines)
    assert json.loads(stored.read_text()) == {"harm_metric": "accuracy", "harm_tolerance": 0.03}

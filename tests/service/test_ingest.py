"""``POST /v1/models/{name}/predictions``: another stack's predictions in the same log, on both backends.

Three models registered from a reference alone (served elsewhere), one per task, behind a real server: the
records are logged with their times, flags and labels (source ``ingest``), a retried id is stored once, a
body that does not validate stores nothing (each bad field named), the ``ingest`` scope writes predictions
and nothing else, and the monitor runs on the ingested window as on served predictions.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from access.service import create_token
from core.database import aware, open_database
from core.tabular import write_table
from registry.schema import Task
from registry.service import promote
from service import file_import
from service.serving.records import keyed_ids
from tests import own_models
from tests.support import NO_AUTH, Server, count_rows, query_rows, run_cli, serve_settings, server_env
from training.imports import ImportSpec, import_reference

MODELS = {
    "ing_bin": "binary",
    "ing_cls": "multiclass",
    "ing_reg": "regression",
    "ing_hist": "binary",
    "ing_file": "binary",
    "ing_mix": "binary",
    "ing_text": "binary",
}
TARGETS = {"binary": "y_bin", "multiclass": "y_cls", "regression": "y_reg"}
T0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)


def _answers(task: str, data: dict[str, np.ndarray]) -> Any:
    """What the team's own model answered on ``data``: a probability, a class-probability list or a value."""
    score = data["a"] + 0.5 * data["b"] + 0.4 * (data["color"] == "red")
    if task == "binary":
        return 1.0 / (1.0 + np.exp(-(2.0 * score - 0.4)))
    if task == "multiclass":  # classes in sorted order: high, low, mid
        logits = np.stack([score, -score, np.zeros_like(score)], axis=1)
        probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        return [json.dumps(row) for row in probs.tolist()]
    return 2.0 * data["a"] - data["b"] + 0.5 * data["c"]


@pytest.fixture(scope="module")
def ingest_server(module_db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("ingest")
    data = own_models.reference(1_500, seed=0)
    registry = root / "registry"
    db = open_database(module_db_url, upgrade=True)
    try:
        for name, task in MODELS.items():
            answers = _answers(task, data)
            table = {**data, "answer": np.asarray(answers, dtype=object if task == "multiclass" else float)}
            write_table(table, root / f"{name}.csv")
            spec = ImportSpec(
                model_name=name,
                path=None,
                reference=root / f"{name}.csv",
                target=TARGETS[task],
                task=Task.parse(task),
                features=("a", "b", "c", "color"),
                prediction_column="answer",
            )
            import_reference(spec=spec, db=db, registry=registry)
            with db.session() as s:
                promote(session=s, model_name=name, version=1)
    finally:
        db.dispose()
    settings = serve_settings(module_db_url, root / "spool", registry_path=registry, log_durability="durable")
    with Server(settings) as srv:
        yield srv


def _records(
    name: str, n: int, *, seed: int, shift: float = 0.0, ids: str | None = None, start: datetime = T0
) -> list[dict]:
    task = MODELS[name]
    data = own_models.reference(n, seed=seed, shift=shift)
    answers = _answers(task, data)
    out = []
    for i in range(n):
        record: dict[str, Any] = {
            "inputs": {
                "a": float(data["a"][i]),
                "b": float(data["b"][i]),
                "c": int(data["c"][i]),
                "color": str(data["color"][i]),
            },
            "prediction": json.loads(answers[i]) if task == "multiclass" else float(answers[i]),
            "time": (start + timedelta(minutes=i)).isoformat().replace("+00:00", "Z"),
        }
        if ids is not None:
            record["id"] = f"{ids}-{i}"
        out.append(record)
    return out


def _query(srv: Server, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
    """The rows of ``sql`` on the server's database."""
    return query_rows(srv.settings.database_url.get_secret_value(), sql, params)


def _count(srv: Server, name: str) -> int:
    return count_rows(srv.settings.database_url.get_secret_value(), "model_name = :m", {"m": name})


def test_records_are_logged_with_their_times_flags_and_labels(ingest_server: Server) -> None:
    srv = ingest_server
    records = _records("ing_bin", 5, seed=1, ids="order")
    records[0]["inputs"]["a"] = 1e6  # beyond the allowed range: flagged, still logged
    records[1]["inputs"]["extra"] = "x"  # a key outside the contract: flagged
    records[2]["inputs"]["color"] = 7  # a number where the contract has a category: flagged
    records[3]["label"] = 1
    records[4]["label"] = 0
    with srv.client() as c:
        r = c.post("/v1/models/ing_bin/predictions", json={"records": records})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["stored"] == 5 and body["duplicate_ids"] == [] and body["labels_stored"] == 2
    assert body["flagged"] == 3
    # each record has its own time, so each is a run of its own, its id derived from its key alone
    assert body["prediction_ids"] == [keyed_ids("ing_bin", [f"order-{i}"])[0] for i in range(5)]
    rows = _query(
        srv,
        "select source, protocol, status, logged_at, flags, size from prediction_batches "
        "where model_name = 'ing_bin' order by logged_at",
    )
    ((labels,),) = _query(srv, "select count(*) from prediction_feedback where model_name = 'ing_bin'")
    assert [(r.source, r.protocol, r.status, r.size) for r in rows] == [("ingest", "ingest", "ok", 1)] * 5
    got = [aware(r.logged_at) for r in rows]
    assert got == [T0 + timedelta(minutes=i) for i in range(5)]
    flags = [json.loads(r.flags) if isinstance(r.flags, str) else r.flags for r in rows]
    assert flags[0] == [["a:allowed_range"]] and flags[1] == [["extra:unknown_feature"]]
    assert flags[2] == [["color:type"]] and flags[3] is None and flags[4] is None
    assert labels == 2


def test_a_retried_batch_of_one_time_is_one_log_row_stored_once(ingest_server: Server) -> None:
    srv = ingest_server
    records = _records("ing_bin", 300, seed=6, ids="same-time")
    for r in records:
        r["time"] = "2026-11-21T08:00:00Z"
    with srv.client() as c:
        first = c.post(
            "/v1/models/ing_bin/predictions", json={"records": records}, headers={"X-Request-Id": "same-time"}
        )
        again = c.post("/v1/models/ing_bin/predictions", json={"records": records})
    assert first.status_code == 200 and first.json()["stored"] == 300, first.text
    assert again.status_code == 200 and again.json()["stored"] == 0, again.text
    assert again.json()["duplicate_ids"] == [f"same-time-{i}" for i in range(300)]
    assert again.json()["prediction_ids"] == first.json()["prediction_ids"]
    assert first.json()["prediction_ids"] == keyed_ids("ing_bin", [f"same-time-{i}" for i in range(300)])
    sizes = [
        size
        for (size,) in _query(
            srv,
            "select size from prediction_batches where model_name = 'ing_bin' and request_id = :r",
            {"r": first.headers["x-request-id"]},
        )
    ]
    assert sizes == [300]  # one log row for the run


def test_a_retried_record_is_stored_once(ingest_server: Server) -> None:
    srv = ingest_server
    records = _records("ing_bin", 4, seed=2, ids="retry")
    with srv.client() as c:
        first = c.post("/v1/models/ing_bin/predictions", json={"records": records[:3]})
        before = _count(srv, "ing_bin")
        again = c.post("/v1/models/ing_bin/predictions", json={"records": records})
        no_id = [{k: v for k, v in r.items() if k != "id"} for r in records[:2]]
        twice = [c.post("/v1/models/ing_bin/predictions", json={"records": no_id}) for _ in range(2)]
    assert first.status_code == 200 and first.json()["stored"] == 3, first.text
    assert again.status_code == 200, again.text
    assert again.json()["stored"] == 1 and again.json()["duplicate_ids"] == ["retry-0", "retry-1", "retry-2"]
    assert again.json()["prediction_ids"][:3] == first.json()["prediction_ids"]
    assert _count(srv, "ing_bin") == before + 1 + 4  # records without an id are new every time
    assert all(t.status_code == 200 and t.json()["stored"] == 2 for t in twice)
    assert twice[0].json()["prediction_ids"] != twice[1].json()["prediction_ids"]


@pytest.mark.parametrize("name", ["ing_cls", "ing_reg"])
def test_each_tasks_prediction_is_logged(ingest_server: Server, name: str) -> None:
    srv = ingest_server
    records = _records(name, 3, seed=3)
    if name == "ing_reg":
        records[0]["prediction"] = 1e6  # outside the expected range: flagged
    with srv.client() as c:
        r = c.post(f"/v1/models/{name}/predictions", json={"records": records})
        assert r.status_code == 200 and r.json()["stored"] == 3, r.text
        ids = r.json()["prediction_ids"]
        label = "high" if name == "ing_cls" else 2.5
        fb = c.post(
            f"/v1/models/{name}/feedback", json={"labels": [{"prediction_id": ids[1], "label": label}]}
        )
    assert fb.status_code == 200 and fb.json()["stored"] == 1, fb.text
    if name == "ing_reg":
        assert r.json()["flagged"] == 1


BAD = [
    ("not json", b"{nope", "JSON"),
    ("no records", {"rows": []}, '"records"'),
    ("empty", {"records": []}, '"records" is empty'),
    ("no inputs", {"records": [{"prediction": 0.2}]}, "records[0].inputs is required"),
    ("nested value", {"records": [{"inputs": {"a": [1]}, "prediction": 0.2}]}, "records[0].inputs.a must be"),
    ("no prediction", {"records": [{"inputs": {"a": 1.0}}]}, "records[0].prediction is required"),
    ("probability > 1", {"records": [{"inputs": {"a": 1.0}, "prediction": 1.5}]}, "records[0].prediction"),
    ("bad time", {"records": [{"inputs": {}, "prediction": 0.2, "time": "yesterday"}]}, "records[0].time"),
    (
        "naive time",
        {"records": [{"inputs": {}, "prediction": 0.2, "time": "2026-12-01T10:00:00"}]},
        "UTC offset",
    ),
    ("bad version", {"records": [{"inputs": {}, "prediction": 0.2, "version": "1"}]}, "records[0].version"),
    (
        "bad label",
        {"records": [{"inputs": {}, "prediction": 0.2, "label": 3}]},
        "records[0].label must be 0 or 1",
    ),
    (
        "boolean label",
        {"records": [{"inputs": {}, "prediction": 0.2, "label": True}]},
        "records[0].label must be 0 or 1 (binary classification; a number, not true or false), got True",
    ),
    ("bad id", {"records": [{"inputs": {}, "prediction": 0.2, "id": ""}]}, "records[0].id must be"),
    (
        "long id",
        {"records": [{"inputs": {}, "prediction": 0.2, "id": "x" * 129}]},
        "records[0].id must be a string of 1 to 128 printable characters",
    ),
    (
        "repeated id",
        {
            "records": [
                {"inputs": {}, "prediction": 0.2, "id": "x"},
                {"inputs": {}, "prediction": 0.1, "id": "x"},
            ]
        },
        "records[1].id repeats records[0].id",
    ),
    (
        "unknown field",
        {"records": [{"inputs": {}, "prediction": 0.2, "score": 1}]},
        "unknown field(s) 'score'",
    ),
    (  # PostgreSQL cannot store it: never "stored" then refused by the writer (issue 41, item 3)
        "nul in a value",
        {"records": [{"inputs": {"zzz": "a\u0000b"}, "prediction": 0.2}]},
        "records[0].inputs['zzz']: feature names and text values may not contain U+0000",
    ),
    (
        "nul in a name",
        {"records": [{"inputs": {"x\u0000y": 1}, "prediction": 0.2}]},
        "records[0].inputs['x\\x00y']: feature names and text values may not contain U+0000",
    ),
]


@pytest.mark.parametrize(("case", "body", "named"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_a_400_naming_the_field_and_stores_nothing(
    ingest_server: Server, case: str, body: Any, named: str
) -> None:
    srv = ingest_server
    good = _records("ing_bin", 2, seed=4)
    before = _count(srv, "ing_bin")
    expected = named
    with srv.client() as c:
        if isinstance(body, bytes):
            r = c.post(
                "/v1/models/ing_bin/predictions", content=body, headers={"Content-Type": "application/json"}
            )
        else:
            if body.get("records"):  # the bad records follow good ones: none of them may be stored
                body = {"records": [*good, *body["records"]]}
                expected = named.replace("records[1]", "records[3]").replace("records[0]", "records[2]")
            r = c.post("/v1/models/ing_bin/predictions", json=body)
    assert r.status_code == 400, (case, r.status_code, r.text)
    assert expected in r.json()["error"], (expected, r.json()["error"])
    assert _count(srv, "ing_bin") == before


def test_wrong_shape_per_task_and_unknown_model_or_version(ingest_server: Server) -> None:
    srv = ingest_server
    with srv.client() as c:
        cls = c.post(
            "/v1/models/ing_cls/predictions", json={"records": [{"inputs": {}, "prediction": [0.5, 0.5]}]}
        )
        reg = c.post("/v1/models/ing_reg/predictions", json={"records": [{"inputs": {}, "prediction": "7"}]})
        unknown = c.post("/v1/models/nope/predictions", json={"records": [{"inputs": {}, "prediction": 0.1}]})
        version = c.post(
            "/v1/models/ing_bin/predictions",
            json={"records": [{"inputs": {}, "prediction": 0.1, "version": 9}]},
        )
    assert cls.status_code == 400 and "3 class probabilities" in cls.json()["error"], cls.text
    assert "'high', 'low', 'mid'" in cls.json()["error"]
    assert reg.status_code == 400 and "finite number" in reg.json()["error"], reg.text
    assert unknown.status_code == 404 and "nope" in unknown.json()["error"], unknown.text
    assert version.status_code == 404 and "version 9" in version.json()["error"], version.text


def test_the_ingest_scope_writes_predictions_and_nothing_else(ingest_server: Server) -> None:
    srv = ingest_server
    db = open_database(srv.settings.database_url.get_secret_value())
    try:
        with db.session() as s:
            ingest_secret = create_token(session=s, name="kserve", scopes=["ingest"], expires_in=None).secret
            read_secret = create_token(session=s, name="viewer", scopes=["read"], expires_in=None).secret
    finally:
        db.dispose()
    body = {"records": _records("ing_bin", 1, seed=5)}
    with srv.client() as c:
        ok = c.post(
            "/v1/models/ing_bin/predictions", json=body, headers={"Authorization": f"Bearer {ingest_secret}"}
        )
        refused = c.post(
            "/v1/models/ing_bin/predictions", json=body, headers={"Authorization": f"Bearer {read_secret}"}
        )
        anonymous = c.post("/v1/models/ing_bin/predictions", json=body, headers=NO_AUTH)
        feedback = c.post(
            "/v1/models/ing_bin/feedback",
            json={"labels": [{"prediction_id": ok.json()["prediction_ids"][0], "label": 1}]},
            headers={"Authorization": f"Bearer {ingest_secret}"},
        )
        alerts = c.get("/v1/alerts", headers={"Authorization": f"Bearer {ingest_secret}"})
    assert ok.status_code == 200, ok.text
    assert refused.status_code == 403 and "ingest" in refused.json()["error"], refused.text
    assert anonymous.status_code == 401, anonymous.text
    assert feedback.status_code == 403 and alerts.status_code == 403


def test_the_monitor_runs_on_ingested_predictions(ingest_server: Server) -> None:
    """Input drift, the prediction's drift and realised and estimated performance on an ingested window."""
    from monitors.flows import run_monitor

    srv = ingest_server
    records = _records("ing_bin", 600, seed=11, shift=1.5, ids="window")
    data = own_models.reference(600, seed=11, shift=1.5)
    for i in range(0, 600, 2):
        records[i]["label"] = int(data["y_bin"][i])
    with srv.client() as c:
        for part in range(0, 600, 200):
            r = c.post("/v1/models/ing_bin/predictions", json={"records": records[part : part + 200]})
            assert r.status_code == 200 and r.json()["stored"] == 200, r.text
    db = open_database(srv.settings.database_url.get_secret_value())
    try:
        settings = srv.settings.model_copy(update={"monitor_min_rows": 100, "monitor_window_rows": 600})
        outcome = run_monitor(db=db, settings=settings, model_name="ing_bin")
    finally:
        db.dispose()
    report = outcome.report.as_dict()
    drifted = {f["name"] for f in report["features"] if f["drifted"]}
    assert "a" in drifted and "b" not in drifted, drifted
    assert report["prediction"]["rows"] == 600
    assert report["performance"]["rows"] == 300
    assert report["estimated_performance"], report.get("estimated_performance")


NOW = datetime(
    2026, 11, 30, 6, 0, tzinfo=UTC
)  # the backfill's "now": its last window ends at midnight before


def test_backfill_stores_one_run_per_past_window_at_its_own_time(ingest_server: Server) -> None:
    """30 days of imported history (the last 10 with ``a`` shifted): 30 daily runs, each at its window's end,
    drift found in the shifted days; a second backfill finds every window done."""
    from monitors.backfill import backfill
    from monitors.flows import history

    srv = ingest_server
    midnight = datetime(2026, 11, 30, tzinfo=UTC)
    with srv.client() as c:
        for day in range(30):
            start = midnight - timedelta(days=30 - day) + timedelta(minutes=30)
            shift = 1.5 if day >= 20 else 0.0
            records = _records("ing_hist", 120, seed=100 + day, shift=shift, ids=f"d{day}", start=start)
            r = c.post("/v1/models/ing_hist/predictions", json={"records": records})
            assert r.status_code == 200 and r.json()["stored"] == 120, r.text
    settings = srv.settings.model_copy(update={"monitor_min_rows": 100})
    db = open_database(srv.settings.database_url.get_secret_value())
    try:
        seen: list[str] = []
        results = backfill(
            db=db,
            settings=settings,
            model_name="ing_hist",
            since=timedelta(days=30),
            every=timedelta(days=1),
            now=NOW,
            progress=lambda r: seen.append(r.outcome),
        )
        again = backfill(
            db=db,
            settings=settings,
            model_name="ing_hist",
            since=timedelta(days=30),
            every=timedelta(days=1),
            now=NOW,
        )
        doc = history(db=db, model_name="ing_hist", limit=100)
    finally:
        db.dispose()
    assert seen == ["stored"] * 30
    assert [r.end for r in results] == [midnight - timedelta(days=29 - k) for k in range(30)]
    assert all(r.rows == 120 and r.run_id is not None for r in results)
    drifted = [r.drifted > 0 for r in results]
    assert all(drifted[20:]), drifted
    assert sum(drifted[:20]) <= 3, drifted
    assert [r.outcome for r in again] == ["existing"] * 30
    runs = [run for run in doc["runs"] if run.get("window_end")]
    ends = [
        aware(run["window_end"]) if isinstance(run["window_end"], str) else run["window_end"] for run in runs
    ]
    assert ends == sorted(ends, reverse=True) and len(runs) == 30
    created = [datetime.fromisoformat(run["created_at"]) for run in runs]
    assert [aware(c) for c in created] == ends  # each run at its own time


def test_backfill_command_and_its_bad_input(ingest_server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from core.config import get_settings
    from service.cli import app

    srv = ingest_server
    monkeypatch.setenv("DRIFTWARDEN_DATABASE_URL", srv.settings.database_url.get_secret_value())
    monkeypatch.setenv("DRIFTWARDEN_REGISTRY_PATH", str(srv.settings.registry_path))
    get_settings.cache_clear()
    runner = CliRunner()
    try:
        ok = runner.invoke(
            app, ["monitor", "--backfill", "--model", "ing_reg", "--since", "2d", "--every", "1d"]
        )
        no_model = runner.invoke(app, ["monitor", "--backfill", "--since", "2d"])
        bad = runner.invoke(app, ["monitor", "--backfill", "--model", "ing_reg", "--every", "soon"])
        longer = runner.invoke(
            app, ["monitor", "--backfill", "--model", "ing_reg", "--since", "1d", "--every", "2d"]
        )
        unknown = runner.invoke(app, ["monitor", "--backfill", "--model", "nope"])
    finally:
        get_settings.cache_clear()
    assert ok.exit_code == 0, ok.output
    assert "0 run(s) stored" in ok.output and "2 with fewer than" in ok.output, ok.output
    for result, named in ((no_model, "--model"), (bad, "--every"), (longer, "--every"), (unknown, "nope")):
        err = result.stderr.strip()
        assert result.exit_code == 2 and err.startswith("error: ") and "\n" not in err, (
            result.exit_code,
            err,
        )
        assert named in err, err


def _cli(srv: Server, monkeypatch: pytest.MonkeyPatch, *args: str) -> Any:
    return run_cli(monkeypatch, server_env(srv), *args)


def _scored(n: int, *, seed: int) -> dict[str, np.ndarray]:
    data = own_models.reference(n, seed=seed)
    return {
        **{k: data[k] for k in ("a", "b", "c", "color")},
        "score": np.asarray(_answers("binary", data), dtype=float),
        "row_id": np.array([f"job7-{i}" for i in range(n)], dtype=object),
        "scored_at": np.array(
            [(T0 + timedelta(hours=i // 1000)).isoformat() for i in range(n)], dtype=object
        ),
        "truth": data["y_bin"],
    }


def test_a_scored_file_is_imported_once(
    ingest_server: Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    srv = ingest_server
    write_table(_scored(3_000, seed=21), tmp_path / "scored.csv")
    args = [
        "predictions",
        "import",
        str(tmp_path / "scored.csv"),
        "--model",
        "ing_file",
        "--prediction-column",
        "score",
        "--id-column",
        "row_id",
        "--time-column",
        "scored_at",
        "--label-column",
        "truth",
    ]
    dry = _cli(srv, monkeypatch, *args, "--dry-run")
    assert dry.exit_code == 0 and "3000 rows checked for ing_file:1" in dry.output, dry.output
    assert _count(srv, "ing_file") == 0
    first = _cli(srv, monkeypatch, *args)
    assert first.exit_code == 0, first.output
    assert (
        "3000 of 3000 rows logged for ing_file:1" in first.output and "3000 labels stored" in first.output
    ), first.output
    assert _count(srv, "ing_file") == 3_000
    again = _cli(srv, monkeypatch, *args)
    assert again.exit_code == 0 and "0 of 3000 rows logged" in again.output, again.output
    assert "3000 already logged" in again.output
    assert _count(srv, "ing_file") == 3_000
    rows = _query(
        srv,
        "select source, min(logged_at), max(logged_at), sum(size) from prediction_batches "
        "where model_name = 'ing_file' group by source",
    )
    ((source, lo, hi, size),) = rows
    assert source == "import" and size == 3_000
    assert aware(lo) == T0 and aware(hi) == T0 + timedelta(hours=2)
    # runs of one scoring time (1000 rows each here): their ids derive from the run's row ids
    ids = [
        keyed_ids("ing_file", [f"job7-{i}" for i in range(1000)])[0],
        keyed_ids("ing_file", [f"job7-{i}" for i in range(2000, 3000)])[999],
    ]
    with srv.client() as c:
        r = c.post(
            "/v1/models/ing_file/feedback", json={"labels": [{"prediction_id": p, "label": 1} for p in ids]}
        )
    truth = _scored(3_000, seed=21)["truth"]
    changed = int(truth[0] != 1) + int(truth[2999] != 1)  # a label the log holds already is not stored again
    assert r.status_code == 200 and r.json() == {"stored": changed, "unknown_ids": [], "duplicate_ids": []}, (
        r.text
    )


def test_a_multiclass_parquet_with_list_predictions(
    ingest_server: Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    srv = ingest_server
    data = own_models.reference(500, seed=22)
    probs = [json.loads(v) for v in _answers("multiclass", data)]
    table = {k: pa.array(data[k].tolist()) for k in ("a", "b", "c", "color")}
    table["probs"] = pa.array(probs, type=pa.list_(pa.float64()))
    table["at"] = pa.array([T0 + timedelta(seconds=i) for i in range(500)], type=pa.timestamp("us", tz="UTC"))
    pq.write_table(pa.table(table), tmp_path / "bands.parquet")
    before = _count(srv, "ing_cls")
    done = _cli(
        srv,
        monkeypatch,
        "predictions",
        "import",
        str(tmp_path / "bands.parquet"),
        "--model",
        "ing_cls",
        "--prediction-column",
        "probs",
        "--time-column",
        "at",
    )
    assert done.exit_code == 0 and "500 of 500 rows logged for ing_cls:1" in done.output, done.output
    assert _count(srv, "ing_cls") == before + 500


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"score": 1.5}, "line 9: prediction must be the positive class's probability"),
        ({"scored_at": "yesterday"}, "line 9: scored_at 'yesterday' is not a time"),
        ({"truth": 3}, "line 9: label must be 0 or 1"),
        (
            {"color": "re\u0000d"},
            "line 9: column 'color': feature names and text values may not contain U+0000",
        ),
    ],
)
def test_a_bad_row_stops_the_import_before_anything_is_written(
    ingest_server: Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, change: dict, named: str
) -> None:
    srv = ingest_server
    table = _scored(50, seed=23)
    for column, value in change.items():
        values = table[column].astype(object)
        values[7] = value
        table[column] = values
    write_table(table, tmp_path / "bad.csv")
    before = _count(srv, "ing_file")
    done = _cli(
        srv,
        monkeypatch,
        "predictions",
        "import",
        str(tmp_path / "bad.csv"),
        "--model",
        "ing_file",
        "--prediction-column",
        "score",
        "--time-column",
        "scored_at",
        "--label-column",
        "truth",
    )
    err = done.stderr.strip()
    assert done.exit_code == 2 and err.startswith("error: ") and "\n" not in err, (
        done.exit_code,
        done.output,
    )
    assert named in err, err
    assert _count(srv, "ing_file") == before


def test_import_refuses_what_the_route_refuses_naming_the_row_never_other_content(
    ingest_server: Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Repeated ids and ids over 128 characters were imported (the route refuses both); true/false labels
    were read as 1/0 (refused on the route too); a CSV that is not UTF-8 was "a bug"; a link to another file
    showed one of its lines; a pipe would be read until it ends."""
    srv = ingest_server

    def scored(change: dict[str, Any]) -> dict[str, np.ndarray]:
        table = _scored(50, seed=25)
        for column, value in change.items():
            values = table[column].astype(object)
            values[7] = value  # line 9 of the CSV (the header is line 1), row 8 of a Parquet file
            table[column] = values
        return table

    def booleans(table: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return table | {"truth": table["truth"].astype(bool)}

    secret = tmp_path / "secret"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n")
    (tmp_path / "linked.csv").symlink_to(secret)
    secret_commas = tmp_path / "secret2"
    secret_commas.write_text("a,b\npostgres:x:101:104:PostgreSQL administrator,,,:/var/lib/postgresql\n")
    (tmp_path / "linked2.csv").symlink_to(secret_commas)
    (tmp_path / "garbage.csv").write_bytes(b"\xff\xfe,score\n1,0.5\n")
    (tmp_path / "latin1.csv").write_bytes(b"a,b,c,color,score\n1,2,3,r\xe9d,0.5\n")
    os.mkfifo(tmp_path / "pipe.csv")
    write_table(scored({"row_id": "job7-3"}), tmp_path / "repeated.csv")
    write_table(scored({"row_id": "job7-3"}), tmp_path / "repeated.parquet")
    write_table(scored({"row_id": "x" * 129}), tmp_path / "long.csv")
    write_table(booleans(_scored(50, seed=25)), tmp_path / "booleans.csv")
    write_table(booleans(_scored(50, seed=25)), tmp_path / "booleans.parquet")
    cases = {
        "repeated.csv": "line 9: row_id repeats the id of line 5: each row's id must be unique in the file",
        "repeated.parquet": "row 8 (1-based): row_id repeats the id of row 4 (1-based)",
        "long.csv": "line 9: row_id must be a string of 1 to 128 printable characters",
        "booleans.csv": "--label-column 'truth' holds true/false: a label is a number or a class name",
        "booleans.parquet": "--label-column 'truth' holds true/false",
        "garbage.csv": "garbage.csv as CSV: its text is not UTF-8 (byte 0xff)",
        "latin1.csv": "latin1.csv as CSV: its text is not UTF-8 (column #4, 'color')",
        "linked.csv": "linked.csv has none of the features of ing_file's contract (a, b, c, color)",
        "linked2.csv": "cannot read",
        "pipe.csv": "pipe.csv is not a regular file",
    }
    before = _count(srv, "ing_file")
    monkeypatch.setattr(
        file_import, "BATCH_ROWS", 4
    )  # Parquet batches of 4 rows: row 8 repeats one of batch 1
    for name, named in cases.items():
        args = ["--model", "ing_file", "--prediction-column", "score", "--label-column", "truth"]
        if name.startswith(("repeated", "long")):
            args += ["--id-column", "row_id"]
        done = _cli(srv, monkeypatch, "predictions", "import", str(tmp_path / name), *args)
        err = done.stderr.strip()
        assert done.exit_code == 2 and err.startswith("error: ") and "\n" not in err, (name, done.output)
        assert named in err, (name, err)
        assert "root:x" not in err and "daemon" not in err and "postgres:x" not in err, err
    assert _count(srv, "ing_file") == before


def test_text_labels_are_read_alike_in_csv_and_parquet(
    ingest_server: Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A Parquet string column of "0" and "1" was refused where a CSV's 0 and 1 were taken."""
    srv = ingest_server
    table = _scored(40, seed=26)
    del table["row_id"]
    text = table | {"truth": np.array([str(v) for v in table["truth"]], dtype=object)}
    write_table(text, tmp_path / "text.parquet")
    write_table(table, tmp_path / "numbers.csv")
    for name in ("text.parquet", "numbers.csv"):
        done = _cli(
            srv,
            monkeypatch,
            "predictions",
            "import",
            str(tmp_path / name),
            "--model",
            "ing_text",
            "--prediction-column",
            "score",
            "--label-column",
            "truth",
        )
        assert done.exit_code == 0 and "40 of 40 rows logged" in done.output, (name, done.output)
        assert "40 labels stored" in done.output, (name, done.output)
    stored = _query(
        srv,
        "select f.label from prediction_feedback f where f.model_name = 'ing_text' order by f.label",
    )
    assert sorted(float(r[0]) for r in stored) == sorted(2 * [float(v) for v in table["truth"]])


def test_import_names_a_missing_column_or_model(
    ingest_server: Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    srv = ingest_server
    write_table(_scored(10, seed=24), tmp_path / "few.csv")
    path = str(tmp_path / "few.csv")
    cases = [
        (
            ("--model", "ing_file", "--prediction-column", "nope"),
            "--prediction-column 'nope' is not a column",
        ),
        (("--model", "ing_file", "--prediction-column", "score", "--id-column", "id"), "--id-column 'id'"),
        (("--model", "nope", "--prediction-column", "score"), "model 'nope' has no serving version"),
    ]
    for args, named in cases:
        done = _cli(srv, monkeypatch, "predictions", "import", path, *args)
        err = done.stderr.strip()
        assert done.exit_code == 2 and err.startswith("error: ") and named in err, (args, done.output)


def test_one_window_holds_all_three_sources(
    ingest_server: Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A model registered from a reference alone, monitored from a window of imported, ingested and KServe
    rows: the run counts each source, and drift, the prediction and realised performance read them all."""
    from cloudevents.core.bindings.http import to_binary_event
    from cloudevents.core.v1.event import CloudEvent

    from monitors.flows import run_monitor
    from service.serving.kserve import REQUEST_TYPE, RESPONSE_TYPE

    srv = ingest_server
    scored = _scored(300, seed=41)
    scored["a"] = scored["a"] + 1.5  # every source sends the same shifted feature
    scored["row_id"] = np.array([f"mix-{i}" for i in range(300)], dtype=object)
    write_table(scored, tmp_path / "mix.csv")
    imported = _cli(
        srv,
        monkeypatch,
        *("predictions", "import", str(tmp_path / "mix.csv"), "--model", "ing_mix"),
        *("--prediction-column", "score", "--id-column", "row_id", "--label-column", "truth"),
    )
    assert imported.exit_code == 0, imported.output
    records = _records("ing_bin", 300, seed=42, shift=1.5)
    data = own_models.reference(300, seed=42, shift=1.5)
    for i, record in enumerate(records):
        record["label"] = int(data["y_bin"][i])
    kserve = own_models.reference(300, seed=43, shift=1.5)
    probs = [float(p) for p in _answers("binary", kserve)]
    with srv.client() as c:
        r = c.post("/v1/models/ing_mix/predictions", json={"records": records})
        assert r.status_code == 200 and r.json()["stored"] == 300, r.text
        for k in range(3):  # three inferences of 100 rows, response first
            rows = [
                {f: (str(kserve[f][i]) if f == "color" else float(kserve[f][i])) for f in own_models.FEATURES}
                for i in range(100 * k, 100 * (k + 1))
            ]
            for kind, body in (
                (RESPONSE_TYPE, {"predictions": probs[100 * k : 100 * (k + 1)]}),
                (REQUEST_TYPE, {"instances": rows}),
            ):
                attributes = {
                    "specversion": "1.0",
                    "id": f"mix-{k}",
                    "type": kind,
                    "source": "http://kserve/",
                }
                event = CloudEvent(
                    {**attributes, "inferenceservicename": "ing_mix"}, json.dumps(body).encode()
                )
                message = to_binary_event(event)
                r = c.post("/v1/cloudevents", content=message.body, headers=dict(message.headers))
                assert r.status_code == 200, r.text
            assert r.json()["outcome"] == "logged", r.text
    db = open_database(srv.settings.database_url.get_secret_value())
    try:
        settings = srv.settings.model_copy(update={"monitor_min_rows": 100, "monitor_window_rows": 900})
        outcome = run_monitor(db=db, settings=settings, model_name="ing_mix")
    finally:
        db.dispose()
    report = outcome.report.as_dict()
    assert outcome.window.rows_by_source == {"cloudevents": 300, "import": 300, "ingest": 300}
    assert report["prediction"]["rows"] == 900
    assert report["performance"]["rows"] == 600  # the imported and the ingested labels
    drifted = {f["name"] for f in report["features"] if f["drifted"]}
    assert "a" in drifted and "b" not in drifted, drifted

"""Drift and quality series at /metrics, read from the stored runs: real server, real model, both backends.

One module-scoped scenario per backend: covariate-shifted traffic (age, income, credit score) through the
server -> a monitor run -> scrape; ground truth -> another run -> scrape; then a second app instance on the
same database scrapes the same values, and a collector with a small feature cap exports only the most
severe features and says so once.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

import httpx
import numpy as np
import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry, generate_latest

from core import migrate
from core.database import make_engine, open_database
from monitors.metrics import DriftCollector
from tests.monitors.logdata import plain
from tests.monitors.promtext import Sample, parse, series
from tests.support import Server, TrainedModels, seed_registry, serve_settings
from training.cluster.datagen import TARGET, generate

WINDOW = 600
PLANTED = {"age", "income", "credit_score"}


def drift_series(samples: dict[Sample, float]) -> dict[Sample, float]:
    """Only the series the drift collector exports (the rest are per-process)."""
    prefixes = (
        "driftwarden_drift_",
        "driftwarden_dataset_drift",
        "driftwarden_prediction_drift",
        "driftwarden_data_quality_rate",
        "driftwarden_model_performance",
        "driftwarden_model_reference_performance",
        "driftwarden_label_coverage_ratio",
        "driftwarden_monitor_",
    )
    return {k: v for k, v in samples.items() if k[0].startswith(prefixes)}


@dataclass
class Scenario:
    server: Server
    url: str
    runs: dict[str, dict[str, object]] = field(default_factory=dict)
    scrapes: dict[str, dict[Sample, float]] = field(default_factory=dict)
    history: list[dict[str, object]] = field(default_factory=list)


def _send(client: httpx.Client, cols: dict[str, np.ndarray]) -> list[str]:
    names = [k for k in cols if k != TARGET]
    rows = [{k: plain(cols[k][i]) for k in names} for i in range(len(cols[TARGET]))]
    ids: list[str] = []
    for lo in range(0, len(rows), 200):
        r = client.post("/v1/models/credit:predict", json={"instances": rows[lo : lo + 200]})
        assert r.status_code == 200, r.text
        ids += r.json()["prediction_ids"]
    return ids


def _run(client: httpx.Client) -> dict[str, object]:
    r = client.post("/v1/models/credit/monitors:run")
    assert r.status_code == 201, r.text
    body: dict[str, object] = r.json()
    return body


def _scrape(client: httpx.Client) -> dict[Sample, float]:
    r = client.get("/metrics")
    assert r.status_code == 200, r.text
    return parse(r.text)


def _refreshed(server: Server, timeout_s: float = 30.0) -> None:
    """Wait until the drift series' refresh job has read the database once after the call (a scrape only
    reads its cache)."""
    drift = server.app.state.health.drift
    target = drift.refreshes + 2  # one may have started before the call
    deadline = time.monotonic() + timeout_s
    while drift.refreshes < target:
        assert time.monotonic() < deadline, "the drift series were not refreshed in time"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def scenario(
    module_db_url: str, trained: TrainedModels, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scenario]:
    seed_registry(module_db_url, trained, serving=1)
    settings = serve_settings(
        module_db_url,
        tmp_path_factory.mktemp("spool"),
        monitor_enabled=False,
        monitor_window_rows=WINDOW,
        monitor_min_rows=50,
        drift_metrics_cache_s=0,
    )
    with Server(settings) as srv, srv.client() as c:
        sc = Scenario(server=srv, url=module_db_url)
        _refreshed(srv)
        sc.scrapes["before"] = _scrape(c)
        drifted = generate(WINDOW, scenario="covariate_shift", seed=22)
        ids = _send(c, drifted)
        sc.runs["drifted"] = _run(c)
        _refreshed(srv)
        sc.scrapes["drifted"] = _scrape(c)
        labels = [{"prediction_id": p, "label": int(y)} for p, y in zip(ids, drifted[TARGET], strict=True)]
        r = c.post("/v1/models/credit/feedback", json={"labels": labels})
        assert r.status_code == 200 and r.json()["stored"] == WINDOW, r.text
        sc.runs["labelled"] = _run(c)
        _refreshed(srv)
        sc.scrapes["labelled"] = _scrape(c)
        sc.history = c.get("/v1/models/credit/drift/history").json()["runs"]
        yield sc


def test_no_run_yet_means_no_drift_series(scenario: Scenario) -> None:
    assert drift_series(scenario.scrapes["before"]) == {}


def test_planted_drift_shows_per_feature_and_dataset(scenario: Scenario) -> None:
    m = scenario.scrapes["drifted"]
    report = scenario.runs["drifted"]["report"]
    assert isinstance(report, dict)
    features = {f["name"] for f in report["features"]}
    assert series(m, "driftwarden_dataset_drifted") == {(("model", "credit"),): 1.0}
    detected = {
        dict(k)["feature"]: v for k, v in series(m, "driftwarden_drift_detected", model="credit").items()
    }
    assert set(detected) == features  # every feature, each exactly once
    assert {f for f, v in detected.items() if v == 1.0} == PLANTED
    assert all(v == 0.0 for f, v in detected.items() if f not in PLANTED)
    share = series(m, "driftwarden_dataset_drift_share", model="credit")[(("model", "credit"),)]
    assert share == pytest.approx(len(PLANTED) / len(features))
    # statistic, p-value and effect size of the verdict's test, per feature, as stored
    stored = {f["name"]: f["result"] for f in report["features"]}
    stats = series(m, "driftwarden_drift_statistic", model="credit")
    assert {dict(k)["feature"] for k in stats} == features
    for labels, value in stats.items():
        r = stored[dict(labels)["feature"]]
        assert dict(labels)["test"] == r["test"] and value == pytest.approx(r["statistic"])
    for f in PLANTED:
        p = series(m, "driftwarden_drift_p_value", model="credit", feature=f)[
            (("feature", f), ("model", "credit"))
        ]
        assert p == pytest.approx(stored[f]["adjusted_p_value"]) and p < 0.05
        effect = series(m, "driftwarden_drift_effect_size", model="credit", feature=f)
        assert list(effect.values()) == [pytest.approx(stored[f]["effect"])]
    prediction = report["prediction"]
    assert series(m, "driftwarden_prediction_drifted") == {
        (("model", "credit"),): float(prediction["drifted"])
    }
    assert list(series(m, "driftwarden_prediction_drift_statistic").values()) == [
        pytest.approx(prediction["result"]["statistic"])
    ]


def test_quality_performance_and_run_series(scenario: Scenario) -> None:
    m = scenario.scrapes["drifted"]
    report = scenario.runs["drifted"]["report"]
    assert isinstance(report, dict)
    quality = series(m, "driftwarden_data_quality_rate", model="credit")
    assert {dict(k)["check"] for k in quality} >= {"missing", "out_of_range"}
    for q in report["quality"]:
        key = (("check", q["check"]), ("feature", q["feature"]), ("model", "credit"))
        assert quality[key] == pytest.approx(q["rate"])
    estimated = series(m, "driftwarden_model_performance", model="credit", source="estimated")
    assert {dict(k)["metric"] for k in estimated} >= {"accuracy", "roc_auc"}
    key = (("metric", "roc_auc"), ("model", "credit"), ("source", "estimated"))
    assert estimated[key] == pytest.approx(report["estimated_performance"]["roc_auc"])
    assert series(m, "driftwarden_model_performance", source="realized") == {}  # no label yet
    assert series(m, "driftwarden_label_coverage_ratio") == {(("model", "credit"),): 0.0}
    reference = series(m, "driftwarden_model_reference_performance", model="credit")
    assert reference[(("metric", "accuracy"), ("model", "credit"))] == pytest.approx(
        report["reference_performance"]["accuracy"]
    )
    run = next(h for h in scenario.history if h["run_id"] == scenario.runs["drifted"]["run_id"])
    assert series(m, "driftwarden_monitor_window_rows") == {(("model", "credit"),): float(WINDOW)}
    # every prediction of the window was served here: one source, as the run's report counts it
    window = scenario.runs["drifted"]["window"]
    assert isinstance(window, dict) and window["rows_by_source"] == {"serve": WINDOW}
    assert series(m, "driftwarden_monitor_window_predictions") == {
        (("model", "credit"), ("source", "serve")): float(WINDOW)
    }
    stamp = series(m, "driftwarden_monitor_last_run_timestamp_seconds")[(("model", "credit"),)]
    assert stamp == pytest.approx(datetime.fromisoformat(str(run["created_at"])).timestamp(), abs=1e-3)
    duration = series(m, "driftwarden_monitor_run_duration_seconds")[(("model", "credit"),)]
    assert isinstance(run["duration_s"], float) and 0 < run["duration_s"] < 60
    assert duration == pytest.approx(run["duration_s"])


def test_labels_give_realized_performance_and_coverage(scenario: Scenario) -> None:
    m = scenario.scrapes["labelled"]
    report = scenario.runs["labelled"]["report"]
    assert isinstance(report, dict)
    assert series(m, "driftwarden_label_coverage_ratio") == {(("model", "credit"),): 1.0}
    realized = series(m, "driftwarden_model_performance", model="credit", source="realized")
    assert {dict(k)["metric"] for k in realized} >= {"accuracy", "roc_auc", "f1"}
    assert "label_coverage" not in {dict(k)["metric"] for k in realized}
    key = (("metric", "accuracy"), ("model", "credit"), ("source", "realized"))
    assert realized[key] == pytest.approx(report["performance"]["accuracy"])
    run_id = scenario.runs["labelled"]["run_id"]
    assert run_id != scenario.runs["drifted"]["run_id"]


def test_same_values_from_another_app_instance_on_the_database(
    scenario: Scenario, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A second server (another replica, or the same after a restart) exports exactly the same series."""
    first = scenario.server
    with first.client() as c:
        mine = drift_series(_scrape(c))
    other = serve_settings(scenario.url, tmp_path_factory.mktemp("spool2"), monitor_enabled=False)
    with Server(other) as srv, srv.client() as c:
        _refreshed(srv)
        theirs = drift_series(_scrape(c))
    assert mine and theirs == mine
    assert theirs == drift_series(scenario.scrapes["labelled"])


def test_feature_cap_exports_the_most_severe_and_says_so_once(
    scenario: Scenario, caplog: pytest.LogCaptureFixture
) -> None:
    settings = scenario.server.settings.model_copy(update={"metrics_max_features": 2})
    registry = CollectorRegistry()
    collector = DriftCollector(db=scenario.server.state.db, settings=settings)
    collector.refresh()  # what the server's refresh job does; a scrape only reads the cache
    registry.register(collector)
    with caplog.at_level(logging.WARNING, logger="driftwarden.monitors.metrics"):
        first = parse(generate_latest(registry).decode())
        parse(generate_latest(registry).decode())
    detected = series(first, "driftwarden_drift_detected", model="credit")
    assert len(detected) == 2 and set(detected.values()) == {1.0}  # the two most severe: drifted ones
    assert {dict(k)["feature"] for k in detected} <= PLANTED
    quality_features = {dict(k)["feature"] for k in series(first, "driftwarden_data_quality_rate")}
    assert quality_features <= {dict(k)["feature"] for k in detected}
    assert series(first, "driftwarden_dataset_drifted") == {(("model", "credit"),): 1.0}
    lines = [r.getMessage() for r in caplog.records if "DRIFTWARDEN_METRICS_MAX_FEATURES" in r.getMessage()]
    assert len(lines) == 1 and "model credit has" in lines[0] and "the 2 most severe" in lines[0], lines


def test_scrape_passes_promtool(scenario: Scenario) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found: install Debian's prometheus (scripts/system-deps.sh)")
    with scenario.server.client() as c:
        text = c.get("/metrics").text
    assert "driftwarden_drift_detected{" in text and "driftwarden_health_check_up{" in text
    proc = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and not proc.stdout.strip() and not proc.stderr.strip(), (
        proc.stdout + proc.stderr
    )


def test_migration_0005_adds_and_removes_the_duration(database_url: str) -> None:
    if migrate.current(database_url) is None:
        migrate.upgrade(database_url)
    assert migrate.current(database_url) == migrate.head()

    def columns() -> set[str]:
        engine = make_engine(database_url)
        try:
            return {c["name"] for c in sa.inspect(engine).get_columns("monitor_runs")}
        finally:
            engine.dispose()

    assert "duration_s" in columns()
    migrate.downgrade(database_url, "0004_version_events")
    assert "duration_s" not in columns() and "rows" in columns()
    migrate.upgrade(database_url)
    assert "duration_s" in columns()
    open_database(database_url).dispose()  # the code and the schema agree again

"""The Grafana dashboards: built in code (grafana-foundation-sdk), committed as generated, agreed names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.deploy.promql import (
    AGREED,
    DASHBOARDS,
    PROCESS,
    ROOT,
    dashboards,
    metric_names,
    panel_queries,
    variables,
)

UIDS = {
    "driftwarden-service.json": "driftwarden-service",
    "driftwarden-drift.json": "driftwarden-drift",
    "driftwarden-infra.json": "driftwarden-infra",
}


def test_generator_reproduces_the_committed_json_byte_for_byte(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "deploy.grafana.dashboards", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    generated = sorted(p.name for p in tmp_path.iterdir())
    assert generated == sorted(p.name for p in DASHBOARDS.glob("*.json")) == sorted(UIDS)
    for name in generated:
        fresh, committed = (tmp_path / name).read_bytes(), (DASHBOARDS / name).read_bytes()
        assert fresh == committed, f"{name} is stale: run `.venv/bin/python -m deploy.grafana.dashboards`"


def test_fixed_uids_unique_panel_ids_and_the_prometheus_datasource() -> None:
    boards = dashboards()
    assert {name: board["uid"] for name, board in boards.items()} == UIDS
    for name, board in boards.items():
        ids = [p["id"] for p in board["panels"] if p["type"] != "row"]
        assert len(ids) == len(set(ids)) and 0 not in ids, name
        panels = [p for p in board["panels"] if p["type"] != "row"]
        assert len(panels) >= 8, name
        for panel in panels:
            assert panel["datasource"] == {"type": "prometheus", "uid": "prometheus"}, panel["title"]
            assert panel["description"], panel["title"]
            ref_ids = [t["refId"] for t in panel["targets"]]
            assert ref_ids and len(ref_ids) == len(set(ref_ids)), panel["title"]


def test_drift_dashboard_has_model_and_feature_variables() -> None:
    board = dashboards()["driftwarden-drift.json"]
    by_name = {v.name: v for v in variables(board)}
    assert set(by_name) == {"model", "feature"}
    assert by_name["model"].label == "model" and not by_name["model"].multi
    assert by_name["feature"].label == "feature" and by_name["feature"].multi
    assert "$model" in by_name["feature"].metric_selector  # features of the chosen model only
    titles = {p["title"] for p in board["panels"]}
    assert {
        "Drift statistic by feature",
        "Drifted-feature share over time",
        "Estimated vs realized performance",
        "Label coverage",
    } <= titles


def test_every_query_reads_agreed_metric_names_and_its_legend_names_labels() -> None:
    queries = panel_queries()
    assert len(queries) >= 60
    used = set()
    for q in queries:
        names = metric_names(q.expr)
        assert names, (q.dashboard, q.panel, q.expr)
        unknown = names - AGREED - PROCESS - {"up"}
        assert not unknown, f"{q.dashboard} / {q.panel}: not an agreed metric name: {unknown}"
        assert q.labels, f"{q.dashboard} / {q.panel}: its legend names no label its query keeps"
        used |= names
    # every agreed series is on some dashboard
    assert AGREED - used == set()


def test_drift_dashboard_counts_predictions_by_source() -> None:
    """The window of the latest run by source (imports show only there: the CLI exports no counter) and the
    live rate of each source: ingested (ingest, cloudevents) and served, each series labelled ``source``."""
    board = dashboards()["driftwarden-drift.json"]
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert "Predictions by source" in rows
    panels = {p["title"]: p for p in board["panels"] if p["type"] != "row"}
    window = panels["Predictions by source"]
    assert window["type"] == "timeseries" and "import" in window["description"]
    assert [(t["expr"], t["legendFormat"]) for t in window["targets"]] == [
        ('max by (model, source) (driftwarden_monitor_window_predictions{model="$model"})', "{{source}}")
    ]
    live = panels["Predictions per second by source"]
    assert [(t["expr"], t["legendFormat"]) for t in live["targets"]] == [
        (
            "sum by (model, source) "
            '(rate(driftwarden_ingested_predictions_total{model="$model"}[$__rate_interval]))',
            "{{source}}",
        ),
        (
            "sum by (model, source) (label_replace("
            'rate(driftwarden_predictions_total{model="$model"}[$__rate_interval]), '
            '"source", "serve", "", ""))',
            "{{source}}",
        ),
    ]
    queries = [
        q for q in panel_queries() if q.panel in {"Predictions by source", "Predictions per second by source"}
    ]
    assert len(queries) == 3 and all(q.labels == {"source"} for q in queries)


def test_drift_history_panel_says_what_it_plots() -> None:
    """The drift share over time is the latest run at each scrape: the panel says so and points to the
    history route, which lists backfilled runs at their own time."""
    board = dashboards()["driftwarden-drift.json"]
    (panel,) = [p for p in board["panels"] if p["title"] == "Drifted-feature share over time"]
    assert "Backfilled runs" in panel["description"] and "/drift/history" in panel["description"]

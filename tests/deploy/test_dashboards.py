"""The Grafana dashboards: built in code (grafana-foundation-sdk), committed as generated, agreed names; the
one panel that reads the driftwarden API instead of Prometheus, checked against the real route."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.deploy.promql import (
    AGREED,
    DASHBOARDS,
    DEPLOY,
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
PROMETHEUS = {"type": "prometheus", "uid": "prometheus"}
API_DATASOURCES = DEPLOY / "grafana" / "provisioning" / "datasources" / "driftwarden.yaml"
HISTORY_TITLE = "Drift runs by their own time (backfill included)"
# the panels that read the driftwarden API (the Infinity data source of API_DATASOURCES), not Prometheus
API_PANELS = {"driftwarden-drift.json": {HISTORY_TITLE}}


def every_panel(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The board's panels, rows included, and the panels a collapsed row holds (``panels`` of the row)."""
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def api_datasource() -> dict[str, Any]:
    (source,) = yaml.safe_load(API_DATASOURCES.read_text())["datasources"]
    assert isinstance(source, dict)
    return source


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
    """Every panel, those of collapsed rows too, reads Prometheus, except the named ones that read the API."""
    boards = dashboards()
    assert {name: board["uid"] for name, board in boards.items()} == UIDS
    source = api_datasource()
    api = {"type": source["type"], "uid": source["uid"]}
    for name, board in boards.items():
        ids = [p["id"] for p in every_panel(board) if p["type"] != "row"]
        assert len(ids) == len(set(ids)) and 0 not in ids, name
        panels = [p for p in board["panels"] if p["type"] != "row"]
        assert len(panels) >= 8, name
        panels = [p for p in every_panel(board) if p["type"] != "row"]
        assert API_PANELS.get(name, set()) <= {p["title"] for p in panels}, name
        for panel in panels:
            reads_api = panel["title"] in API_PANELS.get(name, set())
            assert panel["datasource"] == (api if reads_api else PROMETHEUS), panel["title"]
            assert panel["description"], panel["title"]
            ref_ids = [t["refId"] for t in panel["targets"]]
            assert ref_ids and len(ref_ids) == len(set(ref_ids)), panel["title"]
            if reads_api:
                assert all(t["datasource"] == api and "expr" not in t for t in panel["targets"])


def test_every_promql_target_is_one_the_query_checks_evaluate() -> None:
    """``panel_queries`` (the agreed names here, real Prometheus in test_prometheus.py) reads the top-level
    panels: no Prometheus panel may hide in a collapsed row, where it would escape both checks."""
    evaluated = {(q.dashboard, q.panel, q.expr) for q in panel_queries()}
    for name, board in dashboards().items():
        for panel in every_panel(board):
            if panel["type"] == "row" or panel["title"] in API_PANELS.get(name, set()):
                continue
            for target in panel["targets"]:
                assert (name, panel["title"], target["expr"]) in evaluated, (name, panel["title"])


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
    assert HISTORY_TITLE in panel["description"]


# ------------------------------------------------- the panel that reads GET /v1/models/{name}/drift/history

RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")  # Go's time.RFC3339


def evaluate(expression: str, fields: dict[str, Any]) -> Any:
    """An expression of the Infinity plugin's backend parser (govaluate) over a row's fields, of the forms the
    panel uses: field names, literals (``true``, ``false``, numbers), ``/`` and ``==``."""

    def value(node: ast.AST) -> Any:
        match node:
            case ast.Name(id="true"):
                return True
            case ast.Name(id="false"):
                return False
            case ast.Name(id=name):
                return fields[name]
            case ast.Constant(value=constant) if isinstance(constant, int | float):
                return constant
            case ast.BinOp(left=left, op=ast.Div(), right=right):
                return value(left) / value(right)
            case ast.Compare(left=left, ops=[ast.Eq()], comparators=[right]):
                return value(left) == value(right)
        raise AssertionError(f"{expression!r}: not a form this check knows ({ast.dump(node)})")

    return value(ast.parse(expression, mode="eval").body)


def field_value(value: Any, kind: str) -> Any:
    """A row's value as the plugin reads a column of this type (failing where it would read nothing)."""
    if kind == "timestamp":
        assert isinstance(value, str) and RFC3339.fullmatch(value), value
        return datetime.fromisoformat(value)
    if kind == "number":
        assert isinstance(value, int | float) and not isinstance(value, bool), value
        return value
    assert kind == "boolean" and isinstance(value, bool), (kind, value)
    return value


def series(target: dict[str, Any], answer: Any) -> dict[str, list[tuple[datetime, float]]]:
    """What one target of the panel plots from the route's answer: each computed column's points (time, value)
    over the rows under the root selector that the filter keeps."""
    assert re.fullmatch(r"\w+", target["root_selector"]), "a plain key of the answer (a gjson path)"
    rows = answer[target["root_selector"]]
    assert isinstance(rows, list) and rows
    (time_column,) = [c for c in target["columns"] if c["type"] == "timestamp"]
    out: dict[str, list[tuple[datetime, float]]] = {c["text"]: [] for c in target["computed_columns"]}
    for row in rows:
        missing = {c["selector"] for c in target["columns"]} - set(row)
        assert not missing, f"columns the history route does not answer: {missing}"
        fields = {c["text"]: field_value(row[c["selector"]], c["type"]) for c in target["columns"]}
        if not evaluate(target["filterExpression"], fields):
            continue
        for c in target["computed_columns"]:
            assert c["type"] == "number"
            out[c["text"]].append((fields[time_column["text"]], float(evaluate(c["selector"], fields))))
    return out


def test_history_panel_reads_the_real_history_route(tmp_path: Path) -> None:
    """The panel's URL is the history route's (with the dashboard's $model), every column it reads is a key of
    each run the route answers, with the type the panel reads it as, and the panel shows a scheduled run and a
    backfilled one (stored at its past window's end) at their own times, as two series, with the share of
    drifted features of each. The request goes as the data source sends it: the provisioned header with a
    `read` token."""
    from access.service import create_token
    from core.database import open_database
    from monitors.engine import compare
    from monitors.service import record_run
    from registry.service import register_version
    from tests.support import Server, credit_profile, serve_settings
    from training.cluster.datagen import generate

    board = dashboards()["driftwarden-drift.json"]
    (panel,) = [p for p in every_panel(board) if p["title"] == HISTORY_TITLE]
    assert panel["type"] == "timeseries"
    source = api_datasource()
    assert panel["datasource"] == {"type": "yesoreyeram-infinity-datasource", "uid": source["uid"]}
    targets = panel["targets"]
    assert [t["refId"] for t in targets] == ["A", "B"]
    for t in targets:
        assert (t["type"], t["source"], t["parser"], t["url_options"]["method"]) == (
            "json",
            "url",
            "backend",
            "GET",
        )
        assert not t["url_options"]["headers"], "the token is the data source's, never the dashboard's"
    # a path below the data source's URL (the API's base URL), which the plugin puts before it
    assert {t["url"] for t in targets} == {"/v1/models/${model}/drift/history"}
    assert "model" in {v.name for v in variables(board)}

    url = f"sqlite:///{tmp_path / 'dw.db'}"
    db = open_database(url, upgrade=True)
    profile = credit_profile()
    live = compare(profile=profile, columns=generate(2_000, seed=31))
    past = compare(profile=profile, columns=generate(2_000, scenario="covariate_shift", seed=32))
    assert past.dataset.n_drifted > live.dataset.n_drifted
    end = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=3)
    try:
        with db.session() as s:
            register_version(session=s, model_name="credit", version=1, path=tmp_path, metrics={}, lineage={})
            live_id = record_run(session=s, model_name="credit", model_version=1, report=live).id
            past_id = record_run(  # as monitors/backfill.py stores a past window
                session=s,
                model_name="credit",
                model_version=1,
                report=past,
                window_start=end - timedelta(days=1),
                window_end=end,
                extra={"window": {"rows": 2_000, "rows_by_source": {"import": 2_000}}, "backfill": True},
                created_at=end,
            ).id
            token = create_token(session=s, name="grafana", scopes=["read"], expires_in=None).secret
    finally:
        db.dispose()
    assert past_id > live_id  # stored later, yet older by its own time

    # the request the data source makes: its URL plus the target's path and params, its header
    variable = re.compile(r"\$\{(\w+)\}")
    assert variable.findall(source["secureJsonData"]["httpHeaderValue1"]) == ["DW_GRAFANA_TOKEN"]
    header = variable.sub(lambda m: token, source["secureJsonData"]["httpHeaderValue1"])
    name = source["jsonData"]["httpHeaderName1"]
    assert header == f"Bearer {token}"
    with Server(serve_settings(url, tmp_path / "spool", serve_models=["__none__"])) as server:
        routes = httpx.get(server.url + "/openapi.json", timeout=30).json()["paths"]
        answers = []
        for t in targets:
            route = routes[variable.sub(lambda m: "{name}", t["url"])]["get"]
            (limit,) = [q for q in route["parameters"] if q["name"] == "limit"]
            assert int(t["url_options"]["params"][0]["value"]) == limit["schema"]["maximum"]
            path = variable.sub(lambda m: {"model": "credit"}[m.group(1)], t["url"])
            params = {p["key"]: p["value"] for p in t["url_options"]["params"]}
            r = httpx.get(
                server.url + path,
                params=params,
                headers={name: header},
                timeout=30,
            )
            assert r.status_code == 200, r.text
            answers.append(r.json())
        # the limit is the route's largest (the newest 1000 runs): one more is refused
        too_many = {"limit": str(int(params["limit"]) + 1)}
        over = httpx.get(server.url + path, params=too_many, headers={name: header}, timeout=30)
        assert over.status_code == 400, over.text

    scheduled, backfilled = (series(t, answer) for t, answer in zip(targets, answers, strict=True))
    at = {run["run_id"]: datetime.fromisoformat(run["created_at"]) for run in answers[0]["runs"]}
    assert at[past_id] == end and at[live_id] > end
    assert list(scheduled) == ["scheduled runs"] and list(backfilled) == ["backfilled runs"]
    ((live_at, live_share),) = scheduled["scheduled runs"]
    ((past_at, past_share),) = backfilled["backfilled runs"]
    assert (live_at, past_at) == (at[live_id], end)
    assert live_share == pytest.approx(live.dataset.share) and past_share == pytest.approx(past.dataset.share)
    # what the panel draws: the time and the two series, the helper columns hidden, each in time order
    (time_column,) = {c["text"] for t in targets for c in t["columns"] if c["type"] == "timestamp"}
    options = {t["id"]: t["options"] for t in panel["transformations"]}
    hidden = {name for name, hide in options["organize"]["excludeByName"].items() if hide}
    fields = {c["text"] for t in targets for c in [*t["columns"], *t["computed_columns"]]}
    assert fields - hidden == {time_column, "scheduled runs", "backfilled runs"}
    assert options["sortBy"]["sort"] == [{"field": time_column, "desc": False}]
    assert panel["fieldConfig"]["defaults"]["unit"] == "percentunit"

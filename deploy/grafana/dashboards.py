"""The three Grafana dashboards of driftwarden, built in code with grafana-foundation-sdk.

Regenerate the JSON that provisioning loads (``deploy/grafana/dashboards/*.json``) after any change::

    .venv/bin/python -m deploy.grafana.dashboards

``tests/deploy/test_dashboards.py`` regenerates them and compares byte for byte, and the integration test
(``tests/deploy/test_prometheus.py``) evaluates every query below against a real Prometheus scraping a real
server. Every query uses only the metric names that the server and its collectors export (the set ``AGREED``
of ``tests/deploy/promql.py``, which the tests hold every query to); every legend names the labels it shows.

One panel reads the driftwarden API instead of Prometheus: "Drift runs by their own time (backfill included)",
through Grafana's Infinity plugin (``yesoreyeram-infinity-datasource``, provisioned by
``deploy/grafana/provisioning/datasources/driftwarden.yaml``), because a backfilled run is stored at its past
window's end and a Prometheus sample only ever has the time of its scrape. ``tests/deploy/test_dashboards.py``
checks its URL and every column it reads against the real ``GET /v1/models/{name}/drift/history``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DashboardLinkType,
    DataSourceRef,
    DataTransformerConfig,
    Threshold,
    ThresholdsMode,
    ValueMap,
    ValueMappingResult,
    VariableRefresh,
    VariableSort,
)

OUT = Path(__file__).resolve().parent / "dashboards"
# the datasource provisioned by deploy/grafana/provisioning/datasources/prometheus.yaml (fixed uid)
DATASOURCE = DataSourceRef(type_val="prometheus", uid="prometheus")
# the driftwarden API read through the Infinity plugin, provisioned by
# deploy/grafana/provisioning/datasources/driftwarden.yaml (fixed uid; its URL is the API's base URL, so a
# query's URL is a path of the API, and it sends a `read` token)
API_DATASOURCE = DataSourceRef(type_val="yesoreyeram-infinity-datasource", uid="driftwarden-api")
# GET /v1/models/{name}/drift/history: {"model_name": ..., "runs": [{"created_at": ISO 8601, "n_drifted": int,
# "n_features": int, "backfill": bool, ...}, ...]}, newest first, at most 1000 runs (the route's maximum)
HISTORY_PATH = "/v1/models/${model}/drift/history"
HISTORY_LIMIT = 1000
HISTORY_TITLE = "Drift runs by their own time (backfill included)"
HISTORY_ROW = "Drift history (every run at its own time)"
RATE = "$__rate_interval"
TAGS = ["driftwarden"]


@dataclass(frozen=True)
class Query:
    """One PromQL target of a panel and its legend (``{{label}}`` names the labels it must carry)."""

    expr: str
    legend: str


def _targets(queries: Sequence[Query], *, instant: bool = False) -> list[prometheus.Dataquery]:
    out = []
    for i, q in enumerate(queries):
        target = prometheus.Dataquery().expr(q.expr).legend_format(q.legend).ref_id(chr(ord("A") + i))
        out.append(target.instant() if instant else target.range())
    return out


@dataclass(frozen=True)
class Column:
    """One column an Infinity query reads from each row: the row's key, the field's name, its type."""

    selector: str
    text: str
    type: str  # timestamp | number | string | boolean


@dataclass(frozen=True)
class ApiQuery(cogvariants.Dataquery):
    """An Infinity query of a JSON route of the driftwarden API, parsed by the plugin's backend parser: the
    rows under ``root_selector`` become a table of ``columns``, then the ``computed`` columns (expressions
    over the columns' names) are added and ``filter_expression`` keeps the matching rows."""

    ref_id: str
    path: str  # below the data source's URL; ``${var}`` is a dashboard variable
    params: tuple[tuple[str, str], ...]
    root_selector: str
    columns: tuple[Column, ...]
    computed: tuple[Column, ...] = ()
    filter_expression: str = ""

    def to_json(self) -> dict[str, object]:
        def column(c: Column) -> dict[str, str]:
            return {"selector": c.selector, "text": c.text, "type": c.type}

        return {
            "refId": self.ref_id,
            "datasource": API_DATASOURCE,
            "type": "json",
            "source": "url",
            "parser": "backend",
            "format": "table",
            "url": self.path,
            "url_options": {
                "method": "GET",
                "params": [{"key": key, "value": value} for key, value in self.params],
                "headers": [],  # the token is the data source's (secure), never the dashboard's
            },
            "root_selector": self.root_selector,
            "columns": [column(c) for c in self.columns],
            "computed_columns": [column(c) for c in self.computed],
            "filterExpression": self.filter_expression,
        }


class _Target(cogbuilder.Builder[cogvariants.Dataquery]):
    def __init__(self, query: cogvariants.Dataquery) -> None:
        self.query = query

    def build(self) -> cogvariants.Dataquery:
        return self.query


class _Ids:
    """Panel ids, unique within a dashboard and stable between runs."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> int:
        self.n += 1
        return self.n


def _series(
    ids: _Ids,
    title: str,
    description: str,
    queries: Sequence[Query],
    *,
    unit: str = "short",
    width: int = 12,
    height: int = 8,
    minimum: float | None = None,
    maximum: float | None = None,
) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .id(ids())
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(list(_targets(queries)))
        .unit(unit)
        .span(width)
        .height(height)
        .line_width(1)
        .fill_opacity(10)
        .legend(
            common_builders.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .tooltip(common_builders.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI))
    )
    if minimum is not None:
        panel = panel.min(minimum)
    if maximum is not None:
        panel = panel.max(maximum)
    return panel


def _thresholds(steps: Sequence[tuple[float | None, str]]) -> dash.ThresholdsConfig:
    return (
        dash.ThresholdsConfig()
        .mode(ThresholdsMode.ABSOLUTE)
        .steps([Threshold(value=value, color=color) for value, color in steps])
    )


def _stat(
    ids: _Ids,
    title: str,
    description: str,
    queries: Sequence[Query],
    *,
    unit: str = "short",
    width: int = 6,
    height: int = 4,
    thresholds: Sequence[tuple[float | None, str]] = ((None, "green"),),
    mapping: dict[str, tuple[str, str]] | None = None,
) -> stat.Panel:
    panel = (
        stat.Panel()
        .id(ids())
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(list(_targets(queries, instant=True)))
        .unit(unit)
        .span(width)
        .height(height)
        .thresholds(_thresholds(thresholds))
        .color_mode(common.BigValueColorMode.BACKGROUND)
        .graph_mode(common.BigValueGraphMode.NONE)
        .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
    )
    if mapping:
        options = {
            value: ValueMappingResult(text=text, color=color) for value, (text, color) in mapping.items()
        }
        panel = panel.mappings([ValueMap(options=options)])
    return panel


UP_DOWN = {"1": ("up", "green"), "0": ("DOWN", "red")}
RED_WHEN_ZERO = ((None, "red"), (1.0, "green"))


def _variable(
    name: str, label: str, query: str, *, multi: bool = False, include_all: bool = False
) -> dash.QueryVariable:
    return (
        dash.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(query)
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(multi)
        .include_all(include_all)
    )


def _dashboard(uid: str, title: str, description: str) -> dash.Dashboard:
    return (
        dash.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(TAGS)
        .editable()
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("browser")
        .link(
            dash.DashboardLink("driftwarden dashboards")
            .type(DashboardLinkType.DASHBOARDS)
            .tags(TAGS)
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
    )


# ---------------------------------------------------------------------------------------------- service


def _rate(metric: str, by: str, selector: str = "") -> str:
    return f"sum by ({by}) (rate({metric}{selector}[{RATE}]))"


def _quantile(q: float, metric: str, by: str, selector: str = "") -> Query:
    expr = f"histogram_quantile({q}, sum by (le, {by}) (rate({metric}_bucket{selector}[{RATE}])))"
    legend = " ".join("{{" + label.strip() + "}}" for label in by.split(","))
    return Query(expr, f"p{round(q * 100)} {legend}")


def service_overview() -> dash.Dashboard:
    """Traffic, errors, latency percentiles, batch sizes and the prediction log pipeline."""
    ids = _Ids()
    m = '{model=~"$model"}'
    req = "driftwarden_requests_total"
    every = _rate(req, "model", m)
    errors_5xx = _rate(req, "model", '{model=~"$model", code=~"5.."}')
    errors_4xx = _rate(req, "model", '{model=~"$model", code=~"4.."}')
    within_slo = _rate("driftwarden_request_duration_seconds_bucket", "model", '{model=~"$model", le="0.25"}')
    all_requests = _rate("driftwarden_request_duration_seconds_count", "model", m)
    predictions = _rate("driftwarden_predictions_total", "model", m)
    board = _dashboard(
        "driftwarden-service",
        "driftwarden / Service overview",
        "Serving traffic, errors, latency, micro-batching and the prediction log (driftwarden serve).",
    ).with_variable(
        _variable(
            "model", "Model", "label_values(driftwarden_requests_total, model)", multi=True, include_all=True
        )
    )
    board = (
        board.with_row(dash.Row("Traffic"))
        .with_panel(
            _series(
                ids,
                "Requests per second",
                "Prediction requests answered, by model and protocol (v1: TF Serving REST, v2: OIP).",
                [Query(_rate(req, "model, protocol", m), "{{model}} {{protocol}}")],
                unit="reqps",
            )
        )
        .with_panel(
            _series(
                ids,
                "Responses by status code",
                "Answers per second by HTTP status: 4xx are refused requests, 5xx server errors.",
                [Query(_rate(req, "model, code", m), "{{model}} {{code}}")],
                unit="reqps",
            )
        )
        .with_panel(
            _series(
                ids,
                "Predictions per second by version",
                "Rows predicted, by the model version that answered them.",
                [
                    Query(
                        _rate("driftwarden_predictions_total", "model, version", m), "{{model}} v{{version}}"
                    )
                ],
            )
        )
        .with_panel(
            _series(
                ids,
                "Requests in flight",
                "Requests being answered right now, by protocol.",
                [Query("sum by (protocol) (driftwarden_requests_in_flight)", "{{protocol}}")],
            )
        )
        .with_panel(
            _stat(
                ids,
                "Serving version",
                "The version each model serves (from the registry).",
                [Query(f"max by (model) (driftwarden_model_serving_version{m})", "{{model}}")],
                width=8,
            )
        )
        .with_panel(
            _stat(
                ids,
                "Loaded versions",
                "Versions loaded in the API process (1 per loaded version).",
                [Query(f"max by (model, version) (driftwarden_model_loaded{m})", "{{model}} v{{version}}")],
                width=8,
                thresholds=RED_WHEN_ZERO,
            )
        )
        .with_panel(
            _stat(
                ids,
                "Model load failures (1h)",
                "Failed loads of a version in the last hour (the previous version keeps serving).",
                [
                    Query(
                        f"sum by (model) (increase(driftwarden_model_load_failures_total{m}[1h]))"
                        f" or sum by (model) (increase(driftwarden_model_loads_total{m}[1h])) * 0",
                        "{{model}}",
                    )
                ],
                width=8,
                thresholds=((None, "green"), (1.0, "red")),
            )
        )
    )
    board = (
        board.with_row(dash.Row("Errors"))
        .with_panel(
            _series(
                ids,
                "Server error ratio (5xx)",
                "Share of requests answered with a 5xx; the DriftwardenHighErrorRate alert fires above 5 %.",
                [
                    Query(
                        f"({errors_5xx} or {every} * 0) / {every}",
                        "{{model}}",
                    )
                ],
                unit="percentunit",
                minimum=0,
            )
        )
        .with_panel(
            _series(
                ids,
                "Refused request ratio (4xx)",
                "Share of requests refused as invalid: contract violations, unknown models, bad bodies.",
                [
                    Query(
                        f"({errors_4xx} or {every} * 0) / {every}",
                        "{{model}}",
                    )
                ],
                unit="percentunit",
                minimum=0,
            )
        )
        .with_panel(
            _series(
                ids,
                "Contract violations by feature and rule",
                "Rows refused by the input contract (policy reject), per second.",
                [
                    Query(
                        _rate("driftwarden_contract_violations_total", "model, feature, rule", m),
                        "{{model}} {{feature}} {{rule}}",
                    )
                ],
            )
        )
        .with_panel(
            _series(
                ids,
                "Contract flags and output violations",
                "Rows accepted with a flag (policy flag) and model outputs outside their contract, per s.",
                [
                    Query(
                        _rate("driftwarden_contract_flags_total", "model, feature, rule", m),
                        "flag {{model}} {{feature}} {{rule}}",
                    ),
                    Query(
                        _rate("driftwarden_output_violations_total", "model, rule", m)
                        + f" or {predictions} * 0",
                        "output {{model}} {{rule}}",
                    ),
                ],
            )
        )
    )
    board = (
        board.with_row(dash.Row("Latency"))
        .with_panel(
            _series(
                ids,
                "Request latency",
                "Whole request, p50/p90/p99 by protocol. The latency SLO: 99 % of requests within 250 ms.",
                [
                    _quantile(q, "driftwarden_request_duration_seconds", "model, protocol", m)
                    for q in (0.5, 0.9, 0.99)
                ],
                unit="s",
            )
        )
        .with_panel(
            _series(
                ids,
                "Latency SLO: requests within 250 ms",
                "Share of requests answered within 250 ms (the SLO target is 99 %).",
                [
                    Query(
                        f"{within_slo} / {all_requests}",
                        "{{model}}",
                    )
                ],
                unit="percentunit",
                maximum=1,
            )
        )
        .with_panel(
            _series(
                ids,
                "Micro-batcher queue wait",
                "Time a request waits in the micro-batcher before its batch runs, p50/p99.",
                [_quantile(q, "driftwarden_batch_queue_seconds", "model", m) for q in (0.5, 0.99)],
                unit="s",
            )
        )
        .with_panel(
            _series(
                ids,
                "Model call",
                "Duration of one model call on a batch, p50/p99.",
                [_quantile(q, "driftwarden_model_call_seconds", "model", m) for q in (0.5, 0.99)],
                unit="s",
            )
        )
        .with_panel(
            _series(
                ids,
                "Batch size",
                "Rows per model call: the mean and the p99 (micro-batching merges concurrent requests).",
                [
                    Query(
                        f"{_rate('driftwarden_batch_rows_sum', 'model', m)}"
                        f" / {_rate('driftwarden_batch_rows_count', 'model', m)}",
                        "mean {{model}}",
                    ),
                    _quantile(0.99, "driftwarden_batch_rows", "model", m),
                ],
                width=24,
            )
        )
    )
    log = "driftwarden_prediction_log"
    board = (
        board.with_row(dash.Row("Prediction log"))
        .with_panel(
            _series(
                ids,
                "Rows written, replayed, spooled, dropped",
                "Prediction log rows per second: written to the database, replayed from the spool, spooled "
                "while the database was unavailable, and dropped (should stay 0).",
                [
                    Query(f"sum by (job) (rate({log}_rows_{what}_total[{RATE}]))", f"{what} {{{{job}}}}")
                    for what in ("written", "replayed", "spooled", "dropped")
                ],
                unit="short",
            )
        )
        .with_panel(
            _series(
                ids,
                "Writer queue and spool",
                "Rows waiting in the writer queue and in the on-disk spool.",
                [
                    Query(f"sum by (job) ({log}_queue_rows)", "queue {{job}}"),
                    Query(f"sum by (job) ({log}_spool_rows)", "spool {{job}}"),
                ],
            )
        )
        .with_panel(
            _series(
                ids,
                "Flush latency",
                "Duration of one batch write to the database, p50/p99.",
                [_quantile(q, f"{log}_flush_duration_seconds", "job") for q in (0.5, 0.99)],
                unit="s",
                width=6,
            )
        )
        .with_panel(
            _series(
                ids,
                "Oldest spooled row",
                "Age of the oldest row in the spool (0 when empty): how far behind the log is.",
                [Query(f"max by (job) ({log}_spool_oldest_age_seconds)", "{{job}}")],
                unit="s",
                width=6,
            )
        )
        .with_panel(
            _series(
                ids,
                "Write errors",
                "Failed database writes per second (their rows go to the spool).",
                [Query(f"sum by (job) (rate({log}_write_errors_total[{RATE}]))", "{{job}}")],
                width=6,
            )
        )
        .with_panel(
            _series(
                ids,
                "Spool size",
                "Bytes the spool takes on disk.",
                [Query(f"sum by (job) ({log}_spool_bytes)", "{{job}}")],
                unit="bytes",
                width=6,
            )
        )
    )
    return board


# ------------------------------------------------------------------------------------------------ drift


def model_drift_quality() -> dash.Dashboard:
    """Per model and feature: drift statistics over time, drifted share, performance, label coverage; per
    model: open alerts and retraining jobs."""
    ids = _Ids()
    m = '{model="$model"}'
    mf = '{model="$model", feature=~"$feature"}'
    board = (
        _dashboard(
            "driftwarden-drift",
            "driftwarden / Model drift & quality",
            "The latest stored monitor run of each model: data drift per feature, prediction drift, data "
            "quality, estimated (CBPE / DLE) and realized performance, label coverage; its open alerts and "
            "retraining jobs.",
        )
        .with_variable(_variable("model", "Model", "label_values(driftwarden_dataset_drift_share, model)"))
        .with_variable(
            _variable(
                "feature",
                "Feature",
                'label_values(driftwarden_drift_statistic{model="$model"}, feature)',
                multi=True,
                include_all=True,
            )
        )
    )
    board = (
        board.with_row(dash.Row("Dataset"))
        .with_panel(
            _stat(
                ids,
                "Dataset drift",
                "Verdict of the latest monitor run: drifted when the share of drifted features passes the "
                "model's threshold.",
                [Query(f"max by (model) (driftwarden_dataset_drifted{m})", "{{model}}")],
                mapping={"0": ("stable", "green"), "1": ("DRIFTED", "red")},
                width=4,
            )
        )
        .with_panel(
            _stat(
                ids,
                "Drifted features",
                "Share of the model's features whose drift test flagged them.",
                [Query(f"max by (model) (driftwarden_dataset_drift_share{m})", "{{model}}")],
                unit="percentunit",
                thresholds=((None, "green"), (0.3, "orange"), (0.5, "red")),
                width=4,
            )
        )
        .with_panel(
            _stat(
                ids,
                "Prediction drift",
                "Verdict on the model's output distribution against the reference predictions.",
                [Query(f"max by (model) (driftwarden_prediction_drifted{m})", "{{model}}")],
                mapping={"0": ("stable", "green"), "1": ("DRIFTED", "red")},
                width=4,
            )
        )
        .with_panel(
            _stat(
                ids,
                "Last monitor run",
                "Time since the latest stored monitor run (the DriftwardenMonitorRunsStale alert fires "
                "after 30 minutes).",
                [
                    Query(
                        f"time() - max by (model) (driftwarden_monitor_last_run_timestamp_seconds{m})",
                        "{{model}}",
                    )
                ],
                unit="s",
                thresholds=((None, "green"), (900.0, "orange"), (1800.0, "red")),
                width=4,
            )
        )
        .with_panel(
            _stat(
                ids,
                "Window",
                "Predictions in the window of the latest run.",
                [Query(f"max by (model) (driftwarden_monitor_window_rows{m})", "{{model}}")],
                width=4,
            )
        )
        .with_panel(
            _stat(
                ids,
                "Run duration",
                "How long the latest monitor run took.",
                [Query(f"max by (model) (driftwarden_monitor_run_duration_seconds{m})", "{{model}}")],
                unit="s",
                width=4,
            )
        )
        .with_panel(
            _series(
                ids,
                "Drifted-feature share over time",
                "Share of drifted features of the latest monitor run, as each scrape saw it: a run shows "
                "from when it is stored. Backfilled runs (stored at their past window's end) never replace "
                "a newer run here; GET /v1/models/{name}/drift/history lists every run by its own time, and "
                f"the panel '{HISTORY_TITLE}' (row '{HISTORY_ROW}', at the bottom) plots it.",
                [Query(f"max by (model) (driftwarden_dataset_drift_share{m})", "{{model}}")],
                unit="percentunit",
                minimum=0,
                maximum=1,
            )
        )
        .with_panel(
            _series(
                ids,
                "Prediction drift statistic",
                "Drift statistic of the model's output against the reference predictions.",
                [Query(f"max by (model) (driftwarden_prediction_drift_statistic{m})", "{{model}}")],
            )
        )
    )
    board = (
        board.with_row(dash.Row("Features"))
        .with_panel(
            _series(
                ids,
                "Drift statistic by feature",
                "The statistic of each feature's drift test (the test is in the legend) over time.",
                [
                    Query(
                        f"max by (model, feature, test) (driftwarden_drift_statistic{mf})",
                        "{{feature}} ({{test}})",
                    )
                ],
            )
        )
        .with_panel(
            _series(
                ids,
                "Drift p-value by feature",
                "p-value of each feature's drift test (low: the window differs from the reference).",
                [Query(f"max by (model, feature) (driftwarden_drift_p_value{mf})", "{{feature}}")],
                minimum=0,
                maximum=1,
            )
        )
        .with_panel(
            _series(
                ids,
                "Effect size by feature",
                "How large the shift is, whatever the window size.",
                [Query(f"max by (model, feature) (driftwarden_drift_effect_size{mf})", "{{feature}}")],
            )
        )
        .with_panel(
            _series(
                ids,
                "Drift verdict by feature",
                "1 while the feature is flagged as drifted.",
                [Query(f"max by (model, feature) (driftwarden_drift_detected{mf})", "{{feature}}")],
                minimum=0,
                maximum=1,
            )
        )
        .with_panel(
            _series(
                ids,
                "Data quality",
                "Share of rows failing each data-quality check (missing, out of range, unseen category).",
                [
                    Query(
                        f"max by (model, feature, check) (driftwarden_data_quality_rate{mf})",
                        "{{feature}} {{check}}",
                    )
                ],
                unit="percentunit",
                minimum=0,
                width=24,
            )
        )
    )
    board = (
        board.with_row(dash.Row("Performance"))
        .with_panel(
            _series(
                ids,
                "Estimated vs realized performance",
                "Performance estimated without labels (CBPE for a classifier, direct loss estimation for a "
                "regression), realized on the labels received, and the reference measured on held-out "
                "training data: each task's metrics (roc_auc..., macro_f1 and log_loss, mae and rmse).",
                [
                    Query(
                        'max by (model, metric, source) (driftwarden_model_performance{model="$model", '
                        'source="estimated"})',
                        "{{metric}} estimated",
                    ),
                    Query(
                        'max by (model, metric, source) (driftwarden_model_performance{model="$model", '
                        'source="realized"})',
                        "{{metric}} realized",
                    ),
                    Query(
                        f"max by (model, metric) (driftwarden_model_reference_performance{m})",
                        "{{metric}} reference",
                    ),
                ],
                width=24,
            )
        )
        .with_panel(
            _series(
                ids,
                "Label coverage",
                "Share of the window's predictions with a ground-truth label.",
                [Query(f"max by (model) (driftwarden_label_coverage_ratio{m})", "{{model}}")],
                unit="percentunit",
                minimum=0,
                maximum=1,
            )
        )
        .with_panel(
            _series(
                ids,
                "Labels received",
                "Ground-truth labels posted to /feedback per second, by outcome.",
                [
                    Query(
                        _rate("driftwarden_feedback_labels_total", "model, outcome", m),
                        "{{model}} {{outcome}}",
                    )
                ],
            )
        )
    )
    board = (
        board.with_row(dash.Row("Alerts and retraining"))
        .with_panel(
            _stat(
                ids,
                "Firing alerts",
                "The model's firing alerts by severity: its own rules, the validation gate and Alertmanager "
                "(silenced ones included). GET /v1/alerts?model=... lists them.",
                [
                    Query(
                        'max by (model, severity) (driftwarden_alerts{model="$model", state="firing"})',
                        "{{severity}}",
                    )
                ],
                thresholds=((None, "green"), (1.0, "red")),
                width=6,
            )
        )
        .with_panel(
            _series(
                ids,
                "Open alerts by severity",
                "Pending and firing alerts of the model by severity, and how many of them a silence mutes.",
                [
                    Query(
                        'max by (model, severity, state) (driftwarden_alerts{model="$model"})',
                        "{{severity}} {{state}}",
                    ),
                    Query(f"max by (model) (driftwarden_alerts_silenced{m})", "silenced {{model}}"),
                ],
                minimum=0,
                width=18,
            )
        )
        .with_panel(
            _series(
                ids,
                "Retraining jobs by state",
                "The model's retraining jobs: queued, running and validating now; promoted, passed, "
                "undecided, rejected, failed and cancelled in the last 24 hours.",
                [Query(f"max by (model, state) (driftwarden_training_jobs{m})", "{{state}}")],
                minimum=0,
                width=12,
            )
        )
        .with_panel(
            _stat(
                ids,
                "Running retraining job",
                "How long the model's running or validating job has run since a worker claimed it (0: none "
                "runs); the DriftwardenRetrainingStuck alert fires after 2 hours.",
                [Query(f"max by (model) (driftwarden_training_job_running_seconds{m})", "{{model}}")],
                unit="s",
                thresholds=((None, "green"), (3600.0, "orange"), (7200.0, "red")),
                width=4,
            )
        )
        .with_panel(
            _stat(
                ids,
                "Latest retraining outcomes",
                "When the model's latest job ended in each final state (never: no job ended so).",
                [
                    Query(
                        "max by (model, state) "
                        f"(driftwarden_training_last_job_finished_timestamp_seconds{m}) * 1000",
                        "{{state}}",
                    )
                ],
                unit="dateTimeFromNow",
                thresholds=((None, "blue"),),
                mapping={"0": ("never", "text")},
                width=8,
            )
        )
    )
    return _run_history(_sources(board, ids, m), ids)


RUN_COLUMNS = (
    Column("created_at", "created_at", "timestamp"),
    Column("n_drifted", "n_drifted", "number"),
    Column("n_features", "n_features", "number"),
    Column("backfill", "backfill", "boolean"),
)


def _history_query(ref_id: str, series: str, *, backfill: bool) -> ApiQuery:
    """The model's runs of one kind (backfilled or not), each at its own ``created_at`` with its share of
    drifted features as the field ``series``."""
    return ApiQuery(
        ref_id=ref_id,
        path=HISTORY_PATH,
        params=(("limit", str(HISTORY_LIMIT)),),
        root_selector="runs",
        columns=RUN_COLUMNS,
        computed=(Column("n_drifted / n_features", series, "number"),),
        filter_expression=f"backfill == {str(backfill).lower()}",
    )


def _run_history(board: dash.Dashboard, ids: _Ids) -> dash.Dashboard:
    """A collapsed row with the model's runs by their own time, read from the drift history route: scheduled
    and backfilled runs as two series. Collapsed, it calls the API only when opened (each refresh reads up to
    1000 runs twice)."""
    helpers = {c.text: True for c in RUN_COLUMNS if c.type != "timestamp"}
    panel = (
        timeseries.Panel()
        .id(ids())
        .title(HISTORY_TITLE)
        .description(
            "Each monitor run of the model at its own time (created_at), from GET "
            "/v1/models/{name}/drift/history (the newest 1000 runs) through the Infinity data source "
            "'driftwarden API': the share of drifted features (n_drifted / n_features), scheduled runs "
            "and backfilled ones (driftwarden monitor --backfill: a past window, stored at its end) as two "
            "series. The Prometheus panels cannot show a backfilled run: a scrape's sample has the scrape's "
            "time. Last 30 days, whatever the dashboard's range."
        )
        .datasource(API_DATASOURCE)
        .targets(
            [
                _Target(_history_query("A", "scheduled runs", backfill=False)),
                _Target(_history_query("B", "backfilled runs", backfill=True)),
            ]
        )
        .transformations(
            [
                DataTransformerConfig(id_val="organize", options={"excludeByName": helpers}),
                DataTransformerConfig(
                    id_val="sortBy", options={"sort": [{"field": "created_at", "desc": False}]}
                ),
            ]
        )
        .time_from("30d")
        .unit("percentunit")
        .min(0)
        .max(1)
        .span(24)
        .height(8)
        .line_width(1)
        .fill_opacity(0)
        .show_points(common.VisibilityMode.ALWAYS)
        .point_size(6)
        .legend(
            common_builders.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .tooltip(common_builders.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI))
    )
    return board.with_row(dash.Row(HISTORY_ROW).with_panel(panel))


def _sources(board: dash.Dashboard, ids: _Ids, m: str) -> dash.Dashboard:
    """The row of the model's predictions by source: in the latest run's window, and per second now."""
    served = f'label_replace(rate(driftwarden_predictions_total{m}[{RATE}]), "source", "serve", "", "")'
    return (
        board.with_row(dash.Row("Predictions by source"))
        .with_panel(
            _series(
                ids,
                "Predictions by source",
                "The latest monitor run's window by the source of its predictions: serve (answered "
                "here), ingest (POST /v1/models/{name}/predictions), cloudevents (KServe's inference "
                "logger), import (the predictions import command, which exports no counter of its own: its "
                "rows show here).",
                [
                    Query(
                        f"max by (model, source) (driftwarden_monitor_window_predictions{m})",
                        "{{source}}",
                    )
                ],
                minimum=0,
            )
        )
        .with_panel(
            _series(
                ids,
                "Predictions per second by source",
                "Predictions logged per second now: served by this API (serve) and ingested from other "
                "serving stacks (ingest, cloudevents). Imported files are counted in the window only.",
                [
                    Query(_rate("driftwarden_ingested_predictions_total", "model, source", m), "{{source}}"),
                    Query(f"sum by (model, source) ({served})", "{{source}}"),
                ],
                minimum=0,
            )
        )
    )


# ---------------------------------------------------------------------------------------- infrastructure


def infrastructure() -> dash.Dashboard:
    """Database, training cluster, queues (with the webhook outbox) and the API processes' resources, with the
    health checks."""
    ids = _Ids()
    job = '{job="driftwarden"}'
    board = _dashboard(
        "driftwarden-infra",
        "driftwarden / Infrastructure",
        "Health checks, database, training cluster, queues (with the webhook outbox) and resources of the "
        "driftwarden API processes.",
    )
    board = (
        board.with_row(dash.Row("Health checks"))
        .with_panel(
            _stat(
                ids,
                "API targets up",
                "Prometheus can scrape the API (every replica).",
                [Query(f"up{job}", "{{instance}}")],
                mapping=UP_DOWN,
                thresholds=RED_WHEN_ZERO,
                width=6,
            )
        )
        .with_panel(
            _stat(
                ids,
                "Health checks",
                "Last result of each health check (the same checks /readyz answers).",
                [Query("min by (check) (driftwarden_health_check_up)", "{{check}}")],
                mapping=UP_DOWN,
                thresholds=RED_WHEN_ZERO,
                width=18,
            )
        )
        .with_panel(
            _series(
                ids,
                "Health check duration",
                "Duration of the last run of each check (a check slower than its timeout fails).",
                [Query("max by (check) (driftwarden_health_check_duration_seconds)", "{{check}}")],
                unit="s",
                width=24,
            )
        )
    )
    board = (
        board.with_row(dash.Row("Database"))
        .with_panel(
            _series(
                ids,
                "Database reachable",
                "1 while the database answers: the health check, and the prediction log writer's view.",
                [
                    Query("min by (instance) (driftwarden_database_up)", "health check {{instance}}"),
                    Query(
                        "min by (instance) (driftwarden_prediction_log_database_up)",
                        "log writer {{instance}}",
                    ),
                ],
                minimum=0,
                maximum=1,
                width=8,
            )
        )
        .with_panel(
            _series(
                ids,
                "Database round trip",
                "Round-trip time of the database health check's query.",
                [Query("max by (instance) (driftwarden_database_rtt_seconds)", "{{instance}}")],
                unit="s",
                width=8,
            )
        )
        .with_panel(
            _series(
                ids,
                "Prediction log write latency",
                "Duration of one batch write of the prediction log to the database, p50/p99.",
                [
                    _quantile(q, "driftwarden_prediction_log_flush_duration_seconds", "instance")
                    for q in (0.5, 0.99)
                ],
                unit="s",
                width=8,
            )
        )
        .with_panel(
            _series(
                ids,
                "Prediction log write errors",
                "Failed database writes of the prediction log per second (the rows go to the spool).",
                [
                    Query(
                        f"sum by (instance) (rate(driftwarden_prediction_log_write_errors_total[{RATE}]))",
                        "{{instance}}",
                    )
                ],
                width=24,
            )
        )
    )
    board = (
        board.with_row(dash.Row("Training cluster"))
        .with_panel(
            _stat(
                ids,
                "Cluster nodes reachable",
                "Every node of the training cluster (DRIFTWARDEN_CLUSTER_SPEC) accepts connections.",
                [Query('min by (check) (driftwarden_health_check_up{check="cluster"})', "{{check}}")],
                mapping=UP_DOWN,
                thresholds=RED_WHEN_ZERO,
                width=8,
            )
        )
        .with_panel(
            _series(
                ids,
                "Cluster check duration",
                "Time to reach every node of the training cluster.",
                [
                    Query(
                        'max by (check) (driftwarden_health_check_duration_seconds{check="cluster"})',
                        "{{check}}",
                    )
                ],
                unit="s",
                width=16,
            )
        )
    )
    board = (
        board.with_row(dash.Row("Queues"))
        .with_panel(
            _series(
                ids,
                "Prediction log queue and spool",
                "Rows waiting for the database: in memory (queue) and on disk (spool).",
                [
                    Query("sum by (instance) (driftwarden_prediction_log_queue_rows)", "queue {{instance}}"),
                    Query("sum by (instance) (driftwarden_prediction_log_spool_rows)", "spool {{instance}}"),
                ],
                width=8,
            )
        )
        .with_panel(
            _series(
                ids,
                "Oldest spooled row",
                "Age of the oldest row waiting in the spool (0 when it is empty).",
                [
                    Query(
                        "max by (instance) (driftwarden_prediction_log_spool_oldest_age_seconds)",
                        "{{instance}}",
                    )
                ],
                unit="s",
                width=8,
            )
        )
        .with_panel(
            _series(
                ids,
                "Requests in flight",
                "Requests being answered right now (waiting in the micro-batcher or in a model call).",
                [Query("sum by (instance) (driftwarden_requests_in_flight)", "{{instance}}")],
                width=4,
            )
        )
        .with_panel(
            _series(
                ids,
                "Micro-batcher wait",
                "p99 of the time a request waits in the micro-batcher queue.",
                [_quantile(0.99, "driftwarden_batch_queue_seconds", "instance")],
                unit="s",
                width=4,
            )
        )
        .with_panel(
            _series(
                ids,
                "Webhook outbox",
                "Alert and job messages of the outbox by state: pending (due or retrying), delivered, dead "
                "(no 2xx after DRIFTWARDEN_WEBHOOK_MAX_ATTEMPTS; `driftwarden webhooks redeliver`).",
                [Query("max by (state) (driftwarden_webhook_deliveries)", "{{state}}")],
                minimum=0,
                width=12,
            )
        )
        .with_panel(
            _series(
                ids,
                "Oldest pending webhook message",
                "Age of the oldest message waiting in the outbox (0 when none); the "
                "DriftwardenWebhookBacklog alert fires above 10 minutes.",
                [Query("max by (job) (driftwarden_webhook_oldest_pending_age_seconds)", "{{job}}")],
                unit="s",
                minimum=0,
                width=12,
            )
        )
    )
    board = (
        board.with_row(dash.Row("Resources"))
        .with_panel(
            _series(
                ids,
                "CPU",
                "CPU time used per second by each API process.",
                [Query(f"rate(process_cpu_seconds_total{job}[{RATE}])", "{{instance}}")],
                unit="percentunit",
                width=8,
            )
        )
        .with_panel(
            _series(
                ids,
                "Memory",
                "Resident memory of each API process.",
                [Query(f"process_resident_memory_bytes{job}", "{{instance}}")],
                unit="bytes",
                width=8,
            )
        )
        .with_panel(
            _series(
                ids,
                "Open files",
                "File descriptors open, as a share of the process limit.",
                [Query(f"process_open_fds{job} / process_max_fds{job}", "{{instance}}")],
                unit="percentunit",
                width=8,
            )
        )
        .with_panel(
            _series(
                ids,
                "Disk free",
                "Free space on the disks of the data folders (registry, spool); the disk health checks fail "
                "below DRIFTWARDEN_HEALTH_DISK_MIN_FREE_MB.",
                [Query("min by (path) (driftwarden_disk_free_bytes)", "{{path}}")],
                unit="bytes",
                width=24,
            )
        )
    )
    return board


DASHBOARDS = {
    "driftwarden-service.json": service_overview,
    "driftwarden-drift.json": model_drift_quality,
    "driftwarden-infra.json": infrastructure,
}


def render(builder: dash.Dashboard) -> str:
    """The dashboard as provisioning loads it: stable key order, 2-space indent, a final newline."""
    return json.dumps(builder.build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def write(out: Path = OUT) -> list[Path]:
    """Write every dashboard's JSON into ``out``; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, build in DASHBOARDS.items():
        path = out / name
        path.write_text(render(build()))
        paths.append(path)
    return paths


def main(argv: Sequence[str] = ()) -> int:
    out = Path(argv[0]) if argv else OUT
    for path in write(out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

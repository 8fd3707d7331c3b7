"""A real Prometheus scrapes a real driftwarden server: every dashboard and rule query returns series; a real
Alertmanager (configured from ``deploy/alertmanager/``) delivers the firing drift alert to the API.

One module-scoped scenario: a server on SQLite with the session's trained model (monitors run on request,
health checks every second, a configured training cluster that cannot be reached), a ``prometheus`` process
(Debian's) scraping it every second with the rules of ``deploy/prometheus/rules`` evaluated every second
(their ``for:`` shortened to 1 s), and traffic: baseline rows over TF Serving REST and OIP v2, a few of them
ingested as another stack's answers, a flagged row, refused rows (400 on both protocols), a monitor run,
covariate-shifted rows with their labels, and a second run. Then every PromQL expression of every dashboard
panel (template variables substituted from their own queries) and of every alerting rule (comparisons made
``bool``) is evaluated through Prometheus' HTTP API and must return series carrying the labels its legend or
annotations use, and the planted drift must make ``DriftwardenDatasetDrift`` fire. Prometheus sends its alerts
to an ``prometheus-alertmanager`` process (Debian's) whose config is ``deploy/alertmanager/alertmanager.yml``
with the API's address, its bearer token and second-long group timers: the drift alert (label ``action:
retrain``) reaches ``POST /v1/alerts/alertmanager`` and a retraining job of the model results. The API's own
alert rules for the model are set (by ``DRIFTWARDEN_ALERT_RULES_FILE``) without the retrain action, so the job
can only come from Alertmanager; the worker is off, so the job stays queued.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml

from core.network import free_port
from tests.deploy.promql import (
    ALERTMANAGER,
    DEPLOY,
    RULES,
    PanelQuery,
    alerting_rules,
    as_bool,
    dashboards,
    panel_queries,
    rule_labels,
    tool,
    variables,
)
from tests.predictions.logdata import plain
from tests.support import Server, TrainedModels, seed_registry, serve_settings
from training.cluster.datagen import TARGET, generate

TOKEN = "deploy-admin"
AM_TOKEN = "deploy-alertmanager"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
WINDOW = 600
RATE_INTERVAL = "1m"  # what $__rate_interval becomes (Grafana: 4 x the 1 s scrape interval at least)


@dataclass
class Stack:
    server: Server
    prometheus: str  # base URL of the Prometheus HTTP API
    log: Path
    alertmanager_log: Path

    def query(self, expr: str) -> list[dict[str, Any]]:
        r = httpx.get(f"{self.prometheus}/api/v1/query", params={"query": expr}, timeout=30)
        body = r.json()
        assert r.status_code == 200 and body["status"] == "success", (expr, body)
        if body["data"]["resultType"] == "scalar":
            return [{"metric": {}, "value": body["data"]["result"]}]
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def label_values(self, label: str, selector: str) -> list[str]:
        r = httpx.get(
            f"{self.prometheus}/api/v1/label/{label}/values", params={"match[]": selector}, timeout=30
        )
        assert r.status_code == 200, r.text
        values: list[str] = r.json()["data"]
        return values

    def alerts(self) -> list[dict[str, Any]]:
        alerts: list[dict[str, Any]] = httpx.get(f"{self.prometheus}/api/v1/alerts", timeout=30).json()[
            "data"
        ]["alerts"]
        return alerts


def _wait(what: str, ready: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.5)


def _rows(cols: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    names = [k for k in cols if k != TARGET]
    return [{k: plain(cols[k][i]) for k in names} for i in range(len(cols[TARGET]))]


def _predict_v1(client: httpx.Client, rows: list[dict[str, Any]]) -> list[str]:
    ids: list[str] = []
    for lo in range(0, len(rows), 200):
        r = client.post("/v1/models/credit:predict", json={"instances": rows[lo : lo + 200]})
        assert r.status_code == 200, r.text
        ids += r.json()["prediction_ids"]
    return ids


def _ingest(client: httpx.Client, rows: list[dict[str, Any]]) -> None:
    """The rows as another serving stack would report them (its answers: this server's), logged through the
    ingest route (source ``ingest``)."""
    r = client.post("/v1/models/credit:predict", json={"instances": rows})
    assert r.status_code == 200, r.text
    records = [{"inputs": row, "prediction": p} for row, p in zip(rows, r.json()["predictions"], strict=True)]
    r = client.post("/v1/models/credit/predictions", json={"records": records}, headers=AUTH)
    assert r.status_code == 200 and r.json()["stored"] == len(rows), r.text


def _v2_inputs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "name": k,
            "shape": [len(rows)],
            "datatype": "BYTES" if isinstance(rows[0][k], str) else "FP32",
            "data": [r[k] for r in rows],
        }
        for k in rows[0]
    ]


def _traffic(client: httpx.Client, pause: Callable[[], None]) -> None:
    """The scenario's requests, in phases a scrape apart (so every counter moves between scrapes)."""
    baseline = _rows(generate(WINDOW, seed=21))
    _predict_v1(client, baseline[:400])
    pause()
    _ingest(client, baseline[:40])  # the ingested counter and a window of two sources
    for lo in range(400, WINDOW, 50):  # the rest over the Open Inference Protocol
        r = client.post("/v2/models/credit/infer", json={"inputs": _v2_inputs(baseline[lo : lo + 50])})
        assert r.status_code == 200, r.text
    flagged = client.post(
        "/v1/models/credit:predict", json={"instances": [{**baseline[0], "region": "mars"}]}
    )
    assert flagged.status_code == 200, flagged.text
    refused_v1 = client.post("/v1/models/credit:predict", json={"instances": [{**baseline[0], "age": "old"}]})
    assert refused_v1.status_code == 400, refused_v1.text
    bad_v2 = [{**t, "datatype": "FP32"} if t["name"] == "region" else t for t in _v2_inputs(baseline[:1])]
    refused_v2 = client.post("/v2/models/credit/infer", json={"inputs": bad_v2})
    assert refused_v2.status_code == 400, refused_v2.text
    pause()
    run = client.post("/v1/models/credit/monitors:run", headers=AUTH)
    assert run.status_code == 201 and run.json()["dataset_drifted"] is False, run.text
    pause()

    drifted = generate(WINDOW, scenario="covariate_shift", seed=22)
    ids = _predict_v1(client, _rows(drifted))
    labels = [{"prediction_id": pid, "label": int(y)} for pid, y in zip(ids, drifted[TARGET], strict=True)]
    r = client.post("/v1/models/credit/feedback", json={"labels": labels})
    assert r.status_code == 200, r.text
    pause()
    run = client.post("/v1/models/credit/monitors:run", headers=AUTH)
    assert run.status_code == 201 and run.json()["dataset_drifted"] is True, run.text


def _prometheus_files(root: Path, target: str, alertmanager: str) -> Path:
    """The deploy/ config pointed at ``target``, scraping and evaluating every second, ``for:`` 1 s, alerts
    sent to ``alertmanager``."""
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "driftwarden"]
    job["static_configs"] = [{"targets": [target]}]
    config["scrape_configs"] = [job]
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"}
    config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule["for"] = "1s"
    (root / "rules.yml").write_text(yaml.safe_dump(rules))
    config["rule_files"] = [str(root / "rules.yml")]
    (root / "prometheus.yml").write_text(yaml.safe_dump(config))
    return root / "prometheus.yml"


def _alertmanager_file(root: Path, api: str, nowhere: str) -> Path:
    """deploy/alertmanager/alertmanager.yml with the API's address and token, group timers of a second, and
    the example team webhook pointed at a loopback port where nothing listens."""
    config = yaml.safe_load(ALERTMANAGER.read_text())
    config["route"].update(group_wait="1s", group_interval="1s")
    for receiver in config["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            if hook["url"].endswith("/v1/alerts/alertmanager"):
                hook["url"] = f"{api}/v1/alerts/alertmanager"
                hook["http_config"]["authorization"]["credentials"] = AM_TOKEN
            else:
                hook["url"] = f"http://{nowhere}/team"
    path = root / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    check = subprocess.run([tool("amtool"), "check-config", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    return path


def _start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("w") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def stack(trained: TrainedModels, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("stack")
    url = f"sqlite:///{root / 'serve.db'}"
    seed_registry(url, trained, serving=1)
    rules = (
        root / "alert-rules.yml"
    )  # the API's own drift rule only notifies: the job comes from Alertmanager
    rules.write_text("models:\n  credit:\n    - {name: drift, kind: dataset_drift, actions: [notify]}\n")
    settings = serve_settings(
        url,
        root / "spool",
        monitor_enabled=False,
        admin_token=TOKEN,
        alertmanager_token=AM_TOKEN,
        alert_rules_file=rules,
        worker_embedded=False,
        monitor_window_rows=WINDOW,
        monitor_min_rows=50,
        health_interval_s=1.0,
        drift_metrics_cache_s=0.0,
        cluster_spec=json.dumps({"worker": [f"127.0.0.1:{free_port()}"]}),  # nothing listens there
    )
    promtool_dir = root / "prometheus"
    promtool_dir.mkdir()
    with Server(settings) as server:
        am_port, port = free_port(), free_port()
        am_config = _alertmanager_file(root, server.url, f"127.0.0.1:{free_port()}")
        am_log = root / "alertmanager.log"
        am = _start(
            [
                tool("prometheus-alertmanager"),
                f"--config.file={am_config}",
                f"--storage.path={root / 'alertmanager'}",
                f"--web.listen-address=127.0.0.1:{am_port}",
                "--cluster.listen-address=",  # no gossip: one instance
                "--log.level=warn",
            ],
            am_log,
        )
        config = _prometheus_files(promtool_dir, f"127.0.0.1:{server.port}", f"127.0.0.1:{am_port}")
        log = root / "prometheus.log"
        proc = _start(
            [
                tool("prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={promtool_dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            log,
        )
        try:
            stack = Stack(
                server=server, prometheus=f"http://127.0.0.1:{port}", log=log, alertmanager_log=am_log
            )

            def ready() -> bool:
                assert proc.poll() is None, f"prometheus exited:\n{log.read_text()[-3000:]}"
                assert am.poll() is None, f"alertmanager exited:\n{am_log.read_text()[-3000:]}"
                try:
                    return (
                        httpx.get(f"{stack.prometheus}/-/ready", timeout=2).status_code == 200
                        and httpx.get(f"http://127.0.0.1:{am_port}/-/ready", timeout=2).status_code == 200
                    )
                except httpx.TransportError:
                    return False

            _wait("prometheus and alertmanager to start", ready, 30)
            _wait("the first scrape", lambda: [s["value"][1] for s in stack.query("up")] == ["1"], 30)
            with server.client() as client:
                _traffic(client, lambda: time.sleep(1.5))
            # the drifted, labelled run was scraped, and the counters have had scrapes since the traffic
            _wait(
                "the drifted run in Prometheus",
                lambda: (
                    [s["value"][1] for s in stack.query('driftwarden_dataset_drifted{model="credit"}')]
                    == ["1"]
                    and bool(stack.query('driftwarden_model_performance{model="credit", source="realized"}'))
                ),
                30,
            )
            time.sleep(3)
            yield stack
        finally:
            _stop(proc)
            _stop(am)


def _substitute(stack: Stack, query: PanelQuery, values: dict[str, dict[str, str]]) -> str:
    expr = query.expr.replace("$__rate_interval", RATE_INTERVAL)
    for name, value in values.get(query.dashboard, {}).items():
        expr = expr.replace(f"${name}", value)
    assert "$" not in expr, expr
    return expr


def _variable_values(stack: Stack) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Each dashboard's variables as Grafana substitutes them (from their own label_values queries)."""
    out: dict[str, dict[str, str]] = {}
    problems = []
    for name, board in dashboards().items():
        chosen: dict[str, str] = {}
        for var in variables(board):
            selector = var.metric_selector
            for known, value in chosen.items():
                selector = selector.replace(f"${known}", value)
            found = stack.label_values(var.label, selector)
            if not found:
                problems.append(
                    f"{name}: variable {var.name}: label_values({selector}, {var.label}) is empty"
                )
                continue
            # single value: the first (credit); multi-value "All": the regex alternation Grafana sends
            chosen[var.name] = "(" + "|".join(re.escape(v) for v in found) + ")" if var.multi else found[0]
        out[name] = chosen
    return out, problems


def _check(stack: Stack, where: str, expr: str, labels: set[str]) -> str | None:
    """None when ``expr`` returns series, each with ``labels``, and at least one a number (not NaN)."""
    result = stack.query(expr)
    if not result:
        return f"{where}: no series for {expr}"
    missing = [sorted(labels - set(s["metric"])) for s in result if labels - set(s["metric"])]
    if missing:
        return f"{where}: series without labels {missing[0]} (of {sorted(labels)}) for {expr}"
    if all(math.isnan(float(s["value"][1])) for s in result):
        return f"{where}: only NaN for {expr}"
    return None


def test_every_dashboard_query_returns_series_with_its_legend_labels(stack: Stack) -> None:
    values, problems = _variable_values(stack)
    assert values["driftwarden-drift.json"]["model"] == "credit"
    assert "age" in values["driftwarden-drift.json"]["feature"]
    queries = panel_queries()
    assert len(queries) >= 60
    for q in queries:
        problem = _check(stack, f"{q.dashboard} / {q.panel}", _substitute(stack, q, values), q.labels)
        if problem:
            problems.append(problem)
    assert not problems, f"{len(problems)} empty or unlabelled queries:\n" + "\n".join(problems)


def test_every_rule_expression_returns_series_with_its_annotation_labels(stack: Stack) -> None:
    problems = []
    rules = alerting_rules()
    for rule in rules:
        problem = _check(stack, rule["alert"], as_bool(rule["expr"]), rule_labels(rule))
        if problem:
            problems.append(problem)
    assert not problems, f"{len(problems)} of {len(rules)} rules:\n" + "\n".join(problems)


def test_planted_drift_fires_the_dataset_drift_alert(stack: Stack) -> None:
    def firing(name: str) -> list[dict[str, Any]]:
        return [a for a in stack.alerts() if a["labels"]["alertname"] == name and a["state"] == "firing"]

    _wait("DriftwardenDatasetDrift to fire", lambda: bool(firing("DriftwardenDatasetDrift")), 20)
    (alert,) = firing("DriftwardenDatasetDrift")
    assert alert["labels"] == {
        "alertname": "DriftwardenDatasetDrift",
        "model": "credit",
        "severity": "warning",
        "action": "retrain",
    }
    assert alert["annotations"]["runbook_url"] == "docs/operations.md#driftwardendatasetdrift"
    assert re.search(
        r"credit: the input data drifted \(\d+(\.\d+)?% of features\)", alert["annotations"]["summary"]
    )
    # the unreachable training cluster is a failing health check, and it alerts too
    _wait("DriftwardenHealthCheckFailing to fire", lambda: bool(firing("DriftwardenHealthCheckFailing")), 20)
    assert {a["labels"]["check"] for a in firing("DriftwardenHealthCheckFailing")} == {"cluster"}
    # what is healthy does not alert
    active = {a["labels"]["alertname"] for a in stack.alerts()}
    quiet = {"DriftwardenTargetDown", "DriftwardenHighErrorRate", "DriftwardenModelNotLoaded"}
    quiet |= {"DriftwardenDatabaseDown", "DriftwardenPredictionLogRowsDropped", "DriftwardenMonitorRunsStale"}
    # no delivery died or waits, no job ended or runs: the 0s exported for "none" and "never" stay quiet
    quiet |= {"DriftwardenWebhookDeliveriesDead", "DriftwardenWebhookBacklog", "DriftwardenRetrainingStuck"}
    quiet |= {"DriftwardenRetrainingRejected", "DriftwardenRetrainingFailed"}
    assert not active & quiet, active & quiet


def test_a_scrape_of_the_busy_server_passes_promtool_check_metrics(stack: Stack) -> None:
    with stack.server.client() as client:
        scrape = client.get("/metrics")
    assert scrape.status_code == 200
    assert "driftwarden_requests_total" in scrape.text
    proc = subprocess.run(
        [tool("promtool"), "check", "metrics"], input=scrape.text, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and not proc.stdout.strip() and not proc.stderr.strip(), (
        proc.stdout + proc.stderr
    )


def test_alertmanager_delivers_the_drift_alert_and_a_retraining_job_results(stack: Stack) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with stack.server.client() as client:

        def received() -> list[dict[str, Any]]:
            alerts = client.get("/v1/alerts", params={"model": "credit"}, headers=headers).json()["alerts"]
            return [
                a
                for a in alerts
                if a["source"] == "alertmanager" and a["labels"].get("alertname") == "DriftwardenDatasetDrift"
            ]

        def log_tail() -> str:
            return stack.alertmanager_log.read_text()[-3000:]

        deadline = time.monotonic() + 60
        while not received():
            assert time.monotonic() < deadline, f"no Alertmanager delivery in 60 s; its log:\n{log_tail()}"
            time.sleep(0.5)
        (alert,) = received()
        assert alert["state"] == "firing" and alert["model_name"] == "credit"
        assert alert["labels"]["action"] == "retrain" and alert["severity"] == "warning"
        jobs = client.get("/v1/jobs", params={"model": "credit"}, headers=headers).json()["jobs"]
        (job,) = jobs  # one job, though Alertmanager re-sends the group every second
        assert job["trigger"] == "alertmanager" and job["state"] == "queued", job
        # the job came from one of the Alertmanager alerts labelled action=retrain (drift, or the performance
        # drop that the same shifted, labelled traffic causes)
        every = client.get("/v1/alerts", params={"model": "credit"}, headers=headers).json()["alerts"]
        (source,) = [a for a in every if a["id"] == job["alert_id"]]
        assert source["source"] == "alertmanager" and source["labels"]["action"] == "retrain", source
        # the API's own rule saw the same drift and only notified: its alert has no job
        own = client.get("/v1/alerts", params={"model": "credit", "state": "firing"}, headers=headers)
        drift = [a for a in own.json()["alerts"] if a["source"] == "rule" and a["rule_name"] == "drift"]
        assert drift and "retrain" not in (drift[0].get("evidence") or {})

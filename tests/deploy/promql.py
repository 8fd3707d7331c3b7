"""What the deploy/ tests read: the dashboards' and rules' PromQL, the agreed metric names, the tools; and
what the collectors' tests check: their samples, and their exposition against ``promtool check metrics``."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.registry import Collector

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DASHBOARDS = DEPLOY / "grafana" / "dashboards"
RULES = DEPLOY / "prometheus" / "rules" / "driftwarden.yml"
RULE_TESTS = DEPLOY / "prometheus" / "tests" / "driftwarden.test.yml"
ALERTMANAGER = DEPLOY / "alertmanager" / "alertmanager.yml"
OPERATIONS = ROOT / "docs" / "operations.md"

# The metric names the dashboards and alert rules may query (histograms by their base name): the series the
# server and the monitors export; a query naming anything else fails the deploy tests.
AGREED = {
    "driftwarden_requests_total",
    "driftwarden_request_duration_seconds",
    "driftwarden_batch_queue_seconds",
    "driftwarden_model_call_seconds",
    "driftwarden_batch_rows",
    "driftwarden_requests_in_flight",
    "driftwarden_predictions_total",
    "driftwarden_contract_flags_total",
    "driftwarden_contract_violations_total",
    "driftwarden_output_violations_total",
    "driftwarden_feedback_labels_total",
    "driftwarden_model_loads_total",
    "driftwarden_model_load_failures_total",
    "driftwarden_model_serving_version",
    "driftwarden_model_loaded",
    "driftwarden_prediction_log_rows_written_total",
    "driftwarden_prediction_log_rows_replayed_total",
    "driftwarden_prediction_log_rows_spooled_total",
    "driftwarden_prediction_log_rows_dropped_total",
    "driftwarden_prediction_log_write_errors_total",
    "driftwarden_prediction_log_queue_rows",
    "driftwarden_prediction_log_spool_rows",
    "driftwarden_prediction_log_spool_bytes",
    "driftwarden_prediction_log_database_up",
    "driftwarden_prediction_log_flush_duration_seconds",
    "driftwarden_prediction_log_spool_oldest_age_seconds",
    "driftwarden_drift_statistic",
    "driftwarden_drift_p_value",
    "driftwarden_drift_effect_size",
    "driftwarden_drift_detected",
    "driftwarden_dataset_drift_share",
    "driftwarden_dataset_drifted",
    "driftwarden_prediction_drift_statistic",
    "driftwarden_prediction_drifted",
    "driftwarden_data_quality_rate",
    "driftwarden_model_performance",
    "driftwarden_model_reference_performance",
    "driftwarden_label_coverage_ratio",
    "driftwarden_monitor_last_run_timestamp_seconds",
    "driftwarden_monitor_run_duration_seconds",
    "driftwarden_monitor_window_rows",
    # every prediction counted by source: the window's by the log rows' source, the ingested ones live
    "driftwarden_monitor_window_predictions",
    "driftwarden_ingested_predictions_total",
    "driftwarden_health_check_up",
    "driftwarden_health_check_duration_seconds",
    "driftwarden_database_up",
    "driftwarden_database_rtt_seconds",
    "driftwarden_disk_free_bytes",
    # issue 10: the alerts, their webhook outbox and the retraining job queue (read from the database)
    "driftwarden_alerts",
    "driftwarden_alerts_silenced",
    "driftwarden_webhook_deliveries",
    "driftwarden_webhook_oldest_pending_age_seconds",
    "driftwarden_training_jobs",
    "driftwarden_training_job_running_seconds",
    "driftwarden_training_last_job_finished_timestamp_seconds",
}
HISTOGRAMS = {
    "driftwarden_request_duration_seconds",
    "driftwarden_batch_queue_seconds",
    "driftwarden_model_call_seconds",
    "driftwarden_batch_rows",
    "driftwarden_prediction_log_flush_duration_seconds",
}
PROCESS = {
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_open_fds",
    "process_max_fds",
}


def metric_names(expr: str) -> set[str]:
    """The driftwarden_*/process_* metric names an expression reads (histogram series by base name)."""
    names = set()
    for name in re.findall(r"\b((?:driftwarden|process)_[a-z_]+)\b", expr):
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        names.add(base if base in HISTOGRAMS else name)
    if re.search(r"(?<![\w:])up\{", expr):
        names.add("up")
    return names


def _legend_labels(legend: str) -> set[str]:
    return set(re.findall(r"\{\{\s*([a-zA-Z_]\w*)\s*\}\}", legend))


def _kept_labels(expr: str, shown: set[str]) -> set[str]:
    """Of the labels ``shown``, those every aggregation of ``expr`` keeps (``by (...)``)."""
    for group in re.findall(r"\bby\s*\(([^)]*)\)", expr):
        shown &= {label.strip() for label in group.split(",")}
    return shown


@dataclass(frozen=True)
class PanelQuery:
    """One target of one dashboard panel."""

    dashboard: str
    panel: str
    expr: str
    legend: str

    @property
    def labels(self) -> set[str]:
        """The labels its legend shows (and its aggregations keep): every series must carry them."""
        return _kept_labels(self.expr, _legend_labels(self.legend))


def dashboards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))}


def panel_queries() -> list[PanelQuery]:
    out = []
    for name, board in dashboards().items():
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                out.append(PanelQuery(name, panel["title"], target["expr"], target.get("legendFormat", "")))
    return out


@dataclass(frozen=True)
class Variable:
    name: str
    metric_selector: str
    label: str
    multi: bool


def variables(board: dict[str, Any]) -> list[Variable]:
    """The dashboard's query variables, each a ``label_values(selector, label)``."""
    out = []
    for v in board.get("templating", {}).get("list", []):
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", v["query"])
        assert m, f"{v['name']}: not a label_values query: {v['query']}"
        out.append(Variable(v["name"], m.group(1), m.group(2), bool(v.get("multi"))))
    return out


def alerting_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


COMPARISON = re.compile(r"(?<=\s)(==|!=|>=|<=|>|<)(?=\s)")


def as_bool(expr: str) -> str:
    """The rule's expression with every comparison made ``bool``: series whether the alert fires or not."""
    converted, n = COMPARISON.subn(r"\1 bool", expr)
    assert n, f"no comparison in {expr!r}"
    return converted


def rule_labels(rule: dict[str, Any]) -> set[str]:
    """The labels the rule's annotations use (``$labels.x``): every series must carry them."""
    text = " ".join(rule["annotations"].values())
    return set(re.findall(r"\$labels\.(\w+)", text))


def tool(name: str) -> str:
    """A Prometheus tool from Debian (scripts/system-deps.sh installs them); fails, never skips."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"`{name}` is not installed: run `bash scripts/system-deps.sh` (Debian prometheus packages)"
        )
    return path


Labels = tuple[tuple[str, str], ...]


def samples(collector: Collector) -> dict[str, dict[Labels, float]]:
    """Every sample the collector yields, by metric name and sorted labels (a series twice fails)."""
    out: dict[str, dict[Labels, float]] = {}
    for family in collector.collect():
        for s in family.samples:
            by_labels = out.setdefault(s.name, {})
            key = tuple(sorted(s.labels.items()))
            assert key not in by_labels, f"duplicate series {s.name}{key}"
            by_labels[key] = s.value
    return out


def exposition(collector: Collector) -> str:
    """The collector's metrics as the scrape serves them (Prometheus' text format)."""
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry).decode()


def assert_promtool_accepts(text: str) -> None:
    """``promtool check metrics`` finds nothing to say of the exposition ``text``."""
    proc = subprocess.run(
        [tool("promtool"), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and not proc.stdout.strip() and not proc.stderr.strip(), (
        proc.stdout + proc.stderr
    )


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")

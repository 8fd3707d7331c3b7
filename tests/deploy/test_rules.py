"""Alerting rules and Alertmanager config, checked by the real tools (Debian's promtool and amtool)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.promql import (
    AGREED,
    ALERTMANAGER,
    DEPLOY,
    OPERATIONS,
    RULE_TESTS,
    RULES,
    alerting_rules,
    anchor,
    as_bool,
    metric_names,
    tool,
)

# what the issue asks the rules to cover, by alert
REQUIRED = {
    "DriftwardenHighErrorRate",  # error rate
    "DriftwardenLatencyBudgetFastBurn",  # latency SLO burn
    "DriftwardenLatencyBudgetSlowBurn",
    "DriftwardenModelNotLoaded",
    "DriftwardenPredictionLogRowsDropped",  # log rows dropped or spool growing
    "DriftwardenPredictionLogSpoolGrowing",
    "DriftwardenDatabaseDown",
    "DriftwardenDatasetDrift",
    "DriftwardenPerformanceDrop",
    "DriftwardenLabelCoverageLow",
    "DriftwardenMonitorRunsStale",
}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=120)


def test_promtool_check_rules() -> None:
    proc = _run(tool("promtool"), "check", "rules", str(RULES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(alerting_rules())} rules found" in proc.stdout


def test_promtool_unit_tests_pass() -> None:
    proc = _run(tool("promtool"), "test", "rules", str(RULE_TESTS))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_promtool_unit_tests_catch_a_broken_threshold(tmp_path: Path) -> None:
    """The unit tests bite: the same tests against a rule whose threshold moved fail."""
    (tmp_path / "rules").mkdir()
    (tmp_path / "tests").mkdir()
    broken = RULES.read_text().replace("> 0.05\n        for: 5m", "> 0.5\n        for: 5m", 1)
    assert broken != RULES.read_text()
    (tmp_path / "rules" / RULES.name).write_text(broken)
    (tmp_path / "tests" / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    proc = _run(tool("promtool"), "test", "rules", str(tmp_path / "tests" / RULE_TESTS.name))
    assert proc.returncode == 1
    assert "alertname: DriftwardenHighErrorRate" in proc.stdout + proc.stderr


def test_every_alert_has_for_severity_annotations_and_its_runbook_section() -> None:
    rules = alerting_rules()
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names))
    assert set(names) >= REQUIRED
    headings = {anchor(h) for h in re.findall(r"^### (.+)$", OPERATIONS.read_text(), re.M)}
    for rule in rules:
        name = rule["alert"]
        assert re.fullmatch(r"\d+[smh]", rule["for"]), name
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
        assert set(rule["annotations"]) == {"summary", "description", "runbook_url"}, name
        path, _, section = rule["annotations"]["runbook_url"].partition("#")
        assert path == "docs/operations.md" and section == name.lower(), name
        assert section in headings, f"{name}: no runbook section in docs/operations.md"
        assert metric_names(rule["expr"]) <= AGREED | {"up"}, name
        as_bool(rule["expr"])  # every rule compares, so the integration test can evaluate it as bool
    assert len(headings) == len(rules), "a runbook section without its alert"


def test_every_alert_is_unit_tested_firing_and_silent() -> None:
    cases = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fires: set[str] = set()
    silent: set[str] = set()
    for case in cases:
        for check in case["alert_rule_test"]:
            (fires if check.get("exp_alerts") else silent).add(check["alertname"])
    names = {r["alert"] for r in alerting_rules()}
    assert fires == names, f"never shown firing: {names - fires}"
    assert silent == names, f"never shown silent: {names - silent}"
    rules_dir = (RULE_TESTS.parent / yaml.safe_load(RULE_TESTS.read_text())["rule_files"][0]).resolve()
    assert rules_dir == RULES


def test_prometheus_config_loads_the_rules(tmp_path: Path) -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    assert config["rule_files"] == ["/etc/prometheus/rules/*.yml"]  # the compose mount of deploy/prometheus
    config["rule_files"] = [str(RULES.parent / "*.yml")]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    proc = _run(tool("promtool"), "check", "config", str(tmp_path / "prometheus.yml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(alerting_rules())} rules found" in proc.stdout


def test_amtool_check_config() -> None:
    proc = _run(tool("amtool"), "check-config", str(ALERTMANAGER))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout and "2 receivers" in proc.stdout


@pytest.mark.parametrize(
    ("labels", "receivers"),
    [
        (
            ["alertname=DriftwardenHighErrorRate", "severity=critical", "model=credit"],
            "driftwarden,team-oncall",
        ),
        (
            ["alertname=DriftwardenDatasetDrift", "severity=warning", "model=credit"],
            "driftwarden,team-oncall",
        ),
        (["alertname=DriftwardenLabelCoverageLow", "severity=info", "model=credit"], "driftwarden"),
    ],
)
def test_alertmanager_routes_by_severity(labels: list[str], receivers: str) -> None:
    proc = _run(
        tool("amtool"),
        "config",
        "routes",
        "test",
        f"--config.file={ALERTMANAGER}",
        f"--verify.receivers={receivers}",
        *labels,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == receivers


def test_alertmanager_groups_by_model_and_sends_every_alert_to_the_api() -> None:
    config = yaml.safe_load(ALERTMANAGER.read_text())
    assert config["route"]["group_by"] == ["alertname", "model"]
    (own,) = [r for r in config["receivers"] if r["name"] == "driftwarden"]
    assert own["webhook_configs"][0]["url"] == "http://api:8501/v1/alerts/alertmanager"
    assert own["webhook_configs"][0]["send_resolved"] is True

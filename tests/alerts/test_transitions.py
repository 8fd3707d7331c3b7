"""Every source of alerts goes through the same transitions of :mod:`alerts.lifecycle`: a monitor run (the
drift rules), a health pass (the health rules), a finished retraining job (the validation gate's alerts) and
an Alertmanager notification. Each is reported active three times, then over: the alert opens (``pending``
while its rule wants more reports, else ``firing``), advances (one more ``consecutive`` report, one row per
fingerprint), fires, and resolves with ``resolved_at`` set; its history holds exactly those state changes.
And only the lifecycle sets ``state``, ``consecutive`` and ``resolved_at``."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from alerts import flows, service
from alerts.alertmanager import parse_payload
from alerts.models import Alert
from core.config import Settings
from core.database import Database, open_database, utcnow
from core.health import CheckResult
from monitors.flows import Outcome
from monitors.report import report_from_dict
from tests.alerts.conftest import register_model

ALERTS = Path(flows.__file__).parent
ENDS_AT = datetime(2027, 1, 10, 12, 30, tzinfo=UTC)


@pytest.fixture
def three_versions(database_url: str, tmp_path: Path) -> Iterator[Database]:
    """Model ``credit`` with three versions (the gate's jobs name a candidate version)."""
    database = open_database(database_url, upgrade=True)
    register_model(database, tmp_path, versions=3)
    try:
        yield database
    finally:
        database.dispose()


@dataclass
class Source:
    """One source of alerts: how to report its condition active or over, and the rule it follows."""

    name: str
    db: Database
    settings: Settings
    for_runs: int = 1
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)

    def setup(self) -> None:
        kind = {"monitor": "dataset_drift", "health": "health"}.get(self.name)
        if kind is not None:  # the model's own rule, with the for_runs under test
            rule = {"name": "watched", "kind": kind, "for": self.for_runs, "actions": ["notify"]}
            with self.db.session() as s:
                flows.put_model_rules(session=s, model_name="credit", rules_in=[rule])

    def report(self, *, active: bool) -> None:
        getattr(self, f"_{self.name}")(active)

    def _monitor(self, active: bool) -> None:
        report = report_from_dict(self.reports["covariate_shift" if active else "baseline"])
        outcome = Outcome(run_id=1, model_name="credit", model_version=1, window=None, report=report)  # type: ignore[arg-type]
        flows.on_monitor_run(db=self.db, settings=self.settings, outcome=outcome)

    def _health(self, active: bool) -> None:
        check = CheckResult(
            "model:credit", not active, "not loaded" if active else "answers", 0.01, None, 0.0
        )
        flows.on_health_pass(db=self.db, settings=self.settings, results={"model:credit": check})

    def _job(self, active: bool) -> None:
        from training.retraining.models import JobState
        from training.retraining.service import claim, enqueue, finish

        checks = [{"name": "metric", "passed": not active, "figures": {}, "message": "worse"}]
        with self.db.session() as s:
            job_id = enqueue(session=s, model_name="credit", trigger="alert", requested_by="test").job_id
        assert job_id is not None
        with self.db.session() as s:
            assert claim(session=s, worker_id="w1", lease_s=60) is not None
        with self.db.session() as s:
            state = JobState.REJECTED if active else JobState.PROMOTED
            finish(
                session=s,
                job_id=job_id,
                worker_id="w1",
                state=state,
                gate={"checks": checks},
                result_version=2,
            )
        flows.on_job_finished(db=self.db, settings=self.settings, job_id=job_id)

    def _alertmanager(self, active: bool) -> None:
        alert = {
            "status": "firing" if active else "resolved",
            "labels": {"alertname": "DriftwardenDatasetDrift", "model": "credit", "severity": "warning"},
            "annotations": {"summary": "credit: the input data drifted"},
            "startsAt": "2027-01-10T12:00:00Z",
            "endsAt": "0001-01-01T00:00:00Z" if active else ENDS_AT.isoformat(),
            "fingerprint": "c6a6d3f0b8a3e1f2",
        }
        payload = parse_payload(
            {"version": "4", "status": alert["status"], "receiver": "driftwarden", "alerts": [alert]}
        )
        with self.db.session() as s:
            receipt = flows.receive_alertmanager(session=s, settings=self.settings, payload=payload)
        assert receipt.received == 1 and receipt.alerts[0].outcome in ("recorded", "updated", "resolved")


SOURCES = {  # the name of each source, its alerts' source column, the for_runs of its rule
    "monitor run": ("monitor", "rule", 1),
    "monitor run, for 2": ("monitor", "rule", 2),
    "health pass": ("health", "rule", 1),
    "health pass, for 2": ("health", "rule", 2),
    "job finished": ("job", "gate", 1),
    "Alertmanager": ("alertmanager", "alertmanager", 1),
}


def _the_alert(db: Database, source: str) -> Alert:
    """The one alert of the source (one row per fingerprint across every report)."""
    with db.session() as s:
        (alert,) = [a for a in service.list_alerts(session=s, limit=1000) if a.source == source]
        s.expunge(alert)
        return alert


def _changes(db: Database, alert_id: int) -> list[tuple[str | None, str]]:
    with db.session() as s:
        events = service.alert_history(session=s, alert_id=alert_id)
        return [(e.from_state, e.to_state) for e in events if e.from_state != e.to_state]


@pytest.mark.parametrize("case", list(SOURCES))
def test_every_source_opens_advances_and_resolves_alike(
    case: str, three_versions: Database, reports: dict[str, dict[str, Any]]
) -> None:
    name, column, for_runs = SOURCES[case]
    db = three_versions
    settings = Settings(database_url=SecretStr(db.url), retrain_cooldown_s=0)
    source = Source(name, db, settings, for_runs=for_runs, reports=reports)
    source.setup()

    start = utcnow()
    source.report(active=True)  # opens
    alert = _the_alert(db, column)
    assert alert.consecutive == 1 and alert.resolved_at is None, case
    assert alert.state == ("pending" if for_runs > 1 else "firing"), case
    assert (alert.fired_at is None) == (for_runs > 1), case

    source.report(active=True)  # advances (a pending alert fires after for_runs reports)
    alert = _the_alert(db, column)
    assert (alert.state, alert.consecutive, alert.resolved_at) == ("firing", 2, None), case
    assert alert.fired_at is not None, case
    fired_at = alert.fired_at

    source.report(active=True)  # advances again: still one firing row
    alert = _the_alert(db, column)
    assert (alert.state, alert.consecutive, alert.fired_at) == ("firing", 3, fired_at), case

    before = utcnow()
    source.report(active=False)  # resolves
    alert = _the_alert(db, column)
    assert (alert.state, alert.consecutive) == ("resolved", 3), case
    assert alert.resolved_at is not None
    if name == "alertmanager":  # Alertmanager says when it ended
        assert alert.resolved_at == ENDS_AT
    else:
        assert before <= alert.resolved_at <= utcnow(), case
    assert start <= alert.last_evaluated_at, case

    opened = [(None, "pending"), ("pending", "firing")] if for_runs > 1 else [(None, "firing")]
    assert _changes(db, alert.id) == [*opened, ("firing", "resolved")], case


def test_only_the_lifecycle_sets_an_alerts_state_consecutive_and_resolved_at() -> None:
    """An assignment to ``.consecutive`` or ``.resolved_at``, or of an ``AlertState`` to ``.state``, is in
    alerts/lifecycle.py only (``service.add_alert`` inserts a row with the state it is given)."""
    found: dict[str, set[str]] = {}
    value: ast.expr | None
    for path in sorted(ALERTS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets, value = [node.target], node.value
            else:
                continue
            for target in targets:
                if not isinstance(target, ast.Attribute):
                    continue
                assigned = ast.unparse(value) if value is not None else ""
                alert_state = target.attr == "state" and "AlertState" in assigned
                if target.attr in ("consecutive", "resolved_at") or alert_state:
                    found.setdefault(target.attr, set()).add(path.name)
    assert found == {
        "state": {"lifecycle.py"},
        "consecutive": {"lifecycle.py"},
        "resolved_at": {"lifecycle.py"},
    }

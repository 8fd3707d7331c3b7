"""The alerts act on the events other layers publish: monitor runs, and finished retraining jobs (the
validation gate's alerts). Also: the migration builds exactly the tables the models describe."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from pydantic import SecretStr
from sqlalchemy import inspect

from alerts import flows, service
from alerts.specs import WebhookFilter, WebhookSpec
from alerts.webhooks import parse_body
from core import migrate
from core.config import Settings
from core.database import Base, Database, make_engine, open_database
from core.events import JOB_FINISHED, MONITOR_RUN, publish, subscribers
from monitors.flows import Outcome
from monitors.report import report_from_dict
from tests.alerts.conftest import register_model

ALERT_TABLES = {
    "alert_rules",
    "alerts",
    "alert_events",
    "silences",
    "webhook_subscriptions",
    "webhook_deliveries",
}


def test_migration_matches_the_models_and_downgrades(database_url: str) -> None:
    migrate.upgrade(database_url)
    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        ours = [d for d in diff if any(t in repr(d) for t in ALERT_TABLES)]
        assert ours == [], ours
        assert set(inspect(engine).get_table_names()) >= ALERT_TABLES
        indexes = {i["name"]: i for i in inspect(engine).get_indexes("alerts")}
        assert indexes["uq_alerts_open_fingerprint"]["unique"]
    finally:
        engine.dispose()
    migrate.downgrade(database_url, "0007_training_jobs")
    engine = make_engine(database_url)
    try:
        assert not ALERT_TABLES & set(inspect(engine).get_table_names())
    finally:
        engine.dispose()
    migrate.upgrade(database_url)


@pytest.fixture
def installed() -> Iterator[None]:
    flows.install()
    flows.install()  # idempotent
    yield
    from core import events

    for name, handler in (
        (MONITOR_RUN, flows.on_monitor_run),
        (events.HEALTH_PASS, flows.on_health_pass),
        (JOB_FINISHED, flows.on_job_finished),
    ):
        events.subscribe(name, handler)()  # unsubscribe


def test_install_subscribes_each_handler_once(installed: None) -> None:
    assert subscribers(MONITOR_RUN).count(flows.on_monitor_run) == 1
    assert subscribers(JOB_FINISHED).count(flows.on_job_finished) == 1


def test_a_published_monitor_run_is_evaluated(
    installed: None, db: Database, reports: dict[str, dict[str, Any]]
) -> None:
    settings = Settings(database_url=SecretStr(db.url))
    report = report_from_dict(reports["covariate_shift"])
    outcome = Outcome(run_id=3, model_name="credit", model_version=1, window=None, report=report)  # type: ignore[arg-type]
    publish(MONITOR_RUN, db=db, settings=settings, outcome=outcome)
    found = flows.firing_findings(db=db, model_name="credit")
    assert "dataset_drift" in {f["name"] for f in found}


@pytest.fixture
def queue_db(database_url: str, tmp_path: Path) -> Iterator[Database]:
    database = open_database(database_url, upgrade=True)
    register_model(database, tmp_path, versions=3)
    yield database
    database.dispose()


def _finish(db: Database, state: str, gate: dict[str, Any] | None, result_version: int | None) -> int:
    from training.retraining.models import JobState
    from training.retraining.service import claim, enqueue, finish

    with db.session() as s:
        job_id = enqueue(session=s, model_name="credit", trigger="alert", requested_by="test").job_id
    with db.session() as s:
        job = claim(session=s, worker_id="w1", lease_s=60)
        assert job is not None and job.id == job_id
    with db.session() as s:
        assert finish(
            session=s,
            job_id=job_id,
            worker_id="w1",
            state=JobState(state),
            gate=gate,
            result_version=result_version,
        )
    assert job_id is not None
    return job_id


GATE_REJECTED = {
    "checks": [
        {
            "name": "metric",
            "passed": False,
            "figures": {"candidate": 0.81, "serving": 0.9},
            "message": "worse",
        },
        {"name": "calibration", "passed": True, "figures": {}, "message": "ok"},
        {
            "name": "slice:region=north",
            "passed": False,
            "figures": {"candidate": 0.7},
            "message": "slice worse",
        },
    ]
}


def test_a_rejected_job_raises_gate_alerts_until_a_later_job_is_promoted(
    installed: None, queue_db: Database
) -> None:
    from registry.service import promote

    db = queue_db
    settings = Settings(database_url=SecretStr(db.url))
    with db.session() as s:
        hook = flows.add_webhook(session=s, spec=WebhookSpec(url="http://127.0.0.1:9/x")).id
        jobs_only = flows.add_webhook(
            session=s,
            spec=WebhookSpec(url="http://127.0.0.1:9/y", filter=WebhookFilter(events=["job.finished"])),
        ).id
        alerts_only = flows.add_webhook(
            session=s,
            spec=WebhookSpec(url="http://127.0.0.1:9/z", filter=WebhookFilter(events=["alert.firing"])),
        ).id

    rejected = _finish(db, "rejected", GATE_REJECTED, 2)
    publish(JOB_FINISHED, db=db, settings=settings, job_id=rejected)
    with db.session() as s:
        gate = service.open_alerts(session=s, model_name="credit", source="gate")
        assert sorted(a.labels["check"] for a in gate) == ["metric", "slice:region=north"]
        metric = next(a for a in gate if a.labels["check"] == "metric")
        assert metric.state == "firing" and metric.evidence["figures"] == {"candidate": 0.81, "serving": 0.9}
        assert metric.evidence["job_id"] == rejected and metric.rule_name == "retrain_rejected"
        (msg,) = [parse_body(d.payload) for d in service.list_deliveries(session=s, webhook_id=hook)]
        assert service.list_deliveries(session=s, webhook_id=alerts_only) == []
        assert len(service.list_deliveries(session=s, webhook_id=jobs_only)) == 1  # a rejection is a finish
    assert msg["type"] == "job.rejected" and msg["data"]["job"]["id"] == rejected
    assert msg["data"]["job"]["state"] == "rejected" and len(msg["data"]["alerts"]) == 2

    again = _finish(db, "rejected", GATE_REJECTED, 3)  # the same checks fail again: the same alerts
    publish(JOB_FINISHED, db=db, settings=settings, job_id=again)
    with db.session() as s:
        assert len(service.open_alerts(session=s, model_name="credit", source="gate")) == 2
        assert len(service.list_alerts(session=s)) == 2

    promoted = _finish(db, "promoted", {"checks": [{"name": "metric", "passed": True}]}, 3)
    with db.session() as s:
        promote(session=s, model_name="credit", version=3, actor=f"job:{promoted}")
    publish(JOB_FINISHED, db=db, settings=settings, job_id=promoted)
    with db.session() as s:
        assert service.open_alerts(session=s, model_name="credit", source="gate") == []
        rows = service.list_deliveries(session=s, webhook_id=jobs_only)
        finished = [parse_body(d.payload) for d in sorted(rows, key=lambda d: (d.created_at, d.id))]
    assert [m["type"] for m in finished] == ["job.rejected", "job.rejected", "job.finished"]
    assert finished[-1]["data"]["job"]["state"] == "promoted"
    assert {a["state"] for a in finished[-1]["data"]["alerts"]} == {"resolved"}

"""Alert and webhook outbox series: rows seeded through the service functions and flows, a refresh, then a
collect, on both backends; a scrape never reads the database and keeps the last values when it is down."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from alerts import service
from alerts.flows import create_silence
from alerts.metrics import MAX_MODELS_CHECKED, AlertsCollector, families, read_snapshot
from alerts.specs import MatcherSpec, SilenceSpec
from core.config import Settings
from core.database import Database, make_engine, make_session_factory, utcnow
from registry.service import register_version
from tests.deploy.promql import Labels, assert_promtool_accepts, exposition, samples

SEVERITIES = ("critical", "warning", "info")
STATES = ("pending", "firing")


def alert_key(model: str, severity: str, state: str) -> Labels:
    return (("model", model), ("severity", severity), ("state", state))


def _alert(
    db: Database,
    *,
    fp: str,
    model: str | None,
    severity: str,
    state: str,
    source: str = "rule",
    name: str = "dataset_drift",
) -> None:
    labels = {"alertname": name, "severity": severity, **({"model": model} if model else {})}
    with db.session() as s:
        service.add_alert(
            session=s,
            fingerprint=fp,
            model_name=model,
            rule_name=name,
            source=source,
            state=state,
            severity=severity,
            labels=labels,
            annotations={},
            evidence={},
            value=None,
            now=utcnow(),
        )


def test_before_any_alert_every_series_is_zero_for_the_served_model(db: Database) -> None:
    collector = AlertsCollector(db=db, settings=Settings())
    assert samples(collector)["driftwarden_webhook_deliveries"] == {
        (("state", s),): 0.0 for s in ("pending", "delivered", "dead")
    }  # before the first read: zeros, never the database
    collector.refresh()
    got = samples(collector)
    assert got["driftwarden_alerts"] == {
        alert_key("credit", sev, st): 0.0 for sev in SEVERITIES for st in STATES
    }
    assert got["driftwarden_alerts_silenced"] == {(("model", "credit"),): 0.0}
    assert got["driftwarden_webhook_deliveries"] == {
        (("state", s),): 0.0 for s in ("pending", "delivered", "dead")
    }
    assert got["driftwarden_webhook_oldest_pending_age_seconds"] == {(): 0.0}
    assert collector.refreshes == 1 and collector.read_at is not None


def test_open_alerts_by_model_severity_and_state_with_bounded_labels(db: Database, tmp_path: Path) -> None:
    with db.session() as s:  # a second registered model without a serving version
        register_version(session=s, model_name="fraud", version=1, path=tmp_path, metrics={}, lineage={})
    _alert(db, fp="a1", model="credit", severity="warning", state="firing")
    _alert(db, fp="a2", model="credit", severity="warning", state="firing", name="prediction_drift")
    _alert(db, fp="a3", model="credit", severity="critical", state="pending", name="performance_drop")
    _alert(db, fp="a4", model="fraud", severity="info", state="firing", name="feature_drift")
    _alert(db, fp="a5", model=None, severity="critical", state="firing", source="alertmanager", name="X")
    # an Alertmanager alert naming a model the registry does not know, with a severity of its own
    _alert(db, fp="a6", model="ghost", severity="page", state="firing", source="alertmanager", name="Y")
    _alert(db, fp="a7", model="credit", severity="info", state="resolved", name="old")  # not open
    with db.session() as s:  # mutes both warning alerts of credit
        create_silence(
            session=s,
            spec=SilenceSpec(
                matchers=[
                    MatcherSpec(name="model", value="credit"),
                    MatcherSpec(name="severity", value="warning"),
                ],
                duration="1h",
            ),
        )

    collector = AlertsCollector(db=db, settings=Settings())
    collector.refresh()
    got = samples(collector)
    expected = {
        alert_key(m, sev, st): 0.0 for m in ("credit", "fraud") for sev in SEVERITIES for st in STATES
    }
    expected |= {
        alert_key("credit", "warning", "firing"): 2.0,
        alert_key("credit", "critical", "pending"): 1.0,
        alert_key("fraud", "info", "firing"): 1.0,
        alert_key("", "critical", "firing"): 1.0,  # no model
        alert_key("", "other", "firing"): 1.0,  # model unknown to the registry, severity not one of ours
    }
    assert got["driftwarden_alerts"] == expected
    assert got["driftwarden_alerts_silenced"] == {
        (("model", "credit"),): 2.0,
        (("model", "fraud"),): 0.0,
    }


def test_unknown_model_names_beyond_the_cap_are_not_looked_up(db: Database) -> None:
    for i in range(MAX_MODELS_CHECKED + 3):
        _alert(
            db, fp=f"g{i}", model=f"ghost{i:03d}", severity="warning", state="firing", source="alertmanager"
        )
    snapshot = read_snapshot(db=db)
    assert snapshot.unchecked == 3
    assert snapshot.models == ("credit",)
    assert snapshot.open == {("", "warning", "firing"): MAX_MODELS_CHECKED + 3}


def test_webhook_deliveries_by_state_and_the_oldest_pending_age(db: Database) -> None:
    now = utcnow()
    with db.session() as s:
        hook = service.add_subscription(
            session=s,
            url="http://127.0.0.1:9/x",
            secret="whsec_x",
            filter={},
            description="",
            enabled=True,
            now=now,
        )
        for _ in range(2):
            service.add_delivery(
                session=s,
                webhook_id=hook.id,
                event_type="alert.firing",
                payload="{}",
                now=now - timedelta(seconds=100),
            )
    with db.session() as s:
        first, second = service.claim_due(session=s, now=now, limit=2, lease_s=30)
    with db.session() as s:
        assert service.finish_attempt(
            session=s, claim=first, now=now, delivered=True, status_code=204, error=None, retry_at=None
        )
        assert service.finish_attempt(
            session=s,
            claim=second,
            now=now,
            delivered=False,
            status_code=500,
            error="HTTP 500",
            retry_at=None,
        )
    with db.session() as s:  # two waiting: the oldest was queued 300 s ago
        service.add_delivery(
            session=s,
            webhook_id=hook.id,
            event_type="alert.firing",
            payload="{}",
            now=now - timedelta(seconds=300),
        )
        service.add_delivery(
            session=s, webhook_id=hook.id, event_type="alert.resolved", payload="{}", now=now
        )

    snapshot = read_snapshot(db=db)
    assert snapshot.deliveries == {"pending": 2, "delivered": 1, "dead": 1}
    assert snapshot.oldest_pending == now - timedelta(seconds=300)
    by_name = {f.name: f for f in families(snapshot, now=now.timestamp() + 10)}
    (age,) = by_name["driftwarden_webhook_oldest_pending_age_seconds"].samples
    assert age.value == 310.0  # the age is dated at the scrape, not at the read

    collector = AlertsCollector(db=db, settings=Settings())
    collector.refresh()
    got = samples(collector)
    assert got["driftwarden_webhook_deliveries"] == {
        (("state", "pending"),): 2.0,
        (("state", "delivered"),): 1.0,
        (("state", "dead"),): 1.0,
    }
    (value,) = got["driftwarden_webhook_oldest_pending_age_seconds"].values()
    assert 300.0 <= value < 300.0 + (utcnow() - now).total_seconds() + 1


def test_a_scrape_never_reads_the_database_and_keeps_the_last_values(db: Database, tmp_path: Path) -> None:
    _alert(db, fp="a1", model="credit", severity="critical", state="firing")
    collector = AlertsCollector(db=db, settings=Settings())
    collector.refresh()
    before = samples(collector)
    assert before["driftwarden_alerts"][alert_key("credit", "critical", "firing")] == 1.0
    # the database goes away: a read fails, the scrape answers the last values
    gone = make_engine(f"sqlite:///{tmp_path / 'missing' / 'x.db'}")
    collector.db = Database(url="gone", engine=gone, factory=make_session_factory(gone))
    collector.refresh()
    assert collector.refreshes == 2
    assert samples(collector)["driftwarden_alerts"] == before["driftwarden_alerts"]
    gone.dispose()


def test_the_exposition_passes_promtool_check_metrics(db: Database) -> None:
    _alert(db, fp="a1", model="credit", severity="warning", state="pending")
    collector = AlertsCollector(db=db, settings=Settings())
    collector.refresh()
    text = exposition(collector)
    assert 'driftwarden_alerts{model="credit",severity="warning",state="pending"} 1.0' in text
    assert_promtool_accepts(text)

"""Alert and webhook outbox series for Prometheus, read from ``alerts`` and ``webhook_deliveries`` by a
periodic job.

As with the drift series (:mod:`monitors.metrics`), the values come from the database, so every worker and
replica reports the same numbers: a periodic job reads them every ``drift_metrics_cache_s`` (half a second
at the least; a few small queries) into a cache, and a scrape only reads that cache, so it never waits on
the database; when the database cannot be read the last values are kept. The oldest pending delivery's age
is computed at the scrape from its cached creation time, so it keeps growing between two reads.

Series:

- ``driftwarden_alerts{model,severity,state}``: open alerts (``state`` pending or firing).
- ``driftwarden_alerts_silenced{model}``: open alerts that a silence mutes.
- ``driftwarden_webhook_deliveries{state}``: outbox rows by state (pending, delivered, dead).
- ``driftwarden_webhook_oldest_pending_age_seconds``: age of the oldest pending delivery (0 when none).

Labels stay bounded whatever Alertmanager sends: ``model`` is a model of the registry, or ``""`` for an
alert without one or naming a model the registry does not know (an Alertmanager alert's label); at most
:data:`MAX_MODELS_CHECKED` names the served models do not cover are looked up per read. ``severity`` is
``critical``, ``warning``, ``info`` or ``other`` (any other value an Alertmanager alert carries). Every
served model (and every model with an open alert) gets each severity and state, and each delivery state
is exported, 0 when there is none, so the series exist before the first alert or message.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from prometheus_client.core import GaugeMetricFamily, Metric
from sqlalchemy.orm import Session

from alerts import service
from alerts.models import AlertState, DeliveryState
from core.cached_metrics import CachedCollector
from core.config import Settings
from core.database import Database
from registry.service import count_versions, serving_model_names

log = logging.getLogger("driftwarden.alerts.metrics")

SEVERITIES = ("critical", "warning", "info")
OTHER_SEVERITY = "other"
OPEN_STATES = (AlertState.PENDING.value, AlertState.FIRING.value)
DELIVERY_STATES = tuple(s.value for s in DeliveryState)
NO_MODEL = ""
MAX_MODELS_CHECKED = 100  # registry look-ups per read for names the served models do not cover


@dataclass(frozen=True)
class AlertSnapshot:
    """What the series need from the alert tables, read in one session (labels already bounded)."""

    models: tuple[str, ...] = ()  # the models that get every severity and state (0 when none)
    open: dict[tuple[str, str, str], int] = field(default_factory=dict)  # (model, severity, state)
    silenced: dict[str, int] = field(default_factory=dict)
    deliveries: dict[str, int] = field(default_factory=dict)
    oldest_pending: datetime | None = None
    unchecked: int = 0  # model names beyond MAX_MODELS_CHECKED, counted under model="" unchecked


def severity_label(severity: str) -> str:
    """The ``severity`` label of an alert: its own when it is a known severity, else ``other``."""
    return severity if severity in SEVERITIES else OTHER_SEVERITY


def _registered(session: Session, names: Iterable[str], served: set[str]) -> tuple[set[str], int]:
    """Of ``names``, those the registry knows: the served ones, and of the others the first
    ``MAX_MODELS_CHECKED`` it has versions of; and how many were left unchecked (counted as unknown)."""
    others = sorted(set(names) - served)
    known = {n for n in others[:MAX_MODELS_CHECKED] if count_versions(session=session, model_name=n) > 0}
    return (set(names) & served) | known, max(0, len(others) - MAX_MODELS_CHECKED)


def read_snapshot(*, db: Database) -> AlertSnapshot:
    """Open alerts by model, severity and state, silenced ones by model, and the outbox by state."""
    with db.session() as session:
        served = set(serving_model_names(session=session))
        counts = service.open_alert_counts(session=session)
        known, unchecked = _registered(session, {c.model_name for c in counts if c.model_name}, served)
        deliveries = service.delivery_counts(session=session)
        oldest = service.oldest_pending_delivery(session=session)
    open_: Counter[tuple[str, str, str]] = Counter()
    silenced: Counter[str] = Counter()
    for c in counts:
        model = c.model_name if c.model_name in known else NO_MODEL
        open_[(model, severity_label(c.severity), c.state)] += c.count
        if c.silenced:
            silenced[model] += c.count
    models = tuple(sorted(served | {m for m, _, _ in open_ if m != NO_MODEL}))
    return AlertSnapshot(models, dict(open_), dict(silenced), deliveries, oldest, unchecked)


def families(snapshot: AlertSnapshot, *, now: float) -> list[GaugeMetricFamily]:
    """The gauge families of a snapshot; ``now`` (Unix time) dates the oldest pending delivery."""
    alerts = GaugeMetricFamily(
        "driftwarden_alerts",
        "Open alerts (pending or firing) by model, severity and state.",
        labels=["model", "severity", "state"],
    )
    silenced = GaugeMetricFamily(
        "driftwarden_alerts_silenced", "Open alerts muted by a silence, by model.", labels=["model"]
    )
    values = dict.fromkeys(
        ((m, sev, st) for m in snapshot.models for sev in SEVERITIES for st in OPEN_STATES), 0
    )
    values.update(snapshot.open)
    for key, n in sorted(values.items()):
        alerts.add_metric(list(key), float(n))
    for model in sorted(set(snapshot.models) | set(snapshot.silenced)):
        silenced.add_metric([model], float(snapshot.silenced.get(model, 0)))
    deliveries = GaugeMetricFamily(
        "driftwarden_webhook_deliveries",
        "Webhook outbox messages by state (pending, delivered, dead).",
        labels=["state"],
    )
    for state in sorted(set(DELIVERY_STATES) | set(snapshot.deliveries)):
        deliveries.add_metric([state], float(snapshot.deliveries.get(state, 0)))
    oldest = snapshot.oldest_pending
    age = GaugeMetricFamily(
        "driftwarden_webhook_oldest_pending_age_seconds",
        "Seconds since the oldest pending webhook message was queued (0: none pending).",
        value=max(0.0, now - oldest.timestamp()) if oldest is not None else 0.0,
    )
    return [alerts, silenced, deliveries, age]


class AlertsCollector(CachedCollector[AlertSnapshot]):
    """Yields the alert and outbox gauges from a cache: :meth:`refresh` (a periodic job) reads the
    database, :meth:`collect` (a scrape) never does."""

    what = "alert metrics"

    def __init__(self, *, db: Database, settings: Settings) -> None:
        super().__init__(settings=settings, empty=AlertSnapshot())
        self.db = db

    def read(self) -> AlertSnapshot:
        return read_snapshot(db=self.db)

    def families(self, snapshot: AlertSnapshot, *, now: float) -> list[Metric]:
        return list(families(snapshot, now=now))

    def accepted(self, old: AlertSnapshot, new: AlertSnapshot) -> None:
        if new.unchecked and not old.unchecked:
            log.warning(
                "alert metrics: open alerts name %d more models than the %d looked up in the registry; "
                'they are counted under model=""',
                new.unchecked,
                MAX_MODELS_CHECKED,
            )

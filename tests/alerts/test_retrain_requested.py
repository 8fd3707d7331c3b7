"""The ``retrain`` action on a version driftwarden cannot retrain: no job, a ``retrain.requested`` event.

A model served elsewhere (registered from a reference with ``--prediction-column``) and a SavedModel imported
without ``--model-fn`` have no builder here: a job would train the built-in network and die in the gate. With
the default rules (``harmful_drift``: notify + retrain; ``dataset_drift``: notify), 30 days of imported
history with drift planted that hurts (a share of the labels flipped too), a monitor run fires the
harmful-drift alert; its retrain action starts no job, says why in the alert, and sends one
``retrain.requested`` message through the signed-webhook outbox to a real receiver (checked with the
``standardwebhooks`` package), carrying the model, version, alert and the window's time range and counts.
The same drift with the labels left alone does not hurt: the drift alert fires, and nothing is retrained.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from standardwebhooks import Webhook

from alerts.webhooks import new_secret
from core.database import open_database
from core.tabular import write_table
from registry.schema import Task
from registry.service import promote
from tests import own_models
from tests.alerts.receiver import Receiver
from tests.support import LoopCli, loop_cli
from training.imports import ImportSpec, import_saved_model

DAYS = 30
ROWS = 3_000
END = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
START = END - timedelta(days=DAYS)


Cli = LoopCli


@pytest.fixture
def cli(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cli]:
    yield loop_cli(database_url, tmp_path, monkeypatch)


FLIPPED = 0.3  # of the history's labels: the model's realised ROC AUC falls far beyond the tolerance


def history(n: int = ROWS, *, seed: int = 5, flipped: float = FLIPPED) -> dict[str, np.ndarray]:
    """``n`` scored rows of the last 30 days (oldest first), drifted (a, b and c moved), with labels, of which
    ``flipped`` are flipped."""
    data = own_models.reference(n, seed=seed, shift=1.5)
    data["b"] = data["b"] + 1.0
    data["c"] = data["c"] + 3
    flip = np.random.default_rng(seed + 1).random(n) < flipped
    data["y_bin"] = np.where(flip, 1 - data["y_bin"], data["y_bin"])
    step = (END - START) / (n - 1)
    return {
        **{k: data[k] for k in own_models.FEATURES},
        "score": own_models.answers("binary", data),
        "row_id": np.array([f"hist-{i}" for i in range(n)], dtype=object),
        "scored_at": np.array([(START + i * step).isoformat() for i in range(n)], dtype=object),
        "truth": data["y_bin"],
    }


def import_history(cli: Cli, model: str, tmp_path: Path, *, flipped: float = FLIPPED) -> None:
    write_table(history(flipped=flipped), tmp_path / "history.csv")
    done = cli(
        *("predictions", "import", str(tmp_path / "history.csv"), "--model", model),
        *("--prediction-column", "score", "--id-column", "row_id", "--time-column", "scored_at"),
        *("--label-column", "truth"),
    )
    assert done.exit_code == 0 and f"{ROWS} of {ROWS} rows logged" in done.output, done.output


def fire_and_deliver(cli: Cli, model: str, version: int, receiver: Receiver, secret: str) -> dict[str, Any]:
    """Subscribe the receiver, run the monitor once, send the outbox; then the checks of the issue: no job,
    one verified ``retrain.requested`` message with the window, the alert saying why no job started.
    Returns the message's ``data``."""
    added = cli("webhooks", "add", receiver.url, "--secret", secret)
    assert added.exit_code == 0, added.output
    ran = cli("monitor", "--once", "--model", model)
    assert ran.exit_code != 2 and model in ran.output, ran.output + str(ran.exception)
    sent = cli("webhooks", "send")
    assert sent.exit_code == 0, sent.output

    jobs = cli("jobs", "list", "--json")
    assert jobs.exit_code == 0 and json.loads(jobs.output) == [], jobs.output

    bodies = {json.loads(r.body)["type"]: r for r in receiver.accepted}
    requested = [r for r in receiver.accepted if json.loads(r.body)["type"] == "retrain.requested"]
    assert len(requested) == 1, [json.loads(r.body)["type"] for r in receiver.requests]
    assert "alert.firing" in bodies  # the alerts are announced as before
    req = requested[0]
    # the standardwebhooks package (not the receiver's own HMAC code) accepts the message as signed
    doc = Webhook(secret).verify(req.body, req.headers)
    assert doc["type"] == "retrain.requested" and req.headers["webhook-id"].startswith("msg_")
    data = doc["data"]
    assert data["model"] == model and data["version"] == version
    assert data["alert"]["rule"] == "harmful_drift" and isinstance(data["alert"]["id"], int)
    window = data["window"]
    assert window["predictions"] == ROWS and window["labelled"] == ROWS
    first, last = datetime.fromisoformat(window["start"]), datetime.fromisoformat(window["end"])
    assert abs(first - START) < timedelta(seconds=1) and abs(last - END) < timedelta(seconds=1)
    assert data["links"]["alert"].endswith(f"/v1/alerts/{data['alert']['id']}")

    shown = cli("alerts", "show", str(data["alert"]["id"]))
    assert shown.exit_code == 0, shown.output
    alert = json.loads(shown.output)
    retrain = alert["evidence"]["retrain"]
    assert retrain["job_id"] is None and retrain["created"] is False
    assert retrain["event"] == "retrain.requested" and retrain["webhooks"] == 1
    assert data["reason"] in retrain["reason"]
    lines = [e["detail"] for e in alert["history"]]
    assert any(d.startswith("retrain: no job (") and "retrain.requested sent to 1" in d for d in lines)
    return data


def test_a_model_served_elsewhere_with_30_days_of_history_gets_an_event_not_a_job(
    cli: Cli, database_url: str, tmp_path: Path
) -> None:
    own_models.register_served_elsewhere(database_url, tmp_path, {"churn": "binary"})
    # register_served_elsewhere writes its registry under tmp_path/registry, where the CLI looks
    import_history(cli, "churn", tmp_path)
    secret = new_secret()
    with Receiver(secret) as receiver:
        data = fire_and_deliver(cli, "churn", 1, receiver, secret)
    assert "served elsewhere" in data["reason"]
    # asked by hand, the queue refuses it the same way: one line, exit 2, nothing queued
    refused = cli("jobs", "submit", "--model", "churn")
    lines = refused.stderr.strip().splitlines()
    assert refused.exit_code == 2 and len(lines) == 1 and "churn:1 is served elsewhere" in lines[0], lines
    assert json.loads(cli("jobs", "list", "--json").output) == []


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_drift_that_does_not_hurt_fires_the_drift_alert_and_retrains_nothing(
    cli: Cli, database_url: str, tmp_path: Path
) -> None:
    own_models.register_served_elsewhere(database_url, tmp_path, {"churn": "binary"})
    import_history(cli, "churn", tmp_path, flipped=0.0)  # the same drift; the model still ranks as well
    secret = new_secret()
    with Receiver(secret) as receiver:
        assert cli("webhooks", "add", receiver.url, "--secret", secret).exit_code == 0
        ran = cli("monitor", "--once", "--model", "churn")
        assert ran.exit_code != 2 and "churn" in ran.output, ran.output + str(ran.exception)
        assert cli("webhooks", "send").exit_code == 0
        messages = [json.loads(r.body) for r in receiver.accepted]
    firing = {a["name"] for m in messages if m["type"] == "alert.firing" for a in m["data"]["alerts"]}
    assert "dataset_drift" in firing and "harmful_drift" not in firing, firing
    assert [m for m in messages if m["type"] == "retrain.requested"] == []
    assert json.loads(cli("jobs", "list", "--json").output) == []
    shown = cli("alerts", "list", "--json")
    assert shown.exit_code == 0, shown.output
    drift = next(a for a in json.loads(shown.output) if a["rule_name"] == "dataset_drift")
    assert "retrain" not in (drift.get("evidence") or {})


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_an_imported_saved_model_without_its_builder_gets_an_event_not_a_job(
    cli: Cli, database_url: str, tmp_path: Path
) -> None:
    data = own_models.reference(1_500, seed=0)
    write_table(data, tmp_path / "reference.csv")
    source = own_models.write_binary(tmp_path / "keras", data)
    db = open_database(database_url)
    try:
        spec = ImportSpec(
            model_name="own",
            path=source,
            reference=tmp_path / "reference.csv",
            target="y_bin",
            task=Task.BINARY,
        )
        import_saved_model(spec=spec, db=db, registry=tmp_path / "registry")
        with db.session() as s:
            promote(session=s, model_name="own", version=1)
    finally:
        db.dispose()
    import_history(cli, "own", tmp_path)
    secret = new_secret()
    with Receiver(secret) as receiver:
        data = fire_and_deliver(cli, "own", 1, receiver, secret)
    assert "imported without --model-fn" in data["reason"]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_an_alertmanager_retrain_on_a_model_served_elsewhere_sends_the_event_without_a_window(
    database_url: str, tmp_path: Path
) -> None:
    from pydantic import SecretStr

    from alerts import flows, service
    from alerts.alertmanager import parse_payload
    from alerts.webhooks import parse_body
    from core.config import Settings
    from core.database import utcnow
    from training.retraining.service import list_jobs

    own_models.register_served_elsewhere(database_url, tmp_path, {"churn": "binary"})
    settings = Settings(database_url=SecretStr(database_url), registry_path=tmp_path / "registry")
    alert = {
        "status": "firing",
        "labels": {"alertname": "ChurnDrift", "model": "churn", "severity": "critical", "action": "retrain"},
        "annotations": {"summary": "churn drifted"},
        "startsAt": "2027-01-10T12:00:00Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "fingerprint": "c6a6d3f0b8a3e1f2",
    }
    payload = parse_payload({"version": "4", "status": "firing", "receiver": "am", "alerts": [alert]})
    db = open_database(database_url)
    try:
        with db.session() as s:
            for events in (["retrain.requested"], ["job.finished"]):  # only the first one wants it
                service.add_subscription(
                    session=s,
                    url="https://hooks.example.com/x",
                    secret=new_secret(),
                    filter={"events": events},
                    description="",
                    enabled=True,
                    now=utcnow(),
                )
        with db.session() as s:
            receipt = flows.receive_alertmanager(session=s, settings=settings, payload=payload).as_dict()
        (job,) = receipt["jobs"]
        assert job["job_id"] is None and job["event"] == "retrain.requested" and job["webhooks"] == 1
        assert "churn:1 is served elsewhere" in job["reason"]
        with db.session() as s:
            assert list_jobs(session=s, model_name="churn") == []
            (row,) = service.list_deliveries(session=s)
            assert row.event_type == "retrain.requested"
            data = parse_body(row.payload)["data"]
        assert data["model"] == "churn" and data["version"] == 1 and data["window"] is None
        assert data["alert"]["rule"] == "ChurnDrift" and data["alert"]["severity"] == "critical"
    finally:
        db.dispose()

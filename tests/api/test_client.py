"""``driftwarden.Client`` against a real server (uvicorn, SQLite, the session's trained ``credit``):
predict, feedback, ingest, a monitor run, the drift report and its history as frames, alerts, retrain, and
the server's refusals as typed exceptions carrying its message."""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
import pytest

import driftwarden
from tests.api.conftest import MIN_ROWS
from tests.support import ADMIN_TOKEN, Server
from training.cluster.datagen import TARGET


@pytest.fixture(scope="module")
def client(api_server: Server) -> Iterator[driftwarden.Client]:
    with driftwarden.Client(api_server.url, ADMIN_TOKEN) as c:
        yield c


def test_predict_feedback_run_drift_and_history(
    client: driftwarden.Client, shifted_frame: pd.DataFrame
) -> None:
    batch = shifted_frame.head(120)
    before = client.history("credit")
    answers = client.predict("credit", batch.drop(columns=[TARGET]))
    assert len(answers) == len(answers.prediction_ids) == 120 and answers.model_version == "1"
    assert all(0.0 <= p <= 1.0 for p in answers.predictions)
    fed = client.feedback("credit", answers.prediction_ids, batch[TARGET].tolist())
    assert fed["stored"] == 120 and fed["unknown_ids"] == []

    report = client.run_monitor("credit")
    assert report.report.rows >= 120 and report.summary()["feature"].tolist()
    latest = client.drift("credit")
    assert latest.to_dict() == report.to_dict() and "credit" in latest.title

    history = client.history("credit")
    assert len(history) == len(before) + 1
    assert {"run_id", "created_at", "rows", "dataset_drifted", "drifted_features"} <= set(history.columns)
    assert str(history["created_at"].dtype).startswith("datetime64") and history["rows"].iloc[0] >= 120
    future = client.history("credit", since="2999-01-01T00:00:00Z")
    assert future.empty


def test_history_follows_every_page(
    client: driftwarden.Client, shifted_frame: pd.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.predict("credit", shifted_frame.drop(columns=[TARGET]).head(MIN_ROWS))
    while len(client.history("credit")) < 3:
        client.run_monitor("credit")
    everything = client.history("credit")
    assert len(client.history("credit", limit=2)) == 2
    monkeypatch.setattr(driftwarden.client, "HISTORY_PAGE", 1)  # one run a page: next_cursor must be followed
    paged = client.history("credit")
    assert paged["run_id"].tolist() == everything["run_id"].tolist()


def test_ingest_logs_predictions_answered_elsewhere(
    client: driftwarden.Client, shifted_frame: pd.DataFrame
) -> None:
    rows = shifted_frame.drop(columns=[TARGET]).head(3).to_dict(orient="records")
    records = [{"id": f"ext-{i}", "inputs": row, "prediction": 0.25} for i, row in enumerate(rows)]
    answer = client.ingest("credit", records)
    assert answer["stored"] == 3 and len(answer["prediction_ids"]) == 3
    assert client.ingest("credit", records)["duplicate_ids"]  # the same ids again: stored once


def test_alerts_and_retrain(client: driftwarden.Client) -> None:
    alerts = client.alerts("credit")
    assert isinstance(alerts, pd.DataFrame)
    job = client.retrain("credit", reason="drift on income", idempotency_key="api-test-1")
    assert job["state"] == "queued" and job["created"] is True
    again = client.retrain("credit", reason="drift on income", idempotency_key="api-test-1")
    assert again["id"] == job["id"] and again["created"] is False
    assert client.job(job["id"])["id"] == job["id"]


def test_refusals_are_typed_exceptions_with_the_servers_message(
    api_server: Server, client: driftwarden.Client
) -> None:
    with pytest.raises(driftwarden.NotFound, match="nobody") as missing:
        client.drift("nobody")
    assert missing.value.status == 404 and "nobody" in missing.value.message
    assert missing.value.body["error"] == missing.value.message
    with pytest.raises(driftwarden.BadRequest, match="income") as bad:
        client.predict("credit", [{"income": "lots"}])
    assert bad.value.status == 400
    with pytest.raises(driftwarden.BadRequest, match="limit"):
        client.alerts(limit=0)
    with driftwarden.Client(api_server.url) as anonymous, pytest.raises(driftwarden.Unauthorized) as denied:
        anonymous.history("credit")
    assert denied.value.status == 401 and "Bearer" in denied.value.message
    with pytest.raises(driftwarden.InvalidInput, match="one label per id"):
        client.feedback("credit", ["a", "b"], [1])
    with (
        driftwarden.Client("http://127.0.0.1:9", timeout=2) as nowhere,
        pytest.raises(driftwarden.Unreachable),
    ):
        nowhere.drift("credit")
    assert issubclass(driftwarden.NotFound, driftwarden.ApiError)
    assert issubclass(driftwarden.ApiError, driftwarden.DriftwardenError)

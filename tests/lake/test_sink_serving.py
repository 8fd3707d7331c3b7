"""The lake sink behind a real server (uvicorn): predictions, labels, the ingest route and KServe's
CloudEvents all reach the lake; ``also`` keeps the database's log too, ``only`` leaves it empty."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cloudevents.core.bindings.http import to_binary_event
from cloudevents.core.v1.event import CloudEvent

from predictions.lake.files import Lake, open_lake
from service.serving.kserve import REQUEST_TYPE, RESPONSE_TYPE
from tests import own_models
from tests.lake.conftest import S3Lake
from tests.lake.sinkdata import read_lake
from tests.support import Server, TrainedModels, count_rows, seed_registry, serve_settings

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def _event(kind: str, event_id: str, body: Any, moment: datetime) -> CloudEvent:
    attributes = {
        "specversion": "1.0",
        "id": event_id,
        "type": kind,
        "source": "http://lk-predictor-default.kserve-test/",
        "inferenceservicename": "lk_bin",
        "datacontenttype": "application/json",
        "time": moment,
    }
    return CloudEvent(attributes, json.dumps(body).encode())


def _traffic(srv: Server, trained: TrainedModels) -> tuple[set[str], set[str]]:
    """Predictions (3 requests), labels of 3 of them, 5 ingested records (2 labelled) and one CloudEvents
    pair of 4 rows; returns every prediction id answered and the ids labelled."""
    answered: list[str] = []
    labelled: list[str] = []
    with srv.client() as c:
        for k in range(3):
            r = c.post("/v1/models/credit:predict", json={"instances": trained.rows[4 * k : 4 * k + 4]})
            assert r.status_code == 200, r.text
            answered += r.json()["prediction_ids"]
        labels = [{"prediction_id": pid, "label": i % 2} for i, pid in enumerate(answered[:3])]
        r = c.post("/v1/models/credit/feedback", json={"labels": labels})
        assert r.status_code == 200 and r.json()["stored"] == 3, r.text
        labelled += answered[:3]
        data = own_models.reference(5, seed=3)
        rows = own_models.feature_rows(data)
        answers = [float(p) for p in own_models.answers("binary", data)]
        records = [
            {"inputs": rows[i], "prediction": answers[i], "time": (T0 + timedelta(minutes=i)).isoformat()}
            | ({"label": i % 2} if i < 2 else {})
            for i in range(5)
        ]
        r = c.post("/v1/models/lk_bin/predictions", json={"records": records})
        assert r.status_code == 200 and r.json()["labels_stored"] == 2, r.text
        ingested = r.json()["prediction_ids"]
        answered += ingested
        labelled += ingested[:2]
        event_id = str(uuid.uuid4())
        data = own_models.reference(4, seed=4)
        probs = [float(p) for p in own_models.answers("binary", data)]
        for kind, body in (
            (REQUEST_TYPE, {"instances": own_models.feature_rows(data)}),
            (RESPONSE_TYPE, {"predictions": probs}),
        ):
            message = to_binary_event(_event(kind, event_id, body, T0))
            r = c.post("/v1/cloudevents", content=message.body, headers=dict(message.headers))
            assert r.status_code == 200, r.text
        assert r.json()["outcome"] == "logged"
        answered += r.json()["prediction_ids"]
    return set(answered), set(labelled)


def _check_lake(target: Lake, answered: set[str], labelled: set[str]) -> None:
    table = read_lake(target)
    ids = table["prediction_id"].to_pylist()
    assert len(ids) == len(answered) == 3 * 4 + 5 + 4 and set(ids) == answered  # each once
    by_source = sorted(set(zip(table["source"].to_pylist(), ids, strict=True)))
    assert {s for s, _ in by_source} == {"serve", "ingest", "cloudevents"}
    labels = read_lake(target, "labels")
    assert set(labels["prediction_id"].to_pylist()) == labelled


def _server(url: str, root: Path, trained: TrainedModels, **lake: Any) -> Server:
    seed_registry(url, trained, serving=1)
    registry = own_models.register_served_elsewhere(url, root, {"lk_bin": "binary"})
    settings = serve_settings(
        url, root / "spool", registry_path=registry, log_durability="durable", monitor_enabled=False, **lake
    )
    return Server(settings)


def test_also_mode_logs_to_the_database_and_a_local_lake(
    trained: TrainedModels, tmp_path: Path, local_lake: str
) -> None:
    url = f"sqlite:///{tmp_path / 'also.db'}"
    with _server(url, tmp_path, trained, lake_url=local_lake, lake_mode="also") as srv:
        answered, labelled = _traffic(srv, trained)
    _check_lake(open_lake(local_lake), answered, labelled)
    assert count_rows(url) == len(answered)  # the database's log holds them too


def test_only_mode_logs_to_an_s3_lake_alone(
    trained: TrainedModels, tmp_path: Path, s3_lake: S3Lake, postgres_url: str
) -> None:
    from tests.support import postgres_schema

    with postgres_schema(postgres_url) as url:
        with _server(url, tmp_path, trained, lake_url=s3_lake.url, lake_mode="only") as srv:
            answered, labelled = _traffic(srv, trained)
        _check_lake(open_lake(s3_lake.url), answered, labelled)
        assert count_rows(url) == 0  # lake_mode=only: the database keeps no log

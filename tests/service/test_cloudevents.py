"""``POST /v1/cloudevents``: KServe's inference logger as a source of the prediction log, on both backends.

Events are built with the ``cloudevents`` SDK as KServe's logger shapes them (``pkg/logger/worker.go``: binary
mode, ``ce-id`` shared by the request and the response, the extensions ``inferenceservicename``,
``namespace``, ``component``, ``endpoint`` and ``metadata``; the body the model's own request or response).
Two servers share one database (two replicas): a pair is logged once whichever server each half reached and
in either order; duplicates are stored once; a request whose response never comes is logged with its inputs
and no prediction once the wait is over, a response alone expires, an error answer is counted and not
logged; bad events are 400s naming the attribute or field, and keep nothing.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from cloudevents.core.bindings.http import to_binary_event, to_structured_event
from cloudevents.core.v1.event import CloudEvent

from access.service import create_token
from core.database import open_database
from predictions.batch import floats
from service.serving.kserve import REQUEST_TYPE, RESPONSE_TYPE, prediction_ids
from tests import own_models
from tests.support import NO_AUTH, Server, query_rows, serve_settings

MODELS = {"ce_bin": "binary", "ce_cls": "multiclass"}
FEATURES = own_models.FEATURES
ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 2.0  # cloudevents_wait_s of the test servers
T0 = datetime(2026, 11, 25, 8, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def replicas(module_db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    """Two servers (two replicas) on one database, each with its own spool."""
    root = tmp_path_factory.mktemp("cloudevents")
    registry = own_models.register_served_elsewhere(module_db_url, root, MODELS)

    def settings(k: int) -> Any:
        return serve_settings(
            module_db_url,
            root / f"spool-{k}",
            registry_path=registry,
            monitor_enabled=False,
            cloudevents_wait_s=WAIT_S,
            cloudevents_sweep_interval_s=0.5,
        )

    with Server(settings(0)) as a, Server(settings(1)) as b:
        yield a, b


def _rows(n: int, seed: int) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
    data = own_models.reference(n, seed=seed)
    return own_models.feature_rows(data), data


def _event(
    kind: str, event_id: str, body: Any, *, model: str | None, moment: datetime | None = None
) -> CloudEvent:
    """An event as KServe's logger builds it (worker.go): id, type, source, extensions, the body as data."""
    attributes: dict[str, Any] = {
        "specversion": "1.0",
        "id": event_id,
        "type": kind,
        "source": "http://ce-predictor-default.kserve-test/",
        "namespace": "kserve-test",
        "component": "predictor",
        "endpoint": "default",
        "metadata": json.dumps({"X-Request-Id": [event_id]}),
        "datacontenttype": "application/json",
        "time": moment or datetime.now(UTC),
    }
    if model is not None:
        attributes["inferenceservicename"] = model
    return CloudEvent(attributes, json.dumps(body).encode())


def _send(
    srv: Server, event: CloudEvent, *, structured: bool = False, params: dict[str, str] | None = None
) -> httpx.Response:
    message = to_structured_event(event) if structured else to_binary_event(event)
    with srv.client() as c:
        return c.post("/v1/cloudevents", content=message.body, headers=dict(message.headers), params=params)


def _query(srv: Server, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
    """The rows of ``sql`` on the server's database."""
    return query_rows(srv.settings.database_url.get_secret_value(), sql, params)


def _batches(srv: Server, request_id: str) -> list[Any]:
    return _query(
        srv,
        "select model_name, source, protocol, size, logged_at, outputs, vectors from prediction_batches "
        "where request_id = :r order by id",
        {"r": request_id},
    )


def _pair(srv: Server, event_id: str) -> list[Any]:
    return _query(
        srv,
        "select request_at, response_at, settled_at, outcome, request_body, response_body from "
        "cloudevent_pairs where event_id = :e",
        {"e": event_id},
    )


def _utc(value: Any) -> datetime:
    """A timestamp read by raw SQL (SQLite: naive UTC text) as an aware datetime."""
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _wait_for(what: str, check: Any, timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.mark.parametrize("order", ["request_first", "response_first"])
def test_a_pair_split_across_replicas_is_one_log_row_in_either_order(
    replicas: tuple[Server, Server], order: str
) -> None:
    a, b = replicas
    rows, data = _rows(4, seed=1)
    probs = [float(p) for p in own_models.answers("binary", data)]
    event_id = str(uuid.uuid4())
    answered_at = T0 + timedelta(minutes=3)
    request = _event(REQUEST_TYPE, event_id, {"instances": rows}, model="ce_bin", moment=T0)
    response = _event(RESPONSE_TYPE, event_id, {"predictions": probs}, model="ce_bin", moment=answered_at)
    first, second = (request, response) if order == "request_first" else (response, request)
    r1 = _send(a, first)
    assert r1.status_code == 200, r1.text
    assert r1.json()["outcome"] == "waiting" and r1.json()["prediction_ids"] == []
    assert _batches(a, event_id) == []
    r2 = _send(b, second, structured=order == "response_first")  # the other replica, the other mode
    assert r2.status_code == 200, r2.text
    body = r2.json()
    assert body["outcome"] == "logged" and body["model"] == "ce_bin" and body["id"] == event_id
    assert body["prediction_ids"] == prediction_ids("ce_bin", event_id, 4)
    [batch] = _batches(a, event_id)
    assert (batch.model_name, batch.source, batch.protocol, batch.size) == (
        "ce_bin",
        "cloudevents",
        "kserve",
        4,
    )
    assert _utc(batch.logged_at) == answered_at  # the response's ce-time: when the model answered
    assert floats(batch.outputs, 4).tolist() == pytest.approx(probs)
    [pair] = _pair(a, event_id)
    assert pair.settled_at is not None and pair.outcome == "logged"
    assert pair.request_body is None and pair.response_body is None  # a tombstone keeps no body
    with a.client() as c:  # the ids answer the feedback route
        fb = c.post(
            "/v1/models/ce_bin/feedback",
            json={"labels": [{"prediction_id": pid, "label": 1} for pid in body["prediction_ids"]]},
        )
    assert fb.status_code == 200 and fb.json()["stored"] == 4, fb.text


def test_duplicates_are_stored_once(replicas: tuple[Server, Server]) -> None:
    a, b = replicas
    rows, data = _rows(3, seed=2)
    probs = [float(p) for p in own_models.answers("binary", data)]
    event_id = str(uuid.uuid4())
    request = _event(REQUEST_TYPE, event_id, {"instances": rows}, model="ce_bin")
    response = _event(RESPONSE_TYPE, event_id, {"predictions": probs}, model="ce_bin")
    outcomes = [
        _send(a, request).json()["outcome"],
        _send(b, request).json()["outcome"],  # the request again, before the pair is complete
        _send(b, response).json()["outcome"],
        _send(a, response).json()["outcome"],  # after: both halves again
        _send(a, request).json()["outcome"],
    ]
    assert outcomes == ["waiting", "duplicate", "logged", "duplicate", "duplicate"]
    assert [r.size for r in _batches(a, event_id)] == [3]


def test_both_protocols_and_both_tasks(replicas: tuple[Server, Server]) -> None:
    """TF Serving v1 columnar and Open Inference Protocol v2 tensors; a multi-class model's vectors."""
    a, b = replicas
    rows, data = _rows(3, seed=3)
    probs = own_models.answers("multiclass", data)
    v2_id, v1_id = str(uuid.uuid4()), str(uuid.uuid4())
    v2_request = {
        "id": v2_id,
        "inputs": [
            {"name": "a", "shape": [3], "datatype": "FP64", "data": [r["a"] for r in rows]},
            {"name": "b", "shape": [3, 1], "datatype": "FP64", "data": [[r["b"]] for r in rows]},
            {"name": "c", "shape": [3], "datatype": "INT64", "data": [r["c"] for r in rows]},
            {"name": "color", "shape": [3], "datatype": "BYTES", "data": [r["color"] for r in rows]},
        ],
    }
    v2_response = {
        "model_name": "ce_cls",
        "id": v2_id,
        "outputs": [
            {"name": "probabilities", "shape": [3, 3], "datatype": "FP32", "data": probs.ravel().tolist()}
        ],
    }
    v1_request = {"inputs": {k: [r[k] for r in rows] for k in FEATURES}}
    v1_response = {"outputs": probs.tolist()}
    for event_id, req, resp in ((v2_id, v2_request, v2_response), (v1_id, v1_request, v1_response)):
        assert _send(a, _event(RESPONSE_TYPE, event_id, resp, model="ce_cls")).json()["outcome"] == "waiting"
        r = _send(b, _event(REQUEST_TYPE, event_id, req, model="ce_cls"))
        assert r.status_code == 200 and r.json()["outcome"] == "logged", r.text
        [batch] = _batches(a, event_id)
        assert batch.size == 3 and batch.vectors is not None
        vectors = np.frombuffer(bytes(batch.vectors), dtype="<f8").reshape(3, 3)
        assert vectors == pytest.approx(probs, abs=1e-6)
        assert floats(batch.outputs, 3).tolist() == pytest.approx(probs.max(axis=1).tolist(), abs=1e-6)


def test_unpaired_halves_and_error_answers(replicas: tuple[Server, Server]) -> None:
    """A request alone is logged without predictions once the wait is over (its inputs count for drift), a
    response alone expires, an error answer is counted and never logged; each replica's metrics count what
    it handled."""
    a, b = replicas
    rows, data = _rows(2, seed=4)
    alone, orphan, failed, paired = (str(uuid.uuid4()) for _ in range(4))
    probs = [float(p) for p in own_models.answers("binary", data)]
    # a pair of its own, so the metrics read below hold a "logged" series whatever ran before
    assert _send(a, _event(REQUEST_TYPE, paired, {"instances": rows}, model="ce_bin")).json()["outcome"] == (
        "waiting"
    )
    logged = _send(b, _event(RESPONSE_TYPE, paired, {"predictions": probs}, model="ce_bin"))
    assert logged.status_code == 200 and logged.json()["outcome"] == "logged", logged.text
    assert (
        _send(a, _event(REQUEST_TYPE, alone, {"instances": rows}, model="ce_bin")).json()["outcome"]
        == "waiting"
    )
    assert _send(b, _event(RESPONSE_TYPE, orphan, {"predictions": [0.2]}, model="ce_bin")).json()[
        "outcome"
    ] == ("waiting")
    assert (
        _send(a, _event(REQUEST_TYPE, failed, {"instances": rows}, model="ce_bin")).json()["outcome"]
        == "waiting"
    )
    error = _send(b, _event(RESPONSE_TYPE, failed, {"error": "model crashed"}, model="ce_bin"))
    assert error.status_code == 200 and error.json()["outcome"] == "error_response", error.text
    assert _batches(a, failed) == []
    [batch] = _wait_for("the request alone to be logged", lambda: _batches(a, alone), timeout_s=WAIT_S + 15)
    assert batch.size == 2 and all(math.isnan(v) for v in floats(batch.outputs, 2))
    outcome = _wait_for(
        "the response alone to expire", lambda: [p.outcome for p in _pair(a, orphan) if p.outcome]
    )
    assert outcome == ["expired_response"] and _batches(a, orphan) == []
    assert [p.outcome for p in _pair(a, alone)] == ["unanswered"]
    metrics = ""
    for srv in (a, b):  # two replicas: each counts what it handled (its sweeps included)
        with srv.client() as c:
            metrics += c.get("/metrics").text
    for outcome in ("error_response", "expired_response", "unanswered", "logged", "waiting"):
        assert f'driftwarden_cloudevents_total{{model="ce_bin",outcome="{outcome}"}}' in metrics, outcome
    assert 'driftwarden_ingested_predictions_total{model="ce_bin",source="cloudevents"}' in metrics


def _binary_headers(event_id: str | None, kind: str | None, **extra: str) -> dict[str, str]:
    headers = {"ce-specversion": "1.0", "ce-source": "http://x/", "content-type": "application/json", **extra}
    if event_id is not None:
        headers["ce-id"] = event_id
    if kind is not None:
        headers["ce-type"] = kind
    return headers


BAD = [
    ("no id", _binary_headers(None, REQUEST_TYPE, **{"ce-inferenceservicename": "ce_bin"}), b"{}", "ce-id"),
    ("no type", _binary_headers("e1", None, **{"ce-inferenceservicename": "ce_bin"}), b"{}", "ce-type"),
    (
        "other type",
        _binary_headers("e1", "com.example.x", **{"ce-inferenceservicename": "ce_bin"}),
        b"{}",
        "type",
    ),
    ("no model", _binary_headers("e1", REQUEST_TYPE), b'{"instances": []}', "inferenceservicename"),
    (
        "bad time",
        _binary_headers("e1", REQUEST_TYPE, **{"ce-inferenceservicename": "ce_bin", "ce-time": "yesterday"}),
        b'{"instances": [{"a": 1}]}',
        "CloudEvent",
    ),
    (
        "not json",
        _binary_headers("e2", REQUEST_TYPE, **{"ce-inferenceservicename": "ce_bin"}),
        b"{nope",
        "JSON",
    ),
    (
        "no inputs",
        _binary_headers("e3", REQUEST_TYPE, **{"ce-inferenceservicename": "ce_bin"}),
        b'{"signature_name": "x"}',
        '"instances" or "inputs"',
    ),
    (
        "wrong prediction",
        _binary_headers("e4", RESPONSE_TYPE, **{"ce-inferenceservicename": "ce_bin"}),
        b'{"predictions": [0.2, "high"]}',
        "predictions[1]",
    ),
    (  # the same rule as /v2/.../infer (codecs.repeated_tensor): not the last tensor of a name winning
        "input tensor twice",
        _binary_headers("e5", REQUEST_TYPE, **{"ce-inferenceservicename": "ce_bin"}),
        json.dumps(
            {
                "inputs": [
                    {"name": "a", "shape": [1], "datatype": "FP64", "data": [1.0]},
                    {"name": "c", "shape": [1], "datatype": "INT64", "data": [3]},
                    {"name": "a", "shape": [1], "datatype": "FP64", "data": [2.0]},
                ]
            }
        ).encode(),
        "inputs[2].name: 'a' is sent twice",
    ),
    (
        "output tensor twice",
        _binary_headers("e6", RESPONSE_TYPE, **{"ce-inferenceservicename": "ce_bin"}),
        json.dumps(
            {
                "outputs": [
                    {"name": "p", "shape": [1], "datatype": "FP32", "data": [0.1]},
                    {"name": "p", "shape": [1], "datatype": "FP32", "data": [0.9]},
                ]
            }
        ).encode(),
        "outputs[1].name: 'p' is sent twice",
    ),
    (  # PostgreSQL cannot store it: refused on both backends before anything is kept (issue 41, item 1)
        "nul in a name",
        _binary_headers("e7", REQUEST_TYPE, **{"ce-inferenceservicename": "ce_bin"}),
        b'{"instances": [{"x\\u0000y": 1}]}',
        "the request's row 0['x\\x00y']: feature names and text values may not contain U+0000",
    ),
    (
        "nul in a value",
        _binary_headers("e8", REQUEST_TYPE, **{"ce-inferenceservicename": "ce_bin"}),
        b'{"inputs": {"zzz": ["a\\u0000b"]}}',
        "the request's row 0['zzz']: feature names and text values may not contain U+0000",
    ),
    (
        "not a cloudevent",
        {"content-type": "application/json"},
        b'{"instances": [{"a": 1}]}',
        "binary mode",
    ),
]


@pytest.mark.parametrize(("case", "headers", "body", "named"), BAD, ids=[b[0] for b in BAD])
def test_bad_events_are_400s_naming_the_attribute_and_keep_nothing(
    replicas: tuple[Server, Server], case: str, headers: dict[str, str], body: bytes, named: str
) -> None:
    a, _ = replicas
    with a.client() as c:
        r = c.post("/v1/cloudevents", content=body, headers=headers)
    assert r.status_code == 400, (case, r.status_code, r.text)
    assert named in r.json()["error"], (named, r.json()["error"])
    event_id = headers.get("ce-id")
    if event_id is not None:
        assert _pair(a, event_id) == []


def test_an_unknown_model_is_a_404(replicas: tuple[Server, Server]) -> None:
    a, _ = replicas
    r = _send(a, _event(REQUEST_TYPE, "e9", {"instances": [{"a": 1}]}, model="nope"))
    assert r.status_code == 404 and "nope" in r.json()["error"], r.text
    by_query = _send(
        a, _event(REQUEST_TYPE, "e10", {"instances": [{"a": 1}]}, model=None), params={"model": "nope"}
    )
    assert by_query.status_code == 404 and "nope" in by_query.json()["error"], by_query.text


def test_an_ingest_token_in_the_url_opens_this_route_only(replicas: tuple[Server, Server]) -> None:
    a, _ = replicas
    db = open_database(a.settings.database_url.get_secret_value())
    try:
        with db.session() as s:
            ingest_secret = create_token(
                session=s, name="kserve-logger", scopes=["ingest"], expires_in=None
            ).secret
            read_secret = create_token(session=s, name="viewer-ce", scopes=["read"], expires_in=None).secret
    finally:
        db.dispose()
    rows, _ = _rows(1, seed=5)
    message = to_binary_event(_event(REQUEST_TYPE, str(uuid.uuid4()), {"instances": rows}, model=None))
    with httpx.Client(base_url=a.url, timeout=30) as c:

        def post(**params: str) -> httpx.Response:
            return c.post(
                "/v1/cloudevents", content=message.body, headers=dict(message.headers), params=params
            )

        anonymous = post(model="ce_bin")
        wrong_scope = post(model="ce_bin", token=read_secret)
        unknown = post(model="ce_bin", token="not-a-token")
        ok = post(model="ce_bin", token=ingest_secret)
        predict = c.get("/v1/alerts", params={"token": ingest_secret})
    assert anonymous.status_code == 401 and "?token=" in anonymous.json()["error"], anonymous.text
    assert wrong_scope.status_code == 403 and unknown.status_code == 401
    assert ok.status_code == 200 and ok.json()["outcome"] == "waiting", ok.text
    assert predict.status_code == 401  # the URL token opens this route only


def test_a_url_token_is_masked_in_every_log_line() -> None:
    """The server's log set-up masks ``?token=`` (and a signed link's signature) on every handler."""
    secret = "dw_0123456789ab_" + "s" * 43
    code = (
        "import logging; from core.logs import setup_logging; setup_logging('INFO'); "
        f"logging.getLogger('uvicorn.error').info('POST /v1/cloudevents?model=m&token={secret} 200'); "
        f"logging.getLogger('driftwarden.x').warning('link /v1/reports?expires=1&signature={secret}')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "token=***" in done.stderr and "signature=***" in done.stderr, done.stderr
    assert secret not in done.stderr


def test_anonymous_requests_without_auth_header_are_refused(replicas: tuple[Server, Server]) -> None:
    a, _ = replicas
    message = to_binary_event(_event(REQUEST_TYPE, "anon", {"instances": [{"a": 1}]}, model="ce_bin"))
    with a.client() as c:
        r = c.post("/v1/cloudevents", content=message.body, headers={**dict(message.headers), **NO_AUTH})
    assert r.status_code == 401, r.text


def test_half_spool_keeps_halves_in_order(tmp_path: Path) -> None:
    """The spool of halves the database could not take: claimed once, given back, taken from the dead."""
    from predictions.halves import HalfSpool
    from predictions.service.pairing import Arrival

    spool = HalfSpool(tmp_path / "halves")
    now = datetime.now(UTC)
    for k in range(3):
        spool.put(Arrival("m", f"e{k}", "request", b'{"instances": []}', now, now))
    taken = spool.claim(limit=2)
    assert [arrival.event_id for _, arrival in taken] == ["e0", "e1"]
    assert [arrival.event_id for _, arrival in spool.claim()] == [
        "e2"
    ]  # the claimed ones are not offered again
    spool.release(taken[1][0])
    spool.done(taken[0][0])
    again = spool.claim()
    assert [arrival.event_id for _, arrival in again] == ["e1"] and again[0][1].body == b'{"instances": []}'
    orphan = again[0][0].rename(
        again[0][0].with_name(again[0][0].name.split(".claimed-")[0] + ".claimed-999999")
    )
    assert orphan.exists() and [a.event_id for _, a in spool.claim()] == ["e1"]  # pid 999999 is gone
    assert spool.pending() == 2  # e1 claimed again, e2 still claimed
    broken = spool.put(Arrival("m", "e3", "request", b"{}", now, now))
    broken.write_bytes(b"{not json")
    assert spool.claim() == [] and broken.with_name(broken.name + ".bad").exists()  # set aside, not retried


def test_half_spool_holds_its_cap_and_keeps_nothing_past_it(tmp_path: Path) -> None:
    """``spool_max_bytes`` caps the halves waiting (claimed ones count); past it nothing is written."""
    from predictions.halves import HalfSpool
    from predictions.service.pairing import Arrival
    from predictions.spool import SpoolFull

    now = datetime.now(UTC)
    half = Arrival("m", "e", "request", b"x" * 1000, now, now)
    spool = HalfSpool(tmp_path / "halves", max_bytes=5000)
    kept = 0
    with pytest.raises(SpoolFull, match="5000 bytes"):
        for _ in range(10):
            spool.put(half)
            kept += 1
    assert kept == 3 and spool.pending() == 3  # ~1.5 KB each: a fourth would pass 5000 bytes
    assert spool.pending_bytes() <= 5000
    assert sorted(p.suffix for p in spool.directory.iterdir()) == [".half"] * 3  # no temporary file left
    taken = spool.claim(limit=1)
    with pytest.raises(SpoolFull):
        spool.put(half)  # a claimed half still waits for the database: it counts
    spool.done(taken[0][0])
    spool.put(half)
    assert spool.pending() == 3


def test_a_server_without_its_log_answers_503_and_keeps_nothing(
    replicas: tuple[Server, Server], tmp_path: Path
) -> None:
    a, _ = replicas
    settings = a.settings.model_copy(
        update={"prediction_log_enabled": False, "spool_path": tmp_path / "spool"}
    )
    event_id = str(uuid.uuid4())
    with Server(settings) as off:
        r = _send(off, _event(REQUEST_TYPE, event_id, {"instances": [{"a": 1}]}, model="ce_bin"))
    assert r.status_code == 503 and "--no-log" in r.json()["error"], r.text
    assert _pair(a, event_id) == []

"""Both protocols against a real server and a real trained model, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
import numpy as np
import pytest
from sqlalchemy import create_engine, select, text

from core.database import open_database
from predictions.models import PredictionFeedback
from predictions.service import logged_predictions
from tests.service.v2data import _v2_tensors
from tests.support import Server, TrainedModels, count_rows


def _row(trained: TrainedModels, i: int = 0, **changes: Any) -> dict[str, Any]:
    return {**trained.rows[i], **changes}


def test_v1_row_and_columnar_formats_agree(server: Server, trained: TrainedModels) -> None:
    rows = [trained.rows[i] for i in range(5)]
    with server.client() as c:
        r1 = c.post("/v1/models/credit:predict", json={"instances": rows})
        r2 = c.post("/v1/models/credit:predict", json={"inputs": {k: [r[k] for r in rows] for k in rows[0]}})
    assert r1.status_code == 200, r1.text
    assert r2.status_code == 200, r2.text
    body1, body2 = r1.json(), r2.json()
    assert len(body1["predictions"]) == 5 and all(0.0 <= p <= 1.0 for p in body1["predictions"])
    assert np.allclose(body1["predictions"], body2["outputs"], atol=1e-6)
    assert body1["model_version"] == "1"
    assert len(set(body1["prediction_ids"] + body2["prediction_ids"])) == 10
    assert r1.headers["x-request-id"]


def test_v2_tensors_and_matrix_agree_with_v1(server: Server, trained: TrainedModels) -> None:
    rows = [trained.rows[i] for i in range(3)]
    with server.client() as c:
        v1 = c.post("/v1/models/credit:predict", json={"instances": rows}).json()["predictions"]
        t = c.post("/v2/models/credit/infer", json={"id": "abc", "inputs": _v2_tensors(rows)})
        m = c.post(
            "/v2/models/credit/versions/1/infer",
            json={
                "inputs": [
                    {
                        "name": "input",
                        "shape": [3, len(rows[0])],
                        "datatype": "BYTES",
                        "data": [list(r.values()) for r in rows],
                    }
                ]
            },
        )
    assert t.status_code == 200, t.text
    assert m.status_code == 200, m.text
    body = t.json()
    assert body["id"] == "abc" and body["model_name"] == "credit" and body["model_version"] == "1"
    out = body["outputs"][0]
    assert out["name"] == "probability" and out["shape"] == [3] and out["datatype"] == "FP32"
    assert np.allclose(out["data"], v1, atol=1e-6)
    assert np.allclose(m.json()["outputs"][0]["data"], v1, atol=1e-6)
    assert len(body["parameters"]["prediction_ids"].split(",")) == 3


def test_stock_triton_client_works_unmodified(server: Server, trained: TrainedModels) -> None:
    import tritonclient.http as triton

    rows = [trained.rows[i] for i in range(4)]
    client = triton.InferenceServerClient(url=server.url.removeprefix("http://"))
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("credit")
    meta = client.get_model_metadata("credit")
    assert {i["name"] for i in meta["inputs"]} == set(rows[0])
    expected = httpx.post(f"{server.url}/v1/models/credit:predict", json={"instances": rows}).json()[
        "predictions"
    ]
    for binary in (False, True):
        inputs = []
        for spec in meta["inputs"]:
            name = spec["name"]
            if spec["datatype"] == "BYTES":
                arr = np.array([r[name].encode() for r in rows], dtype=np.object_)
            else:
                arr = np.array([np.nan if r[name] is None else r[name] for r in rows], dtype=np.float32)
            arr = np.array([np.nan if v is None else v for v in arr]) if False else arr
            inp = triton.InferInput(name, [len(rows)], spec["datatype"])
            inp.set_data_from_numpy(arr, binary_data=binary)
            inputs.append(inp)
        result = client.infer("credit", inputs, request_id="triton-1")
        assert np.allclose(result.as_numpy("probability"), expected, atol=1e-6)
        assert result.get_response()["id"] == "triton-1"
    client.close()


def test_missing_values_in_nullable_features_are_predicted(server: Server, trained: TrainedModels) -> None:
    with server.client() as c:
        r = c.post("/v1/models/credit:predict", json={"instances": [_row(trained, employment_years=None)]})
    assert r.status_code == 200, r.text


BAD_INPUTS: list[tuple[str, dict[str, Any], str, str | None]] = [
    ("unknown feature", {"zodiac": "leo"}, "unknown_feature", "zodiac"),
    ("missing feature", {"__drop__": "income"}, "missing_feature", "income"),
    ("string for a number", {"income": "lots"}, "type", "income"),
    ("number for a category", {"region": 3}, "type", "region"),
    ("boolean for a number", {"age": True}, "type", "age"),
    ("below allowed range", {"income": -5.0}, "allowed_range", "income"),
    ("above allowed range", {"age": 10_000}, "allowed_range", "age"),
    ("list instead of a value", {"age": [1, 2]}, "type", "age"),
]


@pytest.mark.parametrize(("case", "change", "rule", "feature"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_inputs_get_400_naming_row_feature_and_rule(
    server: Server, trained: TrainedModels, case: str, change: dict[str, Any], rule: str, feature: str | None
) -> None:
    good = _row(trained, 0)
    bad = dict(_row(trained, 1))
    if "__drop__" in change:
        del bad[change["__drop__"]]
    else:
        bad.update(change)
    with server.client() as c:
        r = c.post("/v1/models/credit:predict", json={"instances": [good, bad]})
    assert r.status_code == 400, r.text
    body = r.json()
    assert f"rule: {rule}" in body["error"] and f"'{feature}'" in body["error"] and "row 1" in body["error"]
    assert {"row": 1, "feature": feature, "rule": rule} == {
        k: body["violations"][0][k] for k in ("row", "feature", "rule")
    }


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_inf_are_rejected_by_name(server: Server, trained: TrainedModels, literal: str) -> None:
    import json

    text = json.dumps({"instances": [_row(trained, 0, income=12345.5)]}).replace("12345.5", literal)
    with server.client() as c:
        r = c.post("/v1/models/credit:predict", content=text, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert (
        "row 0" in r.json()["error"]
        and "'income'" in r.json()["error"]
        and "rule: finite" in r.json()["error"]
    )


def test_request_level_violations(server: Server, trained: TrainedModels) -> None:
    row = _row(trained)
    with server.client() as c:
        too_many = c.post("/v1/models/credit:predict", json={"instances": [row] * 1025})
        both = c.post("/v1/models/credit:predict", json={"instances": [row], "inputs": {}})
        empty = c.post("/v1/models/credit:predict", json={"instances": []})
        not_json = c.post("/v1/models/credit:predict", content=b"{not json")
        ragged = c.post(
            "/v1/models/credit:predict", json={"inputs": {**{k: [v] for k, v in row.items()}, "age": [1, 2]}}
        )
        huge = c.post("/v1/models/credit:predict", content=b"x" * (server.settings.max_body_bytes + 1))
        v2_type = c.post(
            "/v2/models/credit/infer",
            json={
                "inputs": [
                    {**t, "datatype": "FP32"} if t["name"] == "region" else t for t in _v2_tensors([row])
                ]
            },
        )
        v2_shape = c.post(
            "/v2/models/credit/infer",
            json={"inputs": [{**t, "shape": [2]} if t["name"] == "age" else t for t in _v2_tensors([row])]},
        )
        tensors = _v2_tensors([row])
        v2_twice = c.post(  # the rule KServe's events follow too (codecs.repeated_tensor)
            "/v2/models/credit/infer",
            json={"inputs": [*tensors, next(t for t in tensors if t["name"] == "age")]},
        )
        sig = c.post("/v1/models/credit:predict", json={"instances": [row], "signature_name": "other"})
    assert too_many.status_code == 400 and "rule: max_rows" in too_many.json()["error"]
    assert both.status_code == 400 and "not both" in both.json()["error"]
    assert empty.status_code == 400 and "rule: empty" in empty.json()["error"]
    assert not_json.status_code == 400 and "rule: json" in not_json.json()["error"]
    assert ragged.status_code == 400 and "feature 'age'" in ragged.json()["error"]
    assert huge.status_code == 413 and "rule: max_body_bytes" in huge.json()["error"]
    assert v2_twice.status_code == 400 and "'age'" in v2_twice.json()["error"], v2_twice.text
    assert "rule: duplicate_input" in v2_twice.json()["error"], v2_twice.text
    assert (
        v2_type.status_code == 400
        and "'region'" in v2_type.json()["error"]
        and "rule: type" in v2_type.json()["error"]
    )
    assert (
        v2_shape.status_code == 400
        and "'age'" in v2_shape.json()["error"]
        and "rule: shape" in v2_shape.json()["error"]
    )
    assert sig.status_code == 400 and "rule: signature" in sig.json()["error"]


def test_nothing_a_client_sends_gives_a_500(server: Server, trained: TrainedModels) -> None:
    bodies: list[Any] = [
        None,
        1,
        "x",
        [],
        {},
        {"instances": None},
        {"instances": [1, 2]},
        {"inputs": [1]},
        {"inputs": {"age": 3}},
        {"instances": [{}]},
        {"inputs": []},
        {"inputs": [{"name": 1}]},
        {"inputs": [{"name": "age", "shape": [-1], "datatype": "FP32", "data": [1]}]},
        {"inputs": [{"name": "age", "shape": [1], "datatype": "WAT", "data": [1]}]},
        {"inputs": [{"name": "x", "shape": [1, 10], "datatype": "FP32", "data": [[1] * 10]}]},
        {"labels": [{"prediction_id": 5, "label": "y"}]},
        {"instances": [_row(trained)] * 3, "extra": True},
    ]
    paths = [
        "/v1/models/credit:predict",
        "/v2/models/credit/infer",
        "/v1/models/credit/feedback",
        "/v1/models/credit/versions/abc:predict",
        "/v1/models/credit/labels/nope:predict",
        "/v1/models/nope:predict",
        "/v2/models/credit/versions/99/infer",
        "/v1/models/credit:classify",
    ]
    import json

    with server.client() as c:
        for path in paths:
            for body in bodies:
                r = c.post(path, content=json.dumps(body))
                assert 400 <= r.status_code < 500, (path, body, r.status_code, r.text)
                assert "error" in r.json()
        r = c.post(
            "/v2/models/credit/infer",
            content=b'{"inputs": []}',
            headers={"Inference-Header-Content-Length": "99999"},
        )
        assert r.status_code == 400
        row = json.dumps(_row(trained, home_ownership="@@"))
        raw_bodies = [
            b'{"instances": [' + row.replace('"@@"', '"\\ud800"').encode() + b"]}",  # a lone surrogate
            b'{"instances": [' + row.encode() + b'], "x": 1' + b"0" * 400 + b"}",  # an integer past 64 bits
            b'{"instances": ' + b"[" * 5000 + b"]" * 5000 + b"}",  # nested beyond any parser's depth
            b'{"inputs": [{"name": "age", "shape": [1], "datatype": "FP32", "data": '
            + b"[" * 500
            + b"1"
            + b"]" * 500
            + b"}]}",
            b"\xff\xfe garbage",
        ]
        for path in paths[:3]:
            for raw in raw_bodies:
                r = c.post(path, content=raw)
                assert 400 <= r.status_code < 500, (path, raw[:60], r.status_code, r.text)


def test_status_metadata_and_health(server: Server) -> None:
    with server.client() as c:
        status = c.get("/v1/models/credit").json()["model_version_status"]
        meta = c.get("/v1/models/credit/metadata").json()
        label = c.get("/v1/models/credit/labels/canary").json()["model_version_status"]
        v2 = c.get("/v2/models/credit").json()
        assert c.get("/v2/health/live").status_code == 200
        assert c.get("/v2/health/ready").status_code == 200
        assert c.get("/v2/models/credit/versions/2/ready").status_code == 200
        assert c.get("/v2/models/nope/ready").status_code == 404
        assert c.get("/v1/models/nope").status_code == 404
        assert c.get("/v2").json()["name"] == "driftwarden"
        docs = c.get("/docs")
        spec = c.get("/openapi.json").json()
    assert {(s["version"], s["state"]) for s in status} == {("1", "AVAILABLE"), ("2", "AVAILABLE")}
    assert label == [
        {"version": "2", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
    ]
    sig = meta["metadata"]["signature_def"]["signature_def"]["serving_default"]
    assert sig["inputs"]["age"]["dtype"] == "DT_FLOAT" and sig["inputs"]["region"]["dtype"] == "DT_STRING"
    assert v2["versions"] == ["1", "2"] and v2["outputs"] == [
        {"name": "probability", "datatype": "FP32", "shape": [-1]}
    ]
    assert docs.status_code == 200
    predict = spec["paths"]["/v1/models/{name}:predict"]["post"]
    assert "row" in predict["requestBody"]["content"]["application/json"]["examples"]
    assert all(op.get("summary") for p in spec["paths"].values() for op in p.values())


def test_labels_and_versions_route_to_their_version(server: Server, trained: TrainedModels) -> None:
    row = _row(trained)
    with server.client() as c:
        by_label = c.post("/v1/models/credit/labels/canary:predict", json={"instances": [row]}).json()
        by_version = c.post("/v1/models/credit/versions/2:predict", json={"instances": [row]}).json()
        missing = c.post("/v1/models/credit/versions/7:predict", json={"instances": [row]})
    assert by_label["model_version"] == "2" and by_version["model_version"] == "2"
    assert by_label["predictions"] == pytest.approx(by_version["predictions"])
    assert missing.status_code == 404 and "not loaded" in missing.json()["error"]


def test_n_requests_make_exactly_n_log_rows(server: Server, trained: TrainedModels) -> None:
    rid = "count-test-" + server.settings.database_url.get_secret_value()[:6]
    n = 0
    with server.client() as c:
        for i in range(40):
            rows = [trained.rows[(i + k) % 300] for k in range(1 + i % 3)]
            path = "/v1/models/credit:predict" if i % 2 else "/v2/models/credit/infer"
            body = {"instances": rows} if i % 2 else {"inputs": _v2_tensors(rows)}
            r = c.post(path, json=body, headers={"X-Request-Id": rid})
            assert r.status_code == 200, r.text
            assert r.headers["x-request-id"] == rid
            n += len(rows)
    url = server.settings.database_url.get_secret_value()
    # durable mode: committed before the answer; one batch row per request, holding its predictions
    assert count_rows(url, "request_id = :rid", {"rid": rid}) == n
    engine = create_engine(url)
    with engine.connect() as conn:
        batches = conn.execute(
            text("select size from prediction_batches where request_id = :rid order by id"), {"rid": rid}
        ).scalars()
        assert list(batches) == [1 + i % 3 for i in range(40)]
    engine.dispose()
    stats = server.state.writer.stats
    assert stats.rows_dropped == 0


def test_flags_are_logged_and_counted(server: Server, trained: TrainedModels) -> None:
    row = _row(trained, 0, loan_purpose="crypto", credit_score=1200)
    with server.client() as c:
        r = c.post(
            "/v1/models/credit:predict", json={"instances": [row]}, headers={"X-Request-Id": "flagged-1"}
        )
        metrics = c.get("/metrics").text
    assert r.status_code == 200, r.text
    engine = create_engine(server.settings.database_url.get_secret_value())
    with engine.connect() as conn:
        size, flags = conn.execute(
            text("select size, flags from prediction_batches where request_id = 'flagged-1'")
        ).one()
    engine.dispose()
    flags = flags if isinstance(flags, list) else json.loads(flags)  # one list per prediction
    assert size == 1 and len(flags) == 1
    assert set(flags[0]) == {"loan_purpose:unseen_category", "credit_score:observed_range"}
    assert (
        'driftwarden_contract_flags_total{feature="loan_purpose",model="credit",rule="unseen_category"}'
        in metrics
    )
    assert "driftwarden_prediction_log_rows_dropped_total 0.0" in metrics


def test_feedback_joins_and_reports_unknown_ids(server: Server, trained: TrainedModels) -> None:
    with server.client() as c:
        ids = c.post("/v1/models/credit:predict", json={"instances": trained.rows[:3]}).json()[
            "prediction_ids"
        ]
        r = c.post(
            "/v1/models/credit/feedback",
            json={
                "labels": [
                    {"prediction_id": ids[0], "label": 1},
                    {"prediction_id": ids[1], "label": False},
                    {"prediction_id": "00000000-0000-7000-8000-000000000000", "label": 1},
                ]
            },
        )
        bad = c.post("/v1/models/credit/feedback", json={"labels": [{"prediction_id": ids[2], "label": 7}]})
        upper = c.post(  # a UUID in upper case is the same id (once: reported unknown)
            "/v1/models/credit/feedback", json={"labels": [{"prediction_id": ids[2].upper(), "label": 0}]}
        )
    assert upper.status_code == 200 and upper.json() == {"stored": 1, "unknown_ids": [], "duplicate_ids": []}
    assert r.status_code == 200, r.text
    assert r.json() == {
        "stored": 2,
        "unknown_ids": ["00000000-0000-7000-8000-000000000000"],
        "duplicate_ids": [],
    }
    assert bad.status_code == 400 and "labels[0].label" in bad.json()["error"]
    db = open_database(server.settings.database_url.get_secret_value())
    try:
        with db.session() as s:
            logged = logged_predictions(session=s, model_name="credit", ids=ids)
            feedback = s.execute(
                select(
                    PredictionFeedback.prediction_id,
                    PredictionFeedback.label,
                    PredictionFeedback.log_id,
                    PredictionFeedback.position,
                    PredictionFeedback.probability,
                ).where(PredictionFeedback.prediction_id.in_(ids[:2]))
            ).all()
    finally:
        db.dispose()
    # each label joins its prediction: the request's batch and the prediction's position in it, its output
    assert {pid: label for pid, label, *_ in feedback} == {ids[0]: 1.0, ids[1]: 0.0}
    batch = {log_id for *_, log_id, _, _ in feedback}
    assert len(batch) == 1 and {logged[pid].log_id for pid in ids} == batch  # one request: one batch
    assert [logged[pid].position for pid in ids] == [0, 1, 2]
    for pid, _, log_id, position, probability in feedback:
        assert (log_id, position) == (logged[pid].log_id, logged[pid].position)
        assert probability is not None and math.isfinite(probability)
        assert probability == logged[pid].probability

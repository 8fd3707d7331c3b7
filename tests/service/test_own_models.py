"""A team's own models (plain Keras / TensorFlow, one per task) imported, promoted and served for real.

Answers equal calling the SavedModel directly (1e-5) on both protocols; OIP v2 read by the stock
``tritonclient``; every row logged (the multi-class vector too, a regression value outside its expected
range flagged); feedback takes each task's labels and names the allowed ones otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from sqlalchemy import create_engine, text

from alerts.rules import DEFAULT_RULES
from core.database import open_database
from core.tabular import write_table
from predictions.service import Logged, recent_predictions
from registry.schema import Task
from registry.service import promote
from tests import own_models
from tests.support import Server, serve_settings
from training.imports import ImportSpec, import_reference, import_saved_model

MODELS = {"own_bin": "binary", "own_cls": "multiclass", "own_reg": "regression"}
TARGETS = {"binary": "y_bin", "multiclass": "y_cls", "regression": "y_reg"}
ELSEWHERE = "ext_bin"  # registered from a reference with its predictions, served by another stack


@pytest.fixture(scope="module")
def own_server(module_db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict]]:
    """One server per backend with the three imported models promoted."""
    root = tmp_path_factory.mktemp("own-serve")
    data = own_models.reference(1_500, seed=0)
    write_table(data, root / "reference.csv")
    writers = {
        "binary": own_models.write_binary,
        "multiclass": own_models.write_multiclass,
        "regression": own_models.write_regression,
    }
    sources = {task: writers[task](root / task, data) for task in writers}
    registry = root / "registry"
    db = open_database(module_db_url, upgrade=True)
    try:
        for name, task in MODELS.items():
            spec = ImportSpec(
                model_name=name,
                path=sources[task],
                reference=root / "reference.csv",
                target=TARGETS[task],
                task=Task.parse(task),
                features=("a", "b", "c") if task == "multiclass" else (),
            )
            import_saved_model(spec=spec, db=db, registry=registry)
            with db.session() as s:
                promote(session=s, model_name=name, version=1)
        # a model served elsewhere: its answers are a column of the reference, it has no SavedModel
        scores = {**data, "p": 1.0 / (1.0 + np.exp(-(data["a"] + 0.5 * data["b"])))}
        write_table(scores, root / "scored.csv")
        spec = ImportSpec(
            model_name=ELSEWHERE,
            path=None,
            reference=root / "scored.csv",
            target="y_bin",
            prediction_column="p",
        )
        import_reference(spec=spec, db=db, registry=registry)
        with db.session() as s:
            promote(session=s, model_name=ELSEWHERE, version=1)
    finally:
        db.dispose()
    settings = serve_settings(module_db_url, root / "spool", registry_path=registry, log_durability="durable")
    with Server(settings) as srv:
        yield srv, sources


def _rows(n: int, seed: int) -> tuple[dict[str, np.ndarray], list[dict[str, Any]]]:
    data = own_models.reference(n, seed=seed)
    rows = [
        {
            "a": float(data["a"][i]),
            "b": float(data["b"][i]),
            "c": int(data["c"][i]),
            "color": str(data["color"][i]),
        }
        for i in range(n)
    ]
    return data, rows


def _instances(name: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keep = ("a", "b", "c", "color") if name == "own_bin" else ("a", "b", "c")
    return [{k: r[k] for k in keep} for r in rows]


@pytest.mark.parametrize("name", list(MODELS))
def test_answers_equal_the_saved_model(own_server: tuple[Server, dict], name: str) -> None:
    srv, sources = own_server
    data, rows = _rows(40, seed=7)
    want = own_models.direct(sources[MODELS[name]], data)
    with srv.client() as c:
        r = c.post(f"/v1/models/{name}:predict", json={"instances": _instances(name, rows)})
        assert r.status_code == 200, r.text
        got = np.asarray(r.json()["predictions"], dtype=np.float64)
        v2 = c.post(
            f"/v2/models/{name}/infer",
            json={
                "inputs": [
                    {
                        "name": k,
                        "shape": [40],
                        "datatype": "BYTES" if k == "color" else "FP32",
                        "data": [r[k] for r in rows],
                    }
                    for k in _instances(name, rows[:1])[0]
                ]
            },
        )
        assert v2.status_code == 200, v2.text
    # the signature's own output, in its own shape: [40, 1] (Keras, binary), [40, 3], [40] (tf.Module)
    (out,) = v2.json()["outputs"]
    assert out["name"] == ("prediction" if name == "own_reg" else "output_0")
    assert got.shape == want.shape and out["shape"] == list(want.shape)
    np.testing.assert_allclose(got, want, atol=1e-5)
    np.testing.assert_allclose(np.reshape(out["data"], want.shape), want, atol=1e-5)


def test_tritonclient_reads_the_multiclass_vector(own_server: tuple[Server, dict]) -> None:
    import tritonclient.http as httpclient

    srv, sources = own_server
    data, _ = _rows(16, seed=8)
    assert srv.settings.admin_token is not None
    headers = {"Authorization": f"Bearer {srv.settings.admin_token.get_secret_value()}"}
    client = httpclient.InferenceServerClient(url=srv.url.removeprefix("http://"))
    inputs = []
    for k in ("a", "b", "c"):
        tensor = httpclient.InferInput(k, [16], "FP32")
        tensor.set_data_from_numpy(data[k].astype(np.float32), binary_data=False)
        inputs.append(tensor)
    result = client.infer(
        "own_cls",
        inputs,
        outputs=[httpclient.InferRequestedOutput("output_0", binary_data=False)],
        headers=headers,
    )
    got = result.as_numpy("output_0")
    assert got.shape == (16, 3)
    np.testing.assert_allclose(got, own_models.direct(sources["multiclass"], data), atol=1e-5)
    meta = client.get_model_metadata("own_cls", headers=headers)
    assert meta["outputs"] == [{"name": "output_0", "datatype": "FP32", "shape": [-1, 3]}]
    client.close()


def _logged(url: str, model: str) -> dict[str, Logged]:
    """The model's logged predictions by id, decoded from their batches (predictions.service)."""
    db = open_database(url)
    try:
        with db.session() as s:
            found = recent_predictions(session=s, model_name=model)
    finally:
        db.dispose()
    by_id = {p.prediction_id: p for p in found}
    assert len(by_id) == len(found)  # each prediction logged once
    return by_id


def test_every_row_logged_with_its_task_output(own_server: tuple[Server, dict], module_db_url: str) -> None:
    srv, _ = own_server
    _, rows = _rows(5, seed=9)
    far = {"a": 10.0, "b": -3.0, "c": 10}  # a regression value far above the reference's
    with srv.client() as c:
        cls = c.post("/v1/models/own_cls:predict", json={"instances": _instances("own_cls", rows)}).json()
        reg = c.post(
            "/v1/models/own_reg:predict", json={"instances": [*_instances("own_reg", rows), far]}
        ).json()
    srv.state.flush_predictions(10)
    logged = _logged(module_db_url, "own_cls")
    for pid, vector in zip(cls["prediction_ids"], cls["predictions"], strict=True):
        got = logged[pid]
        assert got.outputs is not None
        np.testing.assert_allclose(got.outputs, vector, atol=1e-6)
        assert got.probability == pytest.approx(max(vector))
        assert got.flags is None
    logged = _logged(module_db_url, "own_reg")
    for pid, value in zip(reg["prediction_ids"], reg["predictions"], strict=True):
        got = logged[pid]
        assert got.outputs is None and got.probability == pytest.approx(value)
    flags = logged[reg["prediction_ids"][-1]].flags
    assert flags is not None and "value:output_range" in flags, flags
    assert not any("value:" in str(logged[pid].flags) for pid in reg["prediction_ids"][:-1])
    # one request: each prediction logged with its own inputs, the far row's last
    assert len({logged[pid].request_id for pid in reg["prediction_ids"]}) == 1
    assert [logged[pid].inputs for pid in reg["prediction_ids"]] == [*_instances("own_reg", rows), far]


def test_feedback_takes_each_tasks_labels(own_server: tuple[Server, dict], module_db_url: str) -> None:
    srv, _ = own_server
    _, rows = _rows(3, seed=10)
    with srv.client() as c:
        ids = {
            name: c.post(f"/v1/models/{name}:predict", json={"instances": _instances(name, rows)}).json()[
                "prediction_ids"
            ]
            for name in MODELS
        }
        good: dict[str, list[object]] = {
            "own_bin": [1, 0, True],
            "own_cls": ["low", 2, "high"],
            "own_reg": [3.25, -1, 0.0],
        }
        for name, labels in good.items():
            body = {
                "labels": [{"prediction_id": p, "label": v} for p, v in zip(ids[name], labels, strict=True)]
            }
            r = c.post(f"/v1/models/{name}/feedback", json=body)
            assert r.status_code == 200 and r.json()["stored"] == 3, r.text
        bad = {
            "own_bin": (2, "0 or 1"),
            "own_cls": ("purple", "a class name ('high', 'low', 'mid') or its index 0 to 2"),
            "own_reg": ("3.2", "a finite number"),
        }
        for name, (label, allowed) in bad.items():
            body = {
                "labels": [
                    {"prediction_id": ids[name][0], "label": 1 if name == "own_reg" else 0},
                    {"prediction_id": ids[name][1], "label": label},
                ]
            }
            r = c.post(f"/v1/models/{name}/feedback", json=body)
            assert r.status_code == 400, r.text
            assert "labels[1].label must be" in r.json()["error"] and allowed in r.json()["error"], r.text
        r = c.post(
            "/v1/models/own_cls/feedback", json={"labels": [{"prediction_id": ids["own_cls"][0], "label": 3}]}
        )
        assert r.status_code == 400
    engine = create_engine(module_db_url)
    try:
        with engine.connect() as conn:
            stored: dict[str, Any] = dict(
                conn.execute(
                    text("select prediction_id, label from prediction_feedback where model_name = 'own_cls'")
                ).all()
            )
    finally:
        engine.dispose()
    assert [stored[p] for p in ids["own_cls"]] == [1.0, 2.0, 0.0]  # classes sorted: high, low, mid


LABELS = {
    "own_bin": lambda d, i: int(d["y_bin"][i]),
    "own_cls": lambda d, i: str(d["y_cls"][i]),
    "own_reg": lambda d, i: float(d["y_reg"][i]),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_monitor_runs_on_each_task(own_server: tuple[Server, dict], name: str) -> None:
    """Input drift, quality, the output's drift and the task's realised and estimated metrics on every task (a
    covariate-shifted window: ``a`` moves, P(y | x) stays)."""
    from monitors.flows import run_monitor
    from monitors.performance import metrics_for

    srv, _ = own_server
    data = own_models.reference(600, seed=11, shift=1.5)
    rows = [
        {
            "a": float(data["a"][i]),
            "b": float(data["b"][i]),
            "c": int(data["c"][i]),
            "color": str(data["color"][i]),
        }
        for i in range(600)
    ]
    if name == "own_reg":  # a rule of its own on the task's metric, beside the defaults
        from alerts.service import replace_rules
        from alerts.specs import parse_rule

        rule = parse_rule(
            {"name": "rmse_up", "kind": "performance", "params": {"metric": "rmse", "margin": 0.1}},
            path="rule",
        )
        db = open_database(srv.settings.database_url.get_secret_value())
        try:
            with db.session() as s:
                replace_rules(session=s, model_name=name, rules=[*DEFAULT_RULES, rule], source="test")
        finally:
            db.dispose()
    ids: list[str] = []
    answers: list[Any] = []
    with srv.client() as c:
        for part in range(0, 600, 200):
            r = c.post(
                f"/v1/models/{name}:predict", json={"instances": _instances(name, rows[part : part + 200])}
            )
            assert r.status_code == 200, r.text
            ids += r.json()["prediction_ids"]
            answers += r.json()["predictions"]
        labelled = [
            {"prediction_id": p, "label": LABELS[name](data, i)} for i, p in enumerate(ids) if i % 2 == 0
        ]
        r = c.post(f"/v1/models/{name}/feedback", json={"labels": labelled})
        assert r.status_code == 200 and r.json()["stored"] == 300, r.text
    srv.state.flush_predictions(10)
    db = open_database(srv.settings.database_url.get_secret_value())
    try:
        settings = srv.settings.model_copy(update={"monitor_min_rows": 100, "monitor_window_rows": 600})
        outcome = run_monitor(db=db, settings=settings, model_name=name)
    finally:
        db.dispose()
    report = outcome.report.as_dict()
    drifted = {f["name"] for f in report["features"] if f["drifted"]}
    assert "a" in drifted and "b" not in drifted, drifted
    assert report["prediction"]["name"] == "prediction" and report["prediction"]["rows"] == 600
    realised, estimated = report["performance"], report["estimated_performance"]
    assert realised["rows"] == 300 and realised["label_coverage"] == pytest.approx(0.5)
    assert report["concept_drift"]["observed"] == 300
    task = Task.parse(MODELS[name])
    codes = {"own_cls": lambda v: float(own_models.CLASSES.index(v))}.get(name, float)
    want = metrics_for(
        task,
        y_true=np.array([codes(item["label"]) for item in labelled]),
        predictions=np.array(answers[::2], dtype=np.float64).reshape(300, -1).squeeze(-1)
        if name == "own_bin"  # the Keras model's own [batch, 1] output
        else np.array(answers[::2], dtype=np.float64),
        classes=own_models.CLASSES,
    )
    exact = {"own_bin": ("accuracy", "f1"), "own_cls": ("accuracy", "macro_f1", "log_loss", "recall[mid]")}
    for key in exact.get(name, ("mae", "rmse", "r2")):
        assert realised[key] == pytest.approx(want[key], rel=1e-6), key
    if name == "own_bin":
        assert set(realised) >= {"roc_auc", "accuracy", "f1"} and estimated["roc_auc"] > 0.5
    elif name == "own_cls":
        assert set(realised) >= {
            "accuracy",
            "macro_f1",
            "log_loss",
            "recall[high]",
            "recall[low]",
            "recall[mid]",
        }
        assert set(estimated) >= {"accuracy", "macro_f1"}
        outputs = {f["name"]: f for f in report["outputs"]}
        assert set(outputs) == {"prediction[high]", "prediction[low]", "prediction[mid]", "predicted_class"}
    else:
        assert set(realised) >= {"mae", "rmse", "r2"} and set(estimated) >= {"mae", "rmse"}
        assert realised["mae"] > 0 and estimated["mae"] > 0
        # the noise grows with |a|: on the shifted window the RMSE rises well above the reference's, and the
        # rule on it fires (the run's alerts are raised by the server's handlers, in this process)
        assert realised["rmse"] > 1.1 * report["reference_performance"]["rmse"]
        from alerts.flows import firing_findings

        db = open_database(srv.settings.database_url.get_secret_value())
        try:
            firing = {f["name"]: f for f in firing_findings(db=db, model_name=name)}
        finally:
            db.dispose()
        assert "rmse_up" in firing and "performance_drop" in firing, sorted(firing)


def test_a_model_served_elsewhere_is_not_served_here_and_keeps_the_server_ready(
    own_server: tuple[Server, dict],
) -> None:
    srv, _ = own_server
    _, rows = _rows(2, seed=9)
    with srv.client() as c:
        v1 = c.post(f"/v1/models/{ELSEWHERE}:predict", json={"instances": _instances("own_bin", rows)})
        v2 = c.post(
            f"/v2/models/{ELSEWHERE}/infer",
            json={"inputs": [{"name": "a", "shape": [1], "datatype": "FP32", "data": [0.0]}]},
        )
        ready = c.get("/readyz")
    for r in (v1, v2):
        assert r.status_code == 404, r.text
        assert "served elsewhere" in r.text and ELSEWHERE in r.text, r.text
    assert ready.status_code == 200, ready.text
    check = ready.json()["checks"][f"model:{ELSEWHERE}"]
    assert check["ok"] is True and "served elsewhere" in check["detail"], check

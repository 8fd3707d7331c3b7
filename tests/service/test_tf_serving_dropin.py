"""A drop-in for TF Serving clients: an imported SavedModel answers in its own signature's terms.

Tiny models written in plain Keras / TensorFlow (tests/own_models.py, and a two-output regression module
here) are imported, promoted and served by real uvicorn. A TF Serving client of each keeps its requests and
answers: row format and columnar, ``[batch, 1]`` and ``[batch]`` inputs, a dense ``[batch, 3]`` input, the
signature's own output names and shapes (``[[v]]`` for a ``[batch, 1]`` output, a dict per row for several
outputs), ``signature_name``; OIP v2 and both metadata routes state the signature's names, dtypes and
shapes. Answers equal calling the SavedModel directly (1e-5); the log keeps the same values whatever the
request's form. A version imported before the signature was recorded keeps driftwarden's own API.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.database import open_database
from core.tabular import write_table
from predictions.service import Logged, recent_predictions
from registry.schema import Task
from registry.service import META_DIR, promote
from tests import own_models
from tests.support import Server, serve_settings
from training.imports import ImportSpec, import_saved_model

N = 12


def write_amount(path: Path, data: dict[str, np.ndarray]) -> Path:
    """A regression ``tf.Module``: inputs a ``[batch, 1]`` float32 and b ``[batch]`` float32; outputs
    ``amount`` ``[batch, 1]`` float32 and ``bucket`` ``[batch]`` int64 (two outputs, one of them a float)."""
    import tensorflow as tf

    x = np.stack([data["a"], data["b"], np.ones(len(data["a"]))], axis=1)
    coef = np.linalg.lstsq(x, data["y_reg"], rcond=None)[0].astype(np.float32)

    class Amount(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = tf.Variable(coef)

        @tf.function(
            input_signature=[
                tf.TensorSpec([None, 1], tf.float32, name="a"),
                tf.TensorSpec([None], tf.float32, name="b"),
            ]
        )
        def predict(self, a: tf.Tensor, b: tf.Tensor) -> dict[str, tf.Tensor]:
            amount = a * self.w[0] + tf.expand_dims(b, 1) * self.w[1] + self.w[2]
            return {"amount": amount, "bucket": tf.cast(tf.floor(amount[:, 0]), tf.int64)}

    module = Amount()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.predict})
    return path


def call_directly(path: Path, feeds: dict[str, np.ndarray] | np.ndarray) -> dict[str, np.ndarray]:
    """The SavedModel's own outputs, called directly with tensors in its own shapes (an array: its one
    input)."""
    import tensorflow as tf

    fn = tf.saved_model.load(str(path)).signatures["serving_default"]
    _, specs = fn.structured_input_signature
    if isinstance(feeds, np.ndarray):
        (name,) = specs
        feeds = {name: feeds}
    out = fn(**{k: tf.constant(v, dtype=specs[k].dtype) for k, v in feeds.items()})
    return {k: v.numpy() for k, v in out.items()}


MODELS = {"tfs_bin": "binary", "tfs_cls": "multiclass", "tfs_amt": "regression", "tfs_old": "binary"}
TARGETS = {"binary": "y_bin", "multiclass": "y_cls", "regression": "y_reg"}


@pytest.fixture(scope="module")
def dropin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict[str, Path], str]]:
    """Four imported models promoted and served; ``tfs_old`` stands for a version imported before its
    signature was recorded (its ``signature.json`` removed)."""
    root = tmp_path_factory.mktemp("tfs-dropin")
    url = f"sqlite:///{root / 'db.sqlite'}"
    data = own_models.reference(800, seed=0)
    write_table(data, root / "reference.csv")
    sources = {
        "tfs_bin": own_models.write_binary(root / "bin", data),
        "tfs_cls": own_models.write_multiclass(root / "cls", data),
        "tfs_amt": write_amount(root / "amt", data),
    }
    sources["tfs_old"] = sources["tfs_bin"]
    registry = root / "registry"
    db = open_database(url, upgrade=True)
    try:
        for name, task in MODELS.items():
            spec = ImportSpec(
                model_name=name,
                path=sources[name],
                reference=root / "reference.csv",
                target=TARGETS[task],
                task=Task.parse(task),
                features=("a", "b", "c") if task == "multiclass" else (),
            )
            imported = import_saved_model(spec=spec, db=db, registry=registry)
            if name == "tfs_old":
                (Path(imported.version.path) / META_DIR / "signature.json").unlink()
            with db.session() as s:
                promote(session=s, model_name=name, version=1)
    finally:
        db.dispose()
    settings = serve_settings(url, root / "spool", registry_path=registry, log_durability="durable")
    with Server(settings) as srv:
        yield srv, sources, url


def _data(seed: int) -> dict[str, np.ndarray]:
    return own_models.reference(N, seed=seed)


def _logged(url: str, model: str) -> dict[str, Logged]:
    db = open_database(url)
    try:
        with db.session() as s:
            return {p.prediction_id: p for p in recent_predictions(session=s, model_name=model)}
    finally:
        db.dispose()


def _bin_feeds(d: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {
        "a": d["a"].astype(np.float32)[:, None],
        "b": d["b"].astype(np.float32)[:, None],
        "c": d["c"].astype(np.int64)[:, None],
        "color": d["color"].astype(str)[:, None],
    }


def test_binary_with_column_inputs_answers_as_tf_serving(dropin: tuple[Server, dict[str, Path], str]) -> None:
    srv, sources, url = dropin
    d = _data(21)
    want = call_directly(sources["tfs_bin"], _bin_feeds(d))["output_0"]  # [N, 1]
    column_rows: list[dict[str, list[Any]]]
    column_rows = [{"a": [float(d["a"][i])], "b": [float(d["b"][i])], "c": [int(d["c"][i])],
                    "color": [str(d["color"][i])]} for i in range(N)]  # fmt: skip
    scalar_rows = [{k: v[0] for k, v in row.items()} for row in column_rows]
    columnar = {k: [row[k] for row in column_rows] for k in ("a", "b", "c", "color")}
    with srv.client() as c:
        rows = c.post("/v1/models/tfs_bin:predict", json={"instances": column_rows})
        scalars = c.post("/v1/models/tfs_bin:predict", json={"instances": scalar_rows})
        cols = c.post(
            "/v1/models/tfs_bin:predict", json={"signature_name": "serving_default", "inputs": columnar}
        )
        wrong = c.post(
            "/v1/models/tfs_bin:predict", json={"signature_name": "nope", "instances": column_rows}
        )
        long = c.post("/v1/models/tfs_bin:predict", json={"instances": [{**column_rows[0], "a": [1.0, 2.0]}]})
    for r in (rows, scalars, cols):
        assert r.status_code == 200, r.text
    got = rows.json()["predictions"]
    assert np.shape(got) == (N, 1)  # a list per row in the output's own shape: [[p], ...]
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert scalars.json()["predictions"] == got
    assert np.shape(cols.json()["outputs"]) == (N, 1)
    np.testing.assert_allclose(cols.json()["outputs"], want, atol=1e-5)
    assert len(rows.json()["prediction_ids"]) == N and rows.json()["model_version"] == "1"
    assert wrong.status_code == 400 and "signature_name 'nope'" in wrong.json()["error"], wrong.text
    assert long.status_code == 400 and "[batch, 1]" in long.text and "'a'" in long.text, long.text
    # the log keeps one value per feature and the task's probability whatever the request's form
    srv.state.flush_predictions(10)
    logged = _logged(url, "tfs_bin")
    forms = [r.json()["prediction_ids"] for r in (rows, scalars, cols)]
    for i in range(N):
        entries = [logged[ids[i]] for ids in forms]
        assert all(e.inputs == scalar_rows[i] for e in entries), [e.inputs for e in entries]
        assert all(e.probability == pytest.approx(float(want[i, 0]), abs=1e-6) for e in entries)
        assert all(e.outputs is None for e in entries)


def test_multiclass_dense_input_answers_as_tf_serving(dropin: tuple[Server, dict[str, Path], str]) -> None:
    srv, sources, _ = dropin
    d = _data(22)
    x = np.stack([d["a"], d["b"], d["c"]], axis=1).astype(np.float32)
    (want,) = call_directly(sources["tfs_cls"], x).values()
    with srv.client() as c:
        meta = c.get("/v2/models/tfs_cls").json()
        (dense,) = meta["inputs"]
        bare = c.post("/v1/models/tfs_cls:predict", json={"instances": x.tolist()})
        named = c.post(
            "/v1/models/tfs_cls:predict", json={"instances": [{dense["name"]: r} for r in x.tolist()]}
        )
        tensor = c.post("/v1/models/tfs_cls:predict", json={"inputs": x.tolist()})
        short = c.post("/v1/models/tfs_cls:predict", json={"instances": [[1.0, 2.0]]})
        v2 = c.post(
            "/v2/models/tfs_cls/infer",
            json={
                "inputs": [{"name": dense["name"], "shape": [N, 3], "datatype": "FP32", "data": x.tolist()}]
            },
        )
    assert dense["shape"] == [-1, 3] and dense["datatype"] == "FP32"
    assert meta["outputs"] == [{"name": "output_0", "datatype": "FP32", "shape": [-1, 3]}]
    for r in (bare, named):
        assert r.status_code == 200, r.text
        np.testing.assert_allclose(r.json()["predictions"], want, atol=1e-5)
    assert tensor.status_code == 200, tensor.text
    np.testing.assert_allclose(tensor.json()["outputs"], want, atol=1e-5)
    assert short.status_code == 400 and "[batch, 3]" in short.text and "a, b, c" in short.text, short.text
    assert v2.status_code == 200, v2.text
    (out,) = v2.json()["outputs"]
    assert out["name"] == "output_0" and out["shape"] == [N, 3] and out["datatype"] == "FP32"
    np.testing.assert_allclose(np.reshape(out["data"], (N, 3)), want, atol=1e-5)


def test_regression_with_two_outputs_answers_as_tf_serving(
    dropin: tuple[Server, dict[str, Path], str],
) -> None:
    srv, sources, url = dropin
    d = _data(23)
    a, b = d["a"].astype(np.float32), d["b"].astype(np.float32)
    want = call_directly(sources["tfs_amt"], {"a": a[:, None], "b": b})
    rows = [{"a": [float(a[i])], "b": float(b[i])} for i in range(N)]
    with srv.client() as c:
        row = c.post("/v1/models/tfs_amt:predict", json={"instances": rows})
        col = c.post(
            "/v1/models/tfs_amt:predict", json={"inputs": {"a": a[:, None].tolist(), "b": b.tolist()}}
        )
        v2 = c.post(
            "/v2/models/tfs_amt/infer",
            json={
                "inputs": [
                    {"name": "a", "shape": [N, 1], "datatype": "FP32", "data": a.tolist()},
                    {"name": "b", "shape": [N], "datatype": "FP32", "data": b.tolist()},
                ],
                "outputs": [{"name": "amount"}],
            },
        )
        unknown = c.post(
            "/v2/models/tfs_amt/infer",
            json={
                "inputs": [{"name": "a", "shape": [1], "datatype": "FP32", "data": [0.0]},
                           {"name": "b", "shape": [1], "datatype": "FP32", "data": [0.0]}],
                "outputs": [{"name": "value"}],
            },
        )  # fmt: skip
        meta_v2 = c.get("/v2/models/tfs_amt").json()
        meta_v1 = c.get("/v1/models/tfs_amt/metadata").json()
    assert row.status_code == 200, row.text
    predictions = row.json()["predictions"]  # several outputs: a dict per row, each in its own shape
    assert [set(p) for p in predictions] == [{"amount", "bucket"}] * N
    np.testing.assert_allclose([p["amount"] for p in predictions], want["amount"], atol=1e-5)
    assert np.shape([p["amount"] for p in predictions]) == (N, 1)
    assert [p["bucket"] for p in predictions] == want["bucket"].tolist()
    assert col.status_code == 200, col.text
    outputs = col.json()["outputs"]  # columnar: a dict of named tensors
    np.testing.assert_allclose(outputs["amount"], want["amount"], atol=1e-5)
    assert outputs["bucket"] == want["bucket"].tolist()
    assert v2.status_code == 200, v2.text
    (amount,) = v2.json()["outputs"]  # only the output asked for
    assert amount["name"] == "amount" and amount["shape"] == [N, 1] and amount["datatype"] == "FP32"
    np.testing.assert_allclose(amount["data"], want["amount"].reshape(-1), atol=1e-5)
    assert unknown.status_code == 400 and "value" in unknown.text, unknown.text
    assert meta_v2["inputs"] == [
        {"name": "a", "datatype": "FP32", "shape": [-1, 1]},
        {"name": "b", "datatype": "FP32", "shape": [-1]},
    ]
    assert meta_v2["outputs"] == [
        {"name": "amount", "datatype": "FP32", "shape": [-1, 1]},
        {"name": "bucket", "datatype": "INT64", "shape": [-1]},
    ]
    signature = meta_v1["metadata"]["signature_def"]["signature_def"]["serving_default"]
    assert signature["outputs"]["bucket"]["dtype"] == "DT_INT64"
    assert [d["size"] for d in signature["inputs"]["a"]["tensor_shape"]["dim"]] == ["-1", "1"]
    # the log holds the task's value (the float output), one per row, as driftwarden's monitors read it
    srv.state.flush_predictions(10)
    logged = _logged(url, "tfs_amt")
    for i, pid in enumerate(row.json()["prediction_ids"]):
        assert logged[pid].inputs == {"a": float(a[i]), "b": float(b[i])}
        assert logged[pid].probability == pytest.approx(float(want["amount"][i, 0]), abs=1e-5)


def test_a_version_imported_before_keeps_driftwardens_api(
    dropin: tuple[Server, dict[str, Path], str],
) -> None:
    srv, sources, _ = dropin
    d = _data(24)
    (want,) = call_directly(sources["tfs_old"], _bin_feeds(d)).values()
    rows: list[dict[str, Any]] = own_models.feature_rows(d)
    with srv.client() as c:
        r = c.post("/v1/models/tfs_old:predict", json={"instances": rows})
        meta = c.get("/v2/models/tfs_old").json()
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(r.json()["predictions"], want.reshape(-1), atol=1e-5)
    assert meta["outputs"] == [{"name": "probability", "datatype": "FP32", "shape": [-1]}]

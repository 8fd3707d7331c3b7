"""A team's own models, written with plain Keras / TensorFlow outside driftwarden's trainers (tests only).

One reference table (numbers, an integer count, a colour category) with a label per task, and one model per
task in a different signature style each: per-feature ``[batch, 1]`` Keras inputs (binary), one dense
``[batch, 3]`` matrix (multi-class, ``--features a,b,c``), a ``tf.Module`` with ``[batch]`` inputs of its own
dtypes (regression).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

COLORS = ("red", "green", "blue")
CLASSES = ("high", "low", "mid")  # sorted: the multi-class model's output order
FEATURES = ("a", "b", "c", "color")


def reference(n: int = 2_000, *, seed: int = 0, shift: float = 0.0) -> dict[str, np.ndarray]:
    """Seeded rows with ``y_bin`` (0/1), ``y_cls`` (low/mid/high) and ``y_reg``; ``shift`` moves ``a``."""
    rng = np.random.default_rng(seed)
    a = rng.normal(shift, 1.0, n)
    b = rng.normal(0.0, 1.0, n)
    c = rng.poisson(3, n).astype(np.int64)
    color = rng.choice(np.array(COLORS, dtype=object), n)
    score = a + 0.5 * b + 0.4 * (color == "red")
    y_bin = (score + rng.normal(0, 0.5, n) > 0.2).astype(np.int64)
    noisy = score + rng.normal(0, 0.4, n)
    y_cls = np.where(noisy < -0.5, "low", np.where(noisy < 0.7, "mid", "high")).astype(object)
    y_reg = 2.0 * a - b + 0.5 * c + rng.normal(0, 0.3 * (1 + np.abs(a)), n)
    return {"a": a, "b": b, "c": c, "color": color, "y_bin": y_bin, "y_cls": y_cls, "y_reg": y_reg}


def write_binary(path: Path, data: dict[str, np.ndarray]) -> Path:
    """A Keras functional model: inputs a, b (float32), c (int64), color (string), each [batch, 1]."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(1)
    inputs = {
        "a": keras.Input(shape=(1,), name="a", dtype="float32"),
        "b": keras.Input(shape=(1,), name="b", dtype="float32"),
        "c": keras.Input(shape=(1,), name="c", dtype="int64"),
        "color": keras.Input(shape=(1,), name="color", dtype="string"),
    }
    lookup = keras.layers.StringLookup(vocabulary=list(COLORS), output_mode="one_hot")
    color = keras.layers.Reshape((len(COLORS) + 1,))(lookup(inputs["color"]))
    count = keras.layers.Lambda(lambda v: tf.cast(v, tf.float32) / 3.0)(inputs["c"])
    x = keras.layers.Concatenate()([inputs["a"], inputs["b"], count, color])
    x = keras.layers.Dense(8, activation="relu")(x)
    out = keras.layers.Dense(1, activation="sigmoid")(x)
    model = keras.Model(inputs, out)
    model.compile(optimizer=keras.optimizers.Adam(0.02), loss="binary_crossentropy")
    feeds = {
        "a": data["a"].astype("float32")[:, None],
        "b": data["b"].astype("float32")[:, None],
        "c": data["c"][:, None],
        "color": data["color"].astype(str)[:, None],
    }
    rows = tf.data.Dataset.from_tensor_slices((feeds, data["y_bin"].astype("float32"))).batch(64)
    model.fit(rows.shuffle(len(data["a"]), seed=1), epochs=3, verbose=0, shuffle=False)
    model.export(str(path), verbose=False)
    return path


def write_multiclass(path: Path, data: dict[str, np.ndarray]) -> Path:
    """A Keras Sequential on one dense [batch, 3] input (a, b, c): softmax over CLASSES."""
    import keras

    keras.utils.set_random_seed(2)
    model = keras.Sequential(
        [
            keras.Input(shape=(3,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(3, activation="softmax"),
        ]
    )
    model.compile(optimizer=keras.optimizers.Adam(0.02), loss="sparse_categorical_crossentropy")
    x = np.stack([data["a"], data["b"], data["c"]], axis=1).astype("float32")
    y = np.array([CLASSES.index(v) for v in data["y_cls"]])
    model.fit(x, y, epochs=4, batch_size=64, verbose=0)
    model.export(str(path), verbose=False)
    return path


def write_regression(path: Path, data: dict[str, np.ndarray]) -> Path:
    """A ``tf.Module`` with [batch] inputs a (float64), b (float32), c (int32): a least-squares line."""
    import tensorflow as tf

    x = np.stack([data["a"], data["b"], data["c"], np.ones(len(data["a"]))], axis=1)
    coef = np.linalg.lstsq(x, data["y_reg"], rcond=None)[0]

    class Line(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = tf.Variable(coef.astype(np.float64))

        @tf.function(
            input_signature=[
                tf.TensorSpec([None], tf.float64, name="a"),
                tf.TensorSpec([None], tf.float32, name="b"),
                tf.TensorSpec([None], tf.int32, name="c"),
            ]
        )
        def predict(self, a: tf.Tensor, b: tf.Tensor, c: tf.Tensor) -> dict[str, tf.Tensor]:
            cols = [a, tf.cast(b, tf.float64), tf.cast(c, tf.float64), tf.ones_like(a)]
            return {"prediction": tf.reduce_sum(tf.stack(cols, axis=1) * self.w, axis=1)}

    line = Line()
    tf.saved_model.save(line, str(path), signatures={"serving_default": line.predict})
    return path


def direct(path: Path, columns: dict[str, np.ndarray]) -> np.ndarray:
    """The SavedModel's own answer, called directly (the reference of "answers equal")."""
    import tensorflow as tf

    fn = tf.saved_model.load(str(path)).signatures["serving_default"]
    _, specs = fn.structured_input_signature
    feeds = {}
    for name, spec in specs.items():
        if spec.shape.rank == 2 and spec.shape[1] not in (None, 1):  # the dense input: a, b, c
            feeds[name] = tf.constant(np.stack([columns[f] for f in ("a", "b", "c")], axis=1), spec.dtype)
        else:
            value = tf.constant(np.asarray(columns[name]).astype(str if spec.dtype == tf.string else float))
            value = tf.cast(value, spec.dtype) if spec.dtype != tf.string else value
            feeds[name] = tf.expand_dims(value, 1) if spec.shape.rank == 2 else value
    (out,) = fn(**feeds).values()
    return np.asarray(out.numpy(), dtype=np.float64)


def answers(task: str, data: dict[str, np.ndarray]) -> np.ndarray:
    """What a team's own model served elsewhere answered on ``data``: the positive class's probability
    (binary), the probabilities of :data:`CLASSES` (multi-class, one row each) or a value (regression)."""
    if task == "regression":
        return np.asarray(2.0 * data["a"] - data["b"] + 0.5 * data["c"], dtype=float)
    score = data["a"] + 0.5 * data["b"] + 0.4 * (data["color"] == "red")
    if task == "binary":
        return np.asarray(1.0 / (1.0 + np.exp(-(2.0 * score - 0.4))))
    logits = np.stack([score, -score, np.zeros_like(score)], axis=1)
    return np.asarray(np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True))


def register_served_elsewhere(url: str, root: Path, models: dict[str, str]) -> Path:
    """Register and promote each model of ``models`` (name -> ``binary``, ``multiclass`` or ``regression``)
    from a reference file alone (served elsewhere, answers from :func:`answers`); returns the registry
    folder."""
    import json

    from core.database import open_database
    from core.tabular import write_table
    from registry.schema import Task
    from registry.service import promote
    from training.imports import ImportSpec, import_reference

    data = reference(1_500, seed=0)
    registry = root / "registry"
    db = open_database(url, upgrade=True)
    try:
        for name, task in models.items():
            answered = answers(task, data)
            column = (
                np.asarray([json.dumps(row) for row in answered.tolist()], dtype=object)
                if task == "multiclass"
                else answered
            )
            write_table({**data, "answer": column}, root / f"{name}.csv")
            spec = ImportSpec(
                model_name=name,
                path=None,
                reference=root / f"{name}.csv",
                target={"binary": "y_bin", "multiclass": "y_cls", "regression": "y_reg"}[task],
                task=Task.parse(task),
                features=FEATURES,
                prediction_column="answer",
            )
            import_reference(spec=spec, db=db, registry=registry)
            with db.session() as s:
                promote(session=s, model_name=name, version=1)
    finally:
        db.dispose()
    return registry


def kserve_attributes(kind: str, event_id: str, model: str) -> dict[str, str]:
    """The CloudEvent attributes KServe's logger gives one half (``ce-type`` ``kind``) of ``model``'s."""
    return {
        "specversion": "1.0",
        "id": event_id,
        "type": kind,
        "source": f"http://{model}-predictor.default/",
        "inferenceservicename": model,
        "datacontenttype": "application/json",
    }


def kserve_message(kind: str, event_id: str, body: Any, *, model: str) -> tuple[bytes, dict[str, str]]:
    """The body and headers of one half as KServe's logger posts it (binary mode, ``ce-type`` ``kind``)."""
    import json

    from cloudevents.core.bindings.http import to_binary_event
    from cloudevents.core.v1.event import CloudEvent

    message = to_binary_event(CloudEvent(kserve_attributes(kind, event_id, model), json.dumps(body).encode()))
    return message.body, dict(message.headers)


def feature_rows(data: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """``data``'s features as request rows (objects of JSON values)."""
    n = len(data["a"])
    return [{k: (str(data[k][i]) if k == "color" else float(data[k][i])) for k in FEATURES} for i in range(n)]

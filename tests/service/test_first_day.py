"""A team's first day with its own model, one test per task (issue 40's acceptance).

Each model is written in plain Keras in this file (not by driftwarden's trainers), exported with
``model.export`` and brought in as a new user would, by the commands the README names: ``models import`` →
``models promote`` → a running server answers TF Serving REST in row and columnar form and OIP v2 with the
signature's own names and shapes, equal to calling the SavedModel (1e-5) → labels → ``monitor config
--window`` chooses the window → ``monitor --once`` runs on exactly that window, finds the planted drift, which
hurts (a share of its labels moved too), and fires the default ``harmful_drift`` alert → its ``retrain``
action does what fits the version:

- binary, imported with ``--model-fn``: a job, which trains the team's builder on the cluster and is held
  for a person because the retrained version would answer driftwarden's own API instead of the model's
  TF Serving signature (the gate's ``input_contract`` check says so);
- 3-class (its classes in the order ``low, mid, high``, not sorted: refused until ``--classes`` says so) and
  regression, imported without a builder: no job, one ``retrain.requested`` event received and verified
  with the ``standardwebhooks`` package.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from standardwebhooks import Webhook
from typer.testing import Result

from alerts.service import list_deliveries
from alerts.webhooks import new_secret
from core.config import Settings
from core.database import open_database
from core.tabular import write_table
from tests import own_models
from tests.alerts.receiver import Receiver
from tests.support import Server, run_cli, serve_settings
from training.retraining.models import JobState
from training.retraining.service import list_jobs
from training.retraining.worker import Worker

CLASSES = ("low", "mid", "high")  # the 3-class model's output order: not the sorted one
TARGETS = {"binary": "y_bin", "multiclass": "y_cls", "regression": "y_reg"}
BASELINE, WINDOW = 300, 600  # rows sent before the window is chosen, rows of the chosen window
N = 16  # rows of each protocol check
BUILDER = '''
import keras


def build(input_dim, outputs, task):
    """The team's network for retraining (uncompiled, logits)."""
    return keras.Sequential([keras.Input(shape=(input_dim,)), keras.layers.Dense(8, activation="relu"),
                             keras.layers.Dense(outputs)])
'''


# --- the team's models, plain Keras -----------------------------------------------------------------------


def write_multiclass(path: Path, data: dict[str, np.ndarray]) -> Path:
    """One ``[batch]`` input per feature (a, b float32; c int64; color string), softmax over CLASSES."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(3)
    inputs = {
        "a": keras.Input(shape=(), name="a", dtype="float32"),
        "b": keras.Input(shape=(), name="b", dtype="float32"),
        "c": keras.Input(shape=(), name="c", dtype="int64"),
        "color": keras.Input(shape=(), name="color", dtype="string"),
    }
    color = keras.layers.StringLookup(vocabulary=list(own_models.COLORS), output_mode="one_hot")(
        inputs["color"]
    )
    numbers = keras.layers.Lambda(lambda v: tf.stack([v[0], v[1], tf.cast(v[2], tf.float32) / 3.0], axis=1))(
        [inputs["a"], inputs["b"], inputs["c"]]
    )
    x = keras.layers.Concatenate()([numbers, color])
    x = keras.layers.Dense(16, activation="relu")(x)
    model = keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(x))
    model.compile(optimizer=keras.optimizers.Adam(0.02), loss="sparse_categorical_crossentropy")
    feeds = {
        "a": data["a"].astype("float32"),
        "b": data["b"].astype("float32"),
        "c": data["c"].astype("int64"),
        "color": data["color"].astype(str),
    }
    y = np.array([CLASSES.index(v) for v in data["y_cls"]])
    rows = tf.data.Dataset.from_tensor_slices((feeds, y)).batch(64)
    model.fit(rows, epochs=6, verbose=0)
    model.export(str(path), verbose=False)
    return path


def write_regression(path: Path, data: dict[str, np.ndarray]) -> Path:
    """``[batch, 1]`` float32 inputs a, b, c and one ``[batch, 1]`` output: least-squares weights."""
    import keras

    inputs = [keras.Input(shape=(1,), name=name, dtype="float32") for name in ("a", "b", "c")]
    dense = keras.layers.Dense(1)
    model = keras.Model(inputs, dense(keras.layers.Concatenate()(inputs)))
    x = np.stack([data["a"], data["b"], data["c"], np.ones(len(data["a"]))], axis=1)
    coef = np.linalg.lstsq(x, data["y_reg"], rcond=None)[0]
    dense.set_weights([coef[:3, None].astype("float32"), coef[3:].astype("float32")])
    model.export(str(path), verbose=False)
    return path


WRITERS = {
    "binary": own_models.write_binary,  # plain Keras: [batch, 1] inputs, one sigmoid output_0
    "multiclass": write_multiclass,
    "regression": write_regression,
}
FEATURES = {
    "binary": ("a", "b", "c", "color"),
    "multiclass": ("a", "b", "c", "color"),
    "regression": ("a", "b", "c"),
}


# --- the world: a server, the CLI on its database and registry -------------------------------------------


def cli_env(root: Path, url: str) -> dict[str, str]:
    """The CLI's settings: the server's database and registry, the default alert rules."""
    return {
        "DRIFTWARDEN_DATABASE_URL": url,
        "DRIFTWARDEN_REGISTRY_PATH": str(root / "registry"),
        "DRIFTWARDEN_SPOOL_PATH": str(root / "cli-spool"),
        "DRIFTWARDEN_CHECKPOINT_PATH": str(root / "ckpt"),
        "DRIFTWARDEN_WEBHOOK_ALLOW_PRIVATE_URLS": "true",
    }


@dataclass
class World:
    root: Path
    url: str
    server: Server
    monkeypatch: pytest.MonkeyPatch

    def cli(self, *args: str) -> Result:
        return run_cli(self.monkeypatch, cli_env(self.root, self.url), *args, default_rules=True)

    def client(self) -> httpx.Client:
        return self.server.client()


@pytest.fixture(scope="module")
def world_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, Server]]:
    """One server for the module (SQLite, the embedded default), no scheduler: runs come from the command."""
    root = tmp_path_factory.mktemp("first-day")
    url = f"sqlite:///{root / 'driftwarden.db'}"
    open_database(url, upgrade=True).dispose()
    settings = serve_settings(
        url,
        root / "spool",
        registry_path=root / "registry",
        checkpoint_path=root / "ckpt",  # the retraining job's folders: this module's own
        log_durability="durable",
        monitor_enabled=False,
        worker_embedded=False,
        webhook_allow_private_urls=True,  # its outbox sender delivers to the loopback receiver too
    )
    with Server(settings) as srv:
        yield root, url, srv


@pytest.fixture(scope="module")
def hooks(world_server: tuple[Path, str, Server]) -> Iterator[tuple[Receiver, str]]:
    """A real receiver subscribed to every event, shared by the module's tests."""
    root, url, _ = world_server
    secret = new_secret()
    with Receiver(secret) as receiver, pytest.MonkeyPatch.context() as mp:
        added = run_cli(mp, cli_env(root, url), "webhooks", "add", receiver.url, "--secret", secret)
        assert added.exit_code == 0, added.output
        yield receiver, secret


@pytest.fixture
def world(world_server: tuple[Path, str, Server], monkeypatch: pytest.MonkeyPatch) -> World:
    root, url, srv = world_server
    return World(root, url, srv, monkeypatch)


# --- helpers ------------------------------------------------------------------------------------------------


def _table(task: str, data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {**{f: data[f] for f in FEATURES[task]}, TARGETS[task]: data[TARGETS[task]]}


def _direct(path: Path, task: str, data: dict[str, np.ndarray]) -> np.ndarray:
    """The SavedModel's answer called directly, in its own output shape."""
    import tensorflow as tf

    fn = tf.saved_model.load(str(path)).signatures["serving_default"]
    _, specs = fn.structured_input_signature
    feeds = {}
    for name, spec in specs.items():
        values = np.asarray(data[name]).astype(str if spec.dtype == tf.string else np.float64)
        tensor = tf.constant(values) if spec.dtype == tf.string else tf.cast(tf.constant(values), spec.dtype)
        feeds[name] = tf.expand_dims(tensor, 1) if spec.shape.rank == 2 else tensor
    (out,) = fn(**feeds).values()
    return np.asarray(out.numpy(), dtype=np.float64)


def _value(task: str, name: str, v: Any, column: bool) -> Any:
    value: Any = str(v) if name == "color" else (int(v) if name == "c" and task != "regression" else float(v))
    return [value] if column else value


def _rows(task: str, data: dict[str, np.ndarray], n: int) -> list[dict[str, Any]]:
    column = task != "multiclass"  # [batch, 1] inputs: each row's value is a one-element list
    return [{f: _value(task, f, data[f][i], column) for f in FEATURES[task]} for i in range(n)]


def _labels(task: str, data: dict[str, np.ndarray], ids: list[str]) -> list[dict[str, Any]]:
    target = data[TARGETS[task]]
    label = {"binary": int, "multiclass": str, "regression": float}[task]
    return [{"prediction_id": pid, "label": label(target[i])} for i, pid in enumerate(ids)]


def _wait_available(c: httpx.Client, name: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        r = c.get(f"/v1/models/{name}")
        statuses = r.json().get("model_version_status") if r.status_code == 200 else None
        if statuses and statuses[0]["state"] == "AVAILABLE":
            return
        time.sleep(0.1)
    raise AssertionError(f"{name} never became AVAILABLE: {r.text}")


def _send(c: httpx.Client, task: str, name: str, data: dict[str, np.ndarray], n: int) -> list[str]:
    """``n`` rows in batches of 50 (row format), their labels fed back; the prediction ids."""
    rows, ids = _rows(task, data, n), []
    for start in range(0, n, 50):
        r = c.post(f"/v1/models/{name}:predict", json={"instances": rows[start : start + 50]})
        assert r.status_code == 200, r.text
        ids += r.json()["prediction_ids"]
    fb = c.post(f"/v1/models/{name}/feedback", json={"labels": _labels(task, data, ids)})
    assert fb.status_code == 200 and fb.json()["stored"] == n, fb.text
    return ids


MOVED = 0.3  # of the drifted rows' labels: the drift hurts, so harmful_drift (the retraining rule) fires


def _drifted(n: int, seed: int) -> dict[str, np.ndarray]:
    data = own_models.reference(n, seed=seed, shift=1.5)
    data["b"] = data["b"] + 1.0
    moved = np.random.default_rng(seed + 1).random(n) < MOVED
    data["y_bin"] = np.where(moved, 1 - data["y_bin"], data["y_bin"])
    following = {"low": "mid", "mid": "high", "high": "low"}
    data["y_cls"] = np.array(
        [following[v] if m else v for v, m in zip(data["y_cls"], moved, strict=True)], dtype=object
    )
    data["y_reg"] = np.where(moved, np.roll(data["y_reg"], 1), data["y_reg"])
    return data


def _check_protocols(c: httpx.Client, task: str, name: str, source: Path) -> None:
    """TF Serving REST (row and columnar) and OIP v2 in the signature's own names and shapes, equal to the
    SavedModel called directly."""
    data = own_models.reference(N, seed=7)
    want = _direct(source, task, data)
    shape = list(want.shape)  # [N, 1] (binary, regression) or [N, 3]
    rows = _rows(task, data, N)

    r = c.post(f"/v1/models/{name}:predict", json={"instances": rows})
    assert r.status_code == 200, r.text
    answer = r.json()
    assert list(np.asarray(answer["predictions"]).shape) == shape  # one output: a list per row, its shape
    np.testing.assert_allclose(np.asarray(answer["predictions"], dtype=np.float64), want, atol=1e-5)
    assert len(answer["prediction_ids"]) == N

    columns = {f: [row[f] for row in rows] for f in FEATURES[task]}
    r = c.post(f"/v1/models/{name}:predict", json={"signature_name": "serving_default", "inputs": columns})
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(np.asarray(r.json()["outputs"], dtype=np.float64), want, atol=1e-5)
    assert list(np.asarray(r.json()["outputs"]).shape) == shape

    meta = c.get(f"/v2/models/{name}").json()
    assert {t["name"] for t in meta["inputs"]} == set(FEATURES[task])
    assert [(t["name"], t["shape"]) for t in meta["outputs"]] == [("output_0", [-1, *shape[1:]])]
    tensors = []
    for t in meta["inputs"]:
        flat = [v[0] if isinstance(v, list) else v for v in columns[t["name"]]]
        tensors.append(
            {"name": t["name"], "datatype": t["datatype"], "shape": [N, *t["shape"][1:]], "data": flat}
        )
    r = c.post(f"/v2/models/{name}/infer", json={"inputs": tensors})
    assert r.status_code == 200, r.text
    (out,) = r.json()["outputs"]
    assert out["name"] == "output_0" and out["shape"] == shape
    np.testing.assert_allclose(np.asarray(out["data"], dtype=np.float64).reshape(shape), want, atol=1e-5)


def _import(world: World, task: str, name: str, *extra: str) -> tuple[Path, int]:
    data = own_models.reference(1_500, seed=0)
    reference = world.root / f"{name}-reference.csv"
    write_table(_table(task, data), reference)
    source = WRITERS[task](world.root / f"{name}-export", data)
    args = ("models", "import", name, str(source), "--reference", str(reference), "--target", TARGETS[task])
    if task == "multiclass":
        refused = world.cli(*args, *extra)  # the sorted order [high, low, mid] is not the model's
        lines = refused.stderr.strip().splitlines()
        assert refused.exit_code == 2 and len(lines) == 1, refused.output
        assert "--classes low,mid,high" in lines[0], lines
        assert name not in world.cli("models", "list").output  # nothing registered
        extra = (*extra, "--classes", ",".join(CLASSES))
    done = world.cli(*args, *extra)
    assert done.exit_code == 0, done.output + str(done.exception)
    match = re.search(rf"registered {name}:(\d+) \(staged", done.output)
    assert match, done.output
    return source, int(match.group(1))


def _monitor_on_the_chosen_window(world: World, task: str, name: str) -> None:
    """Baseline rows, then the window chosen by command, then drifted rows that fill exactly that window."""
    with world.client() as c:
        _send(c, task, name, own_models.reference(BASELINE, seed=11), BASELINE)
        chosen = world.cli("monitor", "config", name, "--window", str(WINDOW))
        assert chosen.exit_code == 0, chosen.output
        shown = c.get(f"/v1/models/{name}/monitor")
        assert shown.status_code == 200, shown.text
        _send(c, task, name, _drifted(WINDOW, seed=12), WINDOW)
    ran = world.cli("monitor", "--once", "--model", name)
    assert ran.exit_code == 1 and name in ran.output, ran.output  # 1: drift found
    with world.client() as c:
        run = c.get(f"/v1/models/{name}/drift").json()
    window = run["window"]
    assert window["spec"]["rows"] == WINDOW and window["rows"] == WINDOW, window  # not the whole log
    assert window["labelled"] == WINDOW
    assert run["drifted"] is True
    assert "a" in {f["name"] for f in run["report"]["features"] if f["drifted"]}


def _delivered(world: World, receiver: Receiver, kind: str, name: str) -> list[Any]:
    """The messages of type ``kind`` for model ``name`` the receiver got, once the outbox holds none to send
    (``webhooks send``, or the server's own sender, whichever takes a message first)."""
    sent = world.cli("webhooks", "send")
    assert sent.exit_code == 0, sent.output
    deadline = time.monotonic() + 30
    db = open_database(world.url)
    try:
        while True:
            with db.session() as s:
                states = {d.state for d in list_deliveries(session=s, limit=1000)}
            if states <= {"delivered"}:
                break
            assert "dead" not in states and time.monotonic() < deadline, states
            time.sleep(0.2)
    finally:
        db.dispose()
    return [
        r
        for r in receiver.accepted
        if json.loads(r.body)["type"] == kind and (json.loads(r.body).get("data") or {}).get("model") == name
    ]


def _retrain_requested(world: World, receiver: Receiver, secret: str, name: str, version: int) -> None:
    mine = _delivered(world, receiver, "retrain.requested", name)
    assert len(mine) == 1, [json.loads(r.body)["type"] for r in receiver.accepted]
    doc = Webhook(secret).verify(mine[0].body, mine[0].headers)  # signed as Standard Webhooks says
    data = doc["data"]
    assert data["version"] == version and data["alert"]["rule"] == "harmful_drift"
    assert data["window"]["predictions"] == WINDOW and data["window"]["labelled"] == WINDOW
    assert "imported without --model-fn" in data["reason"]
    with open_database(world.url).session() as s:
        assert list_jobs(session=s, model_name=name) == []


# --- the three first days --------------------------------------------------------------------------------


@pytest.mark.cluster
def test_first_day_binary_with_its_builder_gets_a_job(world: World, hooks: tuple[Receiver, str]) -> None:
    (world.root / "team_model.py").write_text(BUILDER)
    source, version = _import(world, "binary", "churn", "--model-fn", f"{world.root / 'team_model.py'}:build")
    promoted = world.cli("models", "promote", "churn", str(version))
    assert promoted.exit_code == 0 and "churn:1 is now serving" in promoted.output, promoted.output
    with world.client() as c:
        _wait_available(c, "churn")
        _check_protocols(c, "binary", "churn", source)
    _monitor_on_the_chosen_window(world, "binary", "churn")

    db = open_database(world.url)
    try:
        with db.session() as s:
            (job,) = list_jobs(session=s, model_name="churn")
        assert job.state is JobState.QUEUED
        settings = Settings(
            **{
                **world.server.settings.model_dump(),
                "retrain_min_rows": 300,
                "retrain_epochs": 40,
                "retrain_wait_for_rows_s": 0,  # its 300 rows are all there is: no wait for more
            }
        )
        Worker(db=db, settings=settings).run_once()
        with db.session() as s:
            (job,) = list_jobs(session=s, model_name="churn")
    finally:
        db.dispose()
    # trained on the team's builder, but the candidate answers driftwarden's own API, not output_0 [batch, 1]:
    # it would break the model's TF Serving clients, so a person decides
    assert job.state is JobState.UNDECIDED, (job.state, job.error, job.log_tail)
    assert job.gate is not None
    contract = {c["name"]: c for c in job.gate["checks"]}["input_contract"]
    assert contract["verdict"] == "undecided"
    assert [c["kind"] for c in contract["figures"]["contract_changes"] if c["breaking"]] == ["signature"]
    assert "output_0" in contract["message"]
    receiver, _ = hooks
    assert _delivered(world, receiver, "retrain.requested", "churn") == []
    assert len(_delivered(world, receiver, "alert.firing", "churn")) >= 1


def test_first_day_three_classes_in_their_own_order_gets_an_event(
    world: World, hooks: tuple[Receiver, str]
) -> None:
    source, version = _import(world, "multiclass", "segment")
    assert world.cli("models", "promote", "segment", str(version)).exit_code == 0
    with world.client() as c:
        _wait_available(c, "segment")
        _check_protocols(c, "multiclass", "segment", source)
        versions = c.get("/v1/models/segment/versions").json()
    registered = {v["version"]: v for v in versions["versions"]}[version]
    assert registered["metrics"]["accuracy"] > 0.6  # above chance under the model's own order
    _monitor_on_the_chosen_window(world, "multiclass", "segment")
    receiver, secret = hooks
    _retrain_requested(world, receiver, secret, "segment", version)


def test_first_day_regression_gets_an_event(world: World, hooks: tuple[Receiver, str]) -> None:
    source, version = _import(world, "regression", "spend")
    assert world.cli("models", "promote", "spend", str(version)).exit_code == 0
    with world.client() as c:
        _wait_available(c, "spend")
        _check_protocols(c, "regression", "spend", source)
    _monitor_on_the_chosen_window(world, "regression", "spend")
    receiver, secret = hooks
    _retrain_requested(world, receiver, secret, "spend", version)

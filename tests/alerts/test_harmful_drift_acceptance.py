"""Issue 42's acceptance, held-out style: a shift of a feature the model relies on against one of a feature it
ignores, each of the same size, through the whole loop (the default rules, a monitor run, the outbox).

The models are a team's own: plain Keras binary and multi-class classifiers imported as SavedModels (the
attribution asks the model) and a binary model served elsewhere, registered from a reference with its
answers (the attribution asks a surrogate of the answers fitted on the reference). All rank by
``a + 0.5 b (+ 0.4 red)``; none uses ``c``. The window's rows are fresh draws of the reference's process with
one feature squeezed by :data:`SQUEEZE` towards a centre: ``a`` towards the answer's boundary (the model is
sure of fewer rows, its label-free ROC AUC, or macro F1, falls), ``c`` towards its mean (the answers do not
move). Each shift is large enough for the run's drift test; only the first hurts.

Checked for each: the attribution ranks the shifted feature first (relied: most of the change; ignored: its
message says it explains none of it), ``harm`` is harmful only for the relied-on one, ``harmful_drift`` fires
for it alone and only it asks for a retraining (``retrain.requested``: none of the models has a builder
here), while the ignored shift fires ``dataset_drift`` (notify) without ``harmful_drift``. The webhook bodies
carry the impact ranking.

On the generator's data, with a multi-class model trained here (it has a builder, so a retraining runs as a
job): ``credit_score`` squeezed towards 600 blurs the risk bands (the label-free macro F1 falls), while
``num_open_accounts`` squeezed as much moves no band; only the first queues a job. The same model's runs
find a shift confined to one region in that region's segment alone, and labels moved in one category pair
as the top weak slice.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from alerts.webhooks import new_secret
from core.database import open_database
from core.tabular import write_table
from monitors.flows import latest_document
from registry.schema import Task
from registry.service import promote
from tests import own_models
from tests.alerts.receiver import Receiver
from tests.support import LoopCli, loop_cli
from training.imports import ImportSpec, import_saved_model

ROWS = 3_000
SQUEEZE = 0.2  # each shifted feature keeps a fifth of its spread around its centre
CENTRES = {"a": 0.2, "c": 3.0}  # a: where the answers' score crosses 0.5; c: its mean (Poisson 3)
MULTICLASS_CENTRES = {"a": 0.7, "c": 3.0}  # a: where the classes mid and high meet
END = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
START = END - timedelta(days=1)


Cli = LoopCli


@pytest.fixture(scope="module")
def keras_model(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The plain Keras binary and multi-class models and their reference table, written once."""
    root = tmp_path_factory.mktemp("keras-own")
    data = own_models.reference(1_500, seed=0)
    write_table(data, root / "reference.csv")
    return {
        "keras": own_models.write_binary(root / "keras", data),
        "keras_multiclass": own_models.write_multiclass(root / "keras_multiclass", data),
        "reference": root / "reference.csv",
    }


@pytest.fixture
def cli(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cli]:
    yield loop_cli(database_url, tmp_path, monkeypatch)


def window(feature: str, *, multiclass: bool = False) -> dict[str, np.ndarray]:
    """Fresh rows of the reference's process with ``feature`` squeezed towards its centre."""
    data = own_models.reference(ROWS, seed=5)
    centre = (MULTICLASS_CENTRES if multiclass else CENTRES)[feature]
    moved = centre + SQUEEZE * (data[feature] - centre)
    data[feature] = np.round(moved).astype(np.int64) if feature == "c" else moved
    return data


def register(kind: str, database_url: str, tmp_path: Path, keras: dict[str, Path]) -> None:
    """Model ``churn``: a Keras SavedModel imported, or the same kind of model served elsewhere."""
    if kind == "elsewhere":
        own_models.register_served_elsewhere(database_url, tmp_path, {"churn": "binary"})
        return
    multiclass = kind == "keras_multiclass"
    db = open_database(database_url)
    try:
        spec = ImportSpec(
            model_name="churn",
            path=keras[kind],
            reference=keras["reference"],
            target="y_cls" if multiclass else "y_bin",
            task=Task.MULTICLASS if multiclass else Task.BINARY,
            features=("a", "b", "c") if multiclass else (),
        )
        import_saved_model(spec=spec, db=db, registry=tmp_path / "registry")
        with db.session() as s:
            promote(session=s, model_name="churn", version=1)
    finally:
        db.dispose()


def log_window(cli: Cli, kind: str, feature: str, tmp_path: Path, keras: dict[str, Path]) -> None:
    """The window, scored by the model (its own SavedModel, or the answers of the one served elsewhere),
    logged by ``predictions import`` without labels: the run judges the label-free estimate."""
    multiclass = kind == "keras_multiclass"
    data = window(feature, multiclass=multiclass)
    columns = {k: data[k] for k in own_models.FEATURES}
    score: np.ndarray
    if kind == "elsewhere":
        score = own_models.answers("binary", data)
    elif multiclass:  # one JSON list of the class probabilities per row
        vectors = own_models.direct(keras[kind], columns)
        score = np.array([json.dumps(row) for row in vectors.tolist()], dtype=object)
    else:
        score = own_models.direct(keras[kind], columns).reshape(-1)
    step = (END - START) / (ROWS - 1)
    table = {
        **columns,
        "score": score,
        "row_id": np.array([f"w-{i}" for i in range(ROWS)], dtype=object),
        "scored_at": np.array([(START + i * step).isoformat() for i in range(ROWS)], dtype=object),
    }
    write_table(table, tmp_path / "window.csv")
    done = cli(
        *("predictions", "import", str(tmp_path / "window.csv"), "--model", "churn"),
        *("--prediction-column", "score", "--id-column", "row_id", "--time-column", "scored_at"),
    )
    assert done.exit_code == 0 and f"{ROWS} of {ROWS} rows logged" in done.output, done.output


def run_and_deliver(cli: Cli) -> list[dict[str, Any]]:
    """One scheduled-style monitor run, then the outbox sent to a real receiver: the messages."""
    secret = new_secret()
    with Receiver(secret) as receiver:
        added = cli("webhooks", "add", receiver.url, "--secret", secret)
        assert added.exit_code == 0, added.output
        ran = cli("monitor", "--once", "--model", "churn")
        assert ran.exit_code != 2 and "churn" in ran.output, ran.output + str(ran.exception)
        sent = cli("webhooks", "send")
        assert sent.exit_code == 0, sent.output
        return [json.loads(r.body) for r in receiver.accepted]


def stored_report(database_url: str, model: str = "churn") -> dict[str, Any]:
    """The model's newest run as ``GET .../drift`` serves it (the report and its headline)."""
    db = open_database(database_url)
    try:
        return latest_document(db=db, model_name=model)
    finally:
        db.dispose()


def band_report(cli: Cli, database_url: str) -> dict[str, Any]:
    """One monitor run of ``band``; its stored report."""
    ran = cli("monitor", "--once", "--model", "band")
    assert ran.exit_code != 2 and "band" in ran.output, ran.output + str(ran.exception)
    return dict(stored_report(database_url, "band")["report"])


@pytest.mark.parametrize("kind", ["keras", "keras_multiclass", "elsewhere"])
def test_the_relied_on_shift_is_the_cause_and_alone_retrains(
    cli: Cli, database_url: str, tmp_path: Path, keras_model: dict[str, Path], kind: str
) -> None:
    register(kind, database_url, tmp_path, keras_model)
    log_window(cli, kind, "a", tmp_path, keras_model)
    messages = run_and_deliver(cli)
    doc = stored_report(database_url)
    report = doc["report"]

    drifted = {f["name"] for f in report["features"] if f["drifted"]}
    assert "a" in drifted and "c" not in drifted, drifted
    attribution = report["attribution"]
    assert attribution["method"] == ("surrogate" if kind == "elsewhere" else "model")
    if kind == "elsewhere":  # the surrogate says how well it fits the answers it stands for
        assert attribution["surrogate_fit"]["value"] > 0.9, attribution["surrogate_fit"]
    assert attribution["change"] < 0 and attribution["significant"] is True, attribution
    first = attribution["features"][0]
    assert first["name"] == "a" and first["impact"] > 0.5 and not first["harmless"], attribution["features"]
    assert first["lower"] < 0 and first["upper"] < 0  # its effect on the estimated metric, bounded below 0
    impact = next(f for f in report["features"] if f["name"] == "a")["impact"]
    assert impact["impact"] == first["impact"]

    harm = report["harm"]
    metric = "macro_f1" if kind == "keras_multiclass" else "roc_auc"
    assert harm["harmful"] is True and harm["estimate"] == "cbpe" and harm["metric"] == metric, harm
    assert harm["upper"] < harm["reference"] - harm["tolerance"]
    assert doc["headline"]["causes"][0]["feature"] == "a"

    firing = {a["name"] for m in messages if m["type"] == "alert.firing" for a in m["data"]["alerts"]}
    assert {"harmful_drift", "dataset_drift"} <= firing, firing
    requested = [m for m in messages if m["type"] == "retrain.requested"]
    assert len(requested) == 1 and requested[0]["data"]["alert"]["rule"] == "harmful_drift", requested
    assert json.loads(cli("jobs", "list", "--json").output) == []  # no builder here: an event, no job
    harmful = next(
        a
        for m in messages
        if m["type"] == "alert.firing"
        for a in m["data"]["alerts"]
        if a["name"] == "harmful_drift"
    )
    causes = harmful["evidence"]["causes"]
    assert causes[0]["feature"] == "a" and causes[0]["impact"] == first["impact"], causes


@pytest.mark.parametrize("kind", ["keras", "keras_multiclass", "elsewhere"])
def test_the_ignored_shift_is_harmless_and_only_notifies(
    cli: Cli, database_url: str, tmp_path: Path, keras_model: dict[str, Path], kind: str
) -> None:
    register(kind, database_url, tmp_path, keras_model)
    log_window(cli, kind, "c", tmp_path, keras_model)
    messages = run_and_deliver(cli)
    doc = stored_report(database_url)
    report = doc["report"]

    drifted = {f["name"] for f in report["features"] if f["drifted"]}
    assert drifted == {"c"}, drifted
    assert report["harm"]["harmful"] is False, report["harm"]
    impact = next(f for f in report["features"] if f["name"] == "c")["impact"]
    assert impact["harmless"] is True, impact
    assert "c drifted" in impact["message"] and "explains none" in impact["message"], impact["message"]
    assert doc["headline"]["causes"] == []

    firing = {a["name"] for m in messages if m["type"] == "alert.firing" for a in m["data"]["alerts"]}
    assert "dataset_drift" in firing and "harmful_drift" not in firing, firing
    assert [m for m in messages if m["type"] == "retrain.requested"] == []
    assert json.loads(cli("jobs", "list", "--json").output) == []


BAND_CENTRES = {"credit_score": 600.0, "num_open_accounts": 5.0}
"""The generator's data: ``credit_score`` weighs most in the latent risk (towards 600 the bands blur);
``num_open_accounts`` is in no band's risk at all."""


@pytest.fixture(scope="module")
def band_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from training.cluster.datagen import generate

    path = tmp_path_factory.mktemp("bands") / "train.parquet"
    write_table(generate(4_000, seed=1, task=Task.MULTICLASS), path)
    return path


def train_bands(database_url: str, tmp_path: Path, data: Path) -> Path:
    """Model ``band``, trained here on the generator's risk bands (a builder: a retraining can run), promoted;
    its monitor settings count one drifted feature of ten as dataset drift."""
    from monitors.config import MonitorConfig, save_config
    from training.cluster.flows import run_training
    from training.cluster.progress import Progress
    from training.cluster.run_spec import Mode, TrainingRunSpec

    db = open_database(database_url)
    try:
        result = run_training(
            job=TrainingRunSpec(
                model_name="band",
                data=data,
                mode=Mode.LOCAL,
                epochs=2.0,
                seed=0,
                task="multiclass",
                target="risk_band",
            ),
            db=db,
            registry=tmp_path / "registry",
            checkpoint_root=tmp_path / "ckpt",
            progress=Progress("t", show_bar=False),
        )
        with db.session() as s:
            promote(session=s, model_name="band", version=result.version.version)
    finally:
        db.dispose()
    save_config(registry=tmp_path / "registry", model_name="band", config=MonitorConfig(drift_share=0.1))
    return Path(result.version.path)


def log_bands(cli: Cli, path: Path, feature: str, tmp_path: Path) -> None:
    """Fresh applications with ``feature`` squeezed towards its centre, scored by the version, logged."""
    from registry.service import read_schema
    from training.cluster.datagen import generate
    from training.retraining.job import score_version

    data = generate(ROWS, seed=9, task=Task.MULTICLASS)
    data.pop("risk_band")
    centre = BAND_CENTRES[feature]
    data[feature] = np.round(centre + SQUEEZE * (data[feature] - centre)).astype(np.int64)
    vectors = score_version(path, read_schema(path=path), data)
    step = (END - START) / (ROWS - 1)
    table = {
        **data,
        "score": np.array([json.dumps(row) for row in vectors.tolist()], dtype=object),
        "row_id": np.array([f"b-{i}" for i in range(ROWS)], dtype=object),
        "scored_at": np.array([(START + i * step).isoformat() for i in range(ROWS)], dtype=object),
    }
    write_table(table, tmp_path / "bands.csv")
    done = cli(
        *("predictions", "import", str(tmp_path / "bands.csv"), "--model", "band"),
        *("--prediction-column", "score", "--id-column", "row_id", "--time-column", "scored_at"),
    )
    assert done.exit_code == 0 and f"{ROWS} of {ROWS} rows logged" in done.output, done.output


@pytest.mark.parametrize("feature", list(BAND_CENTRES))
def test_on_the_generators_data_only_the_relied_on_shift_starts_a_job(
    cli: Cli, database_url: str, tmp_path: Path, band_data: Path, feature: str
) -> None:
    path = train_bands(database_url, tmp_path, band_data)
    log_bands(cli, path, feature, tmp_path)
    report = band_report(cli, database_url)
    drifted = {f["name"] for f in report["features"] if f["drifted"]}
    assert drifted == {feature}, drifted
    impact = next(f for f in report["features"] if f["name"] == feature)["impact"]
    alerts = json.loads(cli("alerts", "list", "--json").output)
    firing = {a["rule_name"] for a in alerts if a["state"] == "firing"}
    jobs = json.loads(cli("jobs", "list", "--json").output)
    if feature == "credit_score":
        assert report["attribution"]["method"] == "model"
        assert report["attribution"]["features"][0]["name"] == feature and impact["impact"] > 0.5, impact
        assert report["harm"]["harmful"] is True and report["harm"]["metric"] == "macro_f1", report["harm"]
        assert {"harmful_drift", "dataset_drift"} <= firing, firing
        assert len(jobs) == 1 and jobs[0]["model_name"] == "band", jobs  # the retraining, queued
    else:
        assert impact["harmless"] is True and "explains none" in impact["message"], impact
        assert report["harm"]["harmful"] is False, report["harm"]
        assert "dataset_drift" in firing and "harmful_drift" not in firing, firing
        assert jobs == []


def log_bands_with_labels(cli: Cli, path: Path, tmp_path: Path, *, north: bool, flip_pair: bool) -> None:
    """Fresh applications with their labels: ``credit_score`` squeezed in ``region=north`` alone, or the
    labels moved to another band in ``region=south & home_ownership=OWN`` alone."""
    from registry.service import read_schema
    from training.cluster.datagen import BANDS, generate
    from training.retraining.job import score_version

    data = generate(ROWS, seed=9, task=Task.MULTICLASS)
    truth = data.pop("risk_band")
    if north:
        inside = data["region"] == "north"
        centre = BAND_CENTRES["credit_score"]
        squeezed = np.round(centre + SQUEEZE * (data["credit_score"] - centre)).astype(np.int64)
        data["credit_score"] = np.where(inside, squeezed, data["credit_score"])
    if flip_pair:
        pair = (data["region"] == "south") & (data["home_ownership"] == "OWN")
        moved = np.array([BANDS[(BANDS.index(t) + 1) % len(BANDS)] for t in truth], dtype=object)
        truth = np.where(pair, moved, truth)
    vectors = score_version(path, read_schema(path=path), data)
    step = (END - START) / (ROWS - 1)
    table = {
        **data,
        "score": np.array([json.dumps(row) for row in vectors.tolist()], dtype=object),
        "truth": truth,
        "row_id": np.array([f"l-{i}" for i in range(ROWS)], dtype=object),
        "scored_at": np.array([(START + i * step).isoformat() for i in range(ROWS)], dtype=object),
    }
    write_table(table, tmp_path / "labelled.csv")
    done = cli(
        *("predictions", "import", str(tmp_path / "labelled.csv"), "--model", "band"),
        *("--prediction-column", "score", "--id-column", "row_id", "--time-column", "scored_at"),
        *("--label-column", "truth"),
    )
    assert done.exit_code == 0 and f"{ROWS} of {ROWS} rows logged" in done.output, done.output


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_shift_in_one_region_flags_that_segment_alone(
    cli: Cli, database_url: str, tmp_path: Path, band_data: Path
) -> None:
    path = train_bands(database_url, tmp_path, band_data)
    log_bands_with_labels(cli, path, tmp_path, north=True, flip_pair=False)
    report = band_report(cli, database_url)
    segments = report["segments"]
    assert {s["segment"] for s in segments} >= {"region=north", "region=south", "home_ownership=OWN"}
    assert [s["segment"] for s in segments if s["flagged"]] == ["region=north"], [
        (s["segment"], s["reasons"]) for s in segments if s["flagged"]
    ]
    assert segments[0]["segment"] == "region=north"  # ranked by the worst change
    assert "credit_score" in segments[0]["drift"]["own"]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_labels_moved_in_one_pair_make_it_the_top_weak_slice(
    cli: Cli, database_url: str, tmp_path: Path, band_data: Path
) -> None:
    path = train_bands(database_url, tmp_path, band_data)
    log_bands_with_labels(cli, path, tmp_path, north=False, flip_pair=True)
    report = band_report(cli, database_url)
    weak = report["weak_slices"]
    assert weak["source"] == "labels" and weak["metric"] == "error_rate", weak
    top = weak["slices"][0]
    conditions = {(c["feature"], c.get("value")) for c in top["conditions"]}
    assert conditions == {("region", "south"), ("home_ownership", "OWN")}, weak["slices"][:3]
    assert top["significant"] is True and top["lower"] > weak["overall"], top

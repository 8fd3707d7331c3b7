"""The row samples root-cause analysis works on: the reference profile's (``Profile.sample``) and a monitor
window's (``read_window(..., sample_rows=N)`` -> ``Window.sample``), on SQLite and PostgreSQL.

The reference's sample holds its rows' values, answers and labels, round-trips through ``profile.json`` and
is None for a profile built before profiles kept one. A window's sample holds the logged rows' values (typed
and as documents, missing values, categories outside the layout), answers (a multi-class model's vectors)
and the labels given later by feedback, with and without the sketch cache; it is drawn uniformly over the
window's rows and seeded by the window. The reader's own cases are in tests/predictions/test_window_sample.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.database import open_database
from core.tabular import Columns, write_table
from monitors.log_window import SketchCache, read_window, sample_seed
from monitors.profile import (
    REFERENCE_SAMPLE_ROWS,
    build_reference_profile,
    profile_from_dict,
    read_profile,
    reference_sample,
    write_profile,
)
from monitors.rows import RowSample, uniform_positions
from predictions.service import record_feedback
from predictions.windows import WindowSpec
from registry.schema import FeatureKind, ModelSchema, Task, infer_schema
from registry.service import read_schema
from tests import own_models
from tests.monitors.helpers import true_probability
from tests.monitors.logdata import contract, log_columns
from tests.predictions.logdata import write_requests
from tests.support import TrainedModels
from training.cluster.datagen import TARGET, TARGETS, generate
from training.imports import ImportSpec, import_reference


def texts(values: np.ndarray) -> list[str | None]:
    """A categorical column as the samples hold it: ``str``, None for a missing value."""
    return [
        None if v is None or v == "" or (isinstance(v, float) and np.isnan(v)) else str(v) for v in values
    ]


def assert_rows(sample: RowSample, cols: Columns, schema: ModelSchema, index: np.ndarray) -> None:
    """The sample's feature columns are ``cols``' rows at ``index``."""
    assert sample.rows == index.size
    assert set(sample.columns) == set(schema.feature_names)
    for spec in schema.features:
        got, want = sample.columns[spec.name], cols[spec.name][index]
        assert sample.kinds[spec.name] is spec.kind
        if spec.kind is FeatureKind.NUMERIC:
            assert got.dtype == np.float64
            assert np.array_equal(got, np.asarray(want, dtype=np.float64), equal_nan=True), spec.name
        else:
            assert got.tolist() == texts(want), spec.name


def test_the_profile_keeps_a_uniform_sample_of_its_rows(
    reference: Columns, schema: ModelSchema, profile_dict: dict[str, Any], tmp_path: Path
) -> None:
    n = len(reference[TARGET])
    index = uniform_positions(n, REFERENCE_SAMPLE_ROWS, seed=0)
    profile = read_profile(write_profile(profile_dict, tmp_path / "profile.json"))
    sample = profile.sample
    assert sample is not None and sample.population == n == 40_000
    assert_rows(sample, reference, schema, index)
    assert np.array_equal(sample.predictions, true_probability(reference)[index])
    assert sample.labels is not None
    assert np.array_equal(sample.labels, reference[TARGET][index].astype(np.float64))
    assert "sample" not in profile.extra
    assert profile.sample is sample  # parsed once, on first use
    # the rows are spread over the reference: each tenth holds about a tenth of them
    tenths = np.bincount(index * 10 // n, minlength=10)
    assert tenths.min() > 400 and tenths.max() < 600

    older = {k: v for k, v in profile_dict.items() if k != "sample"}  # a profile built before samples
    assert profile_from_dict(older).sample is None


def test_a_sample_of_other_rows_and_of_too_few_rows(reference: Columns, schema: ModelSchema) -> None:
    """Training profiles its training rows and predicts its held-out rows: the caller's sample of the
    held-out rows is kept as given; answers of other rows without a sample keep the features alone."""
    train = {name: reference[name][:30_000] for name in schema.feature_names}
    held = {name: reference[name][30_000:] for name in schema.feature_names}
    p, y = true_probability(reference)[30_000:], reference[TARGET][30_000:]
    given = reference_sample(held, schema, predictions=p, labels=y, rows=300, seed=4)
    assert given.population == 10_000 and given.rows == 300
    built = profile_from_dict(build_reference_profile(train, schema, predictions=p, labels=y, sample=given))
    kept = built.sample
    assert kept is not None and kept.population == 10_000
    index = uniform_positions(10_000, 300, seed=4)
    assert_rows(kept, held, schema, index)
    assert np.array_equal(kept.predictions, p[index])

    alone = profile_from_dict(build_reference_profile(train, schema, predictions=p, labels=y)).sample
    assert alone is not None and alone.population == 30_000 and alone.labels is None
    assert np.isnan(alone.predictions).all() and alone.rows == REFERENCE_SAMPLE_ROWS
    small = {name: reference[name][:50] for name in schema.feature_names}
    every = reference_sample(small, schema)  # fewer rows than the sample's size: all of them, in order
    assert every.rows == 50 and every.labels is None
    assert_rows(every, small, schema, np.arange(50))
    with pytest.raises(ValueError, match="predictions for 50 rows"):
        reference_sample(small, schema, predictions=p[:49])


def test_a_window_sample_holds_the_logged_rows_and_their_later_labels(
    database_url: str, profile_dict: dict[str, Any], schema: ModelSchema
) -> None:
    profile = profile_from_dict(profile_dict)
    db = open_database(database_url)
    features = list(schema.feature_names)
    cols = generate(3_000, seed=11)
    cols["home_ownership"][::97] = None  # missing categories
    cols["region"][::89] = "atlantis"  # a category outside the contract (typed as text)
    p = true_probability(cols)
    typed_ids = log_columns(
        db.engine, {k: v[:2_000] for k, v in cols.items()}, features=features, probability=p[:2_000],
        layout=contract(profile), per_request=7,
    )  # fmt: skip
    document_ids = log_columns(
        db.engine, {k: v[2_000:] for k, v in cols.items()}, features=features, probability=p[2_000:]
    )  # as documents, one prediction a request
    ids = typed_ids + document_ids
    y = cols[TARGET].astype(np.float64)
    y[::3] = np.nan  # two predictions in three get a label, later
    labelled = np.flatnonzero(~np.isnan(y))
    with db.session() as s:
        record_feedback(session=s, model_name="credit", labels=[(ids[i], float(y[i])) for i in labelled])

    args: dict[str, Any] = dict(engine=db.engine, profile=profile, model_name="credit", chunk_rows=500)
    spec = WindowSpec(rows=2_500)
    window = read_window(**args, spec=spec, sample_rows=400)
    sample = window.sample
    assert sample is not None and sample.rows == 400 and sample.population == window.rows == 2_500
    index = uniform_positions(2_500, 400, seed=sample_seed(window))
    at = 500 + index  # the window is the last 2,500 of the 3,000 logged rows
    assert_rows(sample, cols, schema, at)
    assert np.array_equal(sample.predictions, p[at])
    assert sample.labels is not None
    assert np.array_equal(sample.labels, y[at], equal_nan=True)
    assert at.min() < 2_000 <= at.max()  # rows of typed batches and of documents

    cached = read_window(**args, spec=spec, sample_rows=400, cache=SketchCache(db.engine, 256))
    assert cached.sample is not None and cached.sketch.rows == window.sketch.rows
    assert sample_seed(cached) == sample_seed(window)  # the same window draws the same rows
    assert cached.sample.as_dict() == sample.as_dict()

    whole = read_window(**args, spec=spec, sample_rows=10_000)  # more than the window: all of its rows
    assert whole.sample is not None and whole.sample.rows == 2_500
    assert_rows(whole.sample, cols, schema, np.arange(500, 3_000))
    assert read_window(**args, spec=spec).sample is None  # sample_rows=0: no sample
    empty = read_window(**{**args, "model_name": "nobody"}, spec=spec, sample_rows=400)
    assert empty.rows == 0 and empty.sample is None
    db.dispose()


def test_a_window_sample_is_uniform_over_its_rows(database_url: str) -> None:
    """50,000 predictions in requests of 1 to 19 sampled to 2,000: each tenth of the window holds about a
    tenth of the sample, and each sampled row is the one logged at its place."""
    n = 50_000
    cols: Columns = {
        "i": np.arange(n, dtype=np.float64),
        "zone": np.array(["a", "b"] * (n // 2), dtype=object),
    }
    schema = infer_schema({**cols, "y": np.arange(n) % 2}, target="y")
    profile = profile_from_dict(build_reference_profile(cols, schema))
    db = open_database(database_url)
    sizes = np.random.default_rng(5).integers(1, 20, size=n)
    ends = np.minimum(np.cumsum(sizes), n)
    docs = [{"i": float(i), "zone": cols["zone"][i]} for i in range(n)]
    lo = 0
    for end in np.unique(ends).tolist():  # requests of uneven sizes
        if end > lo:
            write_requests(db.engine, docs[lo:end], probability=np.arange(lo, end) / n, per_request=end - lo)
        lo = end
    window = read_window(
        engine=db.engine, profile=profile, model_name="credit", spec=WindowSpec(rows=n), sample_rows=2_000
    )
    sample = window.sample
    assert sample is not None and sample.rows == 2_000 and window.rows == n
    i = sample.columns["i"]
    assert np.array_equal(sample.predictions, i / n)
    assert sample.columns["zone"].tolist() == cols["zone"][i.astype(np.int64)].tolist()
    assert np.all(np.diff(i) > 0)  # distinct rows, in log order
    tenths = np.bincount((i * 10 // n).astype(np.int64), minlength=10)
    assert tenths.min() >= 140 and tenths.max() <= 260, tenths  # 200 each; sd 13.4
    db.dispose()


def test_a_multiclass_window_sample_holds_the_vectors(database_url: str) -> None:
    cols = generate(600, seed=3, task=Task.MULTICLASS)
    target = TARGETS[Task.MULTICLASS]
    schema = infer_schema(cols, target=target, task=Task.MULTICLASS, classes=("low", "medium", "high"))
    features = list(schema.feature_names)
    probs = np.random.default_rng(4).dirichlet([1.0, 1.0, 1.0], size=600)
    labels = np.array([("low", "medium", "high").index(v) for v in cols[target]], dtype=np.float64)
    profile = profile_from_dict(build_reference_profile(cols, schema, predictions=probs, labels=labels))
    db = open_database(database_url)
    docs = [
        {f: cols[f][i].item() if hasattr(cols[f][i], "item") else cols[f][i] for f in features}
        for i in range(600)
    ]
    docs = [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in d.items()} for d in docs]
    write_requests(
        db.engine,
        docs,
        probability=probs.max(axis=1),
        per_request=4,
        vectors=[list(map(float, r)) for r in probs],
    )
    window = read_window(
        engine=db.engine, profile=profile, model_name="credit", spec=WindowSpec(rows=500), sample_rows=100
    )
    sample = window.sample
    assert sample is not None and sample.predictions.shape == (100, 3)
    at = 100 + uniform_positions(500, 100, seed=sample_seed(window))
    assert np.array_equal(sample.predictions, probs[at])
    assert_rows(sample, cols, schema, at)
    assert sample.labels is None  # no feedback yet
    db.dispose()


def test_the_profile_sample_round_trips_through_json(profile_dict: dict[str, Any]) -> None:
    again = profile_from_dict(json.loads(json.dumps(profile_dict)))
    first = profile_from_dict(profile_dict).sample
    assert again.sample is not None and first is not None
    assert again.sample.as_dict() == first.as_dict()


def test_a_trained_version_samples_its_held_out_rows(trained: TrainedModels) -> None:
    """Training profiles the training rows' features but answers the held-out rows: the sample is of those
    (features, answers and labels of the same rows)."""
    data = generate(2000, seed=1)  # the session's trained models' data (tests/conftest.py), version 1: seed 0
    hold = np.random.default_rng(0).permutation(2000)[:400]  # training.cluster.run_spec' split: 20 % held out
    stored = json.loads((trained.paths[1] / "driftwarden" / "profile.json").read_text())
    sample = profile_from_dict(stored).sample
    assert sample is not None and sample.population == 400 and sample.rows == 400
    schema = read_schema(path=trained.paths[1])
    assert_rows(sample, data, schema, hold)
    assert sample.labels is not None
    assert np.array_equal(sample.labels, data[TARGET][hold].astype(np.float64))
    # the answers are the held-out rows' own: the profile's summary of the answers is of the same values
    assert stored["prediction"]["count"] == 400
    assert np.mean(sample.predictions) == pytest.approx(stored["prediction"]["mean"], rel=1e-9)
    assert ((sample.predictions > 0) & (sample.predictions < 1)).all()


def test_a_model_served_elsewhere_samples_its_reference_rows(tmp_path: Path) -> None:
    """An imported version without a model (its answers a column of the reference) samples the reference's
    rows with those answers and the target."""
    data = own_models.reference(8_000, seed=0)
    answer = 1.0 / (1.0 + np.exp(-(data["a"] + 0.5 * data["b"])))
    write_table({**data, "answer": answer}, tmp_path / "reference.parquet")
    spec = ImportSpec(
        model_name="imp",
        path=None,
        reference=tmp_path / "reference.parquet",
        target="y_bin",
        task=Task.BINARY,
        features=own_models.FEATURES,
        prediction_column="answer",
    )
    db = open_database(f"sqlite:///{tmp_path / 'imp.db'}", upgrade=True)
    imported = import_reference(spec=spec, db=db, registry=tmp_path / "registry")
    db.dispose()
    path = Path(imported.version.path)
    sample = read_profile(path / "driftwarden" / "profile.json").sample
    assert sample is not None and sample.rows == REFERENCE_SAMPLE_ROWS and sample.population == 8_000
    index = uniform_positions(8_000, REFERENCE_SAMPLE_ROWS, seed=0)
    assert_rows(sample, data, read_schema(path=path), index)
    assert np.array_equal(sample.predictions, answer[index])
    assert sample.labels is not None and np.array_equal(sample.labels, data["y_bin"][index].astype(float))

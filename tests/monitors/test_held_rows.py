"""Numeric reference columns held at the profiled rows only (monitors/profile/held.py): the profile made of
them is the profile of the whole columns, to the character, on a reference longer than the multivariate
detector's fit (so that only some rows are held)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from core.tabular import CodedColumn, write_table
from monitors.offline import read_reference, reference_schema, reference_side
from monitors.profile import build_reference_profile, numeric_summary
from monitors.profile.held import HeldRows, profiled_positions
from monitors.profile.pca import PCA_MAX_ROWS, pca_positions
from monitors.profile.samples import sample_positions
from registry.schema import ModelSchema, OutputSpec, Task, infer_feature
from tests.monitors.helpers import true_probability
from training.cluster.datagen import TARGET, generate

ROWS = PCA_MAX_ROWS + 7_001  # more rows than the PCA is fitted on: some rows are not held


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cols = generate(ROWS, scenario="baseline", seed=17)
    cols["prediction"] = true_probability(cols)
    return write_table(cols, tmp_path_factory.mktemp("held") / "reference.parquet")


def test_held_rows_are_the_profiled_rows_of_the_column() -> None:
    values = np.random.default_rng(3).normal(size=ROWS)
    held = HeldRows(ROWS)
    held.hold("x", values)
    at = profiled_positions(ROWS)
    assert at.size < ROWS and np.all(np.diff(at) > 0)  # sorted, distinct, not every row
    assert np.array_equal(held.take("x", at[::7]), values[at[::7]])
    missing = np.setdiff1d(np.arange(ROWS), at)[:3]
    with pytest.raises(ValueError, match="held at the profile's rows only"):
        held.take("x", missing)
    with pytest.raises(ValueError, match="has 10 rows; the reference has"):
        held.hold("y", values[:10])


def test_a_profile_of_held_columns_is_the_profile_of_the_whole_columns(reference: Path) -> None:
    facts, columns = read_reference(reference, target=TARGET, prediction="prediction")
    schema = reference_schema(columns, facts, exclude={TARGET, "prediction"}, target=TARGET)
    predictions, labels = np.asarray(columns["prediction"]), np.asarray(columns[TARGET])
    want = build_reference_profile(columns, schema, predictions=predictions, labels=labels)
    numeric = [f.name for f in schema.features if not isinstance(columns[f.name], CodedColumn)]
    assert len(numeric) >= 2  # the PCA reads held rows
    held = HeldRows(ROWS)
    for name in numeric:
        held.hold(name, np.asarray(columns[name]))
    got = build_reference_profile(
        {k: v for k, v in columns.items() if k not in numeric},
        schema,
        predictions=predictions,
        labels=labels,
        summaries={name: numeric_summary(columns[name], name=name) for name in numeric},
        held=held,
    )
    assert got["multivariate"] is not None
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)
    with pytest.raises(ValueError, match="without its summary"):
        build_reference_profile({}, schema, held=held)


def test_a_regression_loss_model_needs_its_features_whole(reference: Path) -> None:
    """A regression with predictions fits its loss model on every row: held columns are refused, and the
    offline path keeps them whole."""
    facts, columns = read_reference(reference, target="prediction", numeric_target=True)
    x = np.asarray(columns["age"], dtype=np.float64)
    schema = ModelSchema(
        features=(infer_feature("age", x),),
        outputs=(OutputSpec.for_task(Task.REGRESSION),),
        target="prediction",
        task=Task.REGRESSION.value,
    )
    held = HeldRows(ROWS)
    held.hold("age", x)
    answers = np.asarray(columns["prediction"], dtype=np.float64)
    with pytest.raises(ValueError, match="loss model reads every row"):
        build_reference_profile(
            {},
            schema,
            predictions=answers,
            labels=answers,
            summaries={"age": numeric_summary(x, name="age")},
            held=held,
        )
    sides = reference_side(
        reference,
        schema=schema,
        schema_source="schema.json",
        target="prediction",
        prediction="prediction",
        min_rows=30,
    )
    assert sides.failure is None and sides.document is not None
    assert sides.document["loss_model"]["rows"] == facts.rows


def test_the_offline_reference_side_holds_rows_and_makes_the_same_profile(reference: Path) -> None:
    facts, columns = read_reference(reference, target=TARGET, prediction="prediction")
    schema = reference_schema(columns, facts, exclude={TARGET, "prediction"}, target=TARGET)
    want = build_reference_profile(
        columns, schema, predictions=np.asarray(columns["prediction"]), labels=np.asarray(columns[TARGET])
    )
    sides = reference_side(
        reference, schema=None, schema_source="", target=TARGET, prediction="prediction", min_rows=30
    )
    assert sides.schema is not None and sides.schema.to_dict() == schema.to_dict()
    assert json.dumps(sides.document, sort_keys=True) == json.dumps(want, sort_keys=True)


@pytest.mark.parametrize("rows", [0, 1, 4_999, 5_000, 5_001, PCA_MAX_ROWS, PCA_MAX_ROWS + 1, 1_000_000])
def test_the_profiled_rows_are_the_pca_rows_and_the_sample_rows(rows: int) -> None:
    want = np.union1d(pca_positions(rows), sample_positions(rows))
    got = profiled_positions(rows)
    assert got.dtype == want.dtype and np.array_equal(got, want)

"""Windows of the prediction log folded into sketches, on SQLite and PostgreSQL: equal to the in-memory sketch
of the same rows, labels giving performance, both readers giving the same sketch. The reading itself (bounds,
time windows, chunks, values) is tested in tests/predictions/test_windows.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sqlalchemy import text

from core.database import open_database
from monitors.engine import evaluate, sketch_columns
from monitors.log_window import read_window
from monitors.profile import profile_from_dict
from monitors.window import WindowSketch, split_missing
from predictions.service import record_feedback
from predictions.windows import Reader, WindowSpec
from registry.schema import ModelSchema
from tests.monitors.helpers import true_probability
from tests.monitors.logdata import log_columns
from training.datagen import TARGET, generate


def assert_same_sketch(a: WindowSketch, b: WindowSketch) -> None:
    assert a.rows == b.rows
    assert set(a.numeric) == set(b.numeric)
    for name, counts in a.numeric.items():
        other = b.numeric[name]
        assert np.array_equal(counts.cells, other.cells), name
        assert counts.missing == other.missing, name
        assert np.allclose(counts.sums, other.sums, rtol=1e-9, atol=1e-6), name
    assert {k: split_missing(v) for k, v in a.categorical.items()} == {
        k: split_missing(v) for k, v in b.categorical.items()
    }
    for attr in ("prediction", "pca_error"):
        x, y = getattr(a, attr), getattr(b, attr)
        assert (x is None) == (y is None)
        if x is not None:
            assert np.array_equal(x.cells, y.cells), attr
    la, lb = a.labels, b.labels
    assert (la.rows, la.true_pos, la.false_pos, la.false_neg, la.true_neg) == (
        lb.rows,
        lb.true_pos,
        lb.false_pos,
        lb.false_neg,
        lb.true_neg,
    )


def _slice(cols: dict[str, np.ndarray], lo: int, hi: int | None = None) -> dict[str, np.ndarray]:
    return {k: v[lo:hi] for k, v in cols.items()}


def test_last_n_rows_window_matches_in_memory_sketch(
    database_url: str, profile_dict: dict[str, Any], schema: ModelSchema
) -> None:
    profile = profile_from_dict(profile_dict)
    features = list(schema.feature_names)
    db = open_database(database_url)
    cols = generate(1_200, seed=5)
    p = true_probability(cols)
    log_columns(db.engine, cols, features=features, probability=p)
    other = generate(40, seed=6)
    log_columns(db.engine, other, features=features, status="output_violation")  # not answered: left out
    log_columns(db.engine, other, features=features, model="other")
    log_columns(db.engine, generate(70, seed=7), features=features, version=2)

    window = read_window(
        engine=db.engine,
        profile=profile,
        model_name="credit",
        spec=WindowSpec(rows=1_000, version=1),
        chunk_rows=128,
    )
    assert window.rows == 1_000 and window.sketch.rows == 1_000
    assert window.last_id is not None and window.first_id is not None
    assert window.chunks >= (8 if window.reader == "generic" else 1)
    expected = sketch_columns(
        profile=profile, columns={f: cols[f][200:] for f in features}, predictions=p[200:]
    )
    assert_same_sketch(window.sketch, expected)
    assert window.start is not None and window.end is not None and window.start < window.end

    everything = read_window(
        engine=db.engine, profile=profile, model_name="credit", spec=WindowSpec(rows=5_000, version=1)
    )
    assert everything.rows == 1_200
    all_versions = read_window(engine=db.engine, profile=profile, model_name="credit", spec=WindowSpec())
    assert all_versions.rows == 1_270
    nothing = read_window(engine=db.engine, profile=profile, model_name="nobody", spec=WindowSpec(rows=10))
    assert nothing.rows == 0 and nothing.last_id is None
    db.dispose()


def test_feedback_labels_give_performance_and_coverage(
    database_url: str, profile_dict: dict[str, Any], schema: ModelSchema
) -> None:
    profile = profile_from_dict(profile_dict)
    db = open_database(database_url)
    cols = generate(4_000, seed=9)
    ids = log_columns(
        db.engine, cols, features=list(schema.feature_names), probability=true_probability(cols)
    )
    labelled = ids[::2]
    with db.session() as s:
        stored, unknown = record_feedback(
            session=s,
            model_name="credit",
            labels=[(pid, float(cols[TARGET][i])) for i, pid in enumerate(ids)][::2],
        )
    assert stored == len(labelled) and not unknown
    window = read_window(
        engine=db.engine, profile=profile, model_name="credit", spec=WindowSpec(rows=4_000), chunk_rows=700
    )
    assert window.labelled == 2_000 and window.sketch.labels.rows == 2_000
    report = evaluate(profile=profile, sketch=window.sketch)
    assert report.performance is not None and report.performance["label_coverage"] == pytest.approx(0.5)
    ref = profile.performance
    assert ref is not None
    # the model is the generator's own P(y|x): realised AUC and accuracy match the reference
    assert report.performance["roc_auc"] == pytest.approx(ref["roc_auc"], abs=0.04)
    assert report.performance["accuracy"] == pytest.approx(ref["accuracy"], abs=0.04)
    assert report.concept_drift is not None and report.concept_drift["observed"] == 2_000
    assert report.estimated_performance is not None
    db.dispose()


def test_readers_agree_and_stray_values_are_missing(
    database_url: str, profile_dict: dict[str, Any], schema: ModelSchema
) -> None:
    """Rows that bypassed the contract (a string in a numeric feature, a boolean, a missing key) count as
    missing, never break a window; on PostgreSQL the blocks reader and the generic reader agree exactly."""
    profile = profile_from_dict(profile_dict)
    features = list(schema.feature_names)
    db = open_database(database_url)
    cols = generate(900, seed=10)
    log_columns(db.engine, cols, features=features, probability=true_probability(cols))
    doc = "CAST(:doc AS JSONB)" if db.engine.dialect.name == "postgresql" else ":doc"
    with db.engine.begin() as conn:
        conn.execute(
            text(f"update prediction_log set inputs = {doc} where id in (3, 4)"),
            {"doc": '{"age": "abc", "income": true, "loan_purpose": "tab\\tand\\\\slash"}'},
        )
    spec = WindowSpec(rows=900)
    generic = read_window(
        engine=db.engine,
        profile=profile,
        model_name="credit",
        spec=spec,
        reader=Reader.GENERIC,
        chunk_rows=200,
    )
    assert generic.rows == 900
    age = generic.sketch.numeric["age"]
    assert age.missing == 2 and age.count == 898
    assert generic.sketch.numeric["credit_score"].missing == 2  # key absent
    assert split_missing(generic.sketch.categorical["loan_purpose"])[0]["tab\tand\\slash"] == 2
    if db.engine.dialect.name == "postgresql":
        fast = read_window(
            engine=db.engine, profile=profile, model_name="credit", spec=spec, reader=Reader.BLOCKS
        )
        assert fast.reader == "blocks"
        assert_same_sketch(fast.sketch, generic.sketch)
        auto = read_window(engine=db.engine, profile=profile, model_name="credit", spec=spec)
        assert auto.reader == "typed"  # rows without the typed copy: read as blocks
        assert_same_sketch(auto.sketch, generic.sketch)
    else:
        with pytest.raises(ValueError, match="needs PostgreSQL"):
            read_window(
                engine=db.engine, profile=profile, model_name="credit", spec=spec, reader=Reader.BLOCKS
            )
    db.dispose()

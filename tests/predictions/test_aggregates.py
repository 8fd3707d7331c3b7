"""The aggregate reader (counts computed inside PostgreSQL) against the generic reader (rows counted in
Python): equal field by field on a log holding every awkward case, and the same verdicts where it samples.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sqlalchemy import text

from core.database import open_database
from monitors.binning import count_on_grid
from monitors.engine import evaluate
from monitors.log_window import read_window, sketch_aggregate
from monitors.profile import Profile
from monitors.window import WindowSketch
from predictions.aggregates import Cells, Grid, sample_step
from predictions.service import record_feedback
from predictions.windows import Reader, WindowSpec, summarize_window
from tests.monitors.helpers import true_probability
from tests.monitors.logdata import log_columns
from tests.support import credit_profile
from training.datagen import TARGET, Scenario, generate

FEATURES = [
    "age",
    "income",
    "debt_to_income",
    "credit_score",
    "loan_amount",
    "employment_years",
    "num_open_accounts",
    "home_ownership",
    "loan_purpose",
    "region",
]


@pytest.fixture(scope="module")
def profile() -> Profile:
    return credit_profile()


def assert_equal_sketches(a: WindowSketch, b: WindowSketch) -> None:
    """Every count equal; sums equal up to the order of floating-point additions."""
    assert a.rows == b.rows
    assert set(a.numeric) == set(b.numeric)
    for name, x in a.numeric.items():
        y = b.numeric[name]
        assert np.array_equal(x.cells, y.cells), name
        assert (x.missing, x.outside) == (y.missing, y.outside), name
        assert np.allclose(x.sums, y.sums, rtol=1e-12, atol=1e-9), name
    assert a.categorical == b.categorical  # raw keys: None, "" and unseen values included
    assert a.prediction is not None and b.prediction is not None
    assert np.array_equal(a.prediction.cells, b.prediction.cells)
    assert a.prediction.missing == b.prediction.missing
    assert np.allclose(a.prediction.sums, b.prediction.sums, rtol=1e-12, atol=1e-9)
    la, lb = a.labels, b.labels
    assert (la.rows, la.true_pos, la.false_pos, la.false_neg, la.true_neg) == (
        lb.rows,
        lb.true_pos,
        lb.false_pos,
        lb.false_neg,
        lb.true_neg,
    )
    assert la.positive_cells is not None and lb.positive_cells is not None
    assert np.array_equal(la.positive_cells, lb.positive_cells)
    assert la.negative_cells is not None and lb.negative_cells is not None
    assert np.array_equal(la.negative_cells, lb.negative_cells)
    assert (a.errors.seen, a.errors.alarms) == (b.errors.seen, b.errors.alarms)


def _awkward_log(url: str, profile: Profile) -> Any:
    """A log with every case the readers must agree on; returns the open database."""
    db = open_database(url)
    cols = generate(3_000, seed=5)
    age_grid = profile.features["age"].grid  # type: ignore[union-attr]
    cols["age"][:50] = age_grid[:50]  # values exactly on grid points (atoms)
    cols["income"][50:80] = np.nan  # JSON null
    cols["loan_amount"][80:90] = 1e9  # beyond the reference range (outer cells)
    p = true_probability(cols)
    p[90:95] = np.nan  # a probability without a value
    ids = log_columns(db.engine, cols, features=FEATURES, probability=p)
    docs = {
        3: '{"age": "abc", "income": true, "loan_purpose": "tab\\tand\\\\slash", "region": 7}',
        4: '{"age": "41", "income": " 2.5e4 ", "home_ownership": "", "region": null}',
        5: '{"age": "0x10", "income": [1], "credit_score": {"a": 1}, "loan_purpose": "brand_new"}',
        6: '{"age": -5, "income": -1e300, "debt_to_income": 1e-300, "loan_purpose": "brand_new"}',
        7: '{"age": "nan(1)", "credit_score": "Infinity", "region": "north"}',
    }
    with db.engine.begin() as conn:
        for row_id, doc in docs.items():
            conn.execute(
                text("update prediction_log set inputs = CAST(:doc AS JSONB) where id = :id"),
                {
                    "doc": doc,
                    "id": row_id,
                },
            )
    labels = [(pid, float(cols[TARGET][i])) for i, pid in enumerate(ids) if i % 3]
    with db.session() as s:
        record_feedback(session=s, model_name="credit", labels=labels)
    return db


def test_aggregate_equals_the_generic_reader_on_every_awkward_case(pg_url: str, profile: Profile) -> None:
    """Missing values (null, absent key), text and other JSON types in numeric features (text that is a
    number counts as that number; hex and ``nan(1)``, which PostgreSQL would parse but Python does not,
    count as missing), atoms, values outside the reference range and the contract's limits, empty and
    unseen categories, a number in a categorical feature, a probability without a value, labels."""
    db = _awkward_log(pg_url, profile)
    spec = WindowSpec(rows=2_900)
    generic = read_window(engine=db.engine, profile=profile, model_name="credit", spec=spec, reader="generic")
    agg = read_window(
        engine=db.engine, profile=profile, model_name="credit", spec=spec, reader=Reader.AGGREGATE
    )
    assert agg.reader == "aggregate" and generic.reader == "generic"
    assert (agg.rows, agg.labelled, agg.first_id, agg.last_id) == (
        generic.rows,
        generic.labelled,
        generic.first_id,
        generic.last_id,
    )
    whole = read_window(
        engine=db.engine, profile=profile, model_name="credit", spec=WindowSpec(), reader="aggregate"
    )
    expected = read_window(engine=db.engine, profile=profile, model_name="credit", spec=WindowSpec())
    for a, b in ((agg.sketch, generic.sketch), (whole.sketch, expected.sketch)):
        assert_equal_sketches(a, b)
        assert a.pca_error is not None and b.pca_error is not None  # the sample is the whole window here
        assert np.array_equal(a.pca_error.cells, b.pca_error.cells)
    # the awkward cases are really in the window
    s = whole.sketch
    assert s.numeric["age"].missing == 3  # "abc", "0x10", "nan(1)"
    assert s.numeric["age"].outside >= 1  # -5 is below the contract's minimum
    assert s.numeric["credit_score"].missing >= 2 and s.numeric["credit_score"].cells[-1] >= 1  # Infinity
    assert s.numeric["income"].missing == 30 + 3  # nulls; true, [1]; absent in row 7
    assert s.categorical["loan_purpose"]["brand_new"] == 2
    assert s.categorical["region"]["7"] == 1 and s.categorical["home_ownership"][""] == 1
    assert s.prediction is not None and s.prediction.missing == 5 + 30  # and where income is null
    db.dispose()


def test_a_number_beyond_a_float_falls_back_to_the_rows(pg_url: str, profile: Profile) -> None:
    db = _awkward_log(pg_url, profile)
    with db.engine.begin() as conn:
        conn.execute(text("""update prediction_log set inputs = '{"income": 1e400}'::jsonb where id = 9"""))
    spec = WindowSpec(rows=3_000)
    generic = read_window(engine=db.engine, profile=profile, model_name="credit", spec=spec, reader="generic")
    agg = read_window(engine=db.engine, profile=profile, model_name="credit", spec=spec, reader="aggregate")
    assert_equal_sketches(agg.sketch, generic.sketch)
    assert agg.sketch.numeric["income"].cells[-1] >= 1  # 1e400 is +inf, as float() reads it
    db.dispose()


def test_verdicts_agree_where_the_pca_error_is_sampled(pg_url: str, profile: Profile) -> None:
    """Planted drift (a covariate shift) and no drift: the sampled PCA error (about 1 000 of 6 000 rows)
    gives the same verdicts as the whole window; every other count is exact."""
    db = open_database(pg_url)
    stable = generate(6_000, seed=21)
    shifted = generate(6_000, seed=22, scenario=Scenario.COVARIATE_SHIFT)
    log_columns(db.engine, stable, features=FEATURES, probability=true_probability(stable), model="stable")
    log_columns(db.engine, shifted, features=FEATURES, probability=true_probability(shifted))
    for model, drifted in (("stable", False), ("credit", True)):
        spec = WindowSpec(rows=6_000)
        rows = read_window(engine=db.engine, profile=profile, model_name=model, spec=spec)
        summary_rows = rows.rows
        assert sample_step(summary_rows, 1_000) == 6
        summary = summarize_window(engine=db.engine, model_name=model, spec=spec)
        assert summary is not None
        sampled = sketch_aggregate(engine=db.engine, profile=profile, summary=summary, sample_rows=1_000)
        assert sampled.pca_error is not None and 900 <= sampled.pca_error.count <= 1_100
        full, part = evaluate(profile=profile, sketch=rows.sketch), evaluate(profile=profile, sketch=sampled)
        assert full.drifted == part.drifted == drifted
        assert [(f.name, f.drifted) for f in full.features] == [(f.name, f.drifted) for f in part.features]
        assert full.multivariate is not None and part.multivariate is not None
        assert full.multivariate.drifted == part.multivariate.drifted
    db.dispose()


def test_cells_count_like_the_binning_module() -> None:
    grid = Grid(points=np.array([0.0, 1.0, np.nextafter(1.0, 2.0), 5.0]), low=0.0, high=4.0)
    values = np.array([-1.0, 0.0, 0.5, 1.0, np.nextafter(1.0, 2.0), 3.0, 5.0, 9.0, np.nan, np.inf, -0.0])
    cells = Cells.empty(grid)
    cells.add(values, grid)
    want = count_on_grid(values, grid.points, limits=(0.0, 4.0))
    assert np.array_equal(cells.cells, want.cells)
    assert (cells.missing, cells.outside) == (want.missing, want.outside)


def test_the_aggregate_reader_needs_postgresql(tmp_path: Any, profile: Profile) -> None:
    db = open_database(f"sqlite:///{tmp_path / 'x.db'}")
    log_columns(db.engine, generate(10, seed=1), features=FEATURES)
    with pytest.raises(ValueError, match="aggregate reader needs PostgreSQL"):
        read_window(
            engine=db.engine, profile=profile, model_name="credit", spec=WindowSpec(), reader="aggregate"
        )
    db.dispose()

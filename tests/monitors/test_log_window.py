"""Windows of the prediction log folded into sketches, on SQLite and PostgreSQL: equal to the in-memory sketch
of the same predictions (logged as requests of one or several predictions, typed or as documents; a last-N
window cutting inside a request), labels giving performance, typed and document batches counting the same,
and one log giving the same sketch on both databases. The reading itself (bounds, time windows, chunks,
values) is tested in tests/predictions/test_windows.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from sqlalchemy import text

from core.database import open_database
from monitors.engine import evaluate, sketch_columns
from monitors.log_window import read_window
from monitors.profile import profile_from_dict
from monitors.sketch import WindowSketch, split_missing
from predictions.service import record_feedback
from predictions.windows import WindowSpec
from registry.schema import ModelSchema
from tests.monitors.helpers import true_probability
from tests.monitors.logdata import contract, log_columns, plain
from tests.predictions.logdata import write_requests
from training.cluster.datagen import TARGET, generate


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


def batch_shape(url_or_engine: Any, model: str = "credit") -> tuple[int, int, int, int]:
    """The model's batches: count, predictions, typed batches, batches with documents."""
    with url_or_engine.connect() as conn:
        found = conn.execute(
            text(
                "select count(*), coalesce(sum(size), 0), count(layout), count(inputs) "
                "from prediction_batches where model_name = :m"
            ),
            {"m": model},
        ).one()
    return cast(tuple[int, int, int, int], tuple(int(v) for v in found))


@pytest.mark.parametrize(("per_request", "typed_copy"), [(1, False), (1, True), (7, False), (7, True)])
def test_last_n_rows_window_matches_in_memory_sketch(
    database_url: str, profile_dict: dict[str, Any], schema: ModelSchema, per_request: int, typed_copy: bool
) -> None:
    profile = profile_from_dict(profile_dict)
    layout = contract(profile) if typed_copy else None
    features = list(schema.feature_names)
    db = open_database(database_url)
    cols = generate(1_200, seed=5)
    p = true_probability(cols)
    log_columns(db.engine, cols, features=features, probability=p, layout=layout, per_request=per_request)
    batches = -(-1_200 // per_request)
    assert batch_shape(db.engine) == (
        batches,
        1_200,
        batches if typed_copy else 0,
        0 if typed_copy else batches,
    )
    other = generate(40, seed=6)
    common: dict[str, Any] = dict(features=features, layout=layout, per_request=per_request)
    log_columns(db.engine, other, status="output_violation", **common)  # not answered: left out
    log_columns(db.engine, other, model="other", **common)
    log_columns(db.engine, generate(70, seed=7), version=2, **common)

    window = read_window(
        engine=db.engine,
        profile=profile,
        model_name="credit",
        spec=WindowSpec(rows=1_000, version=1),
        chunk_rows=128,
    )
    assert window.reader == "columnar"
    assert window.rows == 1_000 and window.sketch.rows == 1_000
    # the first 200 predictions are left out: whole requests, then the oldest of the request holding #200
    assert (window.first_id, window.last_id) == (200 // per_request + 1, batches)
    assert window.skip == 200 % per_request
    assert window.chunks >= 8  # about 128 predictions a chunk
    expected = sketch_columns(
        profile=profile, columns={f: cols[f][200:] for f in features}, predictions=p[200:]
    )
    assert_same_sketch(window.sketch, expected)
    assert window.start is not None and window.end is not None and window.start < window.end

    everything = read_window(
        engine=db.engine, profile=profile, model_name="credit", spec=WindowSpec(rows=5_000, version=1)
    )
    assert everything.rows == 1_200 and everything.skip == 0
    assert_same_sketch(
        everything.sketch,
        sketch_columns(profile=profile, columns={f: cols[f] for f in features}, predictions=p),
    )
    all_versions = read_window(engine=db.engine, profile=profile, model_name="credit", spec=WindowSpec())
    assert all_versions.rows == 1_270
    nothing = read_window(engine=db.engine, profile=profile, model_name="nobody", spec=WindowSpec(rows=10))
    assert nothing.rows == 0 and nothing.last_id is None
    db.dispose()


@pytest.mark.parametrize("per_request", [1, 5])
def test_feedback_labels_give_performance_and_coverage(
    database_url: str, profile_dict: dict[str, Any], schema: ModelSchema, per_request: int
) -> None:
    profile = profile_from_dict(profile_dict)
    features = list(schema.feature_names)
    db = open_database(database_url)
    cols = generate(4_000, seed=9)
    p = true_probability(cols)
    ids = log_columns(
        db.engine, cols, features=features, probability=p, layout=contract(profile), per_request=per_request
    )
    assert len(ids) == len(set(ids)) == 4_000
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

    # the last 3,001 predictions: with requests of 5 the window starts at the last prediction of a request,
    # whose labelled predictions before it are left out (labels by batch id and position)
    cut = read_window(
        engine=db.engine, profile=profile, model_name="credit", spec=WindowSpec(rows=3_001), chunk_rows=700
    )
    assert cut.rows == 3_001 and cut.skip == 999 % per_request
    y = np.asarray(cols[TARGET], dtype=np.float64).copy()
    y[1::2] = np.nan  # every other prediction is labelled
    expected = sketch_columns(
        profile=profile, columns={f: cols[f][999:] for f in features}, predictions=p[999:], labels=y[999:]
    )
    assert cut.labelled == 1_500 == int(np.sum(~np.isnan(y[999:])))
    assert_same_sketch(cut.sketch, expected)
    db.dispose()


STRAYS = [
    # values that bypassed the contract: a string in a numeric feature, a boolean, keys absent
    {"age": "abc", "income": True, "loan_purpose": "tab\tand\\slash"},
    {"age": "abc", "income": True, "loan_purpose": "tab\tand\\slash"},
]


@pytest.mark.parametrize("per_request", [1, 7])
def test_stray_values_are_missing_and_typed_batches_count_as_documents(
    database_url: str, profile_dict: dict[str, Any], schema: ModelSchema, per_request: int
) -> None:
    """Predictions that bypassed the contract (a string in a numeric feature, a boolean, a missing key) count
    as missing, never break a window: their request is logged with its documents, beside typed requests.
    The same predictions logged as documents only give the same sketch (whole windows and windows cutting
    inside a request, in small chunks)."""
    profile = profile_from_dict(profile_dict)
    features = list(schema.feature_names)
    db = open_database(database_url)
    cols = generate(900, seed=10)
    docs = [{f: plain(cols[f][i]) for f in features} for i in range(900)]
    docs[3], docs[500] = dict(STRAYS[0]), dict(STRAYS[1])
    p = true_probability(cols)
    start = datetime.now(UTC) - timedelta(minutes=5)
    write_requests(
        db.engine, docs, probability=p, layout=contract(profile), per_request=per_request, start=start
    )
    write_requests(db.engine, docs, model="documents", probability=p, per_request=per_request, start=start)
    batches = -(-900 // per_request)
    # the two requests holding a stray value: documents; the others typed
    assert batch_shape(db.engine) == (batches, 900, batches - 2, 2)
    assert batch_shape(db.engine, "documents") == (batches, 900, 0, batches)

    def window(model: str, spec: WindowSpec, chunk_rows: int) -> WindowSketch:
        found = read_window(
            engine=db.engine, profile=profile, model_name=model, spec=spec, chunk_rows=chunk_rows
        )
        assert found.reader == "columnar"
        return found.sketch

    whole = window("credit", WindowSpec(rows=900), 200)
    assert whole.rows == 900
    age = whole.numeric["age"]
    assert age.missing == 2 and age.count == 898
    assert whole.numeric["credit_score"].missing == 2  # key absent
    assert whole.numeric["income"].missing == 2  # a boolean is no number
    assert split_missing(whole.categorical["loan_purpose"])[0]["tab\tand\\slash"] == 2
    for spec, chunk_rows in ((WindowSpec(rows=900), 200), (WindowSpec(rows=897), 64), (WindowSpec(), 50)):
        assert_same_sketch(window("credit", spec, chunk_rows), window("documents", spec, chunk_rows))
    cut = window("credit", WindowSpec(rows=398), 64)  # from prediction 502: the second stray is left out
    assert cut.rows == 398 and cut.numeric["age"].missing == 0
    db.dispose()


def test_one_log_reads_the_same_on_sqlite_and_postgresql(
    pg_url: str, tmp_path: Path, profile_dict: dict[str, Any], schema: ModelSchema
) -> None:
    """The same requests (typed, of several predictions, some labelled) logged into SQLite (read batch by
    batch) and PostgreSQL (typed ranges read in one row each): the same windows, whole or cut inside a
    request, in any chunk size."""
    profile = profile_from_dict(profile_dict)
    features = list(schema.feature_names)
    cols = generate(3_000, seed=12)
    docs = [{f: plain(cols[f][i]) for f in features} for i in range(3_000)]
    p = true_probability(cols)
    start = datetime.now(UTC) - timedelta(minutes=30)
    layout = contract(profile)
    windows: dict[str, list[Any]] = {}
    for url in (f"sqlite:///{tmp_path / 'log.db'}", pg_url):
        db = open_database(url, upgrade=True)
        written = []
        for lo, hi, per_request in ((0, 1_000, 1), (1_000, 2_200, 6), (2_200, 3_000, 4)):
            written += write_requests(
                db.engine,
                docs[lo:hi],
                probability=p[lo:hi],
                layout=layout,
                per_request=per_request,
                start=start + timedelta(minutes=lo // 100),
                spacing=timedelta(milliseconds=10),
            )
        ids = [pid for b in written for pid in b.ids()]
        with db.session() as s:
            labels = [(pid, float(cols[TARGET][i])) for i, pid in enumerate(ids) if i % 3 == 0]
            assert record_feedback(session=s, model_name="credit", labels=labels)[0] == 1_000
        now = start + timedelta(minutes=25)  # a time bound of 20 minutes: since start + 5 minutes
        windows[db.engine.dialect.name] = [
            read_window(
                engine=db.engine, profile=profile, model_name="credit", spec=spec, chunk_rows=k, now=now
            )
            for spec, k in (
                (WindowSpec(), 1_000),
                (WindowSpec(rows=1_999), 128),  # from the last prediction of a request of 6
                (WindowSpec(rows=777), 100),  # inside a request of 4
                (WindowSpec(minutes=20), 300),  # the requests logged from 10 minutes after the start
            )
        ]
        db.dispose()
    assert windows["sqlite"][0].rows == 3_000 and windows["sqlite"][0].labelled == 1_000
    # 1,001 left out: the 1,000 single ones and 1 of a request of 6; 2,223: 2,200, 5 requests of 4 and 3
    assert [w.skip for w in windows["sqlite"]] == [0, 1, 3, 0]
    for lite, pg in zip(windows["sqlite"], windows["postgresql"], strict=True):
        assert (lite.rows, lite.labelled, lite.skip) == (pg.rows, pg.labelled, pg.skip) and lite.rows > 0
        assert (lite.first_id, lite.last_id) == (pg.first_id, pg.last_id)
        assert_same_sketch(lite.sketch, pg.sketch)
    timed = windows["sqlite"][3]
    assert timed.rows == 3_000 - 1_000 and timed.skip == 0  # a time bound cuts at a request's time

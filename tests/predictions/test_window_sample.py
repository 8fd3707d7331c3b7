"""A sample of a window's raw rows (:func:`predictions.windows.read_sample`), on SQLite and PostgreSQL: the
sampled rows' values equal the logged ones, whether a batch is typed (categories in the layout, outside it,
missing) or held as documents (values that bypassed the contract), in requests of one or many predictions,
a last-N window cutting inside a request; the answers (a multi-class model's vectors) and the labels given
later by feedback.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from core.database import open_database
from predictions import typed
from predictions.service import record_feedback
from predictions.windows import WindowSpec, read_sample, summarize_window
from tests.predictions.logdata import CATEGORICAL, LAYOUT, NUMERIC, documents, make_columns, write_requests

N = 300
STRAY = 17  # this prediction's document bypassed the contract: its batch is held as documents


def _logged(n: int) -> tuple[list[dict[str, Any]], np.ndarray, list[list[float | None]], np.ndarray]:
    """``n`` documents (some ``""`` categories, one stray), outputs, vectors of width 3, labels (NaN:
    none)."""
    cols = make_columns(n, seed=31)
    cols["colour"][5::41] = ""  # typed as a text outside the layout; read back as missing
    docs = documents(cols)
    docs[STRAY] = {"amount": "12.5", "count": True, "colour": 7}  # a number sent as text, a bool, a number
    p = np.random.default_rng(32).random(n)
    vectors: list[list[float | None]] = [[float(v), float(1 - v), 0.0] for v in p]
    vectors[3] = [None, None, None]
    y = np.full(n, np.nan)
    y[1::3] = (np.arange(n)[1::3] % 2).astype(np.float64)
    return docs, p, vectors, y


def _expected(docs: list[dict[str, Any]]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The values a window reader reads of the documents (see predictions.windows' docstring)."""
    numeric = {}
    for name in NUMERIC:
        values = []
        for doc in docs:
            v = doc.get(name)
            if isinstance(v, int | float | str) and not isinstance(v, bool):  # a number, or numeric text
                values.append(float(v))
            else:
                values.append(np.nan)
        numeric[name] = np.array(values)
    categorical = {}
    for name in CATEGORICAL:
        texts = [doc.get(name) for doc in docs]
        categorical[name] = np.array(
            [None if t is None or t == "" else t if isinstance(t, str) else str(t) for t in texts],
            dtype=object,
        )
    return numeric, categorical


@pytest.mark.parametrize(
    ("layout", "per_request"), [(None, 1), (LAYOUT, 1), (LAYOUT, 7)], ids=["documents", "typed", "typed-7"]
)
def test_sampled_rows_equal_the_logged_rows(
    database_url: str, layout: typed.Layout | None, per_request: int
) -> None:
    db = open_database(database_url)
    docs, p, vectors, y = _logged(N)
    batches = write_requests(
        db.engine,
        docs,
        probability=p,
        layout=layout,
        per_request=per_request,
        vectors=vectors,
        start=datetime.now(UTC) - timedelta(minutes=1),
    )
    write_requests(db.engine, docs[:20], model="other", probability=p[:20], layout=layout)  # not ours
    ids = [pid for b in batches for pid in b.ids()]
    labelled = np.flatnonzero(~np.isnan(y))
    with db.session() as s:
        record_feedback(session=s, model_name="credit", labels=[(ids[i], float(y[i])) for i in labelled])
    if layout is not None:  # typed, but the stray request's batch
        assert sum(b.layout is None for b in batches) == 1
    rows = N - 12  # a last-N window: cuts inside a request of 7
    summary = summarize_window(engine=db.engine, model_name="credit", spec=WindowSpec(rows=rows))
    assert summary is not None and summary.rows == rows and summary.skip == 12 % per_request
    numeric, categorical = _expected(docs[12:])
    for positions in (np.arange(rows), np.array(sorted({0, 1, 5, 6, 7, 100, STRAY - 12, rows - 1}))):
        got = read_sample(
            engine=db.engine, summary=summary, positions=positions, numeric=NUMERIC, categorical=CATEGORICAL
        )
        assert got.population == rows and np.array_equal(got.positions, positions)
        for name in NUMERIC:
            assert np.array_equal(got.numeric[name], numeric[name][positions], equal_nan=True), name
        for name in CATEGORICAL:
            assert got.categorical[name].tolist() == categorical[name][positions].tolist(), name
        assert np.array_equal(got.predictions, p[12:][positions])
        assert np.array_equal(got.labels, y[12:][positions], equal_nan=True)
    # a multi-class model's answers are its vectors (NaN where a prediction has none)
    got = read_sample(
        engine=db.engine, summary=summary, positions=np.arange(rows), numeric=[], categorical=[], width=3
    )
    want = np.array([[np.nan if v is None else v for v in row] for row in vectors[12:]], dtype=np.float64)
    assert got.predictions.shape == (rows, 3)
    assert np.array_equal(got.predictions, want, equal_nan=True)
    assert not got.numeric and not got.categorical
    db.dispose()


def test_positions_must_lie_in_the_window(database_url: str) -> None:
    db = open_database(database_url)
    docs, p, _, _ = _logged(30)
    write_requests(db.engine, docs, probability=p, layout=LAYOUT)
    summary = summarize_window(engine=db.engine, model_name="credit", spec=WindowSpec(rows=20))
    assert summary is not None
    for bad in (np.array([20]), np.array([-1, 3]), np.array([4, 4]), np.array([5, 2])):
        with pytest.raises(ValueError, match="increasing places"):
            read_sample(engine=db.engine, summary=summary, positions=bad, numeric=NUMERIC, categorical=[])
    empty = read_sample(
        engine=db.engine,
        summary=summary,
        positions=np.array([], dtype=np.int64),
        numeric=NUMERIC,
        categorical=[],
    )
    assert empty.predictions.size == 0 and empty.numeric["amount"].size == 0 and empty.labels.size == 0
    db.dispose()

"""A window's labels read from ``prediction_feedback`` alone (migration 0015, ``predictions.aggregates``).

Each label carries copies of its prediction's log row (``log_id``, ``probability``, ``model_version``,
``status``), filled by ``record_feedback`` and backfilled by the migration. The readers that use them must
return exactly what the join of the labels with the window's log rows returned (the join is kept here as
the reference), on a log with labels of every kind a window must leave out or keep; and a database with
labels from before 0015 must keep them and read them the new way after the upgrade.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import SecretStr
from sqlalchemy import Engine, create_engine, text

from core import migrate
from core.config import Settings
from core.database import open_database
from core.runtime import Runtime
from predictions.aggregates import (
    Grid,
    _window_filter,
    aggregate_window,
    labelled_arrays,
    labelled_rows,
)
from predictions.scheduled import purge_expired
from predictions.service import LogRow, fill_feedback_copies, record_feedback, write_log_rows
from predictions.windows import WindowSpec, WindowSummary, summarize_window
from tests.predictions.logdata import write_rows_as_they_were
from tests.predictions.test_prediction_log import make_rows
from tests.support import database_at, postgres_schema

NOW = datetime.now(UTC).replace(microsecond=0)
HOUR = timedelta(hours=1)
COPIES = ("log_id", "probability", "model_version", "status")

# the reader before migration 0015: the labels joined with the window's log rows, in id order
_JOINED = (
    "SELECT p.probability, fb.label FROM prediction_log p JOIN prediction_feedback fb "
    "ON fb.prediction_id = p.prediction_id AND fb.logged_at = p.logged_at WHERE {where} ORDER BY p.id"
)


def _joined(engine: Engine, summary: WindowSummary) -> tuple[np.ndarray, np.ndarray]:
    where, params = _window_filter(summary)
    raw = engine.raw_connection()
    try:
        with raw.driver_connection.cursor() as cur:  # type: ignore[union-attr]
            cur.execute(_JOINED.replace("{where}", where), params)
            rows = cur.fetchall()
        raw.commit()
    finally:
        raw.close()
    p = np.array([np.nan if r[0] is None else r[0] for r in rows], dtype=np.float64)
    y = np.array([r[1] for r in rows], dtype=np.float64)
    return p, y


def _log(when: datetime, n: int, *, start: int, model: str = "credit", **changes: Any) -> list[LogRow]:
    rows = make_rows(n, start=start, when=when, model=model)
    return [r._replace(**{"probability": (start + i) % 10 / 10, **changes}) for i, r in enumerate(rows)]


def _fill(engine: Engine) -> dict[str, list[LogRow]]:
    """Rows of 'credit' over three hours (two versions, some output violations, a probability without a
    value, rows of five hours ago written last: a replayed spool) and of 'other' between them, in id
    order; the groups by name."""
    groups = {
        "early": _log(NOW - 3 * HOUR, 40, start=0),
        "other": _log(NOW - 2 * HOUR, 20, start=100, model="other"),
        "v2": _log(NOW - 2 * HOUR, 30, start=200, model_version=2),
        "violations": _log(NOW - HOUR, 10, start=300, status="output_violation"),
        "nan": _log(NOW - HOUR, 5, start=400, probability=None),
        "late": _log(NOW, 40, start=500),
        "replayed": _log(NOW - 5 * HOUR, 6, start=600),
    }
    for rows in groups.values():
        write_rows_as_they_were(engine, rows)
    return groups


def _label(db: Any, groups: dict[str, list[LogRow]]) -> None:
    """Labels on some rows of every group (a NaN label among them), one of them sent twice."""
    for name, rows in groups.items():
        model = rows[0].model_name
        labels = [(r.prediction_id, float(i % 2)) for i, r in enumerate(rows) if i % 3 == 0]
        if name == "late":
            labels.append((rows[1].prediction_id, float("nan")))
        with db.session() as s:
            assert record_feedback(session=s, model_name=model, labels=labels) == (len(labels), [])
    resent = groups["late"][3].prediction_id  # labelled 1.0 above
    with db.session() as s:
        assert record_feedback(session=s, model_name="credit", labels=[(resent, 0.0)]) == (1, [])


# (read at NOW + 1 hour)
SPECS = [
    WindowSpec(),  # every row: every group of credit, 'other' and 'violations' between them left out
    WindowSpec(rows=60),  # the newest 60 ok rows: 'replayed', 'late', 'nan', the last 9 of 'v2'
    WindowSpec(rows=60, version=1),  # 'v2' left out: the last 9 of 'early', 'other' inside the id range
    WindowSpec(version=2),
    WindowSpec(minutes=150),  # 'violations' (not ok), 'nan', 'late'; 'replayed' inside the ids, too old
    WindowSpec(rows=30, minutes=200, version=1),
]


def _assert_readers_equal_the_join(engine: Engine, *, expect_labels: bool = True) -> int:
    """Every reader against the join, on every window of SPECS; the number of labels seen."""
    seen = 0
    for spec in SPECS:
        summary = summarize_window(engine=engine, model_name="credit", spec=spec, now=NOW + HOUR)
        assert summary is not None, spec
        p, y = labelled_arrays(engine=engine, summary=summary)
        jp, jy = _joined(engine, summary)
        assert np.array_equal(p, jp, equal_nan=True) and np.array_equal(y, jy, equal_nan=True), spec
        chunks = list(labelled_rows(engine=engine, summary=summary, chunk_rows=7))
        sp = np.concatenate([c[0] for c in chunks]) if chunks else np.array([])
        sy = np.concatenate([c[1] for c in chunks]) if chunks else np.array([])
        assert np.array_equal(sp, jp, equal_nan=True) and np.array_equal(sy, jy, equal_nan=True), spec
        grid = Grid(points=np.linspace(0, 1, 11))
        agg = aggregate_window(
            engine=engine, summary=summary, numeric={}, categorical=[], prediction=grid, threshold=0.5
        )
        ok = ~np.isnan(jp) & ~np.isnan(jy)
        truth, pred = jy[ok] != 0, jp[ok] >= 0.5
        assert agg.confusion == (
            int(np.sum(pred & truth)),
            int(np.sum(pred & ~truth)),
            int(np.sum(~pred & truth)),
            int(np.sum(~pred & ~truth)),
        ), spec
        cells = np.searchsorted(grid.thresholds(), jp[ok], side="right")
        assert agg.positive is not None and agg.negative is not None
        assert np.array_equal(agg.positive, np.bincount(cells[truth], minlength=23)), spec
        assert np.array_equal(agg.negative, np.bincount(cells[~truth], minlength=23)), spec
        seen += jp.size
        if expect_labels:
            assert jp.size > 0, spec
    return seen


@pytest.mark.postgres
def test_the_readers_equal_the_join_of_the_labels_with_the_log(pg_url: str) -> None:
    db = open_database(pg_url, upgrade=False)
    try:
        groups = _fill(db.engine)
        _label(db, groups)
        seen = _assert_readers_equal_the_join(db.engine)
        assert seen > 40
        # the resent label replaced the first; the window's NaN label and NaN probability are kept as NaN
        summary = summarize_window(engine=db.engine, model_name="credit", spec=WindowSpec(), now=NOW + HOUR)
        assert summary is not None
        p, y = labelled_arrays(engine=db.engine, summary=summary)
        late = [r.prediction_id for r in groups["late"]]
        with db.engine.connect() as conn:
            resent = conn.execute(
                text("SELECT label FROM prediction_feedback WHERE prediction_id = :p"), {"p": late[3]}
            ).scalar_one()
        assert resent == 0.0
        assert np.isnan(y).sum() == 1 and np.isnan(p).sum() == 2  # 'nan' rows 0 and 3 are labelled
        # each label carries its prediction's log row
        with db.engine.connect() as conn:
            wrong = conn.execute(
                text(
                    "SELECT count(*) FROM prediction_feedback f JOIN prediction_log p "
                    "ON p.prediction_id = f.prediction_id AND p.logged_at = f.logged_at "
                    "WHERE f.log_id <> p.id OR f.model_version <> p.model_version OR f.status <> p.status "
                    "OR f.probability IS DISTINCT FROM p.probability"
                )
            ).scalar_one()
            total = conn.execute(text("SELECT count(*) FROM prediction_feedback")).scalar_one()
        assert wrong == 0 and total > 50
    finally:
        db.dispose()


# ---------------------------------------------------------------- labels written before migration 0015


@pytest.fixture(params=["sqlite", "postgresql"])
def url_0014(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database at revision 0014 (labels without the copies of their log rows), on each backend."""
    with database_at(request, tmp_path, "0014_window_sketches") as url:
        yield url


def _labels_0014(engine: Engine, groups: dict[str, list[LogRow]]) -> dict[str, float]:
    """Labels as revision 0014 stored them (what record_feedback wrote then), on some rows of each group."""
    labels = {
        r.prediction_id: float(i % 2) for rows in groups.values() for i, r in enumerate(rows) if i % 3 == 0
    }
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO prediction_feedback (prediction_id, logged_at, model_name, label, received_at) "
                "SELECT prediction_id, logged_at, model_name, :y, logged_at FROM prediction_log "
                "WHERE prediction_id = :p"
            ),
            [{"p": pid, "y": y} for pid, y in labels.items()],
        )
    return labels


def _feedback(engine: Engine) -> dict[str, tuple[Any, ...]]:
    with engine.connect() as conn:
        return {
            str(pid): tuple(rest)
            for pid, *rest in conn.execute(
                text("SELECT prediction_id, model_name, label, received_at FROM prediction_feedback")
            )
        }


def _copies(engine: Engine) -> dict[str, tuple[Any, ...]]:
    """prediction_id -> (the label's copies, the log row's values)."""
    cols = ", ".join(f"f.{c}" for c in COPIES)
    with engine.connect() as conn:
        return {
            str(pid): (tuple(row[:4]), tuple(row[4:]))
            for pid, *row in conn.execute(
                text(
                    f"SELECT f.prediction_id, {cols}, p.id, p.probability, p.model_version, p.status "
                    "FROM prediction_feedback f JOIN prediction_log p ON p.prediction_id = f.prediction_id"
                )
            )
        }


def test_the_upgrade_backfills_every_label_and_the_downgrade_keeps_them(url_0014: str) -> None:
    engine = create_engine(url_0014)
    try:
        groups = _fill(engine)
        labels = _labels_0014(engine, groups)
        before = _feedback(engine)
        assert len(before) == len(labels) > 40
        migrate.upgrade(url_0014)
        assert _feedback(engine) == before  # every label, its model and time, untouched
        copies = _copies(engine)
        assert len(copies) == len(labels)
        for pid, (ours, theirs) in copies.items():
            assert ours == theirs, pid  # log id, probability, version, status of its log row
        if engine.dialect.name == "postgresql":  # the new readers find the old labels as the join did
            assert _assert_readers_equal_the_join(engine) > 40
        # a label sent after the upgrade carries the copies too
        new = _log(NOW, 2, start=900)
        write_log_rows(engine=engine, rows=new, idempotent=False)
        db = open_database(url_0014, upgrade=False)
        with db.session() as s:
            assert record_feedback(session=s, model_name="credit", labels=[(new[1].prediction_id, 1.0)]) == (
                1,
                [],
            )
        db.dispose()
        ours, theirs = _copies(engine)[new[1].prediction_id]
        assert ours == theirs and ours[0] is not None
        after = _feedback(engine)
        migrate.downgrade(url_0014, "0014_window_sketches")
        assert _feedback(engine) == after
        with engine.connect() as conn:
            columns = set(conn.execute(text("SELECT * FROM prediction_feedback LIMIT 1")).keys())
        assert not columns & set(COPIES)
        migrate.upgrade(url_0014)  # and up again: backfilled again
        assert all(ours == theirs for ours, theirs in _copies(engine).values())
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_a_label_whose_prediction_is_gone_keeps_null_copies_and_is_read_by_no_window(
    postgres_url: str,
) -> None:
    """PostgreSQL has no foreign key from the labels to the log: a label left without its log row before
    0015 (it cannot happen through record_feedback) keeps NULL copies, and no window reads it, as no join
    found it."""
    with postgres_schema(postgres_url, migrated=False) as url:
        migrate.upgrade(url, "0014_window_sketches")
        engine = create_engine(url)
        try:
            groups = _fill(engine)
            _labels_0014(engine, groups)
            gone = groups["late"][0].prediction_id  # labelled (i % 3 == 0)
            with engine.begin() as conn:
                conn.execute(text("DELETE FROM prediction_log WHERE prediction_id = :p"), {"p": gone})
            migrate.upgrade(url)
            with engine.connect() as conn:
                row = conn.execute(
                    text(
                        "SELECT log_id, probability, model_version, status FROM prediction_feedback "
                        "WHERE prediction_id = :p"
                    ),
                    {"p": gone},
                ).one()
            assert tuple(row) == (None, None, None, None)
            _assert_readers_equal_the_join(engine)
        finally:
            engine.dispose()


# ---------------------------------------------------------------- labels of an old replica, after 0015


def test_the_retention_pass_fills_labels_an_old_version_stored_without_the_copies(database_url: str) -> None:
    """During a rolling upgrade across 0015 an old replica stores labels as 0014 did (no copies): no
    window would count them. The retention job's pass fills them from the log, once."""
    db = open_database(database_url)
    try:
        groups = _fill(db.engine)
        old = _labels_0014(db.engine, {"late": groups["late"], "other": groups["other"]})
        with db.session() as s:  # and one label stored by this version
            assert record_feedback(
                session=s, model_name="credit", labels=[(groups["early"][0].prediction_id, 1.0)]
            ) == (1, [])
        assert sum(ours[0] is None for ours, _ in _copies(db.engine).values()) == len(old)
        runtime = Runtime(settings=Settings(database_url=SecretStr(database_url)), db=db)
        purge_expired(runtime)
        copies = _copies(db.engine)
        assert len(copies) == len(old) + 1
        assert all(ours == theirs for ours, theirs in copies.values())
        with db.session() as s:
            assert fill_feedback_copies(session=s) == 0  # nothing left to fill
        if db.engine.dialect.name == "postgresql":
            summary = summarize_window(engine=db.engine, model_name="credit", spec=WindowSpec(), now=NOW)
            assert summary is not None
            p, _ = labelled_arrays(engine=db.engine, summary=summary)
            assert p.size == 1 + sum(1 for i in range(len(groups["late"])) if i % 3 == 0)
    finally:
        db.dispose()

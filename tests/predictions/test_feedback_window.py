"""A window's labels read from ``prediction_feedback`` alone (migrations 0015, 0018; ``predictions.windows``).

Each label carries copies of its prediction (its batch's id as ``log_id``, its ``position`` there, its output
as ``probability``, ``model_version``, ``status``), filled by ``record_feedback`` and, for the labels of an
older log, by the migrations. The readers that use them (``labelled_arrays``, ``labelled_chunks``, the labels
of ``read_chunks``) must return exactly the labels joined to the window's predictions by prediction id
(computed here from the batches and the feedback, without the copies: the reference), on a log with labels of
every kind a window must leave out or keep, on requests of several predictions (a last-N window ending inside
one); and a database with labels from before 0015 must keep them and read them the same way after the upgrade.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine, create_engine, text

from core import migrate
from core.database import Database, aware, open_database
from predictions import typed
from predictions.batch import floats, ids_from, pack_floats
from predictions.service import labelled_rows as training_rows
from predictions.service import record_feedback, write_log_rows
from predictions.windows import (
    WindowSpec,
    labelled_arrays,
    labelled_chunks,
    read_chunks,
    summarize_window,
)
from tests.predictions.logdata import ids, make_rows, old_rows, write_requests, write_rows_as_they_were
from tests.support import database_at, postgres_schema

NOW = datetime.now(UTC).replace(microsecond=0)
HOUR = timedelta(hours=1)
PER_REQUEST = 4
COPIES = ("log_id", "position", "probability", "model_version", "status")
ALL_COPIES = frozenset(COPIES)


# ------------------------------------------------------------ the reference: labels joined by prediction id


def _predictions(engine: Engine, model: str) -> list[tuple[str, int, int, float, int, str, datetime]]:
    """Every prediction of ``model`` in log order: (id, batch id, position, output, version, status, time)."""
    with engine.connect() as conn:
        found = conn.execute(
            text(
                "SELECT id, first_id, size, outputs, model_version, status, logged_at "
                "FROM prediction_batches WHERE model_name = :m ORDER BY id"
            ),
            {"m": model},
        ).all()
    out = []
    for key, first, size, outputs, version, status, when in found:
        values = floats(bytes(outputs), size).tolist()
        at = _utc(when)
        for position, pid in enumerate(ids_from(str(first), size)):
            out.append((pid, int(key), position, values[position], int(version), str(status), at))
    return out


def _utc(value: Any) -> datetime:
    when = datetime.fromisoformat(value) if isinstance(value, str) else value
    return aware(when) or when


def _labels_by_id(engine: Engine, model: str) -> dict[str, float]:
    with engine.connect() as conn:
        found = conn.execute(
            text("SELECT prediction_id, label FROM prediction_feedback WHERE model_name = :m"), {"m": model}
        )
        return {str(p): np.nan if y is None else float(y) for p, y in found}


def _reference(
    engine: Engine, spec: WindowSpec, now: datetime, model: str = "credit"
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The window's predictions (ids), their outputs and labels (NaN: none), in log order."""
    since = now - timedelta(minutes=spec.minutes) if spec.minutes is not None else None
    window = [
        (pid, output)
        for pid, _, _, output, version, status, at in _predictions(engine, model)
        if status == "ok"
        and (spec.version is None or version == spec.version)
        and (since is None or at >= since)
    ]
    if spec.rows is not None:
        window = window[-spec.rows :]
    labels = _labels_by_id(engine, model)
    return (
        [pid for pid, _ in window],
        np.array([output for _, output in window], dtype=np.float64),
        np.array([labels.get(pid, np.nan) for pid, _ in window], dtype=np.float64),
    )


def _copies(engine: Engine) -> dict[str, tuple[tuple[Any, ...], tuple[Any, ...]]]:
    """prediction_id -> (the label's copies, its prediction's values), for every label."""
    where = {
        pid: (log_id, position, None if np.isnan(output) else output, version, status)
        for model in ("credit", "other")
        for pid, log_id, position, output, version, status, _ in _predictions(engine, model)
    }
    with engine.connect() as conn:
        found = conn.execute(text(f"SELECT prediction_id, {', '.join(COPIES)} FROM prediction_feedback"))
        return {str(pid): (tuple(rest), where.get(str(pid), (None,) * 5)) for pid, *rest in found}


# ---------------------------------------------------------------- the log


def _fill(engine: Engine) -> dict[str, list[str]]:
    """Requests of 'credit' over three hours (two versions, some output violations, outputs without a
    value, requests of five hours ago written last: a replayed spool) and of 'other' between them, in id
    order; the prediction ids of each group."""

    def group(n: int, start: int, when: datetime, **kw: Any) -> list[str]:
        nan = kw.pop("nan", False)
        rows = make_rows(n, start=start, when=when, per_request=PER_REQUEST, **kw)
        if nan:
            rows = [b._replace(outputs=pack_floats([None] * b.size)) for b in rows]
        write_log_rows(engine=engine, rows=rows, idempotent=False)
        return ids(rows)

    return {
        "early": group(40, 0, NOW - 3 * HOUR, model="credit"),
        "other": group(20, 100, NOW - 2 * HOUR, model="other"),
        "v2": group(30, 200, NOW - 2 * HOUR, model="credit", version=2),
        "violations": group(10, 300, NOW - HOUR, model="credit", status="output_violation"),
        "nan": group(5, 400, NOW - HOUR, model="credit", nan=True),
        "late": group(40, 500, NOW, model="credit"),
        "replayed": group(6, 600, NOW - 5 * HOUR, model="credit"),
    }


def _fill_old(engine: Engine) -> dict[str, list[str]]:
    """The same log as a revision before 0018 wrote it (one row per prediction, requests of four rows)."""
    groups: dict[str, list[dict[str, Any]]] = {
        "early": old_rows(40, start=0, when=NOW - 3 * HOUR, model="credit", per_request=PER_REQUEST),
        "other": old_rows(20, start=100, when=NOW - 2 * HOUR, model="other", per_request=PER_REQUEST),
        "v2": old_rows(
            30, start=200, when=NOW - 2 * HOUR, model="credit", per_request=PER_REQUEST, model_version=2
        ),
        "violations": old_rows(
            10, start=300, when=NOW - HOUR, model="credit", per_request=PER_REQUEST, status="output_violation"
        ),
        "nan": old_rows(
            5, start=400, when=NOW - HOUR, model="credit", per_request=PER_REQUEST, probability=None
        ),
        "late": old_rows(40, start=500, when=NOW, model="credit", per_request=PER_REQUEST),
        "replayed": old_rows(6, start=600, when=NOW - 5 * HOUR, model="credit", per_request=PER_REQUEST),
    }
    for rows in groups.values():
        write_rows_as_they_were(engine, rows)
    return {name: [r["prediction_id"] for r in rows] for name, rows in groups.items()}


def _label(db: Database, groups: dict[str, list[str]]) -> None:
    """Labels on some predictions of every group (on PostgreSQL a NaN label among them), one sent twice."""
    nan_label = db.engine.dialect.name == "postgresql"  # SQLite stores NaN as NULL: the label is NOT NULL
    for name, pids in groups.items():
        model = "other" if name == "other" else "credit"
        labels = [(pid, float(i % 2)) for i, pid in enumerate(pids) if i % 3 == 0]
        if name == "late" and nan_label:
            labels.append((pids[1], float("nan")))
        with db.session() as s:
            assert record_feedback(session=s, model_name=model, labels=labels) == (len(labels), [])
    resent = groups["late"][3]  # labelled 1.0 above
    with db.session() as s:
        assert record_feedback(session=s, model_name="credit", labels=[(resent, 0.0)]) == (1, [])


# (read at NOW + 1 hour)
SPECS = [
    WindowSpec(),  # every prediction: every group of credit, 'other' and 'violations' between them left out
    WindowSpec(rows=60),  # the newest 60 ok: 'replayed', 'late', 'nan', the last 9 of 'v2' (inside a request)
    WindowSpec(rows=60, version=1),  # 'v2' left out: the last 9 of 'early', 'other' inside the id range
    WindowSpec(version=2),
    WindowSpec(minutes=150),  # 'violations' (not ok), 'nan', 'late'; 'replayed' inside the ids, too old
    WindowSpec(rows=30, minutes=200, version=1),
]


def _assert_readers_equal_the_reference(engine: Engine, *, expect_labels: bool = True) -> int:
    """Every reader against the reference, on every window of SPECS; the number of labels seen."""
    seen = 0
    skips = 0
    for spec in SPECS:
        now = NOW + HOUR
        summary = summarize_window(engine=engine, model_name="credit", spec=spec, now=now)
        assert summary is not None, spec
        pids, outputs, labels = _reference(engine, spec, now)
        assert summary.rows == len(pids), spec
        skips += summary.skip > 0
        known = _labels_by_id(engine, "credit")
        held = np.array([pid in known for pid in pids], dtype=bool)
        jp, jy = outputs[held], labels[held]
        p, y = labelled_arrays(engine=engine, summary=summary)
        assert np.array_equal(p, jp, equal_nan=True) and np.array_equal(y, jy, equal_nan=True), spec
        chunks = list(labelled_chunks(engine=engine, summary=summary, chunk_rows=7))
        sp = np.concatenate([c[0] for c in chunks]) if chunks else np.array([])
        sy = np.concatenate([c[1] for c in chunks]) if chunks else np.array([])
        assert np.array_equal(sp, jp, equal_nan=True) and np.array_equal(sy, jy, equal_nan=True), spec
        for chunk_rows in (9, 1_000):  # labels scattered onto the predictions of each range
            read = list(
                read_chunks(
                    engine=engine,
                    summary=summary,
                    numeric=[],
                    categorical=[],
                    chunk_rows=chunk_rows,
                    labels=True,
                )
            )
            assert np.array_equal(np.concatenate([c.predictions for c in read]), outputs, equal_nan=True), (
                spec
            )
            assert np.array_equal(np.concatenate([c.labels for c in read]), labels, equal_nan=True), spec
        seen += jp.size
        if expect_labels:
            assert jp.size > 0, spec
    assert skips > 0  # a window ended inside a request
    return seen


def test_the_readers_equal_the_labels_joined_by_prediction_id(database_url: str) -> None:
    db = open_database(database_url)
    try:
        groups = _fill(db.engine)
        _label(db, groups)
        summary = summarize_window(
            engine=db.engine, model_name="credit", spec=WindowSpec(rows=60), now=NOW + HOUR
        )
        assert summary is not None and summary.skip == 1  # 'v2' ends in a request of 2, then one of 4
        seen = _assert_readers_equal_the_reference(db.engine)
        assert seen > 40
        # the resent label replaced the first; a NaN label and NaN outputs are kept as NaN
        summary = summarize_window(engine=db.engine, model_name="credit", spec=WindowSpec(), now=NOW + HOUR)
        assert summary is not None
        p, y = labelled_arrays(engine=db.engine, summary=summary)
        assert _labels_by_id(db.engine, "credit")[groups["late"][3]] == 0.0
        nan_labels = 1 if db.engine.dialect.name == "postgresql" else 0
        assert np.isnan(y).sum() == nan_labels and np.isnan(p).sum() == 2  # 'nan' 0 and 3 are labelled
        # each label carries its prediction: batch, position, output, version, status
        copies = _copies(db.engine)
        assert len(copies) > 50
        for pid, (ours, theirs) in copies.items():
            assert ours == theirs, pid
    finally:
        db.dispose()


@pytest.mark.parametrize(
    "layout", [None, typed.make_layout(["x"], ["c"], [["a"]])], ids=["documents", "typed"]
)
def test_training_reads_the_inputs_of_the_labelled_predictions_inside_requests(
    database_url: str, layout: typed.Layout | None
) -> None:
    """``predictions.service.labelled_rows`` (the retraining's rows): the newest labelled answered
    predictions, oldest first, each with its own inputs, however many predictions its request held."""
    db = open_database(database_url)
    try:
        docs: list[dict[str, Any]] = [{"x": float(i), "c": "a" if i % 2 else "b"} for i in range(30)]
        docs[7] = {"x": None}  # absent and null values
        start = NOW - timedelta(minutes=30)
        batches = write_requests(
            db.engine, docs, layout=layout, per_request=6, start=start, spacing=timedelta(minutes=1)
        )
        write_requests(
            db.engine, docs[:6], status="output_violation", start=NOW, per_request=6
        )  # not answered
        pids = [pid for b in batches for pid in b.ids()]
        labelled = [2, 7, 8, 13, 20, 27, 29]
        with db.session() as s:
            labels = [(pids[i], float(i % 2)) for i in labelled]
            assert record_feedback(session=s, model_name="credit", labels=labels) == (7, [])
            got = training_rows(session=s, model_name="credit", numeric=["x"], categorical=["c"], limit=5)
            since = training_rows(
                session=s,
                model_name="credit",
                numeric=["x"],
                categorical=["c"],
                limit=100,
                since=start + timedelta(minutes=3),  # the requests of predictions 18..29
            )
        newest = labelled[-5:]  # 8, 13, 20, 27, 29
        assert got.columns["x"].tolist() == [float(i) for i in newest]
        assert got.columns["c"].tolist() == ["a" if i % 2 else "b" for i in newest]
        assert got.labels.tolist() == [float(i % 2) for i in newest]
        assert got.logged_at == [start + timedelta(minutes=i // 6) for i in newest]
        assert got.window_rows == 30 - 6  # every answered prediction from the first to the last time
        assert since.columns["x"].tolist() == [20.0, 27.0, 29.0]
        with db.session() as s:
            every = training_rows(session=s, model_name="credit", numeric=["x"], categorical=["c"], limit=100)
        at = labelled.index(7)
        assert np.isnan(every.columns["x"][at]) and every.columns["c"][at] is None
        assert every.columns["x"].tolist()[:at] == [2.0] and every.labels.tolist() == [
            i % 2 for i in labelled
        ]
    finally:
        db.dispose()


# ---------------------------------------------------------------- labels written before migration 0015


@pytest.fixture(params=["sqlite", "postgresql"])
def url_0014(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database at revision 0014 (labels without the copies of their log rows), on each backend."""
    with database_at(request, tmp_path, "0014_window_sketches") as url:
        yield url


def _labels_0014(engine: Engine, groups: dict[str, list[str]]) -> dict[str, float]:
    """Labels as revision 0014 stored them (what record_feedback wrote then), on some rows of each group."""
    labels = {pid: float(i % 2) for pids in groups.values() for i, pid in enumerate(pids) if i % 3 == 0}
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
            str(pid): (str(model), float(label), _utc(received))
            for pid, model, label, received in conn.execute(
                text("SELECT prediction_id, model_name, label, received_at FROM prediction_feedback")
            )
        }


def test_the_upgrade_backfills_every_label_and_the_downgrade_keeps_them(url_0014: str) -> None:
    engine = create_engine(url_0014)
    try:
        groups = _fill_old(engine)
        labels = _labels_0014(engine, groups)
        before = _feedback(engine)
        assert len(before) == len(labels) > 40
        migrate.upgrade(url_0014)
        assert _feedback(engine) == before  # every label, its model and time, untouched
        copies = _copies(engine)
        assert len(copies) == len(labels)
        for pid, (ours, theirs) in copies.items():
            assert ours == theirs and ours[0] is not None, pid  # batch, position, output, version, status
        assert {position for (_, position, *_), _ in copies.values()} == set(range(PER_REQUEST))
        assert _assert_readers_equal_the_reference(engine) > 40  # the new readers find the old labels
        # a label sent after the upgrade carries the copies too
        new = make_rows(3, start=900, when=NOW, model="credit", per_request=3)
        write_log_rows(engine=engine, rows=new, idempotent=False)
        db = open_database(url_0014, upgrade=False)
        with db.session() as s:
            assert record_feedback(session=s, model_name="credit", labels=[(ids(new)[1], 1.0)]) == (1, [])
        db.dispose()
        ours, theirs = _copies(engine)[ids(new)[1]]
        assert ours == theirs and ours[1] == 1
        after = _feedback(engine)
        migrate.downgrade(url_0014, "0014_window_sketches")
        assert _feedback(engine) == after
        with engine.connect() as conn:
            columns = set(conn.execute(text("SELECT * FROM prediction_feedback LIMIT 1")).keys())
        assert not columns & ALL_COPIES
        migrate.upgrade(url_0014)  # and up again: backfilled again
        copies = _copies(engine)
        assert len(copies) == len(after) and all(ours == theirs for ours, theirs in copies.values())
        assert _assert_readers_equal_the_reference(engine) > 40
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_a_label_whose_prediction_is_gone_keeps_null_copies_and_is_read_by_no_window(
    postgres_url: str,
) -> None:
    """PostgreSQL has no foreign key from the labels to the log: a label left without its log row before
    0015 (it cannot happen through record_feedback) keeps NULL copies through 0015 and 0018, and no window
    reads it."""
    with postgres_schema(postgres_url, migrated=False) as url:
        migrate.upgrade(url, "0014_window_sketches")
        engine = create_engine(url)
        try:
            groups = _fill_old(engine)
            _labels_0014(engine, groups)
            gone = groups["late"][12]  # labelled (i % 3 == 0), the first of a request of four
            with engine.begin() as conn:
                conn.execute(text("DELETE FROM prediction_log WHERE prediction_id = :p"), {"p": gone})
            migrate.upgrade(url)
            with engine.connect() as conn:
                row = conn.execute(
                    text(f"SELECT {', '.join(COPIES)} FROM prediction_feedback WHERE prediction_id = :p"),
                    {"p": gone},
                ).one()
            assert tuple(row) == (None,) * len(COPIES)
            assert gone not in {pid for pid, *_ in _predictions(engine, "credit")}
            _assert_readers_equal_the_reference(engine)
        finally:
            engine.dispose()

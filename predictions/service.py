"""Prediction log operations: build rows, write batches, join feedback, read windows, purge."""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import time
import weakref
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Literal, NamedTuple

import numpy as np
import orjson
import psycopg
from sqlalchemy import Connection, Engine, and_, delete, func, select, tuple_, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from core.database import Database, utcnow
from predictions import partitions, typed
from predictions.models import LOG_COLUMNS, PredictionFeedback, PredictionLog, PredictionStatus


class LogRow(NamedTuple):
    """A prediction as the writer and the spool carry it (field order = ``LOG_COLUMNS``)."""

    prediction_id: str
    request_id: str
    model_name: str
    model_version: int
    logged_at: datetime
    inputs: dict[str, Any]
    probability: float | None
    flags: list[Any] | None
    latency_ms: float
    status: str
    protocol: str
    # the typed copy of ``inputs`` (predictions/typed.py): layout id, numbers as hex, texts outside the
    # layout's categories as JSON;
    # None for a row without one (the spool's lines from before the typed columns decode with these defaults)
    layout: int | None = None
    numbers: str | None = None
    categories: str | None = None
    # the whole answer when it is more than one number (a multi-class vector); None otherwise (and for the
    # spool's lines from before it)
    outputs: list[float | None] | None = None


assert LogRow._fields == LOG_COLUMNS


_random = random.Random(int.from_bytes(os.urandom(32), "big"))
# a forked child (a worker of a server started with fork) must not repeat its parent's ids
os.register_at_fork(after_in_child=lambda: _random.seed(int.from_bytes(os.urandom(32), "big")))


def new_prediction_id() -> str:
    """A time-ordered UUID (v7 layout: 48-bit milliseconds, then random bits)."""
    return new_prediction_ids(1)[0]


_HEX3 = tuple(f"{i:03x}" for i in range(4096))  # the last three hex digits of an id, by value
_RUN = 2048  # ids per shared prefix, at most (the counter's start stays random in at least 2048 values)


def new_prediction_ids(n: int) -> list[str]:
    """``n`` time-ordered UUIDs (v7 layout; RFC 9562 section 6.2, method 2: a random start, then counted).

    Up to 2048 ids share their first 29 hex digits: the millisecond, the version, 12 random bits, the
    variant and 50 random bits; the last 12 bits count up from a random start (so the ids of one call of
    up to 2048 are in order). Each id is one string concatenation: no UUID objects, no numpy (whose larger
    operations release the GIL, and on the serving path the event loop then waits to take it back from the
    writer thread), and no syscall (the random bits come from a seeded generator).
    """
    out: list[str] = []
    while len(out) < n:
        k = min(n - len(out), _RUN)
        ms = (time.time_ns() // 1_000_000) & 0xFFFF_FFFF_FFFF
        # the id without its last 12 bits: ms (48), version 7 (4), rand_a (12), variant 0b10 (2), rand_b (50)
        high = ms << 68 | 0x7 << 64 | _random.getrandbits(12) << 52 | 0b10 << 50 | _random.getrandbits(50)
        h = f"{high:029x}"
        head = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
        low = _random.randrange(4096 - k + 1)
        out += [head + tail for tail in _HEX3[low : low + k]]
    return out


# One statement per batch: the whole batch travels as one JSON array (serialized by orjson in C) and the
# database unpacks it, so the writer thread holds the GIL for well under a microsecond per row.
_COLS = ", ".join(LOG_COLUMNS)
# ``ON CONFLICT DO NOTHING`` (SQLite 3.35+) skips only a prediction id the table has; ``INSERT OR IGNORE``
# would also skip a row breaking NOT NULL, silently: such a row must be refused (the writer sets it aside)
SQLITE_INSERT = (
    f"INSERT INTO prediction_log ({_COLS}) "
    # timestamps as SQLAlchemy stores them on SQLite ("YYYY-MM-DD HH:MM:SS.ffffff", compared as text):
    # RFC 3339 from orjson drops ".000000" when the microseconds are zero, so pad and cut to 26 chars
    "SELECT value->>0, value->>1, value->>2, value->>3, "
    "substr(replace(replace(value->>4, 'T', ' '), '+00:00', '') || '.000000', 1, 26), "
    "value->5, value->>6, nullif(value->7, 'null'), value->>8, value->>9, value->>10, NULL, NULL, NULL, "
    "nullif(value->14, 'null') "
    "FROM json_each(?) WHERE true ORDER BY key ON CONFLICT DO NOTHING"
)
PG_INSERT = (
    f"INSERT INTO prediction_log ({_COLS}) "
    "SELECT e->>0, e->>1, e->>2, (e->>3)::int, (e->>4)::timestamptz, e->5, (e->>6)::float8, "
    "nullif(e->7, 'null'::jsonb), (e->>8)::float8, e->>9, e->>10, "
    "(e->>11)::int8, decode(e->>12, 'hex'), e->>13, nullif(e->14, 'null'::jsonb) "
    "FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS t(e, n) ORDER BY n"
)
# the conflict target is the unique key (prediction_id, logged_at): on the partitioned PostgreSQL log a unique
# key must hold the partition key; a replayed row carries its original logged_at, so it still conflicts
PG_INSERT_IDEMPOTENT = PG_INSERT + " ON CONFLICT (prediction_id, logged_at) DO NOTHING"
PG_LAYOUT = (
    "INSERT INTO prediction_log_layouts (id, numeric, categorical, categories) VALUES (%s, %s, %s, %s) "
    "ON CONFLICT DO NOTHING"
)
_recorded: weakref.WeakKeyDictionary[Engine, set[int]] = weakref.WeakKeyDictionary()


def _new_layouts(engine: Engine, rows: Sequence[LogRow]) -> list[tuple[int, str, str, str]]:
    """The layouts of ``rows`` not yet recorded in ``engine``'s database by this process: (id, names...)."""
    done = _recorded.setdefault(engine, set())
    fresh = {r.layout for r in rows if r.layout is not None} - done
    return [(i, *typed.KNOWN[i].as_json()) for i in fresh if i in typed.KNOWN]


def batch_json(rows: Sequence[LogRow]) -> str:
    """A batch as one JSON array of row arrays (UTC timestamps in RFC 3339)."""
    return orjson.dumps([tuple(r) for r in rows]).decode()


def write_log_rows(*, engine: Engine, rows: Sequence[LogRow], idempotent: bool) -> int:
    """Insert ``rows`` in one transaction and one statement, in order (PostgreSQL: one round trip).

    ``idempotent`` (replays from the spool) skips prediction ids the table already has; SQLite always does
    (``ON CONFLICT DO NOTHING``), PostgreSQL with ``ON CONFLICT DO NOTHING`` (a fresh batch skips that check).
    A failure raises the driver's error: :func:`classify_write_error` tells a refused value from an outage.
    """
    if not rows:
        return 0
    payload = batch_json(rows)  # a row orjson cannot encode raises here (classified as its data's fault)
    raw = engine.raw_connection()
    try:
        if engine.dialect.name == "postgresql":
            # one statement is its own transaction: in autocommit mode it is one round trip instead of three
            # (BEGIN, INSERT, COMMIT): a durable request waits for them, the writer needs the GIL after each
            pg: Any = raw.driver_connection
            pg.autocommit = True
            try:
                layouts = _new_layouts(engine, rows)
                for values in layouts:  # once per layout and process, before the rows using it
                    pg.execute(PG_LAYOUT, values)
                _recorded[engine].update(values[0] for values in layouts)
                pg.execute(PG_INSERT_IDEMPOTENT if idempotent else PG_INSERT, (payload,))
            finally:
                pg.autocommit = False  # the pooled connection goes back as the pool handed it out
        else:
            cur = raw.cursor()
            cur.execute(SQLITE_INSERT, (payload,))
            cur.close()
            raw.commit()
    except BaseException as exc:
        with contextlib.suppress(Exception):  # the connection may be gone
            raw.rollback()
        if classify_write_error(exc) == "unavailable":
            raw.invalidate()  # never hand a broken connection out again (a refused value leaves it sound)
        raise
    finally:
        raw.close()
    return len(rows)


WriteFailure = Literal["data", "duplicate", "unavailable"]


def classify_write_error(exc: BaseException) -> WriteFailure:
    """Why :func:`write_log_rows` failed: a value of a row (``data``: the same rows fail again, whatever the
    database's health), a prediction id the table already has (``duplicate``: write again idempotently), or
    the database itself (``unavailable``: down, unreachable, locked, its schema missing; try again later).

    ``data`` is PostgreSQL's class 22 (data exception: NUL in a JSON string, a number out of range, invalid
    text) and class 23 (integrity) other than the unique key, SQLite's ``DataError``/``IntegrityError``, and
    a row orjson cannot encode. A ``ProgrammingError`` (class 42: a missing table or column) is the schema's
    fault, not a row's: every row would fail alike until a migration fixes it, so it counts as unavailable.
    """
    if isinstance(exc, sa_exc.DBAPIError) and exc.orig is not None:  # SQLAlchemy's wrapper of a driver error
        exc = exc.orig
    if isinstance(exc, psycopg.errors.UniqueViolation):
        return "duplicate"
    if isinstance(
        exc, psycopg.DataError | psycopg.IntegrityError | sqlite3.DataError | sqlite3.IntegrityError
    ):
        return "data"
    if isinstance(exc, orjson.JSONEncodeError):
        return "data"
    return "unavailable"


class LoggedPrediction(NamedTuple):
    """What a label copies of its prediction's log row (the feedback's columns of the same names)."""

    logged_at: datetime
    log_id: int
    probability: float | None
    model_version: int
    status: str


def logged_predictions(
    *, session: Session, model_name: str, ids: Iterable[str]
) -> dict[str, LoggedPrediction]:
    """The log row of each of ``ids`` that is a logged prediction of ``model_name`` (what a label copies)."""
    log = PredictionLog
    wanted = list(dict.fromkeys(ids))
    found: dict[str, LoggedPrediction] = {}
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        stmt = select(
            log.prediction_id, log.logged_at, log.id, log.probability, log.model_version, log.status
        ).where(log.model_name == model_name, log.prediction_id.in_(chunk))
        found.update(
            (pid, LoggedPrediction(when, log_id, probability, version, status))
            for pid, when, log_id, probability, version, status in session.execute(stmt)
        )
    return found


# what a resent label replaces (the copies of the log row too: the same values, unless a label of 0015's
# backfill found no log row then)
_FEEDBACK_UPDATED = ("label", "received_at", "log_id", "probability", "model_version", "status")


def record_feedback(
    *, session: Session, model_name: str, labels: Sequence[tuple[str, float]]
) -> tuple[int, list[str]]:
    """Store ground-truth labels of logged predictions; returns (stored, unknown prediction ids)."""
    known = logged_predictions(session=session, model_name=model_name, ids=(pid for pid, _ in labels))
    latest = {pid: label for pid, label in labels if pid in known}  # a repeated id: the last label wins
    unknown = list(dict.fromkeys(pid for pid, _ in labels if pid not in known))
    if latest:
        now = utcnow()
        values = [
            {
                "prediction_id": pid,
                "model_name": model_name,
                "label": label,
                "received_at": now,
                # the feedback lives in the partition of its prediction (logged_at) and carries what a
                # window reads of it, so a window's labels are read without the log
                **known[pid]._asdict(),
            }
            for pid, label in latest.items()
        ]
        dialect = session.get_bind().dialect.name
        ins = postgresql.insert if dialect == "postgresql" else sqlite.insert
        stmt = ins(PredictionFeedback)
        stmt = stmt.on_conflict_do_update(
            index_elements=["prediction_id", "logged_at"],
            set_={name: stmt.excluded[name] for name in _FEEDBACK_UPDATED},
        )
        session.execute(stmt, values)
    return len(latest), unknown


def fill_feedback_copies(*, session: Session) -> int:
    """Copy the log row into labels stored without it (by a process older than migration 0015); how many."""
    # A process of the version before 0015 (an old replica during a rolling upgrade) stores labels without
    # the copies that window reads filter on, so no window would count them; the retention job fills them.
    # Per model through the (model_name, log_id) index (NULLs are indexed): a few index pages when none is
    # missing. A label whose prediction the log no longer has stays NULL (read by no window, as no join
    # found it). PostgreSQL: on both keys, one partition each; SQLite: on prediction_id, its log's key.
    fb, log = PredictionFeedback, PredictionLog
    on = [log.prediction_id == fb.prediction_id]
    if session.get_bind().dialect.name == "postgresql":
        on.append(log.logged_at == fb.logged_at)
    filled = 0
    for model in logged_models(session=session):
        stmt = (
            update(fb)
            .where(fb.model_name == model, fb.log_id.is_(None), *on)
            .values(
                log_id=log.id, probability=log.probability, model_version=log.model_version, status=log.status
            )
        )
        filled += int(session.execute(stmt).rowcount or 0)  # type: ignore[attr-defined]
    return filled


def recent_predictions(
    *, session: Session, model_name: str, limit: int | None = None, since: datetime | None = None
) -> list[PredictionLog]:
    """The newest logged predictions of one model (last ``limit`` rows and/or since ``since``)."""
    stmt = select(PredictionLog).where(PredictionLog.model_name == model_name)
    if since is not None:
        stmt = stmt.where(PredictionLog.logged_at >= since)
    stmt = stmt.order_by(PredictionLog.id.desc())
    if limit is not None:
        stmt = stmt.limit(limit)
    return list(session.scalars(stmt))


def count_predictions(*, session: Session, model_name: str | None = None) -> int:
    """Number of logged predictions (of one model, or all)."""
    stmt = select(func.count()).select_from(PredictionLog)
    if model_name is not None:
        stmt = stmt.where(PredictionLog.model_name == model_name)
    return int(session.scalar(stmt) or 0)


def logged_models(*, session: Session) -> list[str]:
    """Model names present in the log, by skipping along the ``(model_name, id)`` index (one seek each)."""
    names: list[str] = []
    last: str | None = None
    while True:
        stmt = select(PredictionLog.model_name).order_by(PredictionLog.model_name).limit(1)
        if last is not None:
            stmt = stmt.where(PredictionLog.model_name > last)
        last = session.scalar(stmt)
        if last is None:
            return names
        names.append(last)


def purge_predictions(*, session: Session, before: datetime, chunk: int = 5000) -> int:
    """Delete predictions logged before ``before`` (their feedback goes with them), at most ``chunk`` rows.

    Per model through the ``(model_name, logged_at)`` index: the log needs no index of its own for this.
    """
    ids: list[int] = []
    for model in logged_models(session=session):
        ids += session.scalars(
            select(PredictionLog.id)
            .where(PredictionLog.model_name == model, PredictionLog.logged_at < before)
            .order_by(PredictionLog.logged_at)
            .limit(chunk - len(ids))
        )
        if len(ids) >= chunk:
            break
    if not ids:
        return 0
    fb, log = PredictionFeedback, PredictionLog
    rows = (log.id.in_(ids), log.logged_at < before)  # the time bound prunes PostgreSQL's partitions
    if session.get_bind().dialect.name == "postgresql":  # no foreign key there: the labels go explicitly
        pairs = select(log.prediction_id, log.logged_at).where(*rows)
        session.execute(delete(fb).where(tuple_(fb.prediction_id, fb.logged_at).in_(pairs)))
    else:
        session.execute(delete(fb).where(fb.prediction_id.in_(select(log.prediction_id).where(*rows))))
    session.execute(delete(log).where(*rows))
    return len(ids)


def purge_all_before(*, db: Database, before: datetime) -> int:
    """Delete every prediction logged before ``before``, one chunk per transaction; the number deleted."""
    total = 0
    while True:
        with db.session() as session:
            n = purge_predictions(session=session, before=before)
        total += n
        if n == 0:
            return total


def count_before(*, db: Database, before: datetime) -> dict[str, int]:
    """Per model, how many predictions were logged before ``before`` (what a purge would delete)."""
    with db.session() as session:
        counts = {
            model: int(
                session.scalar(
                    select(func.count())
                    .select_from(PredictionLog)
                    .where(PredictionLog.model_name == model, PredictionLog.logged_at < before)
                )
                or 0
            )
            for model in logged_models(session=session)
        }
    return {model: n for model, n in counts.items() if n}


def feedback_join(
    dialect: str, *, since: datetime | None = None, until: datetime | None = None
) -> ColumnElement[bool]:
    """The join condition of a label to its prediction (``since``/``until``: the predictions' time span)."""
    # PostgreSQL: on both keys (a lookup by both goes to one feedback partition; a partition-wise join is
    # possible) and within the predictions' time span: the planner does not carry the log's time bounds
    # over the equality, so without the span a hash join scans the labels of every day (measured, the
    # blocks reader on a 100k-row window of a 10M-row log with 100k labels a day: 0.23 s with the span,
    # 0.44 s without). It changes nothing joined: a label's logged_at is its prediction's, inside the span.
    # SQLite: on prediction_id (one table, its key).
    fb, log = PredictionFeedback, PredictionLog
    on = fb.prediction_id == log.prediction_id
    if dialect != "postgresql":
        return on
    terms = [on, fb.logged_at == log.logged_at]
    if since is not None:
        terms.append(fb.logged_at >= since)
    if until is not None:
        terms.append(fb.logged_at <= until)
    return and_(*terms)


class Retention(NamedTuple):
    """What one retention pass did."""

    created: list[str]  # log partitions created ahead (each with its feedback twin)
    dropped: list[tuple[str, int]]  # log partitions dropped with their feedback; predictions each held
    deleted: int  # predictions deleted row by row (chunked DELETE)

    @property
    def removed(self) -> int:
        return self.deleted + sum(n for _, n in self.dropped)


def _partitioned(db: Database) -> bool:
    if db.engine.dialect.name != "postgresql":
        return False
    with db.engine.connect() as conn:
        return partitions.is_partitioned(conn)


def prepare_partitions(*, db: Database, now: datetime, days: int) -> list[str]:
    """Create the log's missing partitions from ``now`` to ``partitions.AHEAD`` later (PostgreSQL); names."""
    created: list[str] = []
    if not _partitioned(db):
        return created

    def step(conn: Connection) -> str | None:
        todo = partitions.missing(partitions.existing(conn), now, now + partitions.AHEAD, days)
        if not todo:
            return None
        partitions.create(conn, todo[0])
        return todo[0].name()

    while (name := partitions.change(db.engine, step)) is not None:
        created.append(name)
    return created


def expired_partitions(*, db: Database, before: datetime) -> list[str]:
    """The log's partitions that hold only times before ``before`` (PostgreSQL): what a purge drops."""
    if not _partitioned(db):
        return []
    with db.engine.connect() as conn:
        return [span.name() for span in partitions.existing(conn) if span.end <= before]


def drop_partitions_before(*, db: Database, before: datetime) -> list[tuple[str, int]]:
    """Drop each log partition wholly before ``before`` and its feedback's (PostgreSQL); names, rows held."""
    dropped: list[tuple[str, int]] = []
    if not _partitioned(db):
        return dropped

    def step(conn: Connection) -> tuple[str, int] | None:
        expired = [span for span in partitions.existing(conn) if span.end <= before]
        if not expired:
            return None
        return expired[0].name(), partitions.drop(conn, expired[0])

    while (done := partitions.change(db.engine, step)) is not None:
        dropped.append(done)
    return dropped


def retention_cutoff(*, db: Database, before: datetime) -> datetime:
    """The start of the log partition holding ``before`` (PostgreSQL), else ``before`` itself."""
    if not _partitioned(db):
        return before
    with db.engine.connect() as conn:
        holding = [span.start for span in partitions.existing(conn) if span.holds(before)]
    return holding[0] if holding else before


def apply_retention(
    *,
    db: Database,
    before: datetime,
    partition_days: int,
    now: datetime | None = None,
    whole_partitions: bool = False,
) -> Retention:
    """Create partitions ahead, drop the expired ones, then delete the older rows left in chunks."""
    # whole_partitions (the periodic job): the cutoff moves back to the start of the partition holding
    # `before`, so that partition stays whole until all of it has expired and only rows of the default
    # partition are deleted one by one; without it (`predictions purge`) every row before `before` goes
    created = prepare_partitions(db=db, now=now or utcnow(), days=partition_days)
    if whole_partitions:
        before = retention_cutoff(db=db, before=before)
    dropped = drop_partitions_before(db=db, before=before)
    return Retention(created=created, dropped=dropped, deleted=purge_all_before(db=db, before=before))


class LabelledRows(NamedTuple):
    """Labelled predictions of one model, oldest first: input columns, labels and logging times.

    ``columns``: each numeric feature as floats (JSON null, an absent key or a value of another type is
    NaN), each categorical feature as objects (its text; None when absent or not a string), as the window
    readers of the monitors read them. ``window_rows``: every answered prediction logged between the first
    and the last of these rows, labelled or not.
    """

    columns: dict[str, np.ndarray]
    labels: np.ndarray
    logged_at: list[datetime]
    window_rows: int


def labelled_rows(
    *,
    session: Session,
    model_name: str,
    numeric: Sequence[str],
    categorical: Sequence[str],
    limit: int,
    since: datetime | None = None,
) -> LabelledRows:
    """The newest ``limit`` answered predictions of ``model_name`` that have a ground-truth label."""
    stmt = (
        select(PredictionLog.inputs, PredictionLog.logged_at, PredictionFeedback.label)
        .join(PredictionFeedback, feedback_join(session.get_bind().dialect.name, since=since))
        .where(PredictionLog.model_name == model_name, PredictionLog.status == PredictionStatus.OK.value)
    )
    if since is not None:
        stmt = stmt.where(PredictionLog.logged_at >= since)
    found = list(reversed(session.execute(stmt.order_by(PredictionLog.id.desc()).limit(limit)).all()))
    n = len(found)
    columns: dict[str, np.ndarray] = {}
    for name in numeric:
        col = np.full(n, np.nan)
        for i, (inputs, _, _) in enumerate(found):
            value = inputs.get(name) if isinstance(inputs, dict) else None
            if isinstance(value, int | float) and not isinstance(value, bool):
                col[i] = float(value)
        columns[name] = col
    for name in categorical:
        cats = np.empty(n, dtype=object)
        for i, (inputs, _, _) in enumerate(found):
            value = inputs.get(name) if isinstance(inputs, dict) else None
            cats[i] = value if isinstance(value, str) else None
        columns[name] = cats
    labels = np.array([float(label) for _, _, label in found], dtype=np.float64)
    times = [when for _, when, _ in found]
    window_rows = 0
    if found:
        window_rows = int(
            session.scalar(
                select(func.count())
                .select_from(PredictionLog)
                .where(
                    PredictionLog.model_name == model_name,
                    PredictionLog.status == PredictionStatus.OK.value,
                    PredictionLog.logged_at >= times[0],
                    PredictionLog.logged_at <= times[-1],
                )
            )
            or 0
        )
    return LabelledRows(columns=columns, labels=labels, logged_at=times, window_rows=window_rows)

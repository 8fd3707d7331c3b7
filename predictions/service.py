"""Prediction log operations: ids, batch writes, feedback, retention, the labelled rows of training."""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import time
import weakref
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple

import numpy as np
import orjson
import psycopg
from sqlalchemy import Connection, Engine, delete, func, select
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from core.database import Database, aware, utcnow
from predictions import partitions, typed
from predictions.batch import LogBatch, as_bytes, floats, ids_of, split_id
from predictions.models import (
    LOG_COLUMNS,
    PredictionBatch,
    PredictionFeedback,
    PredictionLogLayout,
    PredictionStatus,
)

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


# One statement per write: the whole write travels as one JSON array (serialized by orjson in C) and the
# database unpacks it, so the writer thread holds the GIL for well under a microsecond per batch row.
_COLS = ", ".join(LOG_COLUMNS)
PG_INSERT = (
    f"INSERT INTO prediction_batches ({_COLS}) "
    "SELECT e->>0, (e->>1)::int, (e->>2)::int, e->>3, e->>4, (e->>5)::int, (e->>6)::timestamptz, "
    "(e->>7)::float8, e->>8, e->>9, e->>10, (e->>11)::int8, decode(e->>12, 'hex'), e->>13, "
    "decode(e->>14, 'hex'), decode(e->>15, 'hex'), nullif(e->16, 'null'::jsonb), "
    "nullif(e->17, 'null'::jsonb) "
    "FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS t(e, n) ORDER BY n"
)
# the conflict target is the unique key (id_prefix, id_low, logged_at): on the partitioned PostgreSQL log a
# unique key must hold the partition key; a replayed batch carries its original logged_at, so it conflicts
# A replay also skips a batch whose first prediction a stored batch already holds (an older version's spool
# line of one prediction whose request migration 0018 stored as one batch): the unique key serves the probe
PG_INSERT_IDEMPOTENT = (
    PG_INSERT.replace(
        " ORDER BY n",
        " WHERE NOT EXISTS (SELECT 1 FROM prediction_batches b WHERE b.id_prefix = e->>0 "
        "AND b.logged_at = (e->>6)::timestamptz AND b.id_low <= (e->>1)::int "
        "AND (e->>1)::int < b.id_low + b.size) ORDER BY n",
    )
    + " ON CONFLICT (id_prefix, id_low, logged_at) DO NOTHING"
)
# ``ON CONFLICT DO NOTHING`` skips only a batch the table has; ``INSERT OR IGNORE`` would also skip a row
# breaking NOT NULL, silently: such a row must be refused (the writer sets it aside)
SQLITE_INSERT = (
    f"INSERT INTO prediction_batches ({_COLS}) VALUES ({', '.join('?' * len(LOG_COLUMNS))}) "
    "ON CONFLICT DO NOTHING"
)
SQLITE_INSERT_IDEMPOTENT = (
    f"INSERT INTO prediction_batches ({_COLS}) "
    f"SELECT {', '.join(f'?{i}' for i in range(1, len(LOG_COLUMNS) + 1))} "
    "WHERE NOT EXISTS (SELECT 1 FROM prediction_batches b WHERE b.id_prefix = ?1 AND b.logged_at = ?7 "
    "AND b.id_low <= ?2 AND ?2 < b.id_low + b.size) ON CONFLICT DO NOTHING"
)
PG_LAYOUT = (
    "INSERT INTO prediction_log_layouts (id, numeric, categorical, categories) VALUES (%s, %s, %s, %s) "
    "ON CONFLICT DO NOTHING"
)
SQLITE_LAYOUT = (
    "INSERT INTO prediction_log_layouts (id, numeric, categorical, categories) VALUES (?, ?, ?, ?) "
    "ON CONFLICT DO NOTHING"
)
_recorded: weakref.WeakKeyDictionary[Engine, set[int]] = weakref.WeakKeyDictionary()


def _new_layouts(engine: Engine, batches: Sequence[LogBatch]) -> list[tuple[int, str, str, str]]:
    """The layouts of ``batches`` this process has not yet recorded in ``engine``'s database: (id, names)."""
    done = _recorded.setdefault(engine, set())
    fresh = {b.layout for b in batches if b.layout is not None} - done
    return [(i, *typed.KNOWN[i].as_json()) for i in fresh if i in typed.KNOWN]


def batch_json(batches: Sequence[LogBatch]) -> str:
    """A write as one JSON array of batch arrays (UTC timestamps in RFC 3339)."""
    return orjson.dumps([tuple(b) for b in batches]).decode()


def _sqlite_time(moment: datetime) -> str:
    """A timestamp as SQLAlchemy stores it on SQLite (naive UTC text, compared as text)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def _sqlite_values(batch: LogBatch) -> tuple[Any, ...]:
    dumps = orjson.dumps
    return (
        *batch[:6],
        _sqlite_time(batch.logged_at),
        *batch[7:12],
        as_bytes(batch.numbers),
        batch.categories,
        as_bytes(batch.outputs),
        as_bytes(batch.vectors),
        None if batch.flags is None else dumps(batch.flags).decode(),
        None if batch.inputs is None else dumps(batch.inputs).decode(),
    )


def write_log_rows(*, engine: Engine, rows: Sequence[LogBatch], idempotent: bool) -> int:
    """Insert the batch rows ``rows`` in one transaction and one statement, in order (PostgreSQL: one round
    trip); returns the predictions they hold.

    ``idempotent`` (replays from the spool) skips batches the table already has, and batches whose first
    prediction a stored batch holds; a fresh write skips only a batch of the same key on SQLite (``ON
    CONFLICT DO NOTHING``) and none on PostgreSQL (no check: a duplicate key is an error the writer turns into
    an idempotent write).
    A failure raises the driver's error: :func:`classify_write_error` tells a refused value from an outage.
    """
    if not rows:
        return 0
    raw = engine.raw_connection()
    try:
        layouts = _new_layouts(engine, rows)
        if engine.dialect.name == "postgresql":
            payload = batch_json(
                rows
            )  # a row orjson cannot encode raises here (classified as its data's fault)
            # one statement is its own transaction: in autocommit mode it is one round trip instead of three
            # (BEGIN, INSERT, COMMIT): a durable request waits for them, the writer needs the GIL after each
            pg: Any = raw.driver_connection
            pg.autocommit = True
            try:
                for values in layouts:  # once per layout and process, before the rows using it
                    pg.execute(PG_LAYOUT, values)
                pg.execute(PG_INSERT_IDEMPOTENT if idempotent else PG_INSERT, (payload,))
            finally:
                pg.autocommit = False  # the pooled connection goes back as the pool handed it out
        else:
            values_list = [_sqlite_values(b) for b in rows]
            cur = raw.cursor()
            if layouts:
                cur.executemany(SQLITE_LAYOUT, layouts)
            cur.executemany(SQLITE_INSERT_IDEMPOTENT if idempotent else SQLITE_INSERT, values_list)
            cur.close()
            raw.commit()
        _recorded[engine].update(values[0] for values in layouts)
    except BaseException as exc:
        with contextlib.suppress(Exception):  # the connection may be gone
            raw.rollback()
        if classify_write_error(exc) == "unavailable":
            raw.invalidate()  # never hand a broken connection out again (a refused value leaves it sound)
        raise
    finally:
        raw.close()
    return sum(b.size for b in rows)


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
    """What a label copies of its prediction (the feedback's columns of the same names)."""

    logged_at: datetime
    log_id: int
    position: int
    probability: float | None
    model_version: int
    status: str


def logged_predictions(
    *, session: Session, model_name: str, ids: Iterable[str]
) -> dict[str, LoggedPrediction]:
    """Each of ``ids`` that is a logged prediction of ``model_name``, found by its batch's id prefix."""
    batch = PredictionBatch
    tails: dict[str, list[tuple[str, int]]] = {}
    for pid in dict.fromkeys(ids):
        parts = split_id(pid)
        if parts is not None:
            tails.setdefault(parts[0], []).append((pid, parts[1]))
    prefixes = list(tails)
    found: dict[str, LoggedPrediction] = {}
    for start in range(0, len(prefixes), 500):
        chunk = prefixes[start : start + 500]
        stmt = select(
            batch.id_prefix,
            batch.id_low,
            batch.size,
            batch.logged_at,
            batch.id,
            batch.outputs,
            batch.model_version,
            batch.status,
        ).where(batch.model_name == model_name, batch.id_prefix.in_(chunk))
        for prefix, low, size, when, log_id, outputs, version, status in session.execute(stmt):
            values = floats(as_bytes(outputs), size)
            for pid, tail in tails[prefix]:
                if low <= tail < low + size:
                    value = float(values[tail - low])
                    found[pid] = LoggedPrediction(
                        aware(when) or when,
                        log_id,
                        tail - low,
                        None if np.isnan(value) else value,
                        version,
                        status,
                    )
    return found


# what a resent label replaces (with the copies of its prediction: the same values)
_FEEDBACK_UPDATED = ("label", "received_at", "log_id", "position", "probability", "model_version", "status")


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
                # window reads of it, so a window's labels are read without the batches
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


def load_layouts(conn: Connection | Session) -> dict[int, typed.Layout]:
    """Every layout recorded in the database, by id."""
    table = PredictionLogLayout
    found = conn.execute(select(table.id, table.numeric, table.categorical, table.categories)).all()
    return {int(i): typed.layout_from_json(int(i), num, cat, known) for i, num, cat, known in found}


class Logged(NamedTuple):
    """One logged prediction, decoded (what :func:`recent_predictions` returns)."""

    prediction_id: str
    request_id: str
    model_name: str
    model_version: int
    logged_at: datetime
    inputs: dict[str, Any]
    probability: float | None
    outputs: list[float] | None
    flags: list[str] | None
    latency_ms: float
    status: str
    protocol: str
    source: str


def decode_documents(batch: PredictionBatch, layout: typed.Layout | None) -> list[dict[str, Any]]:
    """A batch's inputs as one document per prediction: its stored documents, else its typed copy (numbers
    as floats, NaN as None; categories as texts; absent values left out)."""
    if batch.inputs is not None:
        return [dict(doc) if isinstance(doc, dict) else {} for doc in batch.inputs]
    if layout is None or batch.numbers is None:
        return [{} for _ in range(batch.size)]
    matrix = typed.numbers_matrix(bytes(batch.numbers), batch.size, layout.width)
    texts = iter((batch.categories or "").split("\n")) if batch.categories else iter(())
    first = len(layout.numeric)
    out: list[dict[str, Any]] = []
    for row in matrix.tolist():
        doc: dict[str, Any] = {}
        for name, value in zip(layout.numeric, row, strict=False):
            doc[name] = None if value != value else value
        codes = row[first:]
        other = orjson.loads(next(texts))["v"] if typed.OTHER in codes else None
        for j, (name, code) in enumerate(zip(layout.categorical, codes, strict=True)):
            if code == typed.OTHER:
                doc[name] = other[j] if other is not None else None
            elif code != typed.MISSING:
                doc[name] = layout.categories[j][int(code)]
        out.append(doc)
    return out


def recent_predictions(
    *, session: Session, model_name: str, limit: int | None = None, since: datetime | None = None
) -> list[Logged]:
    """The newest logged predictions of one model, newest first (last ``limit`` and/or since ``since``)."""
    stmt = select(PredictionBatch).where(PredictionBatch.model_name == model_name)
    if since is not None:
        stmt = stmt.where(PredictionBatch.logged_at >= since)
    stmt = stmt.order_by(PredictionBatch.id.desc())
    layouts = load_layouts(session)
    out: list[Logged] = []
    for batch in session.scalars(stmt.execution_options(yield_per=100)):
        docs = decode_documents(batch, layouts.get(batch.layout) if batch.layout is not None else None)
        values = floats(as_bytes(batch.outputs), batch.size)
        vectors = as_bytes(batch.vectors)
        width = len(vectors) // (8 * batch.size) if vectors else 0
        matrix = floats(vectors, batch.size * width).reshape(batch.size, width) if width else None
        ids = ids_of(batch.id_prefix, batch.id_low, batch.size)
        for i in reversed(range(batch.size)):
            value = float(values[i])
            out.append(
                Logged(
                    prediction_id=ids[i],
                    request_id=batch.request_id,
                    model_name=batch.model_name,
                    model_version=batch.model_version,
                    logged_at=batch.logged_at,
                    inputs=docs[i],
                    probability=None if np.isnan(value) else value,
                    outputs=None if matrix is None else matrix[i].tolist(),
                    flags=None if batch.flags is None else batch.flags[i],
                    latency_ms=batch.latency_ms,
                    status=batch.status,
                    protocol=batch.protocol,
                    source=batch.source,
                )
            )
            if limit is not None and len(out) >= limit:
                return out
    return out


def count_predictions(*, session: Session, model_name: str | None = None) -> int:
    """Number of logged predictions (of one model, or all)."""
    stmt = select(func.coalesce(func.sum(PredictionBatch.size), 0))
    if model_name is not None:
        stmt = stmt.where(PredictionBatch.model_name == model_name)
    return int(session.scalar(stmt) or 0)


def logged_models(*, session: Session) -> list[str]:
    """Model names present in the log, by skipping along the ``(model_name, id)`` index (one seek each)."""
    names: list[str] = []
    last: str | None = None
    while True:
        stmt = select(PredictionBatch.model_name).order_by(PredictionBatch.model_name).limit(1)
        if last is not None:
            stmt = stmt.where(PredictionBatch.model_name > last)
        last = session.scalar(stmt)
        if last is None:
            return names
        names.append(last)


def purge_predictions(*, session: Session, before: datetime, chunk: int = 5000) -> int:
    """Delete the batches logged before ``before`` (their feedback goes with them), at most ``chunk`` batches
    a call; returns the predictions deleted.

    Per model through the ``(model_name, logged_at)`` index: the log needs no index of its own for this.
    """
    batch, fb = PredictionBatch, PredictionFeedback
    deleted = 0
    taken = 0
    for model in logged_models(session=session):
        found = session.execute(
            select(batch.id, batch.size)
            .where(batch.model_name == model, batch.logged_at < before)
            .order_by(batch.logged_at)
            .limit(chunk - taken)
        ).all()
        if not found:
            continue
        ids = [i for i, _ in found]
        # the time bound prunes PostgreSQL's partitions (a label's logged_at is its prediction's)
        session.execute(delete(fb).where(fb.model_name == model, fb.log_id.in_(ids), fb.logged_at < before))
        session.execute(delete(batch).where(batch.id.in_(ids), batch.logged_at < before))
        deleted += sum(n for _, n in found)
        taken += len(found)
        if taken >= chunk:
            break
    return deleted


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
                    select(func.coalesce(func.sum(PredictionBatch.size), 0)).where(
                        PredictionBatch.model_name == model, PredictionBatch.logged_at < before
                    )
                )
                or 0
            )
            for model in logged_models(session=session)
        }
    return {model: n for model, n in counts.items() if n}


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
    fb, batch = PredictionFeedback, PredictionBatch
    stmt = select(fb.log_id, fb.position, fb.label, fb.logged_at).where(
        fb.model_name == model_name,
        fb.status == PredictionStatus.OK.value,
        fb.log_id.is_not(None),
        fb.position.is_not(None),
    )
    if since is not None:
        stmt = stmt.where(fb.logged_at >= since)
    stmt = stmt.order_by(fb.log_id.desc(), fb.position.desc()).limit(limit)
    found = list(reversed(session.execute(stmt).all()))
    layouts = load_layouts(session)
    docs: dict[int, list[dict[str, Any]]] = {}
    wanted = list(dict.fromkeys(int(log_id or 0) for log_id, *_ in found))
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        for row in session.scalars(select(batch).where(batch.model_name == model_name, batch.id.in_(chunk))):
            docs[row.id] = decode_documents(row, layouts.get(row.layout) if row.layout is not None else None)
    kept: list[tuple[dict[str, Any], float, datetime]] = []
    for log_id, pos, label, when in found:
        batch_docs = docs.get(int(log_id or 0), [])
        if pos is not None and pos < len(batch_docs):
            kept.append((batch_docs[pos], label, when))
    n = len(kept)
    columns: dict[str, np.ndarray] = {}
    for name in numeric:
        col = np.full(n, np.nan)
        for i, (inputs, _, _) in enumerate(kept):
            value = inputs.get(name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                col[i] = float(value)
        columns[name] = col
    for name in categorical:
        cats = np.empty(n, dtype=object)
        for i, (inputs, _, _) in enumerate(kept):
            value = inputs.get(name)
            cats[i] = value if isinstance(value, str) else None
        columns[name] = cats
    labels = np.array([float(label) for _, label, _ in kept], dtype=np.float64)
    times = [aware(when) or when for _, _, when in kept]
    window_rows = 0
    if kept:
        window_rows = int(
            session.scalar(
                select(func.coalesce(func.sum(batch.size), 0)).where(
                    batch.model_name == model_name,
                    batch.status == PredictionStatus.OK.value,
                    batch.logged_at >= times[0],
                    batch.logged_at <= times[-1],
                )
            )
            or 0
        )
    return LabelledRows(columns=columns, labels=labels, logged_at=times, window_rows=window_rows)

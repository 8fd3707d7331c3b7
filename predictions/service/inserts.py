"""The writer's insert: batch rows (and their new layouts) in one statement, and why one failed."""

from __future__ import annotations

import contextlib
import sqlite3
import weakref
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
import psycopg
from sqlalchemy import Connection, Engine
from sqlalchemy import exc as sa_exc

from predictions import typed
from predictions.batch import LogBatch, as_bytes, first_id
from predictions.models import LOG_TABLE_COLUMNS

# One statement per write: the whole write travels as one JSON array (serialized by orjson in C) and the
# database unpacks it, so the writer thread holds the GIL for well under a microsecond per batch row. A batch
# travels as LogBatch's fields (its ids as a prefix and a first tail); the table stores its first id whole,
# ``first_id``, made here from the first two (PostgreSQL: in the statement; SQLite: in _sqlite_values).
_COLS = ", ".join(LOG_TABLE_COLUMNS)
_PG_FIRST_ID = "(e->>0 || lpad(to_hex((e->>1)::int), 3, '0'))::uuid"
PG_INSERT = (
    f"INSERT INTO prediction_batches ({_COLS}) "
    f"SELECT {_PG_FIRST_ID}, (e->>2)::int, e->>3, e->>4, (e->>5)::int, (e->>6)::timestamptz, "
    "(e->>7)::float8, e->>8, e->>9, e->>10, (e->>11)::int8, decode(e->>12, 'hex'), e->>13, "
    "decode(e->>14, 'hex'), decode(e->>15, 'hex'), nullif(e->16, 'null'::jsonb), "
    "nullif(e->17, 'null'::jsonb) "
    "FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS t(e, n) ORDER BY n"
)
# The conflict target is the primary key (first_id, logged_at): on the partitioned PostgreSQL log a key must
# hold the partition key; a replayed batch carries its original logged_at, so it conflicts.
# A replay also skips a batch whose first prediction a stored batch already holds (an older version's spool
# line of one prediction whose request migration 0018 stored as one batch): a stored batch of the same prefix
# and time whose first id is at most the probed one and whose run reaches it. The primary key serves the
# probe: a range of first_id (the prefix's ``000`` up to the probed id) at one logged_at. ``OFFSET 0`` keeps
# the probe a subquery run per batch (an index probe of the one partition of its time): pulled up into an
# anti-join, the range's selectivity is unknown to the planner, which then hashes the whole log.
_PG_TAIL = "('x' || right(b.first_id::text, 3))::bit(12)::int"  # a stored first id's counted tail
PG_INSERT_IDEMPOTENT = (
    PG_INSERT.replace(
        " ORDER BY n",
        " WHERE NOT EXISTS (SELECT 1 FROM prediction_batches b "
        f"WHERE b.first_id BETWEEN (e->>0 || '000')::uuid AND {_PG_FIRST_ID} "
        f"AND b.logged_at = (e->>6)::timestamptz AND {_PG_TAIL} + b.size > (e->>1)::int OFFSET 0) ORDER BY n",
    )
    + " ON CONFLICT (first_id, logged_at) DO NOTHING"
)
# ``ON CONFLICT DO NOTHING`` skips only a batch the table has (the unique key SQLITE_FIRST_ID_KEY); ``INSERT
# OR IGNORE`` would also skip a row breaking NOT NULL, silently: such a row must be refused (the writer sets
# it aside)
SQLITE_INSERT = (
    f"INSERT INTO prediction_batches ({_COLS}) VALUES ({', '.join('?' * len(LOG_TABLE_COLUMNS))}) "
    "ON CONFLICT DO NOTHING"
)
# the stored first id's tail: its last three hex digits as a number (SQLite has no hex parsing)
_SQLITE_TAIL = " + ".join(
    f"(instr('0123456789abcdef', substr(b.first_id, {34 + k}, 1)) - 1) * {16 ** (2 - k)}" for k in range(3)
)
SQLITE_INSERT_IDEMPOTENT = (
    f"INSERT INTO prediction_batches ({_COLS}) "
    f"SELECT {', '.join(f'?{i}' for i in range(1, len(LOG_TABLE_COLUMNS) + 1))} "
    "WHERE NOT EXISTS (SELECT 1 FROM prediction_batches b "
    "WHERE b.first_id BETWEEN substr(?1, 1, 33) || '000' AND ?1 AND b.logged_at = ?6 "
    f"AND {_SQLITE_TAIL} + b.size > {_SQLITE_TAIL.replace('b.first_id', '?1')}) ON CONFLICT DO NOTHING"
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
    """A timestamp as SQLAlchemy stores it on SQLite (naive UTC text, compared as text; the year in four
    digits, which ``strftime("%Y")`` does not give before year 1000)."""
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "microseconds")


def _sqlite_values(batch: LogBatch) -> tuple[Any, ...]:
    dumps = orjson.dumps
    return (
        first_id(batch.id_prefix, batch.id_low),
        *batch[2:6],
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


def database_failure(exc: BaseException) -> WriteFailure | None:
    """Why the database failed a statement (:func:`classify_write_error`), or None when ``exc`` is not the
    database's at all (a bug: it must not pass for an outage, which would keep it retried for ever).
    SQLAlchemy's errors and the drivers' own count (the raw-cursor inserts raise the latter)."""
    if isinstance(exc, sa_exc.SQLAlchemyError | psycopg.Error | sqlite3.Error | orjson.JSONEncodeError):
        return classify_write_error(exc)
    return None


def insert_batches(*, connection: Connection, rows: Sequence[LogBatch]) -> None:
    """Insert batch rows inside the caller's transaction (the CloudEvents pairing's), skipping a batch the
    table already has; their layouts are written every time (a rolled-back transaction takes them along, so
    this path never trusts the process's record of written layouts).

    The insert runs under a savepoint: rows the database refuses (:func:`database_failure` ``data``) raise
    the driver's error with the caller's transaction still usable (rolled back to before the insert), so
    the caller can put them aside and go on."""
    if not rows:
        return
    layouts = [(i, *typed.KNOWN[i].as_json()) for i in {b.layout for b in rows if b.layout is not None}]
    raw: Any = connection.connection.dbapi_connection
    cur = raw.cursor()
    try:
        cur.execute("SAVEPOINT log_rows")
        try:
            if connection.dialect.name == "postgresql":
                for values in layouts:
                    cur.execute(PG_LAYOUT, values)
                cur.execute(PG_INSERT_IDEMPOTENT, (batch_json(rows),))
            else:
                if layouts:
                    cur.executemany(SQLITE_LAYOUT, layouts)
                cur.executemany(SQLITE_INSERT_IDEMPOTENT, [_sqlite_values(b) for b in rows])
        except BaseException as exc:
            if database_failure(exc) in ("data", "duplicate"):  # the connection is sound: undo the insert
                cur.execute("ROLLBACK TO SAVEPOINT log_rows")
            raise
        cur.execute("RELEASE SAVEPOINT log_rows")
    finally:
        cur.close()

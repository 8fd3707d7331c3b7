"""The prediction log as one row per request: ``prediction_batches`` replaces ``prediction_log``, in place.

A row of ``prediction_log`` held one prediction; a row of ``prediction_batches`` holds the predictions of one
request column by column (the format: ``predictions/models.py``, ``predictions/batch.py``,
``predictions/typed.py``). ``prediction_feedback`` gains ``position`` (the prediction's place in its batch,
beside ``log_id``, now the batch's id).

Upgrade:

1. Create ``prediction_batches`` (PostgreSQL: ``PARTITION BY RANGE (logged_at)`` with a DEFAULT partition and
   one partition per partition of the log, same bounds, ``prediction_batches_pYYYYMMDD``; primary key
   ``(id, logged_at)``, ids from the sequence ``prediction_batches_id_seq``. SQLite: a plain table, ``id`` the
   rowid) and add ``prediction_feedback.position``. On SQLite the feedback is rebuilt without its foreign key
   to ``prediction_log`` (whose rows go away: ON DELETE CASCADE would take the labels along).
2. Convert the log in chunks of ``DRIFTWARDEN_LOG_MIGRATION_CHUNK`` rows (50,000 by default; smaller
   makes shorter transactions), oldest id first, one transaction each: consecutive rows of one request
   (same request id, model, version, time, status, protocol, latency; ids of one prefix counting up; all
   typed in one layout or all not; all with an output vector of one width or all without, as a batch's
   ``vectors`` are all or none) become one batch row; the labels of those predictions point at it
   (``log_id``, ``position``); the rows are deleted. A line per chunk goes to stderr (``prediction log:
   200000 of 1000000 predictions converted (20%)``). The last chunks run under a lock that keeps writers of
   an older driftwarden out, and ``prediction_log`` (with its partitions) is dropped in the same
   transaction; a label whose prediction the log did not hold gets no ``log_id`` (as 0015 left such
   labels: no window reads them).
3. ``ANALYZE`` the new tables (PostgreSQL; the log's join columns are analyzed before the conversion too,
   which a log that grew since autovacuum last came by needs for the chunks' plans).

Resumable: each chunk commits on its own, so a conversion that dies (killed, the server restarted) has lost
nothing and duplicated nothing: running ``driftwarden db upgrade`` again creates only what is missing and
converts what is left. A request cut by a chunk boundary is two batch rows (the unique key
``(id_prefix, id_low, logged_at)`` allows that).

What the conversion keeps: every prediction's id, time, request, model, version, status, protocol, latency,
output (``probability`` -> ``outputs``), vector (``outputs`` JSON -> ``vectors``), flags and inputs: the typed
copy (``layout``/``numbers``/``categories``) where every row of the run has one, plus the documents only when
one of them has a key outside the layout; the documents of the other runs. The log's ``id`` is not kept (a
batch gets a new one; a label's ``log_id`` follows). A typed document without its text reads back as the
typed copy has it (``predictions/typed.py``): a number as a float, a missing number as null, a missing
category left out; the JSON text itself (``3`` or ``3.0``, null or absent) is not kept.

Downgrade: the reverse, chunked the same way: ``prediction_log`` as at 0017 (partitions mirroring those of
the batches), one row per prediction (its document from ``inputs``, else decoded from the typed copy: numbers
as floats, a missing one as null, a missing category left out), labels pointed back at the rows, ``position``
dropped, the SQLite feedback rebuilt with its foreign key (a label whose prediction is gone cannot be kept
under that key: it is dropped and counted on stderr; on PostgreSQL it stays, without a ``log_id``). The
restored log's keys and indexes are built at the end, over all its rows.

Stop the servers of the older version before upgrading a large log: rows they write while it runs are
converted too, but their requests wait on the final lock, and a label they receive for a prediction
already converted is refused as unknown.

Self-contained: imports no driftwarden module (the formats are restated here), so it keeps working when
the application changes.

Revision ID: 0018_log_batches
Revises: 0017_log_outputs
Create Date: 2026-12-02
"""

from __future__ import annotations

import gc
import os
import struct
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import orjson
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0018_log_batches"
down_revision = "0017_log_outputs"
branch_labels = None
depends_on = None

LOG = "prediction_log"
BATCHES = "prediction_batches"
FEEDBACK = "prediction_feedback"
CHUNK_ENV = "DRIFTWARDEN_LOG_MIGRATION_CHUNK"
CHUNK = 50_000  # log rows per transaction (the downgrade: predictions per transaction)
PREFIX = 33  # characters of a prediction id before its counted tail
FEEDBACK_INDEX = "ix_prediction_feedback_model_name_log_id"
FEEDBACK_INCLUDE = ["position", "logged_at", "status", "model_version", "probability", "label"]
OLD_FEEDBACK_INCLUDE = ["logged_at", "status", "model_version", "probability", "label"]  # 0015
OLD_LOG_INCLUDE = ["status", "logged_at", "model_version"]  # 0011
BATCH_INCLUDE = ["status", "logged_at", "model_version", "size"]
JSONType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
NAN = float("nan")
_HEX3 = tuple(f"{i:03x}" for i in range(4096))

# the columns as the conversion writes them (predictions/models.py at 0018; prediction_log at 0017)
BATCH_COLUMNS = (
    *("id", "model_name", "model_version", "logged_at", "source", "request_id", "protocol", "status"),
    *("latency_ms", "id_prefix", "id_low", "size", "layout", "numbers", "categories", "outputs", "vectors"),
    *("flags", "inputs"),
)
LOG_COLUMNS = (
    *("id", "prediction_id", "request_id", "model_name", "model_version", "logged_at", "inputs"),
    *("probability", "flags", "latency_ms", "status", "protocol", "layout", "numbers", "categories"),
    "outputs",
)


# ---------------------------------------------------------------------------------------------- plumbing


def _postgres() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def _raw() -> Any:
    """The driver's connection under the migration's (psycopg or sqlite3)."""
    return op.get_bind().connection.dbapi_connection


@contextmanager
def _transaction() -> Iterator[None]:
    """One explicit transaction on the migration's connection, which must be in autocommit mode (inside
    ``autocommit_block``): psycopg and pysqlite then pass BEGIN/COMMIT through, and the DDL of SQLite is
    transactional too. SQLite begins IMMEDIATE: the write lock is taken first, so no step fails halfway on a
    concurrent writer (it waits on the busy timeout)."""
    bind = op.get_bind()
    bind.exec_driver_sql("BEGIN" if _postgres() else "BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        with suppress(Exception):  # the connection may be gone; the server rolls back then
            bind.exec_driver_sql("ROLLBACK")
        raise
    bind.exec_driver_sql("COMMIT")


def _scalar(sql: str, *params: Any) -> Any:
    cur = _raw().cursor()
    try:
        cur.execute(sql, params)
        row = cur.fetchone()
        return None if row is None else row[0]
    finally:
        cur.close()


def _q(sql: str) -> str:
    """A statement with ``?`` placeholders in the driver's style."""
    return sql.replace("?", "%s") if _postgres() else sql


def _exists(table: str) -> bool:
    if _postgres():
        return bool(_scalar("SELECT to_regclass(%s) IS NOT NULL", table))
    return bool(_scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", table))


def _has_column(table: str, column: str) -> bool:
    if _postgres():
        found = _scalar(
            "SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = %s "
            "AND NOT attisdropped",
            table,
            column,
        )
        return bool(found)
    cur = _raw().cursor()
    try:
        return any(row[1] == column for row in cur.execute(f"PRAGMA table_info({table})"))
    finally:
        cur.close()


def _chunk() -> int:
    value = os.environ.get(CHUNK_ENV, "")
    return max(1, int(value)) if value.strip() else CHUNK


class _Progress:
    """A line on stderr per chunk (``driftwarden db upgrade`` shows stderr; alembic's INFO log is muted)."""

    def __init__(self, verb: str, done: int, total: int) -> None:
        self.verb, self.done, self.total, self.started = verb, done, total, time.monotonic()

    def add(self, n: int) -> None:
        self.done += n
        share = 100 * self.done // self.total if self.total else 100
        print(
            f"prediction log: {self.done} of {self.total} predictions {self.verb} ({share}%)",
            file=sys.stderr,
            flush=True,
        )

    def finish(self) -> None:
        print(
            f"prediction log: {self.done} predictions {self.verb} in {time.monotonic() - self.started:.1f} s",
            file=sys.stderr,
            flush=True,
        )


# ---------------------------------------------------------------------------------------------- partitions

_BOUNDS = """
SELECT c.relname, pg_get_expr(c.relpartbound, c.oid)
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass(%s)
ORDER BY c.relname
"""


def _mirror_partitions(source: str, target: str) -> None:
    """Give ``target`` a partition for each partition of ``source`` (same bounds, the name's suffix kept)
    and a DEFAULT partition."""
    cur = _raw().cursor()
    try:
        cur.execute(_BOUNDS, (source,))
        parts = cur.fetchall()
    finally:
        cur.close()
    made_default = False
    for name, bound in parts:
        suffix = name[len(source) + 1 :] if name.startswith(source + "_") else name
        if bound.strip().upper() == "DEFAULT":
            op.execute(f"CREATE TABLE {target}_default PARTITION OF {target} DEFAULT")
            made_default = True
        else:
            op.execute(f"CREATE TABLE {target}_{suffix} PARTITION OF {target} {bound}")
    if not made_default:
        op.execute(f"CREATE TABLE {target}_default PARTITION OF {target} DEFAULT")


# ---------------------------------------------------------------------------------------------- schema


def _batch_columns() -> list[sa.Column[Any]]:
    if _postgres():
        key = sa.Column(
            "id", sa.BigInteger(), server_default=sa.text(f"nextval('{BATCHES}_id_seq')"), nullable=False
        )
    else:
        key = sa.Column("id", BigId, nullable=False)
    return [
        key,
        sa.Column("model_name", sa.String(128), nullable=False),
        sa.Column("model_version", sa.Integer(), nullable=False),
        sa.Column("logged_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("protocol", sa.String(8), nullable=False),
        sa.Column("status", sa.String(24), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("id_prefix", sa.String(33), nullable=False),
        sa.Column("id_low", sa.Integer(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("layout", sa.BigInteger(), nullable=True),
        sa.Column("numbers", sa.LargeBinary(), nullable=True),
        sa.Column("categories", sa.Text(), nullable=True),
        sa.Column("outputs", sa.LargeBinary(), nullable=False),
        sa.Column("vectors", sa.LargeBinary(), nullable=True),
        sa.Column("flags", JSONType, nullable=True),
        sa.Column("inputs", JSONType, nullable=True),
    ]


def _create_batches() -> None:
    pg = _postgres()
    if pg:
        op.execute(f"CREATE SEQUENCE {BATCHES}_id_seq AS bigint")
    op.create_table(
        BATCHES,
        *_batch_columns(),
        sa.PrimaryKeyConstraint(*(["id", "logged_at"] if pg else ["id"]), name=f"pk_{BATCHES}"),
        sa.UniqueConstraint("id_prefix", "id_low", "logged_at", name="uq_prediction_batches_ids"),
        postgresql_partition_by="RANGE (logged_at)",  # SQLite: a plain table
    )
    op.create_index("ix_prediction_batches_model_name_logged_at", BATCHES, ["model_name", "logged_at"])
    op.create_index(
        "ix_prediction_batches_model_name_id", BATCHES, ["model_name", "id"], postgresql_include=BATCH_INCLUDE
    )
    if pg:
        op.execute(f"ALTER SEQUENCE {BATCHES}_id_seq OWNED BY {BATCHES}.id")
        _mirror_partitions(LOG, BATCHES)


def _log_columns() -> list[sa.Column[Any]]:
    if _postgres():
        key = sa.Column(
            "id",
            sa.BigInteger(),
            server_default=sa.text(f"nextval('{LOG}_id_seq'::regclass)"),
            nullable=False,
        )
    else:
        key = sa.Column("id", BigId, nullable=False)
    return [
        key,
        sa.Column("prediction_id", sa.String(36), nullable=False),
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("model_name", sa.String(128), nullable=False),
        sa.Column("model_version", sa.Integer(), nullable=False),
        sa.Column("logged_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("inputs", JSONType, nullable=False),
        sa.Column("probability", sa.Float(), nullable=True),
        sa.Column("flags", JSONType, nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("status", sa.String(24), nullable=False),
        sa.Column("protocol", sa.String(8), nullable=False),
        sa.Column("layout", sa.BigInteger(), nullable=True),
        sa.Column("numbers", sa.LargeBinary(), nullable=True),
        sa.Column("categories", sa.Text(), nullable=True),
        sa.Column("outputs", JSONType, nullable=True),
    ]


def _create_log() -> None:
    """``prediction_log`` as at 0017 (0002, 0009, 0010, 0011, 0017), without the keys and indexes that
    :func:`_index_log` adds once its rows are in (SQLite: with its keys, which a table cannot gain later)."""
    if _postgres():
        op.execute(f"CREATE SEQUENCE {LOG}_id_seq")
        op.create_table(LOG, *_log_columns(), postgresql_partition_by="RANGE (logged_at)")
        op.execute(f"ALTER SEQUENCE {LOG}_id_seq OWNED BY {LOG}.id")
        _mirror_partitions(BATCHES, LOG)
    else:
        op.create_table(
            LOG,
            *_log_columns(),
            sa.PrimaryKeyConstraint("id", name=f"pk_{LOG}"),
            sa.UniqueConstraint("prediction_id", name="uq_prediction_log_prediction_id"),
        )


def _index_log() -> None:
    """The restored log's keys and indexes, built once over its rows (faster than keeping them up to date
    row by row: measured 13.5 of the 29 s of a 1M-row downgrade on PostgreSQL)."""
    if _postgres():
        op.create_primary_key(f"pk_{LOG}", LOG, ["id", "logged_at"])
        op.create_unique_constraint("uq_prediction_log_prediction_id", LOG, ["prediction_id", "logged_at"])
    op.create_index("ix_prediction_log_model_name_logged_at", LOG, ["model_name", "logged_at"])
    op.create_index(
        "ix_prediction_log_model_name_id", LOG, ["model_name", "id"], postgresql_include=OLD_LOG_INCLUDE
    )


def _sqlite_feedback(*, position: bool) -> int:
    """Rebuild SQLite's feedback: with ``position`` and no foreign key (upgrade), or as at 0017: without
    ``position``, with the foreign key to ``prediction_log`` (downgrade; a label whose prediction is gone
    cannot be kept under that key). Returns the labels left out."""
    cols: list[sa.Column[Any]] = [
        sa.Column("prediction_id", sa.String(36), nullable=False),
        sa.Column("logged_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("model_name", sa.String(128), nullable=False),
        sa.Column("label", sa.Float(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("log_id", sa.BigInteger(), nullable=True),
        *([sa.Column("position", sa.Integer(), nullable=True)] if position else []),
        sa.Column("probability", sa.Float(), nullable=True),
        sa.Column("model_version", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(24), nullable=True),
    ]
    keys: list[Any] = [sa.PrimaryKeyConstraint("prediction_id", "logged_at", name=f"pk_{FEEDBACK}")]
    if not position:
        keys.append(
            sa.ForeignKeyConstraint(
                ["prediction_id"],
                [f"{LOG}.prediction_id"],
                name="fk_prediction_feedback_prediction_id_prediction_log",
                ondelete="CASCADE",
            )
        )
    new = f"{FEEDBACK}_0018"
    op.create_table(new, *cols, *keys)
    names = ", ".join(c.name for c in cols if c.name != "position")
    select = f"SELECT {names} FROM {FEEDBACK}"
    if not position:
        select += f" f WHERE EXISTS (SELECT 1 FROM {LOG} p WHERE p.prediction_id = f.prediction_id)"
    total = int(_scalar(f"SELECT count(*) FROM {FEEDBACK}"))
    op.execute(f"INSERT INTO {new} ({names}) {select}")
    kept = int(_scalar(f"SELECT count(*) FROM {new}"))
    op.execute(f"DROP TABLE {FEEDBACK}")  # with its indexes
    op.rename_table(new, FEEDBACK)
    op.create_index("ix_prediction_feedback_model_name_received_at", FEEDBACK, ["model_name", "received_at"])
    return total - kept


def _sqlite_feedback_has_key() -> bool:
    cur = _raw().cursor()
    try:
        return bool(cur.execute(f"PRAGMA foreign_key_list({FEEDBACK})").fetchall())
    finally:
        cur.close()


# ---------------------------------------------------------------------------------------------- conversion


class _Layouts:
    """The recorded layouts (``prediction_log_layouts``), as the conversion reads them.

    (A plain class: alembic loads this file outside ``sys.modules``, where a dataclass cannot be made.)"""

    def __init__(self) -> None:
        self.names: dict[int, frozenset[str]] = {}  # every feature name
        self.numeric: dict[int, list[str]] = {}
        self.categorical: dict[int, list[str]] = {}
        self.categories: dict[int, list[list[str]]] = {}  # each categorical's known texts, by code
        self.row_bytes: dict[int, int] = {}  # bytes of a prediction's typed copy

    @classmethod
    def load(cls) -> _Layouts:
        cur = _raw().cursor()
        try:
            cur.execute("SELECT id, numeric, categorical, categories FROM prediction_log_layouts")
            found = cur.fetchall()
        finally:
            cur.close()
        out = cls()
        for key, numeric, categorical, categories in found:
            key = int(key)
            num, cat, known = orjson.loads(numeric), orjson.loads(categorical), orjson.loads(categories)
            out.numeric[key], out.categorical[key], out.categories[key] = num, cat, known
            out.names[key] = frozenset(num) | frozenset(cat)
            out.row_bytes[key] = 8 * (len(num) + len(cat))
        return out


@contextmanager
def _bulk() -> Iterator[None]:
    """Without the cyclic garbage collector: a chunk allocates millions of small containers and holds them
    to its end, and each collection would walk them all (measured: a third of the downgrade's time)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _tune() -> None:
    """Per chunk transaction on PostgreSQL: sort and hash a chunk in memory (the default 4 MB spills)."""
    if _postgres():
        op.execute("SET LOCAL work_mem = '64MB'")


def _analyze(*tables: str) -> None:
    """Statistics of ``tables`` (PostgreSQL); a table may name the columns (``"t (a, b)"``). Without them (a
    log no ANALYZE has seen since it grew) each chunk's read of the log was planned as a sort of the whole
    log (1.4 s a chunk, not 0.2); the columns the chunks' statements join and filter on are enough (the whole
    log's: 2.4 s a million rows, as the documents are read)."""
    if _postgres():
        for table in tables:
            op.execute(f"ANALYZE {table}")


# ---------------------------------------------------------------------------------------------- upgrade

# the log's rows of one chunk, oldest first, with whether a label points at each
_PG_LOG_CHUNK = f"""
SELECT p.id, p.prediction_id, p.request_id, p.model_name, p.model_version, p.logged_at::text,
       p.inputs::text, p.probability, p.flags::text, p.latency_ms, p.status, p.protocol,
       p.layout, p.numbers, p.categories, p.outputs::text, f.prediction_id IS NOT NULL
FROM (SELECT * FROM {LOG} WHERE id > %s ORDER BY id LIMIT %s) p
LEFT JOIN {FEEDBACK} f ON f.prediction_id = p.prediction_id AND f.logged_at = p.logged_at
ORDER BY p.id
"""
# SQLite: times as stored (text), JSON as stored (text); the log's prediction_id is unique on its own
_SQLITE_LOG_CHUNK = f"""
SELECT p.id, p.prediction_id, p.request_id, p.model_name, p.model_version, p.logged_at,
       p.inputs, p.probability, p.flags, p.latency_ms, p.status, p.protocol,
       p.layout, p.numbers, p.categories, p.outputs,
       EXISTS (SELECT 1 FROM {FEEDBACK} f WHERE f.prediction_id = p.prediction_id)
FROM {LOG} p WHERE p.id > ? ORDER BY p.id LIMIT ?
"""
_PG_FEEDBACK_TO_BATCH = f"""
UPDATE {FEEDBACK} f SET log_id = v.log_id, position = v.position
FROM unnest(%s::text[], %s::text[], %s::bigint[], %s::int[]) AS v(prediction_id, logged_at, log_id, position)
WHERE f.prediction_id = v.prediction_id AND f.logged_at = v.logged_at::timestamptz
"""
_SQLITE_FEEDBACK_TO_BATCH = f"UPDATE {FEEDBACK} SET log_id = ?, position = ? WHERE prediction_id = ?"
_TAILS = {f"{i:03x}": i for i in range(4096)}  # a counted tail's value, by its (lowercase) text


def _is_null(text: str | None) -> bool:
    return text is None or text == "null"


def _as_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return NAN
    try:
        return float(value)
    except OverflowError:
        return NAN


class _Run:
    """Consecutive log rows that become one batch: ``rows[start:end]``, whether they are typed, their output
    vectors (None: no vector)."""

    __slots__ = ("start", "end", "typed", "vectors")

    def __init__(self, start: int, end: int, typed: bool, vectors: list[list[Any]] | None) -> None:
        self.start, self.end, self.typed, self.vectors = start, end, typed, vectors


def _runs(rows: Sequence[tuple[Any, ...]], layouts: _Layouts) -> list[_Run]:
    """Cut ``rows`` (a chunk, oldest first) into runs: the same request, model, version, time, status,
    protocol and latency; ids of one prefix whose tails count up by one; all typed in one layout (or all
    not); all with an output vector of one width (or all without: a batch's vectors are all or none)."""
    out: list[_Run] = []
    widths = layouts.row_bytes
    tails = _TAILS
    vectors: list[Any] = []
    start = 0
    head: tuple[Any, ...] = ()  # the run's first row
    prefix = None
    tail = -2
    kind: tuple[Any, ...] = ()  # the run's typed-ness and vector width
    for i, row in enumerate(rows):
        pid = row[1]
        low = tails.get(pid[PREFIX:]) if len(pid) == PREFIX + 3 else None
        if low is None:
            raise RuntimeError(
                f"prediction id {pid!r} (log row {row[0]}) is not of the form a batch stores (36 "
                "characters ending in three lowercase hex digits); the rows converted so far are committed, "
                "nothing else changed: fix or delete that row and run the upgrade again"
            )
        layout, numbers, answer = row[12], row[13], row[15]
        typed = None
        if layout is not None and numbers is not None:
            size = len(numbers)
            if size % 8 == 0 and size == widths.get(layout, size):
                typed = layout, size
        width = None
        vector = None
        if answer is not None and answer != "null":
            value = orjson.loads(answer)
            if type(value) is list and value:
                vector, width = value, len(value)
        vectors.append(vector)
        # one run: request, model, version, time, status, protocol, latency; prefix, tails; typed-ness; width
        if not (
            low == tail + 1
            and pid[:PREFIX] == prefix
            and (typed, width) == kind
            and row[2] == head[2]
            and row[3] == head[3]
            and row[4] == head[4]
            and row[5] == head[5]
            and row[10] == head[10]
            and row[11] == head[11]
            and row[9] == head[9]
        ):
            if i:
                out.append(_Run(start, i, kind[0] is not None, vectors[start:i] if kind[1] else None))
            start, head, prefix, kind = i, row, pid[:PREFIX], (typed, width)
        tail = low
    if rows:
        out.append(_Run(start, len(rows), kind[0] is not None, vectors[start:] if kind[1] else None))
    return out


def _batch(key: int, rows: Sequence[tuple[Any, ...]], run: _Run, layouts: _Layouts) -> tuple[Any, ...]:
    """One run of log rows as a batch row (``BATCH_COLUMNS``)."""
    first = rows[0]
    n = len(rows)
    outputs = struct.pack(f"<{n}d", *[NAN if r[7] is None else r[7] for r in rows])
    vectors = None
    if run.vectors is not None:
        flat: list[float] = []
        for vector in run.vectors:
            flat += [v if type(v) is float else _as_float(v) for v in vector]
        vectors = struct.pack(f"<{len(flat)}d", *flat)
    flags = None
    if any(not _is_null(r[8]) for r in rows):
        flags = "[" + ",".join("null" if _is_null(r[8]) else r[8] for r in rows) + "]"
    layout = numbers = categories = None
    keep_documents = True
    if run.typed:
        layout = first[12]
        numbers = b"".join([r[13] for r in rows])
        lines = [r[14] for r in rows if r[14] is not None]
        categories = "\n".join(lines) if lines else None
        names = layouts.names.get(layout)
        if names is not None:  # the documents go only where one has a key outside the layout
            keep_documents = False
            for r in rows:
                doc = orjson.loads(r[6])
                if type(doc) is not dict or not names.issuperset(doc):
                    keep_documents = True
                    break
    pid = first[1]
    return (
        key,
        first[3],  # model_name
        first[4],  # model_version
        first[5],  # logged_at
        "serve",
        first[2],  # request_id
        first[11],  # protocol
        first[10],  # status
        first[9],  # latency_ms
        pid[:PREFIX],
        _TAILS[pid[PREFIX:]],
        n,
        layout,
        numbers,
        categories,
        outputs,
        vectors,
        flags,
        "[" + ",".join([r[6] for r in rows]) + "]" if keep_documents else None,
    )


def _new_ids(table: str, n: int) -> list[int]:
    """``n`` fresh ids of ``table``, ascending (its sequence on PostgreSQL; past the highest on SQLite)."""
    if n == 0:
        return []
    if _postgres():
        cur = _raw().cursor()
        try:
            cur.execute("SELECT nextval(%s) FROM generate_series(1, %s)", (f"{table}_id_seq", n))
            return sorted(int(r[0]) for r in cur.fetchall())
        finally:
            cur.close()
    top = int(_scalar(f"SELECT coalesce(max(id), 0) FROM {table}"))
    return list(range(top + 1, top + 1 + n))


def _insert(table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Insert ``rows`` in order: COPY on PostgreSQL, one prepared INSERT on SQLite."""
    if not rows:
        return
    cur = _raw().cursor()
    try:
        if _postgres():
            with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            marks = ", ".join("?" * len(columns))
            cur.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows)
    finally:
        cur.close()


def _convert_chunk(after: int, limit: int, layouts: _Layouts) -> tuple[int, int]:
    """Convert the first ``limit`` log rows with an id past ``after`` (in the caller's transaction): insert
    their batches, point their labels at them, delete them. Returns (rows converted, the last row's id)."""
    pg = _postgres()
    cur = _raw().cursor()
    try:
        cur.execute(_PG_LOG_CHUNK if pg else _SQLITE_LOG_CHUNK, (after, limit))
        rows = cur.fetchall()
        if not rows:
            return 0, after
        runs = _runs(rows, layouts)
        ids = _new_ids(BATCHES, len(runs))
        batches = [
            _batch(key, rows[run.start : run.end], run, layouts) for key, run in zip(ids, runs, strict=True)
        ]
        _insert(BATCHES, BATCH_COLUMNS, batches)
        labelled: list[tuple[str, Any, int, int]] = []
        for key, run in zip(ids, runs, strict=True):
            for position in range(run.end - run.start):
                row = rows[run.start + position]
                if row[16]:
                    labelled.append((row[1], row[5], key, position))
        if labelled:
            if pg:
                cur.execute(_PG_FEEDBACK_TO_BATCH, [list(c) for c in zip(*labelled, strict=True)])
            else:
                cur.executemany(_SQLITE_FEEDBACK_TO_BATCH, [(k, p, pid) for pid, _, k, p in labelled])
        first, last = rows[0][0], rows[-1][0]
        cur.execute(_q(f"DELETE FROM {LOG} WHERE id >= ? AND id <= ?"), (first, last))
        return len(rows), last
    finally:
        cur.close()


def _check_ids() -> None:
    """Refuse (before converting anything) a log holding a prediction id that a batch cannot store."""
    if _postgres():  # ltrim, not a regular expression: 0.45 s a million rows, not 1.7-2
        bad = _scalar(
            f"SELECT count(*) FROM {LOG} WHERE length(prediction_id) <> 36 "
            "OR ltrim(right(prediction_id, 3), '0123456789abcdef') <> ''"
        )
    else:
        bad = _scalar(
            f"SELECT count(*) FROM {LOG} WHERE length(prediction_id) <> 36 "
            "OR substr(prediction_id, 34) NOT GLOB '[0-9a-f][0-9a-f][0-9a-f]'"
        )
    if bad:
        raise RuntimeError(
            f"cannot convert the prediction log: {bad} prediction ids are not of the form a batch stores "
            "(36 characters ending in three lowercase hex digits); nothing was converted"
        )


def _upgrade_feedback() -> None:
    """``position`` (and on SQLite no foreign key); the covering index is built at the end."""
    if _postgres():
        if not _has_column(FEEDBACK, "position"):
            op.add_column(FEEDBACK, sa.Column("position", sa.Integer(), nullable=True))
            # built again with ``position`` at the end; without it meanwhile, the label updates cost less
            op.execute(f"DROP INDEX IF EXISTS {FEEDBACK_INDEX}")
    elif _sqlite_feedback_has_key() or not _has_column(FEEDBACK, "position"):
        _sqlite_feedback(position=True)


def upgrade() -> None:
    context = op.get_context()
    if context.as_sql:
        raise RuntimeError("0018_log_batches converts rows: it cannot run in offline (--sql) mode")
    pg = _postgres()
    limit = _chunk()
    with context.autocommit_block():
        with _transaction():
            if _exists(LOG):
                _check_ids()
            if not _exists(BATCHES):
                _create_batches()
            _upgrade_feedback()
        if _exists(LOG):
            layouts = _Layouts.load()
            left = int(_scalar(f"SELECT count(*) FROM {LOG}"))
            done = int(_scalar(f"SELECT coalesce(sum(size), 0) FROM {BATCHES}"))
            progress = _Progress("converted", done, done + left)
            if left:
                _analyze(f"{LOG} (id, prediction_id, logged_at)", f"{FEEDBACK} (prediction_id, logged_at)")
            after = -1
            with _bulk():
                while True:
                    with _transaction():
                        _tune()
                        n, after = _convert_chunk(after, limit, layouts)
                    if n:
                        progress.add(n)
                    if n < limit:
                        break
                with _transaction():  # rows an older writer added meanwhile, then the table, under its lock
                    _tune()
                    if pg:
                        op.execute(f"LOCK TABLE {LOG} IN ACCESS EXCLUSIVE MODE")
                    while True:
                        n, after = _convert_chunk(after, limit, layouts)
                        if not n:
                            break
                        progress.total += n
                        progress.add(n)
                    op.execute(f"DROP TABLE {LOG}")  # with its partitions, indexes and id sequence
                    # a label whose prediction the log did not hold keeps no log id (none of a batch)
                    op.execute(
                        f"UPDATE {FEEDBACK} SET log_id = NULL WHERE position IS NULL AND log_id IS NOT NULL"
                    )
            if progress.total:
                progress.finish()
        with _transaction():
            if pg:
                op.execute(f"DROP INDEX IF EXISTS {FEEDBACK_INDEX}")  # an older one, if it was left
            op.create_index(
                FEEDBACK_INDEX,
                FEEDBACK,
                ["model_name", "log_id"],
                postgresql_include=FEEDBACK_INCLUDE,
                if_not_exists=not pg,
            )
        _analyze(BATCHES, FEEDBACK)


# ---------------------------------------------------------------------------------------------- downgrade

_PG_CUT = f"""
SELECT max(id) FROM (
    SELECT id, sum(size) OVER (ORDER BY id) AS upto FROM {BATCHES} WHERE id > %s ORDER BY id LIMIT %s
) t WHERE upto <= %s
"""
_SQLITE_CUT = f"""
SELECT max(id) FROM (
    SELECT id, sum(size) OVER (ORDER BY id) AS upto FROM {BATCHES} WHERE id > ? ORDER BY id LIMIT ?
) WHERE upto <= ?
"""
_PG_BATCH_CHUNK = f"""
SELECT id, id_prefix, id_low, size, request_id, model_name, model_version, logged_at::text, latency_ms,
       status, protocol, layout, numbers, categories, outputs, vectors, flags::text, inputs::text
FROM {BATCHES} WHERE id > %s AND id <= %s ORDER BY id
"""
_SQLITE_BATCH_CHUNK = f"""
SELECT id, id_prefix, id_low, size, request_id, model_name, model_version, logged_at, latency_ms,
       status, protocol, layout, numbers, categories, outputs, vectors, flags, inputs
FROM {BATCHES} WHERE id > ? AND id <= ? ORDER BY id
"""
_PG_LABELS_OF = f"""
SELECT prediction_id, logged_at::text, log_id, position FROM {FEEDBACK}
WHERE model_name = ANY(%s) AND log_id > %s AND log_id <= %s AND position IS NOT NULL
"""
_SQLITE_LABELS_OF = f"""
SELECT prediction_id, logged_at, log_id, position FROM {FEEDBACK}
WHERE model_name IN (SELECT value FROM json_each(?)) AND log_id > ? AND log_id <= ? AND position IS NOT NULL
"""
# a converted label's position is NULL: a later chunk cannot take its log_id (a row id now) for a batch's
_PG_FEEDBACK_TO_ROW = f"""
UPDATE {FEEDBACK} f SET log_id = v.log_id, position = NULL
FROM unnest(%s::text[], %s::text[], %s::bigint[]) AS v(prediction_id, logged_at, log_id)
WHERE f.prediction_id = v.prediction_id AND f.logged_at = v.logged_at::timestamptz
"""
_SQLITE_FEEDBACK_TO_ROW = (
    f"UPDATE {FEEDBACK} SET log_id = ?, position = NULL WHERE prediction_id = ? AND logged_at = ?"
)


def _typed_copy(
    size: int, layout: int, numbers: bytes, categories: str | None, layouts: _Layouts, documents: bool
) -> tuple[list[str] | None, list[str | None]]:
    """A typed batch's rows: their documents as JSON (when ``documents``; numbers as floats, a missing one
    as null; a category's text, a missing one left out) and each row's line of ``categories`` (None for a
    row without a category outside the layout). The documents are None when the layout is not recorded."""
    step = len(numbers) // size
    if layouts.row_bytes.get(layout) != step:
        return None, [None] * size
    numeric, known = layouts.numeric[layout], layouts.categories[layout]
    categorical = list(enumerate(zip(layouts.categorical[layout], known, strict=True)))
    first, width = len(numeric), step // 8
    values = struct.unpack(f"<{size * width}d", numbers)
    lines = iter(categories.split("\n")) if categories else iter(())
    docs: list[str] = []
    texts: list[str | None] = []
    dumps = orjson.dumps
    for base in range(0, size * width, width):
        codes = values[base + first : base + width]
        line = next(lines, None) if -2.0 in codes else None
        texts.append(line)
        if not documents:
            continue
        doc = dict(zip(numeric, values[base : base + first], strict=True))  # NaN: orjson writes null
        other = None
        for j, (name, cats) in categorical:
            code = codes[j]
            if code >= 0:
                if code < len(cats):
                    doc[name] = cats[int(code)]
            elif code == -2.0:
                if other is None:
                    other = orjson.loads(line)["v"] if line else []
                doc[name] = other[j] if j < len(other) else None
        docs.append(dumps(doc).decode())
    return (docs if documents else None), texts


def _rows(batch: tuple[Any, ...], ids: Sequence[int], layouts: _Layouts) -> list[tuple[Any, ...]]:
    """A batch as log rows (``LOG_COLUMNS``, ids from ``ids``), in position order."""
    _, prefix, low, size, request, model, version, at, latency, status, protocol = batch[:11]
    layout, numbers, categories, outputs, vectors, flags, inputs = batch[11:]
    typed = layout is not None and numbers is not None
    docs: list[str] | None = None
    texts: list[str | None] = [None] * size
    if typed:
        docs, texts = _typed_copy(size, layout, bytes(numbers), categories, layouts, _is_null(inputs))
    dumps = orjson.dumps
    if not _is_null(inputs):
        docs = [dumps(doc).decode() for doc in orjson.loads(inputs)]
    if docs is None:
        docs = ["{}"] * size  # no document and no recorded layout to read the typed copy with
    probabilities = struct.unpack(f"<{size}d", outputs)
    answers: list[str | None] = [None] * size
    if vectors is not None and len(vectors) >= 8 * size:
        flat = struct.unpack(f"<{len(vectors) // 8}d", vectors)
        k = len(flat) // size
        answers = [dumps(flat[i : i + k]).decode() for i in range(0, size * k, k)]  # NaN: null
    marks: list[str | None] = [None] * size
    if not _is_null(flags):
        marks = [None if f is None else dumps(f).decode() for f in orjson.loads(flags)]
    step = len(numbers) // size if typed else 0
    tails = _HEX3[low : low + size]
    return [
        (
            ids[i],
            prefix + tails[i],
            request,
            model,
            version,
            at,
            docs[i],
            None if probabilities[i] != probabilities[i] else probabilities[i],
            marks[i],
            latency,
            status,
            protocol,
            layout if typed else None,
            numbers[i * step : (i + 1) * step] if typed else None,
            texts[i],
            answers[i],
        )
        for i in range(size)
    ]


def _expand_chunk(after: int, limit: int, layouts: _Layouts) -> tuple[int, int]:
    """Expand the batches past ``after`` holding at most ``limit`` predictions (at least one batch) into log
    rows (in the caller's transaction), point their labels at the rows, delete the batches. Returns
    (predictions expanded, the last batch's id)."""
    pg = _postgres()
    cur = _raw().cursor()
    try:
        cur.execute(_PG_CUT if pg else _SQLITE_CUT, (after, limit, limit))
        cut = cur.fetchone()[0]
        if cut is None:  # the next batch alone holds more than ``limit`` predictions
            cut = _scalar(_q(f"SELECT min(id) FROM {BATCHES} WHERE id > ?"), after)
            if cut is None:
                return 0, after
        cur.execute(_PG_BATCH_CHUNK if pg else _SQLITE_BATCH_CHUNK, (after, cut))
        batches = cur.fetchall()
        ids = _new_ids(LOG, sum(b[3] for b in batches))
        rows: list[tuple[Any, ...]] = []
        starts: dict[int, tuple[int, int]] = {}  # batch id -> (its first row, its size)
        for batch in batches:
            starts[batch[0]] = (len(rows), batch[3])
            rows += _rows(batch, ids[len(rows) : len(rows) + batch[3]], layouts)
        _insert(LOG, LOG_COLUMNS, rows)
        models = sorted({b[5] for b in batches})
        if pg:
            cur.execute(_PG_LABELS_OF, (models, after, cut))
        else:
            cur.execute(_SQLITE_LABELS_OF, (orjson.dumps(models).decode(), after, cut))
        labels = [
            (pid, when, ids[starts[log_id][0] + position])
            for pid, when, log_id, position in cur.fetchall()
            if log_id in starts and 0 <= position < starts[log_id][1]
        ]
        if labels:
            if pg:
                cur.execute(_PG_FEEDBACK_TO_ROW, [list(c) for c in zip(*labels, strict=True)])
            else:
                cur.executemany(_SQLITE_FEEDBACK_TO_ROW, [(key, pid, when) for pid, when, key in labels])
        cur.execute(_q(f"DELETE FROM {BATCHES} WHERE id > ? AND id <= ?"), (after, cut))
        return len(rows), int(cut)
    finally:
        cur.close()


def _downgrade_feedback() -> None:
    """The feedback as at 0017: no ``position``, 0015's index (SQLite: rebuilt with its foreign key)."""
    if _postgres():
        op.execute(f"DROP INDEX IF EXISTS {FEEDBACK_INDEX}")
        if _has_column(FEEDBACK, "position"):
            op.drop_column(FEEDBACK, "position")
    else:
        dropped = _sqlite_feedback(position=False)
        if dropped:
            print(
                f"prediction log: {dropped} labels of predictions no longer logged were dropped (the "
                "feedback's foreign key at 0017 cannot hold them)",
                file=sys.stderr,
                flush=True,
            )
    op.create_index(
        FEEDBACK_INDEX, FEEDBACK, ["model_name", "log_id"], postgresql_include=OLD_FEEDBACK_INCLUDE
    )


def downgrade() -> None:
    context = op.get_context()
    if context.as_sql:
        raise RuntimeError("0018_log_batches converts rows: it cannot run in offline (--sql) mode")
    pg = _postgres()
    limit = _chunk()
    with context.autocommit_block():
        with _transaction():
            if not _exists(LOG):
                _create_log()
        if _exists(BATCHES):
            layouts = _Layouts.load()
            left = int(_scalar(f"SELECT coalesce(sum(size), 0) FROM {BATCHES}"))
            done = int(_scalar(f"SELECT count(*) FROM {LOG}"))
            progress = _Progress("restored", done, done + left)
            if left:
                _analyze(
                    f"{BATCHES} (id, size)", f"{FEEDBACK} (prediction_id, logged_at, model_name, log_id)"
                )
            after = -1
            with _bulk():
                while True:
                    with _transaction():
                        _tune()
                        n, after = _expand_chunk(after, limit, layouts)
                    if not n:
                        break
                    progress.add(n)
                with _transaction():  # batches a writer added meanwhile, then the table, under its lock
                    _tune()
                    if pg:
                        op.execute(f"LOCK TABLE {BATCHES} IN ACCESS EXCLUSIVE MODE")
                    while True:
                        n, after = _expand_chunk(after, limit, layouts)
                        if not n:
                            break
                        progress.total += n
                        progress.add(n)
                    op.execute(f"DROP TABLE {BATCHES}")  # with its partitions, indexes and id sequence
                    # a label whose batch is gone keeps no log id (none of a row; SQLite drops it below)
                    op.execute(f"UPDATE {FEEDBACK} SET log_id = NULL WHERE position IS NOT NULL")
                    _index_log()
                    _downgrade_feedback()
            if progress.total:
                progress.finish()
        elif _has_column(FEEDBACK, "position"):
            with _transaction():
                _downgrade_feedback()
        _analyze(LOG, FEEDBACK)

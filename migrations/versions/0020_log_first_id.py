"""The prediction log keyed by its first prediction id: ``prediction_batches.first_id`` replaces ``id_prefix``
and ``id_low``, and ``request_id`` becomes nullable.

A batch's prediction ids are UUIDs counting up in their last three hex digits; the table stored them as the
first id's 33-character prefix and its tail as a number, found through a unique key ``(id_prefix, id_low,
logged_at)`` beside the primary key ``(id, logged_at)``. Now it stores the first id whole (PostgreSQL: a
16-byte ``uuid``; SQLite: its 36-character text) and the primary key ``(first_id, logged_at)`` is the only key
(PostgreSQL): ``id`` stays (insertion order, the labels' ``log_id``, the covering ``(model_name, id)`` index)
without an index of its own. SQLite keeps ``id`` as its primary key (the rowid) and gets the unique key
``uq_prediction_batches_first_id`` on ``(first_id, logged_at)``. ``request_id`` holds only the caller's id: a
row may have none (NULL); the existing rows keep theirs (an empty one becomes NULL).

Upgrade, PostgreSQL (the keys live on the partitioned parent and cascade to every partition, the DEFAULT one
included):

1. Refuse (before any change) a log holding an id that is not a lowercase canonical UUID; add ``first_id
   uuid`` (nullable) and drop ``request_id``'s NOT NULL.
2. Fill ``first_id`` (and ``request_id = nullif(request_id, '')``) where it is NULL, model by model in
   chunks of ``DRIFTWARDEN_LOG_MIGRATION_CHUNK`` rows (50,000 by default) in ``id`` order (a range of the
   ``(model_name, id)`` index), one committed transaction each; a line per chunk to stderr (``prediction
   batches: 50000 of 1000000 first ids filled (5%)``).
3. In one transaction under an ACCESS EXCLUSIVE lock: fill the rows added meanwhile, set ``first_id`` NOT
   NULL, drop the primary key ``(id, logged_at)`` and the unique key, add the primary key ``(first_id,
   logged_at)``, drop ``id_prefix`` and ``id_low``. Then ``ANALYZE``.

Upgrade, SQLite: the table is rebuilt in one transaction (new table, rows copied with their first ids, old
table dropped, new one renamed, indexes made).

Resumable: each chunk commits on its own and fills only rows still without a first id, and every DDL step
creates or drops only what is missing or present, so an upgrade killed anywhere (or after its last commit,
before alembic recorded the revision) finishes when ``driftwarden db upgrade`` runs again. Rows updated by
the fill leave their old versions for VACUUM (autovacuum), and the dropped columns' bytes stay in the rows
already written until they leave the log (retention).

Downgrade: the reverse, chunked the same way (``prediction batches: ... prefixes restored``): ``id_prefix``
(the first 33 characters of ``first_id``) and ``id_low`` (its last three hex digits as a number) are added and
filled, a NULL ``request_id`` becomes the empty string ``''`` (an upgrade turns it back into NULL), then the
keys of 0018 come back and ``first_id`` goes. SQLite: rebuilt as 0018 made it.

Stop the servers of the older version before upgrading: their writes name the old conflict target, which the
last step drops.

Self-contained: imports no driftwarden module, so it keeps working when the application changes.

Revision ID: 0020_log_first_id
Revises: 0019_cloudevent_pairs
Create Date: 2026-12-03
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0020_log_first_id"
down_revision = "0019_cloudevent_pairs"
branch_labels = None
depends_on = None

TABLE = "prediction_batches"
PK = "pk_prediction_batches"
OLD_KEY = "uq_prediction_batches_ids"
SQLITE_KEY = "uq_prediction_batches_first_id"
TIME_INDEX = "ix_prediction_batches_model_name_logged_at"
ID_INDEX = "ix_prediction_batches_model_name_id"
CHUNK_ENV = "DRIFTWARDEN_LOG_MIGRATION_CHUNK"
CHUNK = 50_000  # batch rows per transaction
JSONType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
# a 33-character prefix of a lowercase canonical UUID (8-4-4-4-12 hex digits, the last 3 counted apart)
PG_PREFIX_FORM = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{9}$"
_HEX = "[0-9a-f]"
SQLITE_PREFIX_FORM = "-".join(_HEX * n for n in (8, 4, 4, 4, 9))

PG_FIRST_ID = "(id_prefix || lpad(to_hex(id_low), 3, '0'))::uuid"
PG_PREFIX = "left(first_id::text, 33)"
PG_LOW = "('x' || right(first_id::text, 3))::bit(12)::int"
SQLITE_FIRST_ID = "id_prefix || printf('%03x', id_low)"
SQLITE_LOW = " + ".join(
    f"(instr('0123456789abcdef', substr(first_id, {34 + k}, 1)) - 1) * {16 ** (2 - k)}" for k in range(3)
)


# ---------------------------------------------------------------------------------------------- plumbing


def _postgres() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def _raw() -> Any:
    """The driver's connection under the migration's (psycopg or sqlite3)."""
    return op.get_bind().connection.dbapi_connection


@contextmanager
def _transaction() -> Iterator[None]:
    """One explicit transaction on the migration's connection (in autocommit mode: inside
    ``autocommit_block``). SQLite begins IMMEDIATE: the write lock first, so no step fails halfway on a
    concurrent writer."""
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


def _execute(sql: str, *params: Any) -> int:
    """Run one statement; the rows it changed."""
    cur = _raw().cursor()
    try:
        cur.execute(sql, params)
        return int(cur.rowcount or 0)
    finally:
        cur.close()


def _has_column(column: str) -> bool:
    if _postgres():
        found = _scalar(
            "SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = %s "
            "AND NOT attisdropped",
            TABLE,
            column,
        )
        return bool(found)
    cur = _raw().cursor()
    try:
        return any(row[1] == column for row in cur.execute(f"PRAGMA table_info({TABLE})"))
    finally:
        cur.close()


def _constraint(name: str) -> str | None:
    """The definition of the log's constraint ``name`` (PostgreSQL), None without one."""
    found = _scalar(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid = to_regclass(%s) AND conname = %s",
        TABLE,
        name,
    )
    return None if found is None else str(found)


def _refusal(bad: int) -> str:
    return (
        f"cannot key the prediction log by first id: {bad} batches hold ids that are not lowercase canonical "
        "UUIDs; nothing was changed"
    )


def _chunk() -> int:
    value = os.environ.get(CHUNK_ENV, "")
    return max(1, int(value)) if value.strip() else CHUNK


class _Progress:
    """A line on stderr per chunk (``driftwarden db upgrade`` shows stderr; alembic's INFO log is muted)."""

    def __init__(self, what: str, total: int) -> None:
        self.what, self.done, self.total, self.started = what, 0, total, time.monotonic()

    def add(self, n: int) -> None:
        self.done += n
        share = 100 * self.done // self.total if self.total else 100
        print(
            f"prediction batches: {self.done} of {self.total} {self.what} ({share}%)",
            file=sys.stderr,
            flush=True,
        )

    def finish(self) -> None:
        print(
            f"prediction batches: {self.done} {self.what} in {time.monotonic() - self.started:.1f} s",
            file=sys.stderr,
            flush=True,
        )


# ---------------------------------------------------------------------------------------------- PostgreSQL


def _models() -> Iterator[str]:
    """The log's model names, skipping along the ``(model_name, id)`` index (one probe each)."""
    last = ""
    while True:
        found = _scalar(f"SELECT min(model_name) FROM {TABLE} WHERE model_name > %s", last)
        if found is None:
            return
        last = str(found)
        yield last


_PG_CUT = f"""
SELECT max(id) FROM (
    SELECT id FROM {TABLE} WHERE model_name = %s AND id > %s ORDER BY id LIMIT %s
) t
"""


def _pg_fill(set_clause: str, missing: str, what: str) -> None:
    """``UPDATE ... SET set_clause`` on the rows where ``missing`` (a NULL column) holds, model by model in
    chunks of ids (ranges of the ``(model_name, id)`` index), one committed transaction each."""
    total = int(_scalar(f"SELECT count(*) FROM {TABLE} WHERE {missing} IS NULL"))
    if not total:
        return
    limit = _chunk()
    progress = _Progress(what, total)
    for model in list(_models()):
        after = -1
        while True:
            with _transaction():
                cut = _scalar(_PG_CUT, model, after, limit)
                if cut is None:
                    break
                n = _execute(
                    f"UPDATE {TABLE} SET {set_clause} "
                    f"WHERE model_name = %s AND id > %s AND id <= %s AND {missing} IS NULL",
                    model,
                    after,
                    cut,
                )
            after = int(cut)
            if n:
                progress.add(n)
    progress.finish()


def _pg_upgrade() -> None:
    with _transaction():
        if _has_column("id_prefix"):
            unfilled = "first_id IS NULL AND " if _has_column("first_id") else ""
            bad = _scalar(
                f"SELECT count(*) FROM {TABLE} WHERE {unfilled}"
                "(id_prefix !~ %s OR id_low < 0 OR id_low > 4095)",
                PG_PREFIX_FORM,
            )
            if bad:
                raise RuntimeError(_refusal(bad))
        if not _has_column("first_id"):
            op.add_column(TABLE, sa.Column("first_id", postgresql.UUID(as_uuid=False), nullable=True))
        op.alter_column(TABLE, "request_id", existing_type=sa.String(128), nullable=True)
    fill = f"first_id = {PG_FIRST_ID}, request_id = nullif(request_id, '')"
    if _has_column("id_prefix"):
        _pg_fill(fill, "first_id", "first ids filled")
    with _transaction():
        op.execute(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE")
        if _has_column("id_prefix"):  # rows an older writer added meanwhile
            op.execute(f"UPDATE {TABLE} SET {fill} WHERE first_id IS NULL")
        op.alter_column(TABLE, "first_id", existing_type=postgresql.UUID(as_uuid=False), nullable=False)
        if _constraint(OLD_KEY) is not None:
            op.drop_constraint(OLD_KEY, TABLE, type_="unique")
        key = _constraint(PK)
        if key is not None and key != "PRIMARY KEY (first_id, logged_at)":
            op.drop_constraint(PK, TABLE, type_="primary")
            key = None
        if key is None:
            op.create_primary_key(PK, TABLE, ["first_id", "logged_at"])
        for column in ("id_prefix", "id_low"):
            if _has_column(column):
                op.drop_column(TABLE, column)
    op.execute(f"ANALYZE {TABLE}")


def _pg_downgrade() -> None:
    with _transaction():
        if not _has_column("id_prefix"):
            op.add_column(TABLE, sa.Column("id_prefix", sa.String(33), nullable=True))
        if not _has_column("id_low"):
            op.add_column(TABLE, sa.Column("id_low", sa.Integer(), nullable=True))
    fill = f"id_prefix = {PG_PREFIX}, id_low = {PG_LOW}, request_id = coalesce(request_id, '')"
    if _has_column("first_id"):
        _pg_fill(fill, "id_prefix", "prefixes restored")
    with _transaction():
        op.execute(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE")
        if _has_column("first_id"):  # rows a writer added meanwhile
            op.execute(f"UPDATE {TABLE} SET {fill} WHERE id_prefix IS NULL")
        op.alter_column(TABLE, "id_prefix", existing_type=sa.String(33), nullable=False)
        op.alter_column(TABLE, "id_low", existing_type=sa.Integer(), nullable=False)
        op.alter_column(TABLE, "request_id", existing_type=sa.String(128), nullable=False)
        key = _constraint(PK)
        if key is not None and key != "PRIMARY KEY (id, logged_at)":
            op.drop_constraint(PK, TABLE, type_="primary")
            key = None
        if key is None:
            op.create_primary_key(PK, TABLE, ["id", "logged_at"])
        if _constraint(OLD_KEY) is None:
            op.create_unique_constraint(OLD_KEY, TABLE, ["id_prefix", "id_low", "logged_at"])
        if _has_column("first_id"):
            op.drop_column(TABLE, "first_id")
    op.execute(f"ANALYZE {TABLE}")


# ---------------------------------------------------------------------------------------------- SQLite


def _sqlite_columns(first_id: bool) -> list[sa.Column[Any]]:
    """The SQLite table's columns: with ``first_id`` (this revision) or with ``id_prefix``/``id_low`` and a
    required ``request_id`` (0018)."""
    ids: list[sa.Column[Any]] = (
        [sa.Column("first_id", sa.String(36), nullable=False)]
        if first_id
        else [
            sa.Column("id_prefix", sa.String(33), nullable=False),
            sa.Column("id_low", sa.Integer(), nullable=False),
        ]
    )
    return [
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model_name", sa.String(128), nullable=False),
        sa.Column("model_version", sa.Integer(), nullable=False),
        sa.Column("logged_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("request_id", sa.String(128), nullable=first_id),
        sa.Column("protocol", sa.String(8), nullable=False),
        sa.Column("status", sa.String(24), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        *ids,
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("layout", sa.BigInteger(), nullable=True),
        sa.Column("numbers", sa.LargeBinary(), nullable=True),
        sa.Column("categories", sa.Text(), nullable=True),
        sa.Column("outputs", sa.LargeBinary(), nullable=False),
        sa.Column("vectors", sa.LargeBinary(), nullable=True),
        sa.Column("flags", JSONType, nullable=True),
        sa.Column("inputs", JSONType, nullable=True),
    ]


def _sqlite_rebuild(first_id: bool) -> None:
    """Rebuild the SQLite table in the caller's transaction: keyed by ``first_id`` or as at 0018."""
    new = f"{TABLE}_0020"
    columns = _sqlite_columns(first_id)
    keys: list[Any] = [sa.PrimaryKeyConstraint("id", name=PK)]
    if not first_id:
        keys.append(sa.UniqueConstraint("id_prefix", "id_low", "logged_at", name=OLD_KEY))
    op.execute(f"DROP TABLE IF EXISTS {new}")
    op.create_table(new, *columns, *keys)
    names = [c.name for c in columns]
    values = {name: name for name in names}
    if first_id:
        bad = _scalar(
            f"SELECT count(*) FROM {TABLE} WHERE id_prefix NOT GLOB ? OR id_low < 0 OR id_low > 4095",
            SQLITE_PREFIX_FORM,
        )
        if bad:
            raise RuntimeError(_refusal(bad))
        values.update(first_id=SQLITE_FIRST_ID, request_id="nullif(request_id, '')")
    else:
        values.update(
            id_prefix="substr(first_id, 1, 33)", id_low=SQLITE_LOW, request_id="coalesce(request_id, '')"
        )
    listed = ", ".join(names)
    op.execute(f"INSERT INTO {new} ({listed}) SELECT {', '.join(values[n] for n in names)} FROM {TABLE}")
    op.execute(f"DROP TABLE {TABLE}")  # with its indexes
    op.rename_table(new, TABLE)
    op.create_index(TIME_INDEX, TABLE, ["model_name", "logged_at"])
    op.create_index(ID_INDEX, TABLE, ["model_name", "id"])
    if first_id:
        op.create_index(SQLITE_KEY, TABLE, ["first_id", "logged_at"], unique=True)


# ---------------------------------------------------------------------------------------------- entry points


def _offline(direction: str) -> None:
    if op.get_context().as_sql:
        raise RuntimeError(f"0020_log_first_id fills rows: it cannot {direction} in offline (--sql) mode")


def _exists() -> bool:
    return sa.inspect(op.get_bind()).has_table(TABLE)


def upgrade() -> None:
    _offline("upgrade")
    if not _exists():  # a database stamped past the revisions that made it (nothing to key)
        return
    with op.get_context().autocommit_block():
        if _postgres():
            _pg_upgrade()
        elif _has_column("id_prefix"):
            with _transaction():
                _sqlite_rebuild(first_id=True)


def downgrade() -> None:
    _offline("downgrade")
    if not _exists():  # a database stamped past the revisions that made it (nothing to restore)
        return
    with op.get_context().autocommit_block():
        if _postgres():
            _pg_downgrade()
        elif _has_column("first_id"):
            with _transaction():
                _sqlite_rebuild(first_id=False)

"""Time partitions of the prediction log on PostgreSQL: naming, planning, the DDL that adds and drops them.

Why partitions: a retention that deletes expired rows one chunk at a time pays an index scan, a DELETE of the
feedback and of the log rows per chunk, and dead tuples for VACUUM to reclaim. ``prediction_batches`` and
``prediction_feedback`` are both ``PARTITION BY RANGE (logged_at)`` on PostgreSQL (migration 0009), with the
same ranges, so a span of time that has wholly expired leaves as two ``DROP TABLE`` in one transaction: a
catalog change whatever the number of rows. SQLite keeps its single tables (an embedded log is small).

Layout:

- A partition covers ``log_partition_days`` days (one by default), aligned to whole multiples of that length
  since 1970-01-01 UTC so that every process plans the same boundaries, and is named by its start
  (``prediction_batches_p20261130``; its feedback twin ``prediction_feedback_p20261130``). A range next to an
  existing partition is clipped to it, so changing the setting never overlaps old partitions: existing ones
  keep their range, new ones get the new length.
- Each table has a ``DEFAULT`` partition (``prediction_batches_default``, ``prediction_feedback_default``)
  for a row whose time no partition covers (clock skew, an old spool replayed, the job not run for a week), so
  no insert is ever refused. Creating a partition whose range holds rows of the default moves those rows
  into it in the same transaction (PostgreSQL refuses the partition otherwise); retention deletes expired
  default rows with the chunked DELETE.
- Indexes are declared once on the parent (PostgreSQL builds them per partition): the primary key
  ``(first_id, logged_at)`` (a partitioned table's keys must hold the partition key), ``(model_name,
  logged_at)`` and ``(model_name, id)``.
- There is no foreign key from the feedback to the log on PostgreSQL: a referenced partition cannot be
  dropped, only detached first, and detaching checks every row of the partition against the feedback
  while it holds an ACCESS EXCLUSIVE lock on ``prediction_batches`` (measured: 0.4-0.9 s per million rows, in
  which no prediction is written and no window read). ``record_feedback`` refuses labels of unknown
  predictions and retention removes the feedback with its predictions, which is what the key did.

Locks: adding or dropping a partition takes an ACCESS EXCLUSIVE lock on the parent table for a moment. Each
change is its own short transaction that waits at most ``LOCK_TIMEOUT_MS`` for that lock (a long window read
holds a shared lock on every partition; meanwhile the writer's inserts would queue behind the DDL), under a
transaction-level advisory lock, so two processes running retention at once never plan the same change.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import OperationalError

from core.errors import Unavailable
from predictions.models import FEEDBACK_COLUMNS, LOG_TABLE_COLUMNS, SQLITE_FIRST_ID_KEY

LOG = "prediction_batches"
FEEDBACK = "prediction_feedback"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
AHEAD = timedelta(days=7)
"""Partitions are created this far ahead of now (the retention job runs hourly by default: a missed week of
passes still finds today's partition)."""
LOCK_TIMEOUT_MS = 2000
"""Longest wait for the table lock of one partition change; the writer's inserts queue behind it meanwhile."""
ATTEMPTS = 3
ADVISORY_KEY = 0x64775F706172746E  # "dw_partn": serializes partition changes across processes

BUSY = ("55P03", "40P01")  # lock_not_available, deadlock_detected (with a writer routing a late row)

T = TypeVar("T")

_PARTITION = re.compile(rf"^({LOG}|{FEEDBACK})_(p\d{{8}}(\d{{6}})?|default)$")


def is_partition_table(name: str) -> bool:
    """Whether ``name`` is one of the partitions made here (they are not in the ORM's metadata)."""
    return _PARTITION.match(name) is not None


def include_object(obj: object, name: str | None, type_: str, reflected: bool, compare_to: object) -> bool:
    """alembic's ``include_object`` hook: the partitions exist in the database only (made at run time), and
    so does the SQLite log's unique key ``(first_id, logged_at)`` (the models describe PostgreSQL's, where
    it is the primary key): autogenerate and ``compare_metadata`` must not take them for objects to drop."""
    if not reflected or compare_to is not None:
        return True
    if type_ == "table":
        return not is_partition_table(name or "")
    return not (type_ in ("index", "unique_constraint") and name == SQLITE_FIRST_ID_KEY)


_LOG_COLS = ", ".join(("id", *LOG_TABLE_COLUMNS))
_FEEDBACK_COLS = ", ".join(FEEDBACK_COLUMNS)
_BOUNDS = """
SELECT c.relname, b[1]::timestamptz, b[2]::timestamptz
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
CROSS JOIN LATERAL regexp_match(
    pg_get_expr(c.relpartbound, c.oid), 'FROM \\(''([^'']*)''\\) TO \\(''([^'']*)''\\)'
) AS b
WHERE i.inhparent = to_regclass(:parent) AND b IS NOT NULL
ORDER BY 2
"""


@dataclass(frozen=True, order=True)
class Span:
    """The time range ``[start, end)`` of one partition (UTC)."""

    start: datetime
    end: datetime

    @property
    def suffix(self) -> str:
        """``p`` and the start date (and time, for a start that is not midnight UTC)."""
        start = self.start.astimezone(UTC)
        return "p" + start.strftime("%Y%m%d" if start.time() == datetime.min.time() else "%Y%m%d%H%M%S")

    def name(self, table: str = LOG) -> str:
        """This span's partition of ``table``."""
        return f"{table}_{self.suffix}"

    def holds(self, moment: datetime) -> bool:
        return self.start <= moment < self.end


def slot(moment: datetime, days: int) -> Span:
    """The aligned ``days``-long range that holds ``moment`` (whole multiples of ``days`` since 1970 UTC)."""
    length = timedelta(days=days)
    start = EPOCH + length * ((moment - EPOCH) // length)
    return Span(start, start + length)


def missing(existing: Sequence[Span], start: datetime, end: datetime, days: int) -> list[Span]:
    """Partitions to create so that ``[start, end)`` is covered: aligned slots clipped to existing ones."""
    spans = sorted(existing)
    out: list[Span] = []
    moment = start
    while moment < end:
        covering = next((s for s in spans if s.holds(moment)), None)
        if covering is not None:
            moment = covering.end
            continue
        aligned = slot(moment, days)
        low = max([aligned.start, *(s.end for s in spans if s.end <= moment)])
        high = min([aligned.end, *(s.start for s in spans if s.start > moment)])
        new = Span(low, high)
        out.append(new)
        spans = sorted([*spans, new])
        moment = high
    return out


def is_partitioned(conn: Connection) -> bool:
    """Whether this database's ``prediction_batches`` is partitioned (PostgreSQL)."""
    if conn.dialect.name != "postgresql":
        return False
    kind = conn.execute(text("SELECT relkind FROM pg_class WHERE oid = to_regclass(:t)"), {"t": LOG}).scalar()
    return kind == "p"


def existing(conn: Connection) -> list[Span]:
    """The ranges of the log's partitions (the default partition left out), oldest first."""
    return [Span(start, end) for _, start, end in conn.execute(text(_BOUNDS), {"parent": LOG})]


def _literal(moment: datetime) -> str:
    return "'" + moment.astimezone(UTC).isoformat() + "'"


def create(conn: Connection, span: Span) -> int:
    """Add the log and feedback partitions of ``span``; rows of the default partitions in it move along.

    Returns the number of batches moved out of the default partition.
    """
    where = f"logged_at >= {_literal(span.start)} AND logged_at < {_literal(span.end)}"
    bounds = f"FOR VALUES FROM ({_literal(span.start)}) TO ({_literal(span.end)})"
    moved: dict[str, tuple[str, int]] = {}
    for table, cols in ((LOG, _LOG_COLS), (FEEDBACK, _FEEDBACK_COLS)):
        default = f"{table}_default"
        n = int(conn.execute(text(f"SELECT count(*) FROM {default} WHERE {where}")).scalar_one())
        if n:  # PostgreSQL refuses a partition whose rows sit in the default one: take them out first
            temp = f"CREATE TEMP TABLE dw_moved_{table} ON COMMIT DROP AS SELECT {cols} FROM {default}"
            conn.execute(text(f"{temp} WHERE {where}"))
            conn.execute(text(f"DELETE FROM {default} WHERE {where}"))
            moved[table] = (cols, n)
    conn.execute(text(f"CREATE TABLE {span.name(LOG)} PARTITION OF {LOG} {bounds}"))
    conn.execute(text(f"CREATE TABLE IF NOT EXISTS {span.name(FEEDBACK)} PARTITION OF {FEEDBACK} {bounds}"))
    for table, (cols, _) in moved.items():
        conn.execute(text(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM dw_moved_{table}"))
        conn.execute(text(f"DROP TABLE dw_moved_{table}"))
    return moved.get(LOG, ("", 0))[1]


def drop(conn: Connection, span: Span) -> int:
    """Drop the log and feedback partitions of ``span``; the number of predictions they held.

    The partitions are locked against inserts (SHARE: reads go on) before counting, so the count is what
    is dropped.
    """
    log_name, feedback_name = span.name(LOG), span.name(FEEDBACK)
    has_feedback = conn.execute(text("SELECT to_regclass(:t) IS NOT NULL"), {"t": feedback_name}).scalar()
    locked = f"{log_name}, {feedback_name}" if has_feedback else log_name
    conn.execute(text(f"LOCK TABLE {locked} IN SHARE MODE"))
    rows = int(conn.execute(text(f"SELECT coalesce(sum(size), 0) FROM {log_name}")).scalar_one())
    conn.execute(text(f"DROP TABLE IF EXISTS {feedback_name}"))
    conn.execute(text(f"DROP TABLE {log_name}"))
    return rows


def change(engine: Engine, step: Callable[[Connection], T]) -> T:
    """Run ``step`` as one partition change: a transaction holding the advisory lock and waiting at most
    ``LOCK_TIMEOUT_MS`` for table locks. A lock it cannot get in time (or a deadlock with a writer) is
    retried, then raised as :class:`core.errors.Unavailable`."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            with engine.begin() as conn:
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": ADVISORY_KEY})
                conn.execute(text(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}"))
                return step(conn)
        except OperationalError as exc:
            if getattr(exc.orig, "sqlstate", None) not in BUSY:
                raise
            if attempt == ATTEMPTS:
                raise Unavailable(
                    f"prediction_batches is busy: no table lock within {LOCK_TIMEOUT_MS} ms in {ATTEMPTS} "
                    "attempts (a long window read?); partitions unchanged, retry later"
                ) from exc
            time.sleep(0.5 * attempt)
    raise AssertionError("unreachable")

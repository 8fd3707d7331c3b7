"""Prediction log operations: build rows, write batches, join feedback, read windows, purge."""

from __future__ import annotations

import contextlib
import functools
import os
import random
import time
import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

import orjson
from sqlalchemy import Engine, delete, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from service.predictions.models import LOG_COLUMNS, PredictionFeedback, PredictionLog


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


assert LogRow._fields == LOG_COLUMNS


_random = random.Random(int.from_bytes(os.urandom(32), "big"))


def new_prediction_id() -> str:
    """A time-ordered UUID (v7 layout: 48-bit milliseconds, then random bits)."""
    ms = time.time_ns() // 1_000_000
    rand = _random.getrandbits(80)  # no syscall on the hot path (a syscall hands the GIL to other threads)
    value = (ms & 0xFFFFFFFFFFFF) << 80 | rand
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 4122 variant
    return str(uuid.UUID(int=value))


def utcnow() -> datetime:
    """Timezone-aware now, UTC."""
    return datetime.now(UTC)


def _json(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def _sqlite_time(value: datetime) -> str:
    """The text SQLAlchemy stores for a DateTime on SQLite (UTC, no offset)."""
    if value.tzinfo is not UTC:
        value = value.astimezone(UTC)
    return value.replace(tzinfo=None).isoformat(" ", "microseconds")


SQLITE_ROWS_PER_STATEMENT = 500  # x 11 columns, well under SQLite's 32766 bound parameters


@functools.lru_cache(maxsize=64)
def _sqlite_values(rows: int, width: int) -> str:
    one = "(" + ", ".join("?" * width) + ")"
    return ", ".join([one] * rows)


def write_log_rows(*, engine: Engine, rows: Sequence[LogRow], idempotent: bool) -> int:
    """Insert ``rows`` in one transaction; ``idempotent`` skips prediction ids already present (replays).

    PostgreSQL: COPY for fresh rows, a multi-row ``INSERT ... ON CONFLICT DO NOTHING`` for replays.
    SQLite: ``INSERT OR IGNORE`` with many rows per statement.
    """
    if not rows:
        return 0
    if engine.dialect.name == "postgresql" and idempotent:
        stmt = postgresql.insert(PredictionLog).on_conflict_do_nothing(index_elements=["prediction_id"])
        with engine.begin() as conn:
            conn.execute(stmt, [r._asdict() for r in rows])
        return len(rows)
    cols = ", ".join(LOG_COLUMNS)
    raw = engine.raw_connection()
    try:
        if engine.dialect.name == "postgresql":
            pg: Any = raw.driver_connection
            with pg.cursor() as cur, cur.copy(f"COPY prediction_log ({cols}) FROM STDIN") as copy:
                for r in rows:
                    copy.write_row((*r[:5], _json(r.inputs), r.probability, _json(r.flags), *r[8:]))
        else:
            cur = raw.cursor()
            params = [
                value
                for r in rows
                for value in (
                    *r[:4],
                    _sqlite_time(r.logged_at),
                    _json(r.inputs),
                    r.probability,
                    _json(r.flags),
                    *r[8:],
                )
            ]
            width = len(LOG_COLUMNS)
            # Multi-row statements: one engine step (one GIL release) per chunk instead of one per row.
            for start in range(0, len(rows), SQLITE_ROWS_PER_STATEMENT):
                n = min(SQLITE_ROWS_PER_STATEMENT, len(rows) - start)
                cur.execute(
                    f"INSERT OR IGNORE INTO prediction_log ({cols}) VALUES {_sqlite_values(n, width)}",
                    params[start * width : (start + n) * width],
                )
            cur.close()
        raw.commit()
    except BaseException:
        with contextlib.suppress(Exception):  # the connection may be gone
            raw.rollback()
        raw.invalidate()  # never hand a broken connection out again
        raise
    finally:
        raw.close()
    return len(rows)


def known_prediction_ids(*, session: Session, model_name: str, ids: Iterable[str]) -> set[str]:
    """The subset of ``ids`` that are logged predictions of ``model_name``."""
    wanted = list(dict.fromkeys(ids))
    found: set[str] = set()
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        found.update(
            session.scalars(
                select(PredictionLog.prediction_id).where(
                    PredictionLog.model_name == model_name, PredictionLog.prediction_id.in_(chunk)
                )
            )
        )
    return found


def record_feedback(
    *, session: Session, model_name: str, labels: Sequence[tuple[str, float]]
) -> tuple[int, list[str]]:
    """Store ground-truth labels of logged predictions; returns (stored, unknown prediction ids)."""
    known = known_prediction_ids(session=session, model_name=model_name, ids=(pid for pid, _ in labels))
    latest = {pid: label for pid, label in labels if pid in known}  # a repeated id: the last label wins
    unknown = list(dict.fromkeys(pid for pid, _ in labels if pid not in known))
    if latest:
        now = utcnow()
        values = [
            {"prediction_id": pid, "model_name": model_name, "label": label, "received_at": now}
            for pid, label in latest.items()
        ]
        dialect = session.get_bind().dialect.name
        ins = postgresql.insert if dialect == "postgresql" else sqlite.insert
        stmt = ins(PredictionFeedback)
        stmt = stmt.on_conflict_do_update(
            index_elements=["prediction_id"],
            set_={"label": stmt.excluded.label, "received_at": stmt.excluded.received_at},
        )
        session.execute(stmt, values)
    return len(latest), unknown


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


def purge_predictions(*, session: Session, before: datetime, chunk: int = 5000) -> int:
    """Delete predictions logged before ``before`` (their feedback goes with them), at most ``chunk`` rows."""
    ids = list(session.scalars(select(PredictionLog.id).where(PredictionLog.logged_at < before).limit(chunk)))
    if not ids:
        return 0
    pids = select(PredictionLog.prediction_id).where(PredictionLog.id.in_(ids))
    session.execute(delete(PredictionFeedback).where(PredictionFeedback.prediction_id.in_(pids)))
    session.execute(delete(PredictionLog).where(PredictionLog.id.in_(ids)))
    return len(ids)

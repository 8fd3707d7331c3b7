"""A window's labels, from ``prediction_feedback`` alone (each label carries its prediction's batch id,
position and output), as arrays or scattered onto a range's predictions."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from sqlalchemy import Engine, func, literal_column, select
from sqlalchemy.sql.elements import ColumnElement

from predictions.models import PredictionFeedback, PredictionStatus
from predictions.windows.decoding import Batches
from predictions.windows.spec import CHUNK_ROWS, WindowSummary


def _offsets(got_ids: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Each batch's first position in the range."""
    return np.concatenate(([0], np.cumsum(sizes)[:-1])) if sizes.size else np.empty(0, dtype=np.int64)


def _scatter(ids: np.ndarray, sizes: np.ndarray, log_ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The range positions of (batch id, position) pairs; -1 where the pair is not in the range."""
    if not ids.size or not log_ids.size:
        return np.full(log_ids.size, -1, dtype=np.int64)
    at = np.clip(np.searchsorted(ids, log_ids), 0, ids.size - 1)
    ok = (ids[at] == log_ids) & (positions >= 0) & (positions < sizes[at])
    return np.where(ok, _offsets(ids, sizes)[at] + positions, -1)


def range_labels(engine: Engine, summary: WindowSummary, got: Batches, lo: int, hi: int) -> np.ndarray:
    """The labels of a range's predictions, in range order (NaN: none)."""
    fb = PredictionFeedback
    stmt = select(fb.log_id, fb.position, fb.label).where(*label_filters(summary, lo, hi))
    with engine.connect() as conn:
        rows = conn.execute(stmt).all()
    out = np.full(got.total, np.nan)
    if rows:
        log_ids = np.array([r[0] for r in rows], dtype=np.int64)
        positions = np.array([r[1] for r in rows], dtype=np.int64)
        values = np.array([np.nan if r[2] is None else r[2] for r in rows], dtype=np.float64)
        at = _scatter(got.ids, got.sizes, log_ids, positions)
        out[at[at >= 0]] = values[at >= 0]
    return out


def label_filters(summary: WindowSummary, lo: int, hi: int) -> list[ColumnElement[bool]]:
    """The window's labels between two batch ids, on the copies of their predictions a label carries (and
    within the window's time span, which prunes the feedback partitions of other days)."""
    fb = PredictionFeedback
    where: list[ColumnElement[bool]] = [
        fb.model_name == summary.model_name,
        fb.status == PredictionStatus.OK.value,
        fb.log_id >= lo,
        fb.log_id <= hi,
        fb.position.is_not(None),
    ]
    if summary.spec.version is not None:
        where.append(fb.model_version == summary.spec.version)
    if summary.since is not None:
        where.append(fb.logged_at >= summary.since)
    if summary.spec.until is not None:
        where.append(fb.logged_at < summary.spec.until)
    if summary.start is not None and summary.end is not None:
        where += [fb.logged_at >= summary.start, fb.logged_at <= summary.end]
    if summary.skip and lo == summary.first_id:
        where.append((fb.log_id != summary.first_id) | (fb.position >= summary.skip))
    return where


def labelled_arrays(*, engine: Engine, summary: WindowSummary) -> tuple[np.ndarray, np.ndarray]:
    """The window's labelled predictions' outputs and labels in log order (NaN: none).

    Read from ``prediction_feedback`` alone: each label carries its prediction's batch id, position, output,
    version and status, so the window's labels are a range of the feedback's ``(model_name, log_id)`` index,
    read without visiting the batches. PostgreSQL returns two binary values (JIT off: compiling costs more
    than the query takes)."""
    fb = PredictionFeedback
    where = label_filters(summary, summary.first_id, summary.last_id)
    order = (fb.log_id, fb.position)
    if engine.dialect.name != "postgresql":
        with engine.connect() as conn:
            rows = conn.execute(select(fb.probability, fb.label).where(*where).order_by(*order)).all()
        p = np.array([np.nan if r[0] is None else r[0] for r in rows], dtype=np.float64)
        y = np.array([np.nan if r[1] is None else r[1] for r in rows], dtype=np.float64)
        return p, y
    nan: ColumnElement[float] = literal_column("'NaN'::float8")
    sub = (
        select(
            func.float8send(func.coalesce(fb.probability, nan)).label("pp"),
            func.float8send(func.coalesce(fb.label, nan)).label("y"),
        )
        .where(*where)
        .order_by(*order)
        .subquery()
    )
    empty: ColumnElement[bytes] = literal_column("''::bytea")
    stmt = select(func.count(), func.string_agg(sub.c.pp, empty), func.string_agg(sub.c.y, empty))
    with engine.connect() as conn:
        conn.exec_driver_sql("SET LOCAL jit = off")
        n, probs, labels = conn.execute(stmt).one()
    p = np.frombuffer(bytes(probs or b""), dtype=">f8").astype(np.float64)
    y = np.frombuffer(bytes(labels or b""), dtype=">f8").astype(np.float64)
    if p.size != int(n) or y.size != int(n):
        raise ValueError(f"{p.size} outputs and {y.size} labels for {n} labelled predictions")
    return p, y


def labelled_chunks(
    *, engine: Engine, summary: WindowSummary, chunk_rows: int = CHUNK_ROWS
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """:func:`labelled_arrays` ``chunk_rows`` at a time."""
    p, y = labelled_arrays(engine=engine, summary=summary)
    for lo in range(0, p.size, chunk_rows):
        yield p[lo : lo + chunk_rows], y[lo : lo + chunk_rows]

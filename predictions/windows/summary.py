"""A window's summary (count, time span, batch id range) and its aligned blocks of batch ids, from an index
scan."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, func, literal, select
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import Subquery

from core.database import aware
from predictions.models import PredictionBatch
from predictions.windows.spec import NO_SORT, WindowSpec, WindowSummary, filters, since_of


def newest_id(
    *, engine: Engine, model_name: str, spec: WindowSpec, now: datetime | None = None
) -> int | None:
    """The id of the window's newest batch (None: the window is empty); one backward index probe.

    A run that reads blocks before its summary is known bounds the summary by it (``upto``), so both see
    the same newest batch while new ones keep arriving."""
    since = since_of(spec, now)
    stmt = select(func.max(PredictionBatch.id)).where(*filters(model_name=model_name, spec=spec, since=since))
    with engine.connect() as conn:
        found = conn.execute(stmt).scalar()
    return None if found is None else int(found)


_PROBE = 256  # the newest batches whose mean size sizes a last-N window's first scan


def mean_size(*, engine: Engine, model_name: str, spec: WindowSpec, now: datetime | None = None) -> float:
    """The mean predictions per batch of the window's newest :data:`_PROBE` batches (1.0 when empty)."""
    where = filters(model_name=model_name, spec=spec, since=since_of(spec, now))
    log = PredictionBatch
    newest = select(log.size).where(*where).order_by(log.id.desc()).limit(_PROBE).subquery()
    with engine.connect() as conn:
        count, held = conn.execute(select(func.count(), func.sum(newest.c.size))).one()
    return max(1.0, float(held) / int(count)) if count else 1.0


def summarize_window(
    *, engine: Engine, model_name: str, spec: WindowSpec, now: datetime | None = None, upto: int | None = None
) -> WindowSummary | None:
    """The window's prediction count, time span and batch id range (None when it is empty); ``upto``: the
    window as it stood when its newest batch had this id (newer batches are left out)."""
    since = since_of(spec, now)
    where = filters(model_name=model_name, spec=spec, since=since, upto=upto)
    log = PredictionBatch
    with engine.connect() as conn:
        if spec.rows is None:
            stmt = select(
                func.count(),
                func.sum(log.size),
                func.min(log.logged_at),
                func.max(log.logged_at),
                func.min(log.id),
                func.max(log.id),
            ).where(*where)
            n, total, start, end, low, high = conn.execute(stmt).one()
            if not n:
                return None
            return WindowSummary(
                model_name, spec, int(total), aware(start), aware(end), int(low), int(high), since
            )
        # the newest batches until they hold ``rows`` predictions (see _newest)
        found = _newest(conn, where, spec.rows)
    if found is None:
        return None
    held, first, last, low, high = found
    skip = max(0, held - spec.rows)
    return WindowSummary(model_name, spec, held - skip, aware(first), aware(last), low, high, since, skip)


def _newest_batches(where: list[ColumnElement[bool]], *, below: int | None, k: int) -> Subquery:
    """The newest ``k`` batches (below the id ``below``): their ids, times and sizes."""
    log = PredictionBatch
    terms = [*where] if below is None else [*where, log.id < below]
    return select(log.id, log.logged_at, log.size).where(*terms).order_by(log.id.desc()).limit(k).subquery()


def _span_columns(newest: Subquery) -> list[ColumnElement[Any]]:
    """Count, predictions, time span, id range and smallest and largest size of ``newest``'s batches."""
    c = newest.c
    return [
        func.count(),
        func.coalesce(func.sum(c.size), 0),
        func.min(c.logged_at),
        func.max(c.logged_at),
        func.min(c.id),
        func.max(c.id),
        func.min(c.size),
        func.max(c.size),
    ]


def _span(conn: Any, where: list[ColumnElement[bool]], *, below: int | None, k: int) -> tuple[Any, ...]:
    """Of the newest ``k`` batches (below the id ``below``): count, predictions, time span, id range."""
    return tuple(conn.execute(select(*_span_columns(_newest_batches(where, below=below, k=k)))).one())


def _newest(
    conn: Any, where: list[ColumnElement[bool]], rows: int, *, blocks: _Grouped | None = None
) -> tuple[int, datetime | None, datetime | None, int, int] | None:
    """The newest batches holding ``rows`` predictions (the oldest of them may hold more): predictions, time
    span and id range; None when there is none.

    Aggregates over the newest k batches of the ``(model_name, id)`` index (index-only on PostgreSQL), k
    sized from the mean size of the newest :data:`_PROBE`; while they hold too few, the next older ones are
    added the same way; batches holding only predictions beyond ``rows`` (k overshot) are then cut from the
    oldest end, read one by one (few: k is sized to the mean). With ``blocks``, every scan is grouped by
    block there as well."""

    def span(below: int | None, k: int) -> tuple[Any, ...]:
        return _span(conn, where, below=below, k=k) if blocks is None else blocks.span(below=below, k=k)

    count, held, start, end, low, high, smallest, largest = span(None, _PROBE)
    if not count:
        return None
    total, n = int(held), int(count)
    mean = max(1.0, total / n)
    even = smallest == largest  # every probed batch of one size: the next ones are sized exactly
    more = n == _PROBE
    while total < rows and more:
        need = rows - total
        k = min(need, -(-need // int(mean)) if even else int(need / mean * 1.1) + 16)
        count, held, older_start, _, older_low, _, _, _ = span(low, k)
        if not count:
            break
        more = int(count) == k
        total += int(held)
        low = int(older_low)
        start = older_start if start is None or (older_start is not None and older_start < start) else start
    if total - rows > 0:  # drop the oldest batches whose predictions are all beyond ``rows``
        log = PredictionBatch
        excess = total - rows
        stmt = (
            select(log.id, log.size)
            .where(*where, log.id >= low, log.id <= high)
            .order_by(log.id)
            .limit(excess + 1)
        )
        dropped = 0
        cut = low
        for batch_id, size in conn.execute(stmt):
            if dropped + int(size) > excess:
                cut = int(batch_id)
                break
            dropped += int(size)
        if cut != low:
            total -= dropped
            low = cut
            start = conn.execute(
                select(func.min(log.logged_at)).where(*where, log.id >= low, log.id <= high)
            ).scalar()
    return total, start, end, int(low), int(high)


@dataclass(frozen=True)
class BlockStat:
    """An aligned block of a window's batch ids: its index (``id // block_ids``), the window's predictions
    in it and its oldest ``logged_at``."""

    block: int
    rows: int
    oldest: datetime


def block_stats(*, engine: Engine, summary: WindowSummary, block_ids: int) -> list[BlockStat]:
    """Per aligned block of ``block_ids`` batch ids holding batches of the window's id range: the window's
    predictions in it and its oldest ``logged_at`` (model, status and version filters, not the time bound: a
    block whose oldest batch is older than the window's ``since`` is cut by it); an index-only scan of
    ``(model_name, id)`` on PostgreSQL."""
    log = PredictionBatch
    block = log.id.op("/")(literal(block_ids)).label("block")
    where = filters(model_name=summary.model_name, spec=summary.spec, since=None)
    stmt = (
        select(block, func.sum(log.size), func.min(log.logged_at))
        .where(*where, log.id >= summary.first_id, log.id <= summary.last_id)
        .group_by(block)
    )
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql(NO_SORT)
        found = sorted(conn.execute(stmt).all(), key=lambda row: int(row[0]))
    out = [BlockStat(int(b), int(n), aware(at) or datetime.min.replace(tzinfo=UTC)) for b, n, at in found]
    if out and summary.skip:  # the first batch's oldest predictions are outside the window
        out[0] = replace(out[0], rows=out[0].rows - summary.skip)
    return out


def summarize_blocks(
    *,
    engine: Engine,
    model_name: str,
    spec: WindowSpec,
    block_ids: int,
    now: datetime | None = None,
    upto: int | None = None,
) -> tuple[WindowSummary | None, list[BlockStat]]:
    """:func:`summarize_window` and :func:`block_stats` of the window (``upto`` as there).

    A last-N window without a time bound gets both from one scan of its newest batches, grouped by block
    (the monitor's steady state reads this every run); a window with a time bound takes the two queries
    (its blocks are not cut by the bound, its summary is)."""
    if spec.rows is None or spec.minutes is not None:
        summary = summarize_window(engine=engine, model_name=model_name, spec=spec, now=now, upto=upto)
        if summary is None:
            return None, []
        return summary, block_stats(engine=engine, summary=summary, block_ids=block_ids)
    where = filters(model_name=model_name, spec=spec, since=None, upto=upto)
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql(NO_SORT)
        blocks = _Grouped(conn, where, block_ids)
        found = _newest(conn, where, spec.rows, blocks=blocks)
        if found is None:
            return None, []
        held, first, last, low, high = found
        stats = blocks.stats(low=low, high=high)
    skip = max(0, held - spec.rows)
    summary = WindowSummary(model_name, spec, held - skip, aware(first), aware(last), low, high, None, skip)
    if stats and skip:  # the first batch's oldest predictions are outside the window
        stats[0] = replace(stats[0], rows=stats[0].rows - skip)
    return summary, stats


class _Grouped:
    """The block statistics of the batches :func:`_newest` scans, gathered while it scans them: each scan of
    the newest k batches (below an id) grouped by block, the blocks of successive scans merged."""

    def __init__(self, conn: Any, where: list[ColumnElement[bool]], block_ids: int) -> None:
        self.conn, self.where, self.block_ids = conn, where, block_ids
        self.rows: dict[int, int] = {}
        self.oldest: dict[int, datetime] = {}

    def span(self, *, below: int | None, k: int) -> tuple[Any, ...]:
        """:func:`_span` of the newest ``k`` batches (below ``below``), their blocks kept."""
        newest = _newest_batches(self.where, below=below, k=k)
        block = newest.c.id.op("/")(literal(self.block_ids)).label("block")
        found = self.conn.execute(select(block, *_span_columns(newest)).group_by(block)).all()
        if not found:
            return (0, 0, None, None, None, None, None, None)
        for b, _, held, oldest, *_ in found:
            b, at = int(b), aware(oldest) or datetime.min.replace(tzinfo=UTC)
            self.rows[b] = self.rows.get(b, 0) + int(held)
            self.oldest[b] = min(at, self.oldest.get(b, at))
        return (
            sum(int(r[1]) for r in found),
            sum(int(r[2]) for r in found),
            min(r[3] for r in found),
            max(r[4] for r in found),
            min(r[5] for r in found),
            max(r[6] for r in found),
            min(r[7] for r in found),
            max(r[8] for r in found),
        )

    def stats(self, *, low: int, high: int) -> list[BlockStat]:
        """The blocks of the batches ``low..high`` (the scans may have gone below ``low``: the batches cut
        from the oldest end leave their blocks, and the block holding ``low`` is counted again)."""
        first = low // self.block_ids
        out = [BlockStat(b, self.rows[b], self.oldest[b]) for b in sorted(self.rows) if b > first]
        log = PredictionBatch
        end = min(high, (first + 1) * self.block_ids - 1)
        held, oldest = self.conn.execute(
            select(func.sum(log.size), func.min(log.logged_at)).where(
                *self.where, log.id >= low, log.id <= end
            )
        ).one()
        if held:
            out.insert(0, BlockStat(first, int(held), aware(oldest) or datetime.min.replace(tzinfo=UTC)))
        return out


def narrow(summary: WindowSummary, *, first_id: int, last_id: int, rows: int) -> WindowSummary:
    """The part of ``summary``'s window between two batch ids (``rows``: about how many predictions it
    holds, which sizes the chunks), for :func:`read_chunks`; the filters (and the labels' time span) stay the
    window's, and so does ``skip`` when the part starts at the window's first batch."""
    if first_id < summary.first_id or last_id > summary.last_id or first_id > last_id:
        raise ValueError(f"ids {first_id}..{last_id} are not inside {summary.first_id}..{summary.last_id}")
    skip = summary.skip if first_id == summary.first_id else 0
    return replace(summary, first_id=first_id, last_id=last_id, rows=max(rows, 1), skip=skip)

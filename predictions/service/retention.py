"""Retention: the log's partitions created ahead and dropped when expired, older rows deleted in chunks."""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from sqlalchemy import Connection, delete, func, select
from sqlalchemy.orm import Session

from core.database import Database, utcnow
from predictions import partitions
from predictions.models import PredictionBatch, PredictionFeedback
from predictions.service.reading import logged_models


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
        session.execute(
            delete(batch).where(batch.model_name == model, batch.id.in_(ids), batch.logged_at < before)
        )
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

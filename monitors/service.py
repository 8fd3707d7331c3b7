"""Storing monitor runs: a report becomes one ``monitor_runs`` row and its feature results; the window sketch
cache (``monitor_window_sketches``: counted blocks of the log, see :mod:`monitors.log_window`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, delete, func, not_, or_, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from core.database import aware, utcnow
from monitors.models import FeatureResult, MonitorRun, WindowSketchBlock
from monitors.report import DriftReport, FeatureDrift


def _feature_row(f: FeatureDrift) -> FeatureResult:
    r = f.as_dict()["result"]
    return FeatureResult(
        feature=f.name,
        kind=f.kind,
        test=r["test"],
        statistic=r["statistic"],
        p_value=r["p_value"],
        adjusted_p_value=r["adjusted_p_value"],
        effect=r["effect"],
        threshold=r["threshold"],
        drifted=bool(r["drifted"]),
    )


def record_run(
    *,
    session: Session,
    model_name: str,
    model_version: int,
    report: DriftReport,
    window_start: datetime | None = None,
    window_end: datetime | None = None,
    duration_s: float | None = None,
    extra: dict[str, Any] | None = None,
    created_at: datetime | None = None,
) -> MonitorRun:
    """Persist ``report`` (plus ``extra`` keys in its JSON) as a monitor run with one row per feature
    (``created_at``: a past window's own time, for a backfilled run; default now)."""
    run = MonitorRun(
        model_name=model_name,
        model_version=model_version,
        window_start=window_start,
        window_end=window_end,
        rows=report.rows,
        duration_s=duration_s,
        dataset_drifted=report.drifted,
        n_features=report.dataset.n_features,
        n_drifted=report.dataset.n_drifted,
        prediction_drifted=report.prediction.drifted if report.prediction else None,
        multivariate_drifted=report.multivariate.drifted if report.multivariate else None,
        concept_drifted=bool(report.concept_drift["drifted"]) if report.concept_drift else None,
        report={**report.as_dict(), **(extra or {})},
        **({"created_at": created_at} if created_at is not None else {}),
    )
    more = [x for x in (report.prediction, report.multivariate) if x is not None]
    run.features = [_feature_row(f) for f in [*report.features, *more]]
    session.add(run)
    session.flush()
    return run


def list_runs(
    *,
    session: Session,
    model_name: str,
    limit: int = 50,
    since: datetime | None = None,
    until: datetime | None = None,
    before: tuple[datetime, int] | None = None,
) -> list[MonitorRun]:
    """A model's runs, newest first: stored at or after ``since`` and before ``until``, and after the run
    ``before`` (its time and id: the last of the previous page) in that order."""
    stmt = select(MonitorRun).where(MonitorRun.model_name == model_name)
    if since is not None:
        stmt = stmt.where(MonitorRun.created_at >= since)
    if until is not None:
        stmt = stmt.where(MonitorRun.created_at < until)
    if before is not None:
        at, run_id = before
        stmt = stmt.where(
            or_(MonitorRun.created_at < at, and_(MonitorRun.created_at == at, MonitorRun.id < run_id))
        )
    stmt = stmt.order_by(MonitorRun.created_at.desc(), MonitorRun.id.desc()).limit(limit)
    return list(session.scalars(stmt))


def backfilled_windows(
    *, session: Session, model_name: str, since: datetime
) -> set[tuple[datetime, datetime]]:
    """The (start, end) of the model's runs whose window ends after ``since`` (a backfill skips them)."""
    stmt = select(MonitorRun.window_start, MonitorRun.window_end).where(
        MonitorRun.model_name == model_name, MonitorRun.window_end > since
    )
    return {(aware(a), aware(b)) for a, b in session.execute(stmt) if a is not None and b is not None}


def latest_run(*, session: Session, model_name: str) -> MonitorRun | None:
    """The newest run of a model, or None."""
    runs = list_runs(session=session, model_name=model_name, limit=1)
    return runs[0] if runs else None


def latest_runs(*, session: Session, model_names: list[str]) -> dict[str, MonitorRun]:
    """The newest run of each of ``model_names`` that has one (one query, whatever the number of models)."""
    if not model_names:
        return {}
    newest = (
        select(
            MonitorRun.id,
            func.row_number()
            .over(
                partition_by=MonitorRun.model_name,
                order_by=(MonitorRun.created_at.desc(), MonitorRun.id.desc()),
            )
            .label("rank"),
        )
        .where(MonitorRun.model_name.in_(model_names))
        .subquery()
    )
    stmt = select(MonitorRun).join(newest, MonitorRun.id == newest.c.id).where(newest.c.rank == 1)
    return {run.model_name: run for run in session.scalars(stmt)}


@dataclass(frozen=True)
class SketchKey:
    """What a cached block's counts depend on besides its rows."""

    model_name: str
    version_filter: int  # the window's version, 0 for every version
    fingerprint: str  # of the reference profile, the threshold and the stored layout (SKETCH_FORMAT)
    block_ids: int  # ids per block


@dataclass(frozen=True)
class CachedBlock:
    """One stored block: its row count and oldest ``logged_at`` when counted, and its encoded counts."""

    block: int
    rows: int
    oldest: datetime
    sketch: bytes


def _key_where(key: SketchKey) -> Any:
    t = WindowSketchBlock
    return and_(
        t.model_name == key.model_name,
        t.version_filter == key.version_filter,
        t.fingerprint == key.fingerprint,
        t.block_ids == key.block_ids,
    )


def cached_blocks(*, session: Session, key: SketchKey, blocks: Sequence[int]) -> dict[int, CachedBlock]:
    """The stored blocks of ``key`` among ``blocks``, by block index, without their counts (``sketch`` is
    empty: :func:`block_sketches` reads them)."""
    if not blocks:
        return {}
    t = WindowSketchBlock
    stmt = select(t.block, t.rows, t.oldest).where(
        _key_where(key), t.block >= min(blocks), t.block <= max(blocks)
    )
    wanted = set(blocks)
    return {
        int(b): CachedBlock(int(b), int(n), at, b"") for b, n, at in session.execute(stmt) if int(b) in wanted
    }


def block_sketches(*, session: Session, key: SketchKey, blocks: Sequence[int]) -> dict[int, bytes]:
    """The stored counts of ``key``'s ``blocks`` (read a few at a time: each is about half a megabyte)."""
    if not blocks:
        return {}
    t = WindowSketchBlock
    stmt = select(t.block, t.sketch).where(_key_where(key), t.block.in_(list(blocks)))
    return {int(b): bytes(data) for b, data in session.execute(stmt)}


def store_blocks(*, session: Session, key: SketchKey, blocks: Iterable[CachedBlock]) -> int:
    """Insert or replace the counts of ``blocks`` under ``key``; returns how many were written."""
    rows = [
        {
            "model_name": key.model_name,
            "version_filter": key.version_filter,
            "fingerprint": key.fingerprint,
            "block_ids": key.block_ids,
            "block": b.block,
            "rows": b.rows,
            "oldest": b.oldest,
            "sketch": b.sketch,
            "created_at": utcnow(),
        }
        for b in blocks
    ]
    if not rows:
        return 0
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = insert(WindowSketchBlock)
    stmt = stmt.on_conflict_do_update(
        index_elements=["model_name", "version_filter", "fingerprint", "block_ids", "block"],
        set_={c: stmt.excluded[c] for c in ("rows", "oldest", "sketch", "created_at")},
    )
    session.execute(stmt, rows)
    return len(rows)


def prune_blocks(*, session: Session, key: SketchKey, below: int) -> int:
    """Delete the model's stored blocks a window of ``key`` starting at block ``below`` no longer needs: its
    older blocks and every block of another key (another version, profile, threshold or block size)."""
    t = WindowSketchBlock
    stmt = delete(t).where(t.model_name == key.model_name, or_(not_(_key_where(key)), t.block < below))
    return int(session.execute(stmt).rowcount or 0)  # type: ignore[attr-defined]


def prune_models(*, session: Session, keep: Sequence[str]) -> int:
    """Delete the stored blocks of every model not in ``keep`` (e.g. no longer served)."""
    t = WindowSketchBlock
    result = session.execute(delete(t).where(t.model_name.not_in(list(keep))))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]

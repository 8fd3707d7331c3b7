"""Backfill: evaluate the past windows of a model's log by the predictions' own times, one stored run each.

``driftwarden monitor --backfill --model NAME --since 30d --every 1d`` reads the windows
``[end - every, end)`` for every ``end`` on the grid of ``every`` (UTC midnight for days) within the last
``since``, each with the serving version's profile and the model's monitor config, and stores each run at
its window's end, so the drift history shows a month of imported history on its first day. Backfilled runs
notify nobody (a past window's alert would be news of nothing) and are marked ``backfill`` in their report;
a window that already has a run is skipped, so a backfill can be run again to fill in what is missing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from core.config import Settings
from core.database import Database
from core.errors import Invalid
from monitors.findings import headline
from monitors.flows import Prepared, evaluate_window, prepare, window_engine
from monitors.log_window import read_window
from monitors.service import backfilled_windows, record_run
from predictions.windows import WindowSpec

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MAX_WINDOWS = 10_000


@dataclass(frozen=True)
class WindowResult:
    """One past window: its bounds, its rows and what was done with it."""

    start: datetime
    end: datetime
    rows: int
    run_id: int | None  # None: not stored (too few rows, or a run already covers it)
    outcome: str  # "stored", "existing" or "too few rows"
    drifted: int = 0  # drifted features
    summary: str = ""  # the report's headline


def windows(*, since: timedelta, every: timedelta, now: datetime) -> list[tuple[datetime, datetime]]:
    """The ``[start, end)`` windows of length ``every`` on its grid (counted from the Unix epoch, so days
    end at UTC midnight) that end within the last ``since`` and no later than ``now``, oldest first."""
    if every <= timedelta(0) or since <= timedelta(0):
        raise Invalid("--since and --every must be positive durations")
    if every > since:
        raise Invalid(f"--every ({every}) is longer than --since ({since}): no whole window fits")
    steps = (now - EPOCH) // every
    last = EPOCH + steps * every
    count = since // every
    if count > MAX_WINDOWS:
        raise Invalid(f"--since {since} / --every {every} makes {count} windows; at most {MAX_WINDOWS}")
    ends = [last - k * every for k in range(count)]
    return [(end - every, end) for end in reversed(ends)]


def backfill(
    *,
    db: Database,
    settings: Settings,
    model_name: str,
    since: timedelta,
    every: timedelta,
    now: datetime | None = None,
    progress: Callable[[WindowResult], None] | None = None,
) -> list[WindowResult]:
    """Evaluate and store each past window of ``model_name`` (see the module docstring)."""
    prepared = prepare(db=db, settings=settings, model_name=model_name)
    grid = windows(since=since, every=every, now=(now or datetime.now(UTC)).astimezone(UTC))
    with db.session() as session:
        done = backfilled_windows(session=session, model_name=model_name, since=grid[0][0])
    results: list[WindowResult] = []
    for result in _evaluate(
        db=db, settings=settings, model_name=model_name, prepared=prepared, grid=grid, done=done
    ):
        results.append(result)
        if progress is not None:
            progress(result)
    return results


def _evaluate(
    *,
    db: Database,
    settings: Settings,
    model_name: str,
    prepared: Prepared,
    grid: list[tuple[datetime, datetime]],
    done: set[tuple[datetime, datetime]],
) -> Iterator[WindowResult]:
    version, profile, config, _ = prepared
    engine = window_engine(db=db, settings=settings)
    for start, end in grid:
        if (start, end) in done:
            yield WindowResult(start, end, 0, None, "existing")
            continue
        started = time.perf_counter()
        minutes = (end - start).total_seconds() / 60.0
        spec = WindowSpec(minutes=minutes, until=end)
        window = read_window(
            engine=engine,
            profile=profile,
            model_name=model_name,
            spec=spec,
            threshold=config.classification_threshold,
            chunk_rows=settings.monitor_chunk_rows,
            now=end,
            cache=None,  # the cache's blocks hold the log's newest rows, not a past window's
        )
        if window.rows < settings.monitor_min_rows:
            yield WindowResult(start, end, window.rows, None, "too few rows")
            continue
        report = evaluate_window(
            prepared, window, model_name=model_name, every_s=(end - start).total_seconds()
        )
        with db.session() as session:
            run = record_run(
                session=session,
                model_name=model_name,
                model_version=version.version,
                report=report,
                window_start=start,
                window_end=end,
                duration_s=time.perf_counter() - started,
                extra={"window": window.as_dict(), "backfill": True},
                created_at=end,
            )
            run_id = run.id
        yield WindowResult(
            start, end, window.rows, run_id, "stored", report.dataset.n_drifted, headline(report).text
        )

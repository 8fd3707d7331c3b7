"""``driftwarden monitor --backfill``: one model's past windows with a progress bar and a table of what was
stored (the command is declared in :mod:`monitors.cli`)."""

from __future__ import annotations

import typer


def run_backfill(models: list[str], *, since: str, every: str) -> None:
    """``monitor --backfill``: one model's past windows, a progress bar and a table of what was stored."""
    from datetime import UTC, datetime

    from rich.progress import Progress
    from rich.table import Table

    from core.config import get_settings
    from core.database import open_database
    from core.durations import require_duration
    from core.terminal import make_console
    from monitors.backfill import backfill, windows

    if len(models) != 1:
        raise typer.BadParameter(
            "--backfill evaluates one model: give exactly one --model", param_hint="--model"
        )
    span = require_duration(since, where="--since")
    step = require_duration(every, where="--every")
    settings = get_settings()
    db = open_database()
    console = make_console(stderr=True)
    total = len(windows(since=span, every=step, now=datetime.now(UTC)))
    try:
        with Progress(console=console, transient=True) as bar:
            task = bar.add_task(f"backfill {models[0]}", total=total)
            results = backfill(
                db=db,
                settings=settings,
                model_name=models[0],
                since=span,
                every=step,
                progress=lambda _: bar.advance(task),
            )
    finally:
        db.dispose()
    table = Table(title=f"Backfill of {models[0]}: windows of {every} over the last {since}")
    for col in ("window start", "window end", "rows", "run", "drifted features", "result"):
        table.add_column(col)
    for r in results:
        table.add_row(
            f"{r.start:%Y-%m-%d %H:%M}",
            f"{r.end:%Y-%m-%d %H:%M}",
            str(r.rows) if r.outcome != "existing" else "",
            str(r.run_id or ""),
            str(r.drifted) if r.run_id else "",
            r.summary or r.outcome,
        )
    make_console().print(table)
    stored = sum(1 for r in results if r.run_id)
    existing = sum(1 for r in results if r.outcome == "existing")
    thin = sum(1 for r in results if r.outcome == "too few rows")
    typer.echo(
        f"{stored} run(s) stored, {existing} window(s) already had one, {thin} with fewer than "
        f"{settings.monitor_min_rows} predictions"
    )

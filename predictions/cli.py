"""``driftwarden predictions ...``: the prediction log's commands."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from core.bounds import MAX_KEEP_DAYS
from core.cli_options import JsonOut
from core.errors import Invalid
from predictions.lake.layout import TABLES

if TYPE_CHECKING:
    from predictions.service import Retention

predictions_app = typer.Typer(help="The prediction log.", no_args_is_help=True)


@predictions_app.command("purge")
def purge(
    days: Annotated[
        float | None,
        typer.Option(
            "--days", min=0.0, max=MAX_KEEP_DAYS, help="Keep this many days (default: retention_days)."
        ),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Delete without asking.")] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only show how many predictions per model would be deleted.")
    ] = False,
) -> None:
    """Delete logged predictions (and their feedback) older than the retention window.

    Deleting needs --yes (on a terminal, a prompt asks instead); --dry-run shows the count per model and
    deletes nothing. Without either, the counts are shown and the command exits 2. On PostgreSQL the
    partitions wholly older than the cutoff are dropped (each is named with the predictions it held), the
    rest of the older rows are deleted in chunks, and the partitions of the coming week are created (with
    --yes also when there is nothing to delete).
    """
    from datetime import timedelta

    from core.config import get_settings
    from core.database import open_database, utcnow
    from predictions.service import apply_retention, count_before, expired_partitions

    settings = get_settings()
    window = settings.retention_days if days is None else days
    cutoff = utcnow() - timedelta(days=window)
    db = open_database()
    try:
        counts = count_before(db=db, before=cutoff)
        total = sum(counts.values())
        when = f"logged before {cutoff.isoformat(timespec='seconds')} (older than {window:g} days)"
        if total == 0:
            if yes and not dry_run:  # still drop empty expired partitions, make the coming week's
                _report(apply_retention(db=db, before=cutoff, partition_days=settings.log_partition_days))
            typer.echo(f"nothing to delete: no prediction {when}")
            return
        verb = "would delete" if dry_run or not yes else "deleting"
        for model, n in sorted(counts.items()):
            typer.echo(f"{verb} {n} predictions of {model} (and their feedback) {when}")
        if dry_run or not yes:
            for name in expired_partitions(db=db, before=cutoff):
                typer.echo(f"would drop partition {name} and its feedback's (wholly older)")
        if dry_run:
            typer.echo(f"dry run: {total} predictions would be deleted; nothing was deleted")
            return
        if not yes:
            if not sys.stdin.isatty():
                raise Invalid(
                    f"purge deletes {total} predictions and their feedback: add --yes to delete them "
                    "(or --dry-run to only count)"
                )
            if not typer.confirm(f"Delete {total} predictions and their feedback?", default=False):
                typer.echo("nothing deleted", err=True)
                raise typer.Exit(1)
        done = apply_retention(db=db, before=cutoff, partition_days=settings.log_partition_days)
    finally:
        db.dispose()
    _report(done)
    typer.echo(f"deleted {done.removed} predictions {when}")


@predictions_app.command("rejected")
def rejected(
    path: Annotated[
        Path,
        typer.Argument(
            help="A dead-letter file rejected.jsonl, or a spool folder (every rejected.jsonl under it).",
            exists=True,
        ),
    ],
    do_import: Annotated[
        bool,
        typer.Option(
            "--import",
            help="Write the rows to the database; rows it takes leave the file, rows refused again stay.",
        ),
    ] = False,
) -> None:
    """Show the log rows the database refused for their values (the dead-letter files), or re-import them.

    The writer moves a row the database refuses (a NUL character in an input string, a number out of range)
    to rejected.jsonl in its spool slot. Fix the values in the file (or delete the lines), then --import.
    """
    from predictions.rejected import FILE_NAME, DeadLetter

    files = sorted(path.rglob(FILE_NAME)) if path.is_dir() else [path]
    if do_import:
        from core.database import open_database

        db = open_database()
        try:
            for file in files:
                try:
                    written, refused = DeadLetter(file.parent, name=file.name).reimport(engine=db.engine)
                except ValueError as exc:
                    raise Invalid(str(exc)) from exc
                typer.echo(
                    f"{file}: {written} predictions written to the log, {refused} refused again (kept)"
                )
        finally:
            db.dispose()
        return
    total = 0
    for file in files:
        rows = list(DeadLetter(file.parent, name=file.name).read())
        held = sum(r.row.size for r in rows)
        total += held
        for r in rows:
            error = r.error.splitlines()[0] if r.error else ""
            typer.echo(
                f"{r.rejected_at.isoformat(timespec='seconds')}  {r.row.ids()[0]} (+{r.row.size - 1})  "
                f"{r.row.model_name} v{r.row.model_version}  {r.source}  {error}"
            )
        typer.echo(f"{file}: {len(rows)} requests, {held} predictions")
    typer.echo(f"{total} refused predictions in {len(files)} files")


@predictions_app.command("export")
def export(
    model: Annotated[str, typer.Option("--model", "-m", help="The model whose logged predictions to copy.")],
    to: Annotated[
        str | None,
        typer.Option(
            "--to", help="The lake: a folder or s3://bucket/prefix (default: the lake_url setting)."
        ),
    ] = None,
    since: Annotated[
        str, typer.Option("--since", help="How far back from --until, e.g. 30d, 2w, 12h.")
    ] = "30d",
    until: Annotated[
        str | None,
        typer.Option("--until", help="The end (excluded), RFC 3339, e.g. 2026-12-01T00:00Z (default: now)."),
    ] = None,
    as_json: JsonOut = None,
) -> None:
    """Copy a model's logged predictions and their labels from the database into the lake.

    Written in the lake's layout (predictions/model=M/date=D/hour=H/, labels/ likewise) as one file per
    hour, export-<yyyymmddhh>-<part>.parquet: running it again over the same hours replaces those files, so
    no row is copied twice. Export the hours from before the server's lake sink was turned on (--until): the
    sink's own files are not looked at. A lake that does not exist or cannot be written stops the command
    before anything is copied (exit 2).
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from core.cli_options import check_target, write_json
    from core.config import get_settings
    from core.database import open_database, utcnow
    from core.durations import require_duration
    from core.terminal import make_console
    from core.times import parse_time
    from predictions.lake.export import export_model, hours_between
    from predictions.lake.files import check_writable, open_lake

    if as_json is not None:
        check_target(as_json)
    url = to or get_settings().lake_url
    if not url:
        raise Invalid("--to: name the lake (a folder or s3://bucket/prefix), or set lake_url")
    end = parse_time(until, field="--until", naive_utc=True) if until else utcnow()
    start = end - require_duration(since, where="--since")
    target = open_lake(url)
    check_writable(target)
    db = open_database()
    try:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=make_console(stderr=True),
            transient=True,
        ) as bar:
            task = bar.add_task(f"export {model} (hours)", total=hours_between(start, end))
            done = export_model(
                db=db,
                target=target,
                model_name=model,
                since=start,
                until=end,
                progress=lambda n: bar.advance(task, n),
            )
    finally:
        db.dispose()
    if as_json is not None:
        write_json(done.as_dict(url), to=as_json)
        return
    typer.echo(
        f"{done.predictions} predictions ({done.hours} hours) and {done.labels} labels of {model} copied to "
        f"{url} in {len(done.files)} files"
    )


@predictions_app.command("purge-lake")
def purge_lake(
    days: Annotated[
        float | None,
        typer.Option(
            "--days", min=0.0, max=MAX_KEEP_DAYS, help="Keep this many days (default: retention_days)."
        ),
    ] = None,
    to: Annotated[
        str | None, typer.Option("--lake", help="The lake (default: the lake_url setting).")
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Delete without asking.")] = False,
) -> None:
    """Delete the lake's date partitions (predictions and labels, every model) older than the retention days.

    Whole days go: a date=D folder is removed when D is before the cutoff's date (UTC). Without --yes the
    partitions are listed and nothing is deleted (exit 2).
    """
    from datetime import timedelta

    from core.config import get_settings
    from core.database import utcnow
    from predictions.lake.files import drop_partitions_before, open_lake, partitions_before

    settings = get_settings()
    url = to or settings.lake_url
    if not url:
        raise Invalid("--lake: name the lake (a folder or s3://bucket/prefix), or set lake_url")
    window = settings.retention_days if days is None else days
    before = f"{utcnow() - timedelta(days=window):%Y-%m-%d}"
    target = open_lake(url)
    if not yes:
        old = [p for t in TABLES for p in partitions_before(target, t, before)]
        for name in old:
            typer.echo(f"would delete {name}")
        raise Invalid(f"{len(old)} date partitions before {before}: add --yes to delete them")
    for table in TABLES:
        for name in drop_partitions_before(target, table, before):
            typer.echo(f"deleted {name}")


def _report(done: Retention) -> None:
    for name, n in done.dropped:
        typer.echo(f"dropped partition {name} and its feedback's ({n} predictions)")
    if done.created:
        typer.echo(f"created partitions {', '.join(done.created)} (the coming week)")


def register(app: typer.Typer) -> None:
    """Add the prediction log's commands to the root CLI."""
    app.add_typer(predictions_app, name="predictions")

"""``driftwarden predictions ...``: the prediction log's commands."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from core.errors import Invalid

predictions_app = typer.Typer(help="The prediction log.", no_args_is_help=True)


@predictions_app.command("purge")
def purge(
    days: Annotated[
        float | None, typer.Option("--days", min=0.0, help="Keep this many days (default: retention_days).")
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Delete without asking.")] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only show how many predictions per model would be deleted.")
    ] = False,
) -> None:
    """Delete logged predictions (and their feedback) older than the retention window.

    Deleting needs --yes (on a terminal, a prompt asks instead); --dry-run shows the count per model and
    deletes nothing. Without either, the counts are shown and the command exits 2.
    """
    from datetime import timedelta

    from core.config import get_settings
    from core.database import open_database
    from predictions.service import count_before, purge_all_before, utcnow

    settings = get_settings()
    window = settings.retention_days if days is None else days
    cutoff = utcnow() - timedelta(days=window)
    db = open_database()
    try:
        counts = count_before(db=db, before=cutoff)
        total = sum(counts.values())
        when = f"logged before {cutoff.isoformat(timespec='seconds')} (older than {window:g} days)"
        if total == 0:
            typer.echo(f"nothing to delete: no prediction {when}")
            return
        verb = "would delete" if dry_run or not yes else "deleting"
        for model, n in sorted(counts.items()):
            typer.echo(f"{verb} {n} predictions of {model} (and their feedback) {when}")
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
        deleted = purge_all_before(db=db, before=cutoff)
    finally:
        db.dispose()
    typer.echo(f"deleted {deleted} predictions {when}")


def register(app: typer.Typer) -> None:
    """Add the prediction log's commands to the root CLI."""
    app.add_typer(predictions_app, name="predictions")

"""``driftwarden predictions ...``: the prediction log's commands."""

from __future__ import annotations

from typing import Annotated

import typer

predictions_app = typer.Typer(help="The prediction log.", no_args_is_help=True)


@predictions_app.command("purge")
def purge(
    days: Annotated[
        float | None, typer.Option("--days", min=0.0, help="Keep this many days (default: retention_days).")
    ] = None,
) -> None:
    """Delete logged predictions (and their feedback) older than the retention window."""
    from datetime import timedelta

    from core.config import get_settings
    from core.database import open_database
    from predictions.service import purge_all_before, utcnow

    settings = get_settings()
    cutoff = utcnow() - timedelta(days=settings.retention_days if days is None else days)
    db = open_database()
    try:
        total = purge_all_before(db=db, before=cutoff)
    finally:
        db.dispose()
    typer.echo(f"deleted {total} predictions logged before {cutoff.isoformat()}")


def register(app: typer.Typer) -> None:
    """Add the prediction log's commands to the root CLI."""
    app.add_typer(predictions_app, name="predictions")

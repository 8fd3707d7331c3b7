"""``driftwarden serve`` and ``driftwarden predictions purge``; TensorFlow loads inside commands only."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

predictions_app = typer.Typer(help="The prediction log.", no_args_is_help=True)


def serve(
    host: Annotated[
        str | None, typer.Option("--host", help="Bind address (default: settings api_host).")
    ] = None,
    port: Annotated[
        int | None, typer.Option("--port", "-p", help="Port (default: settings api_port).")
    ] = None,
    durability: Annotated[
        str | None, typer.Option("--durability", help="Prediction log: 'durable' (group commit) or 'fast'.")
    ] = None,
    no_log: Annotated[
        bool, typer.Option("--no-log", help="Serve without prediction log, metrics, drift monitor.")
    ] = False,
) -> None:
    """Serve the registry's models over TF Serving REST (/v1) and Open Inference Protocol v2 (/v2).

    The serving version of each model (state `serving` in the registry) answers; promotions are picked up
    without a restart. Every prediction is logged to DRIFTWARDEN_DATABASE_URL. Docs at /docs.
    """
    import uvicorn

    from service.cli import setup_logging
    from service.config import get_settings
    from service.serving.app import create_app

    setup_logging()
    settings = get_settings()
    updates: dict[str, object] = {}
    if durability is not None:
        if durability not in ("durable", "fast"):
            raise typer.BadParameter("use 'durable' or 'fast'", param_hint="--durability")
        mode: Literal["durable", "fast"] = "durable" if durability == "durable" else "fast"
        updates["log_durability"] = mode
    if no_log:
        updates.update(prediction_log_enabled=False, metrics_enabled=False, monitor_enabled=False)
    if updates:
        settings = settings.model_copy(update=updates)
    uvicorn.run(
        create_app(settings),
        host=host or settings.api_host,
        port=port or settings.api_port,
        log_level=settings.log_level.lower(),
        access_log=False,
        timeout_graceful_shutdown=int(settings.shutdown_timeout_s),
    )


@predictions_app.command("purge")
def purge(
    days: Annotated[
        float | None, typer.Option("--days", min=0.0, help="Keep this many days (default: retention_days).")
    ] = None,
) -> None:
    """Delete logged predictions (and their feedback) older than the retention window."""
    from datetime import timedelta

    from service.config import get_settings
    from service.predictions.service import purge_predictions, utcnow
    from service.runtime import open_database

    settings = get_settings()
    cutoff = utcnow() - timedelta(days=settings.retention_days if days is None else days)
    db = open_database()
    total = 0
    try:
        while True:
            with db.session() as session:
                n = purge_predictions(session=session, before=cutoff)
            total += n
            if n == 0:
                break
    finally:
        db.dispose()
    typer.echo(f"deleted {total} predictions logged before {cutoff.isoformat()}")


def register(app: typer.Typer) -> None:
    """Add the serving commands to the root CLI."""
    app.command("serve")(serve)
    app.add_typer(predictions_app, name="predictions")

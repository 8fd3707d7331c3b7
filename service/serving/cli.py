"""``driftwarden serve``; TensorFlow loads inside the command only."""

from __future__ import annotations

from typing import Annotated, Literal

import typer


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

    from core.config import get_settings
    from core.logs import setup_logging
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


def register(app: typer.Typer) -> None:
    """Add the serving commands to the root CLI."""
    app.command("serve")(serve)

"""``driftwarden serve``; TensorFlow loads inside the command only."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from core.bounds import MAX_CLUSTER_WORKERS


def serve(
    host: Annotated[
        str | None, typer.Option("--host", help="Bind address (default: settings api_host).")
    ] = None,
    port: Annotated[
        int | None,
        typer.Option("--port", "-p", min=1, max=65535, help="Port, 1 to 65535 (default: settings api_port)."),
    ] = None,
    durability: Annotated[
        str | None, typer.Option("--durability", help="Prediction log: 'durable' (group commit) or 'fast'.")
    ] = None,
    no_log: Annotated[
        bool, typer.Option("--no-log", help="Serve without prediction log, metrics, drift monitor.")
    ] = False,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            "-w",
            min=1,
            max=MAX_CLUSTER_WORKERS,
            help="Worker processes sharing the port (default: settings api_workers, else one per CPU core); "
            "/metrics sums them.",
        ),
    ] = None,
) -> None:
    """Serve the registry's models over TF Serving REST (/v1) and Open Inference Protocol v2 (/v2).

    The serving version of each model (state `serving` in the registry) answers; promotions are picked up
    without a restart. Every prediction is logged to DRIFTWARDEN_DATABASE_URL. Docs at /docs.
    """
    import uvicorn

    from core.config import get_settings
    from core.database import open_database
    from core.logs import setup_logging
    from core.terminal import is_quiet
    from service.serving.protocol import PROTOCOL

    setup_logging()
    env: dict[str, str] = {}  # every worker builds its app from the environment (the app factory)
    if durability is not None:
        if durability not in ("durable", "fast"):
            raise typer.BadParameter("use 'durable' or 'fast'", param_hint="--durability")
        env["DRIFTWARDEN_LOG_DURABILITY"] = durability
    if no_log:
        env.update(
            DRIFTWARDEN_PREDICTION_LOG_ENABLED="false",
            DRIFTWARDEN_METRICS_ENABLED="false",
            DRIFTWARDEN_MONITOR_ENABLED="false",
        )
    os.environ.update(env)
    get_settings.cache_clear()
    settings = get_settings()
    check_bindable(host or settings.api_host, port or settings.api_port)  # before seconds of model loading
    n = workers or settings.api_workers or available_cores()
    # the schema is checked (SQLite: upgraded) once here, not by N workers racing each other's migrations
    open_database(settings=settings).dispose()
    created: Path | None = None
    if n > 1:  # the folder the workers share: metric snapshots and the lock of the periodic jobs
        if settings.metrics_dir is None:
            created = Path(tempfile.mkdtemp(prefix="driftwarden-metrics-"))
            os.environ["DRIFTWARDEN_METRICS_DIR"] = str(created)
            get_settings.cache_clear()
        else:
            clear_snapshots(settings.metrics_dir)  # a previous run's counters must not join this run's sums
    try:
        uvicorn.run(
            "service.serving.app:worker_app",  # create_app from the environment, per worker
            factory=True,
            workers=n,
            host=host or settings.api_host,
            port=port or settings.api_port,
            log_level="warning" if is_quiet() else settings.log_level.lower(),  # --quiet: no INFO lines
            access_log=False,
            http=PROTOCOL,  # a response's head and body in one write (service/serving/protocol.py)
            timeout_graceful_shutdown=int(settings.shutdown_timeout_s),
        )
    finally:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)


def check_bindable(host: str, port: int) -> None:
    """Unavailable naming the address when this process cannot listen on ``host:port`` (taken, or not an
    address of this machine), so ``serve`` says so at once instead of after loading every model."""
    import errno
    import socket

    from core.errors import Unavailable

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError as exc:
            why = {
                errno.EADDRINUSE: "is in use (another server?)",
                errno.EACCES: "needs privileges this process lacks",
                errno.EADDRNOTAVAIL: "is not an address of this machine",
            }.get(exc.errno or 0, f"cannot be bound ({exc.strerror})")
            raise Unavailable(
                f"--host/--port: {host}:{port} {why}: choose another with --port (or DRIFTWARDEN_API_PORT) "
                "or stop what listens there"
            ) from None


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity mask, which containers and taskset narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity API on this platform
        return max(1, os.cpu_count() or 1)


def clear_snapshots(directory: Path) -> None:
    """Remove the metric snapshot files of an earlier run from ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    for path in directory.iterdir():
        if path.suffix in (".json", ".tmp") or path.name == "scrape":
            path.unlink(missing_ok=True)


def register(app: typer.Typer) -> None:
    """Add the serving commands to the root CLI."""
    app.command("serve")(serve)

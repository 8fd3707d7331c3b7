"""The ``driftwarden`` command line.

Imports stay light: TensorFlow loads only inside the commands that need it.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from core.config import get_settings
from core.errors import DomainError
from core.logs import quiet_tensorflow_banner, setup_logging


class _Root(TyperGroup):
    """The root command: any error ends a command with one line on stderr and exit code 2.

    A domain error (bad input, a missing model, an old schema) says what is wrong and how to fix it. Anything
    else is a bug: one line naming it, still exit 2, so that a CI gate never reads a crash as `drift`'s 1
    ("drifted"). ``driftwarden --debug ...`` re-raises either, with its traceback.
    """

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name, command, rest = super().resolve_command(ctx, args)
        if name in PUBLISHING:
            _install_alerts()  # only for these: importing the alerts (ORM, models) costs ~0.45 s of start-up
        return name, command, rest

    def invoke(self, ctx: Any) -> Any:  # typer vendors its own click: its Context type is private
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise  # exits, aborts and usage errors: click answers them itself
        except BrokenPipeError:
            # the reader went away (`driftwarden jobs --help | head`): stop quietly, as SIGPIPE would
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush must not fail again
            raise typer.Exit(141) from None
        except DomainError as exc:
            if ctx.meta.get("driftwarden.debug"):
                raise
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(exc.exit_code) from None
        except Exception as exc:
            if ctx.meta.get("driftwarden.debug"):
                raise
            message = str(exc).splitlines()[0] if str(exc) else ""
            typer.echo(
                f"error: unexpected {type(exc).__name__}: {message} (a bug: rerun with `driftwarden --debug "
                "...` for the traceback and report it)",
                err=True,
            )
            raise typer.Exit(2) from None


app = typer.Typer(
    name="driftwarden",
    cls=_Root,
    help=(
        "Production monitoring and drift detection for TensorFlow models.\n\n"
        "Train on a TensorFlow cluster, register versions, serve them over HTTP (TF Serving REST and "
        "Open Inference Protocol v2), log every prediction and detect drift. Settings come from "
        "DRIFTWARDEN_* environment variables (see `driftwarden config`)."
    ),
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=False,
)
db_app = typer.Typer(help="Database schema (alembic migrations).", no_args_is_help=True)
app.add_typer(db_app, name="db")


@app.callback()
def root(
    ctx: typer.Context,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show the full traceback of an error instead of one line.")
    ] = False,
) -> None:
    """Production monitoring and drift detection for TensorFlow models."""
    ctx.meta["driftwarden.debug"] = debug


@app.command("config")
def config_cmd() -> None:
    """Print the effective settings as JSON (passwords masked)."""
    typer.echo(json.dumps(get_settings().masked(), indent=2))


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument(help="Target revision.")] = "head") -> None:
    """Apply migrations to DRIFTWARDEN_DATABASE_URL (creates SQLite files as needed)."""
    from core import migrate

    url = get_settings().database_url.get_secret_value()
    migrate.upgrade(url, revision)
    typer.echo(f"database at revision {migrate.current(url)}")


@db_app.command("current")
def db_current() -> None:
    """Print the database's migration revision."""
    from core import migrate

    typer.echo(migrate.current(get_settings().database_url.get_secret_value()) or "(not migrated)")


@app.command("demo")
def demo(
    model: Annotated[str, typer.Option("--model", help="Model name to train and serve.")] = "credit",
    rows: Annotated[int, typer.Option("--rows", min=1000, help="Rows per generated data set.")] = 20_000,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Cluster workers.")] = 2,
    epochs: Annotated[float, typer.Option("--epochs", min=0.1, help="Training epochs.")] = 3.0,
    seed: Annotated[int, typer.Option("--seed", help="Seed for the data and training.")] = 0,
) -> None:
    """The end-to-end tour on the embedded default: data -> cluster training -> registry -> serving.

    Writes under ./var (SQLite database, registry, checkpoints, demo data); needs no Docker.
    """
    from service.demo import run_demo

    setup_logging("WARNING", driftwarden_level="INFO")
    quiet_tensorflow_banner()
    run_demo(settings=get_settings(), model=model, rows=rows, workers=workers, epochs=epochs, seed=seed)


def _register_domains() -> None:
    from alerts.cli import register as register_alerts
    from monitors.cli import register as register_monitors
    from predictions.cli import register as register_predictions
    from registry.cli import register as register_registry
    from service.serving.cli import register as register_serving
    from training.cli import register as register_training

    register_registry(app)
    register_training(app)
    register_serving(app)
    register_predictions(app)
    register_monitors(app)
    register_alerts(app)


PUBLISHING = {"monitor", "worker", "jobs"}  # commands whose monitor runs or finished jobs raise alerts


def _install_alerts() -> None:
    """Monitor runs of `driftwarden monitor` and jobs finished by `driftwarden worker` raise alerts too."""
    from alerts.flows import install

    install()


_register_domains()


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()

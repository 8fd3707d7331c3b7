"""The ``driftwarden`` command line.

Imports stay light: TensorFlow loads only inside the commands that need it, and a domain's commands are
registered only when they are used. Importing every domain's ``cli`` module (and through them SQLAlchemy,
the training data generator, ...) costs about a quarter of a CPU-second, which ``driftwarden drift`` in a CI
job should not pay: the root knows which module adds which command (:data:`DOMAINS`), ``driftwarden CMD``
imports only CMD's module, ``driftwarden --help`` lists them from :data:`LISTED` (their help's first
paragraph) without importing any, and only a mistyped name (its suggestions) imports them all. The settings
load only when a command reads them.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import sys
from collections.abc import Iterator, MutableMapping
from typing import Annotated, Any, NoReturn, get_origin

import typer
import typer.main
from typer._click.core import Context as ClickContext  # typer vendors its own click
from typer._click.exceptions import NoArgsIsHelpError, UsageError
from typer.core import TyperGroup

from core.auth import SCOPES_LISTED
from core.bounds import MAX_CLUSTER_WORKERS, MAX_EPOCHS, MAX_GENERATED_ROWS, MAX_SEED
from core.cli_options import json_argv
from core.errors import DomainError
from core.logs import quiet_tensorflow, quiet_tensorflow_banner
from core.terminal import set_quiet
from service.cli_habits import QUIET_HELP, add_habits


class _Root(TyperGroup):
    """The root command: any error ends a command with one line on stderr and exit code 2.

    A usage error (a missing or unknown option, a bad value) is click's message and where the help is. A
    domain error (bad input, a missing model, an old schema) says what is wrong and how to fix it. Anything
    else is a bug: one line naming it, still exit 2, so that a CI gate never reads a crash as `drift`'s 1
    ("drifted"). ``driftwarden --debug ...`` re-raises the last two, with their traceback.

    The help of every command is tidied here, once (:func:`_tidy`), rather than in each domain's ``cli``; a
    bare ``--json`` becomes ``--json -`` here, before any parsing (:func:`core.cli_options.json_argv`).
    """

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        try:
            return super().make_context(info_name, json_argv(args), parent=parent, **extra)
        except NoArgsIsHelpError:
            raise  # `driftwarden` alone: the help
        except UsageError as exc:  # `driftwarden --bogus`
            _usage_error(exc)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        _tidy(self, ctx, recurse=False)  # the commands it lists show their first sentence only
        super().format_help(ctx, formatter)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None:
            _tidy(command, ctx)
        if name in PUBLISHING:
            _install_alerts()  # only for these: importing the alerts (ORM, models) costs ~0.45 s of start-up
        return name, command, rest

    def invoke(self, ctx: Any) -> Any:  # typer vendors its own click: its Context type is private
        try:
            return super().invoke(ctx)
        except NoArgsIsHelpError:
            raise  # a group without its subcommand (`driftwarden models`): its help
        except UsageError as exc:
            _usage_error(exc)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise  # exits, aborts and click's other errors: click answers them itself
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
            if (bad := _settings_error(exc) or _database_error(exc)) is not None:  # the environment's fault
                typer.echo(bad, err=True)
                raise typer.Exit(2) from None
            message = str(exc).splitlines()[0] if str(exc) else ""
            typer.echo(
                f"error: unexpected {type(exc).__name__}: {message} (a bug: rerun with `driftwarden --debug "
                "...` for the traceback and report it)",
                err=True,
            )
            raise typer.Exit(2) from None
        finally:
            set_quiet(False)  # --quiet lasts one invocation (a process may run several: tests, notebooks)


def _usage_error(exc: UsageError) -> NoReturn:
    """Print ``exc`` as one line naming the command's help (not click's usage box) and exit with its code."""
    message = " ".join(exc.format_message().split("\n")).removesuffix(".")  # "Missing option '--x'."
    message = message.replace("Value error, ", "")  # pydantic's prefix of a check's ValueError
    where = exc.ctx or _failing_context(exc)
    if where is not None and where.command.get_help_option(where) is not None:
        message += f" (see `{where.command_path} {where.help_option_names[0]}`)"
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(exc.exit_code) from None


def _failing_context(exc: UsageError) -> ClickContext | None:
    """The context of the command whose arguments ``exc`` refused, when click raised it without one.

    Click's parser raises some errors (`Option '--ttl' requires an argument`) bare; the innermost frame
    of their traceback that holds a ``ctx`` is the command's ``parse_args``.
    """
    found: ClickContext | None = None
    tb = exc.__traceback__
    while tb is not None:
        ctx = tb.tb_frame.f_locals.get("ctx")
        if isinstance(ctx, ClickContext):
            found = ctx
        tb = tb.tb_next
    return found


_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_LIST_ITEM = re.compile(r"[-*•]\s|\d{1,2}[.)]\s")  # "- x", "* x", "• x", "1. x", "2) x"


def _reflow_paragraph(paragraph: str) -> str:
    """``paragraph`` on one line, or one line per item when its lines start a list (``- ``, ``1. ``, ...).

    An item's own continuation lines join it; the text before the first item is a line of its own.
    """
    lines: list[str] = []
    for i, raw in enumerate(paragraph.splitlines()):
        line = raw.strip()
        if i == 0 or _LIST_ITEM.match(line):
            lines.append(line)
        else:
            lines[-1] = f"{lines[-1]} {line}" if lines[-1] else line
    return "\n".join(lines)


def _reflow(text: str) -> str:
    """``text`` with each paragraph on one line: the terminal wraps it, not the source's line breaks.

    Blank lines still separate paragraphs, and a list's items stay one per line; a paragraph starting with
    ``\\b`` keeps its lines (click's mark for preformatted text), and what follows ``\\f`` (hidden from the
    help) is left as it is.
    """
    shown, cut, hidden = inspect.cleandoc(text).partition("\f")
    paragraphs = [
        part if part.startswith("\b") else _reflow_paragraph(part)
        for part in _PARAGRAPH_BREAK.split(shown.strip("\n"))
    ]
    return "\n\n".join(paragraphs) + cut + hidden


def _tidy(command: Any, ctx: Any, *, recurse: bool = True) -> None:
    """Make ``command``'s help (and its subcommands') read well at any terminal width.

    Typer's rich help keeps the newlines of a docstring's later paragraphs, so a paragraph broke where the
    source did (`...and always` / `stopped.`) at every width: its paragraphs are reflowed. It also shows a
    value type for flags, which take none (`--help <bool>`): a flag's type column is left empty.
    """
    if command.help:
        command.help = _reflow(command.help)
    for param in command.get_params(ctx):  # with the help option (made for a context, on first use)
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""  # what typer shows instead of the type
    if recurse:
        for sub in getattr(command, "commands", {}).values():
            _tidy(sub, ctx)


def _database_error(exc: BaseException) -> str | None:
    """One line when ``exc`` is the database being unreachable or its URL unusable, else None."""
    errors = sys.modules.get("sqlalchemy.exc")  # not imported: the error cannot be the database's
    if errors is None:
        return None
    if isinstance(exc, errors.OperationalError | errors.InterfaceError):  # connection refused, locked, ...
        reason = (str(exc.orig) if exc.orig is not None else str(exc)).splitlines()[0]
        return (
            f"error: the database did not answer: {reason} (check DRIFTWARDEN_DATABASE_URL and that the "
            "server is up and accepts this user)"
        )
    if isinstance(exc, errors.NoSuchModuleError | errors.ArgumentError):
        reason = str(exc).splitlines()[0]
        return (
            f"error: DRIFTWARDEN_DATABASE_URL is not a database URL this install can open ({reason}): e.g. "
            "sqlite:///var/driftwarden.db or postgresql+psycopg://user@host:5432/dbname"
        )
    return None


def _settings_error(exc: BaseException) -> str | None:
    """One line per invalid setting when ``exc`` is the settings refusing the environment, else None.

    Each line names the whole variable (``DRIFTWARDEN_SERVE_MODELS``), also for an item of a list setting,
    and never echoes its value: several settings are secrets.
    """
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from core.config import Settings, env_var

    fix = "(fix or unset that environment variable)"
    if isinstance(exc, SettingsError):  # a list or object setting whose value is not JSON
        named = re.search(r'field "(\w+)"', str(exc))
        if named is None:
            return None
        cause = f" ({str(exc.__cause__).splitlines()[0]})" if exc.__cause__ is not None else ""
        info = Settings.model_fields.get(named[1])
        example = ': write a list as ["a", "b"]' if info and get_origin(info.annotation) is list else ""
        return f"error: invalid setting {env_var(named[1])}: not valid JSON{cause}{example} {fix}"
    if not isinstance(exc, ValidationError) or exc.title != "Settings":
        return None
    lines = []
    for err in exc.errors(include_input=False, include_url=False):
        message = err["msg"].removeprefix("Value error, ")  # pydantic's prefix of a validator's ValueError
        if err["loc"]:
            field, *inside = err["loc"]  # a list setting's item: ("serve_models", 1)
            where = "".join(f"item {part + 1}: " if isinstance(part, int) else f"{part}: " for part in inside)
            lines.append(f"error: invalid setting {env_var(str(field))}: {where}{message} {fix}")
            continue
        # a check of the whole settings (a model validator) has no field: name the variables its message does
        names = list(dict.fromkeys(re.findall(r"\bDRIFTWARDEN_[A-Z0-9_]*[A-Z0-9]", message)))
        fix = (
            f"fix or unset {' or '.join(names)}" if names else "check the DRIFTWARDEN_* environment variables"
        )
        lines.append(f"error: invalid setting{'s' if len(names) != 1 else ''}: {message} ({fix})")
    return "\n".join(lines)


# The module of each domain whose ``register(app)`` adds the root commands named here, in the order the
# root's help lists them (commands before groups, as typer lists them). tests/service/test_cli_root.py checks
# it against what each ``register`` adds; a name missing here is still found, by importing every domain.
DOMAINS: dict[str, tuple[str, ...]] = {
    "training.imports.cli": ("models",),
    "training.cluster.cli": ("train", "data", "cluster"),
    "training.retraining.cli": ("worker", "jobs"),
    "service.serving.cli": ("serve",),
    "service.predictions_cli": ("predictions",),
    "monitors.cli": ("drift", "report", "monitor", "reports"),
    "alerts.cli": ("alerts", "webhooks"),
    "access.cli": ("tokens",),
}


def domain_commands(module: str) -> dict[str, Any]:
    """The click commands that ``module``'s ``register(app)`` adds to a root, by name."""
    sub = typer.Typer()
    importlib.import_module(module).register(sub)
    return dict(typer.main.get_group(sub).commands)


class _DomainCommands(MutableMapping[str, Any]):
    """The root's commands: its own, and each domain's, imported the first time one of them is looked up.

    Iterating (``--help``, completion, suggestions for a mistyped name) imports every domain and gives the
    names in the order an eager registration gives them.
    """

    def __init__(self, own: MutableMapping[str, Any]) -> None:
        self._own = dict(own)
        for name, command in self._own.items():
            add_habits(command, name)  # --quiet and the exit codes, as the domains' commands get them
        self.own = self._own  # the root's own commands (config, demo, db, ...)
        self._domains: dict[str, dict[str, Any]] = {}  # module -> its commands, once imported

    def _load(self, module: str) -> None:
        if module not in self._domains:
            self._domains[module] = domain_commands(module)
            for name, command in self._domains[module].items():
                add_habits(command, name)

    def _everything(self) -> list[tuple[str, Any]]:
        for module in DOMAINS:
            self._load(module)
        found = [*self._own.items(), *(kv for module in DOMAINS for kv in self._domains[module].items())]
        return sorted(found, key=lambda kv: isinstance(kv[1], TyperGroup))  # stable: commands, then groups

    def __getitem__(self, name: str) -> Any:
        if name in self._own:
            return self._own[name]
        for module, names in DOMAINS.items():
            if name in names:
                self._load(module)
                if name in self._domains[module]:
                    return self._domains[module][name]
        return dict(self._everything())[name]  # not in the table: look in every domain (KeyError if none)

    def __setitem__(self, name: str, command: Any) -> None:
        self._own[name] = command

    def __delitem__(self, name: str) -> None:
        dict(self._everything())[name]  # KeyError when there is no such command
        for commands in (self._own, *self._domains.values()):
            commands.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter([name for name, _ in self._everything()])

    def __len__(self) -> int:
        return len(self._everything())


# What the root's help lists for each domain's command (the first paragraph of its help; whether it is a
# group), so that `driftwarden --help` imports no domain: tests/service/test_cli_root.py keeps each entry
# equal to the command's own help and the listing equal to the one the imported commands give.
LISTED: dict[str, tuple[str, bool]] = {
    "models": ("The model registry: list, show, promote, roll back, label and reject versions.", True),
    "train": ("Train MODEL on a TensorFlow cluster and register a new (staged) version.", False),
    "worker": (
        "Run retraining jobs from the queue until interrupted (the worker of the training machines).",
        False,
    ),
    "data": ("Synthetic data sets with planted drift.", True),
    "cluster": ("TensorFlow cluster nodes.", True),
    "jobs": ("Retraining jobs: list, show, cancel and submit. `driftwarden worker` runs them.", True),
    "serve": (
        "Serve the registry's models over TF Serving REST (/v1) and Open Inference Protocol v2 (/v2).",
        False,
    ),
    "predictions": ("The prediction log.", True),
    "drift": (
        "Compare two tabular files (or a registered profile and a file): exit 0 when stable, 1 when drifted.",
        False,
    ),
    "monitor": (
        "Evaluate drift of every serving model every interval, as its own process (or once with --once).",
        True,
    ),
    "report": (
        "Write MODEL's HTML drift report for a period of stored runs: the newest run and its history.",
        False,
    ),
    "reports": ("The served HTML drift reports (GET /reports/MODEL/drift): links a browser can open.", True),
    "alerts": (
        "Alerts on drift, performance, data quality and health: list them, show and apply rules, silence.",
        True,
    ),
    "webhooks": ("Signed outgoing webhooks (Standard Webhooks): subscriptions and their deliveries.", True),
    "tokens": (
        f"Scoped bearer tokens for the API ({SCOPES_LISTED}): create, list, revoke; and the key of the "
        "signed report links (rotate-link-key).",
        True,
    ),
}


def _listing(commands: _DomainCommands) -> dict[str, Any]:
    """The root's commands as its help lists them: its own, and a stand-in per domain command (LISTED)."""
    from typer.core import TyperCommand

    stand_ins = {
        name: TyperGroup(name=name, help=text) if group else TyperCommand(name=name, help=text)
        for names in DOMAINS.values()
        for name in names
        for text, group in [LISTED[name]]
    }
    found = [*commands.own.items(), *stand_ins.items()]
    return dict(sorted(found, key=lambda kv: isinstance(kv[1], TyperGroup)))  # stable: commands, then groups


class _LazyRoot(_Root):
    """The real root: the domains' commands come from :class:`_DomainCommands`; its help lists them from
    :data:`LISTED` without importing them."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.commands = _DomainCommands(self.commands)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        commands = self.commands
        if isinstance(commands, _DomainCommands):
            self.commands = _listing(commands)
        try:
            super().format_help(ctx, formatter)
        finally:
            self.commands = commands


app = typer.Typer(
    name="driftwarden",
    cls=_LazyRoot,
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
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help=QUIET_HELP)] = False,
) -> None:
    """Production monitoring and drift detection for TensorFlow models."""
    ctx.meta["driftwarden.debug"] = debug
    set_quiet(quiet)  # for this invocation; a command's own --quiet (added by add_habits) sets it too
    quiet_tensorflow()  # before any command loads TensorFlow, here or in the processes it starts


@app.command("config")
def config_cmd() -> None:
    """Print the effective settings as JSON (passwords masked)."""
    from core.config import get_settings

    typer.echo(json.dumps(get_settings().masked(), indent=2))


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument(help="Target revision.")] = "head") -> None:
    """Apply migrations to DRIFTWARDEN_DATABASE_URL (creates SQLite files as needed)."""
    from core import migrate
    from core.config import get_settings

    url = get_settings().database_url.get_secret_value()
    migrate.upgrade(url, revision)
    typer.echo(f"database at revision {migrate.current(url)}")


@db_app.command("current")
def db_current() -> None:
    """Print the database's migration revision."""
    from core import migrate
    from core.config import get_settings

    typer.echo(migrate.current(get_settings().database_url.get_secret_value()) or "(not migrated)")


@app.command("demo")
def demo(
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help="Model name to train and serve; when an earlier run left one of that name (in ./var or the "
            "database), the run uses the first free NAME-2, NAME-3, ... and says so.",
        ),
    ] = "credit",
    rows: Annotated[
        int, typer.Option("--rows", min=1000, max=MAX_GENERATED_ROWS, help="Rows per generated data set.")
    ] = 20_000,
    workers: Annotated[
        int, typer.Option("--workers", min=1, max=MAX_CLUSTER_WORKERS, help="Cluster workers.")
    ] = 2,
    epochs: Annotated[
        float, typer.Option("--epochs", min=0.1, max=MAX_EPOCHS, help="Training epochs.")
    ] = 3.0,
    seed: Annotated[
        int, typer.Option("--seed", min=0, max=MAX_SEED, help="Seed for the data and training.")
    ] = 0,
    verbose: Annotated[
        bool, typer.Option("--verbose", help="Show the log records here too (they go to var/demo/demo.log).")
    ] = False,
) -> None:
    """The end-to-end tour on the embedded default: data -> cluster training -> registry -> serving.

    Writes under ./var (SQLite database, registry, checkpoints, demo data, the tour's log); needs no Docker.
    """
    from core.logs import log_to_file
    from service.demo import LOG_FILE, run_demo

    log_to_file(LOG_FILE, verbose=verbose)
    quiet_tensorflow_banner()
    from core.config import get_settings

    run_demo(settings=get_settings(), model=model, rows=rows, workers=workers, epochs=epochs, seed=seed)


PUBLISHING = {"monitor", "worker", "jobs"}  # commands whose monitor runs or finished jobs raise alerts


def _install_alerts() -> None:
    """Monitor runs of `driftwarden monitor` and jobs finished by `driftwarden worker` raise alerts too."""
    from alerts.flows import install

    install()


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()

"""What every ``driftwarden`` command does the same way: ``--quiet`` / ``-q`` and its exit codes.

The root command adds both to each command when it loads it (:func:`add_habits`), so no domain declares
them: ``--quiet`` silences the notes, progress bars and info lines on standard error (errors and standard
output stay), and the help ends with the command's exit codes from :data:`EXIT_CODES`, the one table that
docs/cli.md shows (tests/service/test_cli_habits.py keeps the two equal). ``--json [PATH|-]`` is declared by
each command that prints a document, with the one declaration of :mod:`core.cli_options`.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
import typer.main

from core.terminal import set_quiet

QUIET_HELP = "Print nothing on standard error but errors (no progress, notes or info lines)."

# The exit codes every command shares; a command's own entry in EXIT_CODES adds to them, rewords them, or
# drops one (None).
COMMON_EXIT_CODES: dict[int, str] = {
    0: "success",
    2: "usage or input error: one line on stderr says what and how to fix it (`driftwarden --debug ...` for "
    "the traceback)",
    130: "interrupted (Ctrl-C)",
    141: "standard output closed before the command finished (the reader of a pipe stopped, e.g. `head`)",
}
STOPPED = "stopped by Ctrl-C or SIGTERM"
EXIT_CODES: dict[str, dict[int, str | None]] = {
    "drift": {
        0: "no drift: the dataset is stable",
        1: "the dataset drifted",
        2: "usage or input error, no verdict: a missing, empty or unreadable file, fewer rows than "
        "--min-rows, an unknown column, an all-missing column, an invalid --config or --schema, an "
        "unwritable --json or --html; one line on stderr says what and how to fix it",
    },
    "monitor": {
        0: "with --once: every model was evaluated and none drifted (a model with too few predictions in "
        "its window is reported as skipped); without: stopped by Ctrl-C",
        1: "with --once: at least one model's dataset drifted",
        2: "a model could not be evaluated (no serving version, no profile, a broken monitor.json, a --model "
        "that is not serving, too few predictions with --fail-on-skip, ...) or there is no model to "
        "monitor; the error line names each model and why (this wins over 1)",
        130: "--backfill interrupted (Ctrl-C)",
    },
    "train": {1: "training failed (a lost node, a timeout): the last checkpoint is kept, rerun to resume"},
    "worker": {
        0: f"{STOPPED} (the running job is given back to the queue); with --once: no job was waiting, or "
        "the job ended promoted or passed",
        1: "with --once: the job ended undecided, rejected, failed or cancelled, or was given back",
        130: "a second Ctrl-C: stopped at once",
    },
    "serve": {0: STOPPED, 130: None},
    "cluster chief": {3: "a parameter server was lost (`driftwarden train` restarts the chief)"},
    "report": {
        0: "the page was written",
        2: "no page: an unknown model, no run in the period, a bad --since, an unwritable --out (one line on "
        "stderr says which)",
    },
    "predictions purge": {1: "nothing deleted: the confirmation was answered no"},
}


def exit_codes(path: str) -> dict[int, str]:
    """The exit codes of the command at ``path`` (``"alerts backtest"``), by code."""
    codes: dict[int, str | None] = {**COMMON_EXIT_CODES, **EXIT_CODES.get(path, {})}
    return {code: codes[code] for code in sorted(codes) if codes[code] is not None}  # type: ignore[misc]


EPILOG_TITLE = "[b]Exit codes[/b]"


def exit_codes_epilog(path: str) -> str:
    """The last block of the command's help: one paragraph per exit code (rich joins single lines)."""
    return "\n\n".join([EPILOG_TITLE, *(f"{code}  {text}" for code, text in exit_codes(path).items())])


def _quiet(ctx: typer.Context, value: bool) -> None:
    if value:
        set_quiet(True)


def _probe(
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help=QUIET_HELP, callback=_quiet, expose_value=False)
    ] = False,
) -> None:
    """Only its option is used."""


def quiet_option() -> Any:
    """A new ``--quiet`` / ``-q`` click option, made by typer as a declared one would be."""
    probe = typer.Typer()
    probe.command()(_probe)
    return typer.main.get_command(probe).params[0]


def runs(command: Any) -> bool:
    """Whether ``command`` runs something itself: a command, or a group that runs without a subcommand."""
    return not hasattr(command, "commands") or bool(getattr(command, "invoke_without_command", False))


def add_habits(command: Any, path: str) -> None:
    """Give ``command`` (at ``path``) and its subcommands ``--quiet`` and the exit codes in their help."""
    if runs(command):
        if not any(getattr(p, "name", None) == "quiet" for p in command.params):
            command.params.append(quiet_option())
        epilog = exit_codes_epilog(path)
        if EPILOG_TITLE not in (command.epilog or ""):
            command.epilog = f"{command.epilog}\n\n{epilog}" if command.epilog else epilog
    for name, sub in getattr(command, "commands", {}).items():
        add_habits(sub, f"{path} {name}")

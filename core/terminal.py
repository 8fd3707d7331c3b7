"""Rich consoles that stay readable when the output is piped or captured, and quiet when asked.

On a terminal rich fits tables to its width. Piped or captured (CI logs, ``| less``, a test), rich assumes
80 columns and cuts cells ("statis…"); here such a console is wide instead, so nothing is cut. ``COLUMNS``
still wins when set.

``--quiet`` (every command, docs/cli.md) sets one flag here (:func:`set_quiet`): a console on standard error
then prints nothing (progress bars, notes, info lines), and :func:`note` drops its line. Errors are printed
by the root command, never through these, so they still show; standard output is never silenced.
"""

from __future__ import annotations

import os
import sys

from rich.console import Console

PIPED_WIDTH = 200

_quiet = False  # set by the root command for each invocation


def set_quiet(quiet: bool) -> None:
    """Silence (or not) what the commands print on standard error besides errors."""
    global _quiet
    _quiet = quiet


def is_quiet() -> bool:
    """Whether ``--quiet`` was given to the running command."""
    return _quiet


def make_console(*, stderr: bool = False) -> Console:
    """A console on stdout (or stderr): the terminal's width, or ``PIPED_WIDTH`` when not a terminal.

    A console on stderr prints nothing under ``--quiet``.
    """
    stream = sys.stderr if stderr else sys.stdout
    width = None
    if not os.environ.get("COLUMNS") and not stream.isatty():
        width = PIPED_WIDTH
    return Console(stderr=stderr, width=width, quiet=stderr and _quiet)


def note(text: str) -> None:
    """One informational line on standard error (not an error), unless ``--quiet``."""
    if not _quiet:
        print(text, file=sys.stderr, flush=True)

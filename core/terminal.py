"""Rich consoles that stay readable when the output is piped or captured.

On a terminal rich fits tables to its width. Piped or captured (CI logs, ``| less``, a test), rich assumes
80 columns and cuts cells ("statis…"); here such a console is wide instead, so nothing is cut. ``COLUMNS``
still wins when set.
"""

from __future__ import annotations

import os
import sys

from rich.console import Console

PIPED_WIDTH = 200


def make_console(*, stderr: bool = False) -> Console:
    """A console on stdout (or stderr): the terminal's width, or ``PIPED_WIDTH`` when not a terminal."""
    stream = sys.stderr if stderr else sys.stdout
    width = None
    if not os.environ.get("COLUMNS") and not stream.isatty():
        width = PIPED_WIDTH
    return Console(stderr=stderr, width=width)

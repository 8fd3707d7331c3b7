"""Log set-up for every command: one line per record on stderr, library chatter kept at WARNING."""

from __future__ import annotations

import logging
import sys

from core.config import get_settings

NOISY = ("absl", "tensorflow", "alembic")  # INFO chatter of libraries (export, migrations)


def setup_logging(level: str | None = None, *, driftwarden_level: str | None = None) -> None:
    """One-line log records on stderr (rich on a terminal, so progress bars stay intact)."""
    if sys.stderr.isatty():
        from rich.logging import RichHandler

        logging.basicConfig(
            level=level or get_settings().log_level,
            format="%(name)s %(message)s",
            handlers=[RichHandler(show_path=False)],
        )
    else:
        logging.basicConfig(
            level=level or get_settings().log_level,
            format="%(asctime)s %(levelname)s %(name)s %(message)s",
        )
    for noisy in NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if driftwarden_level:
        logging.getLogger("driftwarden").setLevel(driftwarden_level)

"""Log set-up for every command: one line per record on stderr, library chatter kept at WARNING."""

from __future__ import annotations

import logging
import os
import sys

from core.config import get_settings

NOISY = ("absl", "tensorflow", "alembic")  # INFO chatter of libraries (export, migrations)
# TensorFlow's C++ logs are configured from the environment when TensorFlow loads, so these must be set before
# its first import (every command calls setup_logging first). An operator's own values win.
TF_QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "1"}  # no C++ INFO lines (cpu_feature_guard, ...)


def quiet_libraries() -> None:
    """Keep TensorFlow, absl and alembic INFO lines out of command output (warnings still show)."""
    for name, value in TF_QUIET_ENV.items():
        os.environ.setdefault(name, value)
    for noisy in NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)


def quiet_tensorflow_banner() -> None:
    """For commands whose output a person reads (``train``, ``demo``): no oneDNN banner.

    TF 2.21 prints "oneDNN custom operations are on" whatever ``TF_CPP_MIN_LOG_LEVEL`` says; only turning
    the oneDNN kernels off removes it. Training these small networks is as fast without them, but serving
    at high concurrency is not (``bench/serve.py``: ~5-10 % fewer requests/s at c=64), so ``serve`` keeps
    them and prints the one line at start. An operator's own value wins.
    """
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")


def setup_logging(level: str | None = None, *, driftwarden_level: str | None = None) -> None:
    """One-line log records on stderr (rich on a terminal, so progress bars stay intact)."""
    quiet_libraries()
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
    if driftwarden_level:
        logging.getLogger("driftwarden").setLevel(driftwarden_level)

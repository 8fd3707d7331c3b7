"""Log set-up for every command: one line per record on stderr, library chatter kept at WARNING."""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path

NOISY = ("absl", "tensorflow", "alembic")  # INFO chatter of libraries (export, migrations)
# TensorFlow's C++ logs are configured from the environment when TensorFlow loads, so these must be set before
# its first import: the root command sets them before any command runs (``quiet_tensorflow``), so every
# command, ``serve`` and its workers, and the cluster processes they start (which inherit the environment)
# load TensorFlow quietly. An operator's own values win.
TF_QUIET_ENV = {
    "TF_CPP_MIN_LOG_LEVEL": "1",  # no C++ INFO lines ("To enable the following instructions: AVX2 ...")
    # TF 2.21 prints "oneDNN custom operations are on" (and absl's "All log messages before
    # absl::InitializeLog()") whatever TF_CPP_MIN_LOG_LEVEL says; only turning the oneDNN kernels off removes
    # them. Training these small networks is as fast without them; serving at high concurrency is ~5-10 %
    # slower (bench/serve.py at c=64): an operator who wants them sets TF_ENABLE_ONEDNN_OPTS=1 (one banner
    # line at start).
    "TF_ENABLE_ONEDNN_OPTS": "0",
}


_URL_SECRET = re.compile(r"([?&](?:token|signature)=)[^&\s\"'#]+")
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/\s:@]*:)[^/\s@]+@", re.IGNORECASE)


class MaskUrlSecrets(logging.Filter):
    """Masks a credential carried in a URL (``?token=``, a signed link's ``signature=``, the password of
    ``scheme://user:pw@host``, which httpx's request lines carry) in every record a handler writes:
    ``POST /v1/cloudevents?model=m&token=***``, ``POST http://user:***@host/hook``."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = _URL_PASSWORD.sub(r"\1***@", _URL_SECRET.sub(r"\1***", message))
        if masked != message:
            record.msg, record.args = masked, None
        return True


MASK = MaskUrlSecrets()


def mask_secrets(handler: logging.Handler) -> logging.Handler:
    """``handler`` with :class:`MaskUrlSecrets` (once)."""
    handler.addFilter(MASK)
    return handler


def quiet_libraries() -> None:
    """Keep TensorFlow, absl and alembic INFO lines out of command output (warnings still show)."""
    quiet_tensorflow()
    for noisy in NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)


def quiet_tensorflow() -> None:
    """TensorFlow's start-up banners (CPU instructions, oneDNN, absl) kept out of every output and log: the
    environment of :data:`TF_QUIET_ENV`, set before TensorFlow's first import (an operator's values win)."""
    for name, value in TF_QUIET_ENV.items():
        os.environ.setdefault(name, value)


quiet_tensorflow_banner = quiet_tensorflow  # the name the commands that load TensorFlow called first


def setup_logging(level: str | None = None, *, driftwarden_level: str | None = None) -> None:
    """One-line log records on stderr (rich on a terminal, so progress bars stay intact); warnings and
    errors only under ``--quiet``."""
    from core.terminal import is_quiet

    quiet_libraries()
    if is_quiet():
        level, driftwarden_level = "WARNING", None
    if sys.stderr.isatty():
        from rich.logging import RichHandler

        logging.basicConfig(
            level=level or _configured_level(),
            format="%(name)s %(message)s",
            handlers=[RichHandler(show_path=False)],
        )
    else:
        logging.basicConfig(
            level=level or _configured_level(),
            format="%(asctime)s %(levelname)s %(name)s %(message)s",
        )
    for handler in logging.getLogger().handlers:
        mask_secrets(handler)
    if driftwarden_level:
        logging.getLogger("driftwarden").setLevel(driftwarden_level)


def log_to_file(path: Path, *, verbose: bool = False) -> None:
    """For a command whose own output is the story (``demo``): its log records go to ``path``, not between
    the lines of the story.

    The file (written anew) holds driftwarden's INFO records and everyone's warnings, one timestamped line
    each. stderr shows only warnings and errors, as one line without a timestamp; with ``verbose`` it shows
    every record as :func:`setup_logging` does.
    """
    if verbose:
        setup_logging("WARNING", driftwarden_level="INFO")
    else:
        quiet_libraries()
        console = logging.StreamHandler()
        console.setLevel(logging.WARNING)
        console.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logging.basicConfig(level=logging.WARNING, handlers=[mask_secrets(console)])
        logging.getLogger("driftwarden").setLevel(logging.INFO)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    # appending: a handler closed by a later logging.config.dictConfig (uvicorn's, when a server starts in
    # the process) reopens its file at the next record; one opened to write anew ("w") would drop them all
    file = logging.FileHandler(path, mode="a", encoding="utf-8")
    file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.getLogger().addHandler(mask_secrets(file))


def _configured_level() -> str:
    """``DRIFTWARDEN_LOG_LEVEL`` as the settings read it (imported here: the settings cost ~0.2 s to load)."""
    from core.config import get_settings

    return get_settings().log_level

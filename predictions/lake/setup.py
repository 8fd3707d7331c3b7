"""Opening the lake sink from the settings (``lake_url``, ``lake_mode``, ``lake_roll_bytes``, ...).

What happens with a lake that is not right at start, chosen for the on-call engineer:

- ``lake_mode`` also/only without ``lake_url``, a URL of another kind, a local folder that does not exist:
  a configuration mistake that no wait will fix: the process refuses to start with one line naming the
  setting and the path (:class:`~core.errors.Invalid`, exit 2).
- A folder that exists but cannot be written, an S3 endpoint or bucket that refuses: a serving process
  starts anyway (the rows wait in the sink's spool, the ``lake`` health check fails naming the lake and
  the error, and the rows are committed once it answers), as it does with the database down. A command
  (``predictions import``, ``predictions export``) checks first and stops with one line (exit 2) instead
  (``strict=True``).
"""

from __future__ import annotations

import logging

from core.config import Settings
from core.errors import Invalid, Unavailable
from predictions.lake.files import Lake, check_writable, open_lake
from predictions.lake.sink import LakeSink
from predictions.spool import Spool, spool_dir

log = logging.getLogger("driftwarden.predictions.lake")


def lake_target(cfg: Settings) -> Lake | None:
    """The lake the settings name (None: ``lake_mode`` off); raises :class:`Invalid` for a bad setting."""
    if cfg.lake_mode == "off":
        return None
    if not cfg.lake_url:
        raise Invalid(f"lake_mode={cfg.lake_mode} needs lake_url (a folder or s3://bucket/prefix)")
    return open_lake(cfg.lake_url)


def open_sink(cfg: Settings, *, strict: bool) -> LakeSink | None:
    """The process's lake sink, its write-ahead spool slot claimed (None: ``lake_mode`` off).

    ``strict``: a lake that cannot be written raises :class:`Unavailable` (commands); otherwise it is logged
    and the sink starts, keeping rows in its spool until the lake answers (serving)."""
    target = lake_target(cfg)
    if target is None:
        return None
    try:
        check_writable(target)
    except Unavailable as exc:
        if strict:
            raise
        log.error("%s; rows wait in the lake's spool until it can be written", exc)
    # the sink's write-ahead spool: spool_path/lake/<hash of the lake's URL>, a slot per process
    wal = Spool.claim(spool_dir(cfg.spool_path / "lake", target.url), max_bytes=cfg.spool_max_bytes)
    return LakeSink(target=target, wal=wal, roll_bytes=cfg.lake_roll_bytes, roll_s=cfg.lake_roll_s)

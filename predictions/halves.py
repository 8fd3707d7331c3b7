"""The local spool of CloudEvent halves that could not reach the pairing table (the database down).

KServe's logger never retries a failed POST, so a half is accepted while the database is down: written to
one file of its own (``<nanoseconds>-<uuid>.half``, JSON, the body in base64), fsynced, then answered. A
replay (:meth:`HalfSpool.claim`) takes files in arrival order by renaming each to ``.claimed-<pid>`` (so of
several processes sharing the folder exactly one takes it), offers them again and removes each once the
database took it (:meth:`done`), or gives it back (:meth:`release`). Files claimed by a process that is gone
are taken back by the next claim.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import time
import uuid
from datetime import datetime
from pathlib import Path

import orjson

from core.lifecycle import process_alive
from predictions.service.pairing import Arrival

log = logging.getLogger("driftwarden.predictions.halves")

SUFFIX = ".half"
_CLAIMED = ".claimed-"


class HalfSpool:
    """One folder of spooled halves, shared by the processes of one server."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def put(self, arrival: Arrival) -> Path:
        """Write ``arrival`` durably (fsync of the file and the folder) before it is answered."""
        document = {
            "model_name": arrival.model_name,
            "event_id": arrival.event_id,
            "half": arrival.half,
            "body": base64.b64encode(arrival.body).decode(),
            "time": arrival.time.isoformat(),
            "received_at": arrival.received_at.isoformat(),
        }
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex}{SUFFIX}"
        tmp = self.directory / f".{name}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(orjson.dumps(document))
            fh.flush()
            os.fsync(fh.fileno())
        path = self.directory / name
        os.replace(tmp, path)
        _sync_dir(self.directory)
        return path

    def pending(self) -> int:
        """Halves waiting for the database (claimed ones included)."""
        return sum(1 for p in self.directory.iterdir() if p.name.endswith(SUFFIX) or _CLAIMED in p.name)

    def claim(self, limit: int = 200) -> list[tuple[Path, Arrival]]:
        """Take up to ``limit`` halves, oldest first (also those a process that is gone had claimed)."""
        self._take_back_orphans()
        taken: list[tuple[Path, Arrival]] = []
        for path in sorted(p for p in self.directory.iterdir() if p.name.endswith(SUFFIX))[:limit]:
            mine = path.with_name(f"{path.name}{_CLAIMED}{os.getpid()}")
            try:
                os.rename(path, mine)
            except FileNotFoundError:  # another process took it
                continue
            try:
                taken.append((mine, _read(mine)))
            except (OSError, ValueError, KeyError, TypeError) as exc:  # never offered again, kept to look at
                os.rename(mine, path.with_name(f"{path.name}.bad"))
                log.error(
                    "cloudevents: spooled half %s cannot be read (%s): moved to %s.bad", path, exc, path.name
                )
        return taken

    def done(self, path: Path) -> None:
        """The database took the half: forget it."""
        path.unlink(missing_ok=True)

    def release(self, path: Path) -> None:
        """Give a claimed half back (the database failed again)."""
        with contextlib.suppress(FileNotFoundError):
            os.rename(path, path.with_name(path.name.split(_CLAIMED)[0]))

    def _take_back_orphans(self) -> None:
        for path in self.directory.iterdir():
            _, sep, pid = path.name.partition(_CLAIMED)
            if sep and pid.isdigit() and int(pid) != os.getpid() and not process_alive(int(pid)):
                self.release(path)


def _read(path: Path) -> Arrival:
    document = orjson.loads(path.read_bytes())
    return Arrival(
        model_name=document["model_name"],
        event_id=document["event_id"],
        half=document["half"],
        body=base64.b64decode(document["body"]),
        time=datetime.fromisoformat(document["time"]),
        received_at=datetime.fromisoformat(document["received_at"]),
    )


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

"""The local spool of CloudEvent halves that could not reach the pairing table (the database down).

KServe's logger never retries a failed POST, so a half is accepted while the database is down: written to
one file of its own (``<nanoseconds>-<uuid>.half``, JSON, the body in base64), fsynced, then answered. A
replay (:meth:`HalfSpool.claim`) takes files in arrival order by renaming each to ``.claimed-<pid>`` (so of
several processes sharing the folder exactly one takes it), offers them again and removes each once the
database took it (:meth:`done`), or gives it back (:meth:`release`). Files claimed by a process that is gone
are taken back by the next claim. A half that cannot be read, or that the database refuses for its own
values, is set aside (``<name>.bad``, beside it ``<name>.bad.reason``) and never offered again.

``max_bytes`` (setting ``spool_max_bytes``, as the log's spool) caps the bytes of the halves waiting in the
folder: a half past it raises :class:`~predictions.spool.SpoolFull` and writes nothing (the caller answers
503 and counts its rows lost); a write the disk refuses leaves no file behind either.
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
from predictions.spool import SpoolFull

log = logging.getLogger("driftwarden.predictions.halves")

SUFFIX = ".half"
_CLAIMED = ".claimed-"


class HalfSpool:
    """One folder of spooled halves, shared by the processes of one server."""

    def __init__(self, directory: Path, *, max_bytes: int | None = None) -> None:
        self.directory = directory
        self.max_bytes = max_bytes  # cap on the bytes of the halves waiting here (None: the disk's size)
        directory.mkdir(parents=True, exist_ok=True)

    def put(self, arrival: Arrival) -> Path:
        """Write ``arrival`` durably (fsync of the file and the folder) before it is answered; raises
        :class:`SpoolFull` past ``max_bytes`` and the disk's ``OSError``, either way keeping nothing."""
        document = {
            "model_name": arrival.model_name,
            "event_id": arrival.event_id,
            "half": arrival.half,
            "body": base64.b64encode(arrival.body).decode(),
            "time": arrival.time.isoformat(),
            "received_at": arrival.received_at.isoformat(),
        }
        data = orjson.dumps(document)
        if self.max_bytes is not None and self.pending_bytes() + len(data) > self.max_bytes:
            raise SpoolFull(f"the spool of halves {self.directory} holds its cap of {self.max_bytes} bytes")
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex}{SUFFIX}"
        tmp = self.directory / f".{name}.tmp"
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)  # nothing half-written stays
            raise
        path = self.directory / name
        os.replace(tmp, path)
        _sync_dir(self.directory)
        return path

    def pending_bytes(self) -> int:
        """Bytes of the halves waiting for the database (claimed ones included; set-aside ones not)."""
        total = 0
        with os.scandir(self.directory) as entries:
            for entry in entries:
                if entry.name.endswith(SUFFIX) or _CLAIMED in entry.name:
                    with contextlib.suppress(FileNotFoundError):  # taken meanwhile
                        total += entry.stat().st_size
        return total

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
                self.set_aside(mine, f"cannot be read: {type(exc).__name__}: {exc}")
        return taken

    def set_aside(self, path: Path, reason: str) -> Path:
        """Never offer a claimed half again: ``<name>.bad``, its reason in ``<name>.bad.reason``."""
        bad = path.with_name(f"{path.name.split(_CLAIMED)[0]}.bad")
        os.rename(path, bad)
        with contextlib.suppress(OSError):
            bad.with_name(f"{bad.name}.reason").write_text(reason + "\n")
        log.error("cloudevents: spooled half set aside as %s: %s", bad, reason)
        return bad

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

"""Training progress: a rich progress bar on a terminal, plus one structured log line per update."""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress

from core.terminal import make_console

log = logging.getLogger("driftwarden.training")


class Progress:
    """Steps, loss and examples/s; the bar shows only when stderr is a terminal (logs always)."""

    def __init__(self, description: str, *, show_bar: bool | None = None) -> None:
        self.description = description
        self.show_bar = sys.stderr.isatty() if show_bar is None else show_bar
        self._bar: RichProgress | None = None
        self._task: TaskID | None = None
        self._t_last = time.monotonic()
        self.step = 0
        self.total = 0

    def start(self, total: int, initial: int) -> None:
        """Begin (or resume at ``initial``) a run of ``total`` steps."""
        self.total, self.step = total, initial
        self._t_last = time.monotonic()
        log.info(
            "train.start description=%r planned_steps=%d start_step=%d", self.description, total, initial
        )
        if self.show_bar and self._bar is None:
            self._bar = RichProgress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]}"),
                TextColumn("{task.fields[rate]} ex/s"),
                TimeElapsedColumn(),
                console=make_console(stderr=True),  # silent under --quiet
            )
            self._bar.start()
            self._task = self._bar.add_task(
                self.description, total=total, completed=initial, loss="-", rate="-"
            )

    def update(self, step: int, *, loss: float | None, examples: int, rate: float | None = None) -> None:
        """Record that the run reached ``step``, having processed ``examples`` since the last update."""
        now = time.monotonic()
        if rate is None:
            rate = examples / max(now - self._t_last, 1e-9)
        self._t_last = now
        self.step = step
        loss_txt = f"{loss:.4f}" if loss is not None else "-"
        log.info("train.progress step=%d/%d loss=%s examples_per_s=%.0f", step, self.total, loss_txt, rate)
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=step, loss=loss_txt, rate=f"{rate:,.0f}")

    def event(self, message: str, *args: object) -> None:
        """A notable event (checkpoint, resume, node lost, restart)."""
        log.info(message, *args)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


class ProgressFile:
    """The same calls as :class:`Progress`, written as JSON lines for the launching process to follow."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._t_last = time.monotonic()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(path, "a", buffering=1)  # noqa: SIM115 (closed in close())

    def _write(self, **record: object) -> None:
        self._fh.write(json.dumps(record) + "\n")

    def start(self, total: int, initial: int) -> None:
        self._t_last = time.monotonic()
        log.info("train.start planned_steps=%d start_step=%d", total, initial)
        self._write(kind="start", total=total, initial=initial)

    def update(self, step: int, *, loss: float | None, examples: int) -> None:
        now = time.monotonic()
        rate = examples / max(now - self._t_last, 1e-9)
        self._t_last = now
        log.info("train.progress step=%d loss=%s examples_per_s=%.0f", step, loss, rate)
        self._write(kind="update", step=step, loss=loss, examples=examples, rate=rate)

    def event(self, message: str, *args: object) -> None:
        text = message % args if args else message
        log.info(text)
        self._write(kind="event", message=text)

    def close(self) -> None:
        self._fh.close()


def follow(path: Path, progress: Progress, offset: int) -> int:
    """Apply the complete lines written to ``path`` since ``offset``; returns the new offset."""
    if not path.exists():
        return offset
    with open(path, "rb") as fh:
        fh.seek(offset)
        chunk = fh.read()
    end = chunk.rfind(b"\n")
    if end < 0:
        return offset
    for line in chunk[: end + 1].decode().splitlines():
        record = json.loads(line)
        kind = record.pop("kind")
        if kind == "start":
            progress.start(record["total"], record["initial"])
        elif kind == "update":
            progress.update(
                record["step"], loss=record["loss"], examples=record["examples"], rate=record.get("rate")
            )
        elif kind == "event":
            progress.event("%s", record["message"])
    return offset + end + 1

"""Training progress: a rich progress bar on a terminal, plus one structured log line per update."""

from __future__ import annotations

import logging
import sys
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn

log = logging.getLogger("driftwarden.training")


class Progress:
    """Steps, loss and examples/s; the bar shows only when stderr is a terminal (logs always)."""

    def __init__(self, description: str, *, show_bar: bool | None = None) -> None:
        self.description = description
        self.show_bar = sys.stderr.isatty() if show_bar is None else show_bar
        self._bar: RichProgress | None = None
        self._task: int | None = None
        self._t_last = time.monotonic()
        self.step = 0
        self.total = 0

    def start(self, total: int, initial: int) -> None:
        """Begin (or resume at ``initial``) a run of ``total`` steps."""
        self.total, self.step = total, initial
        self._t_last = time.monotonic()
        log.info("train.start description=%r planned_steps=%d start_step=%d", self.description, total, initial)
        if self.show_bar and self._bar is None:
            self._bar = RichProgress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]}"),
                TextColumn("{task.fields[rate]} ex/s"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
            )
            self._bar.start()
            self._task = self._bar.add_task(self.description, total=total, completed=initial, loss="-", rate="-")

    def update(self, step: int, *, loss: float | None, examples: int) -> None:
        """Record that the run reached ``step``, having processed ``examples`` since the last update."""
        now = time.monotonic()
        rate = examples / max(now - self._t_last, 1e-9)
        self._t_last = now
        self.step = step
        loss_txt = f"{loss:.4f}" if loss is not None else "-"
        log.info("train.progress step=%d/%d loss=%s examples_per_s=%.0f", step, self.total, loss_txt, rate)
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=step, loss=loss_txt, rate=f"{rate:,.0f}")

    def event(self, message: str, *args: object) -> None:
        """A notable event (checkpoint, resume, node lost, restart)."""
        if self._bar is not None:
            self._bar.console.log(message % args if args else message)
        log.info(message, *args)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

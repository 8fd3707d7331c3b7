"""What the API process hands every domain's routes and periodic jobs: settings and the database."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.config import Settings
from core.database import Database


@dataclass
class Runtime:
    """The process-wide handles a domain may use (``request.app.state.dw`` in routes).

    The API process (``service/``) fills in a subclass with what only it owns (loaded models, the log
    writer, metrics) and overrides the hooks below.
    """

    settings: Settings
    db: Database

    @property
    def leader_lock(self) -> Path | None:
        """Makes a periodic job run in one worker of ``serve --workers N`` (None: a single process)."""
        folder = self.settings.metrics_dir
        return None if folder is None else folder / "periodic-jobs.lock"

    def flush_predictions(self, timeout_s: float) -> None:
        """Make predictions answered so far visible to readers of the log (no-op without a log writer)."""

    def extra_findings(self, model_name: str) -> list[dict[str, Any]]:
        """Findings about a model that its drift report cannot know (the API process adds firing alerts):
        ``{"kind", "subject", "message"}`` each."""
        return []

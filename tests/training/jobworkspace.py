"""A training workspace whose commands run against a given database with job settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.training.helpers import Workspace


@dataclass
class JobWorkspace(Workspace):
    """A workspace whose commands use the given database and job settings."""

    extra: dict[str, str] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {**super().env, **self.extra}

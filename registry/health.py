"""The registry's health check: its versions can be listed and every served version's files can be read."""

from __future__ import annotations

import os
from pathlib import Path

from core.database import Database
from core.health import HealthCheck, Status
from registry.service import read_schema, serving_plans


def registry_check(*, db: Database, registry: Path, only: list[str]) -> HealthCheck:
    """``registry``: the root is a readable folder (when it exists), the serving and labelled versions of
    the served models can be listed, and each one's contract (``driftwarden/schema.json``) reads."""

    def check() -> Status:
        if registry.exists() and not (registry.is_dir() and os.access(registry, os.R_OK | os.X_OK)):
            return Status(False, f"registry root {registry} is not a readable folder")
        with db.session() as session:
            plans = serving_plans(session=session, only=only)
        unreadable: list[str] = []
        versions = 0
        for name, plan in sorted(plans.items()):
            for version, path in sorted(plan.paths.items()):
                versions += 1
                try:
                    read_schema(path=Path(path))
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    unreadable.append(f"{name}:{version} ({type(exc).__name__}: {exc})"[:200])
        if unreadable:
            return Status(False, "unreadable versions: " + "; ".join(unreadable))
        return Status(True, f"{len(plans)} models, {versions} served versions readable under {registry}")

    return HealthCheck("registry", check)

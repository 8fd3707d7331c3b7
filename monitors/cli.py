"""Monitor commands (``driftwarden drift``, ``driftwarden monitor``): owned by the monitors domain."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the monitors' commands to the root CLI."""

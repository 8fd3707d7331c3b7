"""`driftwarden serve` runs one worker per CPU core unless told otherwise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from service.serving import cli as serving_cli


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """Capture what `serve` hands uvicorn instead of binding a port (the worker count is the subject)."""
    import uvicorn

    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: seen.update(kwargs, app=app))
    monkeypatch.setattr(serving_cli.os, "sched_getaffinity", lambda pid: {0, 1, 2})
    monkeypatch.setenv("DRIFTWARDEN_METRICS_DIR", str(tmp_path / "metrics"))
    return seen


def _serve(*args: str) -> None:
    import typer

    app = typer.Typer()
    serving_cli.register(app)
    app.command("noop", hidden=True)(lambda: None)  # two commands: typer keeps `serve` as a sub-command
    result = CliRunner().invoke(app, ["serve", *args])
    assert result.exit_code == 0, result.output


def test_the_default_is_one_worker_per_core_of_the_affinity_mask(started: dict[str, Any]) -> None:
    _serve()
    assert started["workers"] == 3 and started["factory"] is True


def test_the_setting_and_the_option_override_the_default(
    started: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DRIFTWARDEN_API_WORKERS", "2")
    _serve()
    assert started["workers"] == 2
    _serve("--workers", "1")
    assert started["workers"] == 1

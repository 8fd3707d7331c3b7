"""Issue 40, item 10: every help text that lists the token scopes lists all of them, from ``core.auth.Scope``
(``tokens create --help`` had left ``ingest`` out)."""

from __future__ import annotations

from typer.testing import CliRunner

from core.auth import Scope


def test_every_help_lists_every_scope() -> None:
    from service.cli import app

    for path in (["tokens", "create"], ["tokens"], []):
        out = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "1000"}).output
        listed = f"{', '.join(s.value for s in Scope if s is not Scope.ADMIN)} or admin"
        assert listed in out, (path, out)

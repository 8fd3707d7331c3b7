"""``driftwarden config`` prints the settings with a database URL's password masked
(``core.config.mask_url``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _command(
    *args: str, env_extra: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    import os

    env = {**os.environ, **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args], capture_output=True, text=True, env=env, cwd=cwd
    )


def test_config_masks_database_password() -> None:
    res = _command(
        "config", env_extra={"DRIFTWARDEN_DATABASE_URL": "postgresql+psycopg://app:s3cret@db:5432/dw"}
    )
    assert res.returncode == 0, res.stderr
    cfg = json.loads(res.stdout)
    assert cfg["database_url"] == "postgresql+psycopg://app:***@db:5432/dw"
    assert "s3cret" not in res.stdout

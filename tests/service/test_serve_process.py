"""What ``driftwarden serve``'s app factory sets up in its own process, beside the app."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from service.serving.app import GIL_SWITCH_INTERVAL_S


def test_the_serve_worker_lets_threads_hold_the_gil_from_the_loop_for_half_a_millisecond(
    tmp_path: Path,
) -> None:
    """The writer and the periodic jobs' threads hand the GIL back to the event loop within
    ``GIL_SWITCH_INTERVAL_S``, not CPython's default 5 ms (in a fresh interpreter: the setting is global)."""
    env = {
        **os.environ,
        "DRIFTWARDEN_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}",
        "DRIFTWARDEN_REGISTRY_PATH": str(tmp_path / "models"),
        "DRIFTWARDEN_SPOOL_PATH": str(tmp_path / "spool"),
    }
    code = (
        "import sys\nprint(sys.getswitchinterval())\n"
        "from service.serving.app import worker_app\nworker_app()\nprint(sys.getswitchinterval())"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    before, after = (float(x) for x in out.stdout.split())
    assert before == 0.005  # CPython's default, until the factory runs
    assert after == GIL_SWITCH_INTERVAL_S

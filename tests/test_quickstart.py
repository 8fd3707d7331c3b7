"""The README's quick start, run exactly as written (copy-paste) in a fresh folder with the project's venv."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from core.network import is_listening

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[1]


def quick_start_block() -> str:
    """The first ```bash block under the README's "Quick start" heading."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1]
    match = re.search(r"```bash\n(.*?)```", section, re.S)
    assert match, "README.md: the Quick start section has no bash block"
    return match.group(1)


def test_the_quick_start_works_as_written(tmp_path: Path) -> None:
    script = quick_start_block()
    assert "driftwarden serve" in script and "models promote" in script and "curl" in script
    assert not is_listening("127.0.0.1:8501"), "port 8501 (the quick start's) is taken on this machine"
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRIFTWARDEN_")}
    proc = subprocess.Popen(
        ["bash", "-e", "-c", script],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: the background server goes with it on failure
    )
    try:
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None or is_listening("127.0.0.1:8501"):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out[-5000:]
    answer = next(line for line in out.splitlines() if line.startswith('{"predictions"'))
    body = json.loads(answer)
    assert len(body["predictions"]) == 1 and 0.0 <= body["predictions"][0] <= 1.0
    assert len(body["prediction_ids"]) == 1
    assert "credit:1" in out and "serving" in out
    # the shifted file drifts: `driftwarden drift` exits 1, which the README's line reports
    assert "drift found (exit 1)" in out, out[-5000:]
    assert (tmp_path / "var" / "models" / "credit" / "1" / "saved_model.pb").exists()
    assert not is_listening("127.0.0.1:8501"), "the quick start's `kill %1` must stop the server"

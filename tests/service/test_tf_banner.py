"""Issue 40, item 10: TensorFlow's start-up banners ("To enable the following instructions: AVX2 ...", oneDNN
notices, absl's warnings) stay out of every command's output and the server's log: the root command sets the
environment before anything loads TensorFlow (``core.logs.quiet_tensorflow``).

Real processes with TensorFlow's variables unset: ``models import`` of a plain-Keras SavedModel (TensorFlow
loads it to measure its reference metrics), and ``serve`` with that version promoted (the server loads it).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx

from core.network import free_port
from core.tabular import write_table
from tests import own_models
from tests.support import wait_http_ready

CLI = str(Path(sys.executable).parent / "driftwarden")
BANNER = re.compile(
    r"^[IWEF]\d{4} |absl::InitializeLog|oneDNN|cpu_feature_guard|To enable the following instructions"
    r"|rebuild TensorFlow|cuda|tensorflow/",
    re.M,
)


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DRIFTWARDEN_", "TF_"))}
    return {
        **env,
        "DRIFTWARDEN_DATABASE_URL": f"sqlite:///{tmp_path / 'dw.db'}",
        "DRIFTWARDEN_REGISTRY_PATH": str(tmp_path / "registry"),
        "DRIFTWARDEN_SPOOL_PATH": str(tmp_path / "spool"),
        "DRIFTWARDEN_MONITOR_ENABLED": "false",
    }


def test_no_tensorflow_banner_in_a_command_or_the_servers_log(tmp_path: Path) -> None:
    data = own_models.reference(400, seed=0)
    write_table(data, tmp_path / "reference.csv")
    saved = own_models.write_binary(tmp_path / "own", data)
    env = _env(tmp_path)
    imported = subprocess.run(
        [CLI, "models", "import", "quiet", str(saved), "--reference", str(tmp_path / "reference.csv")]
        + ["--target", "y_bin"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    out = imported.stdout + imported.stderr
    assert imported.returncode == 0, out[-3000:]
    assert "quiet:1" in out and not BANNER.search(out), out
    promoted = subprocess.run(
        [CLI, "models", "promote", "quiet", "1"], capture_output=True, text=True, env=env
    )
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [CLI, "serve", "--port", str(port)], env=env, cwd=tmp_path, stdout=sink, stderr=subprocess.STDOUT
        )
    try:
        wait_http_ready(
            f"http://127.0.0.1:{port}/readyz", log=log, deadline=time.monotonic() + 120, proc=proc
        )
        status = httpx.get(f"http://127.0.0.1:{port}/v1/models/quiet", timeout=30)
        assert status.status_code == 200 and "AVAILABLE" in status.text, status.text  # TensorFlow loaded it
    finally:
        proc.terminate()
        proc.wait(30)
    text = log.read_text(errors="replace")
    assert "127.0.0.1" in text or "Uvicorn" in text or "driftwarden" in text, text  # the log was written
    assert not BANNER.search(text), text

"""An S3-compatible server for the lake's tests: moto's server mode in its own process on a free loopback
port, started once per test session and stopped by its PID (see ``tests/lake/conftest.py``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from core.network import free_port, is_listening

ACCESS_KEY = "testing-key"
SECRET_KEY = "testing-secret"  # moto accepts any pair; these only have to be the same on both sides
REGION = "us-east-1"


@dataclass
class S3Server:
    """A running moto server: its endpoint and the AWS_* variables that point pyarrow (and boto) at it."""

    endpoint: str
    process: subprocess.Popen[bytes]
    buckets: list[str] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """The variables a process needs to use this server as its S3."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def create_bucket(self, name: str | None = None) -> str:
        """A new empty bucket (a random name unless given)."""
        import pyarrow.fs as pafs

        bucket = name or f"lake-{uuid.uuid4().hex[:10]}"
        fs = pafs.S3FileSystem(
            endpoint_override=self.endpoint.removeprefix("http://"),
            scheme="http",
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            region=REGION,
            allow_bucket_creation=True,
        )
        fs.create_dir(bucket)
        self.buckets.append(bucket)
        return bucket

    def stop(self) -> None:
        """Stop the server (by the PID this module started)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def start_s3_server(log_dir: Path) -> S3Server:
    """Start moto's server on 127.0.0.1 and a free port; wait until it answers (at most 30 s)."""
    port = free_port()
    moto = Path(sys.executable).with_name("moto_server")
    command = [str(moto), "-H", "127.0.0.1", "-p", str(port)]
    log_file = open(log_dir / "moto.log", "wb")  # noqa: SIM115 (the server's output, for a failing test)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 30
    while not is_listening(f"127.0.0.1:{port}"):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"moto's S3 server did not start; see {log_dir / 'moto.log'}")
        time.sleep(0.1)
    return S3Server(endpoint=f"http://127.0.0.1:{port}", process=process)

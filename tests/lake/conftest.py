"""The lake's fixtures: an S3-compatible server (moto, one per session) and lakes on it and on disk.

``s3_lake`` (per test) gives an :class:`S3Lake`: ``url`` (``s3://<fresh bucket>/lake``) and ``env`` (the
``AWS_*`` variables of the server, also set in the test's environment so pyarrow's ``S3FileSystem`` finds
it). Other lake tests (readers) reuse these names.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.lake.s3server import S3Server, start_s3_server


@dataclass(frozen=True)
class S3Lake:
    """A lake on the session's S3 server: its URL and the variables that reach the server."""

    url: str
    bucket: str
    env: dict[str, str]

    @property
    def endpoint(self) -> str:
        """The server's URL (``http://127.0.0.1:<port>``)."""
        return self.env["AWS_ENDPOINT_URL"]

    @property
    def fs_options(self) -> dict[str, object]:
        """Keyword arguments of ``pyarrow.fs.S3FileSystem`` that reach the server."""
        return {
            "endpoint_override": self.endpoint.removeprefix("http://"),
            "scheme": "http",
            "access_key": self.env["AWS_ACCESS_KEY_ID"],
            "secret_key": self.env["AWS_SECRET_ACCESS_KEY"],
            "region": self.env["AWS_REGION"],
        }


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """moto's S3 server on a free loopback port, for the whole session; stopped by its PID."""
    server = start_s3_server(tmp_path_factory.mktemp("moto"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_lake(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Lake:
    """A lake in a fresh bucket of the session's S3 server; the test's environment points at the server."""
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    bucket = s3_server.create_bucket()
    return S3Lake(url=f"s3://{bucket}/lake", bucket=bucket, env=s3_server.env)


@pytest.fixture
def local_lake(tmp_path: Path) -> str:
    """A lake in a fresh local folder (the real filesystem)."""
    folder = tmp_path / "lake"
    folder.mkdir()
    return str(folder)

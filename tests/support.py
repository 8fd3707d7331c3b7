"""Helpers shared by the tests of several packages (fixtures live in ``tests/conftest.py``)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from sqlalchemy import create_engine, text

from core.config import Settings
from core.database import open_database
from core.network import free_port
from monitors.profile import Profile, build_reference_profile, profile_from_dict
from registry.service import promote, register_version, set_label
from service.serving.app import create_app

CREDIT_FEATURES = [
    "age",
    "income",
    "debt_to_income",
    "credit_score",
    "loan_amount",
    "employment_years",
    "num_open_accounts",
    "home_ownership",
    "loan_purpose",
    "region",
]
"""The credit model's features (training.cluster.datagen), in contract order."""


def wait_http_ready(
    url: str, *, log: Path, deadline: float, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Poll ``url`` until it answers 200; fails with the tail of the server's ``log`` when ``proc`` exits or
    ``deadline`` (``time.monotonic()``) passes."""
    while True:
        if proc is not None:
            assert proc.poll() is None, f"server exited with {proc.returncode}: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"{url} not ready: {log.read_text(errors='replace')[-3000:]}"
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)


def credit_profile(seed: int = 101) -> Profile:
    """The reference profile of 20,000 generated credit rows, with the true probabilities as predictions
    and the target as labels."""
    from registry.schema import infer_schema
    from tests.monitors.helpers import true_probability
    from training.cluster.datagen import TARGET, generate

    reference = generate(20_000, seed=seed)
    schema = infer_schema(reference, target=TARGET)
    raw = build_reference_profile(
        reference, schema, predictions=true_probability(reference), labels=reference[TARGET]
    )
    return profile_from_dict(raw)


@contextmanager
def database_at(request: Any, tmp_path: Path, revision: str) -> Iterator[str]:
    """A database migrated up to ``revision`` only, on the backend ``request.param`` names ("sqlite" or
    "postgresql": a fresh schema of the session's ``postgres_url``), for the tests of a later migration."""
    from core import migrate

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'old.db'}"
        migrate.upgrade(url, revision)
        yield url
        return
    with postgres_schema(request.getfixturevalue("postgres_url"), migrated=False) as url:
        migrate.upgrade(url, revision)
        yield url


@contextmanager
def postgres_schema(base_url: str, *, migrated: bool = True) -> Iterator[str]:
    """A URL into a fresh schema of the test database (dropped afterwards).

    ``migrated``: as after ``driftwarden db upgrade`` (a server database is not upgraded on open);
    otherwise empty.
    """
    from core import migrate

    schema = f"t_{uuid.uuid4().hex[:10]}"
    # pre-ping: a test may restart the server in between (its pooled connection is then dead)
    engine = create_engine(base_url, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    with engine.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = f"{base_url}?options=-csearch_path%3D{schema}"
    try:
        if migrated:
            migrate.upgrade(url)
        yield url
    finally:
        with engine.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        engine.dispose()


@dataclass(frozen=True)
class TrainedModels:
    """Two versions of model ``credit`` trained for real, and sample rows of their data."""

    paths: dict[int, Path]
    rows: list[dict[str, Any]]


def seed_registry(
    url: str, trained: TrainedModels, *, serving: int = 1, labels: dict[str, int] | None = None
) -> None:
    """Create the schema at ``url``, register the trained versions and promote one."""
    db = open_database(url, upgrade=True)
    try:
        with db.session() as s:
            for version, path in trained.paths.items():
                register_version(
                    session=s, model_name="credit", version=version, path=path, metrics={}, lineage={}
                )
            promote(session=s, model_name="credit", version=serving)
            for label, version in (labels or {}).items():
                set_label(session=s, model_name="credit", label=label, version=version)
    finally:
        db.dispose()


class Server:
    """A real uvicorn server on a free loopback port, in a thread of the test process."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.app = create_app(settings)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=self.port, log_level="warning", access_log=False
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(60)

    @property
    def state(self) -> Any:
        return self.app.state.dw

    def client(self) -> httpx.Client:
        """A client that sends the server's admin token (every scope) when it has one."""
        token = self.settings.admin_token
        headers = auth(token.get_secret_value()) if token is not None else None
        return httpx.Client(base_url=self.url, timeout=30, headers=headers)


ADMIN_TOKEN = "test-admin-token"  # serve_settings' bootstrap admin credential (DRIFTWARDEN_ADMIN_TOKEN)


NO_AUTH = {"Authorization": ""}  # overrides a client's default header: the request goes without a token


def auth(token: str = ADMIN_TOKEN) -> dict[str, str]:
    """The ``Authorization`` header of a bearer token."""
    return {"Authorization": f"Bearer {token}"}


def serve_settings(url: str, spool: Path, **overrides: Any) -> Settings:
    """Settings for a test server: its database, its spool, a fast registry poll, an admin token."""
    values: dict[str, Any] = {
        "database_url": url,
        "spool_path": spool,
        "model_poll_interval_s": 0.2,
        "retention_interval_s": 0,
        "log_retry_interval_s": 0.2,
        "admin_token": ADMIN_TOKEN,
        **overrides,
    }
    return Settings(**values)


def elsewhere_settings(url: str, root: Path, models: dict[str, str], **overrides: Any) -> Settings:
    """Settings for a test server of ``models`` served elsewhere (registered under ``root`` by
    :func:`tests.own_models.register_served_elsewhere`, its spool ``root/spool``); no periodic monitor runs
    unless ``overrides`` say so."""
    from tests import own_models

    registry = own_models.register_served_elsewhere(url, root, models)
    values = {"monitor_enabled": False, **overrides}
    return serve_settings(url, root / "spool", registry_path=registry, **values)


def query_rows(url: str, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
    """The rows of ``sql`` on the database at ``url``, through a connection of its own."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return list(conn.execute(text(sql), params or {}).all())
    finally:
        engine.dispose()


def count_rows(url: str, where: str = "1=1", params: dict[str, Any] | None = None) -> int:
    """Logged predictions in the batches matching ``where`` (a condition on ``prediction_batches``' columns:
    request_id, status, model_name...), read with a separate connection."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    text(f"select coalesce(sum(size), 0) from prediction_batches where {where}"), params or {}
                ).scalar_one()
            )
    finally:
        engine.dispose()


def copy_version(src: Path, dst: Path) -> Path:
    """A writable copy of a version folder."""
    shutil.copytree(src, dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


class OwnPostgres:
    """A PostgreSQL instance in a temporary folder on a free port (as ``postgres`` when run as root)."""

    def __init__(self) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
        if not found:
            raise RuntimeError(
                "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin (install postgresql)"
            )
        self.bin = Path(found[-1]).parent
        self.root = Path(tempfile.mkdtemp(prefix="dw-own-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_user:
            shutil.chown(self.root, "postgres")
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        proc = subprocess.run([*self.as_user, *args], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{args[0]} failed: {proc.stdout}\n{proc.stderr}"

    def init(self) -> None:
        self._run(
            str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync"
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.root / "server.log")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", log, "-o", options, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def destroy(self) -> None:
        if self.running():
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


def run_cli(monkeypatch: Any, env: dict[str, str], *args: str, default_rules: bool = False) -> Any:
    """``driftwarden ARGS`` in this process (typer's runner) with the settings of ``env`` (and the default
    alert rules when ``default_rules``); the settings cache cleared before and after."""
    from typer.testing import CliRunner

    from core.config import get_settings
    from service.cli import app

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    if default_rules:
        monkeypatch.delenv("DRIFTWARDEN_ALERT_RULES_PATH", raising=False)
    get_settings.cache_clear()
    try:
        return CliRunner().invoke(app, list(args))
    finally:
        get_settings.cache_clear()


@dataclass
class LoopCli:
    """``driftwarden ARGS`` on one database, with a registry, spool and checkpoints under a test's folder
    and the default alert rules: the CLI of the tests that run the loop (a run, its alerts, the outbox)."""

    env: dict[str, str]
    monkeypatch: Any

    def __call__(self, *args: str) -> Any:
        return run_cli(self.monkeypatch, self.env, *args, default_rules=True)


def loop_cli(database_url: str, tmp_path: Path, monkeypatch: Any) -> LoopCli:
    """A :class:`LoopCli` on ``database_url`` (migrated first), its files under ``tmp_path``, webhooks to
    loopback allowed (the tests' receivers)."""
    open_database(database_url, upgrade=True).dispose()
    env = {
        "DRIFTWARDEN_DATABASE_URL": database_url,
        "DRIFTWARDEN_REGISTRY_PATH": str(tmp_path / "registry"),
        "DRIFTWARDEN_SPOOL_PATH": str(tmp_path / "spool"),
        "DRIFTWARDEN_CHECKPOINT_PATH": str(tmp_path / "ckpt"),
        "DRIFTWARDEN_WEBHOOK_ALLOW_PRIVATE_URLS": "true",
    }
    return LoopCli(env, monkeypatch)


def server_env(srv: Server) -> dict[str, str]:
    """The CLI's settings for the database, registry and spool of a test server."""
    return {
        "DRIFTWARDEN_DATABASE_URL": srv.settings.database_url.get_secret_value(),
        "DRIFTWARDEN_REGISTRY_PATH": str(srv.settings.registry_path),
        "DRIFTWARDEN_SPOOL_PATH": str(srv.settings.spool_path),
    }

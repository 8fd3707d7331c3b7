"""Serving fixtures: two real trained versions (once per session), databases, a real uvicorn server."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from sqlalchemy import create_engine, text

from core.config import Settings
from core.database import open_database
from core.network import free_port
from registry.service import promote, register_version, set_label
from service.serving.app import create_app
from tests.conftest import postgres_schema


@dataclass(frozen=True)
class TrainedModels:
    """Two versions of model ``credit`` trained for real, and sample rows of their data."""

    paths: dict[int, Path]
    rows: list[dict[str, Any]]


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory) -> TrainedModels:
    from core.tabular import write_table
    from training.datagen import generate
    from training.flows import run_training
    from training.jobs import Mode, TrainJob
    from training.progress import Progress

    root = tmp_path_factory.mktemp("trained")
    data = root / "train.parquet"
    write_table(generate(2000, seed=1), data)
    db = open_database(f"sqlite:///{root / 'train.db'}")
    paths: dict[int, Path] = {}
    try:
        for seed in (0, 1):
            result = run_training(
                job=TrainJob(model_name="credit", data=data, mode=Mode.LOCAL, epochs=1.0, seed=seed),
                db=db,
                registry=root / "models",
                checkpoint_root=root / "ckpt",
                progress=Progress("t", show_bar=False),
            )
            paths[result.version.version] = Path(result.version.path)
    finally:
        db.dispose()
    sample = generate(300, seed=7)
    rows = [
        {
            k: (None if isinstance(v, float) and v != v else (v.item() if hasattr(v, "item") else v))
            for k, v in zip(sample, values, strict=True)
            if k != "default"
        }
        for values in zip(*sample.values(), strict=True)
    ]
    return TrainedModels(paths=paths, rows=rows)


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


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def module_db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh database per test module, on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('db') / 'serve.db'}"
        return
    with postgres_schema(request.getfixturevalue("postgres_url")) as url:
        yield url


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
        return httpx.Client(base_url=self.url, timeout=30)


def serve_settings(url: str, spool: Path, **overrides: Any) -> Settings:
    """Settings for a test server: its database, its spool, a fast registry poll."""
    values: dict[str, Any] = {
        "database_url": url,
        "spool_path": spool,
        "model_poll_interval_s": 0.2,
        "retention_interval_s": 0,
        "log_retry_interval_s": 0.2,
        **overrides,
    }
    return Settings(**values)


@pytest.fixture(scope="module")
def server(
    module_db_url: str, trained: TrainedModels, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """One server per module and backend (durable log); serving version 1, label ``canary`` -> 2."""
    seed_registry(module_db_url, trained, serving=1, labels={"canary": 2})
    settings = serve_settings(module_db_url, tmp_path_factory.mktemp("spool"), log_durability="durable")
    with Server(settings) as srv:
        yield srv


def count_rows(url: str, where: str = "1=1", params: dict[str, Any] | None = None) -> int:
    """Rows of prediction_log matching ``where``, read with a separate connection."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    text(f"select count(*) from prediction_log where {where}"), params or {}
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

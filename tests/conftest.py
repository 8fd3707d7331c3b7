"""Shared fixtures: databases (SQLite and the real PostgreSQL), settings isolation, a trained model."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from core.database import Database, open_database
from tests.support import TrainedModels, postgres_schema

# The modules that take minutes (TensorFlow clusters, Spark, the demo, the docs' commands), longest first,
# as measured in a two-worker run (`make test PYTEST_ARGS=--durations=0`). They are collected first, and
# `make test` passes `--no-loadscope-reorder`, so xdist hands them out first: the two workers then end close
# together instead of one running the demo alone at the end. A module not listed keeps its place after them.
LONG_MODULES = (
    "tests/training/cluster/test_launcher.py",
    "tests/test_demo.py",
    "tests/spark/test_lake_e2e.py",
    "tests/training/cluster/test_builders.py",
    "tests/spark/test_lake_window.py",
    "tests/test_docs.py",
    "tests/spark/test_same_answer.py",
    "tests/predictions/test_migration_batches.py",
    "tests/alerts/test_heavy_tails.py",
    "tests/training/retraining/test_job_on_cluster.py",
    "tests/training/cluster/test_sharding.py",
    "tests/alerts/test_harmful_drift_acceptance.py",
    "tests/test_quickstart.py",
    "tests/training/retraining/test_gate_rates.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long modules first (a stable sort: each module's tests keep their order)."""
    rank = {module: k for k, module in enumerate(LONG_MODULES)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))


PG_ADMIN_URL = os.environ.get(
    "DRIFTWARDEN_TEST_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def _pg_available() -> bool:
    try:
        engine = create_engine(PG_ADMIN_URL, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(text("select 1"))
        engine.dispose()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, dropped at the end.

    Fails (does not skip) when PostgreSQL is down: CI starts it, and the suite promises both backends.
    """
    if not _pg_available():
        pytest.fail(f"PostgreSQL not reachable at {PG_ADMIN_URL}; start it (see .ci/run)")
    name = f"driftwarden_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    yield PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database URL on each backend (PostgreSQL: a fresh schema per test, migrated)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'test.db'}"
        return
    with postgres_schema(request.getfixturevalue("postgres_url")) as url:
        yield url


@pytest.fixture
def pg_url(postgres_url: str) -> Iterator[str]:
    """A fresh PostgreSQL schema at the newest revision (a module needing another defines its own)."""
    with postgres_schema(postgres_url) as url:
        yield url


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    """The backend's database upgraded to the newest migration, disposed of afterwards (a module or folder
    needing rows in it defines its own ``db``)."""
    database = open_database(database_url, upgrade=True)
    try:
        yield database
    finally:
        database.dispose()


@pytest.fixture(autouse=True)
def _isolated_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Each test gets its own var/ folder; settings are re-read."""
    from core.config import get_settings

    monkeypatch.setenv("DRIFTWARDEN_DATABASE_URL", f"sqlite:///{tmp_path / 'var' / 'driftwarden.db'}")
    monkeypatch.setenv("DRIFTWARDEN_REGISTRY_PATH", str(tmp_path / "var" / "models"))
    monkeypatch.setenv("DRIFTWARDEN_CHECKPOINT_PATH", str(tmp_path / "var" / "checkpoints"))
    monkeypatch.setenv("DRIFTWARDEN_WEBHOOK_ALLOW_PRIVATE_URLS", "true")  # the receivers listen on loopback
    # The runner's terminal size does not reach the CLIs under test (their output is captured or piped): a
    # pytest-xdist worker holds COLUMNS=80 and LINES=24 (readline exports them there; see core/terminal.py).
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory) -> TrainedModels:
    """Two versions of model ``credit`` trained for real once per session (local mode, small data)."""
    from core.database import open_database
    from core.tabular import write_table
    from training.cluster.datagen import generate
    from training.cluster.flows import run_training
    from training.cluster.progress import Progress
    from training.cluster.run_spec import Mode, TrainingRunSpec

    root = tmp_path_factory.mktemp("trained")
    data = root / "train.parquet"
    write_table(generate(2000, seed=1), data)
    db = open_database(f"sqlite:///{root / 'train.db'}")
    paths: dict[int, Path] = {}
    try:
        for seed in (0, 1):
            result = run_training(
                job=TrainingRunSpec(model_name="credit", data=data, mode=Mode.LOCAL, epochs=1.0, seed=seed),
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


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def module_db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh database per test module, on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('db') / 'serve.db'}"
        return
    with postgres_schema(request.getfixturevalue("postgres_url")) as url:
        yield url

"""The small model the backtest tests replay: its reference rows, its registration, and the alert commands."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import typer

from alerts.cli import register
from core.config import get_settings
from core.database import Database, open_database
from core.tabular import write_table
from registry.schema import Task
from registry.service import promote
from service.cli import _Root
from training.imports import ImportSpec, import_reference

MODEL = "bt"
FEATURES = ("a", "b", "color")


def reference(n: int = 3_000, *, seed: int = 0) -> dict[str, np.ndarray]:
    """Two numbers (one with missing values), a colour, a calibrated probability ``score`` and a label."""
    rng = np.random.default_rng(seed)
    a = rng.normal(0.0, 1.0, n)
    b = rng.poisson(3, n).astype(np.int64)
    color = rng.choice(np.array(["red", "green", "blue"], dtype=object), n)
    score = 1.0 / (1.0 + np.exp(-(a + 0.5 * (b - 3) + 0.4 * (color == "red") - 0.2)))
    a[rng.random(n) < 0.03] = np.nan
    return {"a": a, "b": b, "color": color, "score": score, "y": (rng.random(n) < score).astype(np.int64)}


def open_test_database() -> Database:
    """The database of the test's settings (its folder made), migrated."""
    url = get_settings().database_url.get_secret_value()
    Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    return open_database(url, upgrade=True)


def register_backtest_model(db: Database, folder: Path) -> Path:
    """Model ``bt`` registered from its reference (served elsewhere) and serving; the reference's path."""
    path = write_table(reference(), folder / "reference.parquet")
    spec = ImportSpec(
        model_name=MODEL, path=None, reference=path, target="y", task=Task.BINARY, prediction_column="score"
    )
    try:
        import_reference(spec=spec, db=db, registry=get_settings().registry_path)
        with db.session() as session:
            promote(session=session, model_name=MODEL, version=1)
    finally:
        db.dispose()
    return path


def alerts_cli() -> typer.Typer:
    """The root command with the alert commands only."""
    app = typer.Typer(cls=_Root, no_args_is_help=True)

    @app.callback()
    def root() -> None:
        """driftwarden (the alert commands only)."""

    register(app)
    return app

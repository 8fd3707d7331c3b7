"""Builders for monitor tests that need a prediction log and a registered version (no TensorFlow)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Engine

from core.database import Database
from core.tabular import Columns
from predictions.service import LogRow, new_prediction_id, write_log_rows
from registry.service import promote, register_version


def plain(value: Any) -> Any:
    """A JSON value as the server logs it (numpy scalars unwrapped, NaN -> null)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def log_columns(
    engine: Engine,
    cols: Columns,
    *,
    features: list[str],
    model: str = "credit",
    version: int = 1,
    probability: np.ndarray | None = None,
    when: datetime | None = None,
    spacing: timedelta = timedelta(milliseconds=1),
    status: str = "ok",
) -> list[str]:
    """Write one log row per row of ``cols`` (oldest first); returns their prediction ids."""
    n = len(cols[features[0]])
    start = (when or datetime.now(UTC)) - spacing * n
    p = np.full(n, 0.5) if probability is None else probability
    rows = [
        LogRow(
            new_prediction_id(),
            f"req-{i}",
            model,
            version,
            start + spacing * i,
            {f: plain(cols[f][i]) for f in features},
            float(p[i]),
            None,
            1.0,
            status,
            "v1",
        )
        for i in range(n)
    ]
    for lo in range(0, n, 5000):
        write_log_rows(engine=engine, rows=rows[lo : lo + 5000], idempotent=False)
    return [r.prediction_id for r in rows]


def register_profile(
    db: Database, root: Path, profile: dict[str, Any], *, model: str = "credit", version: int = 1
) -> Path:
    """A registered, serving version whose folder holds only ``driftwarden/profile.json``."""
    path = root / model / str(version)
    (path / "driftwarden").mkdir(parents=True)
    (path / "driftwarden" / "profile.json").write_text(json.dumps(profile))
    with db.session() as s:
        register_version(session=s, model_name=model, version=version, path=path, metrics={}, lineage={})
        promote(session=s, model_name=model, version=version)
    return path

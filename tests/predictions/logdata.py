"""Writing prediction-log rows for tests that read windows back (no server, no TensorFlow)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import Engine

from core.tabular import Columns
from predictions.service import LogRow, new_prediction_id, write_log_rows


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

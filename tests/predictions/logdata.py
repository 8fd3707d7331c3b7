"""Writing prediction-log rows for tests that read windows back (no server, no TensorFlow)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import Engine

from core.tabular import Columns
from predictions.service import LogRow, new_prediction_id, write_log_rows
from predictions.typed import Layout, encode_rows


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
    layout: Layout | None = None,
) -> list[str]:
    """Write one log row per row of ``cols`` (oldest first); returns their prediction ids.

    ``layout``: with the typed copy of the inputs, as the serving flow writes it (none for a row whose
    values cannot be typed); without: as rows logged before the typed columns.
    """
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
    if layout is not None:
        rows = [
            row if copy is None else row._replace(layout=layout.id, numbers=copy[0][0], categories=copy[0][1])
            for row, copy in ((r, encode_rows(layout, [r.inputs])) for r in rows)
        ]
    for lo in range(0, n, 5000):
        write_log_rows(engine=engine, rows=rows[lo : lo + 5000], idempotent=False)
    return [r.prediction_id for r in rows]


def log_inputs(
    engine: Engine,
    inputs: list[dict[str, Any]],
    *,
    layout: Layout | None = None,
    model: str = "credit",
    version: int = 1,
    probability: np.ndarray | None = None,
) -> list[LogRow]:
    """Write one log row per input document (oldest first, 1 ms apart), typed in ``layout`` where it can be
    (as the serving flow writes them); returns the rows written."""
    n = len(inputs)
    start = datetime.now(UTC) - timedelta(milliseconds=n)
    p = np.full(n, 0.5) if probability is None else probability
    rows = []
    for i, doc in enumerate(inputs):
        copy = encode_rows(layout, [doc]) if layout is not None else None
        typed = (layout.id, *copy[0]) if layout is not None and copy is not None else (None, None, None)
        prob = None if math.isnan(p[i]) else float(p[i])
        rows.append(
            LogRow(
                new_prediction_id(),
                f"req-{i}",
                model,
                version,
                start + timedelta(milliseconds=i),
                doc,
                prob,
                None,
                1.0,
                "ok",
                "v1",
                *typed,
            )
        )
    for lo in range(0, n, 5000):
        write_log_rows(engine=engine, rows=rows[lo : lo + 5000], idempotent=False)
    return rows


def write_rows_as_they_were(engine: Engine, rows: list[LogRow]) -> None:
    """Insert ``rows`` into whatever columns the log has at the database's revision (a database migrated to an
    older revision than the code's writer knows: its rows as a server of that revision wrote them)."""
    from sqlalchemy import MetaData, Table

    table = Table("prediction_log", MetaData(), autoload_with=engine)
    names = set(table.c.keys())
    values = []
    for row in rows:
        doc = {k: v for k, v in row._asdict().items() if k in names}
        if doc.get("numbers") is not None:
            doc["numbers"] = bytes.fromhex(doc["numbers"])
        values.append(doc)
    with engine.begin() as conn:
        conn.execute(table.insert(), values)

"""Rows of a request as the pending queue holds them (a small typed layout, a fixed time)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from predictions import typed
from predictions.pending import RequestRows
from predictions.service import new_prediction_ids

LAYOUT = typed.make_layout(["a", "b"], ["c"], [["x", "y"]])


AT = datetime(2026, 12, 1, tzinfo=UTC)


def request_rows(
    index: int,
    docs: list[dict[str, Any]],
    layout: typed.Layout | None = LAYOUT,
    columns: dict[str, list[Any]] | None = None,
    ids: list[str] | None = None,
) -> RequestRows:
    """A request's rows as the serving flow hands them over (output ``i`` for row ``i``)."""
    n = len(docs)
    return RequestRows(
        model_name="m",
        model_version=1,
        logged_at=AT,
        request_id=f"r{index}",
        protocol="v2",
        latency_ms=1.5,
        status="ok",
        ids=ids if ids is not None else new_prediction_ids(n),
        inputs=docs,
        values=[float(i) for i in range(n)],
        flags=[None] * n,
        layout=layout,
        columns=columns,
    )

"""Rows as an Open Inference Protocol (v2) request's input tensors."""

from __future__ import annotations

from typing import Any


def _v2_tensors(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    names = list(rows[0])
    return [
        {
            "name": k,
            "shape": [len(rows)],
            "datatype": "BYTES" if isinstance(rows[0][k], str) else "FP32",
            "data": [r[k] for r in rows],
        }
        for k in names
    ]

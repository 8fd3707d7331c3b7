"""Rows the database refuses: a NUL in a JSON value, a row with no model."""

from __future__ import annotations

from predictions.batch import LogBatch


def _nul(row: LogBatch) -> LogBatch:
    """PostgreSQL's jsonb cannot hold U+0000: UntranslatableCharacter (a DataError)."""
    assert row.inputs is not None
    return row._replace(inputs=[{**doc, "c": "a\u0000b"} for doc in row.inputs])


def _no_model(row: LogBatch) -> LogBatch:
    """model_name is NOT NULL on both backends: an IntegrityError."""
    return row._replace(model_name=None)  # type: ignore[arg-type]

"""Log rows for the lake sink's tests, built as the serving flow's writer builds them (no server, no
TensorFlow), and a reader of what a lake holds."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from predictions import typed
from predictions.batch import LogBatch
from predictions.lake.files import Lake, committed_files
from predictions.pending import RequestRows, build
from predictions.service import new_prediction_ids

LAYOUT = typed.make_layout(["age", "income"], ["city"], [["paris", "oslo"]])


def documents(n: int, *, offset: int = 0) -> list[dict[str, Any]]:
    """``n`` row documents: numbers (one absent in every 7th), a known city, an unseen one (every 5th), none
    (every 11th)."""
    out: list[dict[str, Any]] = []
    for i in range(offset, offset + n):
        doc: dict[str, Any] = {"age": 20 + i % 50, "income": 1000.5 * (i % 13)}
        if i % 7 == 3:
            del doc["income"]
        if i % 11 != 4:
            doc["city"] = "lima" if i % 5 == 2 else ("paris", "oslo")[i % 2]
        out.append(doc)
    return out


def batches(
    docs: Sequence[dict[str, Any]],
    *,
    per_request: int = 1,
    model: str = "credit",
    at: datetime | None = None,
    spacing: timedelta = timedelta(milliseconds=1),
    layout: typed.Layout | None = LAYOUT,
    vectors: Sequence[list[float | None]] | None = None,
    source: str = "serve",
) -> list[LogBatch]:
    """``docs`` as log batches of ``per_request`` predictions each, ``spacing`` apart from ``at``."""
    start = at or datetime.now(UTC)
    requests: list[RequestRows] = []
    for k, lo in enumerate(range(0, len(docs), per_request)):
        hi = min(lo + per_request, len(docs))
        requests.append(
            RequestRows(
                model_name=model,
                model_version=1,
                logged_at=start + spacing * k,
                request_id=f"req-{k}",
                protocol="v1",
                latency_ms=2.5,
                status="ok",
                ids=new_prediction_ids(hi - lo),
                inputs=list(docs[lo:hi]),
                values=[0.25 + 0.5 * ((lo + j) % 2) for j in range(hi - lo)],
                flags=[["late"] if (lo + j) % 9 == 0 else None for j in range(hi - lo)],
                layout=layout,
                outputs=None if vectors is None else list(vectors[lo:hi]),
                source=source,
            )
        )
    return [b for built in build(requests) for b in built]


def read_lake(target: Lake, table: str = "predictions") -> pa.Table:
    """Every committed file of ``table``, concatenated (each file read whole), with its path as ``_file``."""
    parts = []
    for path in committed_files(target, table):
        with target.fs.open_input_file(target.path(path)) as fh:
            t = pq.read_table(fh)
        parts.append(t.append_column("_file", pa.array([path] * t.num_rows, pa.string())))
    return pa.concat_tables(parts, promote_options="permissive") if parts else pa.table({})


@contextlib.contextmanager
def unwritable(folder: Path) -> Iterator[None]:
    """``folder`` cannot be written inside the block: made read-only, or (as root, whom permissions do not
    stop) its ``predictions`` and ``labels`` tables made into plain files, so nothing can go under them."""
    if os.geteuid() != 0:
        folder.chmod(0o500)
        try:
            yield
        finally:
            folder.chmod(0o700)
        return
    moved: list[tuple[Path, Path]] = []
    for name in ("predictions", "labels"):
        table = folder / name
        if table.exists():
            aside = folder.parent / f"{folder.name}-{name}-aside"
            table.rename(aside)
            moved.append((aside, table))
        table.write_bytes(b"not a folder")
    try:
        yield
    finally:
        for name in ("predictions", "labels"):
            (folder / name).unlink()
        for aside, table in moved:
            aside.rename(table)

"""What Spark's executors run: a lake file's rows read Arrow batch by Arrow batch and counted on the reference
profile's grids by the same code the database path runs (:func:`monitors.log_sketch.add_chunk`), never a
Python loop over rows. Each task returns one :class:`Part` per hour (a partial sketch, the hour's first and
last time), merged by hour on the executors (:func:`merge_parts`) before the driver sees them.

Only this module's functions are shipped to the executors (by reference: the workers import the project).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from monitors.drift.streaming import PageHinkley
from monitors.log_sketch import add_chunk
from monitors.profile import CategoricalProfile, Profile
from monitors.sketch import MulticlassCounts, WindowSketch
from predictions.lake.layout import FEATURES
from predictions.lake.scan import lake_filesystem
from predictions.windows import Chunk
from registry.schema import Task

BATCH_ROWS = 65_536  # rows per Arrow batch read from a file
UTC_US = pa.timestamp("us", tz="UTC")


def order_key(path: str) -> str:
    """A file's place in the log's order among files of the same time: its writer's sequence number (the
    layout's names end ``-<sequence>.parquet``), then its name."""
    name = path.rsplit("/", 1)[-1]
    found = re.search(r"-(\d+)\.parquet$", name)
    return f"{int(found.group(1)) if found else 0:012d}|{name}"


@dataclass(frozen=True)
class RowFilter:
    """Which rows of a file belong to the window: status ``ok``, the version (None: any), ``logged_at`` in
    ``[since, until)`` and, for a window of the last N, at or after the cut in the log's order ``(logged_at,
    file order key, row of the file)`` (:func:`order_key`)."""

    version: int | None = None
    since: datetime | None = None
    until: datetime | None = None
    cut: tuple[datetime, str, int] | None = None

    def mask(self, batch: pa.RecordBatch, *, key: str, first_row: int) -> pa.Array:
        """The rows of ``batch`` (the file's rows from ``first_row``; ``key``: its order) that pass."""
        keep = pc.equal(batch.column("status"), "ok")
        at = batch.column("logged_at")
        if self.version is not None:
            keep = pc.and_(keep, pc.equal(batch.column("model_version"), self.version))
        if self.since is not None:
            keep = pc.and_(keep, pc.greater_equal(at, pa.scalar(self.since, UTC_US)))
        if self.until is not None:
            keep = pc.and_(keep, pc.less(at, pa.scalar(self.until, UTC_US)))
        if self.cut is not None:
            t, cut_key, cut_row = self.cut
            rows = np.arange(first_row, first_row + batch.num_rows)
            tie = rows >= cut_row if key == cut_key else np.full(batch.num_rows, key > cut_key)
            same = pc.and_(pc.equal(at, pa.scalar(t, UTC_US)), pa.array(tie))
            keep = pc.and_(keep, pc.or_(pc.greater(at, pa.scalar(t, UTC_US)), same))
        return pc.fill_null(keep, False)


@dataclass(frozen=True)
class FileTask:
    """One file for an executor to count: the lake, the file's path, its hour (the key it is merged by)."""

    lake: str
    path: str
    hour: datetime


@dataclass
class Part:
    """Counts of the rows of some files of one hour: the sketch (without labels), the rows' first and last
    ``logged_at``, the files read."""

    sketch: WindowSketch
    start: datetime | None = None
    end: datetime | None = None
    files: int = 0


def merge_parts(a: Part, b: Part) -> Part:
    """Both parts' counts (a multi-class model's vectors too)."""
    sketch = a.sketch.merge(b.sketch)
    sketch.multiclass = merge_multiclass(a.sketch.multiclass, b.sketch.multiclass)
    starts = [t for t in (a.start, b.start) if t is not None]
    ends = [t for t in (a.end, b.end) if t is not None]
    return Part(
        sketch=sketch,
        start=min(starts) if starts else None,
        end=max(ends) if ends else None,
        files=a.files + b.files,
    )


def merge_multiclass(a: MulticlassCounts | None, b: MulticlassCounts | None) -> MulticlassCounts | None:
    """Two multi-class counts of unlabelled rows added (the labelled rows' are counted on the driver, in
    order)."""
    if a is None or b is None:
        return b if a is None else a
    out = MulticlassCounts(a.classes)
    out.rows = a.rows + b.rows
    out.probabilities = [
        y if x is None else x if y is None else x.merge(y)
        for x, y in zip(a.probabilities, b.probabilities, strict=True)
    ]
    for name in ("predicted", "expected_true_pos", "expected_false_pos", "expected_false_neg", "confusion"):
        setattr(out, name, getattr(a, name) + getattr(b, name))
    out.expected_correct = a.expected_correct + b.expected_correct
    out.log_loss = a.log_loss + b.log_loss
    return out


def count_files(
    tasks: Iterable[FileTask], *, profile: Profile, rows: RowFilter, threshold: float
) -> Iterator[tuple[int, Part]]:
    """Count each file of ``tasks`` (an executor's partition): one ``(hour in epoch seconds, part)`` each."""
    for task in tasks:
        yield int(task.hour.timestamp()), count_file(task, profile=profile, rows=rows, threshold=threshold)


def count_file(task: FileTask, *, profile: Profile, rows: RowFilter, threshold: float) -> Part:
    """One file's rows of the window counted batch by batch."""
    fs, _ = lake_filesystem(task.lake)
    numeric = [n for n, f in profile.features.items() if not isinstance(f, CategoricalProfile)]
    categorical = [n for n, f in profile.features.items() if isinstance(f, CategoricalProfile)]
    width = len(profile.class_probabilities) if profile.task is Task.MULTICLASS else 0
    columns = ["prediction_id", "model_version", "logged_at", "status", "source", "output", FEATURES]
    if width:
        columns.append("vector")
    part = Part(sketch=WindowSketch(threshold=threshold), files=1)
    if width:
        part.sketch.multiclass = MulticlassCounts(width)
    unused = PageHinkley()  # unlabelled rows feed no error stream
    key, first = order_key(task.path), 0
    with fs.open_input_file(task.path) as handle:
        for batch in pq.ParquetFile(handle).iter_batches(batch_size=BATCH_ROWS, columns=columns):
            kept = batch.filter(rows.mask(batch, key=key, first_row=first))
            first += batch.num_rows
            if kept.num_rows == 0:
                continue
            add_chunk(
                sketch=part.sketch, profile=profile, chunk=_chunk(kept, numeric, categorical), labels=False
            )
            times = kept.column("logged_at")
            low, high = pc.min(times).as_py(), pc.max(times).as_py()
            part.start = low if part.start is None else min(part.start, low)
            part.end = high if part.end is None else max(part.end, high)
            if width and part.sketch.multiclass is not None:
                vectors = vector_matrix(kept.column("vector"), width)
                part.sketch.multiclass.add(profile, vectors, np.full(kept.num_rows, np.nan), unused)
    return part


def _chunk(batch: pa.RecordBatch, numeric: list[str], categorical: list[str]) -> Chunk:
    """A batch as the database path's chunk: numeric features as float64 (NaN: null), categorical ones
    counted per value (None: null), the outputs, no labels, the rows by source."""
    features = batch.column(FEATURES)
    names = {features.type.field(i).name: i for i in range(features.type.num_fields)}
    n = batch.num_rows
    cols: dict[str, np.ndarray] = {}
    for name in numeric:
        at = names.get(name)
        cols[name] = (
            np.full(n, np.nan)
            if at is None
            else features.field(at).cast(pa.float64()).to_numpy(zero_copy_only=False)
        )
    counts = {
        name: category_counts(None if (at := names.get(name)) is None else features.field(at), n)
        for name in categorical
    }
    sources = Counter(
        {str(k["values"]): int(k["counts"]) for k in pc.value_counts(batch.column("source")).to_pylist()}
    )
    return Chunk(
        rows=n,
        columns=cols,
        predictions=batch.column("output").to_numpy(zero_copy_only=False).astype(np.float64, copy=False),
        labels=np.full(n, np.nan),
        category_counts=counts,
        sources=sources,
    )


def category_counts(values: pa.Array | None, n: int) -> Counter[str | None]:
    """Rows per category of a text column, dictionary-encoded or not (None: nulls; an absent column: all)."""
    if values is None:
        return Counter({None: n}) if n else Counter()
    coded = values if pa.types.is_dictionary(values.type) else pc.dictionary_encode(values)
    codes = coded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64) + 1
    words = [None, *coded.dictionary.to_pylist()]
    tally = np.bincount(codes, minlength=len(words))
    out: Counter[str | None] = Counter()
    for word, k in zip(words, tally.tolist(), strict=True):
        if k:
            out[None if word is None else str(word)] += k
    return out


def vector_matrix(values: pa.Array, width: int) -> np.ndarray:
    """A list column as ``[rows, width]`` floats; a row that is null or of another length is NaN."""
    n = len(values)
    out = np.full((n, width), np.nan)
    if n == 0:
        return out
    lists = values.cast(pa.list_(pa.float64())) if not pa.types.is_list(values.type) else values
    offsets = lists.offsets.to_numpy()
    flat = lists.values.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    lengths = np.diff(offsets)
    ok = (lengths == width) & ~lists.is_null().to_numpy(zero_copy_only=False)
    if ok.any():
        starts = offsets[:-1][ok]
        out[ok] = flat[starts[:, None] + np.arange(width)]
    return out

"""The window's rows as Spark DataFrames where Spark must see rows: the cut of a window of the last N
predictions, and the labels joined to the window's predictions by prediction id. The executors read the
files with Arrow (``mapInArrow``: a lake on S3 needs no Hadoop connector) and Spark sorts and joins; only one
row (the cut) or the labelled rows come back to the driver."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from monitors.spark.counting import BATCH_ROWS, RowFilter, order_key, vector_matrix
from predictions.lake.scan import LakeFile, by_hour, check_file, lake_filesystem

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

KEYS = "prediction_id string, logged_at timestamp, output double, file_key string, row bigint"
VECTOR = "vector array<double>"
LABELS = "prediction_id string, label double, received_at timestamp"
Reader = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def _paths(spark: SparkSession, files: Sequence[LakeFile]) -> DataFrame:
    """A DataFrame of the files' paths, one partition per file."""
    return spark.createDataFrame([(f.path,) for f in files], "path string").repartition(max(1, len(files)))


def read_keys(lake: str, rows: RowFilter, *, vector: bool) -> Reader:
    """The executors' reader of the window's rows' keys (and outputs, vectors) from the files named."""

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, _ = lake_filesystem(lake)
        columns = ["prediction_id", "model_version", "logged_at", "status", "output"]
        columns += ["vector"] if vector else []
        for paths in batches:
            for path in paths.column("path").to_pylist():
                key, first = order_key(path), 0
                with fs.open_input_file(path) as handle:
                    for b in pq.ParquetFile(handle).iter_batches(batch_size=BATCH_ROWS, columns=columns):
                        mask = rows.mask(b, key=key, first_row=first)
                        numbers = pa.array(np.arange(first, first + b.num_rows, dtype=np.int64)).filter(mask)
                        first += b.num_rows
                        kept = b.filter(mask)
                        if kept.num_rows:
                            yield _keyed(kept, key, numbers, vector=vector)

    return read


def _keyed(kept: pa.RecordBatch, key: str, numbers: pa.Array, *, vector: bool) -> pa.RecordBatch:
    """The kept rows' keys in the declared order, with their file's order key and their rows in the file."""
    columns = [kept.column("prediction_id"), kept.column("logged_at"), kept.column("output")]
    columns += [pa.array([key] * kept.num_rows, pa.string()), numbers]
    names = ["prediction_id", "logged_at", "output", "file_key", "row"]
    if vector:
        columns.append(kept.column("vector").cast(pa.list_(pa.float64())))
        names.append("vector")
    return pa.RecordBatch.from_arrays(columns, names=names)


def read_labels(lake: str) -> Reader:
    """The executors' reader of label files."""

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, _ = lake_filesystem(lake)
        for paths in batches:
            for path in paths.column("path").to_pylist():
                with fs.open_input_file(path) as handle:
                    yield from pq.ParquetFile(handle).iter_batches(
                        batch_size=BATCH_ROWS, columns=["prediction_id", "label", "received_at"]
                    )

    return read


def keys_frame(
    spark: SparkSession, lake: str, files: Sequence[LakeFile], rows: RowFilter, *, vector: bool
) -> DataFrame:
    schema = f"{KEYS}, {VECTOR}" if vector else KEYS
    return _paths(spark, files).mapInArrow(read_keys(lake, rows, vector=vector), schema)


def last_rows_cut(
    *,
    spark: SparkSession,
    lake: str,
    fs: pafs.FileSystem,
    files: list[LakeFile],
    rows: RowFilter,
    wanted: int,
    kinds: dict[str, str],
) -> tuple[list[LakeFile], RowFilter]:
    """The files and row filter of a window of the last ``wanted`` predictions: hours are taken newest first
    (by their footers' row counts, then counted exactly in Spark) until they hold ``wanted`` rows; the cut is
    the ``wanted``-th newest row in the log's order (:class:`RowFilter`). Fewer rows: every file, no cut."""
    from pyspark.sql import functions as F

    hours = by_hour(files)
    newest = sorted(hours, reverse=True)
    chosen: list[LakeFile] = []
    footer_rows, target, at = 0, wanted, 0
    while True:
        # hours enough by their footers' row counts (an upper bound: statuses and versions filter some out)
        while at < len(newest) and footer_rows < target:
            for f in hours[newest[at]]:
                check_file(fs=fs, file=f, table="predictions", features=kinds)
                with fs.open_input_file(f.path) as handle:
                    footer_rows += pq.read_metadata(handle).num_rows
                chosen.append(f)
            at += 1
        keys = keys_frame(spark, lake, chosen, rows, vector=False)
        held = keys.count()
        if held >= wanted or at >= len(newest):
            break
        target = 2 * footer_rows  # too few after filtering: twice the hours' rows
    if held < wanted:
        return files, rows
    top = keys.orderBy(F.desc("logged_at"), F.desc("file_key"), F.desc("row")).limit(wanted)
    last = top.orderBy("logged_at", "file_key", "row").limit(1).collect()[0]
    t = last["logged_at"]
    t = t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
    first_hour = t.replace(minute=0, second=0, microsecond=0)
    return [f for f in files if f.hour >= first_hour], replace(
        rows, cut=(t, str(last["file_key"]), int(last["row"]))
    )


@dataclass(frozen=True)
class Labelled:
    """The window's labelled rows in time order: outputs, labels, a multi-class model's vectors."""

    outputs: np.ndarray
    labels: np.ndarray
    vectors: np.ndarray


def label_rows(
    *,
    spark: SparkSession,
    lake: str,
    files: Sequence[LakeFile],
    labels: Sequence[LakeFile],
    rows: RowFilter,
    width: int,
) -> Labelled:
    """The newest label of each of the window's predictions, joined by prediction id in Spark and returned in
    the log's order (:class:`RowFilter`: the database path's id order)."""
    from pyspark.sql import functions as F

    got = _paths(spark, labels).mapInArrow(read_labels(lake), LABELS)
    newest = got.groupBy("prediction_id").agg(F.max_by("label", "received_at").alias("label"))
    keys = keys_frame(spark, lake, files, rows, vector=width > 0)
    joined = keys.join(newest, on="prediction_id", how="inner").orderBy("logged_at", "file_key", "row")
    table = joined.toArrow()
    outputs = table.column("output").to_numpy().astype(np.float64) if table.num_rows else np.empty(0)
    y = table.column("label").to_numpy().astype(np.float64) if table.num_rows else np.empty(0)
    y = np.where(np.isnan(y), np.nan, y)
    vectors = (
        vector_matrix(table.column("vector").combine_chunks(), width)
        if width and table.num_rows
        else np.empty((0, width))
    )
    return Labelled(outputs=outputs, labels=y, vectors=vectors)

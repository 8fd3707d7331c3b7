"""The window's row sample drawn from the lake by Spark: a uniform sample of at most ``k`` of the window's
rows (the profile's features, the answers, the newest label), for segments, weak slices and attribution.

Every row of the window gets a uniform random key (numpy, seeded by the window and the file's path: the
same window on the same files draws the same rows; a tie of keys is broken by the prediction id); the ``k``
rows of smallest key are a uniform sample without replacement. Each executor keeps only its file's ``k``
smallest keys (no Python per row), Spark keeps the ``k`` smallest of those (a top-k) and joins their labels
by prediction id; only the sample comes back to the driver. These are not the rows the database path
samples (which draws positions in the id order).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from monitors.profile import CategoricalProfile, Profile
from monitors.rows import RowSample
from monitors.spark.counting import BATCH_ROWS, RowFilter, order_key, vector_matrix
from monitors.spark.rows import LABELS, Reader, read_labels
from predictions.lake.layout import FEATURES
from predictions.lake.scan import LakeFile, lake_filesystem
from registry.schema import Task

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def sample_seed(model_name: str, start: datetime | None, end: datetime | None, rows: int) -> int:
    """The seed of a lake window's sample: the same window (model, first and last time, rows) draws the
    same rows."""
    key = f"{model_name}|{start}|{end}|{rows}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")


BY_KEY = [("key", "ascending"), ("prediction_id", "ascending")]  # the id breaks a tie of keys


def _path_seed(path: str) -> int:
    """A file's part of its rows' seed: its whole path (two hours' files may share a name)."""
    return int.from_bytes(hashlib.blake2b(path.encode(), digest_size=8).digest(), "little")


def _schema(profile: Profile, width: int) -> str:
    """The sampled rows' Spark schema: features by position (``f0``, ``f1``, ...: any name is safe)."""
    cols = ["key double", "prediction_id string", "output double"]
    cols += ["vector array<double>"] if width else []
    for j, feature in enumerate(profile.features.values()):
        cols.append(f"f{j} {'string' if isinstance(feature, CategoricalProfile) else 'double'}")
    return ", ".join(cols)


def _columns(batch: pa.RecordBatch, profile: Profile) -> list[pa.Array]:
    """The batch's features as the schema's columns (an absent feature: nulls)."""
    features = batch.column(FEATURES)
    names = {features.type.field(i).name: i for i in range(features.type.num_fields)}
    out: list[pa.Array] = []
    for name, feature in profile.features.items():
        kind = pa.string() if isinstance(feature, CategoricalProfile) else pa.float64()
        at = names.get(name)
        if at is None:
            out.append(pa.nulls(batch.num_rows, kind))
            continue
        values = features.field(at)
        if pa.types.is_dictionary(values.type):
            values = values.dictionary_decode()
        out.append(values.cast(kind))
    return out


def read_sample(lake: str, rows: RowFilter, profile: Profile, *, k: int, seed: int, width: int) -> Reader:
    """The executors' reader: each file's ``k`` window rows of smallest random key."""
    names = ["key", "prediction_id", "output", *(["vector"] if width else [])]
    names += [f"f{j}" for j in range(len(profile.features))]
    columns = ["prediction_id", "model_version", "logged_at", "status", "output", FEATURES]
    columns += ["vector"] if width else []

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, _ = lake_filesystem(lake)
        for paths in batches:
            for path in paths.column("path").to_pylist():
                key, first = order_key(path), 0
                rng = np.random.default_rng([seed, _path_seed(path)])
                best: pa.Table | None = None
                with fs.open_input_file(path) as handle:
                    for b in pq.ParquetFile(handle).iter_batches(batch_size=BATCH_ROWS, columns=columns):
                        draws = pa.array(rng.random(b.num_rows))
                        mask = rows.mask(b, key=key, first_row=first)
                        first += b.num_rows
                        kept = b.filter(mask)
                        if not kept.num_rows:
                            continue
                        arrays = [draws.filter(mask), kept.column("prediction_id"), kept.column("output")]
                        if width:
                            arrays.append(kept.column("vector").cast(pa.list_(pa.float64())))
                        arrays += _columns(kept, profile)
                        part = pa.Table.from_arrays(arrays, names=names)
                        best = part if best is None else pa.concat_tables([best, part])
                        if best.num_rows > k:
                            order = pc.sort_indices(best, sort_keys=BY_KEY)
                            best = best.take(order[:k])
                if best is not None and best.num_rows:
                    yield from best.combine_chunks().to_batches()

    return read


def lake_sample(
    *,
    spark: SparkSession,
    lake: str,
    files: Sequence[LakeFile],
    labels: Sequence[LakeFile],
    rows: RowFilter,
    profile: Profile,
    k: int,
    seed: int,
    population: int,
) -> RowSample:
    """A uniform sample of at most ``k`` of the window's rows (``files`` filtered by ``rows``), with the
    newest label of each from ``labels``; drawn and joined in Spark, only the sample collected."""
    from pyspark.sql import functions as F

    width = len(profile.class_probabilities) if profile.task is Task.MULTICLASS else 0
    paths = spark.createDataFrame([(f.path,) for f in files], "path string").repartition(max(1, len(files)))
    reader = read_sample(lake, rows, profile, k=k, seed=seed, width=width)
    picked = paths.mapInArrow(reader, _schema(profile, width)).orderBy("key", "prediction_id").limit(k)
    if labels:
        got = spark.createDataFrame([(f.path,) for f in labels], "path string").mapInArrow(
            read_labels(lake), LABELS
        )
        newest = got.groupBy("prediction_id").agg(F.max_by("label", "received_at").alias("label"))
        picked = picked.join(newest, on="prediction_id", how="left")
    else:
        picked = picked.withColumn("label", F.lit(None).cast("double"))
    table = picked.orderBy("key", "prediction_id").toArrow()
    return _row_sample(table, profile, width, population)


def _row_sample(table: pa.Table, profile: Profile, width: int, population: int) -> RowSample:
    """The collected rows as a :class:`RowSample` (numbers float64 with NaN, categories str or None)."""
    n = table.num_rows
    columns: dict[str, np.ndarray] = {}
    for j, (name, feature) in enumerate(profile.features.items()):
        col = table.column(f"f{j}")
        if isinstance(feature, CategoricalProfile):
            columns[name] = np.array(col.to_pylist(), dtype=object)
        else:
            columns[name] = col.to_numpy().astype(np.float64) if n else np.empty(0)
    labels = table.column("label").to_numpy().astype(np.float64) if n else np.empty(0)
    if width:
        vectors = table.column("vector").combine_chunks()
        predictions = vector_matrix(vectors, width) if n else np.empty((0, width))
    else:
        predictions = table.column("output").to_numpy().astype(np.float64) if n else np.empty(0)
    return RowSample(
        columns=columns,
        kinds={name: feature.kind for name, feature in profile.features.items()},
        predictions=predictions,
        labels=labels if np.isfinite(labels).any() else None,
        population=population,
    )

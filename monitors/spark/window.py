"""A model's window read from the lake on Spark, as the same :class:`monitors.log_window.Window` (with its
:class:`WindowSketch`) that :func:`monitors.engine.evaluate` judges on the database path.

The driver lists the window's partitions (pruned by date and hour, :mod:`predictions.lake.scan`) and checks
each new file's footer; the executors read the files with Arrow and count them on the reference grids
(:mod:`.counting`: the profile travels once, as a broadcast), merged by hour on the executors. An hour lying
wholly inside the window is counted once: its counts are kept in ``monitor_window_sketches`` keyed by the
names and sizes of its files (:mod:`monitors.service`), so a moving window reads only what is new. Labels are
joined to the window's predictions by prediction id in Spark (the newest label wins) and only the labelled
rows come back, in time order, for the ordered error stream, as on the database path. The driver never holds
the window's rows.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pyarrow.fs as pafs
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from monitors.log_window import Window
from monitors.profile import CategoricalProfile, Profile
from monitors.rows import RowSample
from monitors.service import CachedBlock, SketchKey, block_sketches, cached_blocks, prune_blocks, store_blocks
from monitors.sketch import SKETCH_FORMAT, MulticlassCounts, WindowSketch, fingerprint
from monitors.spark.cache import decode_part, encode_part
from monitors.spark.counting import FileTask, Part, RowFilter, count_files, merge_parts
from monitors.spark.rows import label_rows, last_rows_cut
from monitors.spark.sample import lake_sample, sample_seed
from predictions.lake.scan import (
    HOUR,
    LABELS,
    PREDICTIONS,
    LakeFile,
    by_hour,
    check_file,
    files_digest,
    lake_filesystem,
    list_files,
)
from predictions.windows import WindowReader, WindowSpec
from registry.schema import Task

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

READER = "spark"
LAKE_BLOCKS = -3600  # the sketch cache's block size of lake hours (a block is an hour; no database ids)


@dataclass
class LakeRead:
    """What one read took from the lake: the files counted (paths), the hours taken from the cache and
    the hours counted, and wall seconds per step."""

    files_read: list[str] = field(default_factory=list)
    cached_hours: int = 0
    counted_hours: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


def read_lake_window(
    *,
    spark: SparkSession,
    lake: str,
    profile: Profile,
    model_name: str,
    spec: WindowSpec,
    threshold: float = 0.5,
    now: datetime | None = None,
    cache: Engine | None = None,
    read: LakeRead | None = None,
    chunk_rows: int = WindowReader.CHUNK_ROWS,
    sample_rows: int = 0,
) -> Window:
    """Read one model's window from the lake on ``spark`` and sketch it on ``profile``'s grids (``cache``:
    the database keeping the counts of whole hours; ``read``: filled with what was read; ``chunk_rows``: the
    labelled rows fed to the error stream at a time, as the database path feeds them; ``sample_rows`` > 0:
    ``Window.sample`` holds a uniform sample of at most that many rows, drawn by Spark, :mod:`.sample`)."""
    read = read if read is not None else LakeRead()
    began = time.perf_counter()
    now = (now or datetime.now(UTC)).astimezone(UTC)
    since = now - timedelta(minutes=spec.minutes) if spec.minutes is not None else None
    fs, root = lake_filesystem(lake)
    files = list_files(
        fs=fs, root=root, table=PREDICTIONS, model_name=model_name, since=since, until=spec.until
    )
    rows = RowFilter(version=spec.version, since=since, until=spec.until)
    kinds = {
        n: "categorical" if isinstance(f, CategoricalProfile) else "numeric"
        for n, f in profile.features.items()
    }
    if spec.rows is not None and files:
        files, rows = last_rows_cut(
            spark=spark, lake=lake, fs=fs, files=files, rows=rows, wanted=spec.rows, kinds=kinds
        )
    read.seconds["list"] = round(time.perf_counter() - began, 4)
    total = _sketch_hours(
        spark=spark,
        lake=lake,
        fs=fs,
        files=files,
        rows=rows,
        profile=profile,
        threshold=threshold,
        key=_key(model_name, spec, profile, threshold),
        cache=cache,
        read=read,
        kinds=kinds,
    )
    read.seconds["count"] = round(time.perf_counter() - began - read.seconds["list"], 4)
    if total.start is not None and profile.prediction is not None:
        _add_labels(
            spark=spark,
            lake=lake,
            fs=fs,
            root=root,
            model_name=model_name,
            files=files,
            rows=rows,
            profile=profile,
            part=total,
            chunk_rows=chunk_rows,
        )
    read.seconds["labels"] = round(time.perf_counter() - began - sum(read.seconds.values()), 4)
    sample = None
    if sample_rows > 0 and total.sketch.rows:
        labels = list_files(fs=fs, root=root, table=LABELS, model_name=model_name, since=total.start)
        sample = lake_sample(
            spark=spark,
            lake=lake,
            files=files,
            labels=labels,
            rows=rows,
            profile=profile,
            k=sample_rows,
            seed=sample_seed(model_name, total.start, total.end, total.sketch.rows),
            population=total.sketch.rows,
        )
        read.seconds["sample"] = round(time.perf_counter() - began - sum(read.seconds.values()), 4)
    return _as_window(model_name, spec, since, total, read, sample)


def _as_window(
    model_name: str,
    spec: WindowSpec,
    since: datetime | None,
    total: Part,
    read: LakeRead,
    sample: RowSample | None,
) -> Window:
    """The window the database path would build, from the lake's counts."""
    sketch = total.sketch
    window = Window(
        model_name=model_name,
        spec=spec,
        rows=sketch.rows,
        start=total.start,
        end=total.end,
        first_id=None,
        last_id=None,
        labelled=sketch.labelled,
        sketch=sketch,
        reader=READER,
        since=since,
        chunks=len(read.files_read),
        cached_blocks=read.cached_hours,
        counted_blocks=read.counted_hours,
        cache_seconds=read.seconds,
    )
    window.sample = sample
    return window


def _key(model_name: str, spec: WindowSpec, profile: Profile, threshold: float) -> SketchKey:
    return SketchKey(
        model_name=model_name,
        version_filter=spec.version or 0,
        fingerprint=fingerprint(profile, float(threshold), SKETCH_FORMAT, READER),
        block_ids=LAKE_BLOCKS,
    )


def _whole(hour: datetime, rows: RowFilter) -> bool:
    """The window holds the whole hour (no time bound and no cut falls inside it)."""
    end = hour + HOUR
    inside = (rows.since is None or rows.since <= hour) and (rows.until is None or rows.until >= end)
    return inside and (rows.cut is None or rows.cut[0] < hour)


def _sketch_hours(
    *,
    spark: SparkSession,
    lake: str,
    fs: pafs.FileSystem,
    files: list[LakeFile],
    rows: RowFilter,
    profile: Profile,
    threshold: float,
    key: SketchKey,
    cache: Engine | None,
    read: LakeRead,
    kinds: dict[str, str],
) -> Part:
    """The window's counts: whole hours from the cache where their files are still those counted, the rest
    counted on the executors (whole hours then stored)."""
    hours = by_hour(files)
    digests = {h: files_digest(fs_) for h, fs_ in hours.items()}
    whole = [h for h in hours if _whole(h, rows)]
    stored = _stored(cache, key, whole, digests)
    parts: dict[datetime, Part] = dict(stored)
    todo = [f for h, fs_ in hours.items() if h not in stored for f in fs_]
    for f in todo:
        check_file(fs=fs, file=f, table=PREDICTIONS, features=kinds)
    read.files_read = [f.path for f in todo]
    read.cached_hours, read.counted_hours = len(stored), len(hours) - len(stored)
    if todo:
        counted = _count(spark, lake, todo, profile=profile, rows=rows, threshold=threshold)
        parts.update(counted)
        fresh = {h: p for h, p in counted.items() if h in whole}
        if cache is not None and fresh:
            _store(cache, key, fresh, digests)
    if cache is not None and hours:
        with Session(cache) as session, session.begin():
            prune_blocks(session=session, key=key, below=_block(min(hours)))
    total = Part(sketch=WindowSketch(threshold=threshold))
    if profile.task is Task.MULTICLASS:
        total.sketch.multiclass = MulticlassCounts(len(profile.class_probabilities))
    for hour in sorted(parts):
        total = merge_parts(total, parts[hour])
    return total


def _count(
    spark: SparkSession,
    lake: str,
    files: Sequence[LakeFile],
    *,
    profile: Profile,
    rows: RowFilter,
    threshold: float,
) -> dict[datetime, Part]:
    """Count ``files`` on the executors, one task per file, merged by hour there."""
    sc = spark.sparkContext
    shared = sc.broadcast(profile)
    tasks = [FileTask(lake=lake, path=f.path, hour=f.hour) for f in files]

    def count(part: Iterable[FileTask]) -> Iterable[tuple[int, Part]]:
        return count_files(part, profile=shared.value, rows=rows, threshold=threshold)

    try:
        merged = sc.parallelize(tasks, len(tasks)).mapPartitions(count).reduceByKey(merge_parts).collect()
    finally:
        shared.unpersist()
    return {datetime.fromtimestamp(h, UTC): p for h, p in merged}


def _block(hour: datetime) -> int:
    return int(hour.timestamp()) // 3600


def _stored(
    cache: Engine | None, key: SketchKey, hours: list[datetime], digests: dict[datetime, str]
) -> dict[datetime, Part]:
    """The cached counts of ``hours`` whose files are still those counted."""
    if cache is None or not hours:
        return {}
    with Session(cache) as session:
        blocks = [_block(h) for h in hours]
        found = cached_blocks(session=session, key=key, blocks=blocks)
        data = block_sketches(session=session, key=key, blocks=[b for b in blocks if b in found])
    out: dict[datetime, Part] = {}
    for hour in hours:
        blob = data.get(_block(hour))
        got = None if blob is None else decode_part(blob, digest=digests[hour])
        if got is not None:
            out[hour] = got
    return out


def _store(cache: Engine, key: SketchKey, parts: dict[datetime, Part], digests: dict[datetime, str]) -> None:
    blocks = [
        CachedBlock(_block(h), p.sketch.rows, h, encode_part(p, digest=digests[h])) for h, p in parts.items()
    ]
    with Session(cache) as session, session.begin():
        store_blocks(session=session, key=key, blocks=blocks)


def _add_labels(
    *,
    spark: SparkSession,
    lake: str,
    fs: pafs.FileSystem,
    root: str,
    model_name: str,
    files: list[LakeFile],
    rows: RowFilter,
    profile: Profile,
    part: Part,
    chunk_rows: int,
) -> None:
    """Join the labels to the window's predictions in Spark and count the labelled rows, in time order, into
    the sketch (a multi-class model's confusion, log loss and error stream from its vectors)."""
    assert part.start is not None
    labels = list_files(fs=fs, root=root, table=LABELS, model_name=model_name, since=part.start)
    for f in labels:
        check_file(fs=fs, file=f, table=LABELS)
    if not labels:
        return
    width = len(profile.class_probabilities) if profile.task is Task.MULTICLASS else 0
    got = label_rows(spark=spark, lake=lake, files=files, labels=labels, rows=rows, width=width)
    sketch = part.sketch
    if width and sketch.multiclass is not None:
        labelled = MulticlassCounts(width)
        labelled.add(profile, got.vectors, got.labels, sketch.errors)
        sketch.multiclass.confusion = sketch.multiclass.confusion + labelled.confusion
        sketch.multiclass.log_loss += labelled.log_loss
        return
    for lo in range(0, got.labels.size, chunk_rows):
        sketch.add_labels(profile, got.outputs[lo : lo + chunk_rows], got.labels[lo : lo + chunk_rows])


__all__ = ["READER", "LakeRead", "read_lake_window"]

"""The two halves of the lake joined: predictions served through the production write path with
``lake_mode=also`` (the serving writer: the database and the lake sink) and labelled as the feedback route
labels them, then ``predictions export`` of the database's log into another lake; the window read on the
Spark cluster from either lake equals the window read from the database (counts per cell and category,
sources, labels joined, the report)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from core.database import Database, open_database
from monitors.config import MonitorConfig
from monitors.engine import evaluate
from monitors.explain import explain
from monitors.log_window import read_window
from monitors.spark.window import LakeRead, read_lake_window
from predictions.lake.export import export_model
from predictions.lake.files import open_lake
from predictions.windows import WindowSpec
from registry.schema import Task
from tests.lake.conftest import S3Lake
from tests.spark.compare import assert_same_sketch, same_json, window_doc
from tests.spark.e2edata import UNSEEN, Served, serve_both
from tests.spark.lakedata import reference_profile
from tests.support import postgres_schema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROWS = 20_000
CONFIG = MonitorConfig()
START = datetime(2026, 11, 9, 23, 20, tzinfo=UTC)  # 4,000 requests a second apart: two hours, two dates


@pytest.fixture(scope="module")
def pg(postgres_url: str) -> Iterator[Database]:
    with postgres_schema(postgres_url) as url:
        db = open_database(url)
        yield db
        db.dispose()


@pytest.fixture(scope="module", params=[Task.BINARY, Task.MULTICLASS], ids=lambda t: t.name)
def served(
    request: pytest.FixtureRequest, pg: Database, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Task, str, Served]:
    task: Task = request.param
    lake = tmp_path_factory.mktemp("sink-lake")
    done = serve_both(pg, str(lake), tmp_path_factory.mktemp("spool"), task, rows=ROWS, start=START)
    return task, str(lake), done


def test_the_sinks_files_give_the_databases_window(
    spark: SparkSession, pg: Database, served: tuple[Task, str, Served]
) -> None:
    task, lake, done = served
    _same_window(spark, pg, lake, task, done, rows=ROWS)


def test_the_exported_files_give_the_databases_window(
    spark: SparkSession, pg: Database, served: tuple[Task, str, Served], tmp_path: Path
) -> None:
    task, _, done = served
    folder = tmp_path / "exported"
    folder.mkdir()
    copied = export_model(
        db=pg,
        target=open_lake(str(folder)),
        model_name=task.name.lower(),
        since=done.start,
        until=done.end + timedelta(seconds=1),
    )
    assert copied.predictions == ROWS and copied.labels == done.labelled
    _same_window(spark, pg, str(folder), task, done, rows=ROWS)  # export keeps each row's source


def test_an_s3_lake_written_by_the_sink_and_export_gives_the_databases_window(
    spark: SparkSession, pg: Database, s3_lake: S3Lake, tmp_path: Path
) -> None:
    """The sink writes to ``s3://`` on the S3-compatible server; the executors (started without the
    ``AWS_*`` variables) read it with what the driver's session forwards."""
    rows, model = 6_000, "binary_s3"
    done = serve_both(pg, s3_lake.url, tmp_path, Task.BINARY, rows=rows, start=START, model=model)
    forwarded = {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"}
    assert forwarded <= set(_executor_environment(spark))  # the cluster itself was started without them
    _same_window(spark, pg, s3_lake.url, Task.BINARY, done, rows=rows, model=model)
    exported = f"s3://{s3_lake.bucket}/exported"
    end = done.end + timedelta(seconds=1)
    copied = export_model(db=pg, target=open_lake(exported), model_name=model, since=done.start, until=end)
    assert copied.predictions == rows
    _same_window(spark, pg, exported, Task.BINARY, done, rows=rows, model=model)


def test_a_spark_windows_sample_gives_segments_as_the_databases_does(
    spark: SparkSession, pg: Database, served: tuple[Task, str, Served]
) -> None:
    """The row sample drawn by Spark (not the database's rows, the same size and kind) feeds the segments."""
    task, lake, done = served
    profile, model, k = reference_profile(task), task.name.lower(), 2_000
    now = done.end + timedelta(minutes=1)
    spec = WindowSpec(minutes=(now - done.start).total_seconds() / 60 + 1)
    ours = read_lake_window(
        spark=spark, lake=lake, profile=profile, model_name=model, spec=spec, now=now, sample_rows=k
    )
    theirs = read_window(
        engine=pg.engine, profile=profile, model_name=model, spec=spec, now=now, sample_rows=k
    )
    assert ours.sample is not None and theirs.sample is not None
    assert ours.sample.rows == theirs.sample.rows == k and ours.sample.population == ROWS
    assert ours.sample.kinds == theirs.sample.kinds
    assert ours.sample.predictions.shape == theirs.sample.predictions.shape
    assert 0 < ours.sample.labelled < k  # every 7th prediction is labelled
    assert set(ours.sample.columns["c"]) <= {"a", "b", "c", UNSEEN, None}
    reports = []
    for window in (ours, theirs):
        report = evaluate(profile=profile, sketch=window.sketch)
        explain(
            report, profile=profile, window=window.sample, predictor=lambda: None, config=CONFIG, level=0.05
        )
        reports.append(report)
    assert reports[1].segments and reports[0].segments
    assert reports[1].weak_slices is not None and reports[0].weak_slices is not None
    if task is Task.BINARY:  # the same window on the same files draws the same rows
        again = read_lake_window(
            spark=spark, lake=lake, profile=profile, model_name=model, spec=spec, now=now, sample_rows=k
        )
        assert again.sample is not None
        assert np.array_equal(again.sample.predictions, ours.sample.predictions)
        assert list(again.sample.columns["c"]) == list(ours.sample.columns["c"])


def _executor_environment(spark: SparkSession) -> list[str]:
    """The names of the variables a Python worker of the cluster inherited (from its executor's launch)."""
    import os

    def names(_: object) -> list[str]:
        return sorted(os.environ)

    return list(spark.sparkContext.parallelize([0], 1).flatMap(names).collect())


def _same_window(
    spark: SparkSession,
    pg: Database,
    lake: str,
    task: Task,
    done: Served,
    *,
    rows: int,
    model: str | None = None,
) -> None:
    profile = reference_profile(task)
    model = model or task.name.lower()
    now = done.end + timedelta(minutes=1)
    spec = WindowSpec(minutes=(now - done.start).total_seconds() / 60 + 1)
    read = LakeRead()
    ours = read_lake_window(
        spark=spark, lake=lake, profile=profile, model_name=model, spec=spec, now=now, read=read
    )
    theirs = read_window(engine=pg.engine, profile=profile, model_name=model, spec=spec, now=now)
    hours = len({t.replace(minute=0, second=0) for t in (done.start, done.end)})
    assert read.counted_hours == hours and len(read.files_read) >= hours
    assert ours.rows == theirs.rows == rows
    assert ours.labelled == theirs.labelled == done.labelled
    assert dict(ours.sketch.sources) == {"serve": rows}
    assert ours.sketch.categorical["c"][UNSEEN] > 0 and ours.sketch.categorical["c"][None] > 0
    assert ours.sketch.numeric["x1"] is not None and ours.sketch.numeric["x1"].missing > 0
    assert_same_sketch(ours.sketch, theirs.sketch)
    assert window_doc(ours) == window_doc(theirs)
    same_json(
        evaluate(profile=profile, sketch=ours.sketch).as_dict(),
        evaluate(profile=profile, sketch=theirs.sketch).as_dict(),
    )

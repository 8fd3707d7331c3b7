"""The same answer everywhere: on the same million predictions of each task, logged into PostgreSQL and
written into the lake, the window read on the Spark cluster and the window read from the database have
identical counts per cell and category, identical labels joined (the newest label of each prediction) and
the same report, up to the rounding of float sums (summed in another order)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from core.database import Database, open_database
from monitors.engine import evaluate
from monitors.log_window import Window, read_window
from monitors.profile import Profile
from monitors.spark.window import LakeRead, read_lake_window
from predictions.windows import WindowSpec
from registry.schema import Task
from tests.spark.compare import assert_same_sketch, same_json, window_doc
from tests.spark.lakedata import Logged, generate, log_both, reference_profile
from tests.support import postgres_schema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROWS = 1_000_000
START = datetime(2026, 11, 2, 22, 10, tzinfo=UTC)  # the log spans midnight: two dates, four hours


@pytest.fixture(scope="module")
def pg(postgres_url: str) -> Iterator[Database]:
    with postgres_schema(postgres_url) as url:
        db = open_database(url)
        yield db
        db.dispose()


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lake")


@pytest.fixture(scope="module", params=[Task.BINARY, Task.MULTICLASS, Task.REGRESSION], ids=lambda t: t.name)
def logged(request: pytest.FixtureRequest, pg: Database, lake: Path) -> tuple[Task, Profile, Logged]:
    task: Task = request.param
    data = generate(task, ROWS, seed=7, shift=0.15)
    done = log_both(pg, lake, data, model=task.name.lower(), start=START, spacing=timedelta(seconds=5))
    return task, reference_profile(task), done


def both(
    spark: SparkSession,
    pg: Database,
    lake: Path,
    profile: Profile,
    model: str,
    spec: WindowSpec,
    now: datetime,
) -> tuple[Window, Window]:
    ours = read_lake_window(
        spark=spark, lake=str(lake), profile=profile, model_name=model, spec=spec, now=now, read=LakeRead()
    )
    theirs = read_window(engine=pg.engine, profile=profile, model_name=model, spec=spec, now=now)
    return ours, theirs


def test_a_million_predictions_give_the_same_window_and_report(
    spark: SparkSession, pg: Database, lake: Path, logged: tuple[Task, Profile, Logged]
) -> None:
    task, profile, done = logged
    model = task.name.lower()
    now = done.end + timedelta(minutes=1)
    spec = WindowSpec(minutes=(now - done.start).total_seconds() / 60 + 1)
    ours, theirs = both(spark, pg, lake, profile, model, spec, now)
    assert ours.rows == theirs.rows == ROWS
    assert ours.labelled == theirs.labelled > 0
    assert_same_sketch(ours.sketch, theirs.sketch)
    assert window_doc(ours) == window_doc(theirs)
    same_json(
        evaluate(profile=profile, sketch=ours.sketch).as_dict(),
        evaluate(profile=profile, sketch=theirs.sketch).as_dict(),
    )


def test_a_window_of_the_last_rows_cuts_where_the_database_cuts(
    spark: SparkSession, pg: Database, lake: Path, logged: tuple[Task, Profile, Logged]
) -> None:
    """The last N predictions, N cutting inside a request: the same rows (the cut's time and id order)."""
    task, profile, done = logged
    if task is not Task.BINARY:
        pytest.skip("one task is enough for the cut")
    model = task.name.lower()
    spec = WindowSpec(rows=600_250)
    ours, theirs = both(spark, pg, lake, profile, model, spec, done.end + timedelta(minutes=1))
    assert ours.rows == theirs.rows == 600_250
    assert ours.start == theirs.start
    assert_same_sketch(ours.sketch, theirs.sketch)

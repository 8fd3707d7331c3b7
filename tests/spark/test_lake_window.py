"""Windows read from a lake folder on the standalone cluster: whole hours counted once and taken from the
sketch cache while their files stay the same (a moving window reads only the new hour), and the reader's bad
input (a missing lake, a file that is not Parquet, a file of another schema in a model's folder, a Spark
master that cannot be reached) as one line naming it, through the CLI too (exit 2)."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.config import get_settings
from core.database import Database, open_database
from core.errors import Invalid, Unavailable
from core.network import free_port
from monitors.spark.session import check_master
from monitors.spark.window import LakeRead, read_lake_window
from predictions.lake import layout
from predictions.windows import WindowSpec
from registry.schema import Task
from tests.monitors.logdata import register_profile
from tests.spark.cluster import Cluster
from tests.spark.compare import assert_same_sketch
from tests.spark.lakedata import generate, log_both, reference_doc, reference_profile
from tests.support import run_cli

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

HOUR0 = datetime(2026, 11, 20, 9, tzinfo=UTC)


@pytest.fixture
def cache(tmp_path: Path) -> Any:
    db = open_database(f"sqlite:///{tmp_path / 'cache.db'}", upgrade=True)
    yield db
    db.dispose()


def hours_of(data_rows: int, lake: Path, *, first: datetime, hours: int, model: str = "m") -> None:
    """``hours`` whole hours of predictions from ``first``: one request of 100 every 6 minutes."""
    for h in range(hours):
        data = generate(Task.BINARY, data_rows, seed=100 + h + int(first.timestamp()) % 1000)
        log_both(
            None,
            lake,
            data,
            model=model,
            start=first + timedelta(hours=h),
            per_request=100,
            spacing=timedelta(minutes=6),
        )


def test_a_window_one_hour_newer_reads_only_that_hour(
    spark: SparkSession, tmp_path: Path, cache: Database
) -> None:
    lake = tmp_path / "lake"
    profile = reference_profile(Task.BINARY)
    hours_of(1_000, lake, first=HOUR0, hours=3)
    spec = WindowSpec(minutes=180)

    def window(now: datetime, engine: Any) -> tuple[Any, LakeRead]:
        read = LakeRead()
        got = read_lake_window(
            spark=spark,
            lake=str(lake),
            profile=profile,
            model_name="m",
            spec=spec,
            now=now,
            cache=engine,
            read=read,
        )
        return got, read

    first, read1 = window(HOUR0 + timedelta(hours=3), cache.engine)
    assert (read1.cached_hours, read1.counted_hours, len(read1.files_read)) == (0, 3, 6)
    assert first.rows == 3_000
    hours_of(1_000, lake, first=HOUR0 + timedelta(hours=3), hours=1)  # an hour later: one more hour
    moved, read2 = window(HOUR0 + timedelta(hours=4), cache.engine)
    assert (read2.cached_hours, read2.counted_hours) == (2, 1)
    assert all("hour=12" in p for p in read2.files_read) and len(read2.files_read) == 2
    cold, read3 = window(HOUR0 + timedelta(hours=4), None)
    assert read3.cached_hours == 0 and len(read3.files_read) == 6
    assert_same_sketch(moved.sketch, cold.sketch)
    assert moved.start == cold.start and moved.end == cold.end
    # a file added to a cached hour (a late writer) changes the hour's files: it is counted again
    hours_of(100, lake, first=HOUR0 + timedelta(hours=2), hours=1)
    again, read4 = window(HOUR0 + timedelta(hours=4), cache.engine)
    assert (read4.cached_hours, read4.counted_hours) == (2, 1) and again.rows == moved.rows + 100
    assert len(read4.files_read) == 4 and all("hour=11" in p for p in read4.files_read)


def test_a_missing_lake_is_one_line_naming_it(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(Unavailable, match=re.escape(f"the lake {tmp_path / 'nope'} does not exist")):
        read_lake_window(
            spark=spark,
            lake=str(tmp_path / "nope"),
            profile=reference_profile(Task.BINARY),
            model_name="m",
            spec=WindowSpec(minutes=60),
        )


def test_a_file_that_is_not_parquet_is_named(spark: SparkSession, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    now = datetime.now(UTC)
    hours_of(200, lake, first=layout.hour_of(now), hours=1)
    bad = lake / layout.partition(layout.PREDICTIONS, "m", now) / "notes.parquet"
    bad.write_text("not parquet at all")
    with pytest.raises(Invalid, match=f"the lake file {re.escape(str(bad))} is not a readable Parquet file"):
        read_lake_window(
            spark=spark,
            lake=str(lake),
            profile=reference_profile(Task.BINARY),
            model_name="m",
            spec=WindowSpec(minutes=120),
        )
    (lake / layout.partition(layout.PREDICTIONS, "m", now) / "_writing-x.parquet").write_text("half")
    bad.unlink()  # a temporary file being written is never read
    got = read_lake_window(
        spark=spark,
        lake=str(lake),
        profile=reference_profile(Task.BINARY),
        model_name="m",
        spec=WindowSpec(minutes=120),
        now=now + timedelta(hours=1),
    )
    assert got.rows == 200


def test_a_file_of_another_model_in_the_folder_is_a_schema_error(spark: SparkSession, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    now = datetime.now(UTC)
    hours_of(200, lake, first=layout.hour_of(now), hours=1)
    stray = lake / layout.partition(layout.PREDICTIONS, "m", now) / "other-model.parquet"
    table = pq.read_table(next((lake / layout.partition(layout.PREDICTIONS, "m", now)).glob("*.parquet")))
    other = pa.StructArray.from_arrays([pa.array([1.0] * table.num_rows)], names=["tenure"])
    pq.write_table(table.set_column(table.schema.get_field_index("features"), "features", other), stray)
    with pytest.raises(
        Invalid, match=f"the lake file {re.escape(str(stray))} has another schema: its features lack"
    ):
        read_lake_window(
            spark=spark,
            lake=str(lake),
            profile=reference_profile(Task.BINARY),
            model_name="m",
            spec=WindowSpec(minutes=120),
            now=now + timedelta(hours=1),
        )
    wrong = table.set_column(
        table.schema.get_field_index("output"), "output", pa.array(["x"] * table.num_rows)
    )
    pq.write_table(wrong, stray)
    with pytest.raises(Invalid, match="column output is string, not double"):
        read_lake_window(
            spark=spark,
            lake=str(lake),
            profile=reference_profile(Task.BINARY),
            model_name="m",
            spec=WindowSpec(minutes=120),
            now=now + timedelta(hours=1),
        )


def test_a_master_that_cannot_be_reached_fails_fast_naming_it() -> None:
    url = f"spark://127.0.0.1:{free_port()}"
    began = time.monotonic()
    with pytest.raises(Unavailable, match=re.escape(f"the Spark master {url} cannot be reached")):
        check_master(url, timeout_s=2)
    assert time.monotonic() - began < 30  # not Spark's minute of retries


def _model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lake: Path) -> dict[str, str]:
    env = {"DRIFTWARDEN_LAKE_URL": str(lake), "DRIFTWARDEN_MONITOR_MIN_ROWS": "10"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    settings = get_settings()
    db = open_database(settings.database_url.get_secret_value(), upgrade=True)
    register_profile(db, settings.registry_path, reference_doc(Task.BINARY), model="m")
    db.dispose()
    return env


def _monitor_on_spark(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], master: str) -> Any:
    """``driftwarden monitor --once --model m --engine spark --spark-master MASTER`` with ``env``."""
    args = ("monitor", "--once", "--model", "m", "--engine", "spark", "--spark-master", master)
    return run_cli(monkeypatch, env, *args)


def test_monitor_on_spark_through_the_cli(
    spark_cluster: Cluster, spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lake = tmp_path / "lake"
    now = datetime.now(UTC)
    hours_of(300, lake, first=layout.hour_of(now) - timedelta(hours=1), hours=1)
    env = _model(tmp_path, monkeypatch, lake)
    env["DRIFTWARDEN_MONITOR_WINDOW_MINUTES"] = "180"
    ok = _monitor_on_spark(monkeypatch, env, spark_cluster.master)
    assert ok.exit_code in (0, 1), ok.output
    assert "m:1 run" in ok.stdout and "300 rows" in ok.stdout
    url = f"spark://127.0.0.1:{free_port()}"
    down = _monitor_on_spark(monkeypatch, env, url)
    assert down.exit_code == 2
    assert f"the Spark master {url} cannot be reached" in down.output
    assert "Traceback" not in down.output
    gone = {**env, "DRIFTWARDEN_LAKE_URL": str(tmp_path / "gone")}
    missing = _monitor_on_spark(monkeypatch, gone, spark_cluster.master)
    assert missing.exit_code == 2 and f"the lake {tmp_path / 'gone'} does not exist" in missing.output
    wrong = run_cli(monkeypatch, env, "monitor", "--once", "--engine", "sparkle")
    assert wrong.exit_code == 2 and "--engine" in wrong.output


def test_the_health_check_names_what_the_engine_cannot_reach(tmp_path: Path, spark_cluster: Cluster) -> None:
    from monitors.spark.health import spark_checks

    base = get_settings().model_copy(update={"monitor_engine": "spark", "spark_master": spark_cluster.master})
    assert spark_checks(base.model_copy(update={"monitor_engine": "database"})) == []
    (check,) = spark_checks(base.model_copy(update={"lake_url": str(tmp_path)}))
    assert check.fn().ok and not check.ready
    url = f"spark://127.0.0.1:{free_port()}"
    down = spark_checks(base.model_copy(update={"lake_url": str(tmp_path), "spark_master": url}))[0].fn()
    assert not down.ok and f"the Spark master {url} cannot be reached" in down.detail
    gone = spark_checks(base.model_copy(update={"lake_url": str(tmp_path / "gone")}))[0].fn()
    assert not gone.ok and "does not exist" in gone.detail

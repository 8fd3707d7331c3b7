"""The lake sink on the real filesystem and on an S3-compatible server: layout, schema, rolling, commits."""

from __future__ import annotations

import math
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from predictions import typed
from predictions.lake import layout as lake
from predictions.lake.files import Lake, committed_files, open_lake
from predictions.lake.sink import LakeSink
from predictions.spool import Spool
from tests.lake.conftest import S3Lake
from tests.lake.sinkdata import LAYOUT, batches, documents, read_lake, unwritable


@pytest.fixture(params=["local", "s3"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Lake:
    """A lake on disk or on the S3 server."""
    if request.param == "local":
        return open_lake(request.getfixturevalue("local_lake"))
    s3: S3Lake = request.getfixturevalue("s3_lake")
    return open_lake(s3.url)


def make_sink(target: Lake, wal: Path, **kwargs: Any) -> LakeSink:
    values: dict[str, Any] = {"roll_bytes": 1 << 30, "roll_s": 3600.0, **kwargs}
    return LakeSink(target=target, wal=Spool.claim(wal), **values)


def test_rows_land_in_the_layout_with_typed_columns(target: Lake, tmp_path: Path) -> None:
    at = datetime(2026, 3, 4, 5, 59, 59, 990000, tzinfo=UTC)  # the last 10 ms of an hour, then the next hour
    docs = documents(40)
    rows = batches(docs, per_request=3, at=at, spacing=timedelta(milliseconds=3))
    sink = make_sink(target, tmp_path / "wal")
    sink.append(rows, sync=True)
    assert committed_files(target, lake.PREDICTIONS) == []  # nothing visible before the roll
    assert sink.flush()
    files = committed_files(target, lake.PREDICTIONS)
    folders = sorted({f.rsplit("/", 1)[0] for f in files})
    assert folders == [
        "predictions/model=credit/date=2026-03-04/hour=05",
        "predictions/model=credit/date=2026-03-04/hour=06",
    ]
    table = read_lake(target)
    assert table.num_rows == 40
    assert table.schema.field("model_version").type == pa.int64()
    assert table.schema.field("logged_at").type == pa.timestamp("us", tz="UTC")
    features = table.schema.field("features").type
    assert features.field("age").type == pa.float64()
    assert features.field("city").type == pa.dictionary(pa.int32(), pa.string())
    ids = [pid for b in rows for pid in b.ids()]
    by_id = {r["prediction_id"]: r for r in table.to_pylist()}
    assert set(by_id) == set(ids)
    for i, pid in enumerate(ids):
        got, doc = by_id[pid], docs[i]
        assert got["features"]["age"] == doc["age"]
        assert got["features"]["income"] == doc.get("income")
        assert got["features"]["city"] == doc.get("city")  # "lima" is outside the layout: its text kept
        assert got["output"] == 0.25 + 0.5 * (i % 2)
        assert got["flags"] == (["late"] if i % 9 == 0 else None)
        assert got["source"] == "serve" and got["request_id"] == f"req-{i // 3}"
        assert got["inputs"] is None  # every value fit its typed column
        assert lake.hour_of(got["logged_at"]) == lake.parse_partition(got["_file"])[2]  # type: ignore[index]
    sink.close()


def test_multi_class_vectors_and_untyped_rows(target: Lake, tmp_path: Path) -> None:
    docs = documents(6)
    docs[2] = {**docs[2], "age": "forty"}  # text in a numeric feature: that request keeps its documents
    vectors: list[list[float | None]] = [[0.1, 0.2, 0.7], [0.5, 0.5, 0.0]] * 3
    rows = batches(docs, per_request=2, vectors=vectors)
    sink = make_sink(target, tmp_path / "wal")
    sink.append(rows, sync=False)
    sink.close()
    table = read_lake(target)
    assert table.schema.field("vector").type == pa.list_(pa.float64())
    got = {r["prediction_id"]: r for r in table.to_pylist()}
    ids = [pid for b in rows for pid in b.ids()]
    assert [got[pid]["vector"] for pid in ids] == vectors
    untyped = got[ids[2]]
    assert untyped["inputs"] is not None and '"forty"' in untyped["inputs"]
    assert untyped["features"]["age"] is None  # text does not fit a float: absent in the typed column
    assert untyped["features"]["city"] == docs[2].get("city")
    assert got[ids[0]]["inputs"] is None and got[ids[0]]["features"]["age"] == docs[0]["age"]


def test_labels_are_committed_per_hour(target: Lake, tmp_path: Path) -> None:
    sink = make_sink(target, tmp_path / "wal")
    t0 = datetime(2026, 3, 4, 7, 30, tzinfo=UTC)
    labels = [("a" * 36, 1.0, t0), ("b" * 36, 0.0, t0 + timedelta(hours=1))]
    assert sink.write_labels("credit", labels) == 2
    files = committed_files(target, lake.LABELS)
    assert [f.rsplit("/", 1)[0] for f in files] == [
        "labels/model=credit/date=2026-03-04/hour=07",
        "labels/model=credit/date=2026-03-04/hour=08",
    ]
    table = read_lake(target, lake.LABELS)
    assert sorted(zip(table["prediction_id"].to_pylist(), table["label"].to_pylist(), strict=True)) == [
        ("a" * 36, 1.0),
        ("b" * 36, 0.0),
    ]
    sink.close()


def test_rolls_by_size_and_by_time(local_lake: str, tmp_path: Path) -> None:
    target = open_lake(local_lake)
    by_size = make_sink(target, tmp_path / "wal-size", roll_bytes=8_000, tick_s=0.05)
    by_size.start()
    total = 0
    for k in range(6):
        rows = batches(documents(40, offset=k * 40), per_request=4)
        by_size.append(rows, sync=False)
        total += 40
        deadline = time.monotonic() + 10
        while by_size.wal.pending_bytes >= 8_000 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert len(committed_files(target, lake.PREDICTIONS)) >= 2  # rolled before close: more than one file
    by_size.close()
    assert read_lake(target).num_rows == total

    timed_target = tmp_path / "lake2"
    timed_target.mkdir()
    second = open_lake(str(timed_target))
    by_time = make_sink(second, tmp_path / "wal-time", roll_s=0.3, tick_s=0.05)
    by_time.start()
    by_time.append(batches(documents(5)), sync=False)
    deadline = time.monotonic() + 10
    while not committed_files(second, lake.PREDICTIONS) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert read_lake(second).num_rows == 5  # committed by time alone (no close, no size)
    by_time.close()


def test_a_reader_never_sees_half_a_file(target: Lake, tmp_path: Path) -> None:
    sink = make_sink(target, tmp_path / "wal")
    seen: list[int] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            try:
                seen.append(read_lake(target).num_rows)  # every listed file read whole, or the read fails
            except BaseException as exc:
                errors.append(exc)
                return

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for k in range(12):
            sink.append(batches(documents(30, offset=k * 30), per_request=5), sync=False)
            sink.flush()
    finally:
        done.set()
        thread.join(30)
    assert errors == []
    assert seen and all(n % 30 == 0 for n in seen)  # whole rolls only
    assert read_lake(target).num_rows == 360
    sink.close()


def test_a_crash_after_the_commit_replaces_the_files_not_doubles_them(
    local_lake: str, tmp_path: Path
) -> None:
    target = open_lake(local_lake)
    rows = batches(documents(50), per_request=5)
    first = make_sink(target, tmp_path / "wal")
    first.append(rows, sync=True)

    def crash(*_: object) -> None:
        raise SystemExit("killed between the file's commit and the cursor")

    setattr(first.wal, "commit", crash)  # noqa: B010 (a method replaced on this one object)
    with pytest.raises(SystemExit):
        first._roll_step()
    assert read_lake(target).num_rows == 50
    first.wal.close()  # the process is gone: its slot is free, its rows still in it
    second = make_sink(target, tmp_path / "wal")
    assert second.wal.pending_rows == 50
    second.close()
    table = read_lake(target)
    assert table.num_rows == 50 and len(set(table["prediction_id"].to_pylist())) == 50


def test_an_unwritable_folder_keeps_rows_in_the_spool_until_it_is_writable(
    local_lake: str, tmp_path: Path
) -> None:
    target = open_lake(local_lake)
    sink = make_sink(target, tmp_path / "wal", retry_s=0.0)
    sink.append(batches(documents(10)), sync=True)
    sink.flush()
    with unwritable(Path(local_lake)):
        sink.append(batches(documents(20, offset=10), per_request=4), sync=True)
        assert not sink.flush()
        assert not sink.stats.lake_ok and sink.stats.last_error
        assert sink.wal.pending_rows == 20
    assert not any(p.name.startswith("_") for p in Path(local_lake).rglob("*"))  # nothing half-written
    assert sink.flush() and sink.stats.lake_ok
    assert read_lake(target).num_rows == 30
    sink.close()


def test_unknown_layout_waits_in_the_spool(local_lake: str, tmp_path: Path) -> None:
    target = open_lake(local_lake)
    other = typed.make_layout(["x"], [])
    rows = batches([{"x": 1.0}, {"x": math.pi}], layout=other)
    typed.KNOWN.pop(other.id, None)
    sink = make_sink(target, tmp_path / "wal")
    sink.append(rows, sync=True)
    assert not sink.flush() and sink.wal.pending_rows == 2 and sink.stats.lake_ok
    typed.KNOWN[other.id] = other
    assert sink.flush()
    assert read_lake(target)["features"].to_pylist() == [{"x": 1.0}, {"x": math.pi}]
    assert LAYOUT.id in typed.KNOWN
    sink.close()

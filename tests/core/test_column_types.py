"""Columns of the types a pandas or Arrow export holds besides numbers and text: a duration is an amount (its
seconds, compared like any number), a record or a map per cell is its JSON text (as a list per cell is), and
a pandas ``Period`` is a date (no feature, listed as ignored), whether pandas' Arrow types are loaded or not.
Before, a shifted duration was ignored like a date ("dataset stable"), and a record, a map, a pandas period or
interval stopped the reading with Arrow's "Function 'dictionary_encode' has no kernel"."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from core.tabular import CodedColumn, Column, MemoryTable, TableStream, fold_batches, read_table
from service.cli import app

ROWS = 1_000


def _batches(source: Path | MemoryTable, name: str) -> list[Column]:
    """Column ``name`` of every batch of ``source`` (batches of 300 rows)."""

    def add(seen: list[Column], batch: dict[str, Column]) -> None:
        seen.append(batch[name])

    return fold_batches(TableStream(source, batch_rows=300), columns=[name], start=list, add=add)


@pytest.mark.parametrize("unit, per_second", [("s", 1), ("ms", 10**3), ("us", 10**6), ("ns", 10**9)])
def test_a_duration_is_its_seconds_in_every_reader(tmp_path: Path, unit: str, per_second: int) -> None:
    ticks = [None if i == 5 else (i % 97) * per_second + per_second // 4 for i in range(ROWS)]
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"wait": pa.array(ticks, type=pa.duration(unit))}), path)
    expected = np.array([np.nan if t is None else t / per_second for t in ticks])

    whole = read_table(path)["wait"]
    assert whole.dtype == np.float64
    np.testing.assert_array_equal(whole, expected)
    assert whole[1] == 1.25 if per_second > 1 else whole[1] == 1.0
    stream = TableStream(path)
    assert "wait" not in stream.temporal
    np.testing.assert_array_equal(np.concatenate(_batches(path, "wait")), expected)


def _pair(tmp_path: Path, name: str, reference: pa.Array, current: pa.Array) -> tuple[Path, Path]:
    rng = np.random.default_rng(3)
    paths = []
    for side, column in (("ref", reference), ("cur", current)):
        path = tmp_path / f"{name}_{side}.parquet"
        pq.write_table(pa.table({"a": rng.normal(size=ROWS), name: column}), path)
        paths.append(path)
    return paths[0], paths[1]


def _drift(reference: Path, current: Path, out: Path) -> tuple[int, dict[str, object]]:
    result = CliRunner().invoke(app, ["drift", str(reference), str(current), "--json", str(out)])
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(out.read_text())


def test_drift_finds_a_shifted_duration(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    seconds = [rng.integers(0, 100, ROWS), rng.integers(50, 150, ROWS)]
    reference, current = _pair(
        tmp_path, "wait", *(pa.array(s * 10**9, type=pa.duration("ns")) for s in seconds)
    )
    code, report = _drift(reference, current, tmp_path / "out.json")
    assert code == 1
    features = {f["name"]: f for f in report["features"]}  # type: ignore[attr-defined]
    assert features["wait"]["kind"] == "numeric" and features["wait"]["drifted"]
    assert "wait" not in report.get("ignored_columns", [])  # type: ignore[operator]


def test_a_record_or_a_map_per_cell_is_its_json_text(tmp_path: Path) -> None:
    records = pa.array([{"plan": ["basic", "pro"][i % 2], "seats": i % 3} for i in range(ROWS)])
    maps = pa.array([[("k", i % 3)] for i in range(ROWS)], type=pa.map_(pa.string(), pa.int64()))
    table = pa.table({"record": records, "map": maps})
    cells = {name: _batches(MemoryTable(table), name) for name in ("record", "map")}
    first = {name: batches[0] for name, batches in cells.items()}
    assert isinstance(first["record"], CodedColumn) and isinstance(first["map"], CodedColumn)
    assert first["record"].decode()[:2].tolist() == [
        '{"plan": "basic", "seats": 0}',
        '{"plan": "pro", "seats": 1}',
    ]
    assert first["map"].decode()[1] == '[["k", 1]]'

    reference, current = _pair(tmp_path, "record", records, records)
    code, report = _drift(reference, current, tmp_path / "out.json")
    assert code == 0
    kinds = {f["name"]: f["kind"] for f in report["features"]}  # type: ignore[attr-defined]
    assert kinds["record"] == "categorical"


def test_a_pandas_period_is_a_date_and_an_interval_a_category(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    import driftwarden

    rng = np.random.default_rng(5)

    def frame(shift: int) -> Any:
        return pd.DataFrame(
            {
                "a": rng.normal(size=ROWS),
                "month": pd.period_range("2026-01", periods=ROWS, freq="D") + shift,
                "band": pd.cut(rng.normal(shift / 100, 1, ROWS), [-10, -1, 0, 1, 10]),
            }
        )

    reference, current = frame(0), frame(100)
    report = driftwarden.compare(reference, current).to_dict()
    assert report["ignored_columns"] == ["month"]
    features = {f["name"]: f for f in report["features"]}
    assert features["band"]["kind"] == "categorical" and features["band"]["drifted"]

    ref_path, cur_path = tmp_path / "ref.parquet", tmp_path / "cur.parquet"
    reference.drop(columns="band").to_parquet(ref_path)  # pandas cannot write its intervals to Parquet
    current.drop(columns="band").to_parquet(cur_path)
    _, from_files = _drift(ref_path, cur_path, tmp_path / "out.json")
    assert from_files["ignored_columns"] == ["month"]
    # where pandas is not loaded (the command line), the column reads as its storage, its type in its metadata
    unloaded = subprocess.run(
        [sys.executable, "-c", UNLOADED, str(ref_path)], capture_output=True, text=True, check=True
    )
    assert json.loads(unloaded.stdout) == {"type": "int64", "pandas": False, "temporal": ["month"]}


UNLOADED = """
import json, sys
import pyarrow.parquet as pq
from core.tabular import TableStream
field = pq.read_schema(sys.argv[1]).field("month")
stream = TableStream(sys.argv[1])
seen = {"type": str(field.type), "pandas": "pandas" in sys.modules, "temporal": sorted(stream.temporal)}
print(json.dumps(seen))
"""

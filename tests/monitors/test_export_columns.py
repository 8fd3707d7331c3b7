"""`driftwarden drift` on files as a database or pandas exports them: a decimal amount is a number, a date
or timestamp column (later in every new window by nature) is no feature but listed as ignored, and the index
pandas writes as a column is no column, as pandas reads the file."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from core.tabular import TableStream, read_table
from tests.monitors.helpers import drift_report

ROWS = 5_000


def _export(seed: int, *, start: dt.datetime, shift: float = 0.0) -> pa.Table:
    rng = np.random.default_rng(seed)
    minutes = rng.integers(0, 60 * 24 * 30, ROWS)
    return pa.table(
        {
            "x": rng.normal(0.0, 1.0, ROWS),
            "amount": pa.array(
                [Decimal(f"{v:.2f}") for v in rng.normal(100 + 10 * shift, 10, ROWS)], pa.decimal128(10, 2)
            ),
            "created_at": pa.array(
                [start + dt.timedelta(minutes=int(m)) for m in minutes], pa.timestamp("us")
            ),
            "day": pa.array([(start + dt.timedelta(minutes=int(m))).date() for m in minutes], pa.date32()),
        }
    )


@pytest.fixture(scope="module", params=["parquet", "csv"])
def files(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("export")
    tables = {
        "reference": _export(1, start=dt.datetime(2026, 1, 1)),
        "current": _export(2, start=dt.datetime(2026, 3, 1), shift=0.5),  # a month later; amounts moved
    }
    out = {}
    for name, table in tables.items():
        out[name] = root / f"{name}.{request.param}"
        if request.param == "parquet":
            pq.write_table(table, out[name])
        else:
            pacsv.write_csv(table, out[name])  # ISO dates and times, which Arrow reads back as such
    return out


def test_an_amount_is_a_number_and_dates_are_ignored(files: dict[str, Path], tmp_path: Path) -> None:
    code, report = drift_report(files["reference"], files["current"], tmp_path)
    assert code == 1
    kinds = {f["name"]: f["kind"] for f in report["features"]}
    assert kinds == {"x": "numeric", "amount": "numeric"}
    assert sorted(report["ignored_columns"]) == ["created_at", "day"]
    amount = next(f for f in report["features"] if f["name"] == "amount")
    assert amount["drifted"] and amount["result"]["effect"] == pytest.approx(0.5, abs=0.06)
    assert not next(f for f in report["features"] if f["name"] == "x")["drifted"]


def test_an_index_pandas_wrote_is_no_feature(tmp_path: Path) -> None:
    """``df.to_parquet()`` writes a frame's index as a column ``__index_level_0__`` unless it is 0..n-1 (a
    filtered frame's): row numbers, different in every window, which ``pd.read_parquet`` makes the index
    again. Taken for a feature, it drifted in every comparison, or stopped one whose other file had no such
    column ('CURRENT lacks the feature column'); a model imported or trained on such a file took it for an
    input."""
    import pandas as pd

    rng = np.random.default_rng(4)
    frames = [pd.DataFrame({"x": rng.normal(size=ROWS), "c": rng.choice(["a", "b"], ROWS)}) for _ in "ab"]
    reference, current = tmp_path / "ref.parquet", tmp_path / "cur.parquet"
    sliced = tmp_path / "sliced.parquet"
    frames[0][frames[0]["c"] == "a"].to_parquet(reference)  # rows 0, 3, 4, ... of the frame
    frames[1][frames[1]["c"] == "a"].to_parquet(current)
    frames[1].iloc[100:].to_parquet(sliced)  # a range index: metadata only, no column
    assert "__index_level_0__" in pq.ParquetFile(reference).schema_arrow.names
    assert "__index_level_0__" not in pq.ParquetFile(sliced).schema_arrow.names
    code, report = drift_report(reference, current, tmp_path)
    assert code == 0, report
    assert sorted(f["name"] for f in report["features"]) == ["c", "x"] and "ignored_columns" not in report
    assert list(read_table(reference)) == ["x", "c"]
    assert TableStream(reference).names == ["x", "c"]
    code, report = drift_report(reference, sliced, tmp_path)
    assert sorted(f["name"] for f in report["features"]) == ["c", "x"] and "ignored_columns" not in report
    # df.to_csv() writes the index as a first column without a name: a numeric feature named ''
    csvs = [tmp_path / "ref.csv", tmp_path / "cur.csv"]
    for frame, path in zip(frames, csvs, strict=True):
        frame[frame["c"] == "a"].to_csv(path)
    assert csvs[0].read_text().startswith(",x,c\n")
    assert list(read_table(csvs[0])) == ["x", "c"] and TableStream(csvs[0]).names == ["x", "c"]
    code, report = drift_report(csvs[0], csvs[1], tmp_path)
    assert sorted(f["name"] for f in report["features"]) == ["c", "x"] and "ignored_columns" not in report

"""A column read whole, row group after row group (``TableStream.pieces``, what ``driftwarden drift`` reads
REFERENCE column by column with): the very values and facts of the same column read in batches, for a file of
one row group and of several (an integer column that meets a null only in a later group, text whose
dictionary differs between groups, booleans), and for a table in memory."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.tabular import CodedColumn, MemoryTable, TableStream, read_table, write_table
from monitors.offline import read_reference

ROWS = 5_000
AMOUNTS = [None if i == 3 else Decimal(f"{100 + (i % 997) * 0.37:.2f}") for i in range(ROWS)]
HASHES = [(i * 0x9E3779B97F4A7C15) % 2**64 for i in range(ROWS)]  # unsigned 64-bit: half from 2**63 on
IDS = [None if i == 11 else 2**62 + 7 * i for i in range(ROWS)]  # beyond 2**53, with a null


def _table() -> pa.Table:
    rng = np.random.default_rng(8)
    counts = rng.integers(0, 9, ROWS).astype(object)
    counts[ROWS - 7] = None  # a null in the last row group only: the column turns to floats there
    words = np.where(np.arange(ROWS) < ROWS // 2, "early", "late").astype(object)
    words[::13] = rng.choice(["a", "b", "c"], size=len(words[::13]))
    words[::101] = None
    return pa.table(
        {
            "x": pa.array(rng.normal(size=ROWS)),
            "counts": pa.array(counts.tolist(), type=pa.int64()),
            "word": pa.array(words.tolist(), type=pa.string()),
            "flag": pa.array((rng.random(ROWS) < 0.3).tolist()),
            "amount": pa.array(AMOUNTS, type=pa.decimal128(10, 2)),  # a database's money column
            "hash": pa.array(HASHES, type=pa.uint64()),
            "id": pa.array(IDS, type=pa.int64()),
            "small": pa.array(np.arange(ROWS, dtype=np.uint32)),
        }
    )


@pytest.fixture(scope="module", params=[ROWS, 1_200], ids=["one-group", "groups"])
def parquet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pieces") / "table.parquet"
    pq.write_table(_table(), path, row_group_size=request.param)
    return path


def _same(a: object, b: object) -> bool:
    if isinstance(a, CodedColumn) or isinstance(b, CodedColumn):
        assert isinstance(a, CodedColumn) and isinstance(b, CodedColumn)
        return a.decode().tolist() == b.decode().tolist()
    x, y = np.asarray(a), np.asarray(b)
    return x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True)


@pytest.mark.parametrize("source", ["file", "memory"])
def test_a_column_read_whole_is_the_column_read_in_batches(parquet: Path, source: str) -> None:
    table = pq.read_table(parquet)
    read: Path | MemoryTable = parquet if source == "file" else MemoryTable(table)
    if source == "file":
        assert (pq.ParquetFile(parquet).num_row_groups > 1) == (table.column("x").num_chunks > 1)
    facts, batched = read_reference(read, target="counts", prediction="x", batch_rows=700)
    by_column = read_reference(read, target="counts", prediction="x", on_column=lambda name, _: False)
    assert list(by_column[1]) == list(batched) == table.column_names
    assert by_column[0].rows == facts.rows == ROWS
    for name in table.column_names:
        assert by_column[0].columns[name] == facts.columns[name], name
        assert _same(by_column[1][name], batched[name]), name
    assert np.asarray(batched["counts"]).dtype == np.float64  # the null made the integers floats
    assert isinstance(batched["word"], CodedColumn)
    money = np.array([np.nan if v is None else float(v) for v in AMOUNTS])
    wholes = [batched["amount"], *([read_table(parquet)["amount"]] if source == "file" else [])]
    for amounts in wholes:  # decimals are numbers, as a CSV of them reads (Arrow's cast: within an ulp)
        assert isinstance(amounts, np.ndarray) and amounts.dtype == np.float64
        np.testing.assert_allclose(amounts, money, rtol=1e-15)
    # integers int64 cannot hold, or float64 only to the nearest value, were a file not read (TableError:
    # 'Integer value ... not in range') or, by read_table, unsigned values from 2**63 on read as negatives
    wanted = {
        "hash": (np.array(HASHES, dtype=np.float64), np.float64),
        "id": (np.array([np.nan if v is None else float(v) for v in IDS]), np.float64),
        "small": (np.arange(ROWS, dtype=np.int64), np.int64),
    }
    whole = read_table(parquet) if source == "file" else None
    for name, (values, dtype) in wanted.items():
        for got in [batched[name], *([whole[name]] if whole is not None else [])]:
            assert isinstance(got, np.ndarray) and got.dtype == dtype, name
            assert np.array_equal(got, values, equal_nan=True), name


def test_a_single_row_group_is_one_piece_and_a_csv_is_read_by_rows(tmp_path: Path) -> None:
    path = tmp_path / "one.parquet"
    pq.write_table(_table(), path, row_group_size=ROWS)
    stream = TableStream(path)
    pieces = list(stream.pieces("x"))
    assert len(pieces) == 1 and len(pieces[0]) == ROWS
    csv = write_table({"x": np.arange(3.0)}, tmp_path / "t.csv")
    with pytest.raises(ValueError, match="read by rows"):
        list(TableStream(csv).pieces("x"))

"""A CSV file's separator and decimal mark are read off its head (``core.tabular.csv_format``): a
spreadsheet that writes the comma as the decimal mark exports semicolon-separated files with numbers written
``50,25``, and a tab or a bar separate others. Read as a plain CSV, ``x;y`` was one text column whose every
row was a category of its own (``driftwarden drift`` compared it and found the files "stable" whatever their
numbers held), and ``50,25`` was text."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from core.tabular import (
    CSV_SNIFF_BYTES,
    CsvFormat,
    TableError,
    TableStream,
    csv_format,
    fold_batches,
    read_table,
    write_table,
)
from service.cli import app

ROWS = 400


def _write(path: Path, sep: str, *, shift: float = 0.0, seed: int = 0, mark: str = ".") -> Path:
    rng = np.random.default_rng(seed)
    lines = [sep.join(["income", "city", "note"])]
    for i in range(ROWS):
        city = ["Köln", "Lyon", "Oslo"][i % 3]
        income = f"{rng.normal(50 + shift, 5):.3f}".replace(".", mark)
        lines.append(sep.join([income, city, f'"a{sep}b, c"']))
    path.write_text("\ufeff" + "\n".join(lines) + "\n", encoding="utf-8")  # a spreadsheet's byte-order mark
    return path


@pytest.mark.parametrize(
    ("sep", "mark"), [(",", "."), (";", "."), (";", ","), ("\t", "."), ("\t", ","), ("|", ".")]
)
def test_the_separator_is_the_header_s_and_the_decimal_mark_the_numbers(
    tmp_path: Path, sep: str, mark: str
) -> None:
    path = _write(tmp_path / "t.csv", sep, mark=mark)
    assert csv_format(path) == CsvFormat(delimiter=sep, decimal_point=mark)
    whole = read_table(path)
    assert list(whole) == ["income", "city", "note"]
    assert whole["income"].dtype == np.float64 and len(whole["income"]) == ROWS
    assert set(whole["note"].tolist()) == {f"a{sep}b, c"}  # a quoted separator is text
    stream = TableStream(path, block_bytes=4 << 10)
    assert stream.names == list(whole)
    batches: list[dict[str, Any]] = fold_batches(
        stream, columns=None, start=list, add=lambda acc, b: acc.append(b)
    )
    assert len(batches) > 1
    assert np.array_equal(np.concatenate([b["income"] for b in batches]), whole["income"])


def test_one_column_and_a_quoted_header_keep_the_comma(tmp_path: Path) -> None:
    one = tmp_path / "one.csv"
    one.write_text("score\n1.5\n2.5\n")
    assert csv_format(one) == CsvFormat() and read_table(one)["score"].tolist() == [1.5, 2.5]
    quoted = tmp_path / "quoted.csv"
    quoted.write_text('"price; eur",qty\n1,2\n')
    assert csv_format(quoted) == CsvFormat() and list(read_table(quoted)) == ["price; eur", "qty"]
    points = tmp_path / "points.csv"  # a decimal point wins over a few commas, which group thousands then
    points.write_text("a;b\n1,250;0.5\n2.5;0.25\n3.5;1\n")
    assert csv_format(points) == CsvFormat(delimiter=";", grouped=frozenset({"a"}))
    assert read_table(points)["b"].tolist() == [0.5, 0.25, 1]
    assert read_table(points)["a"].tolist() == [1250, 2.5, 3.5]


def test_drift_reads_a_semicolon_export_as_its_comma_twin(tmp_path: Path) -> None:
    reports = {}
    for sep, mark, name in ((",", ".", "comma"), (";", ",", "semicolon")):
        ref = _write(tmp_path / f"{name}_ref.csv", sep, seed=1, mark=mark)
        cur = _write(tmp_path / f"{name}_cur.csv", sep, shift=4.0, seed=2, mark=mark)
        out = tmp_path / f"{name}.json"
        result = CliRunner().invoke(app, ["drift", str(ref), str(cur), "--json", str(out)])
        assert result.exit_code == 1, result.output  # income moved by 0.8 sd
        reports[name] = json.loads(out.read_text())
    drifted = {f["name"] for f in reports["semicolon"]["features"] if f["drifted"]}
    assert drifted == {"income"}
    same = [[f for f in reports[name]["features"] if f["name"] != "note"] for name in reports]  # text differs
    assert same[0] == same[1] and [f["name"] for f in same[0]] == ["income", "city"]


@pytest.mark.parametrize("packed", [".gz", ".bz2"])
def test_a_compressed_csv_is_read_as_it_is(tmp_path: Path, packed: str) -> None:
    """An export compressed by its producer (``x.csv.gz``) is read as the CSV it holds: it was refused
    ('unsupported file type .gz'), though Arrow decompresses it by its name."""
    import bz2
    import gzip

    plain = _write(tmp_path / "t.csv", ";", mark=",")
    path = tmp_path / f"t.csv{packed}"
    path.write_bytes((gzip if packed == ".gz" else bz2).compress(plain.read_bytes()))
    assert csv_format(path) == CsvFormat(delimiter=";", decimal_point=",")
    whole, wanted = read_table(path), read_table(plain)
    assert list(whole) == list(wanted) and np.array_equal(whole["income"], wanted["income"])
    stream = TableStream(path, block_bytes=4 << 10)
    batches: list[dict[str, Any]] = fold_batches(
        stream, columns=None, start=list, add=lambda acc, b: acc.append(b)
    )
    assert np.array_equal(np.concatenate([b["income"] for b in batches]), wanted["income"])
    other = tmp_path / "t.json.gz"
    other.write_bytes(path.read_bytes())
    refused = (
        r"unsupported file type '\.gz'; use \.csv or \.parquet \(a tab-separated file may be \.tsv; a CSV"
    )
    with pytest.raises(TableError, match=refused):
        read_table(other)


def _amounts(path: Path, sep: str, mark: str, *, rows: int, odd: int | None = None, seed: int = 3) -> Path:
    """A spreadsheet's export of formatted amounts: thousands grouped (``"12,345.67"``, ``12.345,67`` where
    the comma is the decimal mark), some under a thousand, some empty; row ``odd``'s amount is no number."""
    rng = np.random.default_rng(seed)
    lines = [sep.join(["amount", "city"])]
    for i in range(rows):
        value = rng.lognormal(7, 1.5) * (-1 if i % 17 == 0 else 1)
        text = f"{value:,.2f}"
        if mark == ",":
            text = text.replace(",", "_").replace(".", ",").replace("_", ".")
        cell = "" if i % 23 == 0 else "unknown" if i == odd else f'"{text}"' if sep == "," else text
        lines.append(sep.join([cell, ["Köln", "Lyon"][i % 2]]))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _cells(path: Path, sep: str) -> list[str]:
    """The amount cells of a file written by :func:`_amounts`, as written."""
    with path.open(encoding="utf-8", newline="") as f:
        return [amount for amount, _ in list(csv.reader(f, delimiter=sep))[1:]]


def _plain_amounts(grouped: Path, sep: str, mark: str) -> np.ndarray:
    """The amounts of a file written by :func:`_amounts`, parsed here (NaN for an empty cell)."""
    plain = [cell.replace("." if mark == "," else ",", "").replace(",", ".") for cell in _cells(grouped, sep)]
    return np.array([float(cell) if cell else np.nan for cell in plain])


@pytest.mark.parametrize(("sep", "mark"), [(",", "."), (";", ",")])
def test_numbers_with_their_thousands_grouped_are_numbers(tmp_path: Path, sep: str, mark: str) -> None:
    """``"1,234.5"`` (``1.234,5`` where the comma is the decimal mark) was text: a column of amounts became a
    category per amount, compared by a chi-square."""
    path = _amounts(tmp_path / "amounts.csv", sep, mark, rows=2_000)
    assert csv_format(path).grouped == {"amount"}
    wanted = _plain_amounts(path, sep, mark)
    whole = read_table(path)["amount"]
    assert whole.dtype == np.float64 and np.isnan(whole[0]) and whole[1] > 0 > whole[17]
    np.testing.assert_allclose(whole, wanted, rtol=1e-15)
    batches: list[dict[str, Any]] = fold_batches(
        TableStream(path, block_bytes=8 << 10), columns=None, start=list, add=lambda acc, b: acc.append(b)
    )
    assert len(batches) > 3
    assert np.array_equal(np.concatenate([b["amount"] for b in batches]), whole, equal_nan=True)


def test_a_cell_that_is_no_number_past_the_head_keeps_the_column_text(tmp_path: Path) -> None:
    """The head of the file decides (its first 64 KiB); a later cell that is no number makes the whole column
    text, in both readers (the stream reads the file again from its start)."""
    path = _amounts(tmp_path / "amounts.csv", ",", ".", rows=6_000, odd=5_500)
    assert path.read_bytes().index(b"unknown") > CSV_SNIFF_BYTES  # past the head that decides
    assert csv_format(path).grouped == {"amount"}
    whole = read_table(path)["amount"]
    assert whole.dtype == object and whole[5_500] == "unknown" and whole[1] == _cells(path, ",")[1]
    batches: list[dict[str, Any]] = fold_batches(
        TableStream(path, block_bytes=16 << 10), columns=None, start=list, add=lambda acc, b: acc.append(b)
    )
    streamed = [v for b in batches for v in b["amount"].decode().tolist()]
    assert streamed == whole.tolist()


def test_drift_reads_grouped_amounts_as_their_plain_twin(tmp_path: Path) -> None:
    reports = {}
    for name, grouped in (("grouped", True), ("plain", False)):
        pair = []
        for side, seed in (("ref", 4), ("cur", 5)):
            path = _amounts(tmp_path / f"{name}_{side}.csv", ",", ".", rows=1_500, seed=seed)
            if not grouped:
                amounts = ["" if np.isnan(v) else f"{v:.2f}" for v in _plain_amounts(path, ",", ".")]
                cities = [line.rsplit(",", 1)[1] for line in path.read_text().splitlines()[1:]]
                rows = [f"{a},{c}" for a, c in zip(amounts, cities, strict=True)]
                path.write_text("\n".join(["amount,city", *rows]) + "\n", encoding="utf-8")
            pair.append(str(path))
        out = tmp_path / f"{name}.json"
        result = CliRunner().invoke(app, ["drift", *pair, "--json", str(out)])
        assert result.exit_code in (0, 1), result.output
        reports[name] = json.loads(out.read_text())["features"]
    assert [f["kind"] for f in reports["grouped"] if f["name"] == "amount"] == ["numeric"]
    assert reports["grouped"] == reports["plain"]


def test_pandas_missing_values_are_missing(tmp_path: Path) -> None:
    """``None`` (Python's ``str(None)``) and ``<NA>`` (pandas' missing value, printed) are missing, as pandas
    reads them: a column of numbers holding them was text, compared as a category per number."""
    path = tmp_path / "t.csv"
    cells = ["1.5", "None", "2.5", "<NA>", "", "NA", "4"]
    path.write_text("score,word\n" + "".join(f"{c},{w}\n" for c, w in zip(cells, "abNcd<e", strict=True)))
    wanted = [1.5, np.nan, 2.5, np.nan, np.nan, np.nan, 4.0]
    np.testing.assert_array_equal(read_table(path)["score"], wanted)
    batches: list[dict[str, Any]] = fold_batches(
        TableStream(path), columns=None, start=list, add=lambda acc, b: acc.append(b)
    )
    np.testing.assert_array_equal(batches[0]["score"], wanted)
    assert read_table(path)["word"].tolist() == ["a", "b", "N", "c", "d", "<", "e"]


def _both_readers(path: Path) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """The file read whole, and read as a stream of small blocks (each column's values, in order)."""
    batches: list[dict[str, Any]] = fold_batches(
        TableStream(path, block_bytes=16 << 10), columns=None, start=list, add=lambda acc, b: acc.append(b)
    )
    assert len(batches) > 3
    streamed = {
        name: [v for b in batches for v in (b[name].decode() if hasattr(b[name], "decode") else b[name])]
        for name in batches[0]
    }
    return read_table(path), streamed


@pytest.mark.parametrize("then", ["", "unknown"])
def test_grouped_numbers_first_met_past_the_head(tmp_path: Path, then: str) -> None:
    """Amounts sorted from the smallest: the head holds plain numbers, the thousands come later. They were
    text, in both readers; a later cell that is no number still makes the column text, in both."""
    path = tmp_path / "sorted.csv"
    rows = [f"{i / 9:.2f},a" for i in range(9_000)] + ['"1,234.50",b', '"12,000",c', f"{then},d", "5,e"]
    path.write_text("amount,word\n" + "\n".join(rows) + "\n")
    assert path.read_bytes().index(b"1,234.50") > CSV_SNIFF_BYTES and not csv_format(path).grouped
    whole, streamed = _both_readers(path)
    if then:
        assert whole["amount"].dtype == object and whole["amount"][-4:].tolist() == [
            "1,234.50",
            "12,000",
            then,
            "5",
        ]
        assert streamed["amount"] == whole["amount"].tolist()
    else:
        assert whole["amount"].dtype == np.float64
        np.testing.assert_array_equal(whole["amount"][-4:], [1234.5, 12000, np.nan, 5])
        np.testing.assert_array_equal(streamed["amount"], whole["amount"])


def test_a_later_block_widens_the_right_column_beside_a_pandas_index(tmp_path: Path) -> None:
    """``df.to_csv()``'s unnamed index column is no column, but Arrow counts it when it names the column a
    later block could not convert: the stream widened the column after it, and stopped with 'CSV conversion
    error to int64' where ``read_table`` read the file."""
    path = tmp_path / "indexed.csv"
    rows = [f"{i},{i},{i % 7}" for i in range(7_000)] + ["7000,1.5,x", "7001,2,3"]
    path.write_text(",a,b\n" + "\n".join(rows) + "\n")
    whole, streamed = _both_readers(path)
    assert list(whole) == list(streamed) == ["a", "b"]
    assert whole["a"].dtype == np.float64 and whole["a"][-2:].tolist() == [1.5, 2.0]
    np.testing.assert_array_equal(streamed["a"], whole["a"])
    assert whole["b"].dtype == object and streamed["b"] == whole["b"].tolist()


def test_grouped_numbers_past_the_head_within_the_first_block(tmp_path: Path) -> None:
    """Past the 64 KiB head but in the stream's first block (16 MiB by default), which types the column as
    text: the stream finds them there, as ``read_table`` does."""
    path = tmp_path / "sorted.csv"
    rows = [f"{i / 9:.2f},a" for i in range(9_000)] + ['"1,234.50",b', '"12,000",c', "5,e"]
    path.write_text("amount,word\n" + "\n".join(rows) + "\n")
    assert path.read_bytes().index(b"1,234.50") > CSV_SNIFF_BYTES and not csv_format(path).grouped
    batches: list[dict[str, Any]] = fold_batches(
        TableStream(path), columns=None, start=list, add=lambda acc, b: acc.append(b)
    )
    assert len(batches) == 1
    whole = read_table(path)["amount"]
    assert whole.dtype == np.float64 and whole[-3:].tolist() == [1234.5, 12000, 5]
    np.testing.assert_array_equal(batches[0]["amount"], whole)


def test_a_tab_separated_export_named_tsv_is_read_as_a_csv(tmp_path: Path) -> None:
    """``x.tsv`` (and ``x.tsv.gz``) was refused ('unsupported file type .tsv') though its separator is read
    off its header line like any CSV's."""
    import gzip

    plain = _write(tmp_path / "t.csv", "\t")
    wanted = read_table(plain)
    for name, data in (("t.tsv", plain.read_bytes()), ("t.tsv.gz", gzip.compress(plain.read_bytes()))):
        path = tmp_path / name
        path.write_bytes(data)
        whole = read_table(path)
        assert list(whole) == ["income", "city", "note"] and np.array_equal(whole["income"], wanted["income"])
        assert TableStream(path).names == list(whole)
    with pytest.raises(
        TableError, match=r"cannot write .*unsupported file type '\.tsv'; use \.csv or \.parquet$"
    ):
        write_table({"a": np.zeros(3)}, tmp_path / "out.tsv")

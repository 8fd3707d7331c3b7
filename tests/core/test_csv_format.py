"""A CSV file's separator and decimal mark are read off its head (``core.tabular.csv_format``): a
spreadsheet that writes the comma as the decimal mark exports semicolon-separated files with numbers written
``50,25``, and a tab or a bar separate others. Read as a plain CSV, ``x;y`` was one text column whose every
row was a category of its own (``driftwarden drift`` compared it and found the files "stable" whatever their
numbers held), and ``50,25`` was text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from core.tabular import CsvFormat, TableError, TableStream, csv_format, fold_batches, read_table
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
    points = tmp_path / "points.csv"  # a decimal point wins over a few commas that may be thousands
    points.write_text("a;b\n1,250;0.5\n2.5;0.25\n3.5;1\n")
    assert csv_format(points) == CsvFormat(delimiter=";")
    assert read_table(points)["b"].tolist() == [0.5, 0.25, 1]


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
    refused = r"unsupported file type '\.gz'; use \.csv or \.parquet \(a CSV may come compressed"
    with pytest.raises(TableError, match=refused):
        read_table(other)

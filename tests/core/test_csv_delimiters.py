"""A CSV file's separator is read off its header line (``core.tabular.csv_delimiter``): a spreadsheet that
writes the comma as the decimal mark exports semicolon-separated files, and a tab or a bar separate others.
Read as comma-separated, ``x;y`` was one text column whose every row was a category of its own, and
``driftwarden drift`` compared that column and found the files "stable" whatever their numbers held."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from core.tabular import TableStream, csv_delimiter, fold_batches, read_table
from service.cli import app

ROWS = 400


def _write(path: Path, sep: str, *, shift: float = 0.0, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    lines = [sep.join(["income", "city", "note"])]
    for i in range(ROWS):
        city = ["Köln", "Lyon", "Oslo"][i % 3]
        lines.append(sep.join([f"{rng.normal(50 + shift, 5):.3f}", city, f'"a{sep}b, c"']))
    path.write_text("\ufeff" + "\n".join(lines) + "\n", encoding="utf-8")  # a spreadsheet's byte-order mark
    return path


@pytest.mark.parametrize("sep", [",", ";", "\t", "|"])
def test_the_separator_is_the_header_s(tmp_path: Path, sep: str) -> None:
    path = _write(tmp_path / "t.csv", sep)
    assert csv_delimiter(path) == sep
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
    assert csv_delimiter(one) == "," and read_table(one)["score"].tolist() == [1.5, 2.5]
    quoted = tmp_path / "quoted.csv"
    quoted.write_text('"price; eur",qty\n1,2\n')
    assert csv_delimiter(quoted) == "," and list(read_table(quoted)) == ["price; eur", "qty"]


def test_drift_reads_a_semicolon_export_as_its_comma_twin(tmp_path: Path) -> None:
    reports = {}
    for sep, name in ((",", "comma"), (";", "semicolon")):
        ref = _write(tmp_path / f"{name}_ref.csv", sep, seed=1)
        cur = _write(tmp_path / f"{name}_cur.csv", sep, shift=4.0, seed=2)
        out = tmp_path / f"{name}.json"
        result = CliRunner().invoke(app, ["drift", str(ref), str(cur), "--json", str(out)])
        assert result.exit_code == 1, result.output  # income moved by 0.8 sd
        reports[name] = json.loads(out.read_text())
    drifted = {f["name"] for f in reports["semicolon"]["features"] if f["drifted"]}
    assert drifted == {"income"}
    same = [[f for f in reports[name]["features"] if f["name"] != "note"] for name in reports]  # text differs
    assert same[0] == same[1] and [f["name"] for f in same[0]] == ["income", "city"]

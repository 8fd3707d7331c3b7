"""The Arrow-native offline path of ``driftwarden drift`` (issue 9, part 3).

Files are read in batches (text as dictionary codes) and folded into the service's profile and sketch; the
report must equal the one the engine gives on the whole file read as Python objects, whatever the batch size.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from core.tabular import (
    CodedColumn,
    TableError,
    TableStream,
    as_float,
    fold_batches,
    read_table,
    value_counts,
    write_table,
)
from monitors.binning import count_on_grid
from monitors.config import MonitorConfig
from monitors.engine import compare, evaluate
from monitors.offline import read_reference, reference_schema, reference_side, sketch_current
from monitors.profile import build_reference_profile, numeric_summary, profile_from_dict, quantile_positions
from registry.schema import infer_schema
from tests.monitors.helpers import true_probability
from training.cluster.datagen import TARGET, generate

DRIFTWARDEN = Path(sys.executable).with_name("driftwarden")


def _same(a: Any, b: Any, where: str = "") -> None:
    """Equal structure and values; floats to 1e-9 relative (sums in another order round differently)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _same(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b)), (
            where,
            a,
            b,
        )
    else:
        assert a == b, (where, a, b)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A reference and a shifted current (labels, predictions, text with nulls), in both formats."""
    root = tmp_path_factory.mktemp("offline")
    out: dict[str, Path] = {}
    for name, scenario, seed, rows in (
        ("reference", "baseline", 91, 6000),
        ("current", "covariate_shift", 92, 4000),
    ):
        cols = generate(rows, scenario=scenario, seed=seed)
        cols["prediction"] = true_probability(cols)
        text = next(k for k, v in cols.items() if v.dtype == object)
        cols[text] = cols[text].copy()
        cols[text][::97] = None
        cols[text][5::101] = ""
        for suffix in ("parquet", "csv"):
            out[f"{name}.{suffix}"] = write_table(cols, root / f"{name}.{suffix}")
    return out


def test_quantile_positions_are_numpys_inverted_cdf() -> None:
    q = np.linspace(0.0, 1.0, 1001)
    for n in [*range(1, 700), 1001, 4096, 99_991, 1_000_000]:
        want = np.quantile(np.arange(n, dtype=np.float64), q, method="inverted_cdf")
        assert np.array_equal(quantile_positions(n, q), want.astype(np.intp)), n
    x = np.random.default_rng(3).lognormal(size=5001)
    x[::7] = np.nan
    summary = numeric_summary(x, name="x")
    present = x[~np.isnan(x)]
    assert summary["quantiles"] == np.quantile(present, q, method="inverted_cdf").tolist()
    assert summary["grid_counts"] == count_on_grid(x, np.unique(summary["quantiles"])).cells.tolist()


def test_coded_column_counts_and_numbers_like_the_objects() -> None:
    values = pa.array(["b", None, "a", "", "b", "3.5", None, "b"])
    batch = next(iter(_stream_of({"t": values}).batches()))
    coded = batch["t"]
    assert isinstance(coded, CodedColumn) and coded.codes.dtype == np.int32
    objects = np.array(values.to_pylist(), dtype=object)
    assert np.array_equal(np.asarray(coded), objects)
    assert value_counts(coded) == Counter(objects.tolist())
    assert np.array_equal(as_float(coded), as_float(objects), equal_nan=True)
    joined = CodedColumn.concat([coded[:3], coded[3:]])
    assert np.array_equal(np.asarray(joined), objects)
    numbers = np.array([2, 2, 7, 1], dtype=np.int64)
    assert value_counts(numbers) == Counter(numbers.tolist())


def test_coded_batches_of_one_dictionary_join_as_batches_of_several_do() -> None:
    """Batches sharing a dictionary are joined without remapping: the same codes and words as the remapping
    gives (forced here by a word no row uses, which it appends last); a dictionary holding a word twice is
    remapped (each word once)."""
    rng = np.random.default_rng(5)
    words = np.array(["b", "a", "", "c"], dtype=object)
    parts = [CodedColumn(codes=rng.integers(-1, 4, n).astype(np.int32), categories=words) for n in (7, 0, 9)]
    joined = CodedColumn.concat(parts)
    extra = np.array([*words, "unused"], dtype=object)
    remapped = CodedColumn.concat([*parts[:2], CodedColumn(codes=parts[2].codes, categories=extra)])
    assert joined.codes.dtype == np.int32 and np.array_equal(joined.codes, remapped.codes)
    assert joined.categories.tolist() == remapped.categories.tolist()[:-1] == words.tolist()
    twice = CodedColumn.concat([CodedColumn(codes=np.array([0, 1, -1], np.int32), categories=words[[1, 1]])])
    assert twice.categories.tolist() == ["a"] and twice.codes.tolist() == [0, 0, -1]


def _stream_of(columns: dict[str, pa.Array], tmp: Path | None = None) -> TableStream:
    import tempfile

    import pyarrow.parquet as pq

    path = Path(tmp or tempfile.mkdtemp()) / "t.parquet"
    pq.write_table(pa.table(columns), path)
    return TableStream(path)


@pytest.mark.parametrize("suffix", ["parquet", "csv"])
def test_batches_hold_what_read_table_reads(files: dict[str, Path], suffix: str) -> None:
    path = files[f"reference.{suffix}"]
    whole = read_table(path)
    stream = TableStream(path, batch_rows=1000, block_bytes=64 << 10)
    assert stream.names == list(whole)
    parts: list[dict[str, Any]] = fold_batches(
        stream, columns=None, start=list, add=lambda acc, batch: acc.append(batch)
    )
    assert len(parts) > 3  # several batches
    for name, col in whole.items():
        got = [np.asarray(p[name]) for p in parts]
        joined = np.concatenate(got)
        assert joined.dtype == col.dtype or col.dtype == object, name
        if col.dtype == object:
            assert joined.tolist() == col.tolist(), name
        else:
            assert np.array_equal(joined, col, equal_nan=True), name


def test_csv_column_widened_by_a_later_block_as_read_table_types_it(tmp_path: Path) -> None:
    rows = ["n,m,t"] + [f"{i},{i},{i}" for i in range(20_000)] + ["2.5,x,"] + ["7,8,9"] * 3
    path = tmp_path / "late.csv"
    path.write_text("\n".join(rows) + "\n")
    whole = read_table(path)
    stream = TableStream(path, block_bytes=16 << 10)
    parts: list[dict[str, Any]] = fold_batches(
        stream, columns=None, start=list, add=lambda acc, batch: acc.append(batch)
    )
    for name in ("n", "m", "t"):
        joined = np.concatenate([np.asarray(p[name]) for p in parts])
        assert (joined.dtype == object) == (whole[name].dtype == object), name
        assert joined.tolist() == whole[name].tolist() or np.array_equal(joined, whole[name], equal_nan=True)
    assert whole["n"].dtype == np.float64 and whole["m"].dtype == object


@pytest.mark.parametrize(("read_ahead", "reading"), [(1, True), (0, False)])
def test_meanwhile_runs_once_while_the_first_batch_is_read(
    tmp_path: Path, read_ahead: int, reading: bool
) -> None:
    """The caller's ``meanwhile`` runs once, before the first batch reaches ``add``, while the read-ahead
    thread decodes it (with a read-ahead); a CSV widened by a later block is read again, not ``meanwhile``."""
    rows = ["n"] + [str(i) for i in range(20_000)] + ["2.5"]
    path = tmp_path / "late.csv"
    path.write_text("\n".join(rows) + "\n")
    calls: list[tuple[int, bool]] = []
    parts: list[dict[str, Any]] = []

    def start() -> list[dict[str, Any]]:
        parts.clear()  # read again from the start when a column widens
        return parts

    def meanwhile() -> None:
        alive = any(t.name == "table-read-ahead" for t in threading.enumerate())
        calls.append((len(parts), alive))

    fold_batches(
        TableStream(path, block_bytes=16 << 10),
        columns=None,
        start=start,
        add=lambda acc, batch: acc.append(batch),
        read_ahead=read_ahead,
        meanwhile=meanwhile,
    )
    assert calls == [(0, reading)]
    assert len(parts) > 3 and np.concatenate([np.asarray(p["n"]) for p in parts]).dtype == np.float64


def test_a_broken_file_is_one_table_error(tmp_path: Path) -> None:
    path = tmp_path / "ragged.csv"
    path.write_text("a,b\n" + "1,2\n" * 50 + "1\n")
    with pytest.raises(TableError, match="cannot read .*ragged.csv as CSV"):
        read_reference(path)
    (tmp_path / "dup.csv").write_text("a,a\n1,2\n")
    with pytest.raises(TableError, match="duplicate column names"):
        TableStream(tmp_path / "dup.csv")


@pytest.mark.parametrize("suffix", ["parquet", "csv"])
@pytest.mark.parametrize("batch_rows", [700, 1 << 20])
def test_offline_report_equals_the_engine_on_whole_columns(
    files: dict[str, Path], suffix: str, batch_rows: int
) -> None:
    """Batches of codes give the report the engine gives on the whole files read as Python objects."""
    ref_path, cur_path = files[f"reference.{suffix}"], files[f"current.{suffix}"]
    config = MonitorConfig()
    # the engine on whole columns, as `driftwarden drift` ran before the offline path
    ref, cur = read_table(ref_path), read_table(cur_path)
    schema = infer_schema({k: v for k, v in ref.items() if k != "prediction"}, target=TARGET)
    want_profile = build_reference_profile(ref, schema, predictions=ref["prediction"], labels=ref[TARGET])
    want = compare(
        profile=profile_from_dict(want_profile),
        columns={f: cur[f] for f in schema.feature_names},
        predictions=cur["prediction"],
        labels=cur[TARGET],
        config=config,
    ).as_dict()
    # the offline path: batches, text as codes
    block = 48 << 10 if batch_rows < 1000 else 16 << 20
    facts, columns = read_reference(
        ref_path, target=TARGET, prediction="prediction", batch_rows=batch_rows, block_bytes=block
    )
    assert all(
        isinstance(columns[f.name], CodedColumn) for f in schema.features if f.kind.value == "categorical"
    )
    got_schema = reference_schema(columns, facts, exclude={TARGET, "prediction"}, target=TARGET)
    assert got_schema.to_dict() == schema.to_dict()
    got_profile = build_reference_profile(
        columns, got_schema, predictions=np.asarray(columns["prediction"]), labels=np.asarray(columns[TARGET])
    )
    _same(_without_pca_axes(got_profile), _without_pca_axes(want_profile))
    profile = profile_from_dict(got_profile)
    cur_facts, sketch = sketch_current(
        cur_path,
        profile=profile,
        features=got_schema.feature_names,
        prediction="prediction",
        labels=TARGET,
        target=TARGET,
        threshold=config.classification_threshold,
        batch_rows=batch_rows,
        block_bytes=block,
    )
    assert sketch is not None and cur_facts.rows == sketch.rows == len(cur["prediction"])
    got = evaluate(profile=profile, sketch=sketch, config=config).as_dict()
    _same(got, want)
    assert {f["name"] for f in got["features"] if f["drifted"]} == {"age", "income", "credit_score"}


@pytest.mark.parametrize("suffix", ["parquet", "csv"])
@pytest.mark.parametrize("given", [False, True])
def test_the_reference_sorted_once_gives_the_schema_and_profile_of_the_columns(
    files: dict[str, Path], given: bool, suffix: str
) -> None:
    """reference_side reads a Parquet file column after column and sorts each numeric column once, while the
    next is read, for its spec and its summary: the very schema and profile (equal, not close) that
    inference and the profile make of the columns read in one pass."""
    path = files[f"reference.{suffix}"]
    facts, columns = read_reference(path, target=TARGET, prediction="prediction")
    handed: list[str] = []

    def hand(name: str, _: object) -> bool:
        handed.append(name)
        return False  # not taken: the column stays among those returned

    by_column = read_reference(path, target=TARGET, prediction="prediction", on_column=hand)
    assert handed == facts.names == list(by_column[1])
    taken = read_reference(path, on_column=lambda name, values: not isinstance(values, CodedColumn))
    assert list(taken[1]) == [n for n in facts.names if isinstance(columns[n], CodedColumn)]  # the rest taken
    assert taken[0].rows == facts.rows
    assert by_column[0].rows == facts.rows
    assert by_column[0].for_checks().keys() == facts.for_checks().keys()
    for name in facts.names:
        assert by_column[0].columns[name] == facts.columns[name]
        got, read = by_column[1][name], columns[name]
        if isinstance(read, CodedColumn):
            assert isinstance(got, CodedColumn) and got.decode().tolist() == read.decode().tolist()
        else:
            assert np.array_equal(np.asarray(got), read, equal_nan=True)
    schema = reference_schema(columns, facts, exclude={TARGET, "prediction"}, target=TARGET)
    want = build_reference_profile(
        columns, schema, predictions=np.asarray(columns["prediction"]), labels=np.asarray(columns[TARGET])
    )
    sides = reference_side(
        path,
        schema=schema if given else None,
        schema_source="--schema schema.json",
        target=TARGET,
        prediction="prediction",
        min_rows=30,
    )
    assert sides.schema is not None and sides.schema.to_dict() == schema.to_dict()
    assert json.dumps(sides.document, sort_keys=True) == json.dumps(want, sort_keys=True)


def _without_pca_axes(profile: dict[str, Any]) -> dict[str, Any]:
    """The profile without the PCA's axes: an axis and its negative are the same axis."""
    out = json.loads(json.dumps(profile))
    for key in ("components", "residual_components"):
        out["multivariate"][key] = [[abs(v) for v in row] for row in out["multivariate"][key]]
    return out


def test_piped_output_is_whole_and_free_of_tensorflow(files: dict[str, Path], tmp_path: Path) -> None:
    """Captured by a pipe, the verdict table keeps every column name and value; no TF/absl line, no TF."""
    args = ["drift", str(files["reference.parquet"]), str(files["current.csv"]), "--target", TARGET]
    args += ["--prediction-column", "prediction"]
    out = subprocess.run([str(DRIFTWARDEN), *args], capture_output=True, text=True, check=False)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "…" not in out.stdout
    header = next(line for line in out.stdout.splitlines() if "feature" in line)
    for column in ("feature", "kind", "test", "statistic", "p (adj.)", "effect", "min effect", "verdict"):
        assert column in header, header
    assert "pca_reconstruction_error" in out.stdout and "ks+wasserstein" in out.stdout
    assert any(line.startswith("DATASET DRIFTED: ") for line in out.stdout.splitlines())
    noise = ("tensorflow", "absl", "oneDNN", "cuda", "I0000", "W0000")
    assert not any(word in out.stdout + out.stderr for word in noise), out.stderr
    loaded = _loaded_by(args, "sorted(m for m in sys.modules if m.split('.')[0] == 'tensorflow')")
    assert loaded == "[]", loaded


def _loaded_by(args: list[str], modules: str) -> str:
    """What ``modules`` (a Python expression over ``sys.modules``) prints after ``driftwarden ARGS`` ran in a
    fresh interpreter (the command must find drift: exit 1)."""
    probe = (
        "import sys\nfrom typer.testing import CliRunner\nfrom service.cli import app\n"
        f"r = CliRunner().invoke(app, {args!r})\n"
        "assert r.exit_code == 1, r.output\n"
        f"print({modules})"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return loaded.stdout.strip()


def test_drift_on_parquet_imports_neither_arrow_compute_nor_the_html_page(files: dict[str, Path]) -> None:
    """Parquet on both sides, the table only: text is read as dictionaries (no ``pyarrow.compute``, ~25 ms
    to load) and no page is rendered (no ``monitors.html``); ``--html`` loads the page's renderer."""
    args = ["drift", str(files["reference.parquet"]), str(files["current.parquet"]), "--target", TARGET]
    args += ["--prediction-column", "prediction"]
    for extra, want in (([], "[]"), (["--html", "-"], "['monitors.html']")):
        loaded = _loaded_by(
            [*args, *extra], "sorted(m for m in ('pyarrow.compute', 'monitors.html') if m in sys.modules)"
        )
        assert loaded.splitlines()[-1] == want, loaded

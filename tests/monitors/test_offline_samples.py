"""The row samples of ``driftwarden drift``'s two sides: CURRENT's rows drawn uniformly while the file is
read batch by batch (:class:`monitors.reservoir.RowReservoir`), the reference's kept by its profile; both
exposed by :func:`monitors.offline.compare`, whose report is the same without them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.tabular import CodedColumn, write_table
from monitors.config import MonitorConfig
from monitors.offline import compare
from monitors.profile import REFERENCE_SAMPLE_ROWS
from monitors.reservoir import RowReservoir, sample_texts
from monitors.rows import uniform_positions
from registry.schema import FeatureKind
from tests.monitors.helpers import true_probability
from training.cluster.datagen import TARGET, generate

KINDS = {"i": FeatureKind.NUMERIC, "zone": FeatureKind.CATEGORICAL}


def _batches(n: int, seed: int) -> list[tuple[int, int]]:
    """``0..n`` cut into batches of uneven sizes (1 to 7,000 rows)."""
    cuts = np.unique(np.random.default_rng(seed).integers(1, n, size=40))
    edges = [0, *cuts.tolist(), n]
    return list(zip(edges[:-1], edges[1:], strict=True))


def _fill(reservoir: RowReservoir, n: int, batches: list[tuple[int, int]]) -> None:
    zone = CodedColumn(
        codes=(np.arange(n) % 4 - 1).astype(np.int32), categories=np.array(["a", "b", ""], dtype=object)
    )
    labels = np.arange(n) % 2.0
    for lo, hi in batches:
        cols: dict[str, np.ndarray | CodedColumn] = {
            "i": np.arange(lo, hi, dtype=np.float64),
            "zone": zone[lo:hi],
        }
        # labels only from the second batch on: the rows before have none (NaN)
        reservoir.add(cols, predictions=np.arange(lo, hi) / n, labels=None if lo == 0 else labels[lo:hi])


def test_a_reservoir_keeps_a_uniform_sample_of_every_row_offered() -> None:
    n = 50_000
    batches = _batches(n, seed=1)
    reservoir = RowReservoir(KINDS, rows=2_000, seed=3)
    _fill(reservoir, n, batches)
    sample = reservoir.sample()
    assert sample is not None and sample.rows == 2_000 and sample.population == n
    i = sample.columns["i"].astype(np.int64)
    assert np.array_equal(i, reservoir.kept_positions())
    assert np.all(np.diff(i) > 0)  # distinct rows, in the order they came
    assert np.array_equal(sample.predictions, i / n)
    assert sample.columns["zone"].tolist() == [[None, "a", "b", None][k % 4] for k in i.tolist()]  # "": None
    first = batches[0][1]
    assert sample.labels is not None
    assert np.isnan(sample.labels[i < first]).all()
    assert np.array_equal(sample.labels[i >= first], (i[i >= first] % 2).astype(np.float64))
    tenths = np.bincount(i * 10 // n, minlength=10)
    assert tenths.min() >= 140 and tenths.max() <= 260, tenths  # 200 each; sd 13.4

    again = RowReservoir(KINDS, rows=2_000, seed=3)
    _fill(again, n, batches)
    assert np.array_equal(again.kept_positions(), reservoir.kept_positions())  # seeded
    reservoir.reset()
    assert reservoir.sample() is None
    _fill(reservoir, 300, [(0, 100), (100, 300)])
    every = reservoir.sample()  # fewer rows than the sample's size: all of them
    assert every is not None and every.rows == 300
    assert np.array_equal(every.columns["i"], np.arange(300.0))
    assert RowReservoir(KINDS, rows=0).sample() is None


def test_compare_exposes_both_sides_samples(tmp_path: Path) -> None:
    ref, cur = generate(3_000, seed=1), generate(2_500, seed=2, scenario="covariate_shift")
    cur["income"] = cur["income"] + np.arange(2_500) * 1e-6  # each row's income is its own: finds its row
    for cols in (ref, cur):
        cols["p"] = true_probability(cols)
    write_table(ref, tmp_path / "ref.parquet")
    write_table(cur, tmp_path / "cur.parquet")
    args = dict(
        reference=tmp_path / "ref.parquet",
        schema=None,
        schema_source="REFERENCE",
        target=TARGET,
        prediction="p",
        min_rows=30,
        config=MonitorConfig(),
    )
    got = compare(tmp_path / "cur.parquet", **args, sample_rows=400)  # type: ignore[arg-type]
    plain = compare(tmp_path / "cur.parquet", **args, sample_rows=0).report  # type: ignore[arg-type]
    assert got.report.as_dict() == plain.as_dict()  # the sample changes nothing of the report
    assert got.report.drifted

    current = got.current_sample
    assert current is not None and current.rows == 400 and current.population == 2_500
    by_income = {float(v): k for k, v in enumerate(cur["income"].tolist())}
    at = np.array([by_income[float(v)] for v in current.columns["income"]])
    assert np.all(np.diff(at) > 0)
    for spec in got.schema.features:
        values = current.columns[spec.name]
        if spec.kind is FeatureKind.NUMERIC:
            assert np.array_equal(values, cur[spec.name][at].astype(np.float64), equal_nan=True), spec.name
        else:
            assert values.tolist() == [None if v is None else str(v) for v in cur[spec.name][at]], spec.name
    assert np.array_equal(current.predictions, cur["p"][at])
    assert current.labels is not None and np.array_equal(current.labels, cur[TARGET][at].astype(np.float64))

    reference = got.reference_sample
    assert reference is not None and reference.population == 3_000 == reference.rows  # < 5,000: every row
    assert reference.rows == min(3_000, REFERENCE_SAMPLE_ROWS)
    index = uniform_positions(3_000, REFERENCE_SAMPLE_ROWS)
    assert np.array_equal(reference.predictions, ref["p"][index])
    assert reference.labels is not None and np.array_equal(reference.labels, ref[TARGET][index].astype(float))
    assert compare(tmp_path / "cur.parquet", **args, sample_rows=0).current_sample is None  # type: ignore[arg-type]
    # by default, the setting monitor_sample_rows (5,000: more than CURRENT's rows, so all of them)
    every = compare(tmp_path / "cur.parquet", **args).current_sample  # type: ignore[arg-type]
    assert every is not None and every.rows == 2_500
    assert np.array_equal(every.columns["income"], cur["income"])


@pytest.mark.parametrize("rows", [1, 7])
def test_tiny_samples(rows: int) -> None:
    reservoir = RowReservoir(KINDS, rows=rows, seed=0)
    _fill(reservoir, 1_000, _batches(1_000, seed=2))
    sample = reservoir.sample()
    assert sample is not None and sample.rows == rows and sample.population == 1_000
    assert len(set(sample.columns["i"].tolist())) == rows


def test_sample_texts_of_codes_are_those_of_their_words() -> None:
    coded = CodedColumn(
        codes=np.array([0, 1, -1, 2, 0, 3, 2], dtype=np.int32),
        categories=np.array(["a", "", "b", "c d"], dtype=object),
    )
    got = sample_texts(coded)
    assert got.dtype == object
    assert got.tolist() == sample_texts(coded.decode()).tolist() == ["a", None, None, "b", "a", "c d", "b"]

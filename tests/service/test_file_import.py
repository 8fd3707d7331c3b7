"""``predictions import`` read column by column gives what the records path gave: the contract's flags
(:func:`registry.contracts.flag_columns` against :func:`~registry.contracts.flag_rows`), the log rows and
their typed copies, the ids and the labels; and labels of many batches are each stored once.
(The command itself, on both backends: ``tests/service/test_ingest.py``.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import bindparam, text

from core.database import Database
from core.tabular import CodedColumn, Column, TableStream, as_python, write_table
from predictions.batch import LogBatch
from predictions.pending import RequestRows, build
from registry.contracts import ContractViolation, flag_columns, flag_rows
from registry.schema import FeatureKind, FeatureSpec, ModelSchema, OutputSpec, Policy, Task
from registry.service import promote
from service import file_import
from service.file_import import FileImport, import_file
from service.serving.records import keyed_ids, request_rows, segments
from tests import own_models
from tests.support import serve_settings
from training.imports import ImportSpec, import_reference

T0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
CLASSES = ("high", "low", "mid")
COLORS = own_models.COLORS

# -- flag_columns == flag_rows ---------------------------------------------------------------------------

_NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 10.0, 3.5e38, -3.5e38, float("nan"), float("inf")]),
)
_TEXTS = st.one_of(
    st.sampled_from(["", "red", "green", "blue", "Red", "turquoise", "a\x00b", "1.5"]), st.text(max_size=12)
)
_BOUND = st.one_of(st.none(), st.sampled_from([-10.0, -2.0, 0.0, 1.0, 2.0, 10.0]), st.floats(-1e3, 1e3))


def _given(bound: float | None) -> bool:
    return bound is not None


@st.composite
def _feature(draw: st.DrawFn, name: str) -> FeatureSpec:
    kind = draw(st.sampled_from(list(FeatureKind)))
    observed = draw(st.one_of(st.none(), st.tuples(_BOUND.filter(_given), _BOUND.filter(_given))))
    return FeatureSpec(
        name=name,
        kind=kind,
        dtype="float64" if kind is FeatureKind.NUMERIC else "string",
        nullable=draw(st.booleans()),
        observed_min=observed[0] if observed else None,  # both or neither, as inference sets them
        observed_max=observed[1] if observed else None,
        allowed_min=draw(_BOUND),
        allowed_max=draw(_BOUND),
        categories=tuple(draw(st.lists(st.sampled_from(["red", "green", "blue", "1.5"]), unique=True))),
        policy=draw(st.sampled_from(list(Policy))),
        max_length=draw(st.integers(1, 10)),
    )


@st.composite
def _column(draw: st.DrawFn, n: int) -> Column:
    """A column as :class:`core.tabular.TableStream` gives one (numbers, codes), or any other array."""
    form = draw(st.sampled_from(["float64", "float32", "int64", "text", "bool", "object"]))
    if form in ("float64", "float32"):
        with np.errstate(over="ignore"):  # beyond float32: infinite
            return np.array(draw(st.lists(_NUMBERS, min_size=n, max_size=n)), dtype=np.float64).astype(form)
    if form == "int64":
        return np.array(draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=n, max_size=n)), np.int64)
    if form == "bool":
        return np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    if form == "object":
        values = st.one_of(st.none(), _NUMBERS, _TEXTS, st.booleans(), st.integers())
        out = np.empty(n, dtype=object)
        out[:] = draw(st.lists(values, min_size=n, max_size=n))
        return out
    texts = draw(st.lists(_TEXTS, unique=True, max_size=6))
    codes = draw(st.lists(st.integers(-1, len(texts) - 1), min_size=n, max_size=n))
    categories = np.empty(len(texts), dtype=object)
    categories[:] = texts
    return CodedColumn(codes=np.array(codes, dtype=np.int32), categories=categories)


@st.composite
def _contract_and_columns(draw: st.DrawFn) -> tuple[ModelSchema, dict[str, Column], int]:
    names = [f"f{i}" for i in range(draw(st.integers(1, 4)))]
    schema = ModelSchema(
        features=tuple(draw(_feature(name)) for name in names),
        outputs=(OutputSpec(name="probability"),),
        target="y",
    )
    n = draw(st.integers(0, 30))
    present = [name for name in names if draw(st.booleans())] + (["extra"] if draw(st.booleans()) else [])
    columns = {name: draw(_column(n)) for name in draw(st.permutations(present))}
    return schema, columns, n


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_contract_and_columns())
def test_flag_columns_flags_as_flag_rows_does(case: tuple[ModelSchema, dict[str, Column], int]) -> None:
    schema, columns, n = case
    values = {name: as_python(column) for name, column in columns.items()}
    rows = [{name: column[i] for name, column in values.items()} for i in range(n)]
    assert _flags(flag_columns, schema, columns, n) == _flags(flag_rows, schema, rows)


def _flags(flagged: Any, *args: Any) -> Any:
    """The flags ``flagged`` gives, or the refusal of a value no log holds (a category over max_length)."""
    try:
        return flagged(*args)
    except ContractViolation as exc:
        return [v.to_dict() for v in exc.violations]


def test_flag_columns_on_a_large_seeded_batch() -> None:
    rng = np.random.default_rng(7)
    n = 50_000
    schema = ModelSchema(
        features=(
            FeatureSpec("x", FeatureKind.NUMERIC, "float64", False, 0.0, -2.0, 2.0, -6.0, 6.0),
            FeatureSpec("k", FeatureKind.NUMERIC, "int64", True, 0.0, 0.0, 9.0, policy=Policy.REJECT),
            FeatureSpec("c", FeatureKind.CATEGORICAL, "string", False, categories=("a", "b"), max_length=3),
        ),
        outputs=(OutputSpec(name="probability"),),
        target="y",
    )
    x = rng.normal(0, 1.5, n)
    x[rng.random(n) < 0.01] = np.nan
    x[rng.random(n) < 0.001] = np.inf
    categories = np.array(["a", "b", "zz", "long", ""], dtype=object)
    codes = rng.integers(-1, len(categories), n).astype(np.int32)
    columns: dict[str, Column] = {"x": x, "k": rng.integers(-2, 12, n), "c": CodedColumn(codes, categories)}
    values = {name: as_python(column) for name, column in columns.items()}
    rows = [{name: column[i] for name, column in values.items()} for i in range(n)]
    refused = _flags(flag_columns, schema, columns, n)
    assert refused == _flags(flag_rows, schema, rows)
    (first,) = refused
    assert first["rule"] == "max_length" and first["message"] == "a category of 4 characters; at most 3"
    assert codes[first["row"]] == 3 and 3 not in codes[: first["row"]]  # the first row holding "long"
    categories[3] = "lon"  # within max_length: flagged unseen, logged
    flags = flag_columns(schema, columns, n)
    values = {name: as_python(column) for name, column in columns.items()}
    rows = [{name: column[i] for name, column in values.items()} for i in range(n)]
    assert flags == flag_rows(schema, rows)
    assert sum(1 for f in flags if f) > n // 3  # the rules were exercised


# -- the log rows: as the records path of the ingest route cut and built them -----------------------------


def _schema(task: Task) -> ModelSchema:
    features = (
        FeatureSpec("a", FeatureKind.NUMERIC, "float64", False, 0.0, -2.0, 2.0, -10.0, 10.0),
        FeatureSpec("b", FeatureKind.NUMERIC, "float64", True, 0.1, -1.0, 1.0, policy=Policy.REJECT),
        FeatureSpec("c", FeatureKind.NUMERIC, "int64", False, 0.0, 0.0, 6.0),
        # "turquoise" at the bound: a longer category is refused, not flagged (test_flag_columns_...)
        FeatureSpec("color", FeatureKind.CATEGORICAL, "string", False, categories=COLORS, max_length=9),
        FeatureSpec("size", FeatureKind.CATEGORICAL, "string", True, categories=("s", "m")),  # in no file
    )
    output = OutputSpec.for_task(task, classes=len(CLASSES), expected=(-1.0, 1.0))
    classes = CLASSES if task is Task.MULTICLASS else ()
    return ModelSchema(features=features, outputs=(output,), target="y", task=task.value, classes=classes)


def _scored(task: Task, n: int, seed: int) -> dict[str, Any]:
    """Scored rows with what the contract flags: nulls, values outside both ranges, unseen, empty."""
    rng = np.random.default_rng(seed)
    a = rng.normal(0, 2.5, n)
    a[rng.random(n) < 0.05] = np.nan
    b = rng.normal(0, 1.0, n)
    b[rng.random(n) < 0.05] = np.nan
    colors = np.array([*COLORS, "purple", "turquoise", ""], dtype=object)
    color = colors[rng.choice(len(colors), n, p=[0.3, 0.3, 0.25, 0.05, 0.05, 0.05])].astype(object)
    color[rng.random(n) < 0.03] = None
    out: dict[str, Any] = {"a": a, "b": b, "c": rng.poisson(3, n).astype(np.int64), "color": color}
    if task is Task.MULTICLASS:
        out["pred"] = rng.dirichlet(np.ones(len(CLASSES)), n).tolist()
        labels = np.array([*CLASSES, None], dtype=object)
        out["y"] = labels[rng.choice(len(labels), n)]
    else:
        out["pred"] = rng.random(n) if task is Task.BINARY else rng.normal(0, 1.5, n)
        y = (rng.random(n) < 0.5).astype(float) if task is Task.BINARY else rng.normal(0, 1, n)
        y[rng.random(n) < 0.7] = np.nan
        y[[1, 2]] = [-0.0, 0.0]  # labels of one value and two signs
        out["y"] = y
    out["row_id"] = np.array([f"job-{seed}-{i}" for i in range(n)], dtype=object)
    # runs of one time (7 rows), one of them written two ways (the same instant: one run)
    times = [(T0 + timedelta(minutes=i // 7)).isoformat().replace("+00:00", "Z") for i in range(n)]
    times[15] = (T0 + timedelta(minutes=2)).isoformat()
    out["at"] = np.array(times, dtype=object)
    return out


def _write(task: Task, path: Path, n: int, seed: int) -> Path:
    data = _scored(task, n, seed)
    if path.suffix == ".csv":
        if task is Task.MULTICLASS:
            data["pred"] = np.array([json.dumps(p) for p in data["pred"]], dtype=object)
        return write_table(data, path)
    arrays = {k: pa.array(v if isinstance(v, list) else v.tolist()) for k, v in data.items() if k != "at"}
    arrays["at"] = pa.array(
        [datetime.fromisoformat(t) for t in data["at"].tolist()], type=pa.timestamp("us", tz="UTC")
    )
    arrays["y"] = pa.array(data["y"].tolist(), from_pandas=True)
    pq.write_table(pa.table(arrays), path, row_group_size=97)
    return path


def _batches(spec: FileImport, schema: ModelSchema) -> Iterator[tuple[dict[str, Column], int]]:
    stream = TableStream(spec.path, batch_rows=64, block_bytes=4096)
    yield from file_import._batches(stream, file_import._columns(stream, spec, schema, 1))


def _old_rows(
    batch: dict[str, Column], spec: FileImport, schema: ModelSchema, first: int
) -> tuple[list[RequestRows], list[tuple[str, float]]]:
    """What the import wrote before it read columns: records read by the ingest route's path."""
    (group,) = file_import._check(file_import._records(batch, spec, schema, first), spec, 1, schema)
    rows, labels = [], []
    for seg in segments(spec.model_name, group, NOW):
        rows.append(request_rows(spec.model_name, group, seg.keep, seg.ids, NOW, "import", source="import"))
        labels += [(pid, group.labels[i]) for pid, i in zip(seg.ids, seg.keep, strict=True)]
    return rows, [(pid, label) for pid, label in labels if label is not None]


def _new_rows(
    batch: dict[str, Column], spec: FileImport, schema: ModelSchema, first: int
) -> tuple[list[RequestRows], list[tuple[str, float]]]:
    read = file_import._read(batch, spec, schema, 1, first)
    parts = file_import._segments(spec.model_name, read)
    return file_import._log_rows(batch, spec, schema, 1, read, parts, NOW), file_import._labelled(read, parts)


def _unnamed(batches: list[LogBatch]) -> list[LogBatch]:
    return [b._replace(id_prefix="", id_low=0) for b in batches]


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
@pytest.mark.parametrize("task", list(Task), ids=[t.short for t in Task])
@pytest.mark.parametrize("named", [True, False], ids=["ids", "no-ids"])
def test_log_rows_flags_and_labels_are_the_records_paths(
    tmp_path: Path, task: Task, suffix: str, named: bool
) -> None:
    schema = _schema(task)
    path = _write(task, tmp_path / f"scored{suffix}", 300, seed=list(Task).index(task))
    spec = FileImport(
        path=path,
        model_name="m",
        prediction_column="pred",
        id_column="row_id" if named else None,
        time_column="at",
        label_column="y",
        allow_missing_features=True,  # the contract's 'size' is in no file: logged as missing
    )
    seen = flagged = 0
    for batch, first in _batches(spec, schema):
        old, old_labels = _old_rows(batch, spec, schema, first)
        new, new_labels = _new_rows(batch, spec, schema, first)
        assert [len(r) for r in new] == [len(r) for r in old]
        for mine, theirs in zip(new, old, strict=True):
            assert mine.flags == theirs.flags
            assert mine.inputs == theirs.inputs
            assert list(mine.values) == list(theirs.values)
            assert mine.outputs == theirs.outputs
            assert mine.logged_at == theirs.logged_at
            assert (mine.protocol, mine.source, mine.request_id) == (theirs.protocol, theirs.source, "import")
        built, expected = build(new), build(old)  # the typed copies of columns and of documents alike
        assert [np.signbit(label) for _, label in new_labels] == [
            np.signbit(label) for _, label in old_labels
        ]
        if named:
            assert new_labels == old_labels
            assert built == expected
        else:
            assert [label for _, label in new_labels] == [label for _, label in old_labels]
            assert [_unnamed(b) for b in built] == [_unnamed(b) for b in expected]
        seen += sum(len(r) for r in new)
        flagged += sum(1 for r in new for f in r.flags if f)
    assert seen == 300 and flagged > 50


# -- labels of many batches, stored once --------------------------------------------------------------------


@pytest.fixture
def registered(db: Database, tmp_path: Path) -> Path:
    data = own_models.reference(1_500, seed=0)
    table = {**data, "answer": 1.0 / (1.0 + np.exp(-(data["a"] + 0.5 * data["b"])))}
    write_table(table, tmp_path / "reference.csv")
    spec = ImportSpec(
        model_name="imp",
        path=None,
        reference=tmp_path / "reference.csv",
        target="y_bin",
        task=Task.BINARY,
        features=own_models.FEATURES,
        prediction_column="answer",
    )
    import_reference(spec=spec, db=db, registry=tmp_path / "registry")
    with db.session() as s:
        promote(session=s, model_name="imp", version=1)
    return tmp_path / "registry"


def test_labels_of_many_batches_are_stored_once_on_their_rows(
    db: Database, database_url: str, registered: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_import, "BATCH_ROWS", 500)  # 6 batches; runs of one time cross them
    n = 3_000
    data = own_models.reference(n, seed=5)
    y = data["y_bin"].astype(float)
    y[np.arange(n) % 3 != 0] = np.nan
    table = {k: data[k] for k in own_models.FEATURES} | {
        "score": 1.0 / (1.0 + np.exp(-data["a"])),
        "row_id": np.array([f"r-{i}" for i in range(n)], dtype=object),
        "at": np.array([(T0 + timedelta(hours=i // 700)).isoformat() for i in range(n)], dtype=object),
        "y": y,
    }
    path = write_table(table, tmp_path / "scored.parquet")
    spec = FileImport(
        path=path,
        model_name="imp",
        prediction_column="score",
        id_column="row_id",
        time_column="at",
        label_column="y",
    )
    settings = serve_settings(database_url, tmp_path / "spool", registry_path=registered)
    done: list[int] = []
    first = import_file(spec=spec, db=db, settings=settings, progress=done.append)
    labelled = int((~np.isnan(y)).sum())
    assert (first.rows, first.stored, first.duplicates, first.labels) == (n, n, 0, labelled)
    assert sum(done) == 2 * n and len(done) == 12  # both passes, batch by batch
    # each row's id: its batch of 500 cut where the time changes (every 700 rows), as the route cuts records
    ids: dict[str, int] = {}
    for start in range(0, n, 500):
        cuts = sorted({start, start + 500, *(t for t in range(0, n, 700) if start < t < start + 500)})
        for lo, hi in zip(cuts, cuts[1:], strict=False):
            keys = [f"r-{i}" for i in range(lo, hi)]
            ids.update(zip(keyed_ids("imp", keys), range(lo, hi), strict=True))
    with db.session() as s:
        stored: dict[str, float] = dict(
            s.execute(text("select prediction_id, label from prediction_feedback")).all()
        )
        size = s.execute(text("select sum(size) from prediction_batches where source = 'import'")).scalar()
    assert size == n
    assert stored == {pid: y[i] for pid, i in ids.items() if not np.isnan(y[i])}
    # an import that died after its last rows were written, before their labels were stored
    last = [pid for pid, i in ids.items() if i >= n - 700 and not np.isnan(y[i])]
    with db.session() as s:
        s.execute(
            text("delete from prediction_feedback where prediction_id in :ids").bindparams(
                bindparam("ids", expanding=True)
            ),
            {"ids": last},
        )
    again = import_file(spec=spec, db=db, settings=settings)
    # no row twice; every label sent again: the missing ones stored, the others counted as already held
    assert (again.rows, again.stored, again.duplicates) == (n, 0, n)
    assert (again.labels, again.labels_present) == (len(last), labelled - len(last))
    with db.session() as s:
        assert s.execute(text("select count(*) from prediction_feedback")).scalar() == labelled
        restored: dict[str, Any] = dict(
            s.execute(text("select prediction_id, label from prediction_feedback")).all()
        )
    assert last and restored == stored

"""The typed copy of the inputs (predictions/typed.py) and the typed reader: equal to the generic reader on a
log mixing legacy and typed rows, three layouts (contract order, another order, one lacking a feature the
profile asks for) and every awkward value; written by the serving flow's row builder; old spool lines."""

from __future__ import annotations

import math
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import numpy as np
import orjson
import pytest
from sqlalchemy import text

from core.database import open_database
from monitors.log_window import read_window
from monitors.profile import (
    CategoricalProfile,
    NumericProfile,
    Profile,
)
from predictions import spool, typed
from predictions import windows as windows_module
from predictions.pending import build
from predictions.service import LogRow, record_feedback
from predictions.windows import Reader, WindowSpec, choose_reader
from registry.schema import infer_schema
from service.serving import flows
from tests.predictions.logdata import log_inputs, plain
from tests.predictions.test_aggregates import assert_equal_sketches
from tests.predictions.test_pending import request_rows
from tests.support import credit_profile
from training.datagen import TARGET, generate

FEATURES = [
    "age",
    "income",
    "debt_to_income",
    "credit_score",
    "loan_amount",
    "employment_years",
    "num_open_accounts",
    "home_ownership",
    "loan_purpose",
    "region",
]


@pytest.fixture(scope="module")
def profile() -> Profile:
    return credit_profile()


def names(profile: Profile) -> tuple[list[str], list[str]]:
    numeric = [n for n in FEATURES if isinstance(profile.features[n], NumericProfile)]
    categorical = [n for n in FEATURES if isinstance(profile.features[n], CategoricalProfile)]
    return numeric, categorical


def documents(n: int, seed: int) -> list[dict[str, Any]]:
    cols = generate(n, seed=seed)
    return [{f: plain(cols[f][i]) for f in FEATURES} for i in range(n)]


AWKWARD: list[tuple[dict[str, Any], list[str], bool]] = [
    # (changes, keys removed, can be typed)
    ({"region": None}, ["age"], True),  # an absent key, a null category
    ({"income": 2**60, "age": 41, "debt_to_income": -0.0}, [], True),  # ints (one beyond 2**53), -0.0
    ({"home_ownership": "", "loan_purpose": "brand_new"}, [], True),  # empty and unseen categories
    ({"credit_score": None, "loan_amount": 1e9}, ["region"], True),  # null; beyond the reference
    ({"loan_amount": math.inf, "income": math.nan}, [], True),  # the log writes null for both
    ({"extra": 1.5, "loan_purpose": 'quote " and \\ and \n and é'}, [], True),  # a key no layout has
    ({"age": "1.5"}, [], False),  # text in a numeric feature (counts as 1.5)
    ({"age": "abc"}, [], False),  # text that is no number (missing)
    ({"income": True}, [], False),  # a bool in a numeric feature
    ({"region": 7}, [], False),  # a number in a categorical feature
]


def awkward(docs: list[dict[str, Any]], at: int) -> None:
    for i, (changes, removed, _) in enumerate(AWKWARD):
        doc = docs[at + i]
        doc.update(changes)
        for key in removed:
            del doc[key]


def _mixed_log(url: str, profile: Profile) -> tuple[Any, list[LogRow], typed.Layout]:
    """Legacy rows, then rows lacking a layout's feature, then typed rows with every awkward value in the
    contract's order, then typed rows in another order (the newest 500)."""
    db = open_database(url)
    numeric, categorical = names(profile)
    known = {c: sorted(cast(CategoricalProfile, profile.features[c]).categories) for c in categorical}
    known["loan_purpose"] = known["loan_purpose"][1:]  # one category the contract does not know
    contract = typed.make_layout(numeric, categorical, [known[c] for c in categorical])
    reordered = typed.make_layout(
        numeric[::-1], categorical[::-1], [known[c][::-1] for c in categorical[::-1]]
    )
    lacking = typed.make_layout(numeric, [c for c in categorical if c != "region"])  # every text as text
    docs = documents(3_000, seed=5)
    awkward(docs, 10)  # in the legacy rows too
    awkward(docs, 1_600)
    p = np.random.default_rng(6).random(3_000)
    p[1_700:1_705] = np.nan  # predictions without a value
    rows: list[LogRow] = []
    for (lo, hi), layout in zip(
        [(0, 1_000), (1_000, 1_500), (1_500, 2_500), (2_500, 3_000)],
        [None, lacking, contract, reordered],
        strict=True,
    ):
        rows += log_inputs(db.engine, docs[lo:hi], layout=layout, probability=p[lo:hi])
    labels = [(r.prediction_id, float(i % 2)) for i, r in enumerate(rows) if i % 3]
    with db.session() as s:
        record_feedback(session=s, model_name="credit", labels=labels)
    return db, rows, contract


def test_typed_reader_equals_the_generic_reader_on_a_mixed_log(
    pg_url: str, profile: Profile, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, rows, contract = _mixed_log(pg_url, profile)
    # the rows holding a value that does not round-trip were written without the typed copy
    untyped = [i for i, r in enumerate(rows) if r.layout is None]
    wanted = set(range(1_000)) | {1_600 + i for i, (_, _, ok) in enumerate(AWKWARD) if not ok}
    assert set(untyped) == wanted
    with db.engine.connect() as conn:
        stored = conn.execute(text("select count(layout), count(numbers) from prediction_log"))
        assert stored.one() == (3_000 - len(wanted),) * 2
        texts = conn.execute(
            text("select count(categories) from prediction_log where layout = :i"), {"i": contract.id}
        )
        assert 0 < texts.scalar_one() < 1_000  # the rows holding a text the layout does not know
        assert conn.execute(text("select count(*) from prediction_log_layouts")).scalar() == 3
    assert choose_reader(engine=db.engine) is Reader.TYPED
    for spec, chunk_rows in ((WindowSpec(), 300), (WindowSpec(rows=1_700), 250), (WindowSpec(rows=500), 128)):
        generic = read_window(
            engine=db.engine, profile=profile, model_name="credit", spec=spec, reader="generic"
        )
        fast = read_window(
            engine=db.engine, profile=profile, model_name="credit", spec=spec, chunk_rows=chunk_rows
        )
        assert fast.reader == "typed" and fast.rows == generic.rows == (spec.rows or 3_000)
        assert fast.labelled == generic.labelled > 0
        assert_equal_sketches(fast.sketch, generic.sketch)
        assert fast.sketch.pca_error is not None and generic.sketch.pca_error is not None
        assert np.array_equal(fast.sketch.pca_error.cells, generic.sketch.pca_error.cells)
    # the awkward values are in the window, counted as the generic reader counts them
    whole = read_window(engine=db.engine, profile=profile, model_name="credit", spec=WindowSpec())
    s = whole.sketch
    assert s.numeric["age"].missing == 2 * 2  # absent; "abc" (in the legacy and the typed part)
    assert s.categorical["loan_purpose"]["brand_new"] == 2 and s.categorical["home_ownership"][""] == 2
    assert (
        s.categorical["region"]["7"] == 2
        and s.categorical["loan_purpose"]['quote " and \\ and \n and é'] == 2
    )
    # the newest 500 rows are typed in one layout: read without a single JSON document
    monkeypatch.setattr(windows_module, "_fetch_block", _no_documents)
    newest = read_window(engine=db.engine, profile=profile, model_name="credit", spec=WindowSpec(rows=500))
    assert newest.rows == 500 and newest.chunks >= 1
    with pytest.raises(AssertionError, match="JSON documents"):  # the older ones need them
        read_window(engine=db.engine, profile=profile, model_name="credit", spec=WindowSpec(rows=1_000))
    db.dispose()


def _no_documents(*args: Any) -> bytes:
    raise AssertionError("read the JSON documents")


def test_encoded_values_are_the_documents_values() -> None:
    layout = typed.make_layout(["a", "b"], ["c", "d"], [["x", "y"], []])
    docs: list[dict[str, Any]] = [
        {"a": 1.5, "b": 3, "c": "x", "d": "q"},
        {"a": None, "c": None},
        {"a": -0.0, "b": math.inf, "c": "", "d": None},
        {"c": "y", "d": None},
    ]
    copies = typed.encode_rows(layout, docs)
    assert copies is not None
    matrix = typed.numbers_matrix(b"".join(bytes.fromhex(n) for n, _ in copies), 4, 4)
    assert matrix[0].tolist() == [1.5, 3.0, 0, typed.OTHER]
    assert np.isnan(matrix[1, :2]).all() and matrix[1, 2:].tolist() == [typed.MISSING] * 2
    assert np.isnan(matrix[2, 1]) and matrix[2, 2:].tolist() == [typed.OTHER, typed.MISSING]
    assert math.copysign(1.0, matrix[2, 0]) == 1.0  # -0.0 reads back from the document as 0
    assert [c for _, c in copies] == ['{"v":["x","q"]}', None, '{"v":["",null]}', None]
    texts = "\n".join(c for _, c in copies if c is not None).encode()
    counts = typed.count_categories(layout, matrix, texts, ["d", "c"])
    assert counts == {"c": Counter({"x": 1, None: 1, "": 1, "y": 1}), "d": Counter({"q": 1, None: 3})}
    for bad in ({"a": "1.5"}, {"a": True}, {"c": 1}, {"b": 10**400}):
        assert typed.encode_rows(layout, [bad]) is None, bad
        assert typed.encode_rows(layout, [bad] * typed.SMALL) is None, bad
    # a request of SMALL rows or more is packed with numpy, a smaller one per row: the same bytes
    many = (docs * typed.SMALL)[: 2 * typed.SMALL]
    packed = typed.encode_rows(layout, many)
    assert packed is not None and packed[: len(docs)] == copies
    assert [typed.encode_rows(layout, [doc]) for doc in many] == [[copy] for copy in packed]
    same = typed.make_layout(["a", "b"], ["c", "d"], [["x", "y"], []])
    assert same.id == layout.id != typed.make_layout(["a", "b"], ["c", "d"], [["y", "x"], []]).id


def test_the_serving_flow_writes_the_typed_copy(profile: Profile) -> None:
    reference = generate(200, seed=3)
    schema = infer_schema(reference, target=TARGET)
    docs = documents(3, seed=4)
    docs[1]["age"] = None
    layout = flows._layout(schema)
    [rows] = build([request_rows(0, docs, layout)])
    by_feature = {n: [d.get(n) for d in docs] for n in schema.feature_names}
    [by_column] = build([request_rows(0, docs, layout, by_feature)])
    assert by_column == rows
    assert list(layout.numeric) + list(layout.categorical) == sorted(
        schema.feature_names, key=lambda n: (n not in layout.numeric, schema.feature_names.index(n))
    )
    assert {r.layout for r in rows} == {layout.id}
    for row, doc in zip(rows, docs, strict=True):
        assert row.numbers is not None and row.categories is None  # every text is a contract category
        values = np.frombuffer(bytes.fromhex(row.numbers), dtype="<f8")
        want = [np.nan if doc.get(n) is None else float(doc[n]) for n in layout.numeric]
        want += [layout.categories[j].index(doc[c]) for j, c in enumerate(layout.categorical)]
        assert np.array_equal(values, want, equal_nan=True)
    docs[2]["region"] = 5  # a value the contract would have refused: no typed copy for the request
    [untyped] = build([request_rows(0, docs, layout)])
    assert {(r.layout, r.numbers, r.categories) for r in untyped} == {(None, None, None)}
    assert [r.inputs for r in untyped] == docs


def test_spool_lines_old_and_new_decode(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    row = LogRow(
        "p", "r", "credit", 1, now, {"a": 1.0}, 0.5, None, 1.0, "ok", "v1", 7, "00" * 8, '{"v":[""]}'
    )
    assert spool.decode_row(spool.encode_row(row)) == row
    old = orjson.dumps([*row[:4], now.isoformat(), *row[5:11]])  # a line written before the typed columns
    back = spool.decode_row(old)
    assert back == row._replace(layout=None, numbers=None, categories=None)


def test_sqlite_keeps_the_generic_reader_and_ignores_the_copy(tmp_path: Path, profile: Profile) -> None:
    db = open_database(f"sqlite:///{tmp_path / 'x.db'}")
    numeric, categorical = names(profile)
    log_inputs(db.engine, documents(50, seed=8), layout=typed.make_layout(numeric, categorical))
    with db.engine.connect() as conn:
        assert conn.execute(text("select count(*), count(layout) from prediction_log")).one() == (50, 0)
    window = read_window(engine=db.engine, profile=profile, model_name="credit", spec=WindowSpec())
    assert window.reader == "generic" and window.rows == 50
    with pytest.raises(ValueError, match="typed reader needs PostgreSQL"):
        choose_reader(engine=db.engine, reader="typed")
    db.dispose()

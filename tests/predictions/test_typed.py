"""The typed copy of the inputs (predictions/typed.py): a log of requests typed in three layouts (contract
order, another order, one knowing no category) with every awkward value reads exactly as the same predictions
logged as documents, and as the documents themselves, on SQLite and PostgreSQL; so does a layout lacking a
feature the profile asks for; SQLite and PostgreSQL read the same log alike; the serving flow's row builder
writes the copy; a typed batch decodes back to its documents; spool lines of this and of older versions decode
and replay.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import numpy as np
import orjson
import pytest
from sqlalchemy import Engine, text

from core.database import Database, make_engine, open_database
from monitors.log_window import read_window
from monitors.profile import CategoricalProfile, NumericProfile, Profile
from monitors.sketch import WindowSketch
from predictions import spool, typed
from predictions.batch import LogBatch, pack_floats
from predictions.pending import build
from predictions.service import recent_predictions, record_feedback, write_log_rows
from predictions.windows import Chunk, WindowSpec, WindowSummary, read_chunks, summarize_window
from predictions.windows import chunks as window_chunks
from registry.schema import infer_schema
from service.serving import readers
from tests.predictions.logdata import old_line, old_rows, plain, write_requests
from tests.predictions.pendingdata import request_rows
from tests.support import CREDIT_FEATURES, credit_profile
from training.cluster.datagen import TARGET, generate

FEATURES = CREDIT_FEATURES


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
AT = 1_600  # where the awkward values are in the typed part (and at 10, in the documents part)
PARTS = [
    (0, 1_000),
    (1_000, 1_500),
    (1_500, 2_500),
    (2_500, 3_000),
]  # documents, textual, contract, reordered


def awkward(docs: list[dict[str, Any]], at: int) -> None:
    for i, (changes, removed, _) in enumerate(AWKWARD):
        doc = docs[at + i]
        doc.update(changes)
        for key in removed:
            del doc[key]


def layouts(profile: Profile) -> tuple[typed.Layout, typed.Layout, typed.Layout]:
    """The contract's layout (one category it does not know), the same in another order, and a layout that
    knows no category (every text stored as text)."""
    numeric, categorical = names(profile)
    known = {c: sorted(cast(CategoricalProfile, profile.features[c]).categories) for c in categorical}
    known["loan_purpose"] = known["loan_purpose"][1:]  # one category the contract does not know
    contract = typed.make_layout(numeric, categorical, [known[c] for c in categorical])
    reordered = typed.make_layout(
        numeric[::-1], categorical[::-1], [known[c][::-1] for c in categorical[::-1]]
    )
    textual = typed.make_layout(numeric, categorical)  # every text as text
    return contract, reordered, textual


def mixed_documents() -> tuple[list[dict[str, Any]], np.ndarray]:
    """3,000 documents with every awkward value (twice) and their outputs (five without a value)."""
    docs = documents(3_000, seed=5)
    awkward(docs, 10)  # in the documents part too
    awkward(docs, AT)
    p = np.random.default_rng(6).random(3_000)
    p[1_700:1_705] = np.nan  # predictions without a value
    return docs, p


def write_mixed(
    db: Database, profile: Profile, *, model: str = "credit", per_request: int = 1, typed_log: bool = True
) -> list[str]:
    """The mixed log: documents, then requests typed in the layout knowing no category, then in the
    contract's order (with the awkward values), then in another order (the newest 500); ``typed_log=False``:
    every request as documents. A label on each prediction whose index is not a multiple of 3. The ids."""
    contract, reordered, textual = layouts(profile)
    docs, p = mixed_documents()
    ids: list[str] = []
    start = datetime.now(UTC) - timedelta(minutes=10)
    for k, ((lo, hi), layout) in enumerate(zip(PARTS, [None, textual, contract, reordered], strict=True)):
        batches = write_requests(
            db.engine,
            docs[lo:hi],
            model=model,
            layout=layout if typed_log else None,
            probability=p[lo:hi],
            per_request=per_request,
            start=start + timedelta(minutes=k),
        )
        ids += [pid for b in batches for pid in b.ids()]
    labels = [(pid, float(i % 2)) for i, pid in enumerate(ids) if i % 3]
    with db.session() as s:
        assert record_feedback(session=s, model_name=model, labels=labels) == (len(labels), [])
    return ids


def _mixed_log(url: str, profile: Profile, per_request: int = 1) -> tuple[Database, list[str], typed.Layout]:
    """The mixed log of 'credit' (requests of ``per_request``: one by default, so that batch ids are
    1..3000) in a database at ``url``; the open database, the prediction ids and the contract's layout."""
    db = open_database(url)
    found = write_mixed(db, profile, per_request=per_request)
    return db, found, layouts(profile)[0]


def untyped_predictions(per_request: int) -> set[int]:
    """The predictions of the mixed log written without a typed copy: the documents part, and every request
    holding a value the contract would refuse."""
    bad = {AT + i for i, (_, _, ok) in enumerate(AWKWARD) if not ok}
    out: set[int] = set()
    for k, (lo, hi) in enumerate(PARTS):
        for first in range(lo, hi, per_request):
            members = set(range(first, min(first + per_request, hi)))
            if k == 0 or members & bad:
                out |= members
    return out


def stored_layouts(engine: Engine, model: str) -> list[int | None]:
    """Each logged prediction's layout (None: no typed copy), in log order."""
    with engine.connect() as conn:
        found = conn.execute(
            text("SELECT size, layout, numbers FROM prediction_batches WHERE model_name = :m ORDER BY id"),
            {"m": model},
        )
        return [None if numbers is None else layout for size, layout, numbers in found for _ in range(size)]


# ---------------------------------------------------------------- reading a window


def read_all(
    engine: Engine, profile: Profile, model: str, spec: WindowSpec, chunk_rows: int
) -> tuple[WindowSummary, list[Chunk]]:
    summary = summarize_window(engine=engine, model_name=model, spec=spec)
    assert summary is not None, spec
    numeric, categorical = names(profile)
    chunks = read_chunks(
        engine=engine, summary=summary, numeric=numeric, categorical=categorical, chunk_rows=chunk_rows
    )
    return summary, list(chunks)


def joined(chunks: Sequence[Chunk], profile: Profile) -> dict[str, Any]:
    """A window's chunks as whole columns: every numeric feature, category counts, predictions, labels."""
    numeric, categorical = names(profile)
    out: dict[str, Any] = {name: np.concatenate([c.columns[name] for c in chunks]) for name in numeric}
    for name in categorical:
        counts: Counter[str | None] = Counter()
        for c in chunks:
            counts.update(c.category_counts[name])
        out[name] = counts
    out["predictions"] = np.concatenate([c.predictions for c in chunks])
    out["labels"] = np.concatenate([c.labels for c in chunks])
    out["rows"] = sum(c.rows for c in chunks)
    return out


def assert_same(a: dict[str, Any], b: dict[str, Any], what: object) -> None:
    assert a.keys() == b.keys()
    for name, x in a.items():
        if isinstance(x, np.ndarray):
            assert x.shape == b[name].shape and np.array_equal(x, b[name], equal_nan=True), (what, name)
        else:
            assert x == b[name], (what, name)


def from_documents(docs: Sequence[dict[str, Any]], profile: Profile) -> dict[str, Any]:
    """What a window of these documents holds, read from their JSON (the log writes NaN and infinities as
    null): a number as a float, a number as text as that number, anything else NaN; a text as itself, null
    or absent as None, another value as its JSON text."""
    numeric, categorical = names(profile)
    out: dict[str, Any] = {}
    for name in numeric:
        col = np.full(len(docs), np.nan)
        for i, doc in enumerate(docs):
            value = doc.get(name)
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                col[i] = float(value)
            elif isinstance(value, str):
                with contextlib.suppress(ValueError):
                    col[i] = float(value)
        out[name] = col
    for name in categorical:
        out[name] = Counter(
            None if v is None else v if isinstance(v, str) else orjson.dumps(v).decode()
            for v in (doc.get(name) for doc in docs)
        )
    return out


SPECS = [
    (WindowSpec(), 300),
    (WindowSpec(rows=1_700), 250),
    (WindowSpec(rows=500), 128),
    (WindowSpec(rows=1_234), 97),
]


@pytest.mark.parametrize("per_request", [1, 7])
def test_a_typed_log_reads_as_its_documents(database_url: str, profile: Profile, per_request: int) -> None:
    """The same predictions logged typed ('credit') and as documents ('docs') read back identically through
    ``read_chunks``: every numeric column, the category counts, the predictions and the labels; both are the
    documents' values."""
    db = open_database(database_url)
    try:
        write_mixed(db, profile, per_request=per_request)
        write_mixed(db, profile, model="docs", per_request=per_request, typed_log=False)
        contract, _, _ = layouts(profile)
        # the predictions of a request holding a value that does not round-trip were written without the copy
        found = stored_layouts(db.engine, "credit")
        assert {i for i, layout in enumerate(found) if layout is None} == untyped_predictions(per_request)
        assert set(stored_layouts(db.engine, "docs")) == {None}
        with db.engine.connect() as conn:
            texts = conn.execute(
                text("SELECT count(categories), count(*) FROM prediction_batches WHERE layout = :i"),
                {"i": contract.id},
            ).one()
            assert 0 < texts[0] < texts[1]  # the batches holding a text the layout does not know
            assert conn.execute(text("SELECT count(*) FROM prediction_log_layouts")).scalar() == 3
        docs, p = mixed_documents()
        y = np.array([np.nan if i % 3 == 0 else float(i % 2) for i in range(3_000)])
        skips = 0
        for spec, chunk_rows in SPECS:
            summary, fast = read_all(db.engine, profile, "credit", spec, chunk_rows)
            slow_summary, slow = read_all(db.engine, profile, "docs", spec, chunk_rows)
            assert (summary.rows, summary.skip) == (slow_summary.rows, slow_summary.skip), spec
            skips += summary.skip > 0
            typed_rows, document_rows = joined(fast, profile), joined(slow, profile)
            assert_same(typed_rows, document_rows, spec)
            n = spec.rows or 3_000
            assert typed_rows["rows"] == summary.rows == n
            assert np.array_equal(typed_rows["predictions"], p[-n:], equal_nan=True)
            assert np.array_equal(typed_rows["labels"], y[-n:], equal_nan=True)
            expected = from_documents(docs[-n:], profile)
            assert_same({k: typed_rows[k] for k in expected}, expected, spec)
        assert (skips > 0) == (per_request > 1)  # a window ending inside a request
        # the awkward values are in the window, counted as the documents hold them
        whole = joined(read_all(db.engine, profile, "credit", WindowSpec(), 1_000)[1], profile)
        assert np.isnan(whole["age"]).sum() == 2 * 2  # absent; "abc" (in the documents and the typed part)
        assert whole["loan_purpose"]["brand_new"] == 2 and whole["home_ownership"][""] == 2
        assert whole["region"]["7"] == 2 and whole["loan_purpose"]['quote " and \\ and \n and é'] == 2
    finally:
        db.dispose()


def test_a_layout_lacking_a_feature_reads_it_from_the_documents(database_url: str, profile: Profile) -> None:
    """A request typed in a layout that lacks features the window asks for (an older contract) keeps its
    documents (its keys are not all in the layout): the window reads those features from them, as it reads
    the same predictions logged as documents."""
    db = open_database(database_url)
    try:
        numeric, categorical = names(profile)
        lacking = typed.make_layout(
            [n for n in numeric if n != "age"], [c for c in categorical if c != "region"]
        )
        docs = documents(60, seed=12)
        p = np.random.default_rng(13).random(60)
        batches = write_requests(db.engine, docs, layout=lacking, probability=p, per_request=4)
        assert all(b.layout == lacking.id and b.inputs is not None for b in batches)
        write_requests(db.engine, docs, model="docs", probability=p, per_request=4)
        for spec, chunk_rows in ((WindowSpec(), 1_000), (WindowSpec(rows=30), 7)):
            _, fast = read_all(db.engine, profile, "credit", spec, chunk_rows)
            _, slow = read_all(db.engine, profile, "docs", spec, chunk_rows)
            expected = from_documents(docs[-(spec.rows or 60) :], profile)
            assert_same(joined(fast, profile), joined(slow, profile), spec)
            got = joined(fast, profile)
            assert_same({k: got[k] for k in expected}, expected, spec)
    finally:
        db.dispose()


def test_the_monitors_sketch_a_typed_log_as_its_documents(database_url: str, profile: Profile) -> None:
    db = open_database(database_url)
    try:
        write_mixed(db, profile, per_request=5)
        write_mixed(db, profile, model="docs", per_request=5, typed_log=False)
        for spec, chunk_rows in SPECS:
            fast = read_window(
                engine=db.engine, profile=profile, model_name="credit", spec=spec, chunk_rows=chunk_rows
            )
            slow = read_window(
                engine=db.engine, profile=profile, model_name="docs", spec=spec, chunk_rows=chunk_rows
            )
            assert fast.rows == slow.rows == (spec.rows or 3_000) and fast.skip == slow.skip
            assert fast.labelled == slow.labelled > 0
            assert_equal_sketches(fast.sketch, slow.sketch)
            assert fast.sketch.pca_error is not None and slow.sketch.pca_error is not None
            assert np.array_equal(fast.sketch.pca_error.cells, slow.sketch.pca_error.cells)
    finally:
        db.dispose()


def assert_equal_sketches(a: WindowSketch, b: WindowSketch) -> None:
    """Every count equal; sums equal up to the order of floating-point additions."""
    assert a.rows == b.rows
    assert set(a.numeric) == set(b.numeric)
    for name, x in a.numeric.items():
        y = b.numeric[name]
        assert np.array_equal(x.cells, y.cells), name
        assert (x.missing, x.outside) == (y.missing, y.outside), name
        assert np.allclose(x.sums, y.sums, rtol=1e-12, atol=1e-9), name
    assert a.categorical == b.categorical  # raw keys: None, "" and unseen values included
    assert a.prediction is not None and b.prediction is not None
    assert np.array_equal(a.prediction.cells, b.prediction.cells)
    assert a.prediction.missing == b.prediction.missing
    la, lb = a.labels, b.labels
    assert (la.rows, la.true_pos, la.false_pos, la.false_neg, la.true_neg) == (
        lb.rows,
        lb.true_pos,
        lb.false_pos,
        lb.false_neg,
        lb.true_neg,
    )
    assert la.positive_cells is not None and lb.positive_cells is not None
    assert np.array_equal(la.positive_cells, lb.positive_cells)
    assert la.negative_cells is not None and lb.negative_cells is not None
    assert np.array_equal(la.negative_cells, lb.negative_cells)
    assert (a.errors.seen, a.errors.alarms) == (b.errors.seen, b.errors.alarms)


def test_sqlite_and_postgresql_read_the_same_log_alike(pg_url: str, tmp_path: Path, profile: Profile) -> None:
    """The same mixed log (requests of 7) in both databases: PostgreSQL reads typed ranges in one row each,
    SQLite batch by batch; every window reads the same."""
    pg = open_database(pg_url)
    lite = open_database(f"sqlite:///{tmp_path / 'same.db'}")
    try:
        for db in (pg, lite):
            write_mixed(db, profile, per_request=7)
        for spec, chunk_rows in [*SPECS, (WindowSpec(rows=1_234, version=1), 3_000)]:
            ours, theirs = (
                read_all(pg.engine, profile, "credit", spec, chunk_rows),
                read_all(lite.engine, profile, "credit", spec, chunk_rows),
            )
            assert (ours[0].rows, ours[0].skip) == (theirs[0].rows, theirs[0].skip), spec
            assert_same(joined(ours[1], profile), joined(theirs[1], profile), spec)
    finally:
        pg.dispose()
        lite.dispose()


@pytest.mark.postgres
def test_the_newest_requests_typed_in_one_layout_are_read_without_a_document(
    pg_url: str, profile: Profile, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL a range of batches all typed in one layout is read in one row (no batch, no JSON
    document): the newest 500 predictions are; a window reaching older ones (other layouts, documents) reads
    those batch by batch."""
    db, _, _ = _mixed_log(pg_url, profile, per_request=10)
    try:
        monkeypatch.setattr(window_chunks, "_fetch_rows", _no_documents)
        newest = read_window(
            engine=db.engine, profile=profile, model_name="credit", spec=WindowSpec(rows=495)
        )
        assert newest.rows == 495 and newest.chunks >= 1 and newest.skip == 5  # inside a request
        with pytest.raises(AssertionError, match="batch by batch"):  # the older ones need it
            read_window(engine=db.engine, profile=profile, model_name="credit", spec=WindowSpec(rows=1_000))
    finally:
        db.dispose()


def _no_documents(*args: Any) -> Any:
    raise AssertionError("read batch by batch")


# ---------------------------------------------------------------- the copy itself


def test_encoded_values_are_the_documents_values() -> None:
    layout = typed.make_layout(["a", "b"], ["c", "d"], [["x", "y"], []])
    docs: list[dict[str, Any]] = [
        {"a": 1.5, "b": 3, "c": "x", "d": "q"},
        {"a": None, "c": None},
        {"a": -0.0, "b": math.inf, "c": "", "d": None},
        {"c": "y", "d": None},
    ]
    copy = typed.encode_rows(layout, docs)
    assert copy is not None and len(copy.data) == 4 * layout.width * 8
    matrix = typed.numbers_matrix(copy.data, 4, 4)
    assert matrix[0].tolist() == [1.5, 3.0, 0, typed.OTHER]
    assert np.isnan(matrix[1, :2]).all() and matrix[1, 2:].tolist() == [typed.MISSING] * 2
    assert np.isnan(matrix[2, 1]) and matrix[2, 2:].tolist() == [typed.OTHER, typed.MISSING]
    assert math.copysign(1.0, matrix[2, 0]) == 1.0  # -0.0 reads back from the document as 0
    assert matrix[3, 2:].tolist() == [1, typed.MISSING]
    assert copy.others == ['{"v":["x","q"]}', None, '{"v":["",null]}', None]
    assert copy.categories(0, 4) == '{"v":["x","q"]}\n{"v":["",null]}' and copy.categories(3, 4) is None
    texts = (copy.categories(0, 4) or "").encode()
    counts = typed.count_categories(layout, matrix, texts, ["d", "c"])
    assert counts == {"c": Counter({"x": 1, None: 1, "": 1, "y": 1}), "d": Counter({"q": 1, None: 3})}
    for bad in ({"a": "1.5"}, {"a": True}, {"c": 1}, {"b": 10**400}):
        assert typed.encode_rows(layout, [bad]) is None, bad
        assert typed.encode_rows(layout, [bad] * typed.SMALL) is None, bad
    # a request of SMALL rows or more is packed with numpy, a smaller one per row: the same bytes
    many = (docs * typed.SMALL)[: 2 * typed.SMALL]
    packed = typed.encode_rows(layout, many)
    assert packed is not None and packed.data[: len(copy.data)] == copy.data
    assert packed.others[: len(docs)] == copy.others
    step = layout.width * 8
    for i, doc in enumerate(many):
        assert typed.encode_rows(layout, [doc]) == typed.Encoded(
            packed.data[i * step : (i + 1) * step], [packed.others[i]]
        )
    by_column = typed.encode_columns(
        layout, {n: [d.get(n) for d in many] for n in ("a", "b", "c", "d")}, len(many)
    )
    assert by_column == packed
    same = typed.make_layout(["a", "b"], ["c", "d"], [["x", "y"], []])
    assert same.id == layout.id != typed.make_layout(["a", "b"], ["c", "d"], [["y", "x"], []]).id


def test_the_serving_flow_writes_the_typed_copy(profile: Profile) -> None:
    reference = generate(200, seed=3)
    schema = infer_schema(reference, target=TARGET)
    docs = documents(3, seed=4)
    docs[1]["age"] = None
    layout = readers.log_layout(schema)
    [[batch]] = build([request_rows(0, docs, layout)])  # one request: one batch of three predictions
    by_feature = {n: [d.get(n) for d in docs] for n in schema.feature_names}
    [by_column] = build([request_rows(0, docs, layout, by_feature, ids=batch.ids())])
    assert by_column == [batch]
    assert list(layout.numeric) + list(layout.categorical) == sorted(
        schema.feature_names, key=lambda n: (n not in layout.numeric, schema.feature_names.index(n))
    )
    assert batch.size == 3 and batch.layout == layout.id
    assert batch.numbers is not None and batch.categories is None  # every text is a contract category
    assert batch.inputs is None  # every key in the layout: the documents are not stored twice
    values = np.frombuffer(bytes.fromhex(batch.numbers), dtype="<f8").reshape(3, layout.width)
    for row, doc in zip(values, docs, strict=True):
        want = [np.nan if doc.get(n) is None else float(doc[n]) for n in layout.numeric]
        want += [layout.categories[j].index(doc[c]) for j, c in enumerate(layout.categorical)]
        assert np.array_equal(row, want, equal_nan=True)
    docs[2]["region"] = 5  # a value the contract would have refused: no typed copy for the request
    [[untyped]] = build([request_rows(0, docs, layout)])
    assert (untyped.layout, untyped.numbers, untyped.categories) == (None, None, None)
    assert untyped.inputs == docs


def _normal(value: Any) -> Any:
    """A value as the log's JSON holds it (NaN and infinities as null, ints as numbers)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return value


@pytest.mark.parametrize("per_request", [1, 6])
def test_a_typed_batch_decodes_to_its_documents(
    database_url: str, profile: Profile, per_request: int
) -> None:
    """``recent_predictions`` reads a typed batch back as its documents (every numeric feature, None when
    absent; a category when present); a batch that keeps its documents returns them."""
    db = open_database(database_url)
    try:
        contract, _, _ = layouts(profile)
        docs = documents(60, seed=9)
        awkward(docs, 20)
        batches = write_requests(db.engine, docs, layout=contract, per_request=per_request)
        assert any(b.layout is not None and b.inputs is None for b in batches)
        with db.session() as s:
            back = [p.inputs for p in recent_predictions(session=s, model_name="credit")][::-1]
        numeric, categorical = names(profile)
        for i, (doc, got) in enumerate(zip(docs, back, strict=True)):
            for name in numeric:
                assert _normal(got.get(name)) == _normal(doc.get(name)), (i, name)
            for name in categorical:
                assert got.get(name) == doc.get(name), (i, name)
            assert set(got) - set(FEATURES) == set(doc) - set(FEATURES), i  # a key no layout has: kept
    finally:
        db.dispose()


# ---------------------------------------------------------------- spool lines


def test_spool_lines_of_this_and_older_versions_decode_and_replay(database_url: str) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    layout = typed.make_layout(["a"], ["c"], [["x"]])
    docs: list[dict[str, Any]] = [{"a": 1.0, "c": "x"}, {"a": None, "c": "new"}, {"a": 3}]
    vectors: list[list[float | None]] = [[0.2, 0.8], [None, 1.0], [0.5, 0.5]]
    [[batch]] = build([dataclasses.replace(request_rows(0, docs, layout), outputs=vectors)])
    assert spool.decode_row(spool.encode_row(batch)) == batch
    assert batch.vectors is not None and batch.categories is not None and batch.flags is None

    copy = typed.encode_rows(layout, [{"a": 2.5, "c": "y"}])
    assert copy is not None
    rows = old_rows(3, when=now)
    rows[1].update(
        layout=layout.id, numbers=copy.data.hex(), categories=copy.others[0], inputs={"a": 2.5, "c": "y"}
    )
    rows[2]["outputs"] = [0.25, 0.75]
    lines = [
        orjson.dumps(old_line(rows[0])[:11]),
        orjson.dumps(old_line(rows[1])[:14]),
        orjson.dumps(old_line(rows[2])),
    ]
    back = [spool.decode_row(line) for line in lines]  # one prediction each: batches of one
    for row, got in zip(rows, back, strict=True):
        assert isinstance(got, LogBatch) and got.size == 1 and got.ids() == [row["prediction_id"]]
        assert (got.request_id, got.model_name, got.logged_at, got.inputs) == (
            row["request_id"],
            row["model_name"],
            now,
            [row["inputs"]],
        )
        assert got.outputs == pack_floats([row["probability"]])
        assert got.flags == (None if row["flags"] is None else [row["flags"]])  # None: no prediction has one
    assert back[1].flags == [["x:observed_range"]]
    assert (back[0].layout, back[0].numbers, back[0].vectors) == (None, None, None)
    assert (back[1].layout, back[1].numbers, back[1].categories) == (
        layout.id,
        copy.data.hex(),
        copy.others[0],
    )
    assert copy.others[0] == '{"v":["y"]}'  # "y" is not a category of the layout
    assert back[2].vectors == pack_floats([0.25, 0.75])
    with pytest.raises(ValueError):
        spool.decode_row(orjson.dumps([*old_line(rows[0])[:10]]))

    open_database(database_url).dispose()
    engine = make_engine(database_url)
    try:
        assert write_log_rows(engine=engine, rows=[batch, *back], idempotent=True) == 6
        assert write_log_rows(engine=engine, rows=[batch, *back], idempotent=True) == 6  # replayed again
        db = open_database(database_url, upgrade=False)
        with db.session() as s:
            logged = recent_predictions(session=s, model_name="m")[::-1]
        db.dispose()
        assert [p.prediction_id for p in logged] == batch.ids() + [r["prediction_id"] for r in rows]
        assert [p.inputs for p in logged] == [
            {"a": 1.0, "c": "x"},
            {"a": None, "c": "new"},
            {"a": 3.0},
            *[r["inputs"] for r in rows],
        ]
        outputs = [p.outputs for p in logged]
        assert outputs[1] is not None and math.isnan(outputs[1][0]) and outputs[1][1] == 1.0  # None: NaN
        assert outputs[:1] + outputs[2:] == [[0.2, 0.8], [0.5, 0.5], None, None, [0.25, 0.75]]
    finally:
        engine.dispose()

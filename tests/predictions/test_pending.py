"""The writer thread builds the batch rows of many requests at once (predictions/pending.py): the same rows,
and the same typed copies, as each request built alone; a request without an exact copy never takes the
others'."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictions import typed
from predictions.pending import RequestRows, build
from predictions.service import new_prediction_ids
from tests.predictions.pendingdata import LAYOUT, request_rows

OTHER = typed.make_layout(["a"], ["c", "d"], [["x"], []])  # a second model's layout in the same batch

numbers = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.just(-0.0),
)
texts = st.one_of(st.none(), st.sampled_from(["x", "y", "", "unseen", 'quote " é']))
bad = st.one_of(st.booleans(), st.text(max_size=3))  # a value the contract refuses: no copy for its request


@st.composite
def requests(draw: st.DrawFn, index: int) -> RequestRows:
    layout = draw(st.sampled_from([LAYOUT, OTHER, None]))
    n = draw(st.sampled_from([1, 2, typed.SMALL - 1, typed.SMALL, 3 * typed.SMALL + 1]))
    names = ["a", "b", "c", "d"]
    docs: list[dict[str, Any]] = []
    for _ in range(n):
        doc = {
            k: draw(numbers if k in ("a", "b") else texts) for k in names if draw(st.booleans()) or k == "a"
        }
        docs.append(doc)
    if draw(st.integers(0, 5)) == 0:
        docs[draw(st.integers(0, n - 1))][draw(st.sampled_from(names))] = draw(bad)
    columns = {k: [d.get(k) for d in docs] for k in names} if draw(st.booleans()) else None
    return request_rows(index, docs, layout, columns)


@st.composite
def batches(draw: st.DrawFn) -> list[RequestRows]:
    return [draw(requests(i)) for i in range(draw(st.integers(1, 6)))]


def same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN (a request's outputs and inputs may hold NaN)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


@settings(max_examples=150, deadline=None)
@given(batches())
def test_a_batch_builds_what_each_request_builds_alone(batch: list[RequestRows]) -> None:
    together = build(batch)
    alone = [build([r])[0] for r in batch]
    assert same(together, alone)
    for request, rows in zip(batch, together, strict=True):
        assert [pid for r in rows for pid in r.ids()] == request.ids
        for r in rows:
            if r.inputs is not None:  # the documents themselves, never a copy
                assert all(a is b for a, b in zip(r.inputs, request.inputs[: r.size], strict=False))
        if request.layout is None:
            assert {(r.layout, r.numbers, r.categories) for r in rows} == {(None, None, None)}
            assert [doc for r in rows for doc in r.inputs or []] == request.inputs


def test_a_request_without_an_exact_copy_keeps_the_others_copies() -> None:
    good, refused, also_good = (
        request_rows(0, [{"a": 1.0, "c": "x"}]),
        request_rows(1, [{"a": True}]),
        request_rows(2, [{"b": 2}]),
    )
    rows = [r for rs in build([good, refused, also_good]) for r in rs]
    assert [r.layout for r in rows] == [LAYOUT.id, None, LAYOUT.id]
    assert rows[0].numbers == typed.encode_rows(LAYOUT, [{"a": 1.0, "c": "x"}]).data.hex()  # type: ignore[union-attr]
    assert rows[2].numbers == typed.encode_rows(LAYOUT, [{"b": 2}]).data.hex()  # type: ignore[union-attr]
    assert rows[1].inputs == [{"a": True}]  # its documents instead


def test_a_request_whose_parts_disagree_is_refused_on_the_request_path() -> None:
    with pytest.raises(ValueError, match="2 prediction ids for 1 rows"):
        request_rows(0, [{"a": 1.0}], ids=new_prediction_ids(2))

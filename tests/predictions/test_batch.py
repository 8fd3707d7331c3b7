"""A request's predictions as one batch row (predictions/batch.py, predictions/pending.py): ids as a prefix
and a counted tail, runs cut where ids stop counting, outputs and vectors as float64, documents only where the
typed copy cannot hold them; spool and dead-letter lines of an older version read as batches of one."""

from __future__ import annotations

import math
import struct
from datetime import UTC, datetime

import orjson
import pytest

from predictions import typed
from predictions.batch import LogBatch, as_bytes, floats, from_line, ids_of, runs, split_id, to_line
from predictions.pending import RequestRows, build
from predictions.service import new_prediction_ids

AT = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
LAYOUT = typed.make_layout(["a"], ["c"], [["x"]])


def request(ids: list[str], docs: list[dict[str, object]], **kw: object) -> RequestRows:
    n = len(ids)
    fields: dict[str, object] = {
        "model_name": "m",
        "model_version": 2,
        "logged_at": AT,
        "request_id": "r",
        "protocol": "v1",
        "latency_ms": 3.0,
        "status": "ok",
        "ids": ids,
        "inputs": docs,
        "values": [0.25] * n,
        "flags": [None] * n,
        "layout": LAYOUT,
    }
    fields.update(kw)
    return RequestRows(**fields)  # type: ignore[arg-type]


def test_the_ids_of_one_call_are_one_run_and_come_back_from_the_batch() -> None:
    ids = new_prediction_ids(300)
    assert runs(ids) == [(0, 300)]
    (batch,) = build([request(ids, [{"a": i} for i in range(300)])])[0]
    assert (batch.size, batch.ids()) == (300, ids)
    assert split_id(ids[7]) == (batch.id_prefix, batch.id_low + 7)


def test_a_request_of_more_than_one_run_is_one_batch_per_run() -> None:
    ids = new_prediction_ids(5000)  # runs of at most 2048 ids share a prefix
    spans = runs(ids)
    assert spans is not None and len(spans) == 3 and spans[0] == (0, 2048) and spans[-1][1] == 5000
    batches = build([request(ids, [{"a": 1.0}] * 5000)])[0]
    assert [b.size for b in batches] == [2048, 2048, 904]
    assert [pid for b in batches for pid in b.ids()] == ids


def test_ids_that_do_not_count_up_are_cut_where_they_stop() -> None:
    a, b = new_prediction_ids(3), new_prediction_ids(2)
    assert runs([*a, *b]) == [(0, 3), (3, 5)]
    assert runs([a[0], a[2]]) == [(0, 1), (1, 2)]
    with pytest.raises(ValueError, match="three hex digits"):
        request(["not-a-uuid"], [{"a": 1}])


def test_outputs_vectors_flags_and_documents_are_kept_per_prediction() -> None:
    ids = new_prediction_ids(3)
    docs: list[dict[str, object]] = [{"a": 1, "c": "x"}, {"a": 2, "c": "new"}, {"a": None}]
    vectors: list[list[float | None]] = [[0.1, 0.9], [0.5, None], [0.3, 0.7]]
    flags: list[list[str] | None] = [None, ["out_of_range:a"], None]
    (batch,) = build([request(ids, docs, values=[0.9, None, 0.7], outputs=vectors, flags=flags)])[0]
    out = floats(as_bytes(batch.outputs), 3)
    assert out[0] == 0.9 and math.isnan(out[1]) and out[2] == 0.7
    assert struct.unpack("<6d", as_bytes(batch.vectors) or b"")[:3] == (0.1, 0.9, 0.5)
    assert batch.flags == flags
    assert batch.inputs is None  # every key in the layout and typed: the documents are not stored twice
    assert batch.categories == '{"v":["new"]}'
    assert batch.numbers is not None and len(batch.numbers) == 2 * 8 * 2 * 3  # hex of 3 rows x 2 float64


def test_the_documents_are_stored_when_the_typed_copy_cannot_hold_them() -> None:
    ids = new_prediction_ids(2)
    extra = build([request(ids, [{"a": 1}, {"a": 2, "note": "kept"}])])[0][0]
    assert extra.inputs == [{"a": 1}, {"a": 2, "note": "kept"}] and extra.numbers is not None
    text = build([request(new_prediction_ids(1), [{"a": "1.5"}])])[0][0]
    assert text.inputs == [{"a": "1.5"}] and text.layout is None and text.numbers is None
    untyped = build([request(new_prediction_ids(1), [{"a": 1}], layout=None)])[0][0]
    assert untyped.inputs == [{"a": 1}] and untyped.layout is None


def test_a_batch_line_round_trips_and_an_old_line_reads_as_a_batch_of_one() -> None:
    (batch,) = build([request(new_prediction_ids(2), [{"a": 1}, {"a": 2}])])[0]
    line = orjson.loads(orjson.dumps(to_line(batch)))
    assert from_line(line) == batch
    pid = new_prediction_ids(1)[0]
    old = [pid, "r", "m", 1, AT.isoformat(), {"a": 1.5}, 0.75, ["f"], 2.0, "ok", "v1"]
    legacy = from_line(orjson.loads(orjson.dumps(old)))
    assert isinstance(legacy, LogBatch)
    assert legacy.ids() == [pid] and legacy.logged_at == AT and legacy.inputs == [{"a": 1.5}]
    assert floats(as_bytes(legacy.outputs), 1).tolist() == [0.75] and legacy.flags == [["f"]]
    with pytest.raises(ValueError):
        from_line([1, 2, 3])


def test_ids_of_counts_the_tail_in_hex() -> None:
    assert ids_of("p" * 33, 9, 3) == ["p" * 33 + "009", "p" * 33 + "00a", "p" * 33 + "00b"]

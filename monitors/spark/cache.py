"""A lake hour's counts as the sketch cache stores them: a JSON header (orjson: the digest of the hour's
files, its first and last time, a multi-class model's counts of unlabelled rows) and then
:func:`monitors.sketch.encode_counts`. No pickle; a stored hour whose files changed is never decoded."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np
import orjson

from monitors.binning import GridCounts
from monitors.sketch import MulticlassCounts, decode_counts, encode_counts
from monitors.spark.counting import Part

_ARRAYS = ("predicted", "expected_true_pos", "expected_false_pos", "expected_false_neg")


def encode_part(part: Part, *, digest: str) -> bytes:
    """``part`` (counted from the files ``digest`` names) as bytes."""
    mc = part.sketch.multiclass
    head = orjson.dumps(
        {
            "digest": digest,
            "start": part.start.isoformat() if part.start else None,
            "end": part.end.isoformat() if part.end else None,
            "files": part.files,
            "multiclass": None if mc is None else _multiclass(mc),
        }
    )
    return len(head).to_bytes(4, "little") + head + encode_counts(part.sketch)


def decode_part(data: bytes, *, digest: str) -> Part | None:
    """The part :func:`encode_part` wrote, or None when it was counted from other files than ``digest``'s."""
    size = int.from_bytes(data[:4], "little")
    head = orjson.loads(data[4 : 4 + size])
    if head.get("digest") != digest:
        return None
    sketch = decode_counts(data[4 + size :])
    if head["multiclass"] is not None:
        sketch.multiclass = _multiclass_of(head["multiclass"])
    return Part(
        sketch=sketch,
        start=datetime.fromisoformat(head["start"]) if head["start"] else None,
        end=datetime.fromisoformat(head["end"]) if head["end"] else None,
        files=int(head["files"]),
    )


def _multiclass(mc: MulticlassCounts) -> dict[str, Any]:
    return {
        "classes": mc.classes,
        "rows": mc.rows,
        "probabilities": [
            None if g is None else [g.cells.tolist(), g.sums.tolist(), g.missing, g.outside]
            for g in mc.probabilities
        ],
        **{name: getattr(mc, name).tolist() for name in _ARRAYS},
        "expected_correct": mc.expected_correct,
    }


def _multiclass_of(doc: dict[str, Any]) -> MulticlassCounts:
    mc = MulticlassCounts(int(doc["classes"]))
    mc.rows = int(doc["rows"])
    mc.probabilities = [
        None
        if g is None
        else GridCounts(
            cells=np.asarray(g[0], dtype=np.int64),
            sums=np.asarray(g[1], dtype=np.float64),
            missing=g[2],
            outside=g[3],
        )
        for g in doc["probabilities"]
    ]
    mc.predicted = np.asarray(doc["predicted"], dtype=np.int64)
    for name in _ARRAYS[1:]:
        setattr(mc, name, np.asarray(doc[name], dtype=np.float64))
    mc.expected_correct = float(doc["expected_correct"])
    return mc

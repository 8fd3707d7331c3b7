"""A uniform sample of a window's raw rows: the rows at chosen places, mapped to batches by the running sum of
their sizes; on PostgreSQL only those rows' slices of the batches' binary columns are read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from sqlalchemy import Engine, select

from predictions import typed
from predictions.batch import as_bytes
from predictions.models import PredictionBatch, PredictionFeedback, PredictionStatus
from predictions.windows.chunks import range_params, range_where
from predictions.windows.decoding import (
    documents_of,
    holds_all,
    known_layouts,
    numbers_of,
)
from predictions.windows.labels import label_filters
from predictions.windows.spec import NO_SORT, WindowSummary


@dataclass(frozen=True)
class SampleRows:
    """Rows of a window at chosen positions, in log order: each numeric feature's values (float, NaN:
    missing), each categorical feature's texts (an object array of ``str``, None: missing or ``""``), the
    answers (``[n]``, or ``[n, width]`` vectors of a multi-class model, NaN where a batch has none) and the
    labels from the feedback (NaN: none)."""

    population: int  # the window's rows
    positions: np.ndarray  # each row's place in the window (0: its oldest prediction)
    numeric: dict[str, np.ndarray]
    categorical: dict[str, np.ndarray]
    predictions: np.ndarray
    labels: np.ndarray


class _Picked:
    """The pieces of each sampled row as the log holds them: its batch's layout (0: none), its typed values
    (``numbers[starts[i] : starts[i] + widths[i]]``, width 0: no typed copy), its output, its vector, its
    document where its batch holds documents, and its texts (``{"v": [...]}`` values) where it holds a
    category outside the layout."""

    def __init__(self, n: int, width: int | None) -> None:
        self.n = n
        self.layouts = np.zeros(n, dtype=np.int64)
        self.starts = np.zeros(n, dtype=np.int64)
        self.widths = np.zeros(n, dtype=np.int64)
        self.numbers = np.empty(0)
        self.outputs = np.full(n, np.nan)
        self.vectors = None if not width else np.full((n, width), np.nan)
        self.documents: dict[int, Any] = {}
        self.others: dict[int, list[Any]] = {}


def read_sample(
    *,
    engine: Engine,
    summary: WindowSummary,
    positions: np.ndarray,
    numeric: Sequence[str],
    categorical: Sequence[str],
    width: int | None = None,
) -> SampleRows:
    """The window's rows at ``positions`` (increasing places in the window, 0 its oldest prediction): their
    named features, answers (``width``: a multi-class model's vectors of that width) and labels.

    The window's batch ids and sizes come from one index-only scan (on PostgreSQL one binary value each);
    the positions are mapped to (batch, place) by the running sum of sizes. On PostgreSQL only the sampled
    rows' slices of ``numbers``, ``outputs`` and ``vectors`` (and the one document of a batch held as
    documents) are read, in one query; the whole ``numbers`` and ``categories`` of a batch only when a
    sampled row holds a category outside the layout. Elsewhere the sampled rows' batches are read whole. The
    labels are the feedback's of those (batch, place) pairs. Values are read as :func:`read_chunks` reads
    them (see the module docstring), a category as its text."""
    want = np.asarray(positions, dtype=np.int64)
    if want.size and (want[0] < 0 or want[-1] >= summary.rows or np.any(np.diff(want) <= 0)):
        raise ValueError(f"sample positions must be increasing places in the window's {summary.rows} rows")
    ids, sizes = _batch_sizes(engine, summary)
    ends = np.cumsum(sizes)
    at = want + summary.skip  # places in the id range (the first batch's skipped rows come first)
    if want.size and (not ends.size or at[-1] >= ends[-1]):
        raise ValueError("the window's batches hold fewer rows than its summary: read its summary again")
    batch = np.searchsorted(ends, at, side="right")
    log_ids = ids[batch] if want.size else np.empty(0, dtype=np.int64)
    places = at - (ends[batch] - sizes[batch]) if want.size else np.empty(0, dtype=np.int64)
    layouts = known_layouts(engine)
    asked = (*numeric, *categorical)
    if engine.dialect.name == "postgresql":
        picked = _pick_sliced(engine, summary, log_ids, places, layouts, width)
    else:
        picked = _pick_whole(engine, summary, log_ids, places, layouts, width)
    numeric_values, categorical_values = _sample_columns(picked, layouts, numeric, categorical, asked)
    return SampleRows(
        population=summary.rows,
        positions=want,
        numeric=numeric_values,
        categorical=categorical_values,
        predictions=_sample_answers(picked, width),
        labels=_sample_labels(engine, summary, log_ids, places),
    )


_SIZES_SQL = """
SELECT count(*), string_agg(int8send(id), ''::bytea), string_agg(int8send(size::int8), ''::bytea)
FROM (
    SELECT p.id, p.size FROM prediction_batches p
    WHERE p.model_name = %(model_name)s AND p.status = %(status)s AND p.id BETWEEN %(lo)s AND %(hi)s {extra}
    ORDER BY p.id
) AS rows
"""


def _batch_sizes(engine: Engine, summary: WindowSummary) -> tuple[np.ndarray, np.ndarray]:
    """The window's batch ids and sizes in id order (the first batch whole: ``skip`` is the caller's)."""
    if engine.dialect.name != "postgresql":
        log = PredictionBatch
        stmt = (
            select(log.id, log.size)
            .where(*range_where(summary, summary.first_id, summary.last_id))
            .order_by(log.id)
        )
        with engine.connect() as conn:
            rows = conn.execute(stmt).all()
        return np.array([r[0] for r in rows], dtype=np.int64), np.array([r[1] for r in rows], dtype=np.int64)
    sql, params = range_params(summary, _SIZES_SQL)
    raw = engine.raw_connection()
    try:
        pg: Any = raw.driver_connection
        with pg.cursor() as cur:
            cur.execute(NO_SORT)
            cur.execute(sql, {**params, "lo": summary.first_id, "hi": summary.last_id}, binary=True)
            n, ids, sizes = cur.fetchone()
        raw.commit()
    finally:
        raw.close()
    id_array = np.frombuffer(bytes(ids or b""), dtype=">i8").astype(np.int64)
    size_array = np.frombuffer(bytes(sizes or b""), dtype=">i8").astype(np.int64)
    if id_array.size != int(n) or size_array.size != int(n):
        raise ValueError(f"{id_array.size} ids and {size_array.size} sizes for {n} batches")
    return id_array, size_array


# PostgreSQL: the sampled rows' slices in one result row, each column concatenated in sample order (the rows
# come in the order of ``unnest``: ``ord``); a batch's width is its ``numbers`` length over its size (the
# layout's, without reading the layouts in SQL); an output or vector the batch lacks is NaN
_SLICES_SQL = """
SELECT count(*),
    string_agg(int4send(s.ord), ''::bytea ORDER BY s.ord),
    string_agg(int8send(coalesce(p.layout, 0)), ''::bytea ORDER BY s.ord),
    string_agg(int4send(coalesce(octet_length(p.numbers) / p.size, 0)), ''::bytea ORDER BY s.ord),
    string_agg(
        coalesce(substring(p.numbers from s.pos * (octet_length(p.numbers) / p.size) + 1
                           for octet_length(p.numbers) / p.size), ''::bytea),
        ''::bytea ORDER BY s.ord),
    string_agg(
        CASE WHEN octet_length(p.outputs) = 8 * p.size THEN substring(p.outputs from s.pos * 8 + 1 for 8)
        ELSE %(nan)s END,
        ''::bytea ORDER BY s.ord),
    string_agg(CASE WHEN octet_length(p.vectors) = %(vector_bytes)s * p.size
                    THEN substring(p.vectors from s.pos * %(vector_bytes)s + 1 for %(vector_bytes)s)
               ELSE %(nan_vector)s END, ''::bytea ORDER BY s.ord) FILTER (WHERE %(vectors)s),
    array_agg(s.ord ORDER BY s.ord) FILTER (WHERE p.inputs IS NOT NULL),
    array_agg(p.inputs -> s.pos ORDER BY s.ord) FILTER (WHERE p.inputs IS NOT NULL)
FROM unnest(%(ids)s::int8[], %(pos)s::int4[], %(ord)s::int4[]) AS s(id, pos, ord)
JOIN prediction_batches p ON p.id = s.id AND p.model_name = %(model_name)s
"""


_NAN = np.array([np.nan], dtype="<f8").tobytes()


def _pg_rows(engine: Engine, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """One statement's rows on PostgreSQL (binary results; sorts and JIT off)."""
    raw = engine.raw_connection()
    try:
        pg: Any = raw.driver_connection
        with pg.cursor() as cur:
            cur.execute(NO_SORT)
            cur.execute("SET LOCAL jit = off")
            cur.execute(sql, params, binary=True)
            rows = cur.fetchall()
        raw.commit()
    finally:
        raw.close()
    return list(rows)


def _pick_sliced(
    engine: Engine,
    summary: WindowSummary,
    log_ids: np.ndarray,
    places: np.ndarray,
    layouts: dict[int, typed.Layout],
    width: int | None,
) -> _Picked:
    """The sampled rows' pieces from their slices, in one result row (PostgreSQL)."""
    picked = _Picked(log_ids.size, width)
    if not log_ids.size:
        return picked
    params = {
        "ids": log_ids.tolist(),
        "pos": places.tolist(),
        "ord": list(range(log_ids.size)),
        "model_name": summary.model_name,
        "nan": _NAN,
        "vector_bytes": 8 * (width or 1),
        "nan_vector": _NAN * (width or 1),
        "vectors": bool(width),
    }
    (found, ords, layout_ids, widths, numbers, outputs, vectors, doc_ords, docs), *_ = _pg_rows(
        engine, _SLICES_SQL, params
    )
    if not found:
        return picked
    at = np.frombuffer(bytes(ords), dtype=">i4").astype(np.int64)  # the rows found (a batch may be gone)
    picked.layouts[at] = np.frombuffer(bytes(layout_ids), dtype=">i8")
    row_widths = np.frombuffer(bytes(widths), dtype=">i4").astype(np.int64) // 8
    picked.widths[at] = row_widths
    picked.starts[at] = np.cumsum(row_widths) - row_widths
    picked.numbers = np.frombuffer(bytes(numbers or b""), dtype="<f8")
    picked.outputs[at] = np.frombuffer(bytes(outputs), dtype="<f8")
    if picked.vectors is not None and width:
        picked.vectors[at] = np.frombuffer(bytes(vectors or b""), dtype="<f8").reshape(-1, width)
    picked.documents = dict(zip(doc_ords or [], docs or [], strict=True))
    texts = _rows_with_texts(picked, layouts)
    if texts:
        _fetch_texts(engine, summary, log_ids, places, texts, picked, layouts)
    return picked


def _row(picked: _Picked, i: int) -> np.ndarray:
    """Sampled row ``i``'s typed values."""
    return picked.numbers[picked.starts[i] : picked.starts[i] + picked.widths[i]]


def _rows_with_texts(picked: _Picked, layouts: dict[int, typed.Layout]) -> list[int]:
    """The sampled rows typed with a category outside their layout (their texts are read apart)."""
    out = []
    for layout_id in np.unique(picked.layouts[picked.widths > 0]).tolist():
        layout = layouts.get(layout_id)
        if layout is None or not layout.categorical:
            continue
        for i in np.flatnonzero((picked.layouts == layout_id) & (picked.widths == layout.width)).tolist():
            if (_row(picked, i)[len(layout.numeric) :] == typed.OTHER).any():
                out.append(i)
    return out


def _fetch_texts(
    engine: Engine,
    summary: WindowSummary,
    log_ids: np.ndarray,
    places: np.ndarray,
    rows: list[int],
    picked: _Picked,
    layouts: dict[int, typed.Layout],
) -> None:
    """The texts of sampled rows holding a category outside their layout: their batches' whole typed copy
    (the row's line is the count of such rows before it)."""
    wanted = sorted({int(log_ids[i]) for i in rows})
    sql = (
        "SELECT p.id, p.size, p.layout, p.numbers, p.categories FROM prediction_batches p "
        "WHERE p.model_name = %(model_name)s AND p.id = ANY(%(ids)s::int8[])"
    )
    found = {
        int(r[0]): r[1:] for r in _pg_rows(engine, sql, {"model_name": summary.model_name, "ids": wanted})
    }
    for i in rows:
        size, layout_id, numbers, categories = found[int(log_ids[i])]
        picked.others[i] = _row_texts(
            layouts[int(layout_id)], bytes(numbers), categories, int(size), places[i]
        )


def _row_texts(
    layout: typed.Layout, numbers: bytes, categories: str | None, size: int, place: int
) -> list[Any]:
    """The categorical texts of row ``place`` of a typed batch (its ``{"v": [...]}`` line); every value None
    when the row holds none."""
    matrix = typed.numbers_matrix(numbers, size, layout.width)
    written = (matrix[:, len(layout.numeric) :] == typed.OTHER).any(axis=1)
    if not written[place] or not categories:
        return [None] * len(layout.categorical)
    line = (categories.split("\n"))[int(written[:place].sum())]
    values = orjson.loads(line).get("v")
    return list(values) if isinstance(values, list) else [None] * len(layout.categorical)


def _pick_whole(
    engine: Engine,
    summary: WindowSummary,
    log_ids: np.ndarray,
    places: np.ndarray,
    layouts: dict[int, typed.Layout],
    width: int | None,
) -> _Picked:
    """The sampled rows' pieces from their batches read whole (SQLite)."""
    picked = _Picked(log_ids.size, width)
    log = PredictionBatch
    batches: dict[int, Any] = {}
    wanted = np.unique(log_ids).tolist()
    for lo in range(0, len(wanted), 500):
        stmt = select(
            log.id, log.size, log.layout, log.numbers, log.categories, log.outputs, log.vectors, log.inputs
        ).where(log.model_name == summary.model_name, log.id.in_(wanted[lo : lo + 500]))
        with engine.connect() as conn:
            batches.update({int(r[0]): r for r in conn.execute(stmt)})
    rows: list[np.ndarray] = []
    start = 0
    for i, (batch_id, place) in enumerate(zip(log_ids.tolist(), places.tolist(), strict=True)):
        if batch_id not in batches:  # gone since the window was summarized
            continue
        _, size, layout_id, numbers, categories, outputs, vectors, inputs = batches[batch_id]
        numbers, outputs, vectors = as_bytes(numbers), as_bytes(outputs) or b"", as_bytes(vectors)
        picked.layouts[i] = layout_id or 0
        if numbers is not None and len(numbers) % (8 * int(size)) == 0:
            row_width = len(numbers) // (8 * int(size))
            rows.append(np.frombuffer(numbers, dtype="<f8")[place * row_width : (place + 1) * row_width])
            picked.starts[i], picked.widths[i] = start, row_width
            start += row_width
            layout = layouts.get(int(layout_id)) if layout_id is not None else None
            if layout is not None and (rows[-1][len(layout.numeric) :] == typed.OTHER).any():
                picked.others[i] = _row_texts(layout, numbers, categories, int(size), place)
        if len(outputs) == 8 * int(size):
            picked.outputs[i] = np.frombuffer(outputs, dtype="<f8")[place]
        if picked.vectors is not None and width and vectors is not None and len(vectors) == 8 * width * size:
            picked.vectors[i] = np.frombuffer(vectors, dtype="<f8").reshape(int(size), width)[place]
        if inputs is not None:
            picked.documents[i] = documents_of(inputs, int(size))[place]
    picked.numbers = np.concatenate(rows) if rows else np.empty(0)
    return picked


def _sample_answers(picked: _Picked, width: int | None) -> np.ndarray:
    """The sampled rows' answers: outputs ``[n]``, or vectors ``[n, width]`` (NaN where a row has none)."""
    if width and picked.vectors is not None:
        return picked.vectors
    return picked.outputs


def _sample_columns(
    picked: _Picked,
    layouts: dict[int, typed.Layout],
    numeric: Sequence[str],
    categorical: Sequence[str],
    asked: Sequence[str],
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The sampled rows' features: typed rows decoded by layout (one matrix per layout), the others from
    their documents, as :func:`decode_batches` decides (:func:`batch_kind`)."""
    nums = {name: np.full(picked.n, np.nan) for name in numeric}
    texts = {name: np.full(picked.n, None, dtype=object) for name in categorical}
    typed_rows = np.zeros(picked.n, dtype=bool)
    for layout_id in np.unique(picked.layouts[picked.widths > 0]).tolist():
        layout = layouts.get(layout_id)
        if layout is None:
            continue
        mine = (picked.layouts == layout_id) & (picked.widths == layout.width)
        if not holds_all(layout, asked):  # rows whose batch holds documents are read from them
            mine &= np.array([i not in picked.documents for i in range(picked.n)])
        rows = np.flatnonzero(mine)
        typed_rows[rows] = True
        matrix = picked.numbers[picked.starts[rows][:, None] + np.arange(layout.width)]
        _typed_values(layout, matrix, rows, [picked.others.get(i) for i in rows.tolist()], nums, texts)
    for i in np.flatnonzero(~typed_rows).tolist():
        doc = picked.documents.get(i)
        doc = doc if isinstance(doc, dict) else {}
        for name in numeric:
            nums[name][i] = numbers_of([doc], name)[0]
        for name in categorical:
            texts[name][i] = _text(doc.get(name))
    for values in texts.values():  # "" is missing, as the profile counts it
        values[values == ""] = None
    return nums, texts


def _typed_values(
    layout: typed.Layout,
    matrix: np.ndarray,
    rows: np.ndarray,
    others: list[list[Any] | None],
    nums: dict[str, np.ndarray],
    texts: dict[str, np.ndarray],
) -> None:
    """Typed rows' values into the sample's columns (a feature the layout lacks stays missing)."""
    for j, name in enumerate(layout.numeric):
        if name in nums:
            nums[name][rows] = matrix[:, j]
    for j, name in enumerate(layout.categorical):
        if name in texts:
            texts[name][rows] = _codes_to_text(layout, j, matrix[:, len(layout.numeric) + j], others)


def _text(value: Any) -> str | None:
    """A document's categorical value as the window reader counts it (its JSON text when not a string)."""
    return None if value is None else value if isinstance(value, str) else orjson.dumps(value).decode()


def _codes_to_text(
    layout: typed.Layout, j: int, codes: np.ndarray, others: list[list[Any] | None]
) -> np.ndarray:
    """Categorical ``j``'s codes as texts (the row's written text for a category outside the layout)."""
    lookup = np.empty(len(layout.categories[j]) + 1, dtype=object)
    lookup[: len(layout.categories[j])] = layout.categories[j]  # lookup[-1] (a missing value) stays None
    ints = codes.astype(np.int64)
    out = lookup[np.where(ints >= 0, ints, -1)]
    for k in np.flatnonzero(ints == typed.OTHER).tolist():
        written = others[k]
        out[k] = _text(written[j]) if written is not None and j < len(written) else None
    return out


_LABELS_SQL = """
SELECT s.ord, f.label
FROM unnest(%(ids)s::int8[], %(pos)s::int4[], %(ord)s::int4[]) AS s(id, pos, ord)
JOIN prediction_feedback f ON f.model_name = %(model_name)s AND f.log_id = s.id AND f.position = s.pos
WHERE f.status = %(status)s {extra}
"""


def _sample_labels(
    engine: Engine, summary: WindowSummary, log_ids: np.ndarray, places: np.ndarray
) -> np.ndarray:
    """The feedback's labels of the sampled (batch, place) pairs (NaN: none), filtered as the window's
    labels are (:func:`label_filters`)."""
    out = np.full(log_ids.size, np.nan)
    if not log_ids.size:
        return out
    if engine.dialect.name == "postgresql":
        extra, params = _label_extra(summary)
        params.update(
            ids=log_ids.tolist(),
            pos=places.tolist(),
            ord=list(range(log_ids.size)),
            model_name=summary.model_name,
            status=PredictionStatus.OK.value,
        )
        for i, label in _pg_rows(engine, _LABELS_SQL.replace("{extra}", extra), params):
            out[int(i)] = np.nan if label is None else float(label)
        return out
    fb = PredictionFeedback
    at = {(b, p): i for i, (b, p) in enumerate(zip(log_ids.tolist(), places.tolist(), strict=True))}
    wanted = np.unique(log_ids).tolist()
    for lo in range(0, len(wanted), 500):
        where = [
            *label_filters(summary, summary.first_id, summary.last_id),
            fb.log_id.in_(wanted[lo : lo + 500]),
        ]
        with engine.connect() as conn:
            for log_id, position, label in conn.execute(
                select(fb.log_id, fb.position, fb.label).where(*where)
            ):
                i = at.get((int(log_id or 0), int(position or 0)))
                if i is not None:
                    out[i] = np.nan if label is None else float(label)
    return out


def _label_extra(summary: WindowSummary) -> tuple[str, dict[str, Any]]:
    """:func:`label_filters`' version and time bounds as SQL text for :data:`_LABELS_SQL`."""
    extra, params = "", dict[str, Any]()
    if summary.spec.version is not None:
        extra += " AND f.model_version = %(version)s"
        params["version"] = summary.spec.version
    if summary.since is not None:
        extra += " AND f.logged_at >= %(since)s"
        params["since"] = summary.since
    if summary.spec.until is not None:
        extra += " AND f.logged_at < %(until)s"
        params["until"] = summary.spec.until
    if summary.start is not None and summary.end is not None:
        extra += " AND f.logged_at >= %(start)s AND f.logged_at <= %(end)s"
        params.update(start=summary.start, end=summary.end)
    return extra, params

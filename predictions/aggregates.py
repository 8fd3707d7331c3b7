"""Windows of the prediction log aggregated inside PostgreSQL: counts on the reference grids, not rows.

The monitors need only counts: per numeric feature the cells of its reference grid (count and sum of
the values per cell, missing values, values outside the contract's limits), per categorical feature the
count of each value, the prediction's cells, and for labelled rows the confusion counts at the
classification threshold and the prediction's cells per class. :func:`aggregate_window` computes them in
two ``GROUP BY`` queries next to the data (the log's rows; the window's labels from the feedback alone,
which carries its predictions' probability: :func:`_labels_filter`), so a window of any size transfers a
few kilobytes.

How one query counts everything: each log row is unpivoted (``unnest`` in the select list, a ``ProjectSet``)
into one tuple per measured item ``(f, x, k)``: ``f`` numbers the item (numeric features, then categorical
features, then the prediction; the labels' query has the prediction's values for positive and negative
labels and the confusion code), ``x`` is a float (a numeric feature's JSON number, the probability) and
``k`` a categorical feature's text (``inputs->>'name'``, exactly what the generic reader reads). The cell of
``x`` is one ``width_bucket`` over the *doubled grid* ``g_0, g_0+, g_1, g_1+, ...`` (``g+`` is the next
float above ``g``): the number of thresholds ``<= x`` is then the cell index of :mod:`monitors.binning`
directly (``(-inf, g_0)`` is 0, the atom ``{g_j}`` is ``2j+1``, ``(g_j, g_{j+1})`` is ``2j+2``). ``GROUP BY
f, cell, k`` with ``count(*)``, ``sum(x)`` and the count outside the limits. PostgreSQL runs it as a
parallel aggregate (partial hash aggregates in the workers).

Values equal the generic reader's (:mod:`predictions.windows`) exactly: a JSON number is converted by
PostgreSQL (``float8``, correctly rounded like Python's ``float``); JSON ``null`` or an absent key is
missing; any other JSON value in a numeric feature (text, a boolean: a row that bypassed the contract)
gets cell ``-1`` and is then read by a second query, grouped by its text, and converted in Python exactly
as the generic reader converts it (``"1.5"`` counts as 1.5, ``"abc"`` as missing). A JSON number beyond
the range of a float (PostgreSQL refuses the cast) makes the window fall back to the generic reader.

Rows are still needed by two consumers, which the monitors read beside the aggregate:
:func:`labelled_rows` streams the labelled rows' probability and label in ``id`` order (the order-aware
error-stream detector), and :func:`sample_chunks` reads a systematic sample of rows (the PCA error).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import Engine

from predictions.models import PredictionLog, PredictionStatus
from predictions.windows import (
    CHUNK_ROWS,
    Chunk,
    WindowSummary,
    _Bounds,
    _generic_chunks,
    _window_where,
)

SAMPLE_ROWS = 50_000
"""Rows read for what needs rows (the PCA reconstruction error): at most about this many, a systematic
sample of the window by ``id`` (every ``step``-th id); the whole window when it is no larger."""


@dataclass(frozen=True)
class Grid:
    """How to count one numeric column: the sorted distinct grid points and the contract's limits."""

    points: np.ndarray
    low: float | None = None
    high: float | None = None

    def thresholds(self) -> np.ndarray:
        """The doubled grid ``g_0, next(g_0), g_1, next(g_1), ...``: ``#thresholds <= x`` is x's cell."""
        g = np.asarray(self.points, dtype=np.float64)
        out = np.empty(2 * g.size, dtype=np.float64)
        out[0::2] = g
        out[1::2] = np.nextafter(g, np.inf)
        return out


@dataclass
class Cells:
    """One numeric column's counts on its grid (``2k + 1`` cells), as :mod:`monitors.binning` keeps them."""

    cells: np.ndarray  # int64
    sums: np.ndarray  # float64
    missing: int = 0
    outside: int = 0

    @classmethod
    def empty(cls, grid: Grid) -> Cells:
        size = 2 * len(grid.points) + 1
        return cls(cells=np.zeros(size, dtype=np.int64), sums=np.zeros(size))

    def add(self, values: np.ndarray, grid: Grid) -> None:
        """Count float values (NaN = missing) the way :func:`monitors.binning.count_on_grid` does."""
        x = np.asarray(values, dtype=np.float64)
        valid = x[~np.isnan(x)]
        self.missing += int(x.size - valid.size)
        if grid.low is not None:
            self.outside += int(np.sum(valid < grid.low))
        if grid.high is not None:
            self.outside += int(np.sum(valid > grid.high))
        cell = np.searchsorted(grid.thresholds(), valid, side="right")
        self.cells += np.bincount(cell, minlength=self.cells.size).astype(np.int64)
        self.sums += np.bincount(cell, weights=valid, minlength=self.sums.size)


@dataclass
class WindowAggregate:
    """Everything the drift report counts over a window, aggregated in the database."""

    rows: int = 0
    numeric: dict[str, Cells] = field(default_factory=dict)
    categorical: dict[str, Counter[str | None]] = field(default_factory=dict)
    prediction: Cells | None = None
    positive: np.ndarray | None = None  # prediction cells of rows labelled positive (label != 0)
    negative: np.ndarray | None = None  # ... labelled negative (label == 0)
    confusion: tuple[int, int, int, int] = (0, 0, 0, 0)  # true_pos, false_pos, false_neg, true_neg
    fallback: bool = False  # a JSON number beyond a float's range: counted from the generic reader's rows

    @property
    def labelled(self) -> int:
        return sum(self.confusion)


def _window_filter(
    summary: WindowSummary, *, table: str = "p", id_column: str = "id"
) -> tuple[str, dict[str, Any]]:
    """The WHERE clause of the window (on the log, alias ``p``; or on the copies of its columns that a
    label carries, ``table="fb", id_column="log_id"``) and its parameters."""
    params: dict[str, Any] = {
        "model_name": summary.model_name,
        "status": PredictionStatus.OK.value,
        "lo": summary.first_id,
        "hi": summary.last_id,
    }
    t = table
    sql = (
        f"{t}.model_name = %(model_name)s AND {t}.status = %(status)s "
        f"AND {t}.{id_column} BETWEEN %(lo)s AND %(hi)s"
    )
    if summary.spec.version is not None:
        sql += f" AND {t}.model_version = %(version)s"
        params["version"] = summary.spec.version
    if summary.since is not None:
        sql += f" AND {t}.logged_at >= %(since)s"
        params["since"] = summary.since
    return sql, params


def _labels_filter(summary: WindowSummary) -> tuple[str, dict[str, Any]]:
    """The WHERE clause of the window's labels on ``prediction_feedback`` alone (alias ``fb``).

    A label carries copies of its prediction's log row (``log_id``, ``status``, ``model_version``,
    ``logged_at``: migration 0015, filled by ``record_feedback``), so the window's filter applies to it
    as it stands: the same labels as a join with the window's log rows, without reading them. Within the
    window's time span too, which prunes the feedback partitions of other days (every window row, and so
    its label's ``logged_at``, lies in the span)."""
    sql, params = _window_filter(summary, table="fb", id_column="log_id")
    params.update(start=summary.start or "-infinity", end=summary.end or "infinity")
    return sql + " AND fb.logged_at BETWEEN %(start)s AND %(end)s", params


def _literal(text: str) -> str:
    """A SQL string literal (feature names are data, never spliced unquoted)."""
    return "'" + text.replace("'", "''") + "'"


def _limit(value: float | None, default: float) -> float:
    return default if value is None or math.isnan(value) else float(value)


def _aggregate_sql(*, numeric: Sequence[str], categorical: Sequence[str], where: str) -> tuple[str, int]:
    """The aggregate query and the item number of the prediction."""
    n, m = len(numeric), len(categorical)
    items = n + m + 1
    j = ", ".join(f"p.inputs->{_literal(name)}" for name in numeric) or "NULL"
    k = ", ".join(["NULL"] * n + [f"p.inputs->>{_literal(name)}" for name in categorical]) or "NULL"
    xs = ["NULL"] * (n + m) + ["nullif(p.probability, 'NaN')"]
    cases = " ".join(f"WHEN {i} THEN width_bucket(x, %(g{i})s::float8[])" for i in range(n))
    cases += f" WHEN {n + m} THEN width_bucket(x, %(gp)s::float8[])"
    # three ProjectSet levels: a subquery with set-returning functions is never flattened, so each value is
    # looked up in the document once, typed once and converted once (measured: faster than one level that
    # repeats them, although only the lowest level runs in the parallel workers)
    sql = f"""
SELECT f, cell, k, count(*), sum(x),
       count(*) FILTER (WHERE x < (%(lows)s::float8[])[f + 1] OR x > (%(highs)s::float8[])[f + 1])
FROM (
  SELECT f, k, x,
         CASE WHEN x IS NOT NULL THEN CASE f {cases} END WHEN t <> 'null' THEN -1 END AS cell
  FROM (
    SELECT f, k, t, unnest(ARRAY[CASE WHEN t = 'number' THEN j::float8 ELSE x0 END]) AS x
    FROM (
      SELECT f, j, k, x0, unnest(ARRAY[jsonb_typeof(j)]) AS t
      FROM (
        SELECT generate_series(0, {items - 1}) AS f,
               unnest(ARRAY[{j}]::jsonb[]) AS j,
               unnest(ARRAY[{k}]::text[]) AS k,
               unnest(ARRAY[{", ".join(xs)}]::float8[]) AS x0
        FROM prediction_log p
        WHERE {where}
      ) rows_
    ) typed_
  ) valued_
) cells_
GROUP BY f, cell, k
"""
    return sql, n + m


# the labelled rows' items: the prediction of a positive label (0), of a negative one (1), the confusion
# code (2: predicted positive + 2 * labelled positive), each on its grid
_LABEL_CELLS_SQL = """
SELECT f, width_bucket(x, CASE f WHEN 2 THEN '{1,2,3}'::float8[] ELSE %(gp)s::float8[] END), count(*)
FROM (
  SELECT unnest(ARRAY[0, 1, 2]) AS f,
         unnest(ARRAY[
           CASE WHEN {ok} AND fb.label <> 0 THEN {prob} END,
           CASE WHEN {ok} AND fb.label = 0 THEN {prob} END,
           CASE WHEN {ok} THEN (({prob} >= %(threshold)s)::int + 2 * (fb.label <> 0)::int)::float8 END
         ]::float8[]) AS x
  FROM prediction_feedback fb
  WHERE {where}
) labels_
WHERE x IS NOT NULL
GROUP BY 1, 2
"""


def _label_cells_sql(where: str) -> str:
    """The per-class prediction cells and confusion codes of the window's labels, from the feedback alone
    (each label carries its prediction's probability: see :func:`_labels_filter`)."""
    prob = "nullif(fb.probability, 'NaN')"
    ok = f"({prob} IS NOT NULL AND fb.label IS NOT NULL AND fb.label <> 'NaN')"
    return _LABEL_CELLS_SQL.replace("{ok}", ok).replace("{prob}", prob).replace("{where}", where)


def _odd_sql(numeric: Sequence[str], where: str) -> str:
    """Values of the numeric features that are neither a JSON number nor null, with their counts."""
    j = ", ".join(f"p.inputs->{_literal(name)}" for name in numeric)
    return f"""
SELECT f, j #>> '{{}}', count(*)
FROM (
  SELECT generate_series(0, {len(numeric) - 1}) AS f, unnest(ARRAY[{j}]::jsonb[]) AS j
  FROM prediction_log p WHERE {where}
) rows_
WHERE jsonb_typeof(j) NOT IN ('number', 'null')
GROUP BY 1, 2
"""


def _run(engine: Engine, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """One read-only query on a raw psycopg connection, JIT off (compiling the wide expression costs more
    than it saves) and the partial aggregates pushed into the parallel workers."""
    raw = engine.raw_connection()
    try:
        pg: Any = raw.driver_connection
        with pg.cursor() as cur:
            cur.execute("SET LOCAL jit = off")
            cur.execute("SET LOCAL parallel_tuple_cost = 1")
            cur.execute(sql, params)
            rows = list(cur.fetchall())
        raw.commit()
    except BaseException:
        raw.rollback()
        raise
    finally:
        raw.close()
    return rows


def _as_value(text: str | None) -> float:
    """One raw text as the generic reader converts it (a number, else NaN)."""
    try:
        return float(text) if text is not None and text != "" else math.nan
    except (TypeError, ValueError):
        return math.nan


def aggregate_window(
    *,
    engine: Engine,
    summary: WindowSummary,
    numeric: Mapping[str, Grid],
    categorical: Sequence[str],
    prediction: Grid | None,
    threshold: float = 0.5,
    labels: bool = True,
) -> WindowAggregate:
    """Count a summarized window on the given grids inside PostgreSQL (equal to the generic reader's rows
    counted in Python). ``labels``: also the confusion counts and per-class prediction cells."""
    import psycopg

    if engine.dialect.name != "postgresql":
        raise ValueError("the aggregate reader needs PostgreSQL")
    names = list(numeric)
    where, params = _window_filter(summary)
    sql, p_item = _aggregate_sql(numeric=names, categorical=categorical, where=where)
    pgrid = prediction or Grid(points=np.array([], dtype=np.float64))
    lows = [_limit(numeric[name].low, -math.inf) for name in names] + [-math.inf] * (len(categorical) + 1)
    highs = [_limit(numeric[name].high, math.inf) for name in names] + [math.inf] * (len(categorical) + 1)
    params.update({f"g{i}": numeric[name].thresholds().tolist() for i, name in enumerate(names)})
    params.update(gp=pgrid.thresholds().tolist(), lows=lows, highs=highs)
    try:
        rows = _run(engine, sql, params)
    except psycopg.errors.NumericValueOutOfRange:
        return _from_rows(
            engine=engine,
            summary=summary,
            numeric=numeric,
            categorical=categorical,
            prediction=prediction,
            threshold=threshold,
            labels=labels,
        )
    out = WindowAggregate(
        numeric={name: Cells.empty(numeric[name]) for name in names},
        categorical={name: Counter() for name in categorical},
        prediction=Cells.empty(pgrid) if prediction is not None else None,
    )
    odd = False
    counted = np.zeros(len(names), dtype=np.int64)
    for f, cell, key, count, total, outside in rows:
        f, count = int(f), int(count)
        if f < len(names):
            cells = out.numeric[names[f]]
            if cell is None:
                continue  # missing: the rest of the window
            if cell < 0:
                odd = True
                continue
            cells.cells[cell] += count
            cells.sums[cell] += total
            cells.outside += int(outside)
            counted[f] += count
        elif f < p_item:
            out.categorical[categorical[f - len(names)]][key] += count
        else:
            out.rows += count
            if out.prediction is not None:
                if cell is None:
                    out.prediction.missing += count
                else:
                    out.prediction.cells[cell] += count
                    out.prediction.sums[cell] += total
    if odd:
        for f, text, count in _run(engine, _odd_sql(names, where), params):
            name = names[int(f)]
            value = np.full(int(count), _as_value(text))
            before = out.numeric[name].cells.sum()
            out.numeric[name].add(value, numeric[name])
            counted[int(f)] += int(out.numeric[name].cells.sum() - before)
    for i, name in enumerate(names):
        out.numeric[name].missing = out.rows - int(counted[i])
    if labels:
        # from the labels alone, not joined per log row above: see _labels_filter
        pos, neg = Cells.empty(pgrid), Cells.empty(pgrid)
        confusion = np.zeros(4, dtype=np.int64)
        label_where, label_params = _labels_filter(summary)
        label_params.update(gp=params["gp"], threshold=threshold)
        for f, cell, count in _run(engine, _label_cells_sql(label_where), label_params):
            (pos.cells, neg.cells, confusion)[int(f)][int(cell)] += int(count)
        out.positive, out.negative = pos.cells, neg.cells
        # code = predicted positive + 2 * labelled positive: tn 0, fp 1, fn 2, tp 3
        out.confusion = (int(confusion[3]), int(confusion[1]), int(confusion[2]), int(confusion[0]))
    return out


def _from_rows(
    *,
    engine: Engine,
    summary: WindowSummary,
    numeric: Mapping[str, Grid],
    categorical: Sequence[str],
    prediction: Grid | None,
    threshold: float,
    labels: bool,
) -> WindowAggregate:
    """The same counts from the generic reader's rows (a value PostgreSQL cannot convert)."""
    pgrid = prediction or Grid(points=np.array([], dtype=np.float64))
    out = WindowAggregate(
        numeric={name: Cells.empty(grid) for name, grid in numeric.items()},
        categorical={name: Counter() for name in categorical},
        prediction=Cells.empty(pgrid) if prediction is not None else None,
        fallback=True,
    )
    pos, neg = Cells.empty(pgrid), Cells.empty(pgrid)
    confusion = [0, 0, 0, 0]
    for chunk in _rows(engine=engine, summary=summary, numeric=list(numeric), categorical=categorical):
        out.rows += chunk.rows
        for name, grid in numeric.items():
            out.numeric[name].add(chunk.columns[name], grid)
        for name in categorical:
            out.categorical[name].update(chunk.columns[name].tolist())
        if out.prediction is not None:
            out.prediction.add(chunk.predictions, pgrid)
        if labels:
            p, y = chunk.predictions, chunk.labels
            ok = ~np.isnan(p) & ~np.isnan(y)
            p, truth = p[ok], y[ok].astype(bool)
            pred = p >= threshold
            pos.add(p[truth], pgrid)
            neg.add(p[~truth], pgrid)
            for i, hit in enumerate((pred & truth, pred & ~truth, ~pred & truth, ~pred & ~truth)):
                confusion[i] += int(np.sum(hit))
    if labels:
        out.positive, out.negative = pos.cells, neg.cells
        out.confusion = (confusion[0], confusion[1], confusion[2], confusion[3])
    return out


def _rows(
    *,
    engine: Engine,
    summary: WindowSummary,
    numeric: Sequence[str],
    categorical: Sequence[str],
    step: int = 1,
    chunk_rows: int = CHUNK_ROWS,
) -> Iterator[Chunk]:
    bounds = _Bounds(low=summary.first_id, high=summary.last_id, since=summary.since)
    where = _window_where(model_name=summary.model_name, spec=summary.spec, bounds=bounds)
    if step > 1:
        where = where & (PredictionLog.id % step == 0)
    return _generic_chunks(
        engine=engine,
        where=where,
        numeric=numeric,
        categorical=categorical,
        chunk_rows=chunk_rows,
        span=(summary.start, summary.end),
    )


def sample_step(rows: int, sample_rows: int = SAMPLE_ROWS) -> int:
    """Every how many ids a sample of about ``sample_rows`` of a ``rows``-row window takes one."""
    return max(1, -(-rows // max(sample_rows, 1)))


def sample_chunks(
    *,
    engine: Engine,
    summary: WindowSummary,
    numeric: Sequence[str],
    sample_rows: int = SAMPLE_ROWS,
    chunk_rows: int = CHUNK_ROWS,
) -> Iterator[Chunk]:
    """A systematic sample of the window's rows (ids divisible by :func:`sample_step`), in id order."""
    step = sample_step(summary.rows, sample_rows)
    return _rows(
        engine=engine, summary=summary, numeric=numeric, categorical=(), step=step, chunk_rows=chunk_rows
    )


# the window's labels from the feedback alone (see _labels_filter), in log-id order: an index-only scan of
# the feedback's (model_name, log_id) index, which includes every column read here (migration 0015)
_LABELLED_SQL = """
SELECT count(*), string_agg(pp, ''::bytea), string_agg(y, ''::bytea)
FROM (
    SELECT float8send(coalesce(fb.probability, 'NaN'::float8)) AS pp,
        float8send(coalesce(fb.label, 'NaN'::float8)) AS y
    FROM prediction_feedback fb
    WHERE {where}
    ORDER BY fb.log_id
) AS rows
"""


def labelled_arrays(*, engine: Engine, summary: WindowSummary) -> tuple[np.ndarray, np.ndarray]:
    """The labelled rows' probabilities and labels in id order (NaN: none), as :func:`labelled_rows` reads
    them, in one plain query returning two binary values (16 bytes a labelled row in memory).

    Read from ``prediction_feedback`` alone: each label carries its prediction's log id, probability,
    version and status (migration 0015), so the window's labels are a range of the feedback's
    ``(model_name, log_id)`` index, read without visiting a table. The join with the log it replaces
    scanned the window's whole log (measured on a 1M-row window with 100k labels: see docs/monitoring.md).
    JIT is off for it (compiling costs more than this query takes)."""
    where, params = _labels_filter(summary)
    sql = _LABELLED_SQL.replace("{where}", where)
    raw = engine.raw_connection()
    try:
        pg: Any = raw.driver_connection
        with pg.cursor() as cur:
            cur.execute("SET LOCAL jit = off")
            cur.execute(sql, params, binary=True)
            n, probs, labels = cur.fetchone()
        raw.commit()
    finally:
        raw.close()
    p = np.frombuffer(bytes(probs or b""), dtype=">f8").astype(np.float64)
    y = np.frombuffer(bytes(labels or b""), dtype=">f8").astype(np.float64)
    if p.size != int(n) or y.size != int(n):
        raise ValueError(f"{p.size} probabilities and {y.size} labels for {n} labelled rows")
    return p, y


def labelled_rows(
    *, engine: Engine, summary: WindowSummary, chunk_rows: int = CHUNK_ROWS
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The labelled rows' probabilities and labels in id order, ``chunk_rows`` at a time (binary floats;
    from the feedback alone, as :func:`labelled_arrays`)."""
    where, params = _labels_filter(summary)
    sql = f"SELECT fb.probability, fb.label FROM prediction_feedback fb WHERE {where} ORDER BY fb.log_id"
    raw = engine.raw_connection()
    try:
        pg: Any = raw.driver_connection
        with pg.cursor(name="dw_labelled") as cur:
            cur.execute(sql, params, binary=True)
            while part := cur.fetchmany(chunk_rows):
                p, y = zip(*part, strict=True)
                yield np.array(p, dtype=np.float64), np.array(y, dtype=np.float64)  # NULL -> NaN
        raw.commit()
    finally:
        raw.close()

"""Prediction log write benchmark: what a logged prediction costs PostgreSQL, the writer, the clock, the disk.

Run: ``.venv/bin/python bench/log_write.py [--seconds 2] [--batches 1 32 256] [--requests-per-write 64]
[--shapes serve wide] [--variants current,float8-arrays,...] [--legacy] [--size-predictions 10000]
[--detail] [--request-ids none|caller] [--repeat 1]
[--admin-url postgresql+psycopg://postgres@127.0.0.1:5432/postgres]``.

A scratch database (dropped at the end) is migrated to head; each variant gets its own schema (a variant
may change the table: drop an index, change a column's type). Requests are made as the serving flow makes
them (``service/serving/flows.py``: a :class:`predictions.pending.RequestRows` of the request's row
documents, outputs and UUIDv7 prediction ids; ``--request-ids``: ``none``, the default, as a request without
``X-Request-Id`` is logged, with a NULL request id, or ``caller``, each with its caller's 32-hex id) in one of
two shapes: ``serve``, the serving bench's rows (``training.cluster.datagen``: 7 numeric and 3 categorical
features), and ``wide`` (20 numeric, 5 categorical). Each
write is what the writer thread does with what it dequeued: :func:`predictions.pending.build` (the
``prediction_batches`` rows: one per request, the typed copies of all its requests encoded together) and one
insert. The cells (``rows/req x req/write``):

- ``--batches``: each write is ONE request of that many rows (``1x1``, ``32x1``, ``256x1``);
- ``--requests-per-write``: each write is that many 1-row requests (``1x64``: the writer under load, many
  small requests queued between two flushes; one batch row per request).

Writes follow each other for ``--seconds`` per cell; the figures are per PREDICTION:

- ``build us``: CPU microseconds of this process building the batch rows (``build``: typed copies, hex);
- ``client us``: CPU microseconds of this process for the whole write (``build us`` included, then the
  payload and the driver's work; not the bench's making of the requests and their fresh prediction ids: that
  is the request path's work, not the writer's);
- ``pg us``: CPU microseconds of the PostgreSQL backend that ran the inserts (``utime + stime`` of
  ``/proc/<pg_backend_pid()>/stat`` before and after; the server runs on this machine);
- ``wall us``: elapsed time (including the commit's WAL flush; ``synchronous_commit`` as the server has it);
- ``wal B``: WAL bytes per prediction (``pg_current_wal_lsn()`` before and after: server-wide, so other work
  on the same server inflates it);
- ``B/pred``: bytes STORED per prediction: the growth of ``pg_total_relation_size`` summed over the log's
  partitions (``pg_partition_tree``: heap, TOAST, free space and visibility maps, every index) from the
  emptied table (``TRUNCATE`` before each cell) to the end of the cell, divided by the predictions written;
  beside it its parts: ``heap`` (main fork), ``toast`` (TOAST with its index, free space and visibility
  maps) and ``index``. A cell that wrote fewer than ``--size-predictions`` predictions in its time goes on
  writing (untimed) until it has, so that page granularity (8 kB per relation) stays a few bytes. With
  ``--detail``, each cell's bytes per prediction by index and by column (``pg_column_size``: as stored,
  compressed or not, inline or in TOAST; without the tuple header and the line pointer) are printed below.

Variants (``--variants``): ``current`` is ``build`` + :func:`predictions.service.write_log_rows` on the schema
at head; the others are written here to price one change each (see ``VARIANTS``): ``float8-arrays`` stores
``numbers`` and ``outputs`` as ``float8[]`` (typed arrays, NaN as NULL elements) instead of the compact
little-endian bytea. ``--legacy`` adds ``legacy``: the layout before migration 0018 (revision
``0017_log_outputs``: ``prediction_log``, one row per prediction, its JSONB document always, its own typed
copy), written by the insert of that code (``predictions/service.py`` before 0018, in git), and prints old vs
new side by side at the end (the target: bytes per logged prediction at most half the legacy layout's).
The machine is shared: run it more than once and read the figures beside ``uptime``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import chain
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import orjson  # noqa: E402
from sqlalchemy import Engine, create_engine, text  # noqa: E402

from core import migrate  # noqa: E402
from core.database import make_engine  # noqa: E402
from predictions import service  # noqa: E402
from predictions.batch import LogBatch  # noqa: E402
from predictions.pending import RequestRows, build  # noqa: E402
from predictions.service import new_prediction_ids, write_log_rows  # noqa: E402
from predictions.typed import Layout, encode_columns, make_layout  # noqa: E402

TICK_US = 1_000_000 / os.sysconf("SC_CLK_TCK")
LEGACY_REVISION = "0017_log_outputs"


Shape = tuple[list[str], list[str], list[list[str]], list[dict[str, Any]]]
"""Numeric names, categorical names, each categorical's known categories (the contract's), row documents."""


def serve_rows(n: int) -> Shape:
    """The serving bench's request rows (bench/serve.py ``request_rows``): 7 numeric, 3 categorical (every
    category known to the contract, as the model trained on them)."""
    from training.cluster.datagen import HOME, PURPOSE, REGION, generate

    columns = generate(n, seed=3)
    columns.pop("default")
    categorical = [k for k, v in columns.items() if v.dtype == object]
    numeric = [k for k in columns if k not in categorical]
    rows = []
    for values in zip(*columns.values(), strict=True):
        row = {}
        for k, v in zip(columns, values, strict=True):
            v = v.item() if hasattr(v, "item") else v
            row[k] = None if isinstance(v, float) and v != v else v
        rows.append(row)
    known = {"home_ownership": HOME, "loan_purpose": PURPOSE, "region": REGION}
    return numeric, categorical, [list(known[c]) for c in categorical], rows


def wide_rows(n: int) -> Shape:
    """25 features: 20 numeric (floats, some ints, a null now and then), 5 categorical (one value in six,
    ``zz``, unknown to the contract: stored as text)."""
    import random

    rnd = random.Random(7)
    numeric = [f"x{i:02d}" for i in range(20)]
    categorical = [f"c{i}" for i in range(5)]
    rows = []
    for _ in range(n):
        row: dict[str, Any] = {}
        for i, name in enumerate(numeric):
            if rnd.random() < 0.02:
                row[name] = None
            elif i % 4 == 0:
                row[name] = rnd.randrange(0, 1000)
            else:
                row[name] = round(rnd.gauss(100, 30), 4)
        for name in categorical:
            row[name] = rnd.choice(["a", "b", "c", "d", "e", "zz"])
        rows.append(row)
    return numeric, categorical, [["a", "b", "c", "d", "e"]] * len(categorical), rows


SHAPES: dict[str, Callable[[int], Shape]] = {
    "serve": serve_rows,
    "wide": wide_rows,
}


@dataclass(frozen=True)
class Requests:
    """A shape's row documents and layout, cut into requests as a write asks (fresh ids every time)."""

    layout: Layout
    docs: list[dict[str, Any]]
    outputs: list[float]
    caller_ids: bool = False  # each request with the caller's X-Request-Id (else none, as most callers)

    def make(self, pos: int, rows: int, count: int) -> tuple[list[RequestRows], int]:
        """``count`` requests of ``rows`` rows from document ``pos`` on (wrapping around); the next pos."""
        out: list[RequestRows] = []
        for _ in range(count):
            if pos + rows > len(self.docs):
                pos = 0
            docs = self.docs[pos : pos + rows]
            out.append(
                RequestRows(
                    model_name="bench",
                    model_version=1,
                    logged_at=datetime.now(UTC),  # each request its own time, as served
                    request_id=uuid.uuid4().hex if self.caller_ids else None,  # None: the log keeps NULL
                    protocol="v2",
                    latency_ms=1.25,
                    status="ok",
                    ids=new_prediction_ids(rows),
                    inputs=docs,
                    values=self.outputs[pos : pos + rows],
                    flags=[None] * rows,
                    layout=self.layout,
                )
            )
            pos += rows
        return out, pos


def requests_of(shape: str, n: int, caller_ids: bool = False) -> Requests:
    numeric, categorical, cats, docs = SHAPES[shape](n)
    outputs = [round(0.05 + 0.9 * ((i * 7919) % 1000) / 1000, 6) for i in range(n)]
    return Requests(make_layout(numeric, categorical, cats), docs, outputs, caller_ids)


# -- variants ---------------------------------------------------------------------------------------------
Builder = Callable[[Sequence[RequestRows]], Any]
Writer = Callable[[Engine, Any], object]


@dataclass(frozen=True)
class Variant:
    """A way of building and writing a write's rows, on a schema migrated to ``revision`` (None: head) and
    changed by ``ddl``; ``table``: the log table whose size is measured."""

    name: str
    about: str
    ddl: tuple[str, ...] = ()
    build: Builder | None = None  # None: predictions.pending.build, flattened
    write: Writer | None = None  # None: write_log_rows
    revision: str | None = None
    table: str = "prediction_batches"


def build_batches(requests: Sequence[RequestRows]) -> list[LogBatch]:
    """What the writer thread makes of the requests it dequeued: their batch rows, in order."""
    return list(chain.from_iterable(build(requests)))


def _write_current(engine: Engine, rows: list[LogBatch]) -> object:
    return write_log_rows(engine=engine, rows=rows, idempotent=False)


@contextlib.contextmanager
def _autocommit(engine: Engine) -> Iterator[Any]:
    raw = engine.raw_connection()
    pg: Any = raw.driver_connection
    pg.autocommit = True
    try:
        yield pg
    finally:
        pg.autocommit = False
        raw.close()


def _layouts_once(engine: Engine, pg: Any, layouts: set[int]) -> None:
    """Record the layouts of ``layouts`` (as write_log_rows does once per layout and process)."""
    from predictions.typed import KNOWN

    done = _LAYOUTS_DONE.setdefault(id(engine), set())
    for layout in layouts - done:
        pg.execute(service.PG_LAYOUT, (layout, *KNOWN[layout].as_json()))
        done.add(layout)


_LAYOUTS_DONE: dict[int, set[int]] = {}


def _insert_sql(sql: str) -> Writer:
    """A writer of the batch rows as write_log_rows' one JSON document, through ``sql``."""

    def write(engine: Engine, rows: list[LogBatch]) -> None:
        with _autocommit(engine) as pg:
            _layouts_once(engine, pg, {b.layout for b in rows if b.layout is not None})
            pg.execute(sql, (service.batch_json(rows),))

    return write


JSON_ARRAY = (
    service.PG_INSERT.replace("jsonb_array_elements(%s::jsonb)", "json_array_elements(%s::json)")
    .replace("nullif(e->16, 'null'::jsonb)", "nullif((e->16)::jsonb, 'null'::jsonb)")
    .replace("nullif(e->17, 'null'::jsonb)", "nullif((e->17)::jsonb, 'null'::jsonb)")
)
assert JSON_ARRAY.count("json_array_elements") == 1 and JSON_ARRAY.count("(e->1") == 2, JSON_ARRAY

# float8[] columns: the payload carries numbers and outputs as JSON arrays (NaN as null: a NULL element),
# turned into array literals ('[1.5, null]' -> '{1.5, null}') and parsed by float8[]'s input function
FLOAT8_ARRAYS = service.PG_INSERT.replace(
    "decode(e->>12, 'hex')", "translate(e->>12, '[]', '{}')::float8[]"
).replace("decode(e->>14, 'hex')", "translate(e->>14, '[]', '{}')::float8[]")
assert FLOAT8_ARRAYS.count("::float8[]") == 2, FLOAT8_ARRAYS


def _float_arrays(rows: Sequence[RequestRows]) -> list[tuple[Any, ...]]:
    """The batch rows with ``numbers`` and ``outputs`` as float64 arrays (orjson writes NaN as null)."""
    out = []
    for b in build_batches(rows):
        numbers = None if b.numbers is None else np.frombuffer(bytes.fromhex(b.numbers), dtype="<f8")
        outputs = np.frombuffer(bytes.fromhex(b.outputs), dtype="<f8")
        out.append((*b[:12], numbers, b.categories, outputs, *b[15:]))
    return out


def _write_float_arrays(engine: Engine, rows: list[tuple[Any, ...]]) -> None:
    payload = orjson.dumps(rows, option=orjson.OPT_SERIALIZE_NUMPY).decode()
    with _autocommit(engine) as pg:
        _layouts_once(engine, pg, {r[11] for r in rows if r[11] is not None})
        pg.execute(FLOAT8_ARRAYS, (payload,))


# -- the layout before migration 0018 (one row per prediction; predictions/service.py at 0017) -------------
LEGACY_COLUMNS = (
    "prediction_id, request_id, model_name, model_version, logged_at, inputs, probability, flags, "
    "latency_ms, status, protocol, layout, numbers, categories, outputs"
)
LEGACY_INSERT = (
    f"INSERT INTO prediction_log ({LEGACY_COLUMNS}) "
    "SELECT e->>0, e->>1, e->>2, (e->>3)::int, (e->>4)::timestamptz, e->5, (e->>6)::float8, "
    "nullif(e->7, 'null'::jsonb), (e->>8)::float8, e->>9, e->>10, "
    "(e->>11)::int8, decode(e->>12, 'hex'), e->>13, nullif(e->14, 'null'::jsonb) "
    "FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS t(e, n) ORDER BY n"
)


def legacy_rows(requests: Sequence[RequestRows]) -> list[tuple[Any, ...]]:
    """The old writer thread's rows (predictions/pending.py at 0017): one tuple per prediction, its document
    and its own slice of the typed copy (the requests of one layout encoded in one pass, as there)."""
    by_layout: dict[int, list[RequestRows]] = {}
    for r in requests:
        if r.layout is not None:
            by_layout.setdefault(r.layout.id, []).append(r)
    per_row: dict[int, list[tuple[str | None, str | None]]] = {}
    for group in by_layout.values():
        layout = group[0].layout
        assert layout is not None
        names = (*layout.numeric, *layout.categorical)
        total = sum(len(r) for r in group)
        columns = {name: list(chain.from_iterable(r.feature(name) for r in group)) for name in names}
        encoded = encode_columns(layout, columns, total)
        hexed = encoded.data.hex() if encoded is not None else ""
        step = 16 * layout.width  # hex digits per row
        start = 0
        for r in group:
            per_row[id(r)] = [
                (hexed[i * step : (i + 1) * step], encoded.others[i]) if encoded is not None else (None, None)
                for i in range(start, start + len(r))
            ]
            start += len(r)
    out: list[tuple[Any, ...]] = []
    for r in requests:
        layout_id = r.layout.id if r.layout is not None else None
        typed = per_row.get(id(r)) or [(None, None)] * len(r)
        vectors = r.outputs if r.outputs is not None else [None] * len(r)
        rid = (
            r.request_id or uuid.uuid4().hex
        )  # the layout kept the id the server made up for a caller's none
        out += [
            (
                pid,
                rid,
                r.model_name,
                r.model_version,
                r.logged_at,
                doc,
                value,
                flags,
                r.latency_ms,
                r.status,
                r.protocol,
                layout_id if numbers is not None else None,
                numbers,
                categories,
                vector,
            )
            for pid, doc, value, flags, (numbers, categories), vector in zip(
                r.ids, r.inputs, r.values, r.flags, typed, vectors, strict=True
            )
        ]
    return out


def _write_legacy(engine: Engine, rows: list[tuple[Any, ...]]) -> None:
    payload = orjson.dumps(rows).decode()
    with _autocommit(engine) as pg:
        _layouts_once(engine, pg, {r[11] for r in rows if r[11] is not None})
        pg.execute(LEGACY_INSERT, (payload,))


# every key and index of the log, whatever their names
_DROP_ALL_INDEXES = """
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT conname FROM pg_constraint
             WHERE conrelid = 'prediction_batches'::regclass AND contype IN ('p', 'u') LOOP
        EXECUTE format('ALTER TABLE prediction_batches DROP CONSTRAINT %I', r.conname);
    END LOOP;
    FOR r IN SELECT indexrelid::regclass::text AS name FROM pg_index
             WHERE indrelid = 'prediction_batches'::regclass LOOP
        EXECUTE format('DROP INDEX %s', r.name);
    END LOOP;
END $$
"""

VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant(
            "current",
            "build + write_log_rows on the schema at head (prediction_batches: one row per request, numbers"
            " and outputs as little-endian float64 bytea; the write as one JSON array, INSERT ... SELECT FROM"
            " jsonb_array_elements)",
        ),
        Variant(
            "float8-arrays",
            "numbers and outputs as float8[] (typed arrays; NaN as NULL elements) instead of bytea: the"
            " payload carries JSON arrays, parsed by float8[]'s input (its build also turns the hex back"
            " into floats: a few tenths of a us per prediction more than a writer making arrays directly)",
            (
                "ALTER TABLE prediction_batches ALTER COLUMN numbers TYPE float8[] USING NULL",
                "ALTER TABLE prediction_batches ALTER COLUMN outputs TYPE float8[] USING NULL",
            ),
            _float_arrays,
            _write_float_arrays,
        ),
        Variant(
            "lz4",
            "as current, numbers, outputs, categories and inputs compressed with lz4 instead of pglz (values"
            " over the TOAST threshold, ~2 kB: requests of about 25 rows and more)",
            tuple(
                f"ALTER TABLE prediction_batches ALTER COLUMN {c} SET COMPRESSION lz4"
                for c in ("numbers", "outputs", "categories", "inputs")
            ),
        ),
        Variant(
            "no-time-ix",
            "without the (model_name, logged_at) index",
            ("DROP INDEX ix_prediction_batches_model_name_logged_at",),
        ),
        Variant(
            "no-ix", "no key or index at all (the floor: heap, TOAST and WAL only)", (_DROP_ALL_INDEXES,)
        ),
        Variant(
            "json-array",
            "the write unpacked by json_array_elements instead of jsonb_",
            (),
            None,
            _insert_sql(JSON_ARRAY),
        ),
    )
}
LEGACY = Variant(
    "legacy",
    f"the layout before migration 0018 (revision {LEGACY_REVISION}: prediction_log, one row per prediction "
    "with its JSONB document and its typed copy), written by the insert of that code",
    (),
    legacy_rows,
    _write_legacy,
    LEGACY_REVISION,
    "prediction_log",
)


# -- measuring --------------------------------------------------------------------------------------------
def backend_cpu_us(pid: int) -> float:
    """utime + stime of a process, in microseconds (fields 14 and 15 of /proc/<pid>/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) * TICK_US


SIZE_SQL = """
SELECT coalesce(sum(pg_relation_size(relid, 'main')), 0), coalesce(sum(pg_table_size(relid)), 0),
       coalesce(sum(pg_indexes_size(relid)), 0), coalesce(sum(pg_total_relation_size(relid)), 0)
FROM pg_partition_tree(%s::regclass) WHERE isleaf
"""


# each index of the log (a partitioned index: summed over its partitions' indexes)
INDEX_SQL = """
SELECT i.indexrelid::regclass::text,
       (SELECT coalesce(sum(pg_relation_size(relid)), 0) FROM pg_partition_tree(i.indexrelid) WHERE isleaf)
FROM pg_index i WHERE i.indrelid = %s::regclass ORDER BY 1
"""


def stored_bytes(engine: Engine, table: str) -> np.ndarray:
    """The log table's bytes over its partitions: heap (main fork), TOAST + maps, indexes, total."""
    with _autocommit(engine) as pg:
        heap, whole, indexes, total = pg.execute(SIZE_SQL, (table,)).fetchone()
    return np.array([heap, whole - heap, indexes, total], dtype=np.float64)


def index_bytes(engine: Engine, table: str) -> dict[str, float]:
    """Bytes of each index of the log table."""
    with _autocommit(engine) as pg:
        return {name: float(size) for name, size in pg.execute(INDEX_SQL, (table,)).fetchall()}


def column_bytes(engine: Engine, table: str) -> dict[str, float]:
    """Each column's stored bytes per prediction (``pg_column_size``: after compression, inline or TOAST)."""
    with _autocommit(engine) as pg:
        names = [
            r[0]
            for r in pg.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
                "AND NOT attisdropped ORDER BY attnum",
                (table,),
            ).fetchall()
        ]
        count = "sum(size)" if table == "prediction_batches" else "count(*)"
        sums = ", ".join(f'coalesce(sum(pg_column_size("{n}")), 0)' for n in names)
        row = pg.execute(f"SELECT {count}, {sums} FROM {table}").fetchone()
    n = max(int(row[0] or 0), 1)
    return {name: float(v) / n for name, v in zip(names, row[1:], strict=True)}


@dataclass
class Figures:
    predictions: int
    build_us: float
    client_us: float
    pg_us: float
    wall_us: float
    wal_bytes: float
    stored: np.ndarray  # bytes per prediction: heap, toast, index, total
    indexes: dict[str, float]  # bytes per prediction of each index
    columns: dict[str, float]  # stored bytes per prediction of each column (with --detail)


@dataclass(frozen=True)
class Cell:
    rows: int  # per request
    requests: int  # per write

    @property
    def label(self) -> str:
        return f"{self.rows}x{self.requests}"


def measure(
    engine: Engine,
    variant: Variant,
    source: Requests,
    cell: Cell,
    seconds: float,
    size_predictions: int,
    detail: bool = False,
) -> Figures:
    """Write ``cell``'s writes (fresh requests each) for ``seconds`` on an emptied table; per-prediction
    figures (the stored bytes after topping up to ``size_predictions`` predictions, untimed)."""
    make = variant.build or build_batches
    write = variant.write or _write_current
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {variant.table}"))
    size0 = stored_bytes(engine, variant.table)
    indexes0 = index_bytes(engine, variant.table)
    raw = engine.raw_connection()  # the pool hands this same connection back to every write (one thread)
    pg: Any = raw.driver_connection
    pg.autocommit = True
    pid = pg.execute("SELECT pg_backend_pid()").fetchone()[0]
    lsn0 = pg.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
    pg.autocommit = False
    raw.close()
    written = 0
    building = 0.0
    writing = 0.0
    pos = 0
    cpu0, wall0 = backend_cpu_us(pid), time.perf_counter()
    while time.perf_counter() - wall0 < seconds:
        requests, pos = source.make(pos, cell.rows, cell.requests)  # the request path's work: not counted
        c0 = time.process_time()
        rows = make(requests)
        c1 = time.process_time()
        write(engine, rows)
        c2 = time.process_time()
        building += c1 - c0
        writing += c2 - c1
        written += cell.rows * cell.requests
    wall = time.perf_counter() - wall0
    cpu = backend_cpu_us(pid) - cpu0
    raw = engine.raw_connection()
    pg = raw.driver_connection
    pg.autocommit = True
    if pg.execute("SELECT pg_backend_pid()").fetchone()[0] != pid:
        raise RuntimeError("the writes went through another connection: the backend's CPU is not theirs")
    wal = pg.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (lsn0,)).fetchone()[0]
    pg.autocommit = False
    raw.close()
    stored = written
    while stored < size_predictions:  # untimed: enough predictions for the size to be per-prediction exact
        requests, pos = source.make(pos, cell.rows, cell.requests)
        write(engine, make(requests))
        stored += cell.rows * cell.requests
    grown = (stored_bytes(engine, variant.table) - size0) / stored
    indexes = {k: (v - indexes0.get(k, 0.0)) / stored for k, v in index_bytes(engine, variant.table).items()}
    return Figures(
        written,
        building * 1e6 / written,
        (building + writing) * 1e6 / written,
        cpu / written,
        wall * 1e6 / written,
        float(wal) / written,
        grown,
        indexes,
        column_bytes(engine, variant.table) if detail else {},
    )


def check_rows(engine: Engine, variant: Variant) -> int:
    """Predictions the variant's table holds (a check that its writes landed)."""
    what = "coalesce(sum(size), 0)" if variant.table == "prediction_batches" else "count(*)"
    with engine.connect() as conn:
        return int(conn.execute(text(f"SELECT {what} FROM {variant.table}")).scalar_one())


def uptime() -> str:
    return os.popen("uptime").read().strip()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=2.0, help="per variant, shape and cell")
    parser.add_argument(
        "--batches", type=int, nargs="*", default=[1, 32, 256], help="rows of the one request of a write"
    )
    parser.add_argument(
        "--requests-per-write",
        type=int,
        nargs="*",
        default=[64],
        help="1-row requests per write (the writer under load)",
    )
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--variants", default="current", help=f"comma-separated: {', '.join(VARIANTS)}")
    parser.add_argument(
        "--legacy",
        action="store_true",
        help=f"also measure the layout before migration 0018 ({LEGACY_REVISION}, one row per prediction)",
    )
    parser.add_argument(
        "--size-predictions",
        type=int,
        default=10_000,
        help="a cell writes at least this many predictions (untimed past --seconds) before its size is read",
    )
    parser.add_argument(
        "--detail",
        action="store_true",
        help="also print each cell's bytes per prediction by index and by column (pg_column_size)",
    )
    parser.add_argument(
        "--request-ids",
        choices=["none", "caller"],
        default="none",
        help="none: requests without X-Request-Id (logged as NULL); caller: each with a caller's 32-hex id",
    )
    parser.add_argument("--repeat", type=int, default=1, help="passes over every cell (interleaved)")
    parser.add_argument("--admin-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    variants = [VARIANTS[name] for name in args.variants.split(",")]
    if args.legacy:
        variants.append(LEGACY)
    cells = [Cell(b, 1) for b in args.batches] + [Cell(1, k) for k in args.requests_per_write]
    name = f"driftwarden_logwrite_{uuid.uuid4().hex[:8]}"
    admin = create_engine(args.admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    base = args.admin_url.rsplit("/", 1)[0] + f"/{name}"
    engines: dict[str, Engine] = {}
    results: dict[tuple[str, str, str], list[Figures]] = {}
    try:
        for v in variants:
            schema = v.name.replace("-", "_")
            with create_engine(base, isolation_level="AUTOCOMMIT").connect() as conn:
                conn.execute(text(f'CREATE SCHEMA "{schema}"'))
            url = f"{base}?options=-csearch_path%3D{schema}"
            if v.revision is None:
                migrate.upgrade(url)
            else:
                migrate.upgrade(url, v.revision)
            engine = make_engine(url)
            with engine.begin() as conn:
                for ddl in v.ddl:
                    conn.execute(text(ddl))
            engines[v.name] = engine
        data = {shape: requests_of(shape, 4096, args.request_ids == "caller") for shape in args.shapes}
        print(f"uptime: {uptime()}")
        print(
            f"{'variant':13} {'shape':5} {'cell':>6} {'preds':>7} {'build us':>8} {'client us':>9} "
            f"{'pg us':>7} {'wall us':>8} {'wal B':>6} | {'B/pred':>7} = {'heap':>6} {'toast':>6} "
            f"{'index':>6}"
        )
        for _ in range(args.repeat):
            for shape in args.shapes:
                for cell in cells:
                    for v in variants:
                        f = measure(
                            engines[v.name],
                            v,
                            data[shape],
                            cell,
                            args.seconds,
                            args.size_predictions,
                            args.detail,
                        )
                        results.setdefault((v.name, shape, cell.label), []).append(f)
                        heap, toast, index, total = f.stored.tolist()
                        print(
                            f"{v.name:13} {shape:5} {cell.label:>6} {f.predictions:>7} {f.build_us:>8.1f} "
                            f"{f.client_us:>9.1f} {f.pg_us:>7.1f} {f.wall_us:>8.1f} {f.wal_bytes:>6.0f} | "
                            f"{total:>7.1f} = {heap:>6.1f} {toast:>6.1f} {index:>6.1f}",
                            flush=True,
                        )
                        if args.detail:
                            print(f"    index B/pred: {_fmt(f.indexes)}")
                            print(f"    column B/pred: {_fmt(f.columns)}", flush=True)
        print(f"uptime: {uptime()}")
        for v in variants:
            print(f"  {v.name}: {v.about} [{check_rows(engines[v.name], v)} predictions in the last cell]")
        if args.legacy and "current" in engines:
            side_by_side(results, args.shapes, cells)
    finally:
        for engine in engines.values():
            engine.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    return 0


def _fmt(values: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.1f}" for k, v in values.items() if v >= 0.05)


def side_by_side(
    results: dict[tuple[str, str, str], list[Figures]], shapes: Sequence[str], cells: Sequence[Cell]
) -> None:
    """Old (legacy) vs new (current) layout per shape and cell: medians over the passes."""

    def med(figures: list[Figures], get: Callable[[Figures], float]) -> float:
        return statistics.median(get(f) for f in figures)

    print()
    print("old layout (legacy, 0017) vs new (current), per prediction (median of the passes):")
    print(
        f"{'shape':5} {'cell':>6} | {'B old':>6} {'B new':>6} {'new/old':>7} | {'pg us old':>9} "
        f"{'new':>6} | {'client old':>10} {'new':>6} | {'wall old':>8} {'new':>6}"
    )
    for shape in shapes:
        for cell in cells:
            old, new = results.get(("legacy", shape, cell.label)), results.get(("current", shape, cell.label))
            if not old or not new:
                continue
            b_old, b_new = med(old, lambda f: f.stored[3]), med(new, lambda f: f.stored[3])
            print(
                f"{shape:5} {cell.label:>6} | {b_old:>6.0f} {b_new:>6.0f} {b_new / b_old:>7.2f} | "
                f"{med(old, lambda f: f.pg_us):>9.1f} {med(new, lambda f: f.pg_us):>6.1f} | "
                f"{med(old, lambda f: f.client_us):>10.1f} {med(new, lambda f: f.client_us):>6.1f} | "
                f"{med(old, lambda f: f.wall_us):>8.1f} {med(new, lambda f: f.wall_us):>6.1f}"
            )
    print("  target: new/old <= 0.50 (bytes per logged prediction: table + indexes + TOAST)")


if __name__ == "__main__":
    raise SystemExit(main())

"""Prediction log write benchmark: what one logged row costs PostgreSQL, the writer and the clock.

Run: ``.venv/bin/python bench/log_write.py [--seconds 2] [--batches 1 32 256] [--shapes serve wide]
[--variants current,no-ix,...] [--admin-url postgresql+psycopg://postgres@127.0.0.1:5432/postgres]``.

A scratch database (dropped at the end) is migrated to head; each variant gets its own schema (a variant
may change the table: drop an index, change a column's type). Rows are built as the server builds them
(``service/serving/flows.py``: a UUIDv7 id, the request's row document, its typed copy), in one of two
shapes: ``serve``, the serving bench's rows (``training.datagen``: 7 numeric and 3 categorical
features), and ``wide`` (20 numeric, 5 categorical). For each batch size, batches are written one after
the other, as the writer thread does, for ``--seconds``; the figures per row are:

- ``pg us``: CPU microseconds of the PostgreSQL backend that ran the inserts (``utime + stime`` of
  ``/proc/<pg_backend_pid()>/stat`` before and after; the server runs on this machine). This is what the
  log takes from the serving process on a shared machine.
- ``client us``: CPU microseconds of this process (building the batch's payload and the driver's work;
  not the bench's own making of fresh prediction ids for every batch).
- ``wall us``: elapsed time (including the commit's WAL flush; ``synchronous_commit`` as the server has it).
- ``wal B``: WAL bytes written per row (``pg_current_wal_lsn()`` before and after: server-wide, so other
  work on the same server inflates it).

Variants (``--variants``): ``current`` is :func:`predictions.service.write_log_rows` on the schema at
head; the others are written here to price one change each (see ``VARIANTS``). The machine is shared:
run it more than once and read the figures beside ``uptime``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import Engine, create_engine, text  # noqa: E402

from core import migrate  # noqa: E402
from core.database import make_engine  # noqa: E402
from predictions import service  # noqa: E402
from predictions.service import LogRow, new_prediction_ids, write_log_rows  # noqa: E402
from predictions.typed import encode_rows, make_layout  # noqa: E402

TICK_US = 1_000_000 / os.sysconf("SC_CLK_TCK")
CATEGORIES = {
    "home_ownership": ["RENT", "MORTGAGE", "OWN"],
    "loan_purpose": ["education", "debt_consolidation", "home_improvement", "car", "other"],
    "region": ["north", "south", "east", "west"],
}


def serve_rows(n: int) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """The serving bench's request rows (bench/serve.py ``request_rows``): 7 numeric, 3 categorical."""
    from training.datagen import generate

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
    return numeric, categorical, rows


def wide_rows(n: int) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """25 features: 20 numeric (floats, some ints, a null now and then), 5 categorical."""
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
    return numeric, categorical, rows


SHAPES: dict[str, Callable[[int], tuple[list[str], list[str], list[dict[str, Any]]]]] = {
    "serve": serve_rows,
    "wide": wide_rows,
}


def log_rows(shape: str, n: int) -> list[LogRow]:
    """``n`` log rows of ``shape`` as the server builds them (typed copy included)."""
    numeric, categorical, docs = SHAPES[shape](n)
    cats = [CATEGORIES.get(c, ["a", "b", "c", "d", "e"]) for c in categorical]
    layout = make_layout(numeric, categorical, cats)
    now = datetime.now(UTC)
    out: list[LogRow] = []
    for start in range(0, n, 32):  # requests of 32 rows: one request id, one time, one typed block
        chunk = docs[start : start + 32]
        typed = encode_rows(layout, chunk)
        assert typed is not None
        ids = new_prediction_ids(len(chunk))
        rid = uuid.uuid4().hex
        for pid, doc, (numbers, other), k in zip(ids, chunk, typed, range(len(chunk)), strict=True):
            out.append(
                LogRow(
                    pid,
                    rid,
                    "bench",
                    1,
                    now,
                    doc,
                    0.1 + k / 100,
                    None,
                    1.25,
                    "ok",
                    "v2",
                    layout.id,
                    numbers,
                    other,
                )
            )
    return out


# -- variants ---------------------------------------------------------------------------------------------
Writer = Callable[[Engine, Sequence[LogRow]], object]


@dataclass(frozen=True)
class Variant:
    """A way of writing a batch, on a schema changed by ``ddl`` (run after the migration)."""

    name: str
    about: str
    ddl: tuple[str, ...] = ()
    write: Writer | None = None  # None: write_log_rows


def _raw(engine: Engine) -> Any:
    return engine.raw_connection()


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


def _insert_sql(sql: str) -> Writer:
    def write(engine: Engine, rows: Sequence[LogRow]) -> None:
        with _autocommit(engine) as pg:
            pg.execute(sql, (service.batch_json(rows),))

    return write


JSON_ARRAY = service.PG_INSERT.replace("jsonb_array_elements(%s::jsonb)", "json_array_elements(%s::json)")
JSON_ARRAY = JSON_ARRAY.replace("e->5,", "(e->5)::jsonb,").replace(
    "nullif(e->7, 'null'::jsonb)", "nullif((e->7)::jsonb, 'null'::jsonb)"
)


def _copy_text(engine: Engine, rows: Sequence[LogRow]) -> None:
    """COPY FROM STDIN in text format: every value as text, parsed by the server like the JSON statement's."""
    import orjson

    dumps = orjson.dumps
    cols = ", ".join(service.LOG_COLUMNS)
    with (
        _autocommit(engine) as pg,
        pg.cursor() as cur,
        cur.copy(f"COPY prediction_log ({cols}) FROM STDIN") as copy,
    ):
        for r in rows:
            copy.write_row(
                (
                    *r[:5],
                    dumps(r[5]).decode(),
                    r[6],
                    None if r[7] is None else dumps(r[7]).decode(),
                    *r[8:12],
                    None if r[12] is None else bytes.fromhex(r[12]),
                    r[13],
                )
            )


def _empty_inputs(engine: Engine, rows: Sequence[LogRow]) -> None:
    """What a row without its JSON document would cost (the document replaced by ``{}``)."""
    write_log_rows(engine=engine, rows=[r._replace(inputs={}) for r in rows], idempotent=False)


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant(
            "current",
            "write_log_rows on the schema at head (4 indexes, JSONB inputs; the batch as one JSON array,"
            " INSERT ... SELECT FROM jsonb_array_elements)",
        ),
        Variant(
            "no-pk",
            "without the (id, logged_at) primary key (3 indexes)",
            ("ALTER TABLE prediction_log DROP CONSTRAINT pk_prediction_log",),
        ),
        Variant(
            "no-time-ix",
            "without the (model_name, logged_at) index (3 indexes)",
            ("DROP INDEX ix_prediction_log_model_name_logged_at",),
        ),
        Variant(
            "two-ix",
            "without the primary key and the (model_name, logged_at) index (2 indexes)",
            (
                "ALTER TABLE prediction_log DROP CONSTRAINT pk_prediction_log",
                "DROP INDEX ix_prediction_log_model_name_logged_at",
            ),
        ),
        Variant(
            "no-ix",
            "no index at all (the floor: heap, JSON and WAL only)",
            (
                "ALTER TABLE prediction_log DROP CONSTRAINT pk_prediction_log",
                "DROP INDEX ix_prediction_log_model_name_logged_at",
                "ALTER TABLE prediction_log DROP CONSTRAINT uq_prediction_log_prediction_id",
                "DROP INDEX ix_prediction_log_model_name_id",
            ),
        ),
        Variant(
            "json-inputs",
            "inputs as json (stored as sent, not converted to jsonb)",
            ("ALTER TABLE prediction_log ALTER COLUMN inputs TYPE json",),
        ),
        Variant(
            "json-array",
            "the batch unpacked by json_array_elements instead of jsonb_",
            (),
            _insert_sql(JSON_ARRAY),
        ),
        Variant("copy-text", "COPY FROM STDIN, text format", (), _copy_text),
        Variant(
            "empty-inputs", "as current, every inputs document {} (the typed copy alone)", (), _empty_inputs
        ),
    )
}


# -- measuring --------------------------------------------------------------------------------------------
def backend_cpu_us(pid: int) -> float:
    """utime + stime of a process, in microseconds (fields 14 and 15 of /proc/<pid>/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) * TICK_US


@dataclass
class Figures:
    rows: int
    pg_us: float
    client_us: float
    wall_us: float
    wal_bytes: float


def measure(engine: Engine, write: Writer, rows: list[LogRow], batch: int, seconds: float) -> Figures:
    """Write ``rows`` in batches of ``batch`` (fresh ids per pass) for ``seconds``; per-row figures."""
    raw = engine.raw_connection()  # the pool hands this same connection back to every write (one thread)
    pg: Any = raw.driver_connection
    pg.autocommit = True
    pid = pg.execute("SELECT pg_backend_pid()").fetchone()[0]
    lsn0 = pg.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
    pg.autocommit = False
    raw.close()
    written = 0
    harness = 0.0
    cpu0, wall0, client0 = backend_cpu_us(pid), time.perf_counter(), time.process_time()
    pos = 0
    while time.perf_counter() - wall0 < seconds:
        chunk = rows[pos : pos + batch]
        if len(chunk) < batch:  # wrapped around: the same documents again under new ids
            pos = 0
            chunk = rows[:batch]
        making = time.process_time()  # the fresh ids are the bench's work, not the writer's: not counted
        ids = new_prediction_ids(len(chunk))
        chunk = [r._replace(prediction_id=i) for r, i in zip(chunk, ids, strict=True)]
        harness += time.process_time() - making
        write(engine, chunk)
        written += len(chunk)
        pos += batch
    wall = time.perf_counter() - wall0
    client = time.process_time() - client0 - harness
    cpu = backend_cpu_us(pid) - cpu0
    raw = engine.raw_connection()
    pg = raw.driver_connection
    pg.autocommit = True
    if pg.execute("SELECT pg_backend_pid()").fetchone()[0] != pid:
        raise RuntimeError("the writes went through another connection: the backend's CPU is not theirs")
    wal = pg.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (lsn0,)).fetchone()[0]
    pg.autocommit = False
    raw.close()
    return Figures(written, cpu / written, client * 1e6 / written, wall * 1e6 / written, float(wal) / written)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=2.0, help="per variant, shape and batch size")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32, 256])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--variants", default="current", help=f"comma-separated: {', '.join(VARIANTS)}")
    parser.add_argument("--repeat", type=int, default=1, help="passes over every cell (interleaved)")
    parser.add_argument("--admin-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    variants = [VARIANTS[name] for name in args.variants.split(",")]
    name = f"driftwarden_logwrite_{uuid.uuid4().hex[:8]}"
    admin = create_engine(args.admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    base = args.admin_url.rsplit("/", 1)[0] + f"/{name}"
    engines: dict[str, Engine] = {}
    try:
        for v in variants:
            schema = v.name.replace("-", "_")
            with create_engine(base, isolation_level="AUTOCOMMIT").connect() as conn:
                conn.execute(text(f'CREATE SCHEMA "{schema}"'))
            url = f"{base}?options=-csearch_path%3D{schema}"
            migrate.upgrade(url)
            engine = make_engine(url)
            with engine.begin() as conn:
                for ddl in v.ddl:
                    conn.execute(text(ddl))
            engines[v.name] = engine
        data = {shape: log_rows(shape, 4096) for shape in args.shapes}
        print(f"uptime: {os.popen('uptime').read().strip()}")
        print(
            f"{'variant':12} {'shape':6} {'batch':>5} {'rows':>7} {'pg us':>7} {'client us':>9} "
            f"{'wall us':>8} {'wal B':>6}"
        )
        for _ in range(args.repeat):
            for shape in args.shapes:
                for batch in args.batches:
                    for v in variants:
                        write = v.write or (lambda e, r: write_log_rows(engine=e, rows=r, idempotent=False))
                        f = measure(engines[v.name], write, data[shape], batch, args.seconds)
                        print(
                            f"{v.name:12} {shape:6} {batch:>5} {f.rows:>7} {f.pg_us:>7.1f} "
                            f"{f.client_us:>9.1f} {f.wall_us:>8.1f} {f.wal_bytes:>6.0f}",
                            flush=True,
                        )
        print(f"uptime: {os.popen('uptime').read().strip()}")
        for v in variants:
            print(f"  {v.name}: {v.about}")
    finally:
        for engine in engines.values():
            engine.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

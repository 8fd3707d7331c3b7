"""Migration 0018 (a log row per prediction -> a batch row per request) on a large log: up and down.

Run: ``.venv/bin/python bench/migrate_log.py [--rows 1000000] [--backends sqlite,postgresql]
[--chunk 50000] [--admin-url postgresql+psycopg://postgres@127.0.0.1:5432/postgres] [--keep]``.

Per backend, a scratch database (SQLite: a file in a temporary folder; PostgreSQL: a database of its own,
dropped at the end unless ``--keep``) is migrated to ``0017_log_outputs`` and given ``--rows`` log rows as a
0017 server wrote them (:func:`fill_log`: requests of 1 to 32 predictions whose ids share a prefix and count
up, over three days, in the daily partitions retention made on PostgreSQL; most requests typed with a
recorded layout, some with an unseen category, every tenth with text in a numeric feature (no typed copy),
every tenth of a multi-class model with output vectors, flags on a fifth of the predictions, some output
violations; a label on every tenth prediction, carrying copies of its prediction). Then ``VACUUM ANALYZE``
(PostgreSQL), and the timed steps: ``driftwarden``'s ``migrate.upgrade`` to head (the conversion) and
``migrate.downgrade`` back to 0017, each in a child process as ``driftwarden db upgrade`` runs it (its
per-chunk progress lines are not shown). Figures are wall seconds; the machine may be shared: run it more
than once.

:func:`fill_log` is also what ``tests/predictions/test_migration_batches.py`` builds its million rows with;
:func:`expected_row` is the row it writes for a global position (the test checks a sample against it).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import orjson
from sqlalchemy import Engine, create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core import migrate  # noqa: E402

REVISION = "0017_log_outputs"
LAYOUT_NUMERIC = ["age", "income"]
LAYOUT_CATEGORICAL = ["city", "plan"]
LAYOUT_CATEGORIES = [["paris", "rome"], ["a", "b"]]
CITIES = ["paris", "rome", "berlin", None]  # codes 0, 1, -2 (unseen), -1 (null)
CITY_CODES = [0, 1, -2, -1]
PLANS = ["a", "b", None]  # codes 0, 1, -1 (absent)
PLAN_CODES = [0, 1, -1]
SPAN = timedelta(days=3)  # the rows' times: the last three days up to now
FLAG = ["age:observed_range"]
VECTOR = [0.2, 0.7, 0.1]


def layout_id() -> int:
    """The layout's id as predictions/typed.py computes it (the first 63 bits of a BLAKE2b of the lists)."""
    key = orjson.dumps([LAYOUT_NUMERIC, LAYOUT_CATEGORICAL, LAYOUT_CATEGORIES])
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1


LAYOUT = layout_id()


def sizes(n: int) -> list[int]:
    """Request sizes (1 to 32 predictions) adding up to ``n``."""
    out: list[int] = []
    total = 0
    r = 0
    while total < n:
        size = min(1 + (r * 7919 + 13) % 32, n - total)
        out.append(size)
        total += size
        r += 1
    return out


def prefix(r: int) -> str:
    """Request ``r``'s 33-character id prefix: a UUID v7 layout, its milliseconds counting up with ``r`` (as
    served ids do), its random bits from an MD5."""
    ms = f"{0x0190_0000_0000 + 3 * r:012x}"
    h = hashlib.md5(f"p{r}".encode()).hexdigest()
    return f"{ms[:8]}-{ms[8:]}-7{h[:3]}-8{h[3:6]}-{h[6:15]}"


def low(r: int) -> int:
    return (r * 37) % (4096 - 32)


def kind(r: int) -> str:
    """``typed`` (credit, a typed copy), ``documents`` (credit, text in a number) or ``vectors`` (iris)."""
    return {3: "vectors", 7: "documents"}.get(r % 10, "typed")


def expected_row(r: int, i: int, k: int, start: datetime, step: timedelta) -> dict[str, Any]:
    """The log row of request ``r``'s ``i``-th prediction, the ``k``-th of the log (0017's columns but id)."""
    what = kind(r)
    violation = r % 97 == 5 and what != "vectors"
    row: dict[str, Any] = {
        "prediction_id": prefix(r) + f"{low(r) + i:03x}",
        "request_id": f"req-{r}",
        "model_name": "iris" if what == "vectors" else "credit",
        "model_version": 1 + r % 2,
        "logged_at": start + step * r,
        "probability": None if violation else (0.7 if what == "vectors" else (k % 1000) / 1000),
        "flags": FLAG if k % 5 == 0 else None,
        "latency_ms": (10 + r % 50) / 10,
        "status": "output_violation" if violation else "ok",
        "protocol": "v2" if r % 3 == 0 else "v1",
        "layout": None,
        "numbers": None,
        "categories": None,
        "outputs": VECTOR if what == "vectors" else None,
    }
    if what == "vectors":
        row["inputs"] = {"petal": (k % 10) * 0.5}
        return row
    age, income, city, plan = 18 + k % 70, (k * 7) % 200, k % 4, k % 3
    doc: dict[str, Any] = {"age": age, "income": income, "city": CITIES[city]}
    if PLANS[plan] is not None:
        doc["plan"] = PLANS[plan]
    if what == "documents":
        if i == 0:
            doc["income"] = "n/a"
        row["inputs"] = doc
        return row
    row["inputs"] = doc
    row["layout"] = LAYOUT
    row["numbers"] = struct.pack("<4d", age, income, CITY_CODES[city], PLAN_CODES[plan])
    if CITY_CODES[city] == -2:
        row["categories"] = '{"v":' + orjson.dumps([CITIES[city], PLANS[plan]]).decode() + "}"
    return row


def timeline(n: int) -> tuple[datetime, timedelta]:
    """The first request's time and the step between requests: ``n`` rows over the last ``SPAN``."""
    now = datetime.now(UTC)
    return now - SPAN, SPAN / max(1, len(sizes(n)))


def rows(n: int, start: datetime, step: timedelta) -> Iterator[dict[str, Any]]:
    k = 0
    for r, size in enumerate(sizes(n)):
        for i in range(size):
            yield expected_row(r, i, k, start, step)
            k += 1


# PostgreSQL: every row in SQL (generate_series over the requests), the typed copy from a table of the
# little-endian float64 bytes of the few values used (PostgreSQL has no little-endian float8send)
_PG_FILL = """
INSERT INTO prediction_log (prediction_id, request_id, model_name, model_version, logged_at, inputs,
                            probability, flags, latency_ms, status, protocol, layout, numbers, categories,
                            outputs)
SELECT q.prefix || lpad(to_hex(q.low + g.i), 3, '0'), 'req-' || q.r,
       CASE WHEN q.kind = 'vectors' THEN 'iris' ELSE 'credit' END, 1 + q.r %% 2,
       %(start)s::timestamptz + %(step)s::interval * q.r,
       CASE q.kind
         WHEN 'vectors' THEN jsonb_build_object('petal', (v.k %% 10) * 0.5)
         ELSE jsonb_build_object('age', 18 + v.k %% 70,
                                 'income', CASE WHEN q.kind = 'documents' AND g.i = 0
                                           THEN to_jsonb('n/a'::text) ELSE to_jsonb((v.k * 7) %% 200) END,
                                 'city', (ARRAY['paris', 'rome', 'berlin', NULL])[1 + v.k %% 4])
              || CASE WHEN v.k %% 3 = 2 THEN '{}'::jsonb
                      ELSE jsonb_build_object('plan', (ARRAY['a', 'b'])[1 + v.k %% 3]) END
       END,
       CASE WHEN q.violation THEN NULL WHEN q.kind = 'vectors' THEN 0.7 ELSE (v.k %% 1000) / 1000.0 END,
       CASE WHEN v.k %% 5 = 0 THEN '["age:observed_range"]'::jsonb END,
       (10 + q.r %% 50) / 10.0,
       CASE WHEN q.violation THEN 'output_violation' ELSE 'ok' END,
       CASE WHEN q.r %% 3 = 0 THEN 'v2' ELSE 'v1' END,
       CASE WHEN q.kind = 'typed' THEN %(layout)s::bigint END,
       CASE WHEN q.kind = 'typed' THEN
            (%(lut)s::bytea[])[1 + 18 + v.k %% 70] || (%(lut)s::bytea[])[1 + (v.k * 7) %% 200]
            || (%(lut)s::bytea[])[(ARRAY[1, 2, 201, 202])[1 + v.k %% 4]]
            || (%(lut)s::bytea[])[(ARRAY[1, 2, 202])[1 + v.k %% 3]] END,
       CASE WHEN q.kind = 'typed' AND v.k %% 4 = 2 THEN
            '{"v":["berlin",' || (ARRAY['"a"', '"b"', 'null'])[1 + v.k %% 3] || ']}' END,
       CASE WHEN q.kind = 'vectors' THEN '[0.2, 0.7, 0.1]'::jsonb END
FROM (
    SELECT r, size, first, prefix, low,
           CASE r %% 10 WHEN 3 THEN 'vectors' WHEN 7 THEN 'documents' ELSE 'typed' END AS kind,
           r %% 97 = 5 AND r %% 10 <> 3 AS violation
    FROM unnest(%(r)s::int[], %(size)s::int[], %(first)s::bigint[], %(prefix)s::text[], %(low)s::int[])
         AS t(r, size, first, prefix, low)
) q
CROSS JOIN LATERAL generate_series(0, q.size - 1) AS g(i)
CROSS JOIN LATERAL (SELECT q.first + g.i AS k) v
ORDER BY q.r, g.i
"""


def _lut() -> list[bytes]:
    """The lookup table (1-based in SQL): positions 1..200 hold 0.0..199.0, 201 holds -2.0, 202 -1.0."""
    return [struct.pack("<d", float(v)) for v in [*range(200), -2, -1]]


_LAYOUT_ROW = (
    "INSERT INTO prediction_log_layouts (id, numeric, categorical, categories) VALUES (:id, :n, :c, :k) "
    "ON CONFLICT DO NOTHING"
)
_LABELS = """
INSERT INTO prediction_feedback (prediction_id, logged_at, model_name, label, received_at, log_id,
                                 probability, model_version, status)
SELECT prediction_id, logged_at, model_name, id % 2, logged_at, id, probability, model_version, status
FROM prediction_log WHERE id % 10 = 0
"""


def _partitions(conn: Any, start: datetime, end: datetime) -> None:
    """PostgreSQL: the daily partitions of the log and feedback over ``[start, end]`` (as retention makes
    them) where none is yet."""
    day = start.replace(hour=0, minute=0, second=0, microsecond=0)
    while day <= end:
        name = f"p{day:%Y%m%d}"
        exists = conn.execute(text("SELECT to_regclass(:t) IS NOT NULL"), {"t": f"prediction_log_{name}"})
        if not exists.scalar():
            bounds = f"FOR VALUES FROM ('{day.isoformat()}') TO ('{(day + timedelta(days=1)).isoformat()}')"
            for table in ("prediction_log", "prediction_feedback"):
                conn.execute(text(f"CREATE TABLE {table}_{name} PARTITION OF {table} {bounds}"))
        day += timedelta(days=1)


class Filled(NamedTuple):
    """What :func:`fill_log` wrote: its counts, and the first request's time and the step between requests
    (``expected_row``'s ``start`` and ``step``)."""

    rows: int
    requests: int
    labels: int
    start: datetime
    step: timedelta


def fill_log(url: str, n: int) -> Filled:
    """Give the database at ``url`` (at revision 0017, its log empty) ``n`` log rows and their labels, as
    described in the module docstring."""
    start, step = timeline(n)
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(_LAYOUT_ROW),
                {
                    "id": LAYOUT,
                    "n": orjson.dumps(LAYOUT_NUMERIC).decode(),
                    "c": orjson.dumps(LAYOUT_CATEGORICAL).decode(),
                    "k": orjson.dumps(LAYOUT_CATEGORIES).decode(),
                },
            )
        parts = sizes(n)
        if engine.dialect.name == "postgresql":
            _fill_pg(engine, parts, start, step)
        else:
            _fill_sqlite(engine, n, start, step)
        with engine.begin() as conn:
            labels = conn.execute(text(_LABELS)).rowcount
        return Filled(n, len(parts), int(labels), start, step)
    finally:
        engine.dispose()


def _fill_pg(engine: Engine, parts: list[int], start: datetime, step: timedelta) -> None:
    with engine.begin() as conn:
        _partitions(conn, start, start + step * len(parts))
    firsts = [0]
    for size in parts[:-1]:
        firsts.append(firsts[-1] + size)
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        for lo in range(0, len(parts), 20_000):  # a statement per 20k requests (~330k rows)
            hi = min(len(parts), lo + 20_000)
            cur.execute(
                _PG_FILL,
                {
                    "start": start,
                    "step": step,
                    "layout": LAYOUT,
                    "lut": _lut(),
                    "r": list(range(lo, hi)),
                    "size": parts[lo:hi],
                    "first": firsts[lo:hi],
                    "prefix": [prefix(r) for r in range(lo, hi)],
                    "low": [low(r) for r in range(lo, hi)],
                },
            )
        raw.commit()
    finally:
        raw.close()


def _sqlite_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def _fill_sqlite(engine: Engine, n: int, start: datetime, step: timedelta) -> None:
    dumps = orjson.dumps
    insert = (
        "INSERT INTO prediction_log (prediction_id, request_id, model_name, model_version, logged_at, "
        "inputs, probability, flags, latency_ms, status, protocol, layout, numbers, categories, outputs) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        batch: list[tuple[Any, ...]] = []
        for row in rows(n, start, step):
            batch.append(
                (
                    row["prediction_id"],
                    row["request_id"],
                    row["model_name"],
                    row["model_version"],
                    _sqlite_time(row["logged_at"]),
                    dumps(row["inputs"]).decode(),
                    row["probability"],
                    None if row["flags"] is None else dumps(row["flags"]).decode(),
                    row["latency_ms"],
                    row["status"],
                    row["protocol"],
                    row["layout"],
                    row["numbers"],
                    row["categories"],
                    None if row["outputs"] is None else dumps(row["outputs"]).decode(),
                )
            )
            if len(batch) == 100_000:
                cur.executemany(insert, batch)
                batch = []
        cur.executemany(insert, batch)
        raw.commit()
    finally:
        raw.close()


# ---------------------------------------------------------------------------------------------- the bench


def _timed(url: str, action: str, revision: str, chunk: int | None) -> float:
    """Seconds of ``migrate.<action>(url, revision)`` in a child process (as ``driftwarden db upgrade``)."""
    env = dict(os.environ)
    if chunk:
        env["DRIFTWARDEN_LOG_MIGRATION_CHUNK"] = str(chunk)
    code = f"from core import migrate; migrate.{action}({url!r}, {revision!r})"
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=Path(__file__).parents[1]
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{action} failed:\n{done.stderr[-4000:]}")
    return seconds


def _scalar(url: str, sql: str) -> Any:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(text(sql)).scalar()
    finally:
        engine.dispose()


def _run(backend: str, url: str, n: int, chunk: int | None) -> dict[str, float]:
    migrate.upgrade(url, REVISION)
    started = time.perf_counter()
    counts = fill_log(url, n)
    fill = time.perf_counter() - started
    if backend == "postgresql":
        engine = create_engine(url, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(text("VACUUM ANALYZE"))
        engine.dispose()
    up = _timed(url, "upgrade", "head", chunk)
    batches = int(_scalar(url, "SELECT count(*) FROM prediction_batches"))
    held = int(_scalar(url, "SELECT sum(size) FROM prediction_batches"))
    assert held == n, f"{held} predictions in the batches, {n} logged"
    down = _timed(url, "downgrade", REVISION, chunk)
    back = int(_scalar(url, "SELECT count(*) FROM prediction_log"))
    assert back == n, f"{back} rows back, {n} logged"
    print(
        f"{backend:<10} {n:>9} rows {counts.requests:>7} requests {counts.labels:>7} labels | "
        f"fill {fill:6.1f} s | upgrade {up:6.1f} s ({n / up:,.0f} rows/s, {batches} batches) | "
        f"downgrade {down:6.1f} s ({n / down:,.0f} rows/s)",
        flush=True,
    )
    return {"fill": fill, "upgrade": up, "downgrade": down}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument(
        "--chunk", type=int, default=None, help="rows per transaction (default: the migration's)"
    )
    parser.add_argument("--admin-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--keep", action="store_true", help="keep the scratch databases")
    args = parser.parse_args()
    for backend in args.backends.split(","):
        if backend == "sqlite":
            folder = Path(tempfile.mkdtemp(prefix="dw_migrate_"))
            url = f"sqlite:///{folder / 'log.db'}"
            try:
                _run(backend, url, args.rows, args.chunk)
            finally:
                if args.keep:
                    print(f"kept {url}")
                else:
                    for path in folder.iterdir():
                        path.unlink()
                    folder.rmdir()
            continue
        name = f"dw_migrate_{uuid.uuid4().hex[:8]}"
        admin = create_engine(args.admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        url = args.admin_url.rsplit("/", 1)[0] + f"/{name}"
        try:
            _run(backend, url, args.rows, args.chunk)
        finally:
            if args.keep:
                print(f"kept {url}")
            else:
                with admin.connect() as conn:
                    conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            admin.dispose()


if __name__ == "__main__":
    main()

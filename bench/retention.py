"""Retention benchmark: one day off a large prediction log, partitioned (a drop) vs unpartitioned (DELETE).

Run: ``.venv/bin/python bench/retention.py [--rows 10000000] [--days 10] [--request-rows 1] [--compare-rows N]
[--passes 3] [--admin-url postgresql+psycopg://postgres@127.0.0.1:5432/postgres] [--keep]``.

A scratch database (dropped at the end unless ``--keep``) gets two schemas:

- ``part``: migrated to head (``prediction_batches``, one row per request, and the feedback, partitioned by
  day), the partitions of the ``--days`` days made, then ``--rows`` predictions spread evenly over those days
  as requests of ``--request-rows`` predictions each (four models; each batch row with a typed copy of 5
  features per prediction and its outputs, as the server writes them) and a label for every tenth
  prediction (with the copies of its prediction ``record_feedback`` stores), all generated in SQL
  (``generate_series``, one statement per day), then ``VACUUM ANALYZE`` (as autovacuum leaves a day-old
  partition). Each timed pass is what the retention job does with a cutoff one day later than the previous
  one (``apply_retention(whole_partitions=True)``): create partitions ahead (nothing left to create), drop
  the oldest day's log and feedback partitions (with the exact count of the predictions they held), delete
  rows of the DEFAULT partition older than the cutoff (none).
- ``flat``: migrated to 0008 (the unpartitioned log of one row per prediction, ``prediction_log``, and its
  feedback with the foreign key), filled the same way with ``--compare-rows`` predictions (default:
  ``--rows``); each timed pass is the retention code of that time, the chunked DELETE (5000 rows per
  transaction: the ids per model through ``(model_name, logged_at)``, the feedback by ``prediction_id``,
  then the log rows) of the oldest day; then the ``VACUUM`` that reclaims the dead rows, timed on its own.
  With fewer ``--compare-rows``, the per-row rate is also extrapolated to one day of the partitioned log
  (said so in the output).

A writer beside the passes logs a 1-prediction request every 10 ms through ``write_log_rows`` (the
slowest write during a pass shows whether the pass stalls the write path).

Figures are wall seconds per pass and their median; the machine is shared, so run it more than once.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from sqlalchemy import Engine, create_engine, text

from core import migrate
from core.database import Database, make_engine, make_session_factory
from predictions.pending import RequestRows, build
from predictions.service import (
    drop_partitions_before,
    new_prediction_ids,
    prepare_partitions,
    purge_all_before,
    retention_cutoff,
    write_log_rows,
)

DAY = timedelta(days=1)
MODELS = 4
CHUNK = 5000
WIDTH = 5  # float64 per prediction in a batch's typed copy (numbers)

# one batch row per request: ``g`` numbers the batches; each holds {size} predictions (numbers and outputs:
# md5 bytes, as little compressible as measured floats)
FILL = """
INSERT INTO prediction_batches (first_id, size, request_id, model_name, model_version, logged_at,
                                latency_ms, status, protocol, source, layout, numbers, categories, outputs)
SELECT (substr(md5(g::text)::uuid::text, 1, 33) || '000')::uuid, {size}, md5((-g)::text),
       'model_' || (g % {models}), 1,
       timestamptz '{start}' + g * interval '1 microsecond' * {step}, 1.5 + random(), 'ok', 'v2', 'serve',
       1234567,
       substr(decode((SELECT string_agg(md5(g || '.' || k), '') FROM generate_series(1, {numbers_md5}) AS k),
                     'hex'), 1, {numbers_bytes}),
       NULL,
       substr(decode((SELECT string_agg(md5(g || ',' || k), '') FROM generate_series(1, {outputs_md5}) AS k),
                     'hex'), 1, {outputs_bytes})
FROM generate_series({first}, {last}) AS g
"""
# a label for every tenth prediction, as record_feedback stores it (the copies of its prediction)
LABELS_PARTITIONED = """
INSERT INTO prediction_feedback (prediction_id, logged_at, model_name, label, received_at,
                                 log_id, position, probability, model_version, status)
SELECT left(b.first_id::text, 33)
       || lpad(to_hex(('x' || right(b.first_id::text, 3))::bit(12)::int + pos), 3, '0'),
       b.logged_at, b.model_name, (random() < 0.5)::int,
       b.logged_at + interval '1 hour', b.id, pos, random(), b.model_version, b.status
FROM prediction_batches b CROSS JOIN LATERAL generate_series(0, b.size - 1) AS pos
WHERE (b.id * b.size + pos) % 10 = 0
"""
# the log before migration 0018 (and before partitions: 0008), one row per prediction
FILL_FLAT = """
INSERT INTO prediction_log (prediction_id, request_id, model_name, model_version, logged_at, inputs,
                            probability, flags, latency_ms, status, protocol)
SELECT md5(g::text)::uuid::text, 'req-' || g, 'model_' || (g % {models}), 1,
       timestamptz '{start}' + g * interval '1 microsecond' * {step},
       jsonb_build_object('amount', round((random() * 1000)::numeric, 2), 'count', (random() * 10)::int,
                          'age', 18 + g % 60, 'colour', (ARRAY['red', 'green', 'blue'])[1 + g % 3],
                          'region', 'r' || (g % 7)),
       random(), NULL, 1.5 + random(), 'ok', 'v1'
FROM generate_series({first}, {last}) AS g
"""
LABELS_FLAT = """
INSERT INTO prediction_feedback (prediction_id, model_name, label, received_at)
SELECT prediction_id, model_name, (random() < 0.5)::int, logged_at + interval '1 hour'
FROM prediction_log WHERE id % 10 = 0
"""


def fill(
    engine: Engine,
    *,
    rows: int,
    days: int,
    start: datetime,
    fill_sql: str,
    labels_sql: str,
    table: str,
    size: int = 1,
) -> float:
    """``rows`` predictions in rows of ``size`` predictions evenly over ``days`` days from ``start`` (one
    statement per day), labels, VACUUM ANALYZE."""
    batches = -(-rows // size)
    step = int(days * DAY / timedelta(microseconds=1)) // batches  # microseconds between two rows
    per_day = -(-batches // days)
    shape = {
        "size": size,
        "numbers_bytes": 8 * WIDTH * size,
        "numbers_md5": -(-8 * WIDTH * size // 16),
        "outputs_bytes": 8 * size,
        "outputs_md5": -(-8 * size // 16),
    }
    began = time.perf_counter()
    for day in range(days):
        first, last = day * per_day, min(batches, (day + 1) * per_day) - 1
        if first > last:
            break
        sql = fill_sql.format(
            models=MODELS, start=start.isoformat(), first=first, last=last, step=step, **shape
        )
        with engine.begin() as conn:
            conn.execute(text(sql))
        print(
            f"  filled day {day + 1}/{days} ({(last + 1) * size:,} predictions, {last + 1:,} rows, "
            f"{time.perf_counter() - began:.0f} s)",
            flush=True,
        )
    with engine.begin() as conn:
        conn.execute(text(labels_sql))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f"VACUUM ANALYZE {table}"))
        conn.execute(text("VACUUM ANALYZE prediction_feedback"))
    return time.perf_counter() - began


def old_purge(engine: Engine, before: datetime) -> int:
    """The retention DELETE before partitions (predictions/service.py at 0008): chunks of 5000 rows, one
    transaction each; the models found by skipping along ``(model_name, id)`` for every chunk."""
    total = 0
    while True:
        with engine.begin() as conn:
            models: list[str] = []
            while True:
                sql = "SELECT model_name FROM prediction_log"
                sql += " WHERE model_name > :last" if models else ""
                last = {"last": models[-1] if models else ""}
                found = conn.execute(text(sql + " ORDER BY model_name LIMIT 1"), last).scalar()
                if found is None:
                    break
                models.append(found)
            ids: list[int] = []
            for model in models:
                ids += conn.execute(
                    text(
                        "SELECT id FROM prediction_log WHERE model_name = :m AND logged_at < :b "
                        "ORDER BY logged_at LIMIT :k"
                    ),
                    {"m": model, "b": before, "k": CHUNK - len(ids)},
                ).scalars()
                if len(ids) >= CHUNK:
                    break
            if not ids:
                return total
            conn.execute(
                text(
                    "DELETE FROM prediction_feedback WHERE prediction_id IN "
                    "(SELECT prediction_id FROM prediction_log WHERE id = ANY(:ids))"
                ),
                {"ids": ids},
            )
            conn.execute(text("DELETE FROM prediction_log WHERE id = ANY(:ids)"), {"ids": ids})
        total += len(ids)


# the write of the log at 0008 (one row per prediction), for the probe beside the unpartitioned passes
FLAT_INSERT = (
    "INSERT INTO prediction_log (prediction_id, request_id, model_name, model_version, logged_at, inputs, "
    "probability, flags, latency_ms, status, protocol) "
    "SELECT e->>0, e->>1, e->>2, (e->>3)::int, (e->>4)::timestamptz, e->5, (e->>6)::float8, "
    "nullif(e->7, 'null'::jsonb), (e->>8)::float8, e->>9, e->>10 "
    "FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS t(e, n) ORDER BY n"
)


class Probe:
    """A writer beside the passes: a 1-prediction request (one batch row) per ``write_log_rows`` call every
    10 ms, each call's latency kept, so that a pass's stall of the write path shows (a partition change takes
    the table's lock); ``flat``: the same request as one row of the log at 0008, by that code's insert."""

    def __init__(self, url: str, *, flat: bool = False) -> None:
        self.engine = make_engine(url)
        self.flat = flat
        self.samples: list[tuple[float, float]] = []  # (start, seconds)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._n = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            self._n += 1
            request = RequestRows(
                model_name="probe",
                model_version=1,
                logged_at=datetime.now(UTC),
                request_id=f"probe-{self._n}",
                protocol="v2",
                latency_ms=1.0,
                status="ok",
                ids=new_prediction_ids(1),
                inputs=[{"amount": 1.0}],
                values=[0.5],
                flags=[None],
                layout=None,
            )
            (rows,) = build([request])
            began = time.perf_counter()
            if self.flat:
                self._write_flat(request)
            else:
                write_log_rows(engine=self.engine, rows=rows, idempotent=False)
            self.samples.append((began, time.perf_counter() - began))
            self._stop.wait(0.01)

    def _write_flat(self, r: RequestRows) -> None:
        row = (r.ids[0], r.request_id, r.model_name, 1, r.logged_at, r.inputs[0], 0.5, None, 1.0, "ok", "v1")
        raw = self.engine.raw_connection()
        try:
            pg: Any = raw.driver_connection
            pg.execute(FLAT_INSERT, (orjson.dumps([row]).decode(),))
            raw.commit()
        finally:
            raw.close()

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.engine.dispose()

    def worst(self, start: float, end: float) -> float:
        """The slowest write that overlapped ``[start, end]`` (seconds)."""
        return max(
            (took for began, took in self.samples if began <= end and began + took >= start), default=0.0
        )

    def typical(self) -> float:
        return statistics.median(took for _, took in self.samples) if self.samples else 0.0


def schema_url(admin: Engine, base: str, name: str) -> str:
    with admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{name}"'))
    return f"{base}?options=-csearch_path%3D{name}"


def bench_partitioned(scratch: Engine, base: str, args: argparse.Namespace, start: datetime) -> list[float]:
    """Fill the partitioned log; time ``--passes`` retention passes, one day each; the pass times."""
    url = schema_url(scratch, base, "part")
    migrate.upgrade(url)
    engine = make_engine(url)
    db = Database(url=url, engine=engine, factory=make_session_factory(engine))
    moment = start
    while moment < datetime.now(UTC):
        prepare_partitions(db=db, now=moment, days=1)
        moment += 7 * DAY
    print(
        f"partitioned: filling {args.rows:,} predictions over {args.days} days, "
        f"{args.request_rows} per request",
        flush=True,
    )
    seconds = fill(
        engine,
        rows=args.rows,
        days=args.days,
        start=start,
        fill_sql=FILL,
        labels_sql=LABELS_PARTITIONED,
        table="prediction_batches",
        size=args.request_rows,
    )
    print(f"  fill + labels + VACUUM ANALYZE: {seconds:.0f} s", flush=True)
    prepare_partitions(db=db, now=datetime.now(UTC), days=1)  # as after the job's first pass
    passes: list[float] = []
    with Probe(url) as probe:
        time.sleep(1)
        for k in range(1, args.passes + 1):
            cutoff = start + k * DAY + timedelta(hours=6)  # inside the next day: its partition stays whole
            # one pass = apply_retention(whole_partitions=True), its steps timed one by one
            t0 = time.perf_counter()
            created = prepare_partitions(db=db, now=datetime.now(UTC), days=1)
            t1 = time.perf_counter()
            dropped = drop_partitions_before(db=db, before=retention_cutoff(db=db, before=cutoff))
            t2 = time.perf_counter()
            deleted = purge_all_before(db=db, before=retention_cutoff(db=db, before=cutoff))
            t3 = time.perf_counter()
            passes.append(t3 - t0)
            print(
                f"  pass {k}: {t3 - t0:.3f} s = create ahead {t1 - t0:.3f} s ({len(created)} made) + drop "
                f"{t2 - t1:.3f} s ({dropped}, log + feedback, predictions counted first) + DEFAULT-partition "
                f"delete {t3 - t2:.3f} s ({deleted} predictions); slowest write meanwhile "
                f"{probe.worst(t0, t3):.3f} s",
                flush=True,
            )
            time.sleep(1)
        print(f"  concurrent writes: median {probe.typical() * 1e3:.1f} ms each", flush=True)
    db.dispose()
    return passes


def bench_flat(
    scratch: Engine, base: str, args: argparse.Namespace, start: datetime, rows: int
) -> dict[str, Any]:
    """Fill the unpartitioned log (0008); time ``--passes`` chunked DELETEs of one day, each with VACUUM."""
    url = schema_url(scratch, base, "flat")
    migrate.upgrade(url, "0008_alerts")
    flat = make_engine(url)
    print(f"unpartitioned (0008, one row per prediction): filling {rows:,} over {args.days} days", flush=True)
    seconds = fill(
        flat,
        rows=rows,
        days=args.days,
        start=start,
        fill_sql=FILL_FLAT,
        labels_sql=LABELS_FLAT,
        table="prediction_log",
    )
    print(f"  fill + labels + VACUUM ANALYZE: {seconds:.0f} s", flush=True)
    out: dict[str, Any] = {"delete": [], "vacuum": [], "rows": [], "worst": []}
    with Probe(url, flat=True) as probe:
        time.sleep(1)
        for k in range(1, args.passes + 1):
            t0 = time.perf_counter()
            n = old_purge(flat, start + k * DAY)
            t1 = time.perf_counter()
            with flat.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("VACUUM prediction_log, prediction_feedback"))
            t2 = time.perf_counter()
            out["delete"].append(t1 - t0)
            out["vacuum"].append(t2 - t1)
            out["rows"].append(n)
            out["worst"].append(probe.worst(t0, t1))
            print(
                f"  pass {k}: chunked DELETE of {n:,} rows {t1 - t0:.1f} s, then VACUUM {t2 - t1:.1f} s; "
                f"slowest write during the DELETE {probe.worst(t0, t1):.3f} s",
                flush=True,
            )
            time.sleep(1)
        print(f"  concurrent writes: median {probe.typical() * 1e3:.1f} ms each", flush=True)
    flat.dispose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="predictions of the partitioned log")
    parser.add_argument("--days", type=int, default=10, help="days the predictions are spread over")
    parser.add_argument(
        "--request-rows",
        type=int,
        default=1,
        help="predictions per request (per row of prediction_batches; 1: the most rows, the worst case)",
    )
    parser.add_argument(
        "--compare-rows", type=int, default=None, help="predictions of the unpartitioned copy (0: skip it)"
    )
    parser.add_argument("--passes", type=int, default=3, help="retention passes (one day each) per layout")
    parser.add_argument("--admin-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    args = parser.parse_args()
    if args.passes >= args.days:
        parser.error("--passes must be smaller than --days (each pass removes one of the days)")
    compare_rows = args.rows if args.compare_rows is None else args.compare_rows
    name = f"dw_bench_retention_{uuid.uuid4().hex[:8]}"
    admin = create_engine(args.admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    base = args.admin_url.rsplit("/", 1)[0] + f"/{name}"
    scratch = create_engine(base, isolation_level="AUTOCOMMIT")
    start = (datetime.now(UTC) - args.days * DAY).replace(hour=0, minute=0, second=0, microsecond=0)
    day_rows = args.rows // args.days
    try:
        passes = bench_partitioned(scratch, base, args, start)
        flat = bench_flat(scratch, base, args, start, compare_rows) if compare_rows else None
        print()
        print(
            f"one day = {day_rows:,} predictions of a {args.rows:,}-prediction log ({args.days} days, "
            f"{args.request_rows} per request), passes:"
        )
        median = statistics.median(passes)
        print(f"  partitioned, retention pass (partition drop): median {median:.3f} s {fmt(passes)}")
        if flat is not None:
            deletes = flat["delete"]
            per_row = statistics.median(t / max(n, 1) for t, n in zip(deletes, flat["rows"], strict=True))
            what = (
                "chunked DELETE"
                if compare_rows == args.rows
                else f"chunked DELETE of {compare_rows // args.days:,} rows"
            )
            print(f"  unpartitioned, {what}: median {statistics.median(deletes):.1f} s {fmt(deletes)}")
            if compare_rows != args.rows:
                rate = f"{per_row * 1e6:.1f} us/row"
                print(f"    extrapolated to {day_rows:,} predictions at {rate}: {per_row * day_rows:.1f} s")
            print(f"  unpartitioned, VACUUM after it: median {statistics.median(flat['vacuum']):.1f} s")
    finally:
        scratch.dispose()
        if args.keep:
            print(f"kept database {name}")
        else:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def fmt(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.3f}" for v in values) + "]"


if __name__ == "__main__":
    main()

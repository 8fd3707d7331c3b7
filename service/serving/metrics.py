"""Prometheus metrics of the serving path and the prediction log (one registry per app, at ``/metrics``).

The hot path only bumps plain dictionaries on the event loop thread (no lock, no label lookup, no system
call): a counter is ``dict[key] += 1``, a histogram a bisect into its bucket list per label key. A collector
turns them into metric families when Prometheus scrapes. Under ``serve --workers N`` every process also
writes a snapshot of those dictionaries to a file (:mod:`service.serving.metrics_files`), and the process
that answers a scrape merges every process's snapshot: counters and histograms are summed (also those of
processes that have exited), gauges are aggregated over the live processes (sum, max or min, per family).

Other collectors (drift from the database, health checks) join the scrape through :meth:`Metrics.register`:
they are collected live by the answering process and never summed over processes.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from predictions.writer import FLUSH_BUCKETS_S, LogWriter
from service.serving.metrics_files import SnapshotFiles

log = logging.getLogger("driftwarden.serving.metrics")

LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
ROW_BUCKETS: tuple[float, ...] = tuple(float(2**i) for i in range(11))  # 1, 2, 4, ..., 1024
OTHER_FEATURE = "_other"  # features beyond metrics_max_features (and names that are not in the schema)

Kind = Literal["counter", "gauge", "histogram"]
Aggregate = Literal["sum", "max", "min"]
Key = tuple[str, ...]


@dataclass(frozen=True)
class Family:
    """One exported metric family (``driftwarden_<name>``)."""

    kind: Kind
    doc: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    aggregate: Aggregate = "sum"  # gauges over the live processes


FAMILIES: dict[str, Family] = {
    # serving
    "requests": Family(
        "counter",
        "Answers of the predict routes by model, version that answered, protocol and HTTP status code.",
        ("model", "version", "protocol", "code"),
    ),
    "request_duration_seconds": Family(
        "histogram", "Whole predict request, body read to answer.", ("model", "protocol"), LATENCY_BUCKETS_S
    ),
    "batch_queue_seconds": Family(
        "histogram", "Wait of a request in the micro-batcher queue.", ("model",), LATENCY_BUCKETS_S
    ),
    "model_call_seconds": Family(
        "histogram", "One model call (a micro-batch).", ("model",), LATENCY_BUCKETS_S
    ),
    "batch_rows": Family("histogram", "Rows per model call.", ("model",), ROW_BUCKETS),
    "requests_in_flight": Family("gauge", "Predict requests being answered.", ("protocol",)),
    "predictions": Family("counter", "Rows predicted.", ("model", "version")),
    "ingested_predictions": Family(
        "counter",
        "Predictions of another serving stack logged, by source (ingest, cloudevents).",
        ("model", "source"),
    ),
    "cloudevents": Family(
        "counter",
        "KServe logger events by outcome: waiting (first half kept), logged (a pair logged), duplicate, "
        "spooled (the database down), unanswered (a request logged without its response), mismatched, "
        "error_response, expired_response, rejected (the database refused the pair's rows: dead letter), "
        "refused (a spooled half or a pair its contract refuses), lost (the database down, the spool full).",
        ("model", "outcome"),
    ),
    "contract_flags": Family("counter", "Rows accepted with a contract flag.", ("model", "feature", "rule")),
    "contract_violations": Family(
        "counter", "Input contract violations (400 answers).", ("model", "feature", "rule")
    ),
    "output_violations": Family("counter", "Outputs that broke the output contract.", ("model", "rule")),
    "feedback_labels": Family("counter", "Ground-truth labels received.", ("model", "outcome")),
    "model_loads": Family("counter", "Versions loaded and warmed up.", ("model",)),
    "model_load_failures": Family("counter", "Versions that failed to load.", ("model",)),
    "model_serving_version": Family(
        "gauge", "The version number in state serving.", ("model",), aggregate="max"
    ),
    "model_loaded": Family("gauge", "1 per loaded version.", ("model", "version"), aggregate="max"),
    # prediction log
    "prediction_log_rows_written": Family("counter", "Log rows committed directly."),
    "prediction_log_rows_replayed": Family("counter", "Log rows committed from the spool."),
    "prediction_log_rows_spooled": Family("counter", "Log rows written to the local spool."),
    "prediction_log_rows_dropped": Family(
        "counter", "Log rows lost: the spool's disk refused them or it held spool_max_bytes (must stay 0)."
    ),
    "prediction_log_rows_rejected": Family(
        "counter",
        "Log rows the database refused for their values, moved to the dead-letter file rejected.jsonl "
        "(must stay 0).",
    ),
    "prediction_log_write_errors": Family("counter", "Failed database writes."),
    "prediction_log_flush_duration_seconds": Family(
        "histogram", "One batch write of the log writer.", (), FLUSH_BUCKETS_S
    ),
    "prediction_log_queue_rows": Family("gauge", "Rows waiting in the writer queue."),
    "prediction_log_spool_rows": Family("gauge", "Rows in the spool."),
    "prediction_log_spool_bytes": Family("gauge", "Bytes in the spool."),
    "prediction_log_spool_oldest_age_seconds": Family(
        "gauge", "Age of the oldest row in the spool (0: empty).", aggregate="max"
    ),
    "prediction_log_database_up": Family("gauge", "1 if the last write succeeded.", aggregate="min"),
}
COUNTERS = [n for n, f in FAMILIES.items() if f.kind == "counter"]
HISTOGRAMS = [n for n, f in FAMILIES.items() if f.kind == "histogram"]

Snapshot = dict[str, Any]  # {"counters"|"gauges": {family: [[*labels, value]]}, "histograms": {family: ...}}


def observe(table: dict[Key, list[float]], key: Key, buckets: tuple[float, ...], value: float) -> None:
    """Count ``value`` into its bucket (``le`` semantics; the last-but-one slot is +Inf, the last the sum)."""
    counts = table.get(key)
    if counts is None:
        counts = table[key] = [0.0] * (len(buckets) + 2)
    counts[bisect_left(buckets, value)] += 1
    counts[-1] += value


class Metrics:
    """The serving path's counters, histograms and gauges; see the module docstring."""

    enabled = True

    def __init__(self, *, max_features: int = 100, snapshot_dir: Path | None = None) -> None:
        self.registry = CollectorRegistry()
        self.max_features = max_features
        self.counts: dict[str, dict[Key, float]] = {name: {} for name in COUNTERS}
        self.hists: dict[str, dict[Key, list[float]]] = {name: {} for name in HISTOGRAMS}
        # one duration histogram per (model, version, protocol, code): requests_total is its count and
        # request_duration_seconds{model,protocol} its sum over version and code (one bump per request)
        self.answers: dict[tuple[str, str, str, int], list[float]] = {}
        self.in_flight: dict[str, int] = {"v1": 0, "v2": 0}
        self.models: dict[str, tuple[int | None, list[int]]] = {}  # serving version, loaded versions
        self.features: dict[str, dict[str, str]] = {}  # model -> feature -> its label value
        self.writer: LogWriter | None = None
        self.files = SnapshotFiles(snapshot_dir, self.snapshot) if snapshot_dir is not None else None
        self.registry.register(_ServingCollector(self))

    # -- wiring ----------------------------------------------------------------------------------
    def register(self, collector: Collector) -> None:
        """Add a collector to every scrape (collected live in the process that answers the scrape)."""
        self.registry.register(collector)

    def watch_writer(self, writer: LogWriter) -> None:
        self.writer = writer

    def start(self) -> None:
        """Multi-process mode: start writing this process's snapshots."""
        if self.files is not None:
            self.files.start()

    def close(self) -> None:
        """Multi-process mode: write the last snapshot (its counters stay in the sums) and stop."""
        if self.files is not None:
            self.files.close()

    # -- hot path (event loop thread) ------------------------------------------------------------
    def request_started(self, protocol: str) -> None:
        self.in_flight[protocol] += 1

    def request_done(self, model: str, version: str, protocol: str, code: int, seconds: float) -> None:
        self.in_flight[protocol] -= 1
        key = (model, version, protocol, code)
        counts = self.answers.get(key)
        if counts is None:
            counts = self.answers[key] = [0.0] * (len(LATENCY_BUCKETS_S) + 2)
        counts[bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        counts[-1] += seconds

    def predicted(self, model: str, version: int, n: int, flags: list[list[str] | None]) -> None:
        counts = self.counts["predictions"]
        key = (model, str(version))
        counts[key] = counts.get(key, 0.0) + n
        self._flags(model, flags)

    def _flags(self, model: str, flags: list[list[str] | None]) -> None:
        if any(flags):
            counter = self.counts["contract_flags"]
            for row in flags:
                for flag in row or ():
                    feature, _, rule = flag.rpartition(":")
                    k = (model, self._feature(model, feature), rule)
                    counter[k] = counter.get(k, 0.0) + 1

    def ingested(self, model: str, source: str, n: int, flags: list[list[str] | None]) -> None:
        """Predictions another stack answered, logged from ``source``; their contract flags counted."""
        counts = self.counts["ingested_predictions"]
        counts[(model, source)] = counts.get((model, source), 0.0) + n
        self._flags(model, flags)

    def cloudevent(self, model: str, outcome: str, n: int = 1) -> None:
        """``n`` CloudEvents (or settled pairs) of ``model`` that ended as ``outcome``."""
        counts = self.counts["cloudevents"]
        counts[(model, outcome)] = counts.get((model, outcome), 0.0) + n

    def violation(self, model: str, problems: Iterable[tuple[str | None, str]]) -> None:
        """One count per distinct (feature, rule) of a rejected request."""
        counter = self.counts["contract_violations"]
        for feature, rule in sorted({(f or "", r) for f, r in problems}):
            k = (model, self._feature(model, feature) if feature else "", rule)
            counter[k] = counter.get(k, 0.0) + 1

    def output_violation(self, model: str, rules: list[str]) -> None:
        counter = self.counts["output_violations"]
        for rule in rules:
            counter[(model, rule)] = counter.get((model, rule), 0.0) + 1

    def labels(self, model: str, stored: int, unknown: int) -> None:
        counter = self.counts["feedback_labels"]
        for outcome, n in (("stored", stored), ("unknown", unknown)):
            counter[(model, outcome)] = counter.get((model, outcome), 0.0) + n

    def batch(self, model: str, waits: list[float], seconds: float, rows: int) -> None:
        """One model call of the micro-batcher: each request's queue wait, the call, its rows."""
        key = (model,)
        queue = self.hists["batch_queue_seconds"]
        for wait in waits:
            observe(queue, key, LATENCY_BUCKETS_S, wait)
        observe(self.hists["model_call_seconds"], key, LATENCY_BUCKETS_S, seconds)
        observe(self.hists["batch_rows"], key, ROW_BUCKETS, rows)

    # -- model manager ---------------------------------------------------------------------------
    def model_load(self, model: str, *, ok: bool, features: list[str]) -> None:
        """A version loaded (its schema's features become label values, up to the cap) or failed."""
        counter = self.counts["model_loads" if ok else "model_load_failures"]
        counter[(model,)] = counter.get((model,), 0.0) + 1
        if ok:
            self.contract_features(model, features)

    def contract_features(self, model: str, features: list[str]) -> None:
        """A contract's features become label values of the model's series (up to the cap)."""
        known = self.features.setdefault(model, {})
        new = [f for f in features if f not in known]
        room = max(0, self.max_features - sum(1 for v in known.values() if v != OTHER_FEATURE))
        for f in new[:room]:
            known[f] = f
        if len(new) > room:
            for f in new[room:]:
                known[f] = OTHER_FEATURE
            log.warning(
                "metrics: model '%s' has more than %d features; %d of them are counted under "
                "feature='%s' (setting metrics_max_features)",
                model,
                self.max_features,
                len(new) - room,
                OTHER_FEATURE,
            )

    def model_state(self, model: str, *, serving: int | None, loaded: list[int]) -> None:
        self.models[model] = (serving, loaded)

    def _feature(self, model: str, feature: str) -> str:
        """A feature's label value: its name if the schema has it (within the cap), else ``_other``."""
        return self.features.get(model, {}).get(feature, OTHER_FEATURE)

    # -- scrape ----------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """This process's values as plain data (JSON-able); gauges are read now."""
        counters: dict[str, list[list[Any]]] = {
            name: [[*k, v] for k, v in list(table.items())] for name, table in self.counts.items()
        }
        hists: dict[str, list[list[Any]]] = {
            name: [[list(k), list(v)] for k, v in list(table.items())] for name, table in self.hists.items()
        }
        durations: dict[Key, list[float]] = {}
        for (model, version, protocol, code), counts in list(self.answers.items()):
            counts = list(counts)
            counters["requests"].append([model, version, protocol, str(code), sum(counts[:-1])])
            acc = durations.setdefault((model, protocol), [0.0] * len(counts))
            for i, n in enumerate(counts):
                acc[i] += n
        hists["request_duration_seconds"] = [[list(k), v] for k, v in durations.items()]
        gauges: dict[str, list[list[Any]]] = {
            "requests_in_flight": [[p, float(n)] for p, n in list(self.in_flight.items())],
            "model_serving_version": [
                [m, float(s)] for m, (s, _) in list(self.models.items()) if s is not None
            ],
            "model_loaded": [[m, str(v), 1.0] for m, (_, vs) in list(self.models.items()) for v in vs],
        }
        w = self.writer
        if w is not None:
            s = w.stats
            counter_values: tuple[tuple[str, int], ...] = (
                ("rows_written", s.rows_written),
                ("rows_replayed", s.rows_replayed),
                ("rows_spooled", s.rows_spooled),
                ("rows_dropped", s.rows_dropped),
                ("rows_rejected", s.rows_rejected),
                ("write_errors", s.write_errors),
            )
            for name, count in counter_values:
                counters[f"prediction_log_{name}"] = [[float(count)]]
            hists["prediction_log_flush_duration_seconds"] = [[[], list(s.flush_seconds)]]
            gauge_values: tuple[tuple[str, float], ...] = (
                ("queue_rows", w.queued_rows),
                ("spool_rows", w.spool.pending_rows),
                ("spool_bytes", w.spool.pending_bytes),
                ("spool_oldest_age_seconds", w.spool.oldest_age_s(time.time())),
                ("database_up", float(s.database_ok)),
            )
            for name, gauge in gauge_values:
                gauges[f"prediction_log_{name}"] = [[float(gauge)]]
        return {"counters": counters, "histograms": hists, "gauges": gauges}

    def merged(self) -> tuple[Snapshot, list[Snapshot]]:
        """This process's snapshot, and every other process's (multi-process mode) with ``live`` set."""
        own = self.snapshot()
        return own, (self.files.others() if self.files is not None else [])


class NullMetrics(Metrics):
    """Monitoring off: every counting call is a no-op (registered collectors still answer ``/metrics``)."""

    enabled = False

    def __init__(self) -> None:
        super().__init__()

    def request_started(self, protocol: str) -> None:
        pass

    def request_done(self, model: str, version: str, protocol: str, code: int, seconds: float) -> None:
        pass

    def predicted(self, model: str, version: int, n: int, flags: list[list[str] | None]) -> None:
        pass

    def violation(self, model: str, problems: Iterable[tuple[str | None, str]]) -> None:
        pass

    def ingested(self, model: str, source: str, n: int, flags: list[list[str] | None]) -> None:
        pass

    def cloudevent(self, model: str, outcome: str, n: int = 1) -> None:
        pass

    def output_violation(self, model: str, rules: list[str]) -> None:
        pass

    def labels(self, model: str, stored: int, unknown: int) -> None:
        pass

    def batch(self, model: str, waits: list[float], seconds: float, rows: int) -> None:
        pass

    def model_load(self, model: str, *, ok: bool, features: list[str]) -> None:
        pass

    def contract_features(self, model: str, features: list[str]) -> None:
        pass

    def model_state(self, model: str, *, serving: int | None, loaded: list[int]) -> None:
        pass

    def watch_writer(self, writer: LogWriter) -> None:
        pass

    def snapshot(self) -> Snapshot:
        return {"counters": {}, "histograms": {}, "gauges": {}}


class _ServingCollector(Collector):
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        if not self.metrics.enabled:
            return
        own, others = self.metrics.merged()
        everyone = [own, *others]
        live = [own, *(s for s in others if s.get("live"))]
        for name, fam in FAMILIES.items():
            full = f"driftwarden_{name}"
            labels = list(fam.labels)
            if fam.kind == "counter":
                family: Any = CounterMetricFamily(full, fam.doc, labels=labels)
                for key, value in _sum_values(everyone, "counters", name).items():
                    family.add_metric(list(key), value)
            elif fam.kind == "histogram":
                family = HistogramMetricFamily(full, fam.doc, labels=labels)
                for key, counts in _sum_histograms(everyone, name).items():
                    family.add_metric(list(key), _cumulative(fam.buckets, counts), sum_value=counts[-1])
            else:
                family = GaugeMetricFamily(full, fam.doc, labels=labels)
                for key, value in _aggregate_gauges(live, name, fam.aggregate).items():
                    family.add_metric(list(key), value)
            yield family


def _sum_values(snapshots: list[Snapshot], section: str, name: str) -> dict[Key, float]:
    out: dict[Key, float] = {}
    for snap in snapshots:
        for *labels, value in snap[section].get(name, ()):
            key = tuple(labels)
            out[key] = out.get(key, 0.0) + value
    return out


def _sum_histograms(snapshots: list[Snapshot], name: str) -> dict[Key, list[float]]:
    out: dict[Key, list[float]] = {}
    for snap in snapshots:
        for labels, counts in snap["histograms"].get(name, ()):
            key = tuple(labels)
            acc = out.get(key)
            out[key] = list(counts) if acc is None else [a + b for a, b in zip(acc, counts, strict=True)]
    return out


def _aggregate_gauges(snapshots: list[Snapshot], name: str, how: Aggregate) -> dict[Key, float]:
    out: dict[Key, float] = {}
    for snap in snapshots:
        for *labels, value in snap["gauges"].get(name, ()):
            key = tuple(labels)
            old = out.get(key)
            if old is None:
                out[key] = float(value)
            elif how == "sum":
                out[key] = old + value
            else:
                out[key] = max(old, value) if how == "max" else min(old, value)
    return out


def _cumulative(buckets: tuple[float, ...], counts: list[float]) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    total = 0.0
    for bound, n in zip((*buckets, float("inf")), counts[:-1], strict=True):
        total += n
        out.append((floatToGoString(bound), total))
    return out

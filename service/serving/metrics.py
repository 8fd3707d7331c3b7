"""Prometheus metrics of the serving path (one registry per app, exported at ``/metrics``).

The hot path only bumps plain dictionaries (no lock, no label lookup); a collector turns them into counter
families when Prometheus scrapes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from predictions.writer import LogWriter

FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "requests": ("Prediction requests by protocol and outcome.", ("protocol", "outcome")),
    "predictions": ("Rows predicted.", ("model", "version")),
    "contract_flags": ("Rows accepted with a contract flag.", ("model", "feature", "rule")),
    "contract_violations": ("Input contract violations (400 answers).", ("model", "rule")),
    "output_violations": ("Model outputs that broke the output contract.", ("model", "rule")),
    "feedback_labels": ("Ground-truth labels received.", ("model", "outcome")),
}


class Metrics:
    """Counts requests, predictions, contract flags and violations."""

    enabled = True

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.counts: dict[str, Counter[tuple[str, ...]]] = {name: Counter() for name in FAMILIES}
        self.registry.register(_CountsCollector(self.counts))

    def request(self, protocol: str, outcome: str) -> None:
        self.counts["requests"][(protocol, outcome)] += 1

    def predicted(self, model: str, version: int, n: int, flags: list[list[str] | None]) -> None:
        self.counts["predictions"][(model, str(version))] += n
        if any(flags):
            counter = self.counts["contract_flags"]
            for row in flags:
                for flag in row or ():
                    feature, _, rule = flag.rpartition(":")
                    counter[(model, feature, rule)] += 1

    def violation(self, model: str, rules: list[str]) -> None:
        for rule in rules:
            self.counts["contract_violations"][(model, rule)] += 1

    def output_violation(self, model: str, rules: list[str]) -> None:
        for rule in rules:
            self.counts["output_violations"][(model, rule)] += 1

    def labels(self, model: str, stored: int, unknown: int) -> None:
        self.counts["feedback_labels"][(model, "stored")] += stored
        self.counts["feedback_labels"][(model, "unknown")] += unknown

    def watch_writer(self, writer: LogWriter) -> None:
        self.registry.register(_WriterCollector(writer))


class NullMetrics(Metrics):
    """Monitoring off: every call is a no-op."""

    enabled = False

    def request(self, protocol: str, outcome: str) -> None:
        pass

    def predicted(self, model: str, version: int, n: int, flags: list[list[str] | None]) -> None:
        pass

    def violation(self, model: str, rules: list[str]) -> None:
        pass

    def output_violation(self, model: str, rules: list[str]) -> None:
        pass

    def labels(self, model: str, stored: int, unknown: int) -> None:
        pass

    def watch_writer(self, writer: LogWriter) -> None:
        pass


class _CountsCollector(Collector):
    def __init__(self, counts: dict[str, Counter[tuple[str, ...]]]) -> None:
        self.counts = counts

    def collect(self) -> Iterator[Any]:
        for name, (doc, labels) in FAMILIES.items():
            family = CounterMetricFamily(f"driftwarden_{name}", doc, labels=list(labels))
            for key, value in list(self.counts[name].items()):
                family.add_metric(list(key), value)
            yield family


class _WriterCollector(Collector):
    def __init__(self, writer: LogWriter) -> None:
        self.writer = writer

    def collect(self) -> Iterator[Any]:
        w = self.writer
        s = w.stats
        for name, value, doc in (
            ("rows_written", s.rows_written, "Log rows committed directly."),
            ("rows_replayed", s.rows_replayed, "Log rows committed from the spool."),
            ("rows_spooled", s.rows_spooled, "Log rows written to the local spool."),
            ("rows_dropped", s.rows_dropped, "Log rows lost (must stay 0)."),
            ("write_errors", s.write_errors, "Failed database writes."),
        ):
            yield CounterMetricFamily(f"driftwarden_prediction_log_{name}", doc, value=value)
        yield GaugeMetricFamily(
            "driftwarden_prediction_log_queue_rows", "Rows waiting in the writer queue.", value=w.queued_rows
        )
        yield GaugeMetricFamily(
            "driftwarden_prediction_log_spool_rows", "Rows in the spool.", value=w.spool.pending_rows
        )
        yield GaugeMetricFamily(
            "driftwarden_prediction_log_spool_bytes", "Bytes in the spool.", value=w.spool.pending_bytes
        )
        yield GaugeMetricFamily(
            "driftwarden_prediction_log_database_up",
            "1 if the last write succeeded.",
            value=float(s.database_ok),
        )

"""Prometheus counters of the serving path (one registry per app, exported at ``/metrics``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from service.predictions.writer import LogWriter


class Metrics:
    """Counts requests, predictions, contract flags and violations."""

    enabled = True

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "driftwarden_requests",
            "Prediction requests by protocol and outcome.",
            ["protocol", "outcome"],
            registry=r,
        )
        self.predictions = Counter(
            "driftwarden_predictions", "Rows predicted.", ["model", "version"], registry=r
        )
        self.flags = Counter(
            "driftwarden_contract_flags",
            "Rows accepted with a contract flag.",
            ["model", "feature", "rule"],
            registry=r,
        )
        self.violations = Counter(
            "driftwarden_contract_violations",
            "Input contract violations (400 answers).",
            ["model", "rule"],
            registry=r,
        )
        self.output_violations = Counter(
            "driftwarden_output_violations",
            "Model outputs that broke the output contract.",
            ["model", "rule"],
            registry=r,
        )
        self.feedback = Counter(
            "driftwarden_feedback_labels", "Ground-truth labels received.", ["model", "outcome"], registry=r
        )
        self._children: dict[tuple[Any, ...], Any] = {}

    def _child(self, counter: Counter, *labels: str) -> Any:
        key = (id(counter), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = counter.labels(*labels)
        return child

    def request(self, protocol: str, outcome: str) -> None:
        self._child(self.requests, protocol, outcome).inc()

    def predicted(self, model: str, version: int, n: int, flags: list[list[str] | None]) -> None:
        self._child(self.predictions, model, str(version)).inc(n)
        for row in flags:
            if row:
                for flag in row:
                    feature, _, rule = flag.rpartition(":")
                    self._child(self.flags, model, feature, rule).inc()

    def violation(self, model: str, rules: list[str]) -> None:
        for rule in rules:
            self._child(self.violations, model, rule).inc()

    def output_violation(self, model: str, rules: list[str]) -> None:
        for rule in rules:
            self._child(self.output_violations, model, rule).inc()

    def labels(self, model: str, stored: int, unknown: int) -> None:
        self._child(self.feedback, model, "stored").inc(stored)
        self._child(self.feedback, model, "unknown").inc(unknown)

    def watch_writer(self, writer: LogWriter) -> None:
        self.registry.register(_WriterCollector(lambda: writer))


class NullMetrics(Metrics):
    """Monitoring off: every call is a no-op."""

    enabled = False

    def __init__(self) -> None:
        self.registry = CollectorRegistry()

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


class _WriterCollector(Collector):
    def __init__(self, get: Callable[[], LogWriter]) -> None:
        self.get = get

    def collect(self) -> Iterator[Any]:
        w = self.get()
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
            value=1.0 if s.database_ok else 0.0,
        )

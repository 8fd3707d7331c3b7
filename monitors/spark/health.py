"""The spark engine's health check: with ``monitor_engine=spark``, ``spark_engine`` fails while the lake
cannot be read or the Spark master does not answer, naming which (it does not count for ``/readyz``: serving
goes on while the monitor runs wait)."""

from __future__ import annotations

from core.config import Settings
from core.errors import DomainError
from core.health import HealthCheck, Status
from monitors.spark.session import check_master
from predictions.lake.scan import lake_filesystem


def spark_checks(settings: Settings) -> list[HealthCheck]:
    """``spark_engine`` when the monitor runs use the spark engine (none otherwise)."""
    if settings.monitor_engine != "spark":
        return []

    def check() -> Status:
        if not settings.lake_url:
            return Status(False, "monitor_engine=spark reads the lake: set lake_url (DRIFTWARDEN_LAKE_URL)")
        try:
            lake_filesystem(settings.lake_url)
            check_master(settings.spark_master)
        except DomainError as exc:
            return Status(False, str(exc))
        return Status(
            True, f"lake {settings.lake_url} readable, Spark master {settings.spark_master} answers"
        )

    return [HealthCheck("spark_engine", check, ready=False)]

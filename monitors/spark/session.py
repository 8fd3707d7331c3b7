"""The driver's SparkSession for a master URL, one per process: the executors' Python is this interpreter
(``PYSPARK_PYTHON``) with this project on its path; a ``spark://`` master that does not answer fails fast
with one line naming it, instead of Spark's minute of retries.

The executors read the lake themselves, so an S3 lake's endpoint, region and credentials (the driver's
``AWS_*`` variables, :data:`~predictions.lake.files.AWS_VARIABLES`) are forwarded to them as
``spark.executorEnv.*`` when the session is made (once per process: a variable changed later does not reach
executors already started). They are never logged; on a cluster whose nodes hold their own credentials
(an instance profile, IRSA), leave the keys unset on the driver."""

from __future__ import annotations

import os
import socket
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from core.errors import Unavailable
from predictions.lake.files import AWS_VARIABLES

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CONNECT_TIMEOUT_S = 5.0
DRIVER_MEMORY = "512m"  # the driver's JVM receives one sketch per hour (a few MB), never the rows
_lock = threading.Lock()
_sessions: dict[str, SparkSession] = {}


def check_master(master: str, *, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Raise ``Unavailable`` naming ``master`` when a ``spark://host:port`` master refuses a connection
    within ``timeout_s`` (``local[...]``, ``yarn``, ``k8s://`` are left to Spark)."""
    if not master.startswith("spark://"):
        return
    for each in master.removeprefix("spark://").split(","):  # a list of masters (standby masters)
        parts = urlsplit(f"spark://{each}")
        try:
            with socket.create_connection((parts.hostname or "", parts.port or 7077), timeout=timeout_s):
                return
        except (OSError, ValueError) as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
    raise Unavailable(f"the Spark master {master} cannot be reached (setting spark_master): {reason}")


def spark_session(master: str) -> SparkSession:
    """The process's session on ``master`` (made once; a session on another master is stopped first)."""
    with _lock:
        got = _sessions.get(master)
        if got is not None and not got.sparkContext._jsc.sc().isStopped():
            return got
        check_master(master)
        for other in list(_sessions):
            _sessions.pop(other).stop()
        session = _build(master)
        _sessions[master] = session
        return session


def spark_failure(exc: BaseException) -> str | None:
    """The last line of a failed Spark job's error (Py4J or PySpark), None for any other error."""
    kinds = {c.__module__.split(".")[0] for c in type(exc).__mro__}
    if not kinds & {"py4j", "pyspark"}:
        return None
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    useful = (
        [line for line in lines if "Error" in line or "Exception" in line] or lines or [type(exc).__name__]
    )
    return useful[-1][:400]


def stop_sessions() -> None:
    """Stop the process's session (tests, shutdown)."""
    with _lock:
        for master in list(_sessions):
            _sessions.pop(master).stop()


def _build(master: str) -> SparkSession:
    from pyspark.sql import SparkSession

    root = str(Path(__file__).resolve().parents[2])  # the folder holding monitors/, predictions/, core/
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    loopback = master.startswith("local") or "127.0.0.1" in master or "localhost" in master
    if loopback:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(master)
        .appName("driftwarden-monitor")
        .config("spark.executorEnv.PYTHONPATH", path)
        .config("spark.executorEnv.PYSPARK_PYTHON", os.environ["PYSPARK_PYTHON"])
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.worker.reuse", "true")
        .config("spark.driver.memory", DRIVER_MEMORY)
        # the label join is a shuffle on the executors: a broadcast join would build the labels' table in
        # the driver's small JVM (a million-row multi-class window did not fit in 512m)
        .config("spark.sql.autoBroadcastJoinThreshold", "-1")
    )
    for name in AWS_VARIABLES:  # the S3 lake's endpoint and credentials, for the executors' reads
        if os.environ.get(name):
            builder = builder.config(f"spark.executorEnv.{name}", os.environ[name])
    if loopback:
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session

"""The Spark tests' shared parts: one standalone cluster (a master and two workers on 127.0.0.1) and one
driver session on it for the whole test session, stopped by the PIDs started."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.spark.cluster import Cluster, start_cluster

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = start_cluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        yield cluster
    finally:
        from monitors.spark.session import stop_sessions

        stop_sessions()
        cluster.stop()


@pytest.fixture(scope="session")
def spark(spark_cluster: Cluster) -> SparkSession:
    from monitors.spark.session import spark_session

    return spark_session(spark_cluster.master)

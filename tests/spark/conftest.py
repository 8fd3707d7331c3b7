"""The Spark tests' shared parts: one standalone cluster (a master and two workers on 127.0.0.1) and one
driver session on it for the whole test session, stopped by the PIDs started; the S3-compatible server of
the lake's tests (``s3_server``, ``s3_lake``), whose ``AWS_*`` variables the driver holds when the session is
made (the workers were started without them: the session forwards them to its executors)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.lake.conftest import s3_lake, s3_server
from tests.lake.s3server import S3Server
from tests.spark.cluster import Cluster, start_cluster

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["s3_lake", "s3_server", "spark", "spark_cluster"]


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
def spark(spark_cluster: Cluster, s3_server: S3Server) -> Iterator[SparkSession]:
    from monitors.spark.session import spark_session

    with pytest.MonkeyPatch.context() as env:
        for key, value in s3_server.env.items():
            env.setenv(key, value)
        yield spark_session(spark_cluster.master)

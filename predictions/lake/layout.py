"""The lake's layout: where each file lies and what its columns are (the one contract of writers and readers).

A lake is a folder (``/data/lake``) or an S3 prefix (``s3://bucket/prefix``) holding two tables, each
partitioned the hive way, so Spark, DuckDB, Athena or pandas read it as it is::

    predictions/model=<model>/date=<yyyy-mm-dd>/hour=<hh>/<writer>.parquet
    labels/model=<model>/date=<yyyy-mm-dd>/hour=<hh>/<writer>.parquet

The date and hour are UTC: of ``logged_at`` for a prediction, of ``received_at`` for a label. ``<writer>``
is unique to the process and the file, so no two writers ever share a file, and a reader takes every
committed file of a partition (it never parses the names):

- the lake sink (:mod:`.sink`): ``<host>-<first prediction id of the roll>-<part>.parquet`` for predictions
  (a roll after a crash writes the same names again, replacing instead of adding) and
  ``<host>-labels-<time in ns, hex>-<part>.parquet`` for labels;
- ``predictions export`` (:mod:`.export`): ``export-<yyyymmddhh>-<part>.parquet`` (a rerun replaces them);
- other writers (tests, benches): :func:`file_name`.

``<part>`` numbers a roll's files of one partition by feature layout (a version whose features changed, or
rows typed from their documents, go to a file of their own), so a partition holds any number of files. A
file is written under a name starting with ``_`` (which Spark, pyarrow's datasets and Hive skip) and
committed by a rename, or on S3 by one PUT of the whole object: a reader never sees half a file.

**predictions** — one row per prediction:

===============  ==========================  ================================================================
column           Arrow type                  meaning
===============  ==========================  ================================================================
prediction_id    string                      the prediction's id (the answer's ``prediction_ids``)
request_id       string, null                the caller's request id
model_version    int64                       the version that answered (or that an ingested row names)
logged_at        timestamp[us, UTC]          when it was logged (the partition's date and hour)
latency_ms       float64                     the request's latency
status           string                      ``ok`` or the error
protocol         string                      ``tfserving``, ``v2``, ``ingest``, ...
source           string                      ``serve``, ``ingest``, ``import``, ``cloudevents``, ...
                                             (``predictions export`` keeps each row's own source)
output           float64                     the model's answer as one number (NaN: none)
vector           list<float64>, null         a multi-class model's probabilities, in class order
flags            list<string>, null          the prediction's flags
inputs           string, null                the row's JSON document when a value does not fit its
                                             feature's typed column (text in a numeric feature, ...)
features         struct                      one field per feature of the rows' typed layout: the numeric
                                             features first, then the categorical ones (readers find a
                                             feature by name, never by position); a numeric feature as
                                             float64 (the sink and export always write float64; readers
                                             also accept an integer type), a categorical one as
                                             dictionary<int32, string> (the layout's categories, then
                                             unseen texts); null: absent, NaN or infinite. A version
                                             without features has one null float64 field ``_none``
===============  ==========================  ================================================================

**labels** — one row per label received:

===============  ==========================  ================================================================
prediction_id    string                      the labelled prediction
label            float64                     the label (a multi-class model's: the class index)
received_at      timestamp[us, UTC]          when it arrived (the partition's date and hour)
===============  ==========================  ================================================================

The model is the partition column ``model`` (files do not repeat it). A label resent for the same prediction
is a new row; the newest ``received_at`` wins, as in the database.
"""

from __future__ import annotations

import os
import socket
import uuid
from datetime import UTC, datetime

PREDICTIONS = "predictions"
LABELS = "labels"
TABLES = (PREDICTIONS, LABELS)

# The fixed columns of the predictions table, in file order (``features`` comes last).
PREDICTION_COLUMNS: tuple[str, ...] = (
    "prediction_id",
    "request_id",
    "model_version",
    "logged_at",
    "latency_ms",
    "status",
    "protocol",
    "source",
    "output",
    "vector",
    "flags",
    "inputs",
)
FEATURES = "features"
LABEL_COLUMNS: tuple[str, ...] = ("prediction_id", "label", "received_at")

TEMPORARY_PREFIX = "_writing-"  # a file being written: every reader skips names starting with "_" or "."
SUFFIX = ".parquet"


def hour_of(when: datetime) -> datetime:
    """The UTC hour that holds ``when`` (a naive time is read as UTC)."""
    moment = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    return moment.replace(minute=0, second=0, microsecond=0)


def partition(table: str, model: str, when: datetime) -> str:
    """The partition folder, relative to the lake's root, of ``table``'s rows of ``model`` at ``when``."""
    if table not in TABLES:
        raise ValueError(f"unknown lake table {table!r}: one of {', '.join(TABLES)}")
    hour = hour_of(when)
    return f"{table}/model={model}/date={hour:%Y-%m-%d}/hour={hour:%H}"


def parse_partition(path: str) -> tuple[str, str, datetime] | None:
    """``(table, model, hour)`` of a partition folder or a file inside it (relative to the root); None when
    the path is not one of the layout's."""
    parts = path.strip("/").split("/")
    if len(parts) < 4 or parts[0] not in TABLES:
        return None
    keys = dict(p.split("=", 1) for p in parts[1:4] if "=" in p)
    if set(keys) != {"model", "date", "hour"}:
        return None
    try:
        hour = datetime.strptime(f"{keys['date']} {keys['hour']}", "%Y-%m-%d %H").replace(tzinfo=UTC)
    except ValueError:
        return None
    return parts[0], keys["model"], hour


def file_name(sequence: int) -> str:
    """A committed file's name, unique to this process and ``sequence``: host, pid, random part, sequence."""
    host = socket.gethostname().replace("/", "_").replace("=", "_") or "host"
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:12]}-{sequence:06d}{SUFFIX}"


def temporary_name(name: str) -> str:
    """The name ``name`` has while it is being written."""
    return TEMPORARY_PREFIX + name

"""The prediction log's service, one module per job: ``ids`` (prediction ids), ``inserts`` (the writer's
insert), ``reading`` (logged predictions read back), ``feedback`` (labels), ``retention`` (partitions and
purges) and ``labelled`` (the labelled rows of retraining). Other domains call it as
``from predictions import service``."""

from predictions.service.export import feedback_rows, log_batches
from predictions.service.feedback import StoredFeedback, record_feedback, store_feedback
from predictions.service.ids import new_prediction_id, new_prediction_ids
from predictions.service.inserts import (
    PG_INSERT,
    PG_INSERT_IDEMPOTENT,
    PG_LAYOUT,
    SQLITE_INSERT,
    SQLITE_INSERT_IDEMPOTENT,
    SQLITE_LAYOUT,
    WriteFailure,
    batch_json,
    classify_write_error,
    database_failure,
    write_log_rows,
)
from predictions.service.labelled import LabelledRows, count_labelled, labelled_rows
from predictions.service.reading import (
    Logged,
    LoggedPrediction,
    count_predictions,
    decode_documents,
    load_layouts,
    logged_models,
    logged_predictions,
    recent_predictions,
)
from predictions.service.retention import (
    Retention,
    apply_retention,
    count_before,
    drop_partitions_before,
    expired_partitions,
    prepare_partitions,
    purge_all_before,
    purge_predictions,
    retention_cutoff,
)

__all__ = [
    "PG_INSERT",
    "PG_INSERT_IDEMPOTENT",
    "PG_LAYOUT",
    "SQLITE_INSERT",
    "SQLITE_INSERT_IDEMPOTENT",
    "SQLITE_LAYOUT",
    "LabelledRows",
    "Logged",
    "LoggedPrediction",
    "Retention",
    "StoredFeedback",
    "WriteFailure",
    "apply_retention",
    "batch_json",
    "classify_write_error",
    "database_failure",
    "count_before",
    "count_labelled",
    "count_predictions",
    "decode_documents",
    "drop_partitions_before",
    "expired_partitions",
    "feedback_rows",
    "labelled_rows",
    "load_layouts",
    "log_batches",
    "logged_models",
    "logged_predictions",
    "new_prediction_id",
    "new_prediction_ids",
    "prepare_partitions",
    "purge_all_before",
    "purge_predictions",
    "recent_predictions",
    "record_feedback",
    "retention_cutoff",
    "store_feedback",
    "write_log_rows",
]

"""A candidate whose held-out metric is undefined registers on both backends (issue 41, item 14).

The demo's fire drill trains on shuffled labels: its candidate may predict no positive at all, so its
held-out precision is 0/0. On PostgreSQL the version's metrics (JSONB) refused the NaN (``Token "NaN" is
invalid``) and the job failed instead of being rejected by the gate, so a demo against a PostgreSQL
database did not close the loop. An undefined metric is stored as null, the same on SQLite.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from core.database import Database
from registry.schema import Task
from registry.service import get_version, register_version
from training.cluster.flows import evaluate


def test_a_version_whose_precision_is_undefined_registers_with_it_as_null(
    db: Database, tmp_path: Path
) -> None:
    y = np.array([0, 1, 0, 1, 1, 0], dtype=np.float64)
    never_positive = np.array([0.1, 0.2, 0.3, 0.4, 0.2, 0.1])  # no probability reaches the 0.5 threshold
    metrics = evaluate(Task.BINARY, y_true=y, predictions=never_positive)
    assert metrics["precision"] is None and metrics["rows"] == 6
    assert metrics["recall"] == 0.0 and metrics["accuracy"] == 0.5 and metrics["roc_auc"] is not None
    with db.session() as s:
        register_version(
            session=s, model_name="credit", version=1, path=tmp_path, metrics=metrics, lineage={}
        )
    with db.session() as s:
        row = get_version(session=s, model_name="credit", version=1)
        assert row is not None and row.metrics == metrics

"""Every check on the holdout, in order, and the gate's result."""

from __future__ import annotations

import numpy as np

from registry.schema import ModelSchema
from registry.signature import SourceSignature
from training.retraining.gate.calibration_checks import calibration
from training.retraining.gate.contract_check import input_contract
from training.retraining.gate.metric_check import metric
from training.retraining.gate.output_checks import outputs
from training.retraining.gate.slices_check import slices
from training.retraining.gate.verdict import GatePolicy, GateResult, Holdout


def evaluate(
    *,
    schema: ModelSchema,
    holdout: Holdout,
    policy: GatePolicy,
    serving_schema: ModelSchema | None = None,
    signatures: tuple[SourceSignature | None, SourceSignature | None] = (None, None),
) -> GateResult:
    """Run every check of the gate on ``holdout`` for a candidate with contract ``schema`` (its task decides
    the outputs' shape, the metric, the calibration and the slices' metric: module docstring);
    ``serving_schema``: the serving version's contract, which the input contract check compares with
    (``signatures``: the serving version's and the candidate's recorded TF Serving signatures)."""
    labels = np.asarray(holdout.labels, dtype=np.float64)
    cand = np.asarray(holdout.candidate, dtype=np.float64)
    serv = None if holdout.serving is None else np.asarray(holdout.serving, dtype=np.float64)
    task = schema.kind
    checks = [
        input_contract(schema, holdout.columns, serving_schema, signatures),
        outputs(schema.output, cand),
        metric(
            name=policy.metric,
            labels=labels,
            candidate=cand,
            serving=serv,
            tolerance=policy.metric_tolerance,
            policy=policy,
            task=task,
        ),
        calibration(
            labels=labels,
            candidate=cand,
            serving=serv,
            tolerance=policy.calibration_tolerance,
            policy=policy,
            task=task,
            classes=schema.classes,
        ),
        slices(
            schema=schema,
            columns=holdout.columns,
            labels=labels,
            candidate=cand,
            serving=serv,
            name=policy.metric,
            tolerance=policy.slice_tolerance,
            min_rows=policy.slice_min_rows,
            policy=policy,
        ),
    ]
    return GateResult(checks)

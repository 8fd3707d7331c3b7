"""The validation gate: may a retrained candidate replace the serving version? (pure: numpy in, checks out)

Every check runs on the *holdout*: the newest labelled production rows, which the candidate never trained
on. Each returns a :class:`GateCheck` (name, verdict, the figures it decided on, a one-line message). The
gate fails when a check fails; it is *undecided* when none fails but one cannot decide; else it passes.

- ``input_contract``: the candidate's input contract accepts every holdout row
  (:func:`registry.contracts.check_inputs`, the check serving runs on each request), and its message states
  what the candidate's contract changes for the serving version's clients
  (:func:`registry.compat.compare_contracts`, as ``models promote`` does); a change that breaks them makes
  the check undecided, so that a person decides (``models promote --accept-contract-change`` or ``models
  reject``).
- ``outputs``: every candidate output is finite and inside the output contract's range
  (:func:`registry.contracts.check_outputs`); a multi-class row is K probabilities summing to 1
  (:func:`registry.contracts.check_vectors`); a regression value outside its expected range is counted as
  flagged (:func:`registry.contracts.output_flags`), not failed, as serving flags it.
- ``metric``: the task's metric of candidate minus serving version on the same rows (:data:`TASK_METRICS`,
  :func:`task_metric`).
- ``calibration``: the expected calibration error (10 equal-width bins, debiased) of candidate minus
  serving; per class (one-vs-rest) for a multi-class model (:func:`calibration`); not applicable to a
  regression (passed, saying so).
- ``slices``: the metric's difference on each value of each categorical feature with at least
  ``slice_min_rows`` holdout rows, and on each slice of one or two features (categorical levels, numeric
  quintile bins, pairs of them) where the weak-slice search (:func:`weak_search`,
  :func:`monitors.slices.search` on the candidate's realised per-row loss) finds the candidate
  significantly weak at the Bonferroni-corrected level (the top five); accuracy where a slice holds fewer
  than 10 rows of a class. The figures carry the search (``weak_slices``).

**Per task** (``schema.kind``):

- binary: outputs ``[n]`` probabilities, labels 0/1; metric ``roc_auc`` (default), ``accuracy``, ``f1``,
  ``precision``, ``recall``; calibration: the ECE.
- multi-class: outputs ``[n, K]`` probabilities, labels class indexes; metric ``macro_f1`` (default) or
  ``accuracy``; calibration: the ECE of each class, one-vs-rest (:func:`calibration`).
- regression: outputs and labels ``[n]`` numbers; metric ``rmse`` (default) or ``mae``, lower is better;
  calibration: not applicable.

``gate_metric`` is one setting for every model: its default ``roc_auc`` stands for the task's default
(``macro_f1``, ``rmse``); a configured metric that does not fit the task (``f1`` for a regression) makes the
metric and slices checks undecided, naming the metrics that fit, so that a person decides (a setting is no
evidence that the candidate is worse). For ``rmse`` and ``mae``, whose scale is the target's, the
tolerances are **relative**: ``gate_metric_tolerance`` 0.02 allows a candidate 2 % above the serving
version's value on the same rows (``gate_slice_tolerance`` likewise on a slice's rows); the figures give
the absolute tolerance and ``relative_tolerance``. Accuracy, macro F1 and the ECE lie in [0, 1]: their
tolerances are absolute, as for a binary model.

The three comparisons decide from the paired difference and its bounds, each holding with
``confidence`` (:mod:`training.retraining.comparison`: DeLong for ROC AUC, a paired bootstrap otherwise). With
"worse" read in the metric's direction (lower ROC AUC, accuracy or macro F1; higher ECE, RMSE or MAE):

- **failed**: even the better bound is worse than the tolerance: the candidate is worse than the serving
  version by more than the tolerance with that confidence (a candidate exactly the tolerance worse is
  rejected at most ``1 - confidence`` of the time);
- **passed**: the worse bound is within the tolerance, or the bounds lie at most the tolerance from the
  estimate (which is then within twice the tolerance, and not confidently worse);
- **undecided**: fewer rows than the check's minimum (:data:`MIN_ROWS`, :data:`MIN_CLASS_ROWS`; a
  multi-class model :data:`MIN_ROWS_PER_CLASS` per class: :func:`min_rows`), or bounds further than the
  tolerance from the estimate that straddle it. The message says about how many
  holdout rows would decide (the bounds close in as one over the square root of the rows).

With bounds at most half the tolerance from the estimate, a candidate twice the tolerance worse is
rejected at least 95 % of the time at the default confidence (``z = 1.645``: ``2t - t/2 > 1.645 se``).

Slices are compared at the confidence corrected for their number (Bonferroni), so that the check as a
whole keeps the stated rate. A slice the holdout cannot decide is listed, not judged: the whole-holdout
checks decide the gate. With no serving version the comparisons pass, saying so; the contract checks
still apply.

One module per concern: ``verdict`` (the result's types), ``figures`` (shared limits and rounding),
``contract_check`` and ``output_checks`` (the contract checks), ``judgement`` (the paired comparison and its
verdict; the statistics stay in :mod:`training.retraining.comparison`), ``metric_check``,
``calibration_checks``, ``slices_check`` (the comparison checks) and ``evaluation`` (:func:`evaluate`, the
face: every check in order)."""

from training.retraining.gate.calibration_checks import (
    calibration,
    class_calibration,
    expected_calibration_error,
)
from training.retraining.gate.contract_check import input_contract
from training.retraining.gate.evaluation import evaluate
from training.retraining.gate.figures import (
    MAX_CELLS,
    MAX_REPS,
    MIN_CLASS_ROWS,
    MIN_ROWS,
    MIN_ROWS_PER_CLASS,
    NO_SERVING,
    RELATIVE,
    SHOWN,
    SLICE_MIN_CLASS_ROWS,
    TAIL_REPS,
    TASK_METRICS,
    min_rows,
    task_metric,
)
from training.retraining.gate.judgement import Comparison, compare, judge
from training.retraining.gate.metric_check import metric
from training.retraining.gate.output_checks import outputs, vector_outputs
from training.retraining.gate.slices_check import slices, weak_search
from training.retraining.gate.verdict import (
    GateCheck,
    GatePolicy,
    GateResult,
    Holdout,
    Verdict,
    check_verdict,
    failed_names,
)

__all__ = [
    "Comparison",
    "GateCheck",
    "GatePolicy",
    "GateResult",
    "Holdout",
    "MAX_CELLS",
    "MAX_REPS",
    "MIN_CLASS_ROWS",
    "MIN_ROWS",
    "MIN_ROWS_PER_CLASS",
    "NO_SERVING",
    "RELATIVE",
    "SHOWN",
    "SLICE_MIN_CLASS_ROWS",
    "TAIL_REPS",
    "TASK_METRICS",
    "Verdict",
    "calibration",
    "check_verdict",
    "class_calibration",
    "compare",
    "evaluate",
    "expected_calibration_error",
    "failed_names",
    "input_contract",
    "judge",
    "metric",
    "min_rows",
    "outputs",
    "slices",
    "task_metric",
    "vector_outputs",
    "weak_search",
]

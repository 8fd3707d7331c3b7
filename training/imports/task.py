"""The task the outputs and the target fit, the target as labels, the class order checked."""

from __future__ import annotations

import numpy as np

from core.errors import Invalid
from core.tabular import Columns
from registry.schema import SUM_TOLERANCE, OutputSpec, Task, check_classes, is_missing, label_codes
from training.imports.spec import ImportSpec


def infer_task(spec: ImportSpec, raw: np.ndarray, reference: Columns) -> tuple[Task, np.ndarray]:
    """The task the outputs and target fit (``spec.task`` when given), and the answers it serves."""
    if not np.isfinite(raw).all():
        bad = int((~np.isfinite(raw)).any(axis=-1).sum()) if raw.ndim == 2 else int((~np.isfinite(raw)).sum())
        raise Invalid(f"the model answered {bad} reference row(s) with a value that is not finite")
    width = raw.shape[1] if raw.ndim == 2 else 1
    probabilities = bool(((raw >= 0) & (raw <= 1)).all())
    sums = bool(width > 1 and (np.abs(raw.sum(axis=1) - 1.0) <= SUM_TOLERANCE).all())
    target = _target(spec, reference)
    fits = _fitting(width=width, probabilities=probabilities, sums=sums)
    if spec.task is not None:
        if spec.task not in fits:
            raise Invalid(_contradiction(spec.task, width=width, probabilities=probabilities, sums=sums))
        task = spec.task
    elif len(fits) == 1:
        task = fits[0]
    elif not fits:
        raise Invalid(_no_task(width=width, probabilities=probabilities))
    elif target is not None:  # a 0/1 target decides binary, other numbers regression
        binary = set(np.unique(target[~is_missing(target)]).tolist()) <= {0, 1}
        task = Task.BINARY if binary and Task.BINARY in fits else Task.REGRESSION
    else:
        raise Invalid(
            "the outputs are values in [0, 1]: they could be probabilities (binary) or values "
            "(regression); say which with --task binary or --task regression (or give --target)"
        )
    if spec.positive_class is not None and task is not Task.BINARY:
        raise Invalid(f"--positive-class applies to a binary model; this one is {task.short}")
    positive = positive_label(spec, task)
    if task is Task.BINARY and width == 2:
        return task, raw[:, positive]
    return task, (1.0 - raw if task is Task.BINARY and positive == 0 else raw)


def positive_label(spec: ImportSpec, task: Task) -> int:
    """The label a binary model's probability (or its second of two columns) is of: 0 or 1."""
    return 1 if spec.positive_class is None or task is not Task.BINARY else spec.positive_class


def _fitting(*, width: int, probabilities: bool, sums: bool) -> list[Task]:
    if width == 1:
        return [Task.BINARY, Task.REGRESSION] if probabilities else [Task.REGRESSION]
    if not (probabilities and sums):
        return []
    return [Task.BINARY] if width == 2 else [Task.MULTICLASS]


def _contradiction(task: Task, *, width: int, probabilities: bool, sums: bool) -> str:
    shape = f"[batch, {width}]" if width > 1 else "one value per row"
    if task is Task.BINARY and width == 1:
        return (
            "--task binary needs probabilities in [0, 1], the model answered values outside it on the "
            "reference (a logit? export the sigmoid)"
        )
    if width > 1 and not (probabilities and sums):
        return (
            f"--task {task.short}: the model's {shape} outputs are not probability vectors (each row in "
            "[0, 1], summing to 1): logits? export the softmax"
        )
    need = {
        Task.BINARY: "one probability (or [batch, 2])",
        Task.MULTICLASS: "a [batch, K] vector with K >= 3",
        Task.REGRESSION: "one value per row",
    }[task]
    return f"--task {task.short} contradicts the outputs: the model answers {shape}, the task needs {need}"


def _no_task(*, width: int, probabilities: bool) -> str:
    return (
        f"the outputs fit no task: [batch, {width}] rows that are not probability vectors (each in [0, 1] "
        "and summing to 1); export the softmax for a multi-class model"
    )


def _target(spec: ImportSpec, reference: Columns) -> np.ndarray | None:
    if spec.target is None:
        return None
    if spec.target not in reference:
        raise Invalid(
            f"--target {spec.target!r} is not a column of the reference {spec.reference} (its columns: "
            f"{', '.join(sorted(reference))})"
        )
    return np.asarray(reference[spec.target])


def target_labels(
    spec: ImportSpec, task: Task, reference: Columns, *, width: int
) -> tuple[np.ndarray | None, tuple[str, ...]]:
    """The target as the task's labels (0/1, class indexes, values) and the class names (multi-class)."""
    target = _target(spec, reference)
    if task is Task.MULTICLASS:
        classes = spec.classes
        if target is not None:
            try:
                classes = check_classes(
                    target[~is_missing(target)], target=spec.target or "", classes=classes
                )
            except ValueError as exc:
                raise Invalid(str(exc)) from None
        classes = classes or tuple(str(i) for i in range(width))
        if len(classes) != width:
            raise Invalid(
                f"the model answers {width} class probabilities, "
                + (
                    f"--classes names {len(classes)}"
                    if spec.classes
                    else f"the target has {len(classes)} classes"
                )
            )
        return (None if target is None else label_codes(target, classes)), classes
    if spec.classes:
        raise Invalid(f"--classes names the classes of a multi-class model; this one is {task.short}")
    if target is None:
        return None, ()
    present = target[~is_missing(target)]
    if task is Task.BINARY:
        found = set(np.unique(present).tolist()) if present.dtype.kind in "iufb" else {"text"}
        if not found <= {0, 1}:
            raise Invalid(
                f"target {spec.target!r} must hold 0/1 labels for a binary model, found "
                f"{sorted(map(str, found))[:5]}"
            )
    elif present.dtype.kind not in "iuf" or not np.isfinite(present.astype(np.float64)).all():
        raise Invalid(f"target {spec.target!r} of a regression must hold finite numbers")
    return np.asarray(target, dtype=np.float64), ()


def check_order(
    spec: ImportSpec, task: Task, *, answers: np.ndarray, labels: np.ndarray | None, classes: tuple[str, ...]
) -> None:
    """Refuse (one line) a classifier whose outputs fit the reference labels clearly better in another
    class order (multi-class), whose probability is of the other label (binary), or whose reference
    metric is at or below chance (unless ``spec.accept_below_chance``); see
    :mod:`training.imports.class_order`."""
    from training.imports.class_order import check_binary, check_multiclass

    if labels is None or task is Task.REGRESSION:
        return
    override = " (--accept-below-chance registers it anyway)"
    if task is Task.MULTICLASS:
        found = check_multiclass(labels=labels, probabilities=answers)
        if found is None:
            return
        given = f"[{', '.join(classes)}]" + (" from --classes" if spec.classes else " (the sorted labels)")
        if found.reordered:
            fits = ",".join(classes[i] for i in found.best)
            raise Invalid(
                f"the model's outputs fit the classes of --target {spec.target!r} in another order: "
                f"accuracy on the reference {found.best_accuracy:.4f} as [{fits.replace(',', ', ')}], "
                f"{found.accuracy:.4f} as {given} (chance {found.chance:.4f}); name the output order "
                f"with --classes {fits}"
            )
        if found.at_chance and not spec.accept_below_chance:
            raise Invalid(
                f"the model's accuracy on the reference is {found.accuracy:.4f} with the classes as "
                f"{given}, not clearly above chance ({found.chance:.4f}), and no other order fits clearly "
                f"better: check --target {spec.target!r} and the output order (--classes a,b,...){override}"
            )
        return
    binary = check_binary(labels=labels, probabilities=answers)
    if binary is None or spec.accept_below_chance:
        return
    of = "1 - the output" if spec.positive_class == 0 else "the output"
    if binary.flipped:
        if spec.positive_class == 0:
            settle = "leave --positive-class 0 out"
        elif spec.path is not None:
            settle = "say so with --positive-class 0"
        else:
            settle = f"recode --target {spec.target!r} so that 1 is the label it is of"
        raise Invalid(
            f"the model's probability seems to be of the other label: ROC AUC {binary.auc:.4f} of {of} "
            f"against --target {spec.target!r} on the reference, well below 0.5; {settle}{override}"
        )
    if binary.at_chance:
        raise Invalid(
            f"the model's ROC AUC on the reference is {binary.auc:.4f} against --target {spec.target!r}, "
            f"not clearly above chance (0.5): check --target and the output{override}"
        )


def output_spec(task: Task, answers: np.ndarray, classes: tuple[str, ...]) -> OutputSpec:
    if task is Task.REGRESSION:
        return OutputSpec.for_task(task, expected=(float(answers.min()), float(answers.max())))
    return OutputSpec.for_task(task, classes=len(classes))

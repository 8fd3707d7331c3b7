"""Pre-flight checks of the data a drift comparison reads: columns in, findings out (pure, no I/O).

``driftwarden drift`` runs them on REFERENCE and CURRENT before comparing, so empty or broken data is
never answered as "stable": too few rows is *insufficient data*; a named column that does not exist, a
feature with no value at all, text where the reference has numbers, labels that are not 0/1 or predictions
that are not probabilities are failed checks. Every finding is one sentence naming the file (``where``),
the column or option, and how to fix it; :class:`DataCheckFailed` joins them into the one line the CLI
prints (exit code 2).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from core.errors import Invalid
from registry.schema import Task, is_missing


@dataclass(frozen=True)
class Finding:
    """One reason the data cannot be compared."""

    message: str
    column: str | None = None
    insufficient: bool = False  # too few rows: "insufficient data", not a broken file


class DataCheckFailed(Invalid):
    """The data failed its checks; the message joins every finding on one line."""

    def __init__(self, findings: Sequence[Finding]) -> None:
        self.findings = tuple(findings)
        super().__init__("; ".join(f.message for f in self.findings))


def raise_findings(findings: Sequence[Finding]) -> None:
    """Raise :class:`DataCheckFailed` when there is any finding."""
    if findings:
        raise DataCheckFailed(findings)


def row_count(columns: Mapping[str, np.ndarray]) -> int:
    """Rows of a table given as columns (0 without columns)."""
    return max((len(c) for c in columns.values()), default=0)


def _listing(names: Iterable[str]) -> str:
    names = list(names)
    return ", ".join(names) if names else "(none)"


def check_rows(rows: int, *, where: str, min_rows: int) -> list[Finding]:
    """Fewer than ``min_rows`` rows is insufficient data for a verdict."""
    if rows >= min_rows:
        return []
    return [
        Finding(
            f"insufficient data: {where} has {rows} row{'' if rows == 1 else 's'}, fewer than the minimum of "
            f"{min_rows} for a drift verdict (supply more rows, or lower --min-rows / "
            "DRIFTWARDEN_DRIFT_MIN_ROWS)",
            insufficient=True,
        )
    ]


def check_options(
    tables: Mapping[str, Mapping[str, np.ndarray]],
    *,
    target: str | None,
    prediction: str | None,
    target_in: Sequence[str],
) -> list[Finding]:
    """The columns named by options exist.

    ``--target`` must be a column of each table in ``target_in``, ``--prediction-column`` of every table;
    ``tables`` maps a description such as ``"CURRENT cur.csv"`` to its columns.
    """
    findings: list[Finding] = []
    if target is not None and target == prediction:
        findings.append(
            Finding(f"--target and --prediction-column both name {target!r}: they must differ", column=target)
        )
    for option, name, wheres in (
        ("--target", target, list(target_in)),
        ("--prediction-column", prediction, list(tables)),
    ):
        lacking = [w for w in wheres if name is not None and name not in tables[w]]
        if name is not None and lacking:
            findings.append(
                Finding(
                    f"{option} {name!r} is not a column of {' nor '.join(lacking)}; available columns: "
                    f"{_listing(tables[lacking[0]])}",
                    column=name,
                )
            )
    return findings


def check_features_present(
    columns: Mapping[str, np.ndarray], features: Sequence[str], *, where: str, source: str
) -> list[Finding]:
    """Every feature of the reference (``source`` says where the feature list came from) is a column."""
    missing = [f for f in features if f not in columns]
    if not missing:
        return []
    return [
        Finding(
            f"{where} lacks the feature column{'s' if len(missing) > 1 else ''} {_listing(missing)} of "
            f"{source}; its columns: {_listing(columns)}",
            column=missing[0],
        )
    ]


UNNAMED = "the column without a name (an empty field of the header line: a separator that ends every line?)"


def check_all_missing(
    columns: Mapping[str, np.ndarray], names: Sequence[str], *, where: str
) -> list[Finding]:
    """A column with rows but no value at all cannot be compared: a failed check, not ``ok``."""
    out = []
    for name in names:
        col = columns.get(name)
        if col is None or len(col) == 0:
            continue
        if bool(is_missing(np.asarray(col)).all()):
            named = f"column {name!r}" if name else UNNAMED
            out.append(
                Finding(
                    f"{named} of {where} has no value in any of its {len(col)} rows: fix the export, "
                    "or drop the column from both files (or from --schema)",
                    column=name,
                )
            )
    return out


def _is_number_column(col: np.ndarray) -> bool:
    """Numbers, or an object column whose present values are all numbers (e.g. an all-null CSV column)."""
    if col.dtype.kind in "iufb":
        return True
    present = col[~is_missing(col)]
    return all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in present)


def check_numeric(columns: Mapping[str, np.ndarray], numeric: Sequence[str], *, where: str) -> list[Finding]:
    """Features that are numeric in the reference hold numbers (not text) here."""
    out = []
    for name in numeric:
        col = columns.get(name)
        if col is None or _is_number_column(np.asarray(col)):
            continue
        sample = sorted({str(v) for v in np.asarray(col)[~is_missing(np.asarray(col))]})[:3]
        out.append(
            Finding(
                f"column {name!r} of {where} holds text (e.g. {', '.join(map(repr, sample))}) but the "
                "feature is numeric in the reference: fix the export",
                column=name,
            )
        )
    return out


def check_labels(
    values: np.ndarray,
    *,
    option: str,
    name: str,
    where: str,
    required: bool,
    task: Task = Task.BINARY,
    classes: Sequence[str] = (),
) -> list[Finding]:
    """Labels of the ``task`` (missing allowed): 0/1 numbers (binary), class names or their indices
    (multi-class, ``classes`` in the model's order), finite numbers (regression); ``required``: at least one
    label is present."""
    col = np.asarray(values)
    present = col[~is_missing(col)]
    wanted = {
        Task.BINARY: "a 0/1 column",
        Task.MULTICLASS: f"the class names ({', '.join(classes)}) or their indices 0-{len(classes) - 1}",
        Task.REGRESSION: "the target's numbers",
    }[task]
    if present.size == 0:
        if not required:
            return []
        return [Finding(f"{option} {name!r} of {where} has no label in any row: give {wanted}", column=name)]
    if task is Task.REGRESSION:
        return _regression_labels(col, present, option=option, name=name, where=where)
    if task is Task.MULTICLASS:
        bad = sorted({repr(_plain(v)) for v in present if not _is_class(_plain(v), classes)})
        if bad:
            return [
                Finding(
                    f"{option} {name!r} of {where} must hold {wanted}, found {', '.join(bad[:5])}: recode "
                    "the column (or name the right one)",
                    column=name,
                )
            ]
        return []
    bad = sorted({repr(v.item() if isinstance(v, np.generic) else v) for v in present if v not in (0, 1)})
    if not _is_number_column(col) or bad:
        return [
            Finding(
                f"{option} {name!r} of {where} must hold 0/1 labels, found {', '.join(bad[:5])}: "
                "recode the column as 0/1 (or name the right one)",
                column=name,
            )
        ]
    return []


def _plain(value: object) -> object:
    return value.item() if isinstance(value, np.generic) else value


def _is_class(value: object, classes: Sequence[str]) -> bool:
    """A multi-class label: one of the class names, or a class's index (0 to len(classes) - 1)."""
    if isinstance(value, str):
        return value in classes
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if float(value).is_integer() and (0 <= value < len(classes) or str(int(value)) in classes):
        return True
    return str(value) in classes


def _regression_labels(
    col: np.ndarray, present: np.ndarray, *, option: str, name: str, where: str
) -> list[Finding]:
    if not _is_number_column(col):
        sample = sorted({str(v) for v in present if not isinstance(v, (int, float, np.number))})[:3]
        return [
            Finding(
                f"{option} {name!r} of {where} must hold the regression's target values (numbers), found "
                f"text (e.g. {', '.join(map(repr, sample))}): fix the export (or name the right column)",
                column=name,
            )
        ]
    x = present.astype(np.float64)
    if not np.isfinite(x).all():
        return [
            Finding(
                f"{option} {name!r} of {where} holds an infinite value: a regression's target must be finite",
                column=name,
            )
        ]
    return []


def check_values(values: np.ndarray, *, option: str, name: str, where: str) -> list[Finding]:
    """Predictions of a regression are numbers (missing allowed)."""
    if _is_number_column(np.asarray(values)):
        return []
    return [
        Finding(
            f"{option} {name!r} of {where} holds text: it must hold the model's predicted values",
            column=name,
        )
    ]


def check_probabilities(values: np.ndarray, *, option: str, name: str, where: str) -> list[Finding]:
    """Predictions are probabilities: numbers in [0, 1] (missing allowed)."""
    col = np.asarray(values)
    if not _is_number_column(col):
        return [
            Finding(
                f"{option} {name!r} of {where} holds text: it must hold the model's probabilities in [0, 1]",
                column=name,
            )
        ]
    x = col[~is_missing(col)].astype(np.float64)
    if x.size and (x.min() < 0.0 or x.max() > 1.0):
        return [
            Finding(
                f"{option} {name!r} of {where} must hold probabilities in [0, 1], found values from "
                f"{x.min():.4g} to {x.max():.4g}: name the probability column, not a score or a class",
                column=name,
            )
        ]
    return []


def check_table(
    columns: Mapping[str, np.ndarray],
    *,
    where: str,
    min_rows: int,
    features: Sequence[str],
    feature_source: str,
    numeric: Sequence[str] = (),
    target: str | None = None,
    prediction: str | None = None,
    target_required: bool = True,
    task: Task = Task.BINARY,
    classes: Sequence[str] = (),
) -> list[Finding]:
    """Every check of one side (REFERENCE or CURRENT) of a comparison.

    The columns named by options are checked by :func:`check_options`. ``target_required``: the ``--target``
    column must hold at least one label here (the reference); otherwise labels are optional (those of current
    data often arrive later) but, when present, must be the ``task``'s (:func:`check_labels`).
    """
    findings: list[Finding] = []
    rows = row_count(columns)
    findings += check_rows(rows, where=where, min_rows=min_rows)
    findings += check_features_present(columns, features, where=where, source=feature_source)
    if rows == 0:
        return findings  # every value of an empty table is "missing": the row count says it all
    checked = [f for f in features if f in columns]
    if prediction is not None and prediction in columns:
        checked.append(prediction)
    findings += check_all_missing(columns, checked, where=where)
    findings += check_numeric(columns, [n for n in numeric if n in columns], where=where)
    if target is not None and target in columns and target != prediction:
        findings += check_labels(
            columns[target],
            option="--target",
            name=target,
            where=where,
            required=target_required,
            task=task,
            classes=classes,
        )
    if prediction is not None and prediction in columns:
        check = check_values if task is Task.REGRESSION else check_probabilities
        findings += check(columns[prediction], option="--prediction-column", name=prediction, where=where)
    return findings

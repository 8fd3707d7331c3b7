"""Input and output contracts: checks of request values against a version's schema (pure, no I/O).

Hard rules always reject the request (HTTP 400): ``unknown_feature``, ``missing_feature``, ``type``,
``finite``, ``allowed_range``, ``max_length`` (a categorical value longer than the feature's
``max_length``, by default 256 characters or the longest trained on), ``max_rows``, ``empty``. Soft
rules (``observed_range``, ``unseen_category``, ``not_null``) follow the feature's policy: ``reject``
makes them violations, ``flag`` accepts the row and records ``"<feature>:<rule>"`` in its flags (logged
and counted). Predictions another stack answered are flagged, not refused (:func:`flag_rows`), except for
the rules of :data:`REFUSED_WHEN_LOGGED`: values no log should hold.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from registry.schema import SUM_TOLERANCE, FeatureKind, FeatureSpec, ModelSchema, OutputSpec, Policy

if TYPE_CHECKING:
    from core.tabular import Column

MAX_REPORTED = 20  # violations listed in one error answer
REFUSED_WHEN_LOGGED = frozenset({"max_length"})
"""The hard rules that refuse a prediction even where the contract only flags (an ingested record, a KServe
event, an imported row): a category longer than ``max_length``, which predict refuses too; kept, every
window read that counts its feature would carry it (a 2 MB text once stopped every monitor run)."""


@dataclass(frozen=True)
class Violation:
    """One broken rule: where (row, feature) and which rule."""

    rule: str
    message: str
    row: int | None = None
    feature: str | None = None

    def describe(self) -> str:
        where = []
        if self.row is not None:
            where.append(f"row {self.row}")
        if self.feature is not None:
            where.append(f"feature '{self.feature}'")
        prefix = ", ".join(where)
        return f"{prefix + ': ' if prefix else ''}{self.message} (rule: {self.rule})"

    def to_dict(self) -> dict[str, Any]:
        return {"row": self.row, "feature": self.feature, "rule": self.rule, "message": self.message}


class ContractViolation(ValueError):
    """A request broke its contract; answered with 400."""

    def __init__(self, violations: Sequence[Violation]) -> None:
        self.violations = list(violations)[:MAX_REPORTED]
        shown = "; ".join(v.describe() for v in self.violations[:5])
        more = len(violations) - 5
        super().__init__(shown + (f"; and {more} more" if more > 0 else ""))


@dataclass(frozen=True)
class CheckedInputs:
    """Validated model inputs (one array per feature), the rows as logged, and each row's flags."""

    arrays: dict[str, np.ndarray]
    rows: list[dict[str, Any]]
    flags: list[list[str] | None]
    n: int


def rows_to_columns(schema: ModelSchema, instances: Sequence[Any]) -> tuple[dict[str, list[Any]], int]:
    """Row format (a list of objects of named features) -> columns; unknown/missing features violate."""
    names = schema.feature_names
    known = schema.feature_set
    if instances and all(type(row) is dict and row.keys() == known for row in instances):  # the usual case
        if len(names) == 1:
            return {names[0]: [row[names[0]] for row in instances]}, len(instances)
        by_column = zip(*map(itemgetter(*names), instances), strict=True)  # transposed in C
        return {name: list(col) for name, col in zip(names, by_column, strict=True)}, len(instances)
    problems: list[Violation] = []
    for i, row in enumerate(instances):
        if not isinstance(row, Mapping):
            problems.append(
                Violation("type", f"an instance must be an object of named features, got {_kind(row)}", row=i)
            )
            continue
        for key in row:
            if key not in known:
                problems.append(
                    Violation("unknown_feature", "is not an input of this model", row=i, feature=str(key))
                )
        for name in names:
            if name not in row:
                problems.append(
                    Violation(
                        "missing_feature", "is required (send null for a missing value)", row=i, feature=name
                    )
                )
        if len(problems) >= MAX_REPORTED:
            break
    if problems:
        raise ContractViolation(problems)
    return {name: [row[name] for row in instances] for name in names}, len(instances)


def check_columns(schema: ModelSchema, columns: Mapping[str, Sequence[Any]]) -> int:
    """Columnar format: every feature present, none unknown, equal lengths; returns the row count."""
    problems = [
        Violation("unknown_feature", "is not an input of this model", feature=str(k))
        for k in columns
        if k not in set(schema.feature_names)
    ]
    problems += [
        Violation("missing_feature", "is required", feature=n)
        for n in schema.feature_names
        if n not in columns
    ]
    if problems:
        raise ContractViolation(problems)
    lengths = [len(columns[name]) for name in schema.feature_names]
    n = max(set(lengths), key=lengths.count)  # the length most features agree on
    odd = [
        Violation("shape", f"has {length} values, the other features have {n}", feature=name)
        for name, length in zip(schema.feature_names, lengths, strict=True)
        if length != n
    ]
    if odd:
        raise ContractViolation(odd)
    return n


def check_inputs(
    schema: ModelSchema,
    columns: Mapping[str, Sequence[Any]],
    n: int,
    *,
    max_rows: int | None = None,
    rows: list[dict[str, Any]] | None = None,
) -> CheckedInputs:
    """Check every value against the schema; raise :class:`ContractViolation` or return model inputs.

    A column of ``FAST_MIN_ROWS`` values or more is first checked as a whole (type and category sets, its
    minimum and maximum); a smaller one, or one with something to report or flag, is walked row by row.
    ``rows``: the request's own row objects (row format), logged as they are when every value passed
    unchanged, instead of building one dict per row again.
    """
    limit = max_rows or schema.max_rows_per_request
    if n == 0:
        raise ContractViolation([Violation("empty", "the request holds no rows")])
    if n > limit:
        raise ContractViolation([Violation("max_rows", f"{n} rows exceed the limit of {limit} per request")])
    problems: list[Violation] = []
    flags: list[list[str] | None] = [None] * n
    arrays: dict[str, np.ndarray] = {}
    clean: dict[str, Sequence[Any]] = {}
    unchanged = True  # every value passed as sent: the request's own row objects can be logged as they are
    whole = n >= FAST_MIN_ROWS
    for spec in schema.features:
        values = columns[spec.name]
        numeric = spec.kind is FeatureKind.NUMERIC
        if whole:
            fast = _numeric_fast(spec, values) if numeric else _categorical_fast(spec, values)
            if fast is not None:
                arrays[spec.name], clean[spec.name] = fast, values
                continue
        # row by row: the exact per-row rules, messages and flags
        check = _numeric if numeric else _categorical
        arrays[spec.name], clean[spec.name] = check(spec, values, problems, flags)
        unchanged = unchanged and clean[spec.name] == values
        if len(problems) >= MAX_REPORTED:
            break
    if problems:
        raise ContractViolation(problems)
    if unchanged and rows is not None and len(rows) == n:
        return CheckedInputs(arrays=arrays, rows=rows, flags=flags, n=n)
    names = schema.feature_names
    built = [dict(zip(names, vals, strict=True)) for vals in zip(*(clean[k] for k in names), strict=True)]
    return CheckedInputs(arrays=arrays, rows=built, flags=flags, n=n)


_NUMBER_TYPES = frozenset({int, float})
_STR_TYPES = frozenset({str})
FAST_MIN_ROWS = 8
FLOAT32_MAX = float(np.finfo(np.float32).max)  # numeric inputs are float32: a larger magnitude is infinite
"""From this many rows a column is first checked as a whole; below, the per-row walk is as quick."""


def _numeric_fast(spec: FeatureSpec, values: Sequence[Any]) -> np.ndarray | None:
    """The model input of a numeric column whose every value passes every rule, checked column-wise.

    None when any value needs a closer look (a null, a non-number, a value outside a range): the per-row
    check then produces exactly the violations and flags it always has.
    """
    if not _NUMBER_TYPES.issuperset(map(type, values)):  # exact types: a bool is no int here
        return None
    try:
        if not all(map(math.isfinite, values)):
            return None
    except OverflowError:  # an integer beyond float range
        return None
    low, high = min(values), max(values)
    if low < -FLOAT32_MAX or high > FLOAT32_MAX:  # infinite as the model's float32: the row walk names it
        return None
    # inside both the allowed and the observed range: no hard rule broken, no soft rule to flag
    if any(b is not None and low < b for b in (spec.allowed_min, spec.observed_min)):
        return None
    if any(b is not None and high > b for b in (spec.allowed_max, spec.observed_max)):
        return None
    return np.array(values, dtype=np.float64).astype(np.float32)  # as the row walk rounds: via float64


def _categorical_fast(spec: FeatureSpec, values: Sequence[Any]) -> np.ndarray | None:
    """The model input of a column of known, non-empty category strings; None when one needs a closer look."""
    if not _STR_TYPES.issuperset(map(type, values)):
        return None
    seen = set(values)
    if "" in seen or (not spec.levels and not spec.category_set.issuperset(seen)):
        return None
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _soft(
    spec: FeatureSpec,
    i: int,
    rule: str,
    message: str,
    problems: list[Violation],
    flags: list[list[str] | None],
) -> None:
    if spec.policy is Policy.REJECT:
        problems.append(Violation(rule, message, row=i, feature=spec.name))
        return
    row_flags = flags[i]
    if row_flags is None:
        row_flags = flags[i] = []
    row_flags.append(f"{spec.name}:{rule}")


def _numeric(
    spec: FeatureSpec, values: Sequence[Any], problems: list[Violation], flags: list[list[str] | None]
) -> tuple[np.ndarray, list[Any]]:
    out = np.empty(len(values), dtype=np.float32)
    clean: list[Any] = []
    lo_a, hi_a, lo_o, hi_o = spec.allowed_min, spec.allowed_max, spec.observed_min, spec.observed_max
    for i, v in enumerate(values):
        if v is None:
            out[i] = np.nan
            clean.append(None)
            if not spec.nullable:
                _soft(spec, i, "not_null", "is missing but was never missing in training", problems, flags)
            continue
        if isinstance(v, bool) or not isinstance(v, int | float):
            problems.append(Violation("type", f"expected a number, got {_kind(v)}", row=i, feature=spec.name))
            clean.append(None)
            continue
        try:
            f = float(v)
        except OverflowError:  # an integer beyond float range
            f = math.inf
        if not math.isfinite(f) or abs(f) > FLOAT32_MAX:
            problems.append(
                Violation(
                    "finite",
                    f"value {v} is not finite (send null for a missing value)"
                    if not math.isfinite(f)
                    else f"value {v} is beyond the model's float32 range (magnitude {FLOAT32_MAX:.4g})",
                    row=i,
                    feature=spec.name,
                )
            )
            clean.append(None)
            continue
        if lo_a is not None and f < lo_a:
            problems.append(
                Violation(
                    "allowed_range",
                    f"value {v} is below the allowed minimum {lo_a:g}",
                    row=i,
                    feature=spec.name,
                )
            )
        elif hi_a is not None and f > hi_a:
            problems.append(
                Violation(
                    "allowed_range",
                    f"value {v} is above the allowed maximum {hi_a:g}",
                    row=i,
                    feature=spec.name,
                )
            )
        elif (lo_o is not None and f < lo_o) or (hi_o is not None and f > hi_o):
            _soft(
                spec,
                i,
                "observed_range",
                f"value {v} is outside the training range {_bounds(lo_o, hi_o)}",
                problems,
                flags,
            )
        out[i] = f
        clean.append(v)
    return out, clean


def _bounds(low: float | None, high: float | None) -> str:
    """A range as a message shows it; an open side (a contract may bound one side only) is infinite."""
    return f"[{'-inf' if low is None else format(low, 'g')}, {'inf' if high is None else format(high, 'g')}]"


def _categorical(
    spec: FeatureSpec, values: Sequence[Any], problems: list[Violation], flags: list[list[str] | None]
) -> tuple[np.ndarray, list[Any]]:
    out = np.empty(len(values), dtype=object)
    clean: list[Any] = []
    cats = spec.categories
    for i, v in enumerate(values):
        if isinstance(v, Mapping) and set(v) == {"b64"}:  # TF Serving's encoding of binary strings
            v = _b64(v["b64"])
        if v is None or v == "":
            out[i] = ""
            clean.append(None)
            if not spec.nullable:
                _soft(spec, i, "not_null", "is missing but was never missing in training", problems, flags)
            continue
        if not isinstance(v, str):
            problems.append(
                Violation("type", f"expected a string category, got {_kind(v)}", row=i, feature=spec.name)
            )
            clean.append(None)
            continue
        if "\x00" in v:  # PostgreSQL text and JSONB refuse it: the logged row could never be written
            problems.append(
                Violation(
                    "type",
                    "holds a NUL character (\\u0000), which no log can store",
                    row=i,
                    feature=spec.name,
                )
            )
            clean.append(None)
            continue
        if len(v) > spec.max_length:
            problems.append(
                Violation(
                    "max_length",
                    f"a category of {len(v)} characters; at most {spec.max_length}",
                    row=i,
                    feature=spec.name,
                )
            )
            clean.append(None)
            continue
        if not spec.levels and v not in cats:  # a hashed high-cardinality feature takes any value
            _soft(spec, i, "unseen_category", f"category {v!r} was not seen in training", problems, flags)
        out[i] = v
        clean.append(v)
    return out, clean


def flag_rows(schema: ModelSchema, rows: Sequence[Mapping[str, Any]]) -> list[list[str] | None]:
    """The flags of rows a model has already answered (ingested predictions): every rule a row breaks, hard
    or soft, as ``"<feature>:<rule>"``, and ``"<key>:unknown_feature"`` for a key outside the contract;
    nothing is refused but a rule of :data:`REFUSED_WHEN_LOGGED` (:class:`ContractViolation`, naming the
    first row and feature breaking it). Values must be JSON scalars (the caller refuses others)."""
    flags: list[list[str] | None] = [None] * len(rows)
    names = set(schema.feature_names)
    for spec in schema.features:
        problems: list[Violation] = []
        check = _numeric if spec.kind is FeatureKind.NUMERIC else _categorical
        check(spec, [row.get(spec.name) for row in rows], problems, flags)
        refused = [p for p in problems if p.rule in REFUSED_WHEN_LOGGED]
        if refused:
            raise ContractViolation(refused[:1])
        for problem in problems:
            if problem.row is not None:
                _add_flag(flags, problem.row, f"{spec.name}:{problem.rule}")
    for i, row in enumerate(rows):
        for key in row:
            if key not in names:
                _add_flag(flags, i, f"{key}:unknown_feature")
    return flags


def flag_columns(schema: ModelSchema, columns: Mapping[str, Column], n: int) -> list[list[str] | None]:
    """:func:`flag_rows` of the ``n`` rows ``columns`` hold (row ``i``: each column's value at ``i`` as
    :func:`core.tabular.as_python` reads it; a feature without a column is absent), checked by column."""
    flags: list[list[str] | None] = [None] * n
    for spec in schema.features:
        rows, found = _column_flags(spec, columns.get(spec.name), n)
        refused = [i for i, f in zip(rows, found, strict=True) if f.rsplit(":", 1)[1] in REFUSED_WHEN_LOGGED]
        if refused:  # the first such row, worded as flag_rows words it
            _refuse_value(spec, columns[spec.name], min(refused))
        for i, flag in zip(rows, found, strict=True):  # one flag per row and feature, in feature order
            _add_flag(flags, i, flag)
    names = set(schema.feature_names)
    for key in columns:
        if key not in names:
            for i in range(n):
                _add_flag(flags, i, f"{key}:unknown_feature")
    return flags


def _refuse_value(spec: FeatureSpec, column: Column, row: int) -> None:
    """Raise the :class:`ContractViolation` of a rule of :data:`REFUSED_WHEN_LOGGED` that ``column``'s value
    at ``row`` breaks, in :func:`flag_rows`' words."""
    from core.tabular import as_python

    (value,) = as_python(column[np.array([row])])
    check = _numeric if spec.kind is FeatureKind.NUMERIC else _categorical
    problems: list[Violation] = []
    check(spec, [value], problems, [None])
    refused = [p for p in problems if p.rule in REFUSED_WHEN_LOGGED]
    raise ContractViolation([replace(refused[0], row=row)])


def _column_flags(spec: FeatureSpec, column: Column | None, n: int) -> tuple[list[int], list[str]]:
    """The rows one feature's rules flag and their flags: each distinct text (and a missing column) walked
    once, a number only when :func:`_clean` cannot vouch for it; anything else row by row."""
    from core.tabular import CodedColumn, as_python  # it imports pyarrow: only when columns are flagged

    if column is None:
        (flag,) = _value_flags(spec, [None])
        return (list(range(n)), [flag] * n) if flag is not None else ([], [])
    if isinstance(column, CodedColumn):
        looked = _value_flags(spec, [*column.categories.tolist(), None])  # code -1 (a null) takes the last
        hit = np.array([f is not None for f in looked], dtype=bool)[column.codes]
        rows = np.flatnonzero(hit)
        return rows.tolist(), [f for c in column.codes[rows].tolist() if (f := looked[c]) is not None]
    if spec.kind is FeatureKind.NUMERIC and column.dtype.kind in "iuf":
        rows = np.flatnonzero(~_clean(spec, column))
    else:
        rows = np.arange(len(column))
    looked = _value_flags(spec, as_python(column[rows]))
    pairs = [(i, f) for i, f in zip(rows.tolist(), looked, strict=True) if f is not None]
    return [i for i, _ in pairs], [f for _, f in pairs]


def _value_flags(spec: FeatureSpec, values: list[Any]) -> list[str | None]:
    """Each value's flag (``"<feature>:<rule>"``) by the row walk of :func:`flag_rows`, or None."""
    check = _numeric if spec.kind is FeatureKind.NUMERIC else _categorical
    problems: list[Violation] = []
    flags: list[list[str] | None] = [None] * len(values)
    check(spec, values, problems, flags)
    for problem in problems:
        if problem.row is not None:
            _add_flag(flags, problem.row, f"{spec.name}:{problem.rule}")
    return [None if f is None else f[0] for f in flags]


def _clean(spec: FeatureSpec, values: np.ndarray) -> np.ndarray:
    """Numbers no rule flags (finite, within float32 and both ranges): a conservative mask."""
    f = values.astype(np.float64, copy=False)
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(f) & (np.abs(f) <= FLOAT32_MAX)
        for low in (spec.allowed_min, spec.observed_min):
            if low is not None:
                ok &= f >= low
        for high in (spec.allowed_max, spec.observed_max):
            if high is not None:
                ok &= f <= high
    return ok


def _add_flag(flags: list[list[str] | None], row: int, flag: str) -> None:
    found = flags[row]
    if found is None:
        flags[row] = [flag]
    elif flag not in found:
        found.append(flag)


def check_outputs(spec: OutputSpec, values: Sequence[float]) -> list[Violation]:
    """Every output value finite and within ``[spec.min, spec.max]`` (one value per row)."""
    lo = spec.min if spec.min is not None else -math.inf
    hi = spec.max if spec.max is not None else math.inf
    problems: list[Violation] = []
    for i, v in enumerate(values):
        if lo <= v <= hi and math.isfinite(v):  # unbounded (a regression): still finite
            continue
        if not math.isfinite(v):
            problems.append(
                Violation("output_finite", f"model output {v} is not finite", row=i, feature=spec.name)
            )
        else:
            problems.append(
                Violation(
                    "output_range",
                    f"model output {v:g} is outside [{lo:g}, {hi:g}]",
                    row=i,
                    feature=spec.name,
                )
            )
        if len(problems) >= MAX_REPORTED:
            break
    return problems


def check_vectors(spec: OutputSpec, rows: np.ndarray) -> list[Violation]:
    """A multi-class output: each row ``spec.width`` finite probabilities in [0, 1] summing to 1 within
    :data:`registry.schema.SUM_TOLERANCE`."""
    matrix = np.asarray(rows, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[1] != spec.width:
        return [
            Violation(
                "output_shape",
                f"model output has shape {list(matrix.shape)}, the contract says [rows, {spec.width}]",
                feature=spec.name,
            )
        ]
    problems: list[Violation] = []
    with np.errstate(invalid="ignore"):
        finite = np.isfinite(matrix).all(axis=1)
        bad = np.asarray(~finite | (matrix < 0).any(axis=1) | (matrix > 1).any(axis=1))
        off = np.asarray(np.abs(matrix.sum(axis=1) - 1.0) > SUM_TOLERANCE)
    for i in np.flatnonzero(bad | off)[:MAX_REPORTED]:
        row = matrix[i]
        if bad[i]:
            problems.append(
                Violation(
                    "output_range",
                    f"model output {np.round(row, 6).tolist()} holds a value that is not a probability in "
                    "[0, 1]",
                    row=int(i),
                    feature=spec.name,
                )
            )
        else:
            problems.append(
                Violation(
                    "output_sum",
                    f"model output's probabilities sum to {row.sum():.6g}, not 1 (within {SUM_TOLERANCE:g})",
                    row=int(i),
                    feature=spec.name,
                )
            )
    return problems


def output_flags(spec: OutputSpec, values: Sequence[float]) -> list[int]:
    """Rows whose (finite) value lies outside the expected range of a regression's output: flagged, kept."""
    lo, hi = spec.expected_min, spec.expected_max
    if lo is None and hi is None:
        return []
    low = -math.inf if lo is None else lo
    high = math.inf if hi is None else hi
    return [i for i, v in enumerate(values) if math.isfinite(v) and not low <= v <= high]


OUTPUT_FLAG = "output_range"
"""The flag a regression value outside its expected range gets (``"<output>:output_range"``)."""


def _b64(value: Any) -> Any:
    try:
        return base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, TypeError, ValueError):
        return {"b64": value}  # reported as a type violation


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__

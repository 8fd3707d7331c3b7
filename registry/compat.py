"""What a new version changes for the clients of the serving one: the difference of two contracts (pure).

:func:`compare_contracts` lists every change of the input/output contract (``schema.json``) that a client
can notice, each marked *breaking* or not. Breaking: a request today's clients send breaks the new contract
(refused when served here, flagged when ingested) or is read differently, or an answer means something else:

- an input added (every input must be sent, null for a missing value: ``missing_feature``) or removed (a
  request that still sends it: ``unknown_feature``); an input's kind changed (number <-> category string);
- a category dropped under policy ``reject`` (the new version never saw it: refused); an input's policy
  turned to ``reject``; an input that took nulls no longer does, under policy ``reject``;
- the TF Serving signature an imported version's clients speak (``signature.json``): its input or output
  names, dtypes or shapes, or the version answering driftwarden's own API instead (a retrained version);
- the task, the class names or their order (the probabilities' positions), an output's name or width; a
  lower ``max_rows_per_request``.

Not breaking (printed, the promotion proceeds): a category dropped under policy ``flag`` (the request is
still answered, the value flagged as unseen), a category added, an allowed range widened, nulls newly
allowed, a higher row limit, a numeric dtype changed (``int64`` <-> ``float64``: numbers either way), and an
allowed range narrowed: ranges are estimated anew from each training set, and the values the narrower range
refuses lie beyond anything the new version was trained on (the change says which values).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from registry.schema import FeatureKind, FeatureSpec, ModelSchema, Policy
from registry.signature import SourceSignature

SHOWN_VALUES = 8  # categories named in one change's text


@dataclass(frozen=True)
class ContractChange:
    """One difference between the serving version's contract and a candidate's."""

    kind: str  # e.g. input_added, input_removed, input_type, categories_dropped, class_order, task
    subject: str  # the input or output it concerns; "" for the model as a whole
    breaking: bool
    text: str  # one phrase, e.g. "input 'annual_spend' added: clients must send it"
    before: Any = None
    after: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "subject": self.subject,
            "breaking": self.breaking,
            "text": self.text,
            "before": self.before,
            "after": self.after,
        }


@dataclass(frozen=True)
class ContractDiff:
    """Every change from the serving contract to a candidate's, breaking ones first."""

    changes: tuple[ContractChange, ...] = ()

    @property
    def breaking(self) -> list[ContractChange]:
        return [c for c in self.changes if c.breaking]

    @property
    def compatible(self) -> list[ContractChange]:
        return [c for c in self.changes if not c.breaking]

    def to_list(self) -> list[dict[str, Any]]:
        return [c.to_dict() for c in self.changes]

    def __bool__(self) -> bool:
        return bool(self.changes)


def _names(values: tuple[str, ...] | list[str]) -> str:
    shown = ", ".join(values[:SHOWN_VALUES])
    more = len(values) - SHOWN_VALUES
    return f"[{shown}{f', ... {more} more' if more > 0 else ''}]"


def _kind_text(spec: FeatureSpec) -> str:
    return "number" if spec.kind is FeatureKind.NUMERIC else "category string"


def _range_text(low: float | None, high: float | None) -> str:
    return f"[{'-inf' if low is None else format(low, 'g')}, {'inf' if high is None else format(high, 'g')}]"


def _model_changes(old: ModelSchema, new: ModelSchema) -> list[ContractChange]:
    out: list[ContractChange] = []
    if old.task != new.task:
        out.append(
            ContractChange(
                "task",
                "",
                True,
                f"task changed from {old.kind.short} to {new.kind.short}",
                old.task,
                new.task,
            )
        )
    if old.classes != new.classes and (old.classes or new.classes):
        before, after = list(old.classes), list(new.classes)
        if set(old.classes) == set(new.classes):
            text = f"class order changed from {_names(before)} to {_names(after)}"
            out.append(ContractChange("class_order", "", True, text, before, after))
        else:
            text = f"class names changed from {_names(before)} to {_names(after)}"
            out.append(ContractChange("classes", "", True, text, before, after))
    for position, (was, now) in enumerate(zip(old.outputs, new.outputs, strict=False)):
        if was.name != now.name:
            text = f"output {was.name!r} renamed to {now.name!r}"
            out.append(ContractChange("output_renamed", was.name, True, text, was.name, now.name))
        elif was.width != now.width and not (old.classes != new.classes and position == 0):
            text = f"output {was.name!r} width changed from {was.width} to {now.width}"
            out.append(ContractChange("output_width", was.name, True, text, was.width, now.width))
    if len(old.outputs) != len(new.outputs):
        before_names, after_names = [o.name for o in old.outputs], [o.name for o in new.outputs]
        text = f"outputs changed from {_names(before_names)} to {_names(after_names)}"
        out.append(ContractChange("outputs", "", True, text, before_names, after_names))
    if old.max_rows_per_request != new.max_rows_per_request:
        lower = new.max_rows_per_request < old.max_rows_per_request
        text = f"rows per request limit changed from {old.max_rows_per_request} to {new.max_rows_per_request}"
        out.append(
            ContractChange("max_rows", "", lower, text, old.max_rows_per_request, new.max_rows_per_request)
        )
    return out


def _range_change(was: FeatureSpec, now: FeatureSpec) -> ContractChange | None:
    lo0, hi0, lo1, hi1 = was.allowed_min, was.allowed_max, now.allowed_min, now.allowed_max
    if (lo0, hi0) == (lo1, hi1):
        return None
    lower_ok = lo1 is None or (lo0 is not None and lo1 <= lo0)  # the new minimum takes all the old did
    upper_ok = hi1 is None or (hi0 is not None and hi1 >= hi0)
    before, after = _range_text(lo0, hi0), _range_text(lo1, hi1)
    if lower_ok and upper_ok:
        kind, text = "range_widened", f"input {now.name!r} allowed range widened from {before} to {after}"
    else:
        kind = "range_narrowed"
        text = f"input {now.name!r} allowed range narrowed from {before} to {after} (refused outside it)"
    return ContractChange(kind, now.name, False, text, [lo0, hi0], [lo1, hi1])


def _input_changes(was: FeatureSpec, now: FeatureSpec) -> list[ContractChange]:
    name = now.name
    if was.kind is not now.kind:
        text = f"input {name!r} type changed from {_kind_text(was)} to {_kind_text(now)}"
        return [ContractChange("input_type", name, True, text, was.kind.value, now.kind.value)]
    out: list[ContractChange] = []
    if was.dtype != now.dtype:
        text = f"input {name!r} dtype changed from {was.dtype} to {now.dtype} (numbers either way)"
        out.append(ContractChange("input_dtype", name, False, text, was.dtype, now.dtype))
    rejects = now.policy is Policy.REJECT
    if was.policy is not now.policy:
        text = f"input {name!r} policy changed from {was.policy.value} to {now.policy.value}" + (
            " (unseen categories, values outside the training range and nulls are refused)" if rejects else ""
        )
        out.append(ContractChange("policy", name, rejects, text, was.policy.value, now.policy.value))
    if was.nullable and not now.nullable:
        what = "refused" if rejects else "flagged"
        text = f"input {name!r} was missing in training before, not now: a null is {what}"
        out.append(ContractChange("not_nullable", name, rejects, text, True, False))
    elif now.nullable and not was.nullable:
        text = f"input {name!r} may now be null"
        out.append(ContractChange("nullable", name, False, text, False, True))
    if now.kind is FeatureKind.CATEGORICAL:
        dropped = [c for c in was.categories if c not in now.category_set]
        added = [c for c in now.categories if c not in was.category_set]
        if dropped:
            what = "refused" if rejects else "flagged as unseen, still answered"
            text = f"input {name!r} categories dropped: {_names(dropped)} (new to this version: {what})"
            out.append(ContractChange("categories_dropped", name, rejects, text, dropped, None))
        if added:
            text = f"input {name!r} categories added: {_names(added)}"
            out.append(ContractChange("categories_added", name, False, text, None, added))
    else:
        ranged = _range_change(was, now)
        if ranged is not None:
            out.append(ranged)
    return out


def _api(signature: SourceSignature | None) -> str:
    if signature is None:
        return "driftwarden's own API (one value per feature; probability, probabilities or value)"
    tensors = ", ".join(f"{t.name} {t.dtype}{list(t.v2_shape())}" for t in signature.outputs)
    inputs = ", ".join(f"{t.name} {t.dtype}{list(t.v2_shape())}" for t in signature.inputs)
    return f"signature {signature.name!r} (inputs {inputs}; outputs {tensors})"


def signature_changes(
    serving: SourceSignature | None, candidate: SourceSignature | None
) -> list[ContractChange]:
    """The change of the TF Serving signature clients speak (an imported version's own, or driftwarden's)."""
    if serving == candidate:
        return []
    text = f"the serving API changes from {_api(serving)} to {_api(candidate)}: TF Serving clients must adapt"
    before = serving.to_dict() if serving is not None else None
    after = candidate.to_dict() if candidate is not None else None
    return [ContractChange("signature", "", True, text, before, after)]


def compare_contracts(
    serving: ModelSchema,
    candidate: ModelSchema,
    *,
    signatures: tuple[SourceSignature | None, SourceSignature | None] = (None, None),
) -> ContractDiff:
    """Every change a client of ``serving`` would notice if ``candidate`` served instead, breaking first
    (``signatures``: the two versions' recorded TF Serving signatures, None where a version has none)."""
    changes = _model_changes(serving, candidate) + signature_changes(*signatures)
    old = {f.name: f for f in serving.features}
    new_names = set(candidate.feature_names)
    for spec in candidate.features:
        was = old.get(spec.name)
        if was is None:
            null = " (null for a missing value)" if spec.nullable else ""
            text = f"input {spec.name!r} added ({_kind_text(spec)}): clients must send it{null}"
            changes.append(ContractChange("input_added", spec.name, True, text, None, spec.kind.value))
        else:
            changes.extend(_input_changes(was, spec))
    for spec in serving.features:
        if spec.name not in new_names:
            text = (
                f"input {spec.name!r} removed: requests still sending it break the contract (unknown_feature)"
            )
            changes.append(ContractChange("input_removed", spec.name, True, text, spec.kind.value, None))
    ordered = [c for c in changes if c.breaking] + [c for c in changes if not c.breaking]
    return ContractDiff(tuple(ordered))

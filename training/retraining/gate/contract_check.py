"""The input contract check: the candidate's contract against the serving version's, on the holdout."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from registry.compat import ContractDiff, compare_contracts
from registry.contracts import (
    ContractViolation,
    check_inputs,
)
from registry.schema import ModelSchema
from registry.signature import SourceSignature
from training.retraining.gate.figures import SHOWN, json_value, round_figure
from training.retraining.gate.verdict import GateCheck, Verdict


def _as_lists(schema: ModelSchema, columns: Mapping[str, np.ndarray]) -> dict[str, list[Any]]:
    return {name: [json_value(v) for v in columns[name]] for name in schema.feature_names if name in columns}


def input_contract(
    schema: ModelSchema,
    columns: Mapping[str, np.ndarray],
    serving: ModelSchema | None = None,
    signatures: tuple[SourceSignature | None, SourceSignature | None] = (None, None),
) -> GateCheck:
    """The candidate's contract accepts every holdout row and breaks nothing for the clients of ``serving``
    (:func:`registry.compat.compare_contracts`; a breaking change: undecided, a person decides); figures:
    the share rejected, first violations, the contract's changes."""
    diff = compare_contracts(serving, schema, signatures=signatures) if serving is not None else None
    changes = {"contract_changes": diff.to_list()} if diff is not None else {}
    stated = _changes_text(diff)
    missing = [name for name in schema.feature_names if name not in columns]
    if missing:
        return GateCheck(
            "input_contract",
            Verdict.FAILED,
            {"rows": 0, "rejected": None, "missing_features": missing, **changes},
            f"the candidate needs features the holdout lacks: {', '.join(missing)}{stated}",
        )
    values = _as_lists(schema, columns)
    n = len(next(iter(values.values()))) if values else 0
    if n == 0:
        return _contract_verdict(
            diff, {"rows": 0, "rejected": 0, **changes}, f"no holdout rows to check{stated}"
        )
    try:
        checked = check_inputs(schema, values, n, max_rows=n)
    except ContractViolation:
        checked = None
    if checked is not None:
        flagged = sum(1 for f in checked.flags if f)
        return _contract_verdict(
            diff,
            {"rows": n, "rejected": 0, "rejected_share": 0.0, "flagged": flagged, **changes},
            f"the candidate's contract accepts all {n} holdout rows ({flagged} flagged, none rejected)"
            + stated,
        )
    rejected = 0
    first: list[str] = []
    for i in range(n):  # only on failure: which rows, and why
        row = {name: [col[i]] for name, col in values.items()}
        try:
            check_inputs(schema, row, 1, max_rows=1)
        except ContractViolation as exc:
            rejected += 1
            for v in exc.violations:
                if len(first) < SHOWN:
                    first.append(f"holdout row {i}, " + v.describe().removeprefix("row 0, "))
    share = rejected / n
    return GateCheck(
        "input_contract",
        Verdict.FAILED,
        {
            "rows": n,
            "rejected": rejected,
            "rejected_share": round_figure(share),
            "first_violations": first,
            **changes,
        },
        f"the candidate's contract rejects {rejected} of {n} recent rows ({share:.1%}); first: {first[0]}"
        + stated,
    )


def _changes_text(diff: ContractDiff | None) -> str:
    """The contract's changes from the serving version's, as the end of a check's message."""
    if not diff:
        return ""
    listed = "; ".join(f"{'BREAKING: ' if c.breaking else ''}{c.text}" for c in diff.changes[:SHOWN])
    more = f"; and {len(diff.changes) - SHOWN} more" if len(diff.changes) > SHOWN else ""
    return f"; changes for the serving version's clients: {listed}{more}"


def _contract_verdict(diff: ContractDiff | None, figures: dict[str, Any], message: str) -> GateCheck:
    """Passed, or undecided when the contract breaks the serving version's clients: a person decides."""
    if diff is not None and diff.breaking:
        return GateCheck(
            "input_contract",
            Verdict.UNDECIDED,
            figures,
            f"{message}; a person decides: promote with --accept-contract-change, or reject the candidate",
        )
    return GateCheck("input_contract", Verdict.PASSED, figures, message)

"""Registry commands (``driftwarden models ...``): list, show, promote, rollback, label, reject.

Bad input (an unknown model or version, a malformed name or version, a change the state does not allow)
raises a :class:`core.errors.DomainError`; the root command prints it as one line and exits 2.
Module-level imports stay light (typer only).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from core.cli_options import JsonOut, write_json, write_text
from core.terminal import make_console

if TYPE_CHECKING:
    from registry.compat import ContractDiff
    from registry.models import ModelDetail, VersionDetail, VersionEventRead

ACTOR = "cli"
models_app = typer.Typer(
    help="The model registry: list, show, promote, roll back, label and reject versions.",
    no_args_is_help=True,
)
EMPTY_HINT = (
    "Train and register one (a staged version):\n"
    "  driftwarden data generate --out data.csv   # or bring your own CSV with a 0/1 target column\n"
    "  driftwarden train --model credit --data data.csv --mode local\n"
    "then put it into serving with `driftwarden models promote credit 1`"
)


@models_app.command("list")
def models_list(
    model: Annotated[str | None, typer.Option("--model", "-m", help="Only this model.")] = None,
    as_json: JsonOut = None,
) -> None:
    """List registered versions with state, task, the task's held-out metrics and lineage.

    Metrics per task: binary AUC and accuracy, multi-class accuracy and macro-F1, regression MAE and RMSE.
    """
    from rich.table import Table

    from core.database import open_database
    from registry.models import ModelVersionRead
    from registry.names import check_name
    from registry.service import list_versions

    if model is not None:
        check_name(model, given_as="--model")
    db = open_database()
    try:
        with db.session() as session:
            rows = [
                ModelVersionRead.model_validate(r) for r in list_versions(session=session, model_name=model)
            ]
    finally:
        db.dispose()
    if as_json is not None:
        write_json([r.model_dump(mode="json") for r in rows], to=as_json)
        return
    if not rows:
        nothing = f"no versions of model {model!r} registered." if model else "no versions registered yet."
        typer.echo(f"{nothing} {EMPTY_HINT}")
        return
    table = Table(title="Registered model versions")
    for col in ("model", "version", "state", "task", "held-out metrics", "mode", "rows", "created"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r.model_name,
            str(r.version),
            r.state.value + (f" ({r.state_reason})" if r.state_reason else ""),
            _task(r.metrics, r.lineage),
            _headline(r.metrics, r.lineage) or "-",
            _mode(r.lineage),
            str(r.lineage.get("train_rows", r.lineage.get("reference_rows", ""))),
            r.created_at.strftime("%Y-%m-%d %H:%M:%S"),
        )
    make_console().print(table)


@models_app.command("show")
def models_show(
    ref: Annotated[str, typer.Argument(metavar="NAME[:VERSION]", help="A model, or one version of it.")],
    as_json: JsonOut = None,
) -> None:
    """Show a model (versions, labels, state history) or one version (schema, metrics, lineage, history)."""
    from core.database import open_database
    from registry.names import parse_ref
    from registry.service import show

    name, version = parse_ref(ref)
    db = open_database()
    try:
        with db.session() as session:
            detail = show(session=session, model_name=name, version=version)
    finally:
        db.dispose()
    if as_json is not None:
        write_text(detail.model_dump_json(indent=2), to=as_json)
        return
    if version is None:
        _print_model(detail)
    else:
        _print_version(detail.versions[0])


@models_app.command("promote")
def models_promote(
    name: Annotated[str, typer.Argument(help="Model name.")],
    version: Annotated[str, typer.Argument(help="Version to serve (a staged or archived one).")],
    accept_contract_change: Annotated[
        bool,
        typer.Option(
            "--accept-contract-change",
            help="Promote even though the version's contract breaks today's clients (an input added or "
            "removed, a type changed, a category dropped, other classes or class order, another task).",
        ),
    ] = False,
) -> None:
    """Make VERSION the serving version of NAME; the version serving so far is archived.

    Its input/output contract is compared with the serving version's: a change that breaks today's
    clients is refused with the list (--accept-contract-change goes ahead); a compatible one is printed.
    A running `driftwarden serve` loads it within its poll interval (DRIFTWARDEN_MODEL_POLL_INTERVAL_S),
    without a restart. A version served elsewhere becomes the one monitored.
    """
    from core.database import open_database
    from registry.names import check_name, parse_version
    from registry.service import promote_version, served_elsewhere

    check_name(name)
    number = parse_version(version)
    db = open_database()
    try:
        with db.session() as session:
            done = promote_version(
                session=session,
                model_name=name,
                version=number,
                actor=ACTOR,
                accept_contract_change=accept_contract_change,
            )
            elsewhere = served_elsewhere(done.row)
    finally:
        db.dispose()
    if not done.changed:
        typer.echo(f"{name}:{number} is already {_now(elsewhere)}; nothing changed")
        return
    archived = f"; {name}:{done.previous} archived" if done.previous is not None else ""
    typer.echo(f"{name}:{number} is now {_now(elsewhere)}{archived}")
    _print_changes(done.changes, since=done.previous)
    if done.not_compared:
        typer.echo(f"contracts not compared: {done.not_compared}")


@models_app.command("rollback")
def models_rollback(name: Annotated[str, typer.Argument(help="Model name.")]) -> None:
    """Serve the previous serving version of NAME again; the current one is archived.

    Rolling back twice returns to the version rolled back from (reject a version to rule it out). It is
    never refused for its contract (it served before); what it changes for clients is printed.
    """
    from core.database import open_database
    from registry.names import check_name
    from registry.service import (
        ContractUnreadable,
        contract_diff,
        rollback,
        rollback_target,
        served_elsewhere,
        serving_version,
    )

    check_name(name)
    db = open_database()
    try:
        with db.session() as session:
            before = serving_version(session=session, model_name=name)
            try:
                compared = contract_diff(
                    session=session, row=rollback_target(session=session, model_name=name)
                )
            except ContractUnreadable:
                compared = None
            row = rollback(session=session, model_name=name, actor=ACTOR)
            elsewhere = served_elsewhere(row)
    finally:
        db.dispose()
    was = f" (from {before.version})" if before is not None else ""
    typer.echo(f"{name}: rolled back to version {row.version}{was}; it is now {_now(elsewhere)}")
    if compared is not None:
        _print_changes(compared[1], since=compared[0])


@models_app.command("label")
def models_label(
    name: Annotated[str, typer.Argument(help="Model name.")],
    label: Annotated[str, typer.Argument(help="Label, e.g. stable or canary (same rule as model names).")],
    version: Annotated[str, typer.Argument(help="Version the label points to.")],
) -> None:
    """Point LABEL of NAME at VERSION (served at /v1/models/NAME/labels/LABEL:predict)."""
    from core.database import open_database
    from registry.names import check_label, check_name, parse_version
    from registry.service import labels_of, set_label

    check_name(name)
    check_label(label)
    number = parse_version(version)
    db = open_database()
    try:
        with db.session() as session:
            before = labels_of(session=session, model_name=name).get(label)
            set_label(session=session, model_name=name, label=label, version=number, actor=ACTOR)
    finally:
        db.dispose()
    moved = f" (moved from {before})" if before is not None and before != number else ""
    typer.echo(f"{name}: label {label!r} -> version {number}{moved}")


@models_app.command("reject")
def models_reject(
    name: Annotated[str, typer.Argument(help="Model name.")],
    version: Annotated[str, typer.Argument(help="Version to reject.")],
    reason: Annotated[str, typer.Option("--reason", help="Why (kept in the version's history).")],
) -> None:
    """Mark VERSION of NAME rejected: it can no longer serve or carry a label."""
    from core.database import open_database
    from registry.names import check_name, parse_version
    from registry.service import reject

    check_name(name)
    number = parse_version(version)
    db = open_database()
    try:
        with db.session() as session:
            row = reject(session=session, model_name=name, version=number, reason=reason, actor=ACTOR)
    finally:
        db.dispose()
    typer.echo(f"{name}:{row.version} rejected ({row.state_reason})")


def _now(elsewhere: bool) -> str:
    """What a version in state serving is: served here, or (a version served elsewhere) monitored."""
    return "monitored (served elsewhere)" if elsewhere else "serving"


def _print_changes(diff: ContractDiff | None, *, since: int | None) -> None:
    """What the version now serving changed for clients of version ``since``, one line each."""
    if not diff:
        return
    typer.echo(f"contract changes for clients of version {since}:")
    for change in diff.changes:
        typer.echo(f"  {'BREAKING' if change.breaking else 'compatible'}: {change.text}")


HEADLINE_METRICS = {
    "binary": (("roc_auc", "auc"), ("accuracy", "accuracy")),
    "multiclass": (("accuracy", "accuracy"), ("macro_f1", "macro-F1")),
    "regression": (("mae", "MAE"), ("rmse", "RMSE")),
}
"""Each task's headline metrics, as `models list` and `models show NAME` name them."""


def _task(metrics: dict[str, Any], lineage: dict[str, Any]) -> str:
    """A version's task in short (its lineage's; else read from which metrics it has)."""
    task = lineage.get("task")
    if task in HEADLINE_METRICS:
        return str(task)
    if "rmse" in metrics or "mae" in metrics:
        return "regression"
    return "multiclass" if "macro_f1" in metrics else "binary"


def _headline(metrics: dict[str, Any], lineage: dict[str, Any]) -> str:
    """The task's headline metrics that the version has, e.g. ``auc 0.9433  accuracy 0.9012``."""
    shown = [
        f"{label} {_fmt(metrics[key])}"
        for key, label in HEADLINE_METRICS[_task(metrics, lineage)]
        if _fmt(metrics.get(key))
    ]
    return "  ".join(shown)


def _fmt(value: object) -> str:
    return f"{value:.4f}" if isinstance(value, float) else ""


def _event_line(e: VersionEventRead) -> str:
    at = e.at.strftime("%Y-%m-%d %H:%M:%S")
    if e.label is not None:
        change = f"label {e.label!r} -> {e.version}"
    else:
        before = e.from_state.value if e.from_state else "(new)"
        change = f"{before} -> {e.to_state.value if e.to_state else ''}"
    why = f": {e.reason}" if e.reason else ""
    return f"  {at}  v{e.version:<4} {e.action.value:<9} {change}  by {e.actor}{why}"


def _mode(lineage: dict[str, Any]) -> str:
    """How a version came to be: its training mode, ``import``, or ``served elsewhere``."""
    from registry.service import SERVED_ELSEWHERE

    if lineage.get("serving") == SERVED_ELSEWHERE:
        return "served elsewhere"
    return str(lineage.get("mode") or ("import" if lineage.get("source") == "import" else ""))


def _print_model(detail: ModelDetail) -> None:
    from registry.service import SERVED_ELSEWHERE

    typer.echo(f"model {detail.model_name}")
    typer.echo(f"  serving: {detail.serving if detail.serving is not None else '(none)'}")
    labels = ", ".join(f"{k} -> {v}" for k, v in detail.labels.items()) or "(none)"
    typer.echo(f"  labels: {labels}")
    typer.echo("versions:")
    for v in detail.versions:
        reason = f" ({v.state_reason})" if v.state_reason else ""
        tags = f" [{', '.join(v.labels)}]" if v.labels else ""
        tags += "  served elsewhere" if v.lineage.get("serving") == SERVED_ELSEWHERE else ""
        headline = _headline(v.metrics, v.lineage) or "no held-out metrics"
        typer.echo(
            f"  {v.version:<5} {v.state.value}{reason}{tags}  {headline}"
            f"  created {v.created_at:%Y-%m-%d %H:%M:%S}"
        )
    _print_history(detail.history)


def _print_version(v: VersionDetail) -> None:
    from registry.service import SERVED_ELSEWHERE

    reason = f" ({v.state_reason})" if v.state_reason else ""
    elsewhere = (
        " (served elsewhere: monitored, not served here)"
        if v.lineage.get("serving") == SERVED_ELSEWHERE
        else ""
    )
    typer.echo(f"model {v.model_name} version {v.version}: {v.state.value}{reason}{elsewhere}")
    typer.echo(f"  labels: {', '.join(v.labels) or '(none)'}")
    typer.echo(f"  path: {v.path}")
    typer.echo(f"  created: {v.created_at:%Y-%m-%d %H:%M:%S %Z}")
    if v.parent_version is not None:
        typer.echo(f"  parent version: {v.parent_version}")
    typer.echo("schema:")
    if v.schema_summary is None:
        typer.echo(f"  {v.schema_error or '(not available)'}")
    else:
        s = v.schema_summary
        typer.echo(f"  target {s.target!r} ({s.task}); outputs: {', '.join(s.outputs)}")
        for f in s.features:
            if f.kind == "numeric":
                what = f"range {f.observed_min:g} .. {f.observed_max:g}" if f.observed_min is not None else ""
            else:
                shown = ", ".join(f.categories[:6]) + (", ..." if len(f.categories) > 6 else "")
                what = f"{len(f.categories)} categories: {shown}"
            null = f", missing {f.missing_rate:.1%}" if f.nullable else ""
            typer.echo(f"  {f.name:<20} {f.kind:<12} {f.dtype:<8} {what}{null}")
    typer.echo("metrics:")
    for key, value in sorted(v.metrics.items()):
        typer.echo(f"  {key}: {_fmt(value) or json.dumps(value)}")
    typer.echo("lineage:")
    for key, value in sorted(v.lineage.items()):
        typer.echo(f"  {key}: {value if isinstance(value, str) else json.dumps(value)}")
    _print_history(v.history)


def _print_history(events: list[VersionEventRead]) -> None:
    typer.echo("history (oldest first):")
    if not events:
        typer.echo("  (none recorded)")
    for e in events:
        typer.echo(_event_line(e))


def register(app: typer.Typer) -> None:
    """Add the registry's commands (``models ...``) to the root CLI."""
    app.add_typer(models_app, name="models")

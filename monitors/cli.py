"""Monitor commands (``driftwarden drift``, ``driftwarden monitor``): owned by the monitors domain.

Module-level imports stay light (typer only); numpy, scipy and the engine load inside the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    import numpy as np

    from monitors.profile import Profile
    from registry.schema import ModelSchema


def _infer_schema(columns: dict[str, np.ndarray], *, exclude: set[str], target: str | None) -> ModelSchema:
    from registry.schema import ModelSchema, OutputSpec, infer_feature

    features = tuple(infer_feature(name, col) for name, col in columns.items() if name not in exclude)
    return ModelSchema(features=features, outputs=(OutputSpec(name="probability"),), target=target or "")


def _reference_from_version(spec: str) -> tuple[Profile, ModelSchema]:
    from core.config import get_settings
    from monitors.profile import profile_from_dict
    from registry.service import read_meta, read_schema, version_dir

    name, _, version = spec.rpartition(":")
    if not name or not version.isdigit():
        raise typer.BadParameter(f"expected NAME:VERSION, got {spec!r}", param_hint="--reference-version")
    path = version_dir(registry=get_settings().registry_path, model_name=name, version=int(version))
    if not path.exists():
        raise typer.BadParameter(f"no registered version at {path}", param_hint="--reference-version")
    return profile_from_dict(read_meta(path=path, name="profile")), read_schema(path=path)


def drift_cmd(
    files: Annotated[
        list[Path],
        typer.Argument(help="REFERENCE CURRENT (.csv/.parquet); only CURRENT with --reference-version."),
    ],
    schema_file: Annotated[
        Path | None,
        typer.Option("--schema", help="schema.json of the model (default: inferred from REFERENCE)."),
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the full report as JSON here.")
    ] = None,
    html_out: Annotated[Path | None, typer.Option("--html", help="Write an HTML report here.")] = None,
    reference_version: Annotated[
        str | None,
        typer.Option("--reference-version", help="Use a registered version's profile: NAME:VERSION."),
    ] = None,
    target: Annotated[str | None, typer.Option("--target", help="Label column (not a feature).")] = None,
    prediction_column: Annotated[
        str | None, typer.Option("--prediction-column", help="Column holding the model's probability.")
    ] = None,
    config_file: Annotated[
        Path | None, typer.Option("--config", help="Monitor config JSON (tests, thresholds, overrides).")
    ] = None,
    alpha: Annotated[float | None, typer.Option("--alpha", help="Significance level.")] = None,
    drift_share: Annotated[
        float | None, typer.Option("--drift-share", help="Share of drifted features.")
    ] = None,
) -> None:
    """Compare two tabular files (or a registered profile and a file); exit 1 when the dataset drifted."""
    import json

    import numpy as np

    from core.tabular import read_table
    from monitors.config import MonitorConfig
    from monitors.console import print_report
    from monitors.engine import compare
    from monitors.html import render_html
    from monitors.profile import build_reference_profile, profile_from_dict
    from registry.schema import ModelSchema

    if reference_version is not None:
        if len(files) != 1:
            raise typer.BadParameter("with --reference-version give only CURRENT", param_hint="FILES")
        profile, schema = _reference_from_version(reference_version)
        current_path = files[0]
    else:
        if len(files) != 2:
            raise typer.BadParameter("give REFERENCE and CURRENT", param_hint="FILES")
        reference = read_table(files[0])
        current_path = files[1]
        schema_target = None
        if schema_file is not None:
            schema = ModelSchema.from_dict(json.loads(schema_file.read_text()))
            schema_target = schema.target
        else:
            exclude = {c for c in (target, prediction_column) if c}
            schema = _infer_schema(reference, exclude=exclude, target=target)
        preds = reference.get(prediction_column) if prediction_column else None
        label_col = target or schema_target
        labels = reference.get(label_col) if label_col and preds is not None else None
        profile = profile_from_dict(
            build_reference_profile(reference, schema, predictions=preds, labels=labels)
        )
    current = read_table(current_path)
    missing = [f for f in schema.feature_names if f not in current]
    if missing:
        raise typer.BadParameter(f"CURRENT lacks feature columns {missing}", param_hint="FILES")
    config: dict[str, Any] = json.loads(config_file.read_text()) if config_file else {}
    if alpha is not None:
        config["alpha"] = alpha
    if drift_share is not None:
        config["drift_share"] = drift_share
    cur_preds = current.get(prediction_column) if prediction_column else None
    label_col = target or (schema.target or None)
    cur_labels = current.get(label_col) if label_col and cur_preds is not None else None
    report = compare(
        profile=profile,
        columns={f: current[f] for f in schema.feature_names},
        predictions=None if cur_preds is None else np.asarray(cur_preds, dtype=np.float64),
        labels=cur_labels,
        config=MonitorConfig.model_validate(config),
    )
    print_report(report)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(report.as_dict(), indent=2, allow_nan=False))
    if html_out is not None:
        html_out.parent.mkdir(parents=True, exist_ok=True)
        html_out.write_text(render_html(report, title=f"Drift report: {current_path.name}"))
    raise typer.Exit(code=1 if report.drifted else 0)


def monitor_cmd(
    once: Annotated[
        bool, typer.Option("--once", help="One pass over every serving model, then exit.")
    ] = False,
    model: Annotated[
        list[str] | None, typer.Option("--model", "-m", help="Only these models (repeatable).")
    ] = None,
    interval: Annotated[
        float | None, typer.Option("--interval", min=0.1, help="Seconds between passes (default: settings).")
    ] = None,
) -> None:
    """Evaluate drift of every serving model every interval, as its own process (or once with --once).

    Reads windows from the prediction log (DRIFTWARDEN_MONITOR_WINDOW_ROWS / _MINUTES, or the model's
    monitor.json) and stores each run; the server shows them on /v1/models/{name}/drift.
    """
    import logging

    from core.config import get_settings
    from monitors.scheduled import run_process

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = get_settings()
    if interval is not None:
        settings = settings.model_copy(update={"monitor_interval_s": interval})
    try:
        results = run_process(settings=settings, once=once, only=model or None)
    except KeyboardInterrupt:
        raise typer.Exit(code=0) from None
    if not results:
        typer.echo("no serving model to monitor")
    for r in results:
        typer.echo(r.describe())
    if results and all(r.outcome is None for r in results):
        raise typer.Exit(code=2)


def register(app: typer.Typer) -> None:
    """Add the monitors' commands to the root CLI."""
    app.command("drift")(drift_cmd)
    app.command("monitor")(monitor_cmd)

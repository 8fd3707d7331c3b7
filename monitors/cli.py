"""Monitor commands (``driftwarden drift``, ``driftwarden monitor``, ``driftwarden report``, ``driftwarden
reports link``): owned by the monitors domain.

Both answer with one exit-code contract a CI gate can trust: 0 = no drift, 1 = drift, 2 = the check could
not be made (a usage or input error, too few rows, a model that could not be evaluated). Errors are
:class:`core.errors.Invalid` (or subclasses), which the root command prints as one line.
Module-level imports stay light (typer only); numpy, scipy and the engine load inside the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from core.bounds import MAX_PASS_INTERVAL_S
from core.cli_options import STDOUT, JsonOut, check_target, write_text
from core.errors import Invalid
from core.terminal import note

if TYPE_CHECKING:
    from core.config import Settings
    from monitors.config import MonitorConfig
    from monitors.offline import RegisteredReference
    from monitors.report import DriftReport
    from registry.schema import ModelSchema


# The exit codes of `drift` and `monitor` are in the root's one table (service/cli_habits.py, docs/cli.md).


def _read_json(path: Path, *, option: str) -> Any:
    import json

    try:
        text = path.read_text()
    except FileNotFoundError:
        raise Invalid(f"{option} {path}: file not found (check the path)") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise Invalid(f"{option} {path}: cannot read it ({reason}); give a JSON file") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise Invalid(f"{option} {path} is not valid JSON: {exc}") from None


def _read_schema(path: Path) -> ModelSchema:
    from registry.schema import ModelSchema

    data = _read_json(path, option="--schema")
    try:
        if not isinstance(data, dict):
            raise TypeError("expected a JSON object")
        return ModelSchema.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        reason = f"missing key {exc}" if isinstance(exc, KeyError) else str(exc)
        raise Invalid(
            f"--schema {path} is not a model schema ({reason}); give the schema.json of a registered "
            "version (<registry>/NAME/VERSION/driftwarden/schema.json)"
        ) from None


def _monitor_config(
    config_file: Path | None, *, alpha: float | None, drift_share: float | None
) -> MonitorConfig:
    """The monitor config from ``--config`` with ``--alpha`` / ``--drift-share`` on top, validated."""
    from pydantic import ValidationError

    from monitors.config import MonitorConfig

    data: Any = _read_json(config_file, option="--config") if config_file is not None else {}
    if not isinstance(data, dict):
        raise Invalid(f'--config {config_file} must hold a JSON object like {{"alpha": 0.01}}')
    options = {"alpha": alpha, "drift_share": drift_share}
    data.update({k: v for k, v in options.items() if v is not None})
    try:
        return MonitorConfig.model_validate(data)
    except ValidationError as exc:

        def where(loc: tuple[Any, ...]) -> str:
            field = ".".join(str(part) for part in loc)
            if loc and loc[0] in options and options[str(loc[0])] is not None:
                return "--" + str(loc[0]).replace("_", "-")
            return f"--config {config_file} field {field!r}"

        problems = "; ".join(f"{where(tuple(e['loc']))}: {e['msg']}" for e in exc.errors())
        raise Invalid(f"invalid monitor settings: {problems}") from None


def _reference_from_version(spec: str) -> RegisteredReference:
    from core.config import get_settings
    from monitors.offline import RegisteredReference
    from monitors.profile import profile_from_dict
    from registry.names import parse_ref
    from registry.service import read_meta, read_schema, version_dir

    try:
        name, version = parse_ref(spec)
    except Invalid as exc:
        raise Invalid(f"--reference-version: {exc}") from None
    if version is None:
        raise Invalid(f"--reference-version: expected NAME:VERSION (e.g. credit:3), got {spec!r}")
    path = version_dir(registry=get_settings().registry_path, model_name=name, version=version)
    if not path.exists():
        raise Invalid(
            f"--reference-version {spec}: no registered version at {path} (see `driftwarden models list`)"
        )
    try:
        profile, schema = profile_from_dict(read_meta(path=path, name="profile")), read_schema(path=path)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise Invalid(
            f"--reference-version {spec}: its profile or schema under {path / 'driftwarden'} is unreadable "
            f"({type(exc).__name__}: {exc})"
        ) from None
    return RegisteredReference(ref=spec, profile=profile, schema=schema, path=path)


def _check_outputs(json_out: Path | None, html_out: Path | None) -> None:
    """Fail before any work when an output cannot be written where asked."""
    if json_out is not None and html_out is not None and str(json_out) == str(html_out) == STDOUT:
        raise Invalid("--json - and --html - both ask for standard output: send one of them to a file")
    for option, path, suffix in (("--json", json_out, ".json"), ("--html", html_out, ".html")):
        if path is not None:
            check_target(path, option=option, example=f"drift-report{suffix}")


def _engine_settings(settings: Settings, *, engine: str | None, spark_master: str | None) -> Settings:
    """``settings`` with the --engine and --spark-master of the command line."""
    if engine is not None and engine not in ("database", "spark"):
        raise typer.BadParameter(f"{engine!r} is not an engine: database or spark", param_hint="--engine")
    update: dict[str, Any] = {"monitor_engine": engine} if engine else {}
    if spark_master:
        update["spark_master"] = spark_master
    return settings.model_copy(update=update) if update else settings


def _numpy_settings() -> None:
    """Settings numpy reads when it loads (:mod:`core.numpy_settings`: one OpenBLAS thread, no huge pages)."""
    from core.numpy_settings import numpy_settings

    numpy_settings()


def drift_cmd(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="REFERENCE CURRENT (.csv or .tsv, also compressed: .csv.gz, .bz2, .zst, .lz4; or .parquet); "
            "only CURRENT with --reference-version."
        ),
    ],
    schema_file: Annotated[
        Path | None,
        typer.Option("--schema", help="schema.json of the model (default: inferred from REFERENCE)."),
    ] = None,
    json_out: JsonOut = None,
    html_out: Annotated[
        Path | None, typer.Option("--html", help="Write an HTML report here ('-': standard output).")
    ] = None,
    reference_version: Annotated[
        str | None,
        typer.Option("--reference-version", help="Use a registered version's profile: NAME:VERSION."),
    ] = None,
    target: Annotated[
        str | None,
        typer.Option(
            "--target",
            help="Label column (not a feature), by the task of --reference-version or --schema (else "
            "binary): 0/1, class names or their indices (multi-class), numbers (regression).",
        ),
    ] = None,
    prediction_column: Annotated[
        str | None,
        typer.Option(
            "--prediction-column",
            help="Column holding the model's probability (binary) or predicted value (regression); "
            "not for a multi-class version.",
        ),
    ] = None,
    config_file: Annotated[
        Path | None, typer.Option("--config", help="Monitor config JSON (tests, thresholds, overrides).")
    ] = None,
    alpha: Annotated[float | None, typer.Option("--alpha", help="Significance level.")] = None,
    drift_share: Annotated[
        float | None, typer.Option("--drift-share", help="Share of drifted features.")
    ] = None,
    min_rows: Annotated[
        int | None,
        typer.Option(
            "--min-rows",
            min=1,
            help="Fewer rows in REFERENCE or CURRENT is insufficient data, exit 2 "
            "(default: DRIFTWARDEN_DRIFT_MIN_ROWS, 30).",
        ),
    ] = None,
) -> None:
    """Compare two tabular files (or a registered profile and a file): exit 0 when stable, 1 when drifted.

    Before comparing, both sides are checked: too few rows, unknown --target/--prediction-column, a feature
    with no value, text where the reference has numbers, labels that are not the task's (0/1 for a binary
    model) all stop with exit 2. With --reference-version only that version's features are compared; the
    file's other columns are listed once as ignored. With --json - or --html - the report goes to standard
    output and the table to standard error.
    """
    _numpy_settings()  # before numpy loads
    from core.config import get_settings
    from monitors.offline import compare, explain_comparison

    json_path = None if json_out is None else Path(json_out)
    _check_outputs(json_path, html_out)
    config = _monitor_config(config_file, alpha=alpha, drift_share=drift_share)
    minimum = min_rows or get_settings().drift_min_rows
    schema = _read_schema(schema_file) if schema_file is not None else None
    current, reference = _drift_sides(files, reference_version=reference_version)
    compared = compare(
        current,
        reference=reference,
        schema=schema,
        schema_source=f"--schema {schema_file}",
        target=target,
        prediction=prediction_column,
        min_rows=minimum,
        config=config,
        hint=f" (check --config {config_file})" if config_file is not None else "",
    )
    version_dir = None if isinstance(reference, Path) else reference.path
    report = explain_comparison(compared, config=config, version_dir=version_dir)
    _show_drift(report, current=current, json_out=json_path, html_out=html_out)
    _no_collection_at_exit()
    raise typer.Exit(code=1 if report.drifted else 0)


def _no_collection_at_exit() -> None:
    """Freeze the objects alive when the process exits: the interpreter's exit collections would walk every
    one of them (the imported modules', ~0.1 s after a 1M-row comparison) and find no garbage to free."""
    import atexit
    import gc

    atexit.unregister(gc.freeze)  # once, however often the command runs in one process (tests)
    atexit.register(gc.freeze)


def _drift_sides(
    files: list[Path], *, reference_version: str | None
) -> tuple[Path, Path | RegisteredReference]:
    """CURRENT and what it is compared with: REFERENCE, or the profile of ``--reference-version``."""
    if reference_version is not None:
        if len(files) != 1:
            raise typer.BadParameter("with --reference-version give only CURRENT", param_hint="FILES")
        return files[0], _reference_from_version(reference_version)
    if len(files) != 2:
        raise typer.BadParameter("give REFERENCE and CURRENT", param_hint="FILES")
    return files[1], files[0]


def _show_drift(report: DriftReport, *, current: Path, json_out: Path | None, html_out: Path | None) -> None:
    """The report's table (on standard error when a report goes to standard output), then its files."""
    import json

    from core.terminal import make_console
    from monitors.console import print_report

    to_stdout = STDOUT in {str(json_out), str(html_out)}
    print_report(report, console=make_console(stderr=True) if to_stdout else None)
    if json_out is not None:
        write_text(json.dumps(report.as_dict(), indent=2, allow_nan=False), to=json_out)
    if html_out is not None:
        from monitors.html import render_html  # here: only --html pays for it

        page = render_html(report, title=f"Drift report: {current.name}")
        write_text(page, to=html_out, option="--html", what="the HTML report")


class NotEvaluated(Invalid):
    """``driftwarden monitor --once`` could not evaluate a model (or had none to evaluate)."""


MONITOR_HELP = (
    "Evaluate drift of every serving model every interval, as its own process (or once with --once)."
)


def monitor_cmd(
    ctx: typer.Context,
    once: Annotated[
        bool, typer.Option("--once", help="One pass over every serving model, then exit.")
    ] = False,
    model: Annotated[
        list[str] | None, typer.Option("--model", "-m", help="Only these models (repeatable).")
    ] = None,
    interval: Annotated[
        float | None,
        typer.Option(
            "--interval", min=0.1, max=MAX_PASS_INTERVAL_S, help="Seconds between passes (default: settings)."
        ),
    ] = None,
    fail_on_skip: Annotated[
        bool,
        typer.Option(
            "--fail-on-skip",
            help="With --once: exit 2 when a model was skipped for too few predictions in its window "
            "(default: reported as skipped, exit 0 or 1 by the others).",
        ),
    ] = False,
    backfill: Annotated[
        bool,
        typer.Option(
            "--backfill",
            help="Evaluate the past windows of one --model by the predictions' own times (imported history) "
            "instead of its current window: one stored run per window, no notifications.",
        ),
    ] = False,
    since: Annotated[
        str, typer.Option("--since", help="With --backfill: how far back, e.g. 30d, 2w, 12h.")
    ] = "30d",
    every: Annotated[
        str, typer.Option("--every", help="With --backfill: the length of each window, e.g. 1d, 6h.")
    ] = "1d",
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            help="Where windows are sketched: database (the log's tables) or spark (the lake of "
            "DRIFTWARDEN_LAKE_URL on a Spark cluster). Default: DRIFTWARDEN_MONITOR_ENGINE.",
        ),
    ] = None,
    spark_master: Annotated[
        str | None,
        typer.Option(
            "--spark-master",
            help="With --engine spark: the master URL (spark://host:7077, local[2], ...). "
            "Default: DRIFTWARDEN_SPARK_MASTER.",
        ),
    ] = None,
) -> None:
    """Evaluate drift of every serving model every interval, as its own process (or once with --once).

    Reads windows from the prediction log (the model's own window of `driftwarden monitor config NAME`,
    else DRIFTWARDEN_MONITOR_WINDOW_ROWS / _MINUTES) and stores each run; the server shows them on
    /v1/models/{name}/drift. With --once each model gets one line: its run, or why it was skipped.

    With --engine spark each window is sketched from the Parquet lake (DRIFTWARDEN_LAKE_URL) on the Spark
    cluster of --spark-master: whole hours counted once and kept, labels joined in Spark
    (docs/monitoring.md, "The spark engine"); a lake or master that cannot be read is one line, exit 2.

    With --backfill --model NAME it instead evaluates each window of length --every within the last --since
    (on the grid of --every: days end at UTC midnight), stores each run at its window's end (the drift
    history shows them on their own time axis), skips windows that already have a run and windows with
    fewer than DRIFTWARDEN_MONITOR_MIN_ROWS predictions, and notifies nobody.
    """
    if ctx.invoked_subcommand is not None:
        return
    if backfill:
        from monitors.cli_backfill import run_backfill

        run_backfill(model or [], since=since, every=every)
        return
    import logging

    from core.config import get_settings
    from core.logs import quiet_libraries
    from core.terminal import is_quiet
    from monitors.scheduled import run_process

    level = logging.WARNING if is_quiet() else logging.INFO  # --quiet: no INFO lines
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    quiet_libraries()  # no alembic / TensorFlow INFO lines in the output
    settings = get_settings()
    if interval is not None:
        settings = settings.model_copy(update={"monitor_interval_s": interval})
    settings = _engine_settings(settings, engine=engine, spark_master=spark_master)
    if not once:  # a long-lived process: its freed window buffers go back to the system (core/memory.py)
        from core.memory import fix_mmap_threshold

        fix_mmap_threshold(settings.malloc_mmap_threshold_kb * 1024)
    try:
        results = run_process(settings=settings, once=once, only=model or None)
    except KeyboardInterrupt:
        raise typer.Exit(code=0) from None
    for r in results:
        typer.echo(r.describe())
    evaluated = {r.model_name for r in results}
    thin = [r for r in results if r.outcome is None and r.too_few_rows]
    problems = [
        f"{r.model_name} ({r.skipped or r.failed})"
        for r in results
        if r.outcome is None and (fail_on_skip or not r.too_few_rows)
    ]
    problems += [
        f"{name} (not a serving model: register and promote a version, see `driftwarden models list`)"
        for name in dict.fromkeys(model or [])
        if name not in evaluated
    ]
    if thin and not fail_on_skip:
        note(
            f"{len(thin)} model(s) skipped for too few predictions: {', '.join(r.model_name for r in thin)} "
            "(--fail-on-skip makes this exit 2)"
        )
    if not results and not problems:
        raise NotEvaluated(
            "no serving model to monitor: promote a version first (see `driftwarden models list`)"
        )
    if problems:
        raise NotEvaluated(f"could not evaluate {len(problems)} model(s): {'; '.join(problems)}")
    if any(r.outcome is not None and r.outcome.report.drifted for r in results):
        raise typer.Exit(code=1)


reports_app = typer.Typer(
    help="The served HTML drift reports (GET /reports/MODEL/drift): links a browser can open.",
    no_args_is_help=True,
)
LINK_EPILOG = (
    "[b]Example[/b]\n\n"
    "driftwarden reports link credit --ttl 1d\n\n"
    "prints https://dw.example.com/reports/credit/drift?expires=...&signature=... (the base is "
    "DRIFTWARDEN_PUBLIC_URL, else http://API_HOST:API_PORT), alone on stdout; its expiry goes to stderr. "
    "Anyone holding the link reads that model's report until it expires, without a token: share it like a "
    "password. `driftwarden tokens rotate-link-key` invalidates every link made before."
)


@reports_app.command("link", epilog=LINK_EPILOG)
def report_link_cmd(
    model: Annotated[str, typer.Argument(help="The model whose drift report the link opens.")],
    ttl: Annotated[
        str, typer.Option("--ttl", help="How long the link works: 30m, 12h, 1d, 2w (at most 90d).")
    ] = "7d",
) -> None:
    """Print a signed URL of MODEL's HTML drift report that opens in a browser without a token."""
    from core.config import base_url, get_settings
    from core.database import open_database
    from core.durations import require_duration
    from core.terminal import make_console
    from monitors.links import signed_report_url
    from registry.service import require_model

    lifetime = require_duration(ttl, where="--ttl")
    settings = get_settings()
    db = open_database()
    try:
        with db.session() as session:
            require_model(session=session, model_name=model)
            url, expires = signed_report_url(
                session=session, settings=settings, model_name=model, ttl=lifetime
            )
    finally:
        db.dispose()
    make_console(stderr=True).print(
        f"report of {model}, opens without a token until {expires.isoformat(timespec='seconds')}"
    )
    if settings.public_url is None:  # the address is a guess: say so, or the link silently leads nowhere
        note(
            f"note: DRIFTWARDEN_PUBLIC_URL is unset: the link assumes the server at {base_url(settings)}; "
            "set it to the address your browser reaches"
        )
    typer.echo(url)  # alone on stdout: URL=$(driftwarden reports link MODEL)


REPORT_EPILOG = (
    "[b]Examples[/b]\n\n"
    "driftwarden report credit  (writes report-credit.html: the newest run and the history of the newest "
    "200 runs)\n\n"
    "driftwarden report credit --since 7d --out week.html\n\n"
    "driftwarden report credit --out - > page.html  (the page on stdout)\n\n"
    "The page is the one GET /reports/MODEL/drift serves: the verdict in words, the summary of every feature "
    "and output, the history charts of the period's runs (scheduled and backfilled alike), then the "
    "per-feature cards; one file, no network needed to open it."
)


def report_cmd(
    model: Annotated[str, typer.Argument(help="The model whose stored runs the page reports.")],
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            help="The period: runs stored in the last 30m, 12h, 7d, 2w... (default: the newest 200 runs "
            "ever stored). Its newest run is the report, its runs the history.",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Where to write the page (default: report-MODEL.html here; - for stdout)."
        ),
    ] = None,
) -> None:
    """Write MODEL's HTML drift report for a period of stored runs: the newest run and its history."""
    from core.config import get_settings
    from core.database import open_database
    from core.durations import require_duration
    from monitors.flows import report_html
    from registry.names import check_name

    check_name(model)
    period = None if since is None else require_duration(since, where="--since")
    target = out if out is not None else Path(f"report-{model}.html")
    check_target(target, option="--out", example=f"report-{model}.html")
    settings = get_settings()
    db = open_database()
    try:
        page = report_html(db=db, model_name=model, settings=settings, since=period)
    finally:
        db.dispose()
    write_text(page, to=target, option="--out", what="the report")


monitor_app = typer.Typer(invoke_without_command=True, no_args_is_help=False)
monitor_app.callback()(monitor_cmd)

CONFIG_EPILOG = (
    "[b]Examples[/b]\n\n"
    "driftwarden monitor config churn  (prints the settings in effect)\n\n"
    "driftwarden monitor config churn --window-minutes 60  (the last hour, whatever its rows)\n\n"
    "driftwarden monitor config churn --window 50000 --ignore customer_id\n\n"
    "driftwarden monitor config churn --segment plan --segment tenure:6,12,24  (segments of a categorical "
    "feature's levels, of a numeric feature's bins)\n\n"
    "Stored as <registry>/NAME/monitor.json (PUT /v1/models/NAME/monitor does the same); a value that breaks "
    "a rule stops with one line and exit 2, and nothing is written."
)
# option -> the setting it sets, so that a refused value is named as the option that gave it
CONFIG_OPTIONS = {
    "window_rows": "--window",
    "window_minutes": "--window-minutes",
    "interval_s": "--interval",
    "false_alarms_per_30d": "--false-alarms-per-30d",
    "alpha": "--alpha",
    "drift_share": "--drift-share",
    "harm_metric": "--harm-metric",
    "harm_tolerance": "--harm-tolerance",
}


def segment_spec(text: str) -> dict[str, Any]:
    """``--segment FEATURE`` or ``FEATURE:EDGE,EDGE,...`` as a segment setting; Invalid naming the option."""
    feature, _, edges = text.partition(":")
    if not feature:
        raise Invalid(f"--segment {text!r}: name a feature (FEATURE or FEATURE:EDGE,EDGE,...)")
    if not _:
        return {"feature": feature}
    try:
        bins = [float(e) for e in edges.split(",")]
    except ValueError:
        raise Invalid(
            f"--segment {text!r}: the bin edges must be numbers separated by commas (e.g. age:18,30,50)"
        ) from None
    return {"feature": feature, "bins": bins}


@monitor_app.command("config", epilog=CONFIG_EPILOG)
def monitor_config_cmd(
    name: Annotated[str, typer.Argument(help="The model.")],
    window: Annotated[
        int | None,
        typer.Option("--window", help="Window: the last N predictions (with --window-minutes: both)."),
    ] = None,
    window_minutes: Annotated[
        float | None,
        typer.Option(
            "--window-minutes", help="Window: the predictions of the last M minutes (alone: no row limit)."
        ),
    ] = None,
    server_window: Annotated[
        bool,
        typer.Option(
            "--server-window", help="Window: the server's default again (DRIFTWARDEN_MONITOR_WINDOW_*)."
        ),
    ] = False,
    interval: Annotated[
        float | None,
        typer.Option(
            "--interval", help="Seconds between scheduled runs of this model (at least the server's)."
        ),
    ] = None,
    false_alarms: Annotated[
        float | None,
        typer.Option("--false-alarms-per-30d", help="False-alarm budget: expected false alarms per 30 days."),
    ] = None,
    alpha: Annotated[
        float | None, typer.Option("--alpha", help="Significance level of a one-off run.")
    ] = None,
    drift_share: Annotated[
        float | None,
        typer.Option("--drift-share", help="Share of drifted features that makes dataset drift."),
    ] = None,
    harm_metric: Annotated[
        str | None,
        typer.Option("--harm-metric", help="The metric harmful drift judges (default: the task's own)."),
    ] = None,
    harm_tolerance: Annotated[
        float | None,
        typer.Option(
            "--harm-tolerance",
            help="How much worse than the reference is harmful: absolute (0.02), or a share of it for "
            "rmse, mae, log_loss (0.05).",
        ),
    ] = None,
    ignore: Annotated[
        list[str] | None, typer.Option("--ignore", help="Leave this feature out of the monitor (repeatable).")
    ] = None,
    include: Annotated[
        list[str] | None, typer.Option("--include", help="Monitor an ignored feature again (repeatable).")
    ] = None,
    segment: Annotated[
        list[str] | None,
        typer.Option(
            "--segment",
            help="Segment by this feature: its levels, or a numeric one's bins as FEATURE:EDGE,EDGE,... "
            "(repeatable; replaces the stored segments).",
        ),
    ] = None,
    no_segments: Annotated[
        bool, typer.Option("--no-segments", help="Drop the segments the settings name (the defaults stay).")
    ] = False,
    reset: Annotated[
        bool, typer.Option("--reset", help="Back to the defaults (an empty monitor.json).")
    ] = False,
) -> None:
    """Show or change a model's monitor settings: window, interval, false-alarm budget, ignored features."""
    import json

    from core.config import get_settings
    from core.database import open_database
    from monitors.config import config_path
    from monitors.flows import put_settings, settings_document

    if window is not None and server_window:
        raise Invalid("--window and --server-window contradict each other: give one")
    if window_minutes is not None and server_window:
        raise Invalid("--window-minutes and --server-window contradict each other: give one")
    if segment and no_segments:
        raise Invalid("--segment and --no-segments contradict each other: give one")
    segments = None if segment is None else [segment_spec(text) for text in segment]
    overlap = set(ignore or ()) & set(include or ())
    if overlap:
        raise Invalid(f"--ignore and --include both name {', '.join(sorted(overlap))}: give one")
    changes = {
        "interval_s": interval,
        "false_alarms_per_30d": false_alarms,
        "alpha": alpha,
        "drift_share": drift_share,
        "harm_metric": harm_metric,
        "harm_tolerance": harm_tolerance,
    }
    windowed = window is not None or window_minutes is not None or server_window
    asked = (
        reset
        or windowed
        or bool(ignore or include or segment or no_segments)
        or any(v is not None for v in changes.values())
    )
    settings = get_settings()
    db = open_database()
    try:
        if not asked:
            current = settings_document(db=db, settings=settings, model_name=name)
        else:  # --reset reads nothing: it also mends a broken monitor.json
            data: dict[str, Any] = (
                {} if reset else settings_document(db=db, settings=settings, model_name=name)["stored"]
            )
            data.update({k: v for k, v in changes.items() if v is not None})
            if windowed:  # the window is one setting: what was given replaces what was stored
                data.pop("window_rows", None)
                data.pop("window_minutes", None)
                given = {"window_rows": window, "window_minutes": window_minutes}
                data.update({k: v for k, v in given.items() if v is not None})
            features = {k: dict(v) for k, v in (data.get("features") or {}).items()}
            for feature in ignore or ():
                features.setdefault(feature, {})["enabled"] = False
            for feature in include or ():
                if feature in features:
                    features[feature].pop("enabled", None)
                    if not features[feature]:
                        del features[feature]
            if features or "features" in data:
                data["features"] = features
            if segments is not None:
                data["segments"] = segments
            if no_segments:
                data.pop("segments", None)
            current = put_settings(
                db=db, settings=settings, model_name=name, data=data, name=lambda f: CONFIG_OPTIONS.get(f, f)
            )
    finally:
        db.dispose()
    typer.echo(json.dumps(current, indent=2))
    if asked:
        note(f"stored in {config_path(registry=settings.registry_path, model_name=name)}")


def register(app: typer.Typer) -> None:
    """Add the monitors' commands to the root CLI."""
    app.command("drift")(drift_cmd)
    app.add_typer(monitor_app, name="monitor")
    app.add_typer(reports_app, name="reports")
    app.command("report", epilog=REPORT_EPILOG)(report_cmd)

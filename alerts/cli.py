"""Alert commands: ``driftwarden alerts ...`` (alerts, rules, silences) and ``driftwarden webhooks ...``.

Bad input (an unknown model, a malformed rules file or matcher, a non-http(s) URL) raises a
:class:`core.errors.DomainError`; the root command prints it as one line and exits 2. Module-level imports
stay light (typer only).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from core.bounds import (
    BACKTEST_MAX_COUNTED_ROWS,
    BACKTEST_MAX_RATE,
    BACKTEST_MAX_RUNS,
    BACKTEST_MAX_WINDOW,
    MAX_PROCESSES,
    MAX_SEED,
)
from core.cli_options import JsonOut, check_target, json_text, write_json
from core.terminal import make_console

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

T = TypeVar("T")

alerts_app = typer.Typer(
    help="Alerts on drift, performance, data quality and health: list them, show and apply rules, silence.",
    no_args_is_help=True,
)
webhooks_app = typer.Typer(
    help="Signed outgoing webhooks (Standard Webhooks): subscriptions and their deliveries.",
    no_args_is_help=True,
)

RULES_EPILOG = (
    "A rules file is YAML: models: {<model or '*'>: [{name, kind, params, severity, for, labels, "
    "annotations, actions}]}; kinds: dataset_drift, feature_drift, prediction_drift, performance, "
    "estimated_performance, data_quality, concept_drift, harmful_drift, health, retrain_rejected. See "
    "docs/alerts.md."
)


def _with_session(fn: Callable[[Session], T]) -> T:
    from core.database import open_database

    db = open_database()
    try:
        with db.session() as session:
            return fn(session)
    finally:
        db.dispose()


def _when(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else ""


# --- alerts -------------------------------------------------------------------------------------------------


@alerts_app.command("list")
def alerts_list(
    model: Annotated[str | None, typer.Option("--model", "-m", help="Only this model's alerts.")] = None,
    state: Annotated[
        str | None, typer.Option("--state", help="Only alerts in this state: pending, firing or resolved.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="Most alerts shown.")] = 50,
    as_json: JsonOut = None,
) -> None:
    """List alerts, newest first."""
    from alerts import service
    from alerts.models import AlertRead
    from core.errors import Invalid
    from registry.names import check_name

    if model is not None:
        check_name(model, given_as="--model")
    if state is not None and state not in ("pending", "firing", "resolved"):
        raise Invalid(f"--state: {state!r} is not a state: use pending, firing or resolved")
    rows = _with_session(
        lambda s: [
            AlertRead.model_validate(a)
            for a in service.list_alerts(session=s, model_name=model, state=state, limit=limit)
        ]
    )
    if as_json is not None:
        write_json([r.model_dump(mode="json") for r in rows], to=as_json)
        return
    if not rows:
        typer.echo(
            "no alerts" + (f" of model {model!r}" if model else "") + (f" in state {state}" if state else "")
        )
        return
    from rich.table import Table

    table = Table(title="Alerts")
    for col in ("id", "model", "name", "state", "severity", "summary", "since", "silenced"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            str(r.id),
            r.model_name or "",
            r.rule_name,
            r.state,
            r.severity,
            str(r.annotations.get("summary", "")),
            _when(r.fired_at or r.started_at),
            "yes" if r.silenced else "",
        )
    make_console().print(table)


@alerts_app.command("show")
def alerts_show(alert_id: Annotated[int, typer.Argument(help="Alert id (from `alerts list`).")]) -> None:
    """Show one alert: labels, evidence and its history."""
    from alerts import flows

    detail = _with_session(lambda s: flows.alert_detail(session=s, alert_id=alert_id))
    typer.echo(json_text(detail.model_dump(mode="json")))


@alerts_app.command("rules", epilog=RULES_EPILOG)
def alerts_rules(
    model: Annotated[str, typer.Argument(help="Model name.")],
    as_json: JsonOut = None,
) -> None:
    """Show the rules MODEL follows: its own, the '*' ones or the defaults."""
    from alerts import flows
    from registry.names import check_name

    check_name(model)
    doc = _with_session(lambda s: flows.rules_document(session=s, model_name=model))
    if as_json is not None:
        write_json(doc, to=as_json)
        return
    from rich.table import Table

    table = Table(title=f"Alert rules of {model} ({doc['origin']}: {doc['source']})")
    for col in ("name", "kind", "params", "severity", "for", "actions", "enabled"):
        table.add_column(col)
    for r in doc["rules"]:
        table.add_row(
            r["name"],
            r["kind"],
            json.dumps(r["params"]),
            r["severity"],
            str(r["for_runs"]),
            ", ".join(r["actions"]),
            "yes" if r["enabled"] else "no",
        )
    make_console().print(table)


@alerts_app.command("rules-apply", epilog=RULES_EPILOG)
def alerts_rules_apply(
    file: Annotated[Path, typer.Argument(help="YAML rules file.")],
    check: Annotated[bool, typer.Option("--check", help="Only validate the file; store nothing.")] = False,
) -> None:
    """Validate a rules file and store it: each model it names gets exactly the rules it lists."""
    from alerts import flows
    from core.database import open_database

    db = open_database()
    try:
        counts = flows.apply_rules_file(db=db, path=file, check_only=check)
    finally:
        db.dispose()
    what = ", ".join(f"{name}: {n} rule(s)" for name, n in counts.items()) or "no models"
    typer.echo(f"{file}: valid ({what})" if check else f"stored from {file}: {what}")


@alerts_app.command("silence")
def alerts_silence(
    matcher: Annotated[
        list[str],
        typer.Option(
            "--matcher",
            help="A label matcher: name=value, name!=value, name=~regex or name!~regex (repeatable; all must "
            "match), e.g. --matcher model=credit --matcher severity=~'warning|info'.",
        ),
    ],
    duration: Annotated[str, typer.Option("--for", help="How long: e.g. 2h, 30m, 1d12h.")] = "2h",
    comment: Annotated[str, typer.Option("--comment", help="Why (shown in the alerts' history).")] = "",
    created_by: Annotated[str, typer.Option("--by", help="Who silences.")] = "cli",
) -> None:
    """Silence matching alerts: no notifications, no actions, until the silence ends."""
    from alerts import flows
    from alerts.labels import parse_matcher
    from alerts.specs import MatcherSpec, SilenceSpec

    parsed = [parse_matcher(m, where=f"--matcher {m!r}") for m in matcher]
    spec = SilenceSpec(
        matchers=[MatcherSpec(**m.as_dict()) for m in parsed],
        duration=duration,
        comment=comment,
        created_by=created_by,
    )
    read = _with_session(lambda s: flows.create_silence(session=s, spec=spec))
    shown = ", ".join(str(m) for m in parsed)
    typer.echo(f"silence {read.id}: {shown} until {read.ends_at.isoformat()}")


@alerts_app.command("silences")
def alerts_silences(as_json: JsonOut = None) -> None:
    """List silences, newest first."""
    from alerts import flows, service
    from alerts.labels import Matcher

    rows = _with_session(lambda s: [flows.silence_read(x) for x in service.list_silences(session=s)])
    if as_json is not None:
        write_json([r.model_dump(mode="json") for r in rows], to=as_json)
        return
    if not rows:
        typer.echo("no silences")
    for r in rows:
        matchers = ", ".join(str(Matcher.from_dict(m)) for m in r.matchers)
        status = "active" if r.active else ("expired" if r.expired_at else "inactive")
        typer.echo(f"{r.id}  {status:8}  {matchers}  until {_when(r.ends_at)}  {r.created_by}: {r.comment}")


@alerts_app.command("unsilence")
def alerts_unsilence(silence_id: Annotated[str, typer.Argument(help="Silence id.")]) -> None:
    """Expire a silence now."""
    from alerts import flows

    read = _with_session(lambda s: flows.expire_silence(session=s, silence_id=silence_id))
    typer.echo(f"silence {read.id} expired")


@alerts_app.command("backtest", epilog=RULES_EPILOG)
def alerts_backtest(
    model: Annotated[str, typer.Option("--model", "-m", help="The model whose rules are backtested.")],
    days: Annotated[
        float,
        typer.Option(
            "--days", help=f"Days of scheduled runs replayed (at most {BACKTEST_MAX_RUNS:,} runs in all)."
        ),
    ] = 30.0,
    interval: Annotated[str, typer.Option("--interval", help="Time between runs: e.g. 1m, 5m, 1h.")] = "5m",
    window: Annotated[
        int | None,
        typer.Option(
            "--window",
            min=1,
            max=BACKTEST_MAX_WINDOW,
            help="Rows per window (default: the model's monitor window).",
        ),
    ] = None,
    rules: Annotated[
        Path | None,
        typer.Option("--rules", help="A YAML rules file to backtest instead of the stored rules."),
    ] = None,
    rate: Annotated[
        float,
        typer.Option(
            "--rate",
            max=BACKTEST_MAX_RATE,
            help=f"Predictions a minute (the rows a backtest draws: at most {BACKTEST_MAX_COUNTED_ROWS:,}).",
        ),
    ] = 100.0,
    shift: Annotated[
        list[str] | None,
        typer.Option(
            "--shift",
            help="A planted shift (repeatable; default every one the model allows): abrupt_mean, "
            "gradual_mean, new_category, performance_drop.",
        ),
    ] = None,
    feature: Annotated[
        str | None,
        typer.Option("--feature", help="The numeric feature of the mean shifts (default: the first)."),
    ] = None,
    category: Annotated[
        str | None,
        typer.Option("--category", help="The categorical feature of the new category (default: the first)."),
    ] = None,
    seed: Annotated[
        int, typer.Option("--seed", min=0, max=MAX_SEED, help="Seed of the resampled traffic.")
    ] = 0,
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            min=1,
            max=MAX_PROCESSES,
            help="Processes running the streams (4 per CPU, at most 64).",
        ),
    ] = 1,
    as_json: JsonOut = None,
) -> None:
    """Replay a month of monitor runs on the model's own reference traffic: false notifications per rule,
    and how long (runs and time) each rule takes to catch planted shifts. Nothing is stored or sent.

    Half of the reference rows are profiled, the traffic is drawn from the other half (a window never holds
    a profiled row). Each run tests at the level a run every --interval spends of the model's false-alarm
    budget (docs/monitoring.md, "Repeated runs"); the last rows show the run from which a one-off comparison
    of the window (alpha 0.05) sees each shift and finds it harmful. Warnings on windows that skip rows or
    overlap little come first; after the table, each shift planted, a verdict per rule (quiet or noisy,
    fast or slow, and the setting that trades them) and why a rule never caught a shift (docs/alerts.md,
    "Backtest")."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from alerts.backtest_flows import BacktestRequest, prepare
    from core.config import get_settings
    from core.database import open_database
    from core.logs import quiet_libraries, quiet_tensorflow_banner

    if as_json is not None:
        check_target(as_json)  # before minutes of replay
    quiet_libraries()  # a trained version's SavedModel answers its reference: no TensorFlow chatter
    quiet_tensorflow_banner()
    request = BacktestRequest(
        model_name=model,
        days=days,
        interval=interval,
        window=window,
        rules_file=rules,
        rate=rate,
        shifts=tuple(shift or ()),
        feature=feature,
        category=category,
        seed=seed,
        workers=workers,
    )
    settings = get_settings()
    db = open_database(settings=settings)
    try:
        setup, shifts = prepare(db=db, settings=settings, request=request)
    finally:
        db.dispose()
    from alerts.backtest import backtest, total_runs

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=make_console(stderr=True), transient=True) as bar:
        task = bar.add_task(f"backtest {model}", total=total_runs(setup, shifts))
        result = backtest(
            setup=setup, shifts=shifts, workers=workers, progress=lambda n: bar.advance(task, n)
        )
    if as_json is not None:
        write_json(result.as_dict(), to=as_json)
        return
    _backtest_table(model, result)


def _backtest_table(model: str, result: Any) -> None:
    """The warnings on the windows, the figures per rule (delays in runs and time), what each shift planted,
    a verdict per rule and why a rule never caught a shift; a line on the runs."""
    from rich.table import Table

    from alerts.backtest_advice import never_lines
    from alerts.backtest_traffic import describe
    from core.durations import in_words

    plan = result.plan
    shifts = [s.kind.value for s in result.shifts]
    for warning in result.warnings:
        typer.echo(f"warning: {warning}")
    table = Table(
        title=f"Alert backtest of {model}: delays after each shift in runs and time, a run every "
        f"{in_words(plan.interval_s)} (run 0: the first whose window holds shifted rows)"
    )
    for col in ("rule", "kind", "for", "false notifications / 30 days", *shifts):
        table.add_column(col)
    for r in result.rules:
        delays = [
            "never" if r.detection_delay_runs[s] is None else result.delay_text(r.detection_delay_runs[s], s)
            for s in shifts
        ]
        table.add_row(r.name, r.kind, str(r.for_runs), f"{r.false_notifications_per_30d:g}", *delays)
    visible = [result.delay_text(result.visible_at_run.get(s), s) for s in shifts]
    table.add_row("(a one-off test sees it)", "", "", "", *visible)
    harmful = [result.delay_text(result.harmful_at_run.get(s), s) for s in shifts]
    table.add_row("(a one-off test finds harm)", "", "", "", *harmful)
    console = make_console()
    console.print(table)
    lines = ["shifts planted:", *(f"  {s.kind.value}: {describe(s)}" for s in result.shifts)]
    lines += ["verdicts:", *(f"  {r.name}: {r.verdict}" for r in result.rules)]
    never = [f"  {line}" for line in never_lines({r.name: r.not_caught for r in result.rules}, shifts)]
    lines += ["never caught, why:", *never] if never else []
    typer.echo("\n".join(lines))
    console.print(
        f"{plan.runs} runs over {plan.days:g} days, {plan.step} new rows a run, window {plan.window} rows: "
        f"{result.total_false_notifications_per_30d:g} false notifications / 30 days, headline green in "
        f"{result.headline_green_fraction:.1%} of the runs without drift"
    )


# --- webhooks -----------------------------------------------------------------------------------------------


@webhooks_app.command("list")
def webhooks_list(as_json: JsonOut = None) -> None:
    """List subscriptions (secrets are never shown)."""
    from alerts import service
    from alerts.models import WebhookRead

    rows = _with_session(
        lambda s: [WebhookRead.model_validate(w) for w in service.list_subscriptions(session=s)]
    )
    if as_json is not None:
        write_json([r.model_dump(mode="json") for r in rows], to=as_json)
        return
    if not rows:
        typer.echo("no webhooks: `driftwarden webhooks add URL` subscribes one")
    for r in rows:
        typer.echo(f"{r.id}  {'on ' if r.enabled else 'off'}  {r.url}  filter={json.dumps(r.filter)}")


@webhooks_app.command("add")
def webhooks_add(
    url: Annotated[str, typer.Argument(help="http(s) URL that receives the signed messages.")],
    secret: Annotated[
        str | None, typer.Option("--secret", help="whsec_<base64> signing secret (default: generated).")
    ] = None,
    model: Annotated[
        list[str] | None, typer.Option("--model", help="Only these models (repeatable).")
    ] = None,
    severity: Annotated[
        list[str] | None, typer.Option("--severity", help="Only these severities: info, warning, critical.")
    ] = None,
    event: Annotated[
        list[str] | None,
        typer.Option(
            "--event",
            help="Only these events: alert.firing, alert.resolved, job.finished, job.rejected, "
            "retrain.requested.",
        ),
    ] = None,
    description: Annotated[str, typer.Option("--description", help="What it is for.")] = "",
) -> None:
    """Subscribe URL; prints the signing secret once (store it in the receiver)."""
    from pydantic import ValidationError

    from alerts import flows
    from alerts.specs import WebhookSpec, errors_at
    from core.errors import Invalid

    try:
        spec = WebhookSpec.model_validate(
            {
                "url": url,
                "secret": secret,
                "filter": {"models": model or [], "severities": severity or [], "events": event or []},
                "description": description,
            }
        )
    except ValidationError as exc:
        raise Invalid("; ".join(errors_at(exc))) from None
    from alerts.urls import AddressRule, check_url, system_resolver
    from core.config import get_settings

    check_url(spec.url, rule=AddressRule.of(get_settings()), resolver=system_resolver)
    created = _with_session(lambda s: flows.add_webhook(session=s, spec=spec))
    typer.echo(f"webhook {created.id} -> {created.url}")  # masked, as in the list
    typer.echo(f"secret (shown once): {created.secret}")


@webhooks_app.command("remove")
def webhooks_remove(webhook_id: Annotated[str, typer.Argument(help="Subscription id.")]) -> None:
    """Remove a subscription and its pending deliveries."""
    from alerts import service

    _with_session(lambda s: service.remove_subscription(session=s, webhook_id=webhook_id))
    typer.echo(f"webhook {webhook_id} removed")


@webhooks_app.command("deliveries")
def webhooks_deliveries(
    webhook_id: Annotated[str, typer.Argument(help="Subscription id.")],
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="Most deliveries shown.")] = 20,
    as_json: JsonOut = None,
) -> None:
    """List the messages to one subscription and where each delivery stands."""
    from alerts import service
    from alerts.models import DeliveryRead

    def run(s: Session) -> list[DeliveryRead]:
        service.get_subscription(session=s, webhook_id=webhook_id)
        rows = service.list_deliveries(session=s, webhook_id=webhook_id, limit=limit)
        return [DeliveryRead.model_validate(d) for d in rows]

    rows = _with_session(run)
    if as_json is not None:
        write_json([d.model_dump(mode="json") for d in rows], to=as_json)
        return
    for d in rows:
        status = f"HTTP {d.last_status_code}" if d.last_status_code else (d.last_error or "")
        typer.echo(f"{d.id}  {d.event_type:14}  {d.state:9}  attempts={d.attempts}  {status}")


@webhooks_app.command("redeliver")
def webhooks_redeliver(delivery_id: Annotated[str, typer.Argument(help="Delivery id (msg_...).")]) -> None:
    """Send a delivery again: due now, attempts reset, same webhook-id and body."""
    from alerts import service
    from core.database import utcnow

    _with_session(lambda s: service.redeliver(session=s, delivery_id=delivery_id, now=utcnow()))
    typer.echo(f"delivery {delivery_id} is due again")


@webhooks_app.command("send")
def webhooks_send() -> None:
    """Send every due delivery once now (the API and `driftwarden monitor` do this periodically)."""
    from alerts.sender import send_due
    from core.config import get_settings
    from core.database import open_database

    settings = get_settings()
    db = open_database(settings=settings)
    try:
        n = send_due(db=db, settings=settings)
    finally:
        db.dispose()
    typer.echo(f"{n} delivery attempt(s)")


def register(app: typer.Typer) -> None:
    """Add ``alerts ...`` and ``webhooks ...`` to the root CLI."""
    app.add_typer(alerts_app, name="alerts")
    app.add_typer(webhooks_app, name="webhooks")

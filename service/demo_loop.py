"""The closing step of ``driftwarden demo``: drift -> alert -> signed webhook -> retrain -> gate -> promote.

Runs against the demo's live server (its embedded worker trains on the local cluster): drifted traffic
with its labels, a monitor run that detects the drift, the default dataset-drift rule firing, a signed
webhook verified by a local receiver with the ``standardwebhooks`` package, the retraining job the alert
started, the validation gate, the promotion, a monitor run on the new version that finds no feature drift,
and a deliberately bad candidate (trained on shuffled labels) that the gate rejects. Each stage is a row of
the summary table.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import httpx
from rich.console import Console
from rich.table import Table

from core.errors import DomainError
from core.network import free_port
from training.retraining.gate import check_verdict

FINAL = {"promoted", "passed", "undecided", "rejected", "failed", "cancelled"}

# The demo's waits follow progress, whatever the machine's speed: a wait fails only when what it waits on
# has shown no progress for STALL_S, or after BOUND_S in all (a ceiling no healthy run comes near).
STALL_S = 300.0
BOUND_S = 7200.0
QUIET_S = 5.0  # a wait shorter than this prints nothing; a longer one prints where it stands, as it moves

log = logging.getLogger("driftwarden.demo")
T = TypeVar("T")


class DemoFailed(DomainError):
    """A stage of the demo did not do what it shows; the message names the stage and why (exit 2)."""

    status_code = 500
    exit_code = 2


@dataclass
class Received:
    """One webhook message as the receiver saw it."""

    webhook_id: str
    type: str
    verified: bool
    body: dict[str, Any]


@dataclass
class WebhookReceiver:
    """A local HTTP endpoint that verifies Standard Webhooks signatures with the ``standardwebhooks`` package
    and keeps each message once (de-duplicated by ``webhook-id``, as a receiver should)."""

    secret: str
    url: str = ""
    messages: dict[str, Received] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, body: bytes, headers: dict[str, str]) -> int:
        from standardwebhooks.webhooks import Webhook, WebhookVerificationError

        try:
            Webhook(self.secret).verify(body.decode(), headers)
        except WebhookVerificationError:
            return 401
        doc = json.loads(body)
        with self.lock:
            self.messages.setdefault(
                headers["webhook-id"], Received(headers["webhook-id"], str(doc.get("type")), True, doc)
            )
        return 204

    def of_type(self, kind: str) -> list[Received]:
        with self.lock:
            return [m for m in self.messages.values() if m.type == kind]


@contextmanager
def webhook_receiver(secret: str) -> Iterator[WebhookReceiver]:
    """Run a :class:`WebhookReceiver` on a free loopback port for the duration of the block."""
    receiver = WebhookReceiver(secret=secret)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            status = receiver.handle(body, {k.lower(): v for k, v in self.headers.items()})
            self.send_response(status)
            self.end_headers()

        def log_message(self, *_: Any) -> None:  # quiet
            return

    port = free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    receiver.url = f"http://127.0.0.1:{port}/hooks/driftwarden"
    thread = threading.Thread(target=server.serve_forever, name="demo-webhook-receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


def follow(
    what: str,
    observe: Callable[[], tuple[T | None, str]],
    *,
    console: Console | None,
    every_s: float = 0.5,
    stall_s: float = STALL_S,
    bound_s: float = BOUND_S,
    quiet_s: float = QUIET_S,
    show: Callable[[str], str] | None = None,
) -> T:
    """Wait for ``what``, following its progress: ``observe()`` answers the result (None: not yet) and a line
    saying where it stands. Each new line goes to the log, and to ``console`` once the wait is longer than
    ``quiet_s`` (``show`` words it; default: "waiting for <what> (<s>s): <line>"). The wait fails, naming
    what it waited on and what it saw last, when the line has not changed for ``stall_s``, or after
    ``bound_s`` in all: a slow machine only makes it longer, a stopped one ends it."""
    start = changed = time.monotonic()
    seen: str | None = None
    pending: list[str] = []
    while True:
        value, state = observe()
        now = time.monotonic()
        if value is not None:
            return value
        if state != seen:
            seen, changed = state, now
            line = show(state) if show else f"    waiting for {what} ({now - start:.0f}s): {state}"
            log.info("%s", line.strip())
            pending.append(line)
        if console is not None and now - start >= quiet_s:
            for line in pending:
                console.print(line)
            pending.clear()
        if now - changed > stall_s:
            raise DemoFailed(
                f"the demo waited {now - start:.0f}s for {what}: no progress for {stall_s:.0f}s (last seen: "
                f"{state})"
            )
        if now - start > bound_s:
            raise DemoFailed(f"the demo waited {now - start:.0f}s for {what}, its bound (last seen: {state})")
        time.sleep(every_s)


def job_line(job: dict[str, Any]) -> str:
    """Where a job stands: its state, its phase and its step and loss, or what it waits for."""
    p = job.get("progress") or {}
    line = str(job["state"])
    if job["state"] == "queued":
        return line + " (the server's embedded worker claims it at its next poll)"
    phase = p.get("phase")
    if phase == "waiting for labelled rows":
        return f"{line}, {phase}: {p.get('labelled_rows')} of {p.get('wanted_rows')}"
    if p.get("step"):
        line += f" step {p.get('step')}/{p.get('total_steps')}"
        if p.get("loss") is not None:
            line += f", loss {float(p['loss']):.4f}"
    elif phase and job["state"] not in FINAL:
        line += f", {phase}"
    return line


def wait_for_job(client: httpx.Client, job_id: int, *, console: Console) -> dict[str, Any]:
    """Follow a job to its end, printing its state, phase and progress as they change."""

    def observe() -> tuple[dict[str, Any] | None, str]:
        job: dict[str, Any] = _get(client, f"/v1/jobs/{job_id}")
        return (job if job["state"] in FINAL else None), job_line(job)

    def show(line: str) -> str:
        return f"    job {job_id}: {line}"

    job = follow(f"job {job_id} to finish", observe, console=console, every_s=1.0, quiet_s=0, show=show)
    console.print(show(job_line(job)))
    return job


def gate_lines(job: dict[str, Any]) -> list[str]:
    """The gate's checks of a job, one line each, with their figures."""
    out = []
    for check in (job.get("gate") or {}).get("checks", []):
        mark = check_verdict(check).mark
        out.append(f"{mark} {check['name']}: {check.get('message', '')}")
    return out


class Summary:
    """The rows of the closing summary table: stage, outcome, evidence."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, bool, str]] = []

    def add(self, stage: str, ok: bool, evidence: str) -> None:
        self.rows.append((stage, ok, evidence))

    def print(self, console: Console) -> None:
        table = Table(title="The loop, closed unattended", show_lines=False, expand=True)
        table.add_column("stage", no_wrap=True)
        table.add_column("", no_wrap=True)
        table.add_column("evidence", overflow="fold")
        for stage, ok, evidence in self.rows:
            table.add_row(stage, "[green]ok[/]" if ok else "[bold red]NO[/]", evidence)
        console.print(table)

    @property
    def ok(self) -> bool:
        return all(ok for _, ok, _ in self.rows)


def run_evidence(run: dict[str, Any], *, model: str) -> str:
    """A monitor run as a summary row's evidence: the features it found drifted and its headline, word for
    word (a stage judged on feature drift never reads "clean" beside a headline that says "Attention")."""
    drifted = sorted(f["name"] for f in run["report"]["features"] if f["drifted"])
    head = (run.get("headline") or {}).get("text") or "no headline"
    found = f"drifted features: {', '.join(drifted)}" if drifted else "no feature drifted"
    return f"run {run['run_id']} on {model}:{run['model_version']}: {found}; headline: {head}"


def _get(client: httpx.Client, path: str, **params: Any) -> Any:
    r = client.get(path, params=params)
    r.raise_for_status()
    return r.json()


def close_the_loop(
    *,
    client: httpx.Client,
    model: str,
    receiver: WebhookReceiver,
    webhook_id: str,
    rows_in: Callable[[], str],
    detected: set[str],
    planted: set[str],
    send: Callable[[str, int], None],
    monitor: Callable[[], dict[str, Any]],
    console: Console,
    summary: Summary,
) -> None:
    """From the monitor run that found the planted drift to a promoted version and a rejected bad one.

    ``send(scenario, seed)`` sends a window of traffic with its labels and waits until it is logged;
    ``monitor()`` runs the monitor now and returns its answer; ``rows_in()`` says what the log holds of
    the demo's traffic (said when the alert fired); ``webhook_id`` is the receiver's subscription.
    """
    summary.add("drift detected", detected == planted, f"drifted: {', '.join(sorted(detected)) or 'nothing'}")
    alerts = _get(client, "/v1/alerts", model=model, state="firing")["alerts"]
    drift = [a for a in alerts if a["source"] == "rule" and "retrain" in (a.get("evidence") or {})]
    summary.add(
        "alert fires",
        bool(drift),
        "; ".join(f"{a['rule_name']} ({a['severity']}) id {a['id']}" for a in drift)
        or "no alert with a retrain action fired",
    )
    if not drift:
        return
    alert = drift[0]
    fired = datetime.fromisoformat(str(alert["fired_at"])).astimezone(UTC).strftime("%H:%M:%S UTC")
    console.print(
        f"  alert {alert['rule_name']} fired at {fired} ({alert['severity']}): "
        f"{(alert.get('annotations') or {}).get('summary', '')}"
    )
    console.print(f"  at that moment the log held {rows_in()}")
    log.info("alert %s fired at %s; the log held %s", alert["id"], alert.get("fired_at"), rows_in())
    _webhook_received(
        client, alert, receiver=receiver, webhook_id=webhook_id, console=console, summary=summary
    )
    version = _retrained(client, alert, console=console, summary=summary)
    if version is None:
        return
    _new_version_serves(client, model, version, send=send, monitor=monitor, console=console, summary=summary)
    _bad_candidate(client, model, version, console=console, summary=summary)


def _webhook_received(
    client: httpx.Client,
    alert: Mapping[str, Any],
    *,
    receiver: WebhookReceiver,
    webhook_id: str,
    console: Console,
    summary: Summary,
) -> None:
    """Wait for the signed webhook message of ``alert`` at the receiver."""

    def delivered() -> tuple[Received | None, str]:
        for m in receiver.of_type("alert.firing"):
            if any(a.get("id") == alert["id"] for a in m.body.get("data", {}).get("alerts", [])):
                return m, "received"
        outbox = _get(client, f"/v1/webhooks/{webhook_id}/deliveries")["deliveries"]
        states = [f"{d['event_type']} {d['state']} after {d['attempts']} attempt(s)" for d in outbox[:3]]
        return None, "; ".join(states) or "no message in the outbox yet"

    message: Received = follow("the signed webhook", delivered, console=console)
    summary.add(
        "signed webhook received",
        message.verified,
        f"{message.type} {message.webhook_id} at {receiver.url}, signature verified with standardwebhooks",
    )


def _retrained(
    client: httpx.Client, alert: Mapping[str, Any], *, console: Console, summary: Summary
) -> int | None:
    """Follow the job the alert's retrain action queued through training and the gate; the promoted version
    (None when no version was promoted)."""
    retrain = (alert.get("evidence") or {}).get("retrain") or {}
    if retrain.get("job_id") is None:  # the action says why it queued none: no use waiting for one
        why = retrain.get("error") or retrain.get("reason") or "the alert has no retrain outcome"
        summary.add("retraining job starts", False, f"alert {alert['id']} queued no job: {why}")
        return None
    job = _get(client, f"/v1/jobs/{int(retrain['job_id'])}")
    summary.add(
        "retraining job starts",
        job.get("alert_id") == alert["id"],
        f"job {job['id']} (trigger {job['trigger']}, alert {job.get('alert_id')})",
    )
    console.print(
        f"  its retrain action queued job {job['id']}: the server's worker trains it on the local cluster, "
        "reading its window when it starts"
    )
    job = wait_for_job(client, job["id"], console=console)
    params = job.get("params") or {}
    window = job.get("data_window") or {}
    log.info("job %s read its window: %s", job["id"], json.dumps(window))
    summary.add(
        "trained on the cluster",
        job.get("result_version") is not None,
        f"{params.get('mode', 'async')} cluster; {window.get('train_rows', '?')} training rows, "
        f"{window.get('holdout_rows', '?')} held out for the gate; version {job.get('result_version')}",
    )
    for line in gate_lines(job):
        console.print(f"    gate: {line}")
    summary.add("passes the gate", job["state"] in {"promoted", "passed"}, "; ".join(gate_lines(job)))
    summary.add("promoted", job["state"] == "promoted", f"job state {job['state']}")
    if job["state"] != "promoted":
        return None
    return int(job["result_version"])


def _new_version_serves(
    client: httpx.Client,
    model: str,
    version: int,
    *,
    send: Callable[[str, int], None],
    monitor: Callable[[], dict[str, Any]],
    console: Console,
    summary: Summary,
) -> None:
    """Wait for ``version`` to serve, then send drifted traffic again: the next monitor run is green."""

    def serving() -> tuple[bool | None, str]:
        status = _get(client, f"/v1/models/{model}")["model_version_status"]
        ready = any(int(s["version"]) == version and s["state"] == "AVAILABLE" for s in status)
        return (True if ready else None), ", ".join(f"version {s['version']} {s['state']}" for s in status)

    follow(f"{model}:{version} to serve", serving, console=console)
    summary.add("new version serves", True, f"GET /v1/models/{model}: version {version} AVAILABLE")

    send("covariate_shift", 77)
    run = monitor()
    head = run.get("headline") or {}
    drifted = [f["name"] for f in run["report"]["features"] if f["drifted"]]
    # clean traffic for the retrained version: nothing may stand, so the headline is green (it quotes it)
    summary.add(
        "next run: green",
        run["model_version"] == version
        and not run["dataset_drifted"]
        and not drifted
        and bool(head.get("ok")),
        run_evidence(run, model=model),
    )
    console.print(f"  next monitor run on the new traffic: {head.get('text', '')}")


def _bad_candidate(
    client: httpx.Client, model: str, version: int, *, console: Console, summary: Summary
) -> None:
    """A retrain on shuffled labels (the gate's fire drill): rejected, ``version`` still serving."""
    console.print("  a deliberately bad candidate: retrain on shuffled labels (a fire drill of the gate)")
    r = client.post(
        f"/v1/models/{model}/retrain", json={"drill": "shuffled_labels", "reason": "gate fire drill"}
    )
    r.raise_for_status()
    bad = wait_for_job(client, int(r.json()["id"]), console=console)
    failed = [c for c in (bad.get("gate") or {}).get("checks", []) if c.get("verdict") == "failed"]
    for line in gate_lines(bad):
        console.print(f"    gate: {line}")
    still = _get(client, f"/v1/models/{model}")["model_version_status"]
    untouched = any(int(s["version"]) == version and s["state"] == "AVAILABLE" for s in still)
    summary.add(
        "bad candidate rejected",
        bad["state"] == "rejected" and bool(failed) and untouched,
        f"job {bad['id']} {bad['state']}: "
        + ("; ".join(f"{c['name']}: {c.get('message', '')}" for c in failed) or str(bad.get("error")))
        + f"; {model}:{version} still serves",
    )

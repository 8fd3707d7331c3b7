"""``driftwarden demo``: the end-to-end tour on the embedded default (SQLite, local cluster on loopback).

Each capability adds a step: generate data -> train on a local async cluster -> register and promote ->
serve over both protocols with every prediction logged -> baseline, new-category and drifted traffic,
drift verdicts and the HTML report -> the closed loop: the drift alert fires, a signed webhook reaches a
local receiver, the alert's retraining job trains on the cluster, passes the validation gate and is
promoted, the next run finds no feature drift, and a bad candidate is rejected (``service/demo_loop.py``).

The tour prints one line per step, a table per drift phase and the closing summary; the log records of
everything it runs go to :data:`LOG_FILE` (``--verbose`` shows them on stderr too).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
from rich.table import Table

from core.config import Settings
from core.tabular import Columns, write_table
from core.terminal import make_console
from service.demo_loop import DemoFailed, Summary
from training.cluster.datagen import TARGET, Scenario, default_logit, generate

if TYPE_CHECKING:
    from core.database import Database
    from monitors.findings import Headline
    from monitors.report import DriftReport

console = make_console(stderr=True)
log = logging.getLogger("driftwarden.demo")

LOG_FILE = Path("var/demo/demo.log")  # the tour's log records (each cluster node logs in its run dir)


def step(title: str) -> None:
    """Announce a demo step."""
    console.rule(f"[bold cyan]{title}")


def make_data(*, folder: Path, rows: int, seed: int) -> dict[Scenario, Path]:
    """Baseline training data plus one file per drift scenario (seeded)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for i, scenario in enumerate(Scenario):
        path = folder / f"{scenario.value}.csv"
        write_table(generate(rows, scenario=scenario, seed=seed + i), path)
        files[scenario] = path
        console.print(f"  {scenario.value:<16} {rows:>7} rows -> {path}")
    return files


def with_new_concept(columns: Columns, *, seed: int) -> Columns:
    """``columns`` with labels drawn from the changed relation of ``training.cluster.datagen``'s concept
    drift: the covariate-shifted applicants also default for other reasons, so the model's performance falls
    beyond the tolerance and the default ``harmful_drift`` rule (the one that retrains) fires, not only the
    drift rules (which notify)."""
    rng = np.random.default_rng(seed)
    logit = default_logit(columns, concept=True)
    labels = (rng.random(len(logit)) < 1.0 / (1.0 + np.exp(-logit))).astype(np.int64)
    return {**columns, TARGET: labels}


def json_rows(columns: Columns) -> list[dict[str, Any]]:
    """Feature columns as JSON request rows (missing values as null; the target left out)."""
    names = [n for n in columns if n != TARGET]
    out = []
    for i in range(len(columns[names[0]])):
        row: dict[str, Any] = {}
        for n in names:
            v = columns[n][i]
            v = v.item() if hasattr(v, "item") else v
            row[n] = None if isinstance(v, float) and math.isnan(v) else v
        out.append(row)
    return out


def send_traffic(*, client: httpx.Client, model: str, columns: Columns, batch: int = 100) -> int:
    """Send rows as TF Serving requests, then their ground truth as feedback; returns predictions answered."""
    rows, labels = json_rows(columns), columns[TARGET]
    answered = 0
    for start in range(0, len(rows), batch):
        r = client.post(f"/v1/models/{model}:predict", json={"instances": rows[start : start + batch]})
        r.raise_for_status()
        ids = r.json()["prediction_ids"]
        feedback = [{"prediction_id": pid, "label": int(labels[start + i])} for i, pid in enumerate(ids)]
        client.post(f"/v1/models/{model}/feedback", json={"labels": feedback}).raise_for_status()
        answered += len(ids)
    return answered


def wait_logged(*, client: httpx.Client, rows_written: int) -> int:
    """Wait until the prediction log has written ``rows_written`` rows in all (the writer is asynchronous),
    as long as it makes progress (:func:`service.demo_loop.follow`)."""
    from service.demo_loop import follow

    def observe() -> tuple[int | None, str]:
        written = int(client.get("/status").json()["prediction_log"]["rows_written"])
        return (written if written >= rows_written else None), f"{written} of {rows_written} rows written"

    return follow("the prediction log", observe, console=console, every_s=0.1)


METRICS = (("accuracy", "accuracy"), ("roc_auc", "ROC AUC"), ("f1", "F1"))  # the figures a phase shows


def metric_text(figures: Mapping[str, Any]) -> str:
    """``accuracy 0.9185, ROC AUC 0.9727, F1 0.8709``: the figures of :data:`METRICS` that are there."""
    return ", ".join(f"{label} {float(figures[k]):.4f}" for k, label in METRICS if figures.get(k) is not None)


def names(values: set[str] | list[str]) -> str:
    """Feature names as a reader writes them: ``age, credit_score, income``, or ``nothing``."""
    return ", ".join(sorted(values)) or "nothing"


def print_phase(*, run_id: Any, report: DriftReport, head: Headline) -> None:
    """One monitor run: its table of verdicts, quality flags, performance, dataset verdict and headline."""

    def num(v: float | None) -> str:
        return "-" if v is None else f"{v:.3g}"

    table = Table(title=f"run {run_id}: {report.rows} current rows vs {report.reference_rows} reference rows")
    for col in ("feature", "kind", "test", "statistic", "p (adj.)", "effect", "min effect", "verdict"):
        right = col in {"statistic", "p (adj.)", "effect", "min effect"}
        table.add_column(col, justify="right" if right else "left")
    rows = [*report.features, *(x for x in (report.prediction, report.multivariate) if x is not None)]
    for f in rows:
        r = f.result
        p = r.adjusted_p_value if r.adjusted_p_value is not None else r.p_value
        verdict = "[bold red]DRIFT[/]" if r.drifted else "[green]ok[/]"
        figures = (num(r.statistic), num(p), num(r.effect), num(r.threshold))
        table.add_row(f.name, f.kind, r.test, *figures, verdict)
    console.print(table)
    for q in report.quality:
        if q.flagged:
            console.print(
                f"  [yellow]quality[/] {q.feature}: {q.check} in {q.count} of {q.rows} rows ({q.rate:.2%}, "
                f"expected {q.expected_rate:.2%})"
            )
    if report.performance:
        line = f"  performance on {int(report.performance.get('rows', report.rows))} labelled rows: "
        line += metric_text(report.performance)
        if report.estimated_performance:
            line += f"; estimated without labels ({report.estimate_method}): "
            line += metric_text(report.estimated_performance)
        console.print(line)
    d = report.dataset
    verdict = "[bold red]dataset drifted[/]" if d.drifted else "[green]dataset stable[/]"
    console.print(
        f"  {verdict}: {d.n_drifted} of {d.n_features} features drifted ({d.share:.0%}; the rule: at least "
        f"{d.drift_share:.0%}, {d.correction} at alpha {d.alpha})"
    )
    console.print(f"  headline: {'[green]' if head.ok else '[bold red]'}{head.text}[/]")


RETRAIN_ROWS = 20_000  # labelled rows of the drifted phase: the retraining window (4,000 of them held out)


def watch_drift(
    *, settings: Settings, model: str, window: int, seed: int, report_path: Path, epochs: float, rows: int
) -> tuple[list[set[str]], Summary]:
    """Baseline, a new category, then covariate shift, a monitor run after each; then close the loop.

    The drifted phase sends ``RETRAIN_ROWS`` labelled predictions (the monitor still reads the newest
    ``window``), so that the retraining job the alert starts trains on 16,000 of them, as many as the first
    version had, in as many epochs (with 8,000 rows in twice the epochs, 3 of 16 candidates came out
    overconfident: their calibration error 0.03-0.05 against the serving version's 0.001-0.023, rightly
    rejected), and holds out 4,000 for the validation gate: enough for its bounds to be narrower than its
    tolerances.

    Returns the drifted features of each phase and the summary of the loop (drift -> alert -> signed
    webhook -> retraining job -> gate -> promotion -> clean run; a bad candidate rejected).
    """
    import base64
    import secrets

    from service.demo_loop import close_the_loop, webhook_receiver
    from service.serving.demo import running_server, with_demo_token

    live, headers = with_demo_token(_live_settings(settings, window=window, epochs=epochs, rows=rows))
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    summary = Summary()
    with (
        webhook_receiver(secret) as receiver,
        running_server(settings=live) as url,
        httpx.Client(base_url=url, timeout=60, headers=headers) as client,
    ):
        webhook_id = _subscribe(client, url=receiver.url, secret=secret, model=model)
        traffic = _Traffic(client, model=model, seed=seed, window=window)
        verdicts = _drift_phases(traffic, summary)
        _save_report(client, model=model, report_path=report_path)
        step("6. Close the loop: alert -> signed webhook -> retraining on the cluster -> gate -> promotion")
        summary.add("drift planted", True, "covariate shift: age, income and credit_score")
        close_the_loop(
            client=client,
            model=model,
            receiver=receiver,
            webhook_id=webhook_id,
            rows_in=traffic.rows_in,
            detected=verdicts[-1],
            planted=set(PLANTED[Scenario.COVARIATE_SHIFT]),
            send=traffic.send,
            monitor=traffic.monitor,
            console=console,
            summary=summary,
        )
        history = client.get(f"/v1/models/{model}/drift/history").json()
        show_observability(client=client, url=url, model=model)
    console.print(f"\n  {len(history.get('runs', []))} runs stored (GET /v1/models/{model}/drift/history)")
    summary.print(console)
    console.print(f"  the HTML report: {report_path}; the log of every step: {LOG_FILE}")
    return verdicts, summary


PHASES = (
    (Scenario.BASELINE, "baseline traffic (same distribution as training)"),
    (Scenario.NEW_CATEGORY, "a new category (loan_purpose = 'crypto')"),
    (
        Scenario.COVARIATE_SHIFT,
        "covariate shift (older applicants, lower incomes and credit scores) that hurts: they also "
        "default for other reasons",
    ),
)


def _live_settings(settings: Settings, *, window: int, epochs: float, rows: int) -> Settings:
    """The demo server's settings: the monitor run by the demo, retraining in the server on drifted rows."""
    return settings.model_copy(
        update={
            "monitor_window_rows": window,
            "monitor_enabled": False,  # the demo runs the monitor after each phase
            "worker_embedded": True,  # retraining jobs run in the server, on a local cluster
            "job_poll_interval_s": 0.5,
            "webhook_send_interval_s": 0.5,
            "retrain_window_rows": RETRAIN_ROWS,  # retrain on the drifted traffic
            # as many optimizer steps as the first training had (its data was rows/RETRAIN_ROWS times larger)
            "retrain_epochs": epochs * max(1.0, rows / RETRAIN_ROWS),
            "webhook_allow_private_urls": True,  # the demo's receiver listens on loopback
        }
    )


def _subscribe(client: httpx.Client, *, url: str, secret: str, model: str) -> str:
    """Subscribe the demo's webhook receiver at ``url`` to the model's alerts; the subscription's id."""
    hook = client.post(
        "/v1/webhooks",
        json={"url": url, "secret": secret, "filter": {"models": [model]}, "description": "demo"},
    )
    hook.raise_for_status()
    console.print(f"  webhook subscription {hook.json()['id']} -> {url} (Standard Webhooks, signed)")
    return str(hook.json()["id"])


class _Traffic:
    """The demo's traffic to a running server: windows of labelled predictions sent, monitor runs."""

    def __init__(self, client: httpx.Client, *, model: str, seed: int, window: int) -> None:
        self.client, self.model, self.seed, self.window = client, model, seed, window
        self.written = int(client.get("/status").json()["prediction_log"]["rows_written"])
        self.sent: dict[str, int] = {}  # the labelled predictions this server logged, by scenario

    def send(self, scenario: str, offset: int, n: int | None = None) -> None:
        """Send ``n`` (default a window of) labelled predictions of ``scenario`` and wait until logged."""
        cols = generate(n or self.window, scenario=Scenario(scenario), seed=self.seed + 1000 + offset)
        if scenario == Scenario.COVARIATE_SHIFT.value:  # the shift hurts: harmful_drift retrains
            cols = with_new_concept(cols, seed=self.seed + 2000 + offset)
        answered = send_traffic(client=self.client, model=self.model, columns=cols)
        self.written += answered
        self.sent[scenario] = self.sent.get(scenario, 0) + answered
        wait_logged(client=self.client, rows_written=self.written)

    def rows_in(self) -> str:
        """What the log holds of this run's traffic."""
        parts = ", ".join(f"{n} {scenario}" for scenario, n in self.sent.items())
        return f"{sum(self.sent.values())} labelled predictions of {self.model} from this run ({parts})"

    def monitor(self) -> dict[str, Any]:
        """Run the monitor now; its answer."""
        run = self.client.post(f"/v1/models/{self.model}/monitors:run")
        run.raise_for_status()
        doc: dict[str, Any] = run.json()
        return doc


def _drift_phases(traffic: _Traffic, summary: Summary) -> list[set[str]]:
    """Send each phase's traffic and run the monitor after it; the drifted features of each phase."""
    from monitors.findings import finding_from_dict
    from monitors.findings import headline as make_headline
    from monitors.report import report_from_dict
    from service.demo_loop import run_evidence

    verdicts: list[set[str]] = []
    for i, (scenario, title) in enumerate(PHASES):
        n = RETRAIN_ROWS if scenario is Scenario.COVARIATE_SHIFT else traffic.window
        console.print(f"\n[bold]{title}[/]: {n} predictions with their labels")
        traffic.send(scenario.value, i, n)
        doc = traffic.monitor()
        head = doc.get("headline") or {}
        report = report_from_dict(doc["report"])
        alerts = [finding_from_dict(f) for f in head.get("findings", []) if f["kind"] == "alert"]
        print_phase(run_id=doc["run_id"], report=report, head=make_headline(report, extra=alerts))
        verdicts.append({f["name"] for f in doc["report"]["features"] if f["drifted"]})
        if scenario is Scenario.BASELINE:
            summary.add(
                "baseline traffic",
                not verdicts[-1] and not doc["dataset_drifted"],
                run_evidence(doc, model=traffic.model),
            )
    console.print()
    for phase, found, (scenario, _) in zip(
        ("baseline", "new category", "covariate shift"), verdicts, PHASES, strict=True
    ):
        want = set(PLANTED[scenario])
        missed, extra = want - found, found - want
        if not missed and not extra:
            console.print(f"  {phase:<16} flagged exactly what was planted: {names(want)}")
        else:
            console.print(f"  [yellow]{phase:<16} missed {names(missed)}; also flagged {names(extra)}[/]")
    return verdicts


def _save_report(client: httpx.Client, *, model: str, report_path: Path) -> None:
    """Save the latest HTML drift report of ``model`` to ``report_path``."""
    html = client.get(f"/reports/{model}/drift")
    html.raise_for_status()
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(html.text)
    console.print(f"\n  the latest HTML report (GET /reports/{model}/drift) saved to {report_path}")


PLANTED: dict[Scenario, tuple[str, ...]] = {
    Scenario.BASELINE: (),
    Scenario.NEW_CATEGORY: ("loan_purpose",),
    Scenario.COVARIATE_SHIFT: ("age", "income", "credit_score"),
}


DASHBOARDS = {
    "driftwarden-service": "service overview: traffic, errors, latency, batches, log pipeline",
    "driftwarden-drift": "model drift & quality: per-feature drift, drift share, performance, label coverage",
    "driftwarden-infra": "infrastructure: health checks, database, disk, process",
}


def show_observability(*, client: httpx.Client, url: str, model: str, wait_s: float = 15.0) -> None:
    """Where the metrics, dashboards, alert rules and runbooks are, with two live series as a taste.

    The drift series follow the stored runs within ``drift_metrics_cache_s`` (they are re-read from the
    database by a periodic job, never at scrape time), so the last run's verdict is waited for.
    """
    wanted = (f'driftwarden_dataset_drifted{{model="{model}"}}', "driftwarden_database_up ")
    deadline = time.monotonic() + wait_s
    while True:
        live = [line for line in client.get("/metrics").text.splitlines() if line.startswith(wanted)]
        if len(live) == len(wanted) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    console.rule("[bold cyan]Observability")
    console.print(f"  Prometheus metrics: {url}/metrics (the demo server; `driftwarden serve` on :8501)")
    for line in live:
        console.print(f"    {line}")
    console.print(f"  health: {url}/healthz (alive), {url}/readyz (ready, failing checks named)")
    console.print(
        "  Grafana dashboards (provisioned by `docker compose up`, JSON in deploy/grafana/dashboards/):"
    )
    for uid, what in DASHBOARDS.items():
        console.print(f"    {uid}: {what}")
    console.print(
        "  alerting rules: deploy/prometheus/rules/driftwarden.yml; Alertmanager: deploy/alertmanager/; "
        "runbooks: docs/operations.md"
    )


def own_model_name(*, db: Database, settings: Settings, wanted: str) -> str:
    """``wanted``, unless the database or the registry already knows a model of that name (an earlier demo
    in this checkout or in the same database): then the first free ``<wanted>-<n>``, said on the console.

    A run of the demo never meets an earlier run's state: its versions, its alerts still firing, its
    retraining cooldown, its prediction log all belong to another model.
    """
    from registry.names import MAX_NAME_LENGTH, check_name
    from registry.service import latest_version

    def taken(name: str) -> bool:
        if (settings.registry_path / name).exists():
            return True
        with db.session() as session:
            return latest_version(session=session, model_name=name) is not None

    check_name(wanted, given_as="--model")
    if not taken(wanted):
        return wanted
    n = 2
    while taken(name := f"{wanted[: MAX_NAME_LENGTH - 1 - len(str(n))]}-{n}"):
        n += 1
    console.print(
        f"model {wanted!r} exists already (an earlier demo in this checkout or database): this run uses "
        f"[bold]{name}[/], so that none of the earlier run's state (versions, alerts still firing, the "
        "retraining cooldown, its predictions) meets this one"
    )
    log.info("model %r exists already: this demo run uses %r", wanted, name)
    return name


def run_demo(
    *, settings: Settings, model: str, rows: int, workers: int, epochs: float, seed: int, window: int = 2000
) -> str:
    """Run the tour; returns the model it trained, served and retrained (``model``, or its own name when an
    earlier run left one of that name: :func:`own_model_name`)."""
    from core.database import open_database
    from registry.saved_model import limit_threads

    console.print(
        f"driftwarden demo: the log records of every step go to {LOG_FILE} "
        "(`driftwarden demo --verbose` shows them here too)"
    )
    # The demo's servers run in this process, after training has run TensorFlow here: the model calls'
    # thread setting (DRIFTWARDEN_MODEL_THREADS) is taken only before TensorFlow first runs, so it is set now.
    limit_threads(intra_op=settings.model_threads)
    db = open_database()
    try:
        model = own_model_name(db=db, settings=settings, wanted=model)
    finally:
        db.dispose()
    step("1. Data: a credit-risk table and its drift scenarios")
    data = make_data(folder=Path("var/demo/data"), rows=rows, seed=seed)

    step(f"2. Train {model!r} on a local async cluster (1 ps, {workers} workers, chief)")
    _train_and_promote(settings=settings, model=model, data=data, workers=workers, epochs=epochs, seed=seed)
    step("4. Serve it: TF Serving REST and Open Inference Protocol v2, every prediction logged")
    _serve(settings=settings, model=model, seed=seed)
    step("5. Watch for drift: baseline traffic, then a new category, then covariate shift")
    _, summary = watch_drift(
        settings=settings,
        model=model,
        window=window,
        seed=seed,
        report_path=Path("var/demo/drift-report.html"),
        epochs=epochs,
        rows=rows,
    )
    if not summary.ok:
        stage, evidence = next((stage, evidence) for stage, ok, evidence in summary.rows if not ok)
        raise DemoFailed(f"the loop did not close at {stage!r}: {evidence} (the table above has every stage)")
    return model


def _train_and_promote(
    *, settings: Settings, model: str, data: Mapping[Scenario, Path], workers: int, epochs: float, seed: int
) -> None:
    """Train ``model`` on the baseline data on a local async cluster, register it and promote it."""
    from core.database import open_database
    from registry.service import promote
    from training.cluster.flows import run_training
    from training.cluster.progress import Progress
    from training.cluster.run_spec import Mode, TrainingRunSpec

    db = open_database()
    progress = Progress(f"train {model} (async)")
    console.print(f"  training on 1 parameter server, {workers} workers and a chief (each step in the log)")
    try:
        job = TrainingRunSpec(
            model_name=model,
            data=data[Scenario.BASELINE],
            mode=Mode.ASYNC,
            ps=1,
            workers=workers,
            epochs=epochs,
            seed=seed,
            steps_per_closure=settings.steps_per_closure,
            checkpoint_every=settings.checkpoint_every_steps,
        )
        result = run_training(
            job=job,
            db=db,
            registry=settings.registry_path,
            checkpoint_root=settings.checkpoint_path,
            progress=progress,
        )
        progress.close()
        m = result.metrics
        console.print(
            f"  registered [bold]{model}:{result.version.version}[/] at {result.version.path}\n"
            f"  held-out accuracy {m['accuracy']:.4f}, ROC AUC {m['roc_auc']:.4f}, F1 {m['f1']:.4f} "
            f"({result.seconds:.1f}s)"
        )
        step("3. Promote the new version to serving")
        with db.session() as session:
            promote(session=session, model_name=model, version=result.version.version, actor="demo")
        console.print(f"  {model}:{result.version.version} is now serving (`driftwarden models list`)")
    finally:
        progress.close()
        db.dispose()


def _serve(*, settings: Settings, model: str, seed: int) -> None:
    """Serve ``model`` over both protocols, every prediction logged; a dropped row fails the demo."""
    from service.serving.demo import run_serving_demo

    sample = json_rows(generate(200, seed=seed + 50))
    # each request and answer goes to the log; the tour shows what they add up to
    served = run_serving_demo(
        settings=settings, model=model, rows=sample, say=lambda line: log.info(line.strip())
    )
    refused = served.rejected_error if served.rejected_error != "None" else "answered, not refused"
    console.print(
        f"  served {model}:{served.version} at {served.url}: {served.v1_rows} rows over TF Serving REST "
        f"(POST /v1/models/{model}:predict), {served.v2_rows} over Open Inference Protocol v2 "
        f"(POST /v2/models/{model}/infer)\n"
        f"  a row with income -1.0 -> {refused}\n"
        f"  ground truth: {served.labels_stored} labels stored (POST /v1/models/{model}/feedback)\n"
        f"  server stopped gracefully; prediction log holds {served.logged_rows} rows of {model}, "
        f"rows dropped {served.rows_dropped} (each request and answer: {LOG_FILE})"
    )
    if served.rows_dropped:
        raise DemoFailed(f"the demo failed at serving: the prediction log dropped {served.rows_dropped} rows")

"""Alert backtest (pure): scheduled monitor runs replayed on synthetic traffic, through the real engine and
the real rules, counting the notifications no one needed and how soon planted shifts are caught.

Each run's window (:class:`alerts.backtest_window.SlidingWindow`) is evaluated by
:func:`monitors.engine.evaluate` under the model's monitor config, as a scheduled run evaluates it
(``monitors.flows.evaluate_window``); each rule's findings come from :func:`alerts.rules.evaluate` on
the report's document (:func:`rules_view`) with the alerts' fingerprints (``alerts.lifecycle.alert_labels``),
as ``alerts.flows.evaluate_model`` computes them; the headline is :func:`monitors.findings.headline`. The
alerts' lifecycle is replayed in memory (:class:`Replay`, the states of ``alerts.lifecycle``): nothing is
stored and nothing is sent.

A **false notification** is an alert that starts firing on the stream without drift (a new alert firing at
once, or a pending one reaching its ``for``); the **detection delay** of a shift is the first run, counted
from the first run whose window holds shifted rows (0), at which one of the rule's alerts is firing. A shift
is **visible** from the first run whose window a one-off comparison (``alpha``, no budget spent over repeated
runs: what a single-window test finds) flags for what was planted (:func:`seen`); a gradual shift is followed
for at most :data:`GRADUAL_DAYS` days. A shift **harms** from the first run whose window the same one-off
comparison finds harmful (its ``harm`` figure, :mod:`monitors.harm`, at ``alpha``): the reference point of the
``harmful_drift`` rule's delay.
"""

from __future__ import annotations

import math
import multiprocessing
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from alerts import rules as rule_kinds
from alerts.backtest_advice import (
    DAYS_PER_NOTICE,
    MORE_FOR,
    Alternative,
    Facts,
    not_caught,
    runs_text,
    verdict,
    window_warnings,
)
from alerts.backtest_traffic import GRADUAL, Pool, Shift, ShiftKind, Traffic, describe
from alerts.backtest_window import Layout, SlidingWindow
from alerts.labels import fingerprint
from alerts.lifecycle import alert_labels, is_firing
from alerts.specs import Kind, RuleSpec
from monitors.config import MonitorConfig
from monitors.engine import evaluate
from monitors.findings import headline, report_findings
from monitors.profile import Profile
from monitors.report import DriftReport, FeatureDrift, Histogram
from monitors.sketch import WindowSketch

NO_DRIFT = "no_drift"
GRADUAL_DAYS = 3.0  # a gradual shift not caught within this many days counts as never caught

Progress = Callable[[int], None]


@dataclass(frozen=True)
class RunOutcome:
    """What one run showed: the headline's verdict, and each rule's findings as (fingerprint, active) pairs
    (None: the report cannot say, so the rule's alerts keep their state)."""

    green: bool
    findings: dict[str, tuple[tuple[str, bool], ...] | None]
    visible: bool = False  # a one-off comparison of the window flags the planted shift (:func:`seen`)
    harmful: bool = False  # a one-off comparison of the window finds it harmful (its ``harm`` figure)


@dataclass(frozen=True)
class Judge:
    """The monitor's evaluation of a window and the rules' findings on its report."""

    profile: Profile
    config: MonitorConfig
    rules: tuple[RuleSpec, ...]
    model_name: str
    every_s: float  # seconds between runs: the level a run tests at (monitors.horizon)

    def __call__(self, sketch: WindowSketch, shift: Shift | None = None, harm: bool = False) -> RunOutcome:
        """The run's outcome; with ``shift``, also whether a one-off comparison of the window sees it; with
        ``harm``, whether that comparison finds the window harmful."""
        report = evaluate(profile=self.profile, sketch=sketch, config=self.config, every_s=self.every_s)
        findings = rule_findings(self.rules, self.model_name, rules_view(report))
        one_off = (
            evaluate(profile=self.profile, sketch=sketch, config=self.config)
            if shift is not None or harm
            else None
        )
        visible = shift is not None and one_off is not None and seen(one_off, shift)
        harmful = harm and one_off is not None and bool((one_off.harm or {}).get("harmful"))
        return RunOutcome(green=headline(report).ok, findings=findings, visible=visible, harmful=harmful)


def seen(report: DriftReport, shift: Shift) -> bool:
    """Whether a report flags what ``shift`` planted: the feature of a mean shift drifted; the feature of a
    new category drifted or its unseen-category check flagged; flipped labels: a realised metric worse than
    its limit, or the concept-drift alarm."""
    if shift.kind is ShiftKind.PERFORMANCE_DROP:
        concept = bool(report.concept_drift and report.concept_drift.get("drifted"))
        return concept or any(f.kind == "performance" for f in report_findings(report))
    feature = next((f for f in report.features if f.name == shift.feature), None)
    if feature is not None and feature.drifted:
        return True
    return shift.kind is ShiftKind.NEW_CATEGORY and any(
        q.flagged and q.feature == shift.feature and q.check == "unseen_category" for q in report.quality
    )


def rule_findings(
    rules: tuple[RuleSpec, ...], model_name: str, doc: Mapping[str, Any]
) -> dict[str, tuple[tuple[str, bool], ...] | None]:
    """Each rule's findings on a report's document as (fingerprint, active) pairs (None: it cannot say)."""
    out: dict[str, tuple[tuple[str, bool], ...] | None] = {}
    for spec in rules:
        found = rule_kinds.evaluate(spec, doc)
        out[spec.name] = (
            None
            if found is None
            else tuple((fingerprint(alert_labels(spec, model_name, f)), f.active) for f in found)
        )
    return out


_BARE = Histogram(labels=[], reference=[], current=[])


def _bare(drift: FeatureDrift) -> FeatureDrift:
    return replace(drift, statistics={}, histogram=_BARE)


def rules_view(report: DriftReport) -> dict[str, Any]:
    """``report.as_dict()`` without what no rule reads (each verdict's other statistics and its histogram,
    a third of a run's time): the rules' findings on it are those on the whole document."""
    return replace(
        report,
        features=[_bare(f) for f in report.features],
        prediction=None if report.prediction is None else _bare(report.prediction),
        multivariate=None if report.multivariate is None else _bare(report.multivariate),
        outputs=[_bare(f) for f in report.outputs],
    ).as_dict()


@dataclass
class _Open:
    """An open alert: its rule, whether it fires, and its consecutive active runs."""

    rule: str
    firing: bool
    active_runs: int = 1


@dataclass
class Replay:
    """The rules' alerts through their life, in memory: a new alert fires at once, or is pending until its
    rule's ``for`` consecutive active runs (``alerts.lifecycle.is_firing``); an open alert no longer active
    (its rule evaluated) resolves."""

    rules: tuple[RuleSpec, ...]
    open: dict[str, _Open] = field(default_factory=dict)
    fired: Counter[str] = field(default_factory=Counter)  # transitions to firing, by rule
    first: dict[str, int] = field(default_factory=dict)  # the first run at which a rule's alert fires
    runs: int = 0

    def step(self, outcome: RunOutcome) -> None:
        """One run's findings."""
        active: set[str] = set()
        evaluated: set[str] = set()
        for spec in self.rules:
            found = outcome.findings.get(spec.name)
            if found is None:
                continue
            evaluated.add(spec.name)
            for fp, is_active in found:
                if is_active:
                    active.add(fp)
                    self._advance(spec, fp)
        for fp, alert in list(self.open.items()):
            if fp not in active and alert.rule in evaluated:
                del self.open[fp]
        for alert in self.open.values():
            if alert.firing:
                self.first.setdefault(alert.rule, self.runs)
        self.runs += 1

    def _advance(self, spec: RuleSpec, fp: str) -> None:
        """One more active run of an alert (a new one: its first), firing by ``alerts.lifecycle``'s rule."""

        alert = self.open.get(fp)
        if alert is None:
            alert = self.open[fp] = _Open(spec.name, firing=False)
        else:
            alert.active_runs += 1
        firing = is_firing(firing=alert.firing, active_runs=alert.active_runs, for_runs=spec.for_runs)
        if firing and not alert.firing:
            self.fired[spec.name] += 1
        alert.firing = firing

    @property
    def all_fired(self) -> bool:
        return all(spec.name in self.first for spec in self.rules)


@dataclass(frozen=True)
class Plan:
    """The runs: the window, the rows a run adds, how many runs, over how many days, the traffic's rate and
    seed, and the classification threshold the monitor counts with."""

    window: int
    step: int
    runs: int
    days: float
    rate: float
    seed: int = 0
    threshold: float = 0.5

    @property
    def layout(self) -> Layout:
        return Layout.of(window=self.window, step=self.step)

    @property
    def interval_s(self) -> float:
        """Seconds between two runs."""
        return self.days * 86_400 / self.runs if self.runs else 0.0


@dataclass(frozen=True)
class Scenario:
    """One stream: without drift (``shift`` None), or with a shift planted after the first window; how many
    runs at most, and whether it stops once every rule has fired."""

    name: str
    shift: Shift | None
    runs: int
    until_all_fired: bool = False


@dataclass(frozen=True)
class Setup:
    """What every stream of a backtest shares (sent once to each worker process)."""

    judge: Judge
    pool: Pool
    plan: Plan


def horizon(plan: Plan, shift: Shift, rules: tuple[RuleSpec, ...]) -> int:
    """The runs a shift is followed for: a gradual one :data:`GRADUAL_DAYS` days (at most the backtest);
    another until the window holds only shifted rows, then the longest ``for`` more."""
    if shift.kind in GRADUAL:
        return min(plan.runs, math.ceil(GRADUAL_DAYS * plan.runs / plan.days))
    longest = max((spec.for_runs for spec in rules), default=1)
    return min(plan.runs, math.ceil(plan.window / plan.step) + longest)


def run_stream(
    setup: Setup, scenario: Scenario, first: int, last: int, progress: Progress | None = None
) -> list[RunOutcome]:
    """The outcomes of runs ``[first, last)`` of a scenario (fewer when it stops once every rule fired)."""
    plan, judge = setup.plan, setup.judge
    traffic = Traffic(setup.pool, seed=plan.seed, rate=plan.rate, shift=scenario.shift, start=plan.window)
    window = SlidingWindow(
        profile=judge.profile, traffic=traffic, layout=plan.layout, threshold=plan.threshold, first=first
    )
    replay = Replay(judge.rules) if scenario.until_all_fired else None
    out: list[RunOutcome] = []
    looking = scenario.shift  # asked whether the shift is visible until it is
    harm = scenario.shift is not None  # ... and whether it harms until it does
    for _ in range(first, last):
        out.append(judge(window.next(), looking, harm))
        if out[-1].visible:
            looking = None
        if out[-1].harmful:
            harm = False
        if progress is not None:
            progress(1)
        if replay is not None:
            replay.step(out[-1])
            if replay.all_fired:
                break
    return out


Task = tuple[Scenario, int, int]  # a scenario's runs [first, last)


def tasks(scenarios: list[Scenario], *, pieces: int) -> list[Task]:
    """The streams cut for the workers: the no-drift stream in ``pieces``, the shifted ones whole (they stop
    early)."""
    out: list[Task] = []
    for scenario in scenarios:
        n = 1 if scenario.until_all_fired else max(1, min(pieces, scenario.runs))
        cuts = [scenario.runs * i // n for i in range(n + 1)]
        out += [(scenario, lo, hi) for lo, hi in zip(cuts[:-1], cuts[1:], strict=True) if hi > lo]
    return out


_worker_setup: Setup | None = None


def _init_worker(setup: Setup) -> None:
    global _worker_setup
    _worker_setup = setup


def _run_task(task: Task) -> tuple[Task, list[RunOutcome]]:
    assert _worker_setup is not None, "the worker was not initialised"
    return task, run_stream(_worker_setup, *task)


def run_tasks(
    setup: Setup, todo: list[Task], *, workers: int, progress: Progress | None = None
) -> dict[str, list[RunOutcome]]:
    """Each scenario's outcomes in run order: inline, or on ``workers`` processes."""
    done: dict[Task, list[RunOutcome]] = {}
    if workers <= 1:
        for task in todo:
            done[task] = run_stream(setup, *task, progress=progress)
            _finish(progress, task, done[task])
    else:
        context = multiprocessing.get_context("spawn")  # no fork of a process with threads (the progress bar)
        with ProcessPoolExecutor(
            workers, mp_context=context, initializer=_init_worker, initargs=(setup,)
        ) as pool:
            longest_first = sorted(todo, key=lambda t: t[2] - t[1], reverse=True)  # the whole shifts first
            for future in as_completed([pool.submit(_run_task, task) for task in longest_first]):
                task, outcomes = future.result()
                done[task] = outcomes
                if progress is not None:
                    progress(len(outcomes))
                _finish(progress, task, outcomes)
    by_name: dict[str, list[RunOutcome]] = {}
    for task in todo:  # in order: a scenario's pieces follow each other
        by_name.setdefault(task[0].name, []).extend(done[task])
    return by_name


def _finish(progress: Progress | None, task: Task, outcomes: list[RunOutcome]) -> None:
    """Advance the progress over the runs a stream that stopped early did not need."""
    if progress is not None:
        progress(task[2] - task[1] - len(outcomes))


@dataclass(frozen=True)
class RuleResult:
    """One rule's figures: its false notifications (on the stream without drift) and its delay per shift."""

    name: str
    kind: str
    for_runs: int
    false_notifications: int
    false_notifications_per_30d: float
    detection_delay_runs: dict[str, int | None]
    verdict: str = (
        ""  # quiet or noisy, fast or slow, and the setting that trades them (alerts.backtest_advice)
    )
    not_caught: dict[str, str] = field(default_factory=dict)  # per shift never caught: why
    alternatives: tuple[Alternative, ...] = ()  # the same runs with another `for`

    def delay_seconds(self, interval_s: float) -> dict[str, float | None]:
        """Each delay as seconds at ``interval_s`` between runs (None: never caught)."""
        return {s: None if d is None else d * interval_s for s, d in self.detection_delay_runs.items()}


@dataclass(frozen=True)
class BacktestResult:
    """Every rule's figures and the share of runs without drift whose headline is green."""

    plan: Plan
    rules: list[RuleResult]
    green_runs: int
    shifts: list[Shift]
    visible_at_run: dict[str, int | None] = field(default_factory=dict)  # per shift (None: never visible)
    harmful_at_run: dict[str, int | None] = field(default_factory=dict)  # per shift (None: never harmful)
    followed_runs: dict[str, int] = field(default_factory=dict)  # per shift: the runs replayed
    warnings: list[str] = field(default_factory=list)  # on the windows (alerts.backtest_advice)

    def delay_text(self, runs: int | None, shift: str) -> str:
        """A delay as runs and time (``21 runs (1 h 45 min)``); never: within how many runs."""
        if runs is not None:
            return runs_text(runs, self.plan.interval_s)
        return f"not within {runs_text(self.followed_runs.get(shift, 0), self.plan.interval_s)}"

    @property
    def headline_green_fraction(self) -> float:
        return self.green_runs / self.plan.runs if self.plan.runs else 0.0

    @property
    def total_false_notifications_per_30d(self) -> float:
        return round(sum(r.false_notifications_per_30d for r in self.rules), 3)

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` document."""
        interval_s = self.plan.interval_s
        return {
            "interval_seconds": round(interval_s, 3),
            "warnings": self.warnings,
            "shifts": {
                s.kind.value: {
                    "description": describe(s),
                    "feature": s.feature,
                    "runs_followed": self.followed_runs.get(s.kind.value),
                }
                for s in self.shifts
            },
            "rules": [
                {
                    "name": r.name,
                    "kind": r.kind,
                    "for": r.for_runs,
                    "false_notifications_per_30d": r.false_notifications_per_30d,
                    "detection_delay_runs": r.detection_delay_runs,
                    "detection_delay_seconds": r.delay_seconds(interval_s),
                    "not_caught": r.not_caught,
                    "verdict": r.verdict,
                    "alternatives": [a.as_dict() for a in r.alternatives],
                }
                for r in self.rules
            ],
            "total_false_notifications_per_30d": self.total_false_notifications_per_30d,
            "headline_green_fraction": round(self.headline_green_fraction, 4),
            "visible_at_run": self.visible_at_run,
            "harmful_at_run": self.harmful_at_run,
        }


def scenarios(setup: Setup, shifts: list[Shift]) -> list[Scenario]:
    """The stream without drift, then one per shift."""
    plan, rules = setup.plan, setup.judge.rules
    out = [Scenario(NO_DRIFT, None, plan.runs)]
    return out + [Scenario(s.kind.value, s, horizon(plan, s, rules), until_all_fired=True) for s in shifts]


def total_runs(setup: Setup, shifts: list[Shift]) -> int:
    """The runs of a backtest at most (its progress bar's total)."""
    return sum(s.runs for s in scenarios(setup, shifts))


def backtest(
    *, setup: Setup, shifts: list[Shift], workers: int = 1, progress: Progress | None = None
) -> BacktestResult:
    """The runs without drift and with each shift, their alerts replayed; the figures per rule."""
    plan, rules = setup.plan, setup.judge.rules
    todo = tasks(scenarios(setup, shifts), pieces=4 * workers)
    outcomes = run_tasks(setup, todo, workers=workers, progress=progress)
    replays = {}
    for name, runs in outcomes.items():
        replay = replays[name] = Replay(rules)
        for outcome in runs:
            replay.step(outcome)
    result = summarize(plan=plan, rules=rules, replays=replays, outcomes=outcomes[NO_DRIFT], shifts=shifts)
    visible = {s.kind.value: first_visible(outcomes[s.kind.value]) for s in shifts}
    harmful = {s.kind.value: first_harmful(outcomes[s.kind.value]) for s in shifts}
    result = replace(
        result,
        visible_at_run=visible,
        harmful_at_run=harmful,
        followed_runs={s.kind.value: len(outcomes[s.kind.value]) for s in shifts},
    )
    return advise(result, specs=rules, outcomes=outcomes, facts=facts(setup))


def facts(setup: Setup) -> Facts:
    """What the advice reads of the setup: the model's monitor config, its features, the labelled share."""
    config, profile, labels = setup.judge.config, setup.judge.profile, setup.pool.labels
    disabled = {name for name, o in config.features.items() if not o.enabled}
    return Facts(
        budget=config.false_alarms_per_30d,
        drift_share=config.drift_share,
        harm_min_labels=config.harm_min_labels,
        features=len([name for name in profile.features if name not in disabled]),
        labelled_share=0.0 if labels is None or not labels.size else float(np.mean(~np.isnan(labels))),
    )


def alternatives(
    spec: RuleSpec, *, plan: Plan, outcomes: dict[str, list[RunOutcome]], shifts: list[Shift], noisy: bool
) -> tuple[Alternative, ...]:
    """The rule's figures on the same runs with ``for: 1`` (when higher) and, when noisy, with ``for``
    up to :data:`~alerts.backtest_advice.MORE_FOR` higher: its findings do not depend on ``for``."""
    tried = ([1] if spec.for_runs > 1 else []) + (
        list(range(spec.for_runs + 1, spec.for_runs + MORE_FOR + 1)) if noisy else []
    )
    out = []
    for n in tried:
        other = spec.model_copy(update={"for_runs": n})
        replays = {}
        for name, runs in outcomes.items():
            replay = replays[name] = Replay((other,))
            for outcome in runs:
                replay.step(outcome)
        out.append(
            Alternative(
                for_runs=n,
                false_notifications_per_30d=round(
                    replays[NO_DRIFT].fired[spec.name] * DAYS_PER_NOTICE / plan.days, 3
                ),
                detection_delay_runs={
                    s.kind.value: replays[s.kind.value].first.get(spec.name) for s in shifts
                },
            )
        )
    return tuple(out)


def advise(
    result: BacktestResult,
    *,
    specs: tuple[RuleSpec, ...],
    outcomes: dict[str, list[RunOutcome]],
    facts: Facts,
) -> BacktestResult:
    """The result with each rule's verdict, why it never caught a shift, and the windows' warnings."""
    plan, interval_s = result.plan, result.plan.interval_s
    by_name = {spec.name: spec for spec in specs}
    rules = []
    for r in result.rules:
        spec = by_name[r.name]
        noisy = r.false_notifications_per_30d > facts.budget
        alts = alternatives(spec, plan=plan, outcomes=outcomes, shifts=result.shifts, noisy=noisy)
        seen_at = result.harmful_at_run if spec.kind is Kind.HARMFUL_DRIFT else result.visible_at_run
        why = {
            s.kind.value: not_caught(
                kind=spec.kind,
                params=spec.params,
                shift=s,
                facts=facts,
                window=plan.window,
                followed=result.followed_runs.get(s.kind.value, 0),
                interval_s=interval_s,
            )
            for s in result.shifts
            if r.detection_delay_runs.get(s.kind.value) is None
        }
        line = verdict(
            for_runs=r.for_runs,
            false_per_30d=r.false_notifications_per_30d,
            delays=r.detection_delay_runs,
            seen_at=seen_at,
            harm=spec.kind is Kind.HARMFUL_DRIFT,
            alternatives=alts,
            budget=facts.budget,
            interval_s=interval_s,
        )
        rules.append(replace(r, verdict=line, not_caught=why, alternatives=alts))
    warnings = window_warnings(
        window=plan.window, step=plan.step, rate=plan.rate, interval_s=interval_s, days=plan.days
    )
    return replace(result, rules=rules, warnings=warnings)


def first_visible(outcomes: list[RunOutcome]) -> int | None:
    """The first run whose window a one-off comparison sees the shift in (None: never)."""
    return next((i for i, outcome in enumerate(outcomes) if outcome.visible), None)


def first_harmful(outcomes: list[RunOutcome]) -> int | None:
    """The first run whose window a one-off comparison finds harmful (None: never)."""
    return next((i for i, outcome in enumerate(outcomes) if outcome.harmful), None)


def summarize(
    *,
    plan: Plan,
    rules: tuple[RuleSpec, ...],
    replays: dict[str, Replay],
    outcomes: list[RunOutcome],
    shifts: list[Shift],
) -> BacktestResult:
    """The figures per rule from the replayed streams."""
    quiet = replays[NO_DRIFT]
    scale = DAYS_PER_NOTICE / plan.days
    results = [
        RuleResult(
            name=spec.name,
            kind=spec.kind.value,
            for_runs=spec.for_runs,
            false_notifications=quiet.fired[spec.name],
            false_notifications_per_30d=round(quiet.fired[spec.name] * scale, 3),
            detection_delay_runs={s.kind.value: replays[s.kind.value].first.get(spec.name) for s in shifts},
        )
        for spec in rules
    ]
    green = sum(outcome.green for outcome in outcomes)
    return BacktestResult(plan=plan, rules=results, green_runs=green, shifts=shifts)

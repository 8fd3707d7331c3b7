"""A drift report as a table on the terminal (used by `driftwarden drift` and the demo).

On a terminal rich fits the table to its width. Piped or captured (a file, a CI log, a test), there is no
width to fit: the table is printed at its natural width and lines are not wrapped, so no column name or
value is cut ("statis…") and each finding stays on one line.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from monitors.findings import (
    Headline,
    causes_text,
    estimate_label,
    feature_summary,
    harm_line,
    headline,
    top_causes,
)
from monitors.report import DriftReport

SHOWN = 5  # segments and weak slices printed (the HTML report and the JSON have them all)


def print_report(
    report: DriftReport, *, console: Console | None = None, summary: Headline | None = None
) -> None:
    """Per-feature verdicts sorted as the report holds them, quality flags, performance, dataset verdict,
    and the headline over every finding (never green while one stands)."""

    def num(v: float | None) -> str:
        return "-" if v is None else f"{v:.3g}"

    table = Table(title=f"Drift: {report.rows} current rows vs {report.reference_rows} reference rows")
    for col in ("feature", "kind", "test", "statistic", "p (adj.)", "effect", "min effect", "verdict"):
        table.add_column(
            col, justify="right" if col in {"statistic", "p (adj.)", "effect", "min effect"} else "left"
        )
    rows = list(report.features)
    rows += [x for x in (report.prediction, report.multivariate) if x is not None]
    for f in rows:
        r = f.result
        p = r.adjusted_p_value if r.adjusted_p_value is not None else r.p_value
        table.add_row(
            escape(f.name),  # a client's name, never markup
            f.kind,
            r.test,
            num(r.statistic),
            num(p),
            num(r.effect),
            num(r.threshold),
            "[bold red]DRIFT[/]" if r.drifted else "[green]ok[/]",
        )
    console = console or Console()
    wrap = console.is_terminal
    _print_table(console, table)
    if report.ignored_columns:
        console.print(
            f"ignored (not features of the reference): {', '.join(report.ignored_columns)}",
            soft_wrap=not wrap,
            markup=False,
        )
    for q in report.quality:
        if q.flagged:
            console.print(
                f"[yellow]quality[/] {escape(q.feature)}: {q.check} {q.count}/{q.rows} ({q.rate:.2%}, "
                f"expected {q.expected_rate:.2%})",
                soft_wrap=not wrap,
            )
    if report.performance:
        perf = {k: round(v, 4) for k, v in report.performance.items()}
        console.print(f"performance (labels): {perf}", soft_wrap=not wrap)
    if report.estimated_performance:
        est = {k: round(v, 4) for k, v in report.estimated_performance.items()}
        console.print(f"performance (estimated, {report.estimate_method}): {est}", soft_wrap=not wrap)
    d = report.dataset
    verdict = "[bold red]DATASET DRIFTED[/]" if d.drifted else "[green]dataset stable[/]"
    console.print(
        f"{verdict}: {d.n_drifted}/{d.n_features} features drifted ({d.share:.0%}; rule >= "
        f"{d.drift_share:.0%}, {d.correction} at alpha {d.alpha})",
        soft_wrap=not wrap,
    )
    _print_explained(report, console)
    summary = summary or headline(report)
    mark = "[green]no findings[/]" if summary.ok else "[bold red]ATTENTION[/]"
    console.print(f"{mark}: {summary.text}", soft_wrap=not wrap)


def _num(v: Any, fmt: str = ".3g") -> str:
    return format(v, fmt) if isinstance(v, int | float) and not isinstance(v, bool) and v == v else "-"


def _impact(row: dict[str, Any]) -> str:
    imp = row["impact"]
    if imp is None:
        return "grouped" if row["grouped"] else "\u2014"
    if imp["harmless"]:
        return "harmless"
    bounds = f" [{_num(imp['share_lower'], '.0%')}, {_num(imp['share_upper'], '.0%')}]"
    return _num(imp["share"], ".0%") + (bounds if imp["share_lower"] is not None else "")


def _print_explained(report: DriftReport, console: Console) -> None:
    """The harm line, the summary of every feature (verdict, effect, impact), the top causes, the worst
    segments and weak slices; nothing for a report without them."""
    if not (report.harm or report.attribution or report.segments or report.weak_slices):
        return
    wrap = console.is_terminal
    line = harm_line(report)
    if line is not None and report.harm is not None:
        mark = "[bold red]HARMFUL DRIFT[/]" if report.harm.get("harmful") else "[green]no harmful drift[/]"
        console.print(f"{mark}: {escape(line)}", soft_wrap=not wrap)
    table = Table(title="Summary: every feature, by impact then drift")
    for col in ("feature", "verdict", "effect", "impact"):
        table.add_column(col, justify="right" if col == "effect" else "left")
    for r in feature_summary(report):
        effect = f"{_num(r['effect'])} {r['effect_name']}".strip()
        verdict = "[bold red]DRIFT[/]" if r["drifted"] else "[green]ok[/]"
        table.add_row(escape(r["name"]), verdict, escape(effect), escape(_impact(r)))
    _print_table(console, table)
    causes = top_causes(report.attribution)
    if causes:
        console.print(f"causes: {escape(causes_text(causes))}", soft_wrap=not wrap)
    for s in report.segments[:SHOWN]:
        flag = "[bold red]FLAGGED[/] " if s.get("flagged") else ""
        console.print(
            f"segment {flag}{escape(str(s.get('segment')))}: {escape(str(s.get('metric')))} "
            f"{_num(s.get('current'), '.3f')} vs {_num(s.get('reference'), '.3f')} "
            f"({_num(s.get('change'), '+.3f')}, {estimate_label(s.get('estimate'))}), {s.get('rows')} rows",
            soft_wrap=not wrap,
        )
    slices = (report.weak_slices or {}).get("slices") or []
    for x in slices[:SHOWN]:
        w = report.weak_slices or {}
        console.print(
            f"weak slice {escape(str(x.get('slice')))}: {escape(str(w.get('metric')))} "
            f"{_num(x.get('value'), '.3f')} [{_num(x.get('lower'), '.3f')}, {_num(x.get('upper'), '.3f')}] "
            f"vs {_num(w.get('overall'), '.3f')} overall, {x.get('rows')} rows"
            + (" (significant)" if x.get("significant") else ""),
            soft_wrap=not wrap,
        )


PIPED_WIDTH = 10_000
"""The width a table is rendered on when the output is no terminal: wider than any report's table, so
each takes its natural width (a table that does not expand is as wide as its content needs)."""


def _print_table(console: Console, table: Table) -> None:
    """The table at the console's width on a terminal; elsewhere at its natural width (rendered on
    :data:`PIPED_WIDTH`: measuring it first to set the console's width to it cost a third of printing)."""
    if console.is_terminal:
        console.print(table)
        return
    width = console.width
    console.width = PIPED_WIDTH
    try:
        console.print(table)
    finally:
        console.width = width

"""A drift report as a table on the terminal (used by `driftwarden drift` and the demo).

On a terminal rich fits the table to its width. Piped or captured (a file, a CI log, a test), there is no
width to fit: the table is printed at its natural width and lines are not wrapped, so no column name or
value is cut ("statis…") and each finding stays on one line.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from monitors.findings import Headline, headline
from monitors.report import DriftReport


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
            f.name,
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
                f"[yellow]quality[/] {q.feature}: {q.check} {q.count}/{q.rows} ({q.rate:.2%}, "
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
    summary = summary or headline(report)
    mark = "[green]no findings[/]" if summary.ok else "[bold red]ATTENTION[/]"
    console.print(f"{mark}: {summary.text}", soft_wrap=not wrap)


def _print_table(console: Console, table: Table) -> None:
    """The table at the console's width on a terminal; elsewhere at least as wide as its content needs."""
    needed = console.measure(table, options=console.options.update_width(10_000)).maximum
    if console.is_terminal or needed <= console.width:
        console.print(table)
        return
    width = console.width
    console.width = needed
    try:
        console.print(table)
    finally:
        console.width = width

"""A drift report as a table on the terminal (used by `driftwarden drift` and the demo)."""

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
    console.print(table)
    for q in report.quality:
        if q.flagged:
            console.print(
                f"[yellow]quality[/] {q.feature}: {q.check} {q.count}/{q.rows} ({q.rate:.2%}, "
                f"expected {q.expected_rate:.2%})"
            )
    if report.performance:
        console.print(f"performance (labels): { {k: round(v, 4) for k, v in report.performance.items()} }")
    if report.estimated_performance:
        est = {k: round(v, 4) for k, v in report.estimated_performance.items()}
        console.print(f"performance (estimated, CBPE): {est}")
    d = report.dataset
    verdict = "[bold red]DATASET DRIFTED[/]" if d.drifted else "[green]dataset stable[/]"
    console.print(
        f"{verdict}: {d.n_drifted}/{d.n_features} features drifted ({d.share:.0%}; rule >= "
        f"{d.drift_share:.0%}, {d.correction} at alpha {d.alpha})"
    )
    summary = summary or headline(report)
    mark = "[green]no findings[/]" if summary.ok else "[bold red]ATTENTION[/]"
    console.print(f"{mark}: {summary.text}")

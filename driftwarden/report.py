"""``Report``: one drift report (a comparison's or a monitor run's) to read in Python or in a notebook."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from monitors.findings import Headline
    from monitors.report import DriftReport, FeatureDrift

SUMMARY_COLUMNS = [
    "feature",
    "kind",
    "verdict",
    "statistic",
    "effect",
    "effect_name",
    "p_value",
    "adjusted_p_value",
    "threshold",
]
"""The columns of :meth:`Report.summary`, in order."""


class Report:
    """A drift report: the verdict of every feature and output, the dataset's verdict, data quality and
    performance, as ``driftwarden drift`` and the monitor runs make it (``report``: the engine's
    :class:`monitors.report.DriftReport`).

    In Jupyter it renders inline (``_repr_html_``); :meth:`summary` is a frame of one row per feature and
    output; :meth:`to_dict` / :meth:`to_json` are the JSON of ``driftwarden drift --json``; :meth:`to_html`
    / :meth:`save_html` the page of ``driftwarden drift --html``.
    """

    def __init__(self, report: DriftReport, *, title: str = "Drift report") -> None:
        self.report = report
        self.title = title

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, title: str = "Drift report") -> Report:
        """A report from :meth:`to_dict`'s data (or the ``report`` of the HTTP API's drift document)."""
        from monitors.report import report_from_dict

        return cls(report_from_dict(data), title=title)

    @property
    def drifted(self) -> bool:
        """Whether the dataset drifted: at least ``drift_share`` of its features drifted."""
        return self.report.drifted

    @property
    def drifted_features(self) -> list[str]:
        """The names of the drifted features, most severe first."""
        return [f.name for f in self.report.features if f.drifted]

    def headline(self) -> Headline:
        """The one-line verdict with every finding (:func:`monitors.findings.headline`)."""
        from monitors.findings import headline

        return headline(self.report)

    @property
    def verdict(self) -> str:
        """The verdict in words, one line."""
        return self.headline().text

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data, as ``driftwarden drift --json`` writes it."""
        return self.report.as_dict()

    def to_json(self, *, indent: int | None = 2) -> str:
        """The report as JSON text, as ``driftwarden drift --json`` writes it."""
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    def to_html(self) -> str:
        """The report as one self-contained HTML page, as ``driftwarden drift --html`` writes it."""
        from monitors.html import render_html

        return render_html(self.report, title=self.title)

    def save_html(self, path: str | Path) -> Path:
        """Write :meth:`to_html` to ``path``; returns the path."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(self.to_html(), encoding="utf-8")
        return p

    def rows(self) -> list[dict[str, Any]]:
        """One dict per feature and output (the prediction, each class's probability, the predicted class,
        the multivariate detector): the rows of :meth:`summary`."""
        r = self.report
        entries = [*r.features, *([r.prediction] if r.prediction else []), *r.outputs]
        entries += [r.multivariate] if r.multivariate else []
        return [_row(f) for f in entries]

    def summary(self) -> pd.DataFrame:
        """A pandas frame of one row per feature and output: feature, kind, verdict ("drift" or "ok"), the
        statistic (the deciding test's name), effect (and its name), p-value (raw and adjusted; None for a
        test decided by its threshold), threshold."""
        import pandas as pd

        return pd.DataFrame(self.rows(), columns=SUMMARY_COLUMNS)

    def _repr_html_(self) -> str:
        """Inline in Jupyter: the verdict, the summary table, then the full page in a frame of its own (its
        styles stay inside it)."""
        head = self.headline()
        colour = "#1a7f37" if head.ok else "#b42318"
        table = self.summary().to_html(index=False, na_rep="", float_format=lambda v: f"{v:.4g}")
        page = html.escape(self.to_html(), quote=True)
        return (
            '<div class="driftwarden-report">'
            f'<p style="color:{colour};font-weight:bold">{html.escape(head.text)}</p>'
            f'<div class="driftwarden-summary">{table}</div>'
            f'<iframe title="{html.escape(self.title)}" srcdoc="{page}" '
            'style="width:100%;height:640px;border:1px solid #ddd"></iframe>'
            "</div>"
        )

    def __repr__(self) -> str:
        d = self.report.dataset
        names = self.drifted_features
        listed = f": {', '.join(names[:5])}{', ...' if len(names) > 5 else ''}" if names else ""
        return (
            f"<driftwarden.Report {'DRIFTED' if d.drifted else 'stable'}, {d.n_drifted} of {d.n_features} "
            f"features drifted{listed}; {self.report.rows:,} current rows vs {self.report.reference_rows:,} "
            "reference rows>"
        )


def _row(f: FeatureDrift) -> dict[str, Any]:
    r = f.result
    return {
        "feature": f.name,
        "kind": f.kind,
        "verdict": "drift" if f.drifted else "ok",
        "statistic": r.test,
        "effect": _number(r.effect),
        "effect_name": r.effect_name,
        "p_value": _number(r.p_value),
        "adjusted_p_value": _number(r.adjusted_p_value),
        "threshold": _number(r.threshold),
    }


def _number(value: float | None) -> float | None:
    """A finite float, else None (a test that gives no p-value, an effect it could not measure)."""
    if value is None:
        return None
    v = float(value)
    return v if v == v and v not in (float("inf"), float("-inf")) else None

"""Small charts as inline SVG strings (pure, no library, no network): a sparkline, a line chart with limits
and stacked bars. Every chart scales with its container (a ``viewBox`` and ``width: 100%``); each point of a
line chart is a ``<circle class="point">`` with its value in a tooltip, so a page counts one point per run.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

PALETTE = ("#1a7f37", "#cf222e", "#9a6700", "#0550ae", "#6e7781", "#bf3989", "#3192aa", "#953800")
"""Series colours: none of them is a colour the report's other drawings mean something by."""


def number(value: float | None) -> str:
    """A figure in at most 4 significant digits: ``0.1235``, ``12,350``, ``8.3e-6``; a dash for none."""
    if value is None or not math.isfinite(value):
        return "\u2014"
    if value == 0:
        return "0"
    if 1e4 <= abs(value) < 1e15:
        digits = math.floor(math.log10(abs(value))) + 1
        return f"{round(value, 4 - digits):,.0f}"
    text = f"{value:,.4g}"
    if "e" not in text:
        return text
    if abs(value) >= 1:  # 9,999.7 rounds up to 10,000
        return f"{round(value):,}"
    mantissa, _, exp = f"{value:.2g}".partition("e")
    return f"{mantissa}e{int(exp)}"


@dataclass(frozen=True)
class Series:
    """One line: a value per x (None: no value there), drawn solid or dashed, with or without points."""

    name: str
    values: Sequence[float | None]
    color: str = PALETTE[0]
    dashed: bool = False
    points: bool = True


@dataclass(frozen=True)
class Axis:
    """The x positions of a chart (e.g. seconds) with a label per position, and the tick labels to show."""

    xs: Sequence[float]
    labels: Sequence[str]  # one per x: the points' tooltips
    ticks: Sequence[tuple[float, str]] = field(default_factory=tuple)


def _scale(lo: float, hi: float, a: float, b: float) -> tuple[float, float]:
    """The affine map of [lo, hi] onto [a, b] as (scale, offset)."""
    if hi <= lo:
        return 0.0, (a + b) / 2
    k = (b - a) / (hi - lo)
    return k, a - lo * k


def _finite(values: Sequence[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v)]


def sparkline(
    values: Sequence[float | None],
    *,
    label: str,
    threshold: float | None = None,
    width: int = 120,
    height: int = 28,
    color: str = PALETTE[3],
) -> str:
    """A small line of ``values`` (oldest first), a dashed line at ``threshold``, the last value marked."""
    found = _finite(values)
    if not found:
        return ""
    pad = 3.0
    lo, hi = (
        min([*found, *([threshold] if threshold is not None else [])]),
        max([*found, *([threshold] if threshold is not None else [])]),
    )
    if hi == lo:
        lo, hi = lo - 1.0, hi + 1.0
    ky, oy = _scale(lo, hi, height - pad, pad)
    kx, ox = _scale(0, max(len(values) - 1, 1), pad, width - pad)
    pts = [
        (kx * i + ox, ky * float(v) + oy) for i, v in enumerate(values) if v is not None and math.isfinite(v)
    ]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
    parts = [
        f'<svg class="spark" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{html.escape(label)}">'
    ]
    if threshold is not None:
        y = ky * threshold + oy
        parts.append(
            f'<line x1="0" x2="{width}" y1="{y:.1f}" y2="{y:.1f}" stroke="#afb8c1" stroke-dasharray="3 2"/>'
        )
    parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{path}"/>')
    x, y = pts[-1]
    parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{color}"/>')
    parts.append(f"<title>{html.escape(label)}</title></svg>")
    return "".join(parts)


def _ticks(axis: Axis, kx: float, ox: float, height: int) -> list[str]:
    """The x tick labels: the first anchored at its start, the last at its end, so that both stay inside."""
    out = []
    for i, (x, text) in enumerate(axis.ticks):
        anchor = (
            "start" if i == 0 and len(axis.ticks) > 1 else "end" if i == len(axis.ticks) - 1 else "middle"
        )
        out.append(
            f'<text x="{kx * x + ox:.1f}" y="{height - 10}" font-size="11" text-anchor="{anchor}">'
            f"{html.escape(text)}</text>"
        )
    return out


def line_chart(
    axis: Axis,
    series: Sequence[Series],
    *,
    title: str,
    width: int = 480,
    height: int = 200,
    floor: float | None = None,
    ceiling: float | None = None,
) -> str:
    """Lines over ``axis`` (one point per x of each series with ``points``), y from the values (widened to
    ``floor``/``ceiling`` when given), a legend of the series' names."""
    found = [v for s in series for v in _finite(s.values)]
    if not found or not axis.xs:
        return ""
    left, right, top, bottom = 50.0, 8.0, 10.0, 30.0
    lo, hi = min(found), max(found)
    lo = min(lo, floor) if floor is not None else lo
    hi = max(hi, ceiling) if ceiling is not None else hi
    if hi == lo:
        lo, hi = lo - (abs(lo) * 0.1 or 1.0), hi + (abs(hi) * 0.1 or 1.0)
    ky, oy = _scale(lo, hi, height - bottom, top)
    kx, ox = _scale(min(axis.xs), max(axis.xs), left, width - right)
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" preserveAspectRatio="xMidYMid meet" role="img" '
        f'aria-label="{html.escape(title)}">'
    ]
    for v in (lo, (lo + hi) / 2, hi):
        y = ky * v + oy
        parts.append(
            f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eaeef2"/>'
            f'<text x="{left - 4}" y="{y + 3:.1f}" font-size="11" text-anchor="end">{number(v)}</text>'
        )
    parts += _ticks(axis, kx, ox, height)
    for s in series:
        pts = [
            (kx * x + ox, ky * float(v) + oy, axis.labels[i], float(v))
            for i, (x, v) in enumerate(zip(axis.xs, s.values, strict=True))
            if v is not None and math.isfinite(v)
        ]
        if not pts:
            continue
        dash = ' stroke-dasharray="5 3"' if s.dashed else ""
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _, _ in pts)
        parts.append(
            f'<polyline fill="none" stroke="{s.color}" stroke-width="{1.2 if s.dashed else 2}"{dash} '
            f'points="{path}"><title>{html.escape(s.name)}</title></polyline>'
        )
        if s.points:
            parts += [
                f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{s.color}">'
                f"<title>{html.escape(s.name)}: {number(v)} ({html.escape(text)})</title></circle>"
                for x, y, text, v in pts
            ]
    parts.append("</svg>")
    return "".join(parts) + legend(series)


def legend(series: Sequence[Series]) -> str:
    """The series' names beside their colours (solid or dashed)."""
    items = "".join(
        f'<span class="key"><svg viewBox="0 0 18 8" width="18" height="8" aria-hidden="true">'
        f'<line x1="0" x2="18" y1="4" y2="4" stroke="{s.color}" stroke-width="2"'
        + (' stroke-dasharray="4 2"' if s.dashed else "")
        + f"/></svg>{html.escape(s.name)}</span>"
        for s in series
    )
    return f'<div class="keys">{items}</div>'


def stacked_bars(
    axis: Axis,
    stacks: Sequence[Series],
    *,
    title: str,
    width: int = 480,
    height: int = 190,
) -> str:
    """One bar per x of ``axis``, stacked from ``stacks`` (their values at that x, None as 0)."""
    if not axis.xs or not stacks:
        return ""
    totals = [sum(float(s.values[i] or 0) for s in stacks) for i in range(len(axis.xs))]
    top_value = max(totals) or 1.0
    left, right, top, bottom = 50.0, 8.0, 10.0, 30.0
    ky, oy = _scale(0.0, top_value, height - bottom, top)
    lo, hi = min(axis.xs), max(axis.xs)
    kx, ox = _scale(lo, hi, left + 6, width - right - 6)
    gaps = sorted(b - a for a, b in zip(sorted(axis.xs), sorted(axis.xs)[1:], strict=False) if b > a)
    step = (gaps[0] * kx) if gaps and kx else (width - left - right) / max(len(axis.xs), 1)
    bar = max(1.5, min(24.0, step * 0.7))
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" preserveAspectRatio="xMidYMid meet" role="img" '
        f'aria-label="{html.escape(title)}">'
    ]
    for v in (0.0, top_value / 2, top_value):
        y = ky * v + oy
        parts.append(
            f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eaeef2"/>'
            f'<text x="{left - 4}" y="{y + 3:.1f}" font-size="11" text-anchor="end">{number(v)}</text>'
        )
    parts += _ticks(axis, kx, ox, height)
    for i, x in enumerate(axis.xs):
        base = 0.0
        for s in stacks:
            v = float(s.values[i] or 0)
            if v <= 0:
                continue
            y0, y1 = ky * base + oy, ky * (base + v) + oy
            parts.append(
                f'<rect class="bar" x="{kx * x + ox - bar / 2:.1f}" y="{y1:.1f}" width="{bar:.1f}" '
                f'height="{y0 - y1:.1f}" fill="{s.color}"><title>{html.escape(s.name)}: {number(v)} '
                f"({html.escape(axis.labels[i])})</title></rect>"
            )
            base += v
    parts.append("</svg>")
    return "".join(parts) + legend(stacks)

"""``graphleak demo --plot PATH``: one self-contained SVG of the demo's runs.

A grid of small line charts: one row per measured quantity (alive tensors, alive graph
nodes, RSS), one column per leaky run, each chart drawing that leaky run against the
fixed run on its own scale, so that a leak of one object a step is as visible as one of
thousands. Warmup steps are shaded. Styles are inline attributes (no stylesheet, no
script, no font files), so the file renders the same in a browser, an editor or a
README.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

from pytest_graphleak.metrics import format_amount
from pytest_graphleak.options import DEFAULT_RSS_TOLERANCE
from pytest_graphleak.report.output_paths import PLOT_MARK
from pytest_graphleak.report.scale import ticks, value_range

LEAKY_COLOUR = "#d62728"
FIXED_COLOUR = "#2ca02c"
_FONT = 'font-family="sans-serif"'


@dataclass
class PlotRun:
    label: str
    warmup: int
    series: dict[str, list[float]] = field(default_factory=dict)  # metric key -> per step


@dataclass(frozen=True)
class Metric:
    key: str
    title: str
    unit: str  # "objects" | "bytes"


def render_plot(
    title: str, leaky_runs: Sequence[PlotRun], fixed: PlotRun, metrics: Sequence[Metric]
) -> str:
    cell_w, cell_h, header = 380, 170, 58
    width = cell_w * max(len(leaky_runs), 1) + 20
    height = header + cell_h * len(metrics) + 10
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">',
        PLOT_MARK,  # lets the next --plot run replace this file, and no other
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="12" y="22" {_FONT} font-size="15" font-weight="bold">{escape(title)}</text>',
        _legend(12, 42, fixed.label),
    ]
    for row, metric in enumerate(metrics):
        for col, run in enumerate(leaky_runs):
            x, y = 10 + col * cell_w, header + row * cell_h
            out.append(_panel(x, y, cell_w - 10, cell_h - 12, metric, run, fixed))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _legend(x: int, y: int, fixed_label: str) -> str:
    return (
        f'<g {_FONT} font-size="12">'
        f'<line x1="{x}" y1="{y - 4}" x2="{x + 22}" y2="{y - 4}" stroke="{LEAKY_COLOUR}" '
        f'stroke-width="2"/><text x="{x + 28}" y="{y}">leaky run (named above each chart)</text>'
        f'<line x1="{x + 260}" y1="{y - 4}" x2="{x + 282}" y2="{y - 4}" '
        f'stroke="{FIXED_COLOUR}" stroke-width="2"/>'
        f'<text x="{x + 288}" y="{y}">{escape(fixed_label)}</text>'
        f'<rect x="{x + 470}" y="{y - 10}" width="16" height="10" fill="#eeeeee"/>'
        f'<text x="{x + 492}" y="{y}">warmup</text></g>'
    )


def _panel(
    x: float, y: float, w: float, h: float, metric: Metric, leaky: PlotRun, fixed: PlotRun
) -> str:
    left, top, bottom, right = 62, 18, 20, 8
    plot_w, plot_h = w - left - right, h - top - bottom
    lines = [
        (leaky.series.get(metric.key, []), LEAKY_COLOUR),
        (fixed.series.get(metric.key, []), FIXED_COLOUR),
    ]
    values = [v for series, _ in lines for v in series if math.isfinite(v)]
    count = max((len(series) for series, _ in lines), default=0)
    parts = [
        f'<g transform="translate({x:.0f},{y:.0f})" {_FONT} font-size="11">',
        f'<text x="{left}" y="12" font-weight="bold">{escape(metric.title)} — '
        f"{escape(leaky.label)}</text>",
    ]
    if not values or count < 2:
        parts.append(f'<text x="{left}" y="{top + plot_h / 2:.0f}">no samples</text></g>')
        return "".join(parts)
    # An honest scale (report.scale): the demo's byte panel is RSS, a noisy metric, so
    # jitter below one step's default tolerance stays a ripple instead of filling it.
    noise = float(DEFAULT_RSS_TOLERANCE) if metric.unit == "bytes" else 0.0
    low, high = value_range(values, metric.unit, noise) or (0.0, 1.0)
    if metric.unit != "bytes" and high - low <= 1:
        low, high = low - 0.5, high + 0.5  # a flat count sits mid-panel, not on an edge

    def px(i: int) -> float:
        return left + plot_w * i / (count - 1)

    def py(v: float) -> float:
        return top + plot_h * (1 - (v - low) / (high - low))

    warmup = min(leaky.warmup, count - 1)
    if warmup > 0:
        parts.append(
            f'<rect x="{px(0):.1f}" y="{top}" width="{px(warmup) - px(0):.1f}" '
            f'height="{plot_h}" fill="#eeeeee"/>'
        )
    parts.append(
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" '
        'fill="none" stroke="#999999"/>'
    )
    for value in ticks(low, high, metric.unit):
        label = format_amount(value, metric.unit)
        if metric.unit == "bytes" and value > 0:
            label = "+" + label  # the demo plots RSS as growth since step 1
        parts.append(
            f'<line x1="{left}" y1="{py(value):.1f}" x2="{left + plot_w}" '
            f'y2="{py(value):.1f}" stroke="#eeeeee"/>'
            f'<text x="{left - 4}" y="{py(value) + 4:.1f}" text-anchor="end">'
            f"{escape(label)}</text>"
        )
    parts.append(f'<text x="{left}" y="{h - 4:.0f}">step 1</text>')
    parts.append(f'<text x="{left + plot_w}" y="{h - 4:.0f}" text-anchor="end">step {count}</text>')
    for series, colour in lines:
        points = " ".join(
            f"{px(i):.1f},{py(v):.1f}" for i, v in enumerate(series) if math.isfinite(v)
        )
        if points:
            parts.append(
                f'<polyline points="{points}" fill="none" stroke="{colour}" '
                'stroke-width="2" stroke-linejoin="round"/>'
            )
    parts.append("</g>")
    return "".join(parts)

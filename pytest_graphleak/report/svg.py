"""Inline SVG line charts of one metric over all steps.

The charts are plain SVG text (no script, no external font or stylesheet) so that
the HTML report stays one self-contained file that opens offline.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from pytest_graphleak.metrics import finite, format_amount
from pytest_graphleak.report.scale import ticks, value_range


def series_chart(
    values: Sequence[float], *, warmup: int, title: str, unit: str, highlight: bool = False
) -> str:
    """One metric over all steps as an inline ``<svg>``: warmup steps shaded, one dot
    per step with a tooltip, round y-axis ticks on an honest scale (``report.scale``:
    jitter below a unit's minimum span draws flat). Bytes are drawn as growth from the
    first measured value, which the title states.

    ``highlight`` draws the line in the alarm colour (the metric grew).
    """
    width, height, left, right, top, bottom = 420, 150, 64, 12, 22, 24
    plot_w, plot_h = width - left - right, height - top - bottom
    base = _base(values, warmup) if unit == "bytes" else 0.0
    shown = [float(v) - base if finite(v) else math.nan for v in values]
    points = [(i, v) for i, v in enumerate(shown) if finite(v)]
    heading = title
    if unit == "bytes" and points:
        heading = f"{title}: growth from {format_amount(base, unit)}"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(title)}">',
        f'<text x="{left}" y="14" class="chart-title">{escape(heading)}</text>',
    ]
    bounds = value_range(shown, unit)
    if bounds is None:
        parts.append(f'<text x="{left}" y="{top + plot_h / 2:.1f}">no samples</text></svg>')
        return "".join(parts)
    low, high = bounds
    count = max(len(values), 2)

    def x_of(i: float) -> float:
        return left + plot_w * i / (count - 1)

    def y_of(v: float) -> float:
        return top + plot_h * (1 - (v - low) / (high - low))

    if warmup > 0:
        shade_end = x_of(min(warmup, count - 1) - 0.5)
        parts.append(
            f'<rect class="warmup" x="{left}" y="{top}" width="{shade_end - left:.1f}" '
            f'height="{plot_h}"><title>warmup: steps 1-{warmup} are not judged</title></rect>'
        )
    parts.append(
        f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" '
        f'y2="{top + plot_h}"/>'
        f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}"/>'
    )
    for v in ticks(low, high, unit):
        y = y_of(v)
        parts.append(
            f'<line class="grid" x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}"/>'
            f'<text class="tick" x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">'
            f"{escape(_tick_label(v, unit))}</text>"
        )
    parts.append(
        f'<text class="tick" x="{left}" y="{height - 6}">step 1</text>'
        f'<text class="tick" x="{left + plot_w}" y="{height - 6}" text-anchor="end">'
        f"step {len(values)}</text>"
    )
    line_class = "series grew" if highlight else "series"
    coords = " ".join(f"{x_of(i):.1f},{y_of(v):.1f}" for i, v in points)
    parts.append(f'<polyline class="{line_class}" points="{coords}"/>')
    for i, v in points:
        phase = "warmup" if i < warmup else "measured"
        shown_value = format_amount(v + base, unit)
        if unit == "bytes":
            shown_value += f" ({_tick_label(v, unit)})"
        parts.append(
            f'<circle class="{line_class}" cx="{x_of(i):.1f}" cy="{y_of(v):.1f}" r="2.5">'
            f"<title>step {i + 1} ({phase}): {escape(shown_value)}</title>"
            "</circle>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _base(values: Sequence[float], warmup: int) -> float:
    """The first measured value (the first finite one when that is missing)."""
    measured = [float(v) for v in values[warmup:] if finite(v)]
    numbers = measured or [float(v) for v in values if finite(v)]
    return numbers[0] if numbers else 0.0


def _tick_label(value: float, unit: str) -> str:
    if unit != "bytes":
        return format_amount(value, unit)
    if value == 0:
        return "+0"
    return format_amount(value, unit, signed=True)


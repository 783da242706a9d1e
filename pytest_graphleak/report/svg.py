"""Inline SVG line charts of one metric over all steps, and the number formatting
shared by the charts, the HTML report and the terminal summary.

The charts are plain SVG text (no script, no external font or stylesheet) so that
the HTML report stays one self-contained file that opens offline.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from pytest_graphleak.report.scale import ticks, value_range

_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_quantity(value: float | None, unit: str) -> str:
    """``1536, "bytes"`` -> ``"1.5 KiB"``; ``12.0, "objects"`` -> ``"12"``."""
    if value is None or not math.isfinite(value):
        return "n/a"
    if unit == "bytes":
        size = float(value)
        for name in _BYTE_UNITS:
            if abs(size) < 1024 or name == _BYTE_UNITS[-1]:
                return f"{size:.0f} {name}" if name == "B" else f"{size:.1f} {name}"
            size /= 1024
    if float(value).is_integer():
        return f"{value:.0f}"
    return f"{value:.3g}"


def format_rate(value: float | None, unit: str) -> str:
    """Growth per step with an explicit sign: ``"+1/step"``, ``"+2.0 MiB/step"``."""
    if value is None or not math.isfinite(value):
        return "n/a"
    sign = "+" if value >= 0 else "-"
    return f"{sign}{format_quantity(abs(value), unit)}/step"


def series_chart(
    values: Sequence[float],
    *,
    warmup: int,
    title: str,
    unit: str,
    highlight: bool = False,
    width: int = 420,
    height: int = 150,
) -> str:
    """One metric over all steps as an inline ``<svg>``: warmup steps shaded, one dot
    per step with a tooltip, round y-axis ticks on an honest scale (``report.scale``:
    jitter below a unit's minimum span draws flat). Bytes are drawn as growth from the
    first measured value, which the title states.

    ``highlight`` draws the line in the alarm colour (the metric grew).
    """
    left, right, top, bottom = 64, 12, 22, 24
    plot_w, plot_h = width - left - right, height - top - bottom
    base = _base(values, warmup) if unit == "bytes" else 0.0
    shown = [float(v) - base if _finite(v) else math.nan for v in values]
    points = [(i, v) for i, v in enumerate(shown) if _finite(v)]
    heading = title
    if unit == "bytes" and points:
        heading = f"{title}: growth from {format_quantity(base, unit)}"
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
        shown_value = format_quantity(v + base, unit)
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
    measured = [float(v) for v in values[warmup:] if _finite(v)]
    finite = measured or [float(v) for v in values if _finite(v)]
    return finite[0] if finite else 0.0


def _tick_label(value: float, unit: str) -> str:
    if unit != "bytes":
        return format_quantity(value, unit)
    if value == 0:
        return "+0"
    return ("+" if value > 0 else "-") + format_quantity(abs(value), unit)


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)

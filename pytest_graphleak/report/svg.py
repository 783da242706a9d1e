"""Inline SVG line charts of one metric over all calls, and the number formatting
shared by the charts, the HTML report and the terminal summary.

The charts are plain SVG text (no script, no external font or stylesheet) so that
the HTML report stays one self-contained file that opens offline.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

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
    """One metric over all calls as an inline ``<svg>``: warmup calls shaded, one dot
    per call with a tooltip, the first and last value labelled on the y axis.

    ``highlight`` draws the line in the alarm colour (the metric grew).
    """
    left, right, top, bottom = 64, 12, 22, 24
    plot_w, plot_h = width - left - right, height - top - bottom
    points = [(i, float(v)) for i, v in enumerate(values) if _finite(v)]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(title)}">',
        f'<text x="{left}" y="14" class="chart-title">{escape(title)}</text>',
    ]
    if not points:
        parts.append(f'<text x="{left}" y="{top + plot_h / 2:.1f}">no samples</text></svg>')
        return "".join(parts)

    count = max(len(values), 2)
    low = min(v for _, v in points)
    high = max(v for _, v in points)
    flat = high == low
    if flat:  # a flat line sits in the middle, not on an edge
        low, high = low - 1, high + 1

    def x_of(i: float) -> float:
        return left + plot_w * i / (count - 1)

    def y_of(v: float) -> float:
        return top + plot_h * (1 - (v - low) / (high - low))

    if warmup > 0:
        shade_end = x_of(min(warmup, count - 1) - 0.5)
        parts.append(
            f'<rect class="warmup" x="{left}" y="{top}" width="{shade_end - left:.1f}" '
            f'height="{plot_h}"><title>warmup: calls 1-{warmup} are not judged</title></rect>'
        )
    parts.append(
        f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" '
        f'y2="{top + plot_h}"/>'
        f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}"/>'
    )
    for v, label in _axis_labels(low, high, flat, unit):
        parts.append(
            f'<text class="tick" x="{left - 4}" y="{y_of(v) + 4:.1f}" text-anchor="end">'
            f"{escape(label)}</text>"
        )
    parts.append(
        f'<text class="tick" x="{left}" y="{height - 6}">call 1</text>'
        f'<text class="tick" x="{left + plot_w}" y="{height - 6}" text-anchor="end">'
        f"call {len(values)}</text>"
    )
    line_class = "series grew" if highlight else "series"
    coords = " ".join(f"{x_of(i):.1f},{y_of(v):.1f}" for i, v in points)
    parts.append(f'<polyline class="{line_class}" points="{coords}"/>')
    for i, v in points:
        phase = "warmup" if i < warmup else "measured"
        parts.append(
            f'<circle class="{line_class}" cx="{x_of(i):.1f}" cy="{y_of(v):.1f}" r="2.5">'
            f"<title>call {i + 1} ({phase}): {escape(format_quantity(v, unit))}</title>"
            "</circle>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _axis_labels(low: float, high: float, flat: bool, unit: str) -> list[tuple[float, str]]:
    """The y-axis labels; when both ends print alike (a few KiB on 200 MiB), the top
    one says how far above the bottom it is instead."""
    if flat:
        return [(low + 1, format_quantity(low + 1, unit))]
    bottom, top = format_quantity(low, unit), format_quantity(high, unit)
    if top == bottom:
        top = "+" + format_quantity(high - low, unit)
    return [(high, top), (low, bottom)]


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)

"""Inline SVG line charts of one metric over all steps.

The charts are plain SVG text (no script, no external font or stylesheet) so that
the HTML report stays one self-contained file that opens offline. Colours come from
the page's classes, so a dark page recolours them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape

from pytest_graphleak.metrics import finite, format_amount
from pytest_graphleak.report.scale import axis, step_ticks, value_range

_WIDTH, _HEIGHT = 420, 178
_LEFT, _RIGHT, _TOP, _BOTTOM = 74, 14, 42, 28


def series_chart(
    values: Sequence[float],
    *,
    warmup: int,
    title: str,
    unit: str,
    highlight: bool = False,
    noise: float = 0.0,
    steps: Sequence[int] | None = None,
    head: str = "warmup",
) -> str:
    """One metric over all steps as an inline ``<svg>`` on the metric's own scale
    (``report.scale.value_range``): warmup steps shaded, one dot per step with a
    tooltip, the unit above the y axis, a few step numbers on the x axis. Bytes are
    drawn as growth from the first measured value, which the unit label states.

    ``steps``: the step after which each sample was taken, when not 1, 2, 3, ...
    (window mode samples every k-th step): the x axis is in steps, so the slope reads
    per step; ``head`` names the shaded samples ("warmup", or "baseline": the one
    sample the measured ones are compared with).

    ``noise`` (a noisy metric's tolerated growth per step) draws the tolerance as a band
    rising from the first measured value: a line inside it is what the verdict calls
    noise. ``highlight`` draws the line in the alarm colour (the metric grew).
    """
    plot_w, plot_h = _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM
    base = _base(values, warmup) if unit == "bytes" else 0.0
    shown = [float(v) - base if finite(v) else math.nan for v in values]
    points = [(i, v) for i, v in enumerate(shown) if finite(v)]
    unit_label = "objects" if unit != "bytes" else "bytes"
    if unit == "bytes" and points:
        unit_label = f"bytes, growth from {format_amount(base, unit)}"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{_WIDTH}" '
        f'height="{_HEIGHT}" viewBox="0 0 {_WIDTH} {_HEIGHT}" role="img" '
        f'aria-label="{escape(title)}">',
        f'<text x="6" y="14" class="chart-title">{escape(title)}</text>',
        f'<text x="6" y="{_TOP - 14}" class="tick">{escape(unit_label)}</text>',
    ]
    bounds = value_range(shown, unit, noise)
    if bounds is None:
        parts.append(f'<text x="{_LEFT}" y="{_TOP + plot_h / 2:.1f}">no samples</text></svg>')
        return "".join(parts)
    at = list(steps) if steps is not None and len(steps) == len(values) else None
    at = at or list(range(1, len(values) + 1))
    first_step, span = at[0], max(at[-1] - at[0], 1)
    low, high = bounds
    high, tick_values = axis(low, _band_top(shown, warmup, noise, at, high), unit)

    def x_at(step: float) -> float:  # a step number's x
        return _LEFT + plot_w * (step - first_step) / span

    def x_of(i: float) -> float:  # a sample's x, by index (fractions: between samples)
        whole = min(max(math.floor(i), 0), len(at) - 1)
        after = min(whole + 1, len(at) - 1)
        return x_at(at[whole] + (at[after] - at[whole]) * (i - whole))

    def y_of(v: float) -> float:
        return _TOP + plot_h * (1 - (v - low) / (high - low))

    if warmup > 0:
        shade_end = x_of(min(warmup, max(len(values), 2) - 1) - 0.5)
        parts.append(_warmup_shade(warmup, at, head, shade_end, plot_h))
    if draws_band(shown, warmup, noise):
        parts.append(_band(shown, warmup, noise, (low, high), x_at, y_of, at))
    parts += _frame(tick_values, unit, at, y_of, x_at, plot_w, plot_h)
    parts += _line(
        points, "series grew" if highlight else "series", warmup, base, unit, at, x_of, y_of
    )
    parts.append("</svg>")
    return "".join(parts)


def _line(
    points: Sequence[tuple[int, float]],
    line_class: str,
    warmup: int,
    base: float,
    unit: str,
    at: Sequence[int],
    x_of: Callable[[float], float],
    y_of: Callable[[float], float],
) -> list[str]:
    """The series' line, and a dot per sample with its step, phase and value."""
    coords = " ".join(f"{x_of(i):.1f},{y_of(v):.1f}" for i, v in points)
    parts = [f'<polyline class="{line_class}" points="{coords}"/>']
    for i, v in points:
        phase = "warmup" if i < warmup else "measured"
        shown_value = format_amount(v + base, unit)
        if unit == "bytes":
            shown_value += f" ({_tick_label(v, unit)})"
        parts.append(
            f'<circle class="{line_class}" cx="{x_of(i):.1f}" cy="{y_of(v):.1f}" r="2.5">'
            f"<title>step {at[i]} ({phase}): {escape(shown_value)}</title>"
            "</circle>"
        )
    return parts


def _warmup_shade(
    warmup: int, at: Sequence[int], head: str, shade_end: float, plot_h: float
) -> str:
    """The shaded warmup (or baseline) samples, with a title saying they are not judged."""
    judged = f"steps {at[0]}-{at[warmup - 1]} are" if warmup > 1 else f"step {at[0]} is"
    title = (
        f"warmup: {judged} not judged"
        if head == "warmup"
        else f"baseline: the sample after step {at[warmup - 1]}, which the measured ones "
        "are compared with (not judged)"
    )
    return (
        f'<rect class="warmup" x="{_LEFT}" y="{_TOP}" width="{shade_end - _LEFT:.1f}" '
        f'height="{plot_h}"><title>{escape(title)}</title></rect>'
    )


def _frame(
    tick_values: Sequence[float],
    unit: str,
    at: Sequence[int],
    y_of: Callable[[float], float],
    x_at: Callable[[float], float],
    plot_w: float,
    plot_h: float,
) -> list[str]:
    """The axes, the value grid with its tick labels, and a few step numbers below."""
    bottom = _TOP + plot_h
    parts = [
        f'<line class="axis" x1="{_LEFT}" y1="{bottom}" x2="{_LEFT + plot_w}" y2="{bottom}"/>'
        f'<line class="axis" x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{bottom}"/>'
    ]
    parts += [
        f'<line class="grid" x1="{_LEFT}" y1="{y_of(v):.1f}" x2="{_LEFT + plot_w}" '
        f'y2="{y_of(v):.1f}"/><text class="tick" x="{_LEFT - 4}" y="{y_of(v) + 4:.1f}" '
        f'text-anchor="end">{escape(_tick_label(v, unit))}</text>'
        for v in tick_values
    ]
    first_step = at[0]
    for n, step in enumerate(step_ticks(at[-1] - first_step + 1, first=first_step)):
        x = x_at(step)
        anchor = "start" if n == 0 else "middle" if step < at[-1] else "end"
        label = f"step {step}" if n == 0 else str(step)
        parts.append(
            f'<line class="axis" x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 4}"/>'
            f'<text class="tick" x="{x:.1f}" y="{bottom + 15}" text-anchor="{anchor}">'
            f"{label}</text>"
        )
    return parts


def _band(
    shown: Sequence[float],
    warmup: int,
    noise: float,
    bounds: tuple[float, float],
    x_at: Callable[[float], float],
    y_of: Callable[[float], float],
    at: Sequence[int],
) -> str:
    """The tolerated growth as a wedge: from the first measured value, ``noise`` more per
    step (``at``: each sample's step, ``x_at``: a step's x), cut at the top of the plot."""
    low, high = bounds
    first = _first_measured(shown, warmup)
    if first is None:
        return ""
    start = max(shown[first], low)
    begin, end = float(at[first]), float(at[-1])
    top = [(begin, start)]
    reach = start + noise * (end - begin)
    if reach > high:  # the wedge leaves the plot before the last step
        cross = begin + (high - start) / noise
        top += [(cross, high), (end, high)]
    else:
        top.append((end, reach))
    corners = [*top, (end, start)]
    coords = " ".join(f"{x_at(step):.1f},{y_of(v):.1f}" for step, v in corners)
    tolerance = format_amount(noise, "bytes")
    return (
        f'<polygon class="band" points="{coords}"><title>tolerance: growth below '
        f"{escape(tolerance)}/step from the first measured step is noise</title></polygon>"
    )


def _band_top(
    shown: Sequence[float], warmup: int, noise: float, at: Sequence[int], high: float
) -> float:
    """``high``, raised so that the tolerance band (``noise`` per step from the first
    measured value to the last step) spans the plot instead of leaving it at its top."""
    first = _first_measured(shown, warmup) if noise > 0 else None
    if first is None:
        return high
    return max(high, shown[first] + noise * (at[-1] - at[first]))


def draws_band(values: Sequence[float], warmup: int, noise: float) -> bool:
    """Whether ``series_chart`` draws a tolerance band for these samples: a noisy metric
    (``noise`` > 0) with a measured sample to start it from. The charts' caption names
    exactly these."""
    return noise > 0 and _first_measured(values, warmup) is not None


def _first_measured(shown: Sequence[float], warmup: int) -> int | None:
    """The index of the first finite measured sample (the last sample when all are warmup)."""
    start = min(warmup, len(shown) - 1)
    return next((i for i in range(start, len(shown)) if finite(shown[i])), None)


def _base(values: Sequence[float], warmup: int) -> float:
    """The first measured value (the first finite one when that is missing)."""
    measured = [float(v) for v in values[warmup:] if finite(v)]
    numbers = measured or [float(v) for v in values if finite(v)]
    return numbers[0] if numbers else 0.0


def _tick_label(value: float, unit: str) -> str:
    if unit != "bytes":
        return format_amount(value, unit)
    if value == 0:
        return "+0 B"
    # "+768 KiB", not "+768.0 KiB": a tick is a round number, and its label must fit
    return format_amount(value, unit, signed=True).replace(".0 ", " ")

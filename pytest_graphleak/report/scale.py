"""Honest scales for every picture of a series: sparklines, HTML charts, the demo plot.

Each metric is drawn on a scale that fits its own data, as the verdict reads it:

- exact metrics (tensor and node counts, cyclic garbage, torch's storage bytes, CUDA
  allocated bytes) are a leak at any sustained rise, so they span their own range: 88 B
  -> 148 B fills the picture. A flat series spans one unit (one object, one byte);
- noisy metrics (process RSS, CUDA reserved bytes; ``Metric.noisy``) span their own range
  widened to at least one step's tolerance (``Declaration.tolerance``, the check's
  ``--graphleak-rss-tolerance`` as the verdict applied it): 12 KiB of
  allocator jitter on 50 MiB stays a ripple instead of a full-height ramp, and a growth
  the verdict flags (at least the tolerance per step) still fills the picture. The HTML
  chart also draws the tolerance as a band (``tolerance_band``).

Pure functions of numbers: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pytest_graphleak.metrics import finite

#: Widest sparkline, in characters; longer series are averaged into this many cells.
SPARK_WIDTH = 40

_BARS = "▁▂▃▄▅▆▇█"


def min_span(noise: float = 0.0) -> float:
    """The smallest range a picture is drawn over: one step's tolerance for a noisy
    metric, one unit (an object, a byte) for an exact one."""
    return max(float(noise), 1.0)


def value_range(
    values: Sequence[float], unit: str = "objects", noise: float = 0.0
) -> tuple[float, float] | None:
    """(low, high) to draw ``values`` over: their own range, widened upwards to at least
    ``min_span(noise)``; None when no value is finite. ``unit`` is not used: bytes and
    objects follow the same rule; it is kept so callers read alike."""
    del unit
    numbers = [float(v) for v in values if finite(v)]
    if not numbers:
        return None
    low, high = min(numbers), max(numbers)
    return low, max(high, low + min_span(noise))


def sparkline(
    values: Sequence[float],
    unit: str = "objects",
    *,
    warmup: int = 0,
    width: int = SPARK_WIDTH,
    noise: float = 0.0,
) -> str:
    """One bar per value (or per group of values past ``width``), on the metric's own
    scale (``value_range``: a noisy metric's jitter below one step's ``noise`` draws
    nearly flat). With ``warmup`` a ``|`` marks where the measured steps begin."""
    shown, cut = _fit(list(values), warmup, width)
    bounds = value_range(shown, unit, noise) if shown else None
    bars = []
    for value in shown:
        if bounds is None or not finite(value):
            bars.append(" ")
            continue
        low, high = bounds
        bars.append(_BARS[round((float(value) - low) / (high - low) * (len(_BARS) - 1))])
    if 0 < cut < len(bars):
        bars.insert(cut, "|")
    return "".join(bars)


def _fit(values: list[float], warmup: int, width: int) -> tuple[list[float], int]:
    """At most ``width`` values: consecutive groups averaged; the warmup cut moves with
    them."""
    if len(values) <= width:
        return values, warmup
    out: list[float] = []
    for cell in range(width):
        group = values[cell * len(values) // width : (cell + 1) * len(values) // width]
        numbers = [float(v) for v in group if finite(v)]
        out.append(sum(numbers) / len(numbers) if numbers else math.nan)
    return out, math.ceil(warmup * width / len(values))


def ticks(low: float, high: float, unit: str, count: int = 4) -> list[float]:
    """Round tick values between ``low`` and ``high`` (about ``count`` of them): in bytes
    on powers of two, in objects on 1, 2, 5 x 10^k (whole units only)."""
    step = tick_step(low, high, unit, count)
    if step is None:
        return [low]
    first = math.ceil(low / step) * step
    out = []
    value = first
    while value <= high + step * 1e-9:
        out.append(value)
        value += step
    return out


def tick_step(low: float, high: float, unit: str, count: int = 4) -> float | None:
    """The distance between two ticks of ``ticks`` (None for an empty range)."""
    span = high - low
    if span <= 0 or not math.isfinite(span):
        return None
    raw = span / max(count - 1, 1)
    if unit == "bytes":
        step = 2.0 ** round(math.log2(raw))
    else:
        magnitude = 10.0 ** math.floor(math.log10(raw))
        step = min((m * magnitude for m in (1, 2, 5, 10)), key=lambda s: abs(s - raw))
    return max(step, 1.0)  # whole objects, whole bytes


def axis(low: float, high: float, unit: str, count: int = 4) -> tuple[float, list[float]]:
    """``(top, ticks)`` of a chart's value axis: ``high`` raised to the first tick at or
    above it, so that the top tick covers the data (a series rising to +46 MiB gets a top
    tick of +48 MiB, not +32 MiB), and the ticks from ``low`` up to it, one step apart."""
    step = tick_step(low, high, unit, count)
    if step is None:
        return high, [low]
    top = max(math.ceil(high / step - 1e-9) * step, high)
    first = math.ceil(low / step - 1e-9) * step
    return top, [first + n * step for n in range(round((top - first) / step) + 1)]


def step_ticks(count: int, most: int = 6, first: int = 1) -> list[int]:
    """A few round step numbers for an x axis of ``count`` steps from step ``first``: the
    first step, the last, and multiples of 1, 2, 5 x 10^k between them."""
    if count <= 1:
        return [first] if count == 1 else []
    last = first + count - 1
    raw = (count - 1) / max(most - 1, 1)
    magnitude = 10 ** math.floor(math.log10(raw)) if raw >= 1 else 1
    step = next((m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw), 10 * magnitude)
    start = (first // step + 1) * step
    inner = [n for n in range(start, last, step) if n - first > step / 2 and last - n > step / 2]
    return [first, *inner, last]

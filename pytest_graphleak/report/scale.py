"""Honest scales for every picture of a series: sparklines, HTML charts, the demo plot.

A picture scaled from its own minimum to its maximum turns any jitter into a full-height
ramp: 12 KiB of RSS noise on 50 MiB would look like a leak of thousands of nodes. So each
picture spans at least a minimum that means something for its unit:

- counts (tensors, graph nodes, cyclic garbage): one object over the whole series;
- bytes: the default RSS tolerance (1 MiB) per step, the growth the verdict treats as
  allocator noise for RSS; less than that, over the series, draws nearly flat.

Pure functions of numbers: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pytest_graphleak.metrics import finite

#: Bytes per step below which a byte series draws (nearly) flat. The option's default,
#: spelled here because the report layer does not import the option table.
BYTES_PER_STEP = 1024.0 * 1024.0

#: Widest sparkline, in characters; longer series are averaged into this many cells.
SPARK_WIDTH = 40

_BARS = "▁▂▃▄▅▆▇█"


def min_span(unit: str, count: int) -> float:
    """The smallest range a picture of ``count`` samples in ``unit`` is drawn over."""
    if unit == "bytes":
        return BYTES_PER_STEP * max(count - 1, 1)
    return 1.0


def value_range(values: Sequence[float], unit: str) -> tuple[float, float] | None:
    """(low, high) to draw ``values`` over: their own range, widened upwards to at least
    ``min_span``; None when no value is finite."""
    numbers = [float(v) for v in values if finite(v)]
    if not numbers:
        return None
    low, high = min(numbers), max(numbers)
    return low, max(high, low + min_span(unit, len(values)))


def sparkline(
    values: Sequence[float],
    unit: str = "objects",
    *,
    warmup: int = 0,
    width: int = SPARK_WIDTH,
) -> str:
    """One bar per value (or per group of values past ``width``), on an honest scale:
    jitter below ``min_span`` draws flat. With ``warmup`` a ``|`` marks where the
    measured steps begin."""
    shown, cut = _fit(list(values), warmup, width)
    bounds = value_range(shown, unit) if shown else None
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
    on powers of two, in objects on 1, 2, 5 x 10^k (whole objects only)."""
    span = high - low
    if span <= 0 or not math.isfinite(span):
        return [low]
    raw = span / max(count - 1, 1)
    if unit == "bytes":
        step = 2.0 ** round(math.log2(raw))
    else:
        magnitude = 10.0 ** math.floor(math.log10(raw))
        step = min((m * magnitude for m in (1, 2, 5, 10)), key=lambda s: abs(s - raw))
        step = max(step, 1.0)
    first = math.ceil(low / step) * step
    out = []
    value = first
    while value <= high + step * 1e-9:
        out.append(value)
        value += step
    return out


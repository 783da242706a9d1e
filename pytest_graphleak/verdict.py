"""The verdict: a pure function from measured series to pass / leak.

No I/O, no gc, no torch or minigrad here, so every rule is unit-testable with
hand-written series. The rule (also in the README, "How the verdict decides"):

* Judge only the *tail*: the sample after the last warmup call is the baseline, and
  the tail is the second half of the measured steps (from the middle measured step to
  the last). Anything that settles during warmup or the first half is clean: lazily
  created optimizer state, caches that fill once, a first backward.
* Compare *floors*: the lowest value in the first ``w`` tail samples against the
  lowest value in the last ``w`` tail samples, where the two windows start three
  steps apart (``w = len(tail) - 3``). A leak of one object every step, every second
  or every third step raises the floor; a sawtooth that returns to its baseline
  (gradient accumulation, a bounded queue) has the same floor in both windows as
  long as its period is at most ``w`` samples.
* The floor must also rise at least twice within the tail (once for a two-sample
  tail), so a single late one-off allocation is not a leak.
* Object counts (and exact byte counts: tensor storages, CUDA allocated) are a leak at
  any floor growth; noisy byte counts (process RSS, CUDA reserved) only when the floor
  grows by at least their tolerance per step.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pytest_graphleak.result import Growth, Verdict

#: Windows start this many steps apart: the slowest leak caught for sure is one
#: object every WINDOW_OFFSET steps.
WINDOW_OFFSET = 3

_TENSOR_METRICS = ("torch.tensors", "minigrad.tensors", "minigrad.autograd_meta", "cuda.tensors")
_NODE_METRICS = ("torch.nodes", "minigrad.nodes")
_CYCLE_METRICS = ("gc.cyclic_garbage",)


@dataclass(frozen=True)
class Limits:
    """How much growth per step each metric may show before it counts as a leak."""

    #: metric -> tolerated floor growth per step (bytes or objects); metrics not
    #: listed tolerate nothing (exact counts).
    tolerance: Mapping[str, float] = field(default_factory=dict)

    def for_metric(self, metric: str) -> float:
        return float(self.tolerance.get(metric, 0.0))


def judged_window(values: Sequence[float], warmup: int) -> list[float]:
    """The baseline (last warmup sample, if any) followed by the measured samples."""
    start = warmup - 1 if warmup >= 1 else 0
    return [float(v) for v in values[start:]]


def tail(window: Sequence[float]) -> list[float]:
    """The second half of the measured steps, starting at the middle one."""
    steps = len(window) - 1
    return list(window[steps // 2 :])


def floor_growth(samples: Sequence[float]) -> tuple[float, int]:
    """(floor growth, window offset in steps) of a tail; growth 0 for short tails."""
    if len(samples) < 2:
        return 0.0, 0
    offset = min(WINDOW_OFFSET, len(samples) - 1)
    width = len(samples) - offset
    return min(samples[-width:]) - min(samples[:width]), offset


def floor_rises(samples: Sequence[float]) -> int:
    """How many times the lowest value still to come goes up along the samples."""
    rises = 0
    floor_after = math.inf
    floors: list[float] = []
    for value in reversed(samples):
        floor_after = min(floor_after, value)
        floors.append(floor_after)
    floors.reverse()
    for before, after in itertools.pairwise(floors):
        if after > before:
            rises += 1
    return rises


def metric_grows(values: Sequence[float], warmup: int, tolerance: float = 0.0) -> bool:
    """True when one metric's series shows sustained growth after warmup."""
    samples = tail(judged_window(values, warmup))
    if len(samples) < 2 or any(math.isnan(v) for v in samples):
        return False
    growth, offset = floor_growth(samples)
    if growth <= 0 or growth / offset < tolerance:
        return False
    return floor_rises(samples) >= min(2, len(samples) - 1)


def growth_of(metric: str, values: Sequence[float], warmup: int) -> Growth:
    """From-what-to-what over the measured steps, and the mean growth per step."""
    window = judged_window(values, warmup)
    measured = [float(v) for v in values[warmup:]] or window
    per_step = (window[-1] - window[0]) / max(1, len(window) - 1)
    return Growth(metric=metric, start=measured[0], end=measured[-1], per_step=per_step)


def classify(grown: Sequence[str]) -> str:
    """First classification of a leak from which metrics grew (diagnosis refines it)."""
    names = set(grown)
    if names & set(_CYCLE_METRICS):
        return "cycle"
    if names & set(_TENSOR_METRICS):
        return "list-accumulation"
    if names & set(_NODE_METRICS):
        return "retained-grad-fn"
    return "memory-growth"


def judge(
    series: Mapping[str, Sequence[float]],
    units: Mapping[str, str],
    *,
    warmup: int,
    limits: Limits | None = None,
) -> Verdict:
    """Decide whether the series show a leak. Pure: same input, same verdict."""
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    limits = limits or Limits()
    growths: list[Growth] = []
    for metric in sorted(series):
        values = series[metric]
        if len(values) <= warmup:
            raise ValueError(
                f"series {metric!r} has {len(values)} samples; need more than warmup={warmup}"
            )
        if metric_grows(values, warmup, limits.for_metric(metric)):
            growths.append(growth_of(metric, values, warmup))
    if not growths:
        steps = min((len(v) - warmup for v in series.values()), default=0)
        return Verdict(
            leaked=False,
            reason=f"no metric grew in the second half of {steps} measured steps "
            f"({len(series)} metrics judged)",
        )
    pattern = classify([g.metric for g in growths])
    grown = ", ".join(f"{g.metric} {_per_step_text(g, units)}" for g in growths)
    return Verdict(leaked=True, growths=growths, pattern=pattern, reason=f"grew: {grown}")


def _per_step_text(growth: Growth, units: Mapping[str, str]) -> str:
    unit = units.get(growth.metric, "objects")
    return f"{format_amount(growth.per_step, unit, signed=True)}/step"


def format_amount(value: float, unit: str, *, signed: bool = False) -> str:
    """``1536, "bytes"`` -> ``"1.5 KiB"``; ``3.0, "objects"`` -> ``"3"``; ``0.33`` -> ``"0.33"``."""
    sign = ("+" if value >= 0 else "-") if signed else ("-" if value < 0 else "")
    size = abs(float(value))
    if unit == "bytes":
        for name in ("B", "KiB", "MiB", "GiB"):
            if size < 1024 or name == "GiB":
                return f"{sign}{size:.0f} {name}" if name == "B" else f"{sign}{size:.1f} {name}"
            size /= 1024
    if size.is_integer():
        return f"{sign}{size:.0f}"
    return f"{sign}{size:.2g}" if size < 10 else f"{sign}{size:.1f}"

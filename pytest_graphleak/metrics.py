"""What a metric is, as its probe declares it, and how amounts of it are written.

Probes own the metric names. Everything after them (the verdict, the diagnosis, the
reports) reads what a metric *is* from its ``Metric`` declaration, never from its name,
so a new probe needs no edit anywhere else.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Unit = Literal["objects", "bytes"]
OBJECTS: Unit = "objects"
BYTES: Unit = "bytes"

#: What a metric counts: alive tensors (or their autograd metadata), autograd graph
#: nodes, graph objects that only the cyclic GC freed, or memory.
Counts = Literal["tensors", "nodes", "cycles", "memory"]


@dataclass(frozen=True)
class Metric:
    """One series a probe samples, and how the verdict must read it."""

    name: str
    unit: Unit
    counts: Counts
    #: Judged with the noise tolerance (process RSS, an allocator's cache); exact
    #: metrics are a leak at any sustained rise.
    noisy: bool = False
    #: The share of the noise tolerance a noisy metric is judged with: 1 for RSS, less
    #: for a metric that counts kept bytes exactly (malloc's allocated bytes), so that a
    #: step keeping the tolerance is caught when its count falls a few bytes short.
    noise_share: float = 1.0
    #: Metrics the probe measures again after cleaning (``Probe.recheck``): this metric's
    #: growth stands only while every one of them stays above its clean baseline.
    recheck: tuple[str, ...] = ()

    @property
    def graph(self) -> bool:
        """Counts autograd objects (tensors, nodes, their cyclic garbage), not memory."""
        return self.counts != "memory"


#: What a metric counts, in the order metrics are listed: the tensors kept, then the
#: graph nodes, then the memory, then the cycles (what tells a leak first, its cost next).
COUNTS_ORDER: tuple[str, ...] = ("tensors", "nodes", "memory", "cycles")


def listing_key(name: str, counts: str) -> tuple[int, bool, str]:
    """Where a metric stands in any list of metrics, from its declaration only (never a
    dict's order, which differs between a run and its JSON read back with sorted keys):
    by what it counts (``COUNTS_ORDER``; unknown last), then one named for what it counts
    (``<probe>.tensors``) before a record counted like it, then by name. The verdict
    words its "grew:" list in it; ``report.model.metric_order`` lists every metric of a
    check in it, grown ones first."""
    rank = COUNTS_ORDER.index(counts) if counts in COUNTS_ORDER else len(COUNTS_ORDER)
    return rank, name.rpartition(".")[2] != counts, name


@dataclass(frozen=True)
class Recheck:
    """A probe's second look after cleaning (the CUDA allocator cache): plain numbers and
    the words that explain them; the verdict decides what they mean."""

    #: metric -> value after the same cleaning at the end of warmup
    baseline: Mapping[str, float] = field(default_factory=dict)
    #: metric -> value now, after cleaning
    cleaned: Mapping[str, float] = field(default_factory=dict)
    #: appended to the reason when every rechecked growth stands
    confirmed: str = ""
    #: follows the names of the growths that cleaning made disappear
    withdrawn: str = ""


_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def finite(value: object) -> bool:
    """A real number that can be drawn or compared (not None, NaN or infinite)."""
    return isinstance(value, (int, float)) and math.isfinite(value)


def format_amount(value: float | None, unit: str, *, signed: bool = False) -> str:
    """``1536, "bytes"`` -> ``"1.5 KiB"``; ``3.0, "objects"`` -> ``"3"``; ``0.33`` ->
    ``"0.33"``; None or not finite -> ``"n/a"``."""
    if value is None or not finite(value):
        return "n/a"
    sign = ("+" if value >= 0 else "-") if signed else ("-" if value < 0 else "")
    size = abs(float(value))
    if unit == BYTES:
        for name in _BYTE_UNITS:
            if size < 1024 or name == _BYTE_UNITS[-1]:
                return f"{sign}{size:.0f} {name}" if name == "B" else f"{sign}{size:.1f} {name}"
            size /= 1024
    if size.is_integer():
        return f"{sign}{size:.0f}"
    return f"{sign}{size:.2g}" if size < 10 else f"{sign}{size:.1f}"


def count_of(number: int, noun: str, plural: str | None = None) -> str:
    """``1 step``, ``2 steps``, ``0 steps``: a count whose noun agrees with it (``plural``
    where adding an s is wrong)."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


def format_rate(value: float | None, unit: str) -> str:
    """Growth per step with an explicit sign: ``"+1/step"``, ``"+2.0 MiB/step"``."""
    if value is None or not finite(value):
        return "n/a"
    return f"{format_amount(value, unit, signed=True)}/step"

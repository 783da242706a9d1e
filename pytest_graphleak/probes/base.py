"""The probe protocol: what the tracker asks of every probe.

A probe measures, never decides. The tracker hands probes the *fresh* objects:
``gc.get_objects()`` after the check's freeze (``heap.gcstate``), i.e. only the
gc-tracked objects created since the last freeze, so a sample costs O(objects created
since), not O(heap). When the user froze objects before the check, the tracker does not
freeze (gc cannot unfreeze a chosen set): probes then get an empty heap at
``start``/``absorb`` and the whole unfrozen heap at each sample, which is exact but
O(unfrozen heap).
Probes must not keep any of these objects (or anything measured) after a call returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from pytest_graphleak.metrics import Metric, Recheck


class WarmupRecorder(Protocol):
    """Finds the objects the warmup steps use, so that a probe's start set needs no heap
    walk (``Probe.warmup_recorder``). ``records`` and ``misses`` word the result's note
    when the recording alone made the start set."""

    records: str  # "the tensors that torch operations used"
    misses: str  # "code outside torch's function dispatch (...)"

    def start(self) -> None: ...
    def stop(self) -> list[Any]: ...  # the recorded objects still alive; the caller clears it
    def paused(self) -> AbstractContextManager[Any]: ...  # the check's own calls unrecorded


class Probe(Protocol):
    # Read-only (properties), so a probe may declare a fixed-length tuple of metrics.
    @property
    def name(self) -> str: ...  # "minigrad", ...; its metrics are "<name>.<metric>"
    @property
    def metrics(self) -> tuple[Metric, ...]: ...  # what sample() returns: all that is read
    @property
    def needs_heap(self) -> bool: ...  # start() needs the objects alive before the check

    def available(self) -> bool:
        """True when the library measured is already imported (never import it to look)."""
        ...

    def start(self, heap: Sequence[object]) -> None:
        """Called once before the first step (just before the first freeze) with
        the start set: what the step reaches, or every gc-tracked object when the check
        scans the heap (``start_scan="heap"``)."""
        ...

    def absorb(self, fresh: Sequence[object]) -> None:
        """Called just before a later freeze: ``fresh`` joins the frozen baseline."""
        ...

    def warmup_recorder(self) -> WarmupRecorder | None:
        """What records the objects the warmup steps use, for a start set found by a short
        walk (``start_scan="roots"``, warmup >= 1); None: the walk's start set will do."""
        ...

    def adopt(self, objects: list[Any]) -> None:
        """End of warmup: what ``warmup_recorder`` found still alive joins the baseline
        from the next sample on. Empties the list."""
        ...

    def before_collect(self, fresh: Sequence[object]) -> None:
        """Called before each sample's ``gc.collect()``, with what it may free."""
        ...

    def sample(self, fresh: Sequence[object]) -> dict[str, float]:
        """One value per declared metric, called after ``gc.collect()``."""
        ...

    def stop(self) -> None:
        """Always called (``finally``): drop every reference and restore what start touched.
        Only plain numbers may survive it (for ``recheck``)."""
        ...

    def notes(self) -> list[str]:
        """What the numbers cannot say exactly (a count that is a lower bound), read
        before ``stop``; plain sentences for the result."""
        ...

    def recheck(self) -> Recheck | None:
        """After a leak verdict on a metric that declares ``recheck``: clean, measure again
        and return the numbers (None: nothing to compare). Never decides."""
        ...


class BackendProbe(Probe, Protocol):
    """A probe of an autograd library, which also feeds the cyclic-garbage probe."""

    def collectable(self, fresh: Sequence[object]) -> int:
        """Tensors and graph nodes alive now, counted the same way before and after a
        ``gc.collect()`` so that the difference is what only the cyclic GC freed."""
        ...


class ProbeBase:
    """What a probe does not need to do: every hook but ``sample`` does nothing."""

    name = ""
    metrics: tuple[Metric, ...] = ()
    needs_heap = False
    #: Why this probe, when asked for, may not run (``engine/coverage``'s texts).
    absent = ""
    #: Built with the backend probes that run (``GcProbe(backends)``); otherwise with none.
    takes_backends = False

    def start(self, heap: Sequence[object]) -> None:
        return None

    def plan(self, samples: int | None) -> None:
        """Before ``start``: how many samples the check takes (None: not known, a loop's)."""
        return None

    def absorb(self, fresh: Sequence[object]) -> None:
        return None

    def warmup_recorder(self) -> WarmupRecorder | None:
        return None

    def adopt(self, objects: list[Any]) -> None:
        objects.clear()

    def before_collect(self, fresh: Sequence[object]) -> None:
        return None

    def stop(self) -> None:
        return None

    def notes(self) -> list[str]:
        return []

    def recheck(self) -> Recheck | None:
        return None

"""Cyclic garbage: tensors and graph nodes that only the cyclic GC frees.

The tracker runs automatic collection off during a check; after each step it asks
this probe to count the backends' tensors/nodes, runs ``gc.collect()`` and asks again.
The difference is what reference counting alone would never have freed. The metric is
cumulative, so a step that makes a cycle every time grows it by a constant per step.
When the collection found nothing to free (gc's own statistics say so), nothing can have
died in it, and the second count is skipped.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence

from pytest_graphleak.metrics import OBJECTS, Metric
from pytest_graphleak.probes.base import BackendProbe, ProbeBase

CYCLIC_GARBAGE = Metric("gc.cyclic_garbage", OBJECTS, "cycles")


class GcProbe(ProbeBase):
    name = "gc"
    absent = "no autograd library is imported for it to count through"
    takes_backends = True
    metrics = (CYCLIC_GARBAGE,)
    needs_heap = False  # counts through the backends, on fresh objects only

    def __init__(self, backends: Sequence[BackendProbe]) -> None:
        self._backends = list(backends)
        self._total = 0
        self._before = 0
        self._freed = 0  # objects gc had found unreachable before the collection

    def available(self) -> bool:
        return bool(self._backends)

    def add_backend(self, backend: BackendProbe) -> None:
        """Count through a backend whose library was imported after the check began."""
        self._backends.append(backend)

    def start(self, heap: Sequence[object]) -> None:
        self._total = 0

    def before_collect(self, fresh: Sequence[object]) -> None:
        self._before = self._count(fresh)
        self._freed = _unreachable_found()

    def sample(self, fresh: Sequence[object]) -> dict[str, float]:
        if _unreachable_found() != self._freed:
            self._total += max(0, self._before - self._count(fresh))
        return {CYCLIC_GARBAGE.name: float(self._total)}

    def stop(self) -> None:
        self._backends = []

    def _count(self, fresh: Sequence[object]) -> int:
        return sum(backend.collectable(fresh) for backend in self._backends)


def _unreachable_found() -> int:
    """Objects gc's collections have found unreachable so far (freed or not)."""
    return sum(stats["collected"] + stats["uncollectable"] for stats in gc.get_stats())

"""minigrad: exact alive TensorImpl / Node / AutogradMeta counts from ``mg.stats()``, O(1)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from pytest_graphleak.metrics import OBJECTS, Metric
from pytest_graphleak.probes.base import ProbeBase


def _stats() -> dict[str, dict[str, int]]:
    minigrad: Any = sys.modules["minigrad"]
    stats: dict[str, dict[str, int]] = minigrad.stats()
    return stats


TENSORS = Metric("minigrad.tensors", OBJECTS, "tensors")
NODES = Metric("minigrad.nodes", OBJECTS, "nodes")
#: grad / grad_fn / hooks records, made on demand per tensor: counted like tensors.
AUTOGRAD_META = Metric("minigrad.autograd_meta", OBJECTS, "tensors")


class MinigradProbe(ProbeBase):
    name = "minigrad"
    absent = "minigrad is not imported"
    metrics = (TENSORS, NODES, AUTOGRAD_META)

    def available(self) -> bool:
        module = sys.modules.get("minigrad")
        return module is not None and callable(getattr(module, "stats", None))

    def sample(self, fresh: Sequence[object]) -> dict[str, float]:
        stats = _stats()
        return {
            TENSORS.name: float(stats["TensorImpl"]["alive"]),
            NODES.name: float(stats["Node"]["alive"]),
            AUTOGRAD_META.name: float(stats["AutogradMeta"]["alive"]),
        }

    def collectable(self, fresh: Sequence[object]) -> int:
        stats = _stats()
        return stats["TensorImpl"]["alive"] + stats["Node"]["alive"]

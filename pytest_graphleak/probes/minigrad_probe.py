"""minigrad: exact alive TensorImpl / Node / AutogradMeta counts from ``mg.stats()``, O(1)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from pytest_graphleak.probes.base import OBJECTS, PassiveProbe


def _stats() -> dict[str, dict[str, int]]:
    minigrad: Any = sys.modules["minigrad"]
    stats: dict[str, dict[str, int]] = minigrad.stats()
    return stats


class MinigradProbe(PassiveProbe):
    name = "minigrad"
    units = {  # noqa: RUF012
        "minigrad.tensors": OBJECTS,
        "minigrad.nodes": OBJECTS,
        "minigrad.autograd_meta": OBJECTS,
    }

    def available(self) -> bool:
        module = sys.modules.get("minigrad")
        return module is not None and callable(getattr(module, "stats", None))

    def sample(self, fresh: Sequence[object]) -> dict[str, float]:
        stats = _stats()
        return {
            "minigrad.tensors": float(stats["TensorImpl"]["alive"]),
            "minigrad.nodes": float(stats["Node"]["alive"]),
            "minigrad.autograd_meta": float(stats["AutogradMeta"]["alive"]),
        }

    def collectable(self, fresh: Sequence[object]) -> int:
        stats = _stats()
        return stats["TensorImpl"]["alive"] + stats["Node"]["alive"]

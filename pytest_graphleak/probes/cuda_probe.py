"""CUDA memory (allocated / reserved) when torch has already initialised CUDA.

``torch.cuda.is_initialized()`` is checked first so that a CPU-only run never creates
a CUDA context just to look.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from pytest_graphleak.probes.base import BYTES, PassiveProbe


class CudaProbe(PassiveProbe):
    name = "cuda"
    units = {"cuda.allocated_bytes": BYTES, "cuda.reserved_bytes": BYTES}  # noqa: RUF012

    def available(self) -> bool:
        torch: Any = sys.modules.get("torch")
        if torch is None or not hasattr(torch, "cuda"):
            return False
        try:
            return bool(torch.cuda.is_available() and torch.cuda.is_initialized())
        except Exception:  # a broken driver means "no GPU in use", not a failed test
            return False

    def sample(self, fresh: Sequence[object]) -> dict[str, float]:
        cuda: Any = sys.modules["torch"].cuda
        return {
            "cuda.allocated_bytes": float(cuda.memory_allocated()),
            "cuda.reserved_bytes": float(cuda.memory_reserved()),
        }

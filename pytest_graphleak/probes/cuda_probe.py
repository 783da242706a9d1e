"""CUDA memory and alive CUDA tensors, when torch has already initialised CUDA.

Metrics (all devices together, then per device when there are several):

* ``cuda.allocated_bytes`` — bytes of live tensors in PyTorch's caching allocator
  (``torch.cuda.memory_allocated``): exact, so any sustained growth counts;
* ``cuda.reserved_bytes`` — bytes the allocator holds from the driver, live or cached
  (``torch.cuda.memory_reserved``): judged with a tolerance, since the cache grows and
  shrinks on its own;
* ``cuda.tensors`` — alive tensors on a CUDA device, counted like ``torch.tensors``;
* with more than one device, ``cuda.allocated_bytes.<i>`` / ``cuda.reserved_bytes.<i>``.

Every sample is taken after synchronising the devices that hold memory, so kernels still
in flight (and frees waiting on their streams) are settled.

Allocator caching is handled the way PyTorch's own CUDA leak check does
(``CudaMemoryLeakCheck`` in ``torch/testing/_internal/common_utils.py``): a byte growth is
only *confirmed* if it survives cleaning — ``gc.collect()``, synchronise, drop the cuBLAS
workspaces, ``torch.cuda.empty_cache()`` — and three re-queries of
``memory_allocated`` all stay above the baseline taken after the same cleaning at the
end of warmup. ``CudaProbe.recheck()`` measures that (the byte metrics declare it);
``verdict.confirm`` decides with its numbers after ``judge()`` and before diagnosis.

Never initialises CUDA: the probe is available only when ``torch`` is already imported
and ``torch.cuda.is_initialized()``; devices without a context are read from the
allocator's host-side statistics but never synchronised (that would create a context).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Sequence
from typing import Any

from pytest_graphleak.metrics import BYTES, OBJECTS, Metric, Recheck
from pytest_graphleak.probes.base import ProbeBase
from pytest_graphleak.probes.torch_probe import WeakBaseline, tensors_among

ALLOCATED = "cuda.allocated_bytes"
RESERVED = "cuda.reserved_bytes"
TENSORS = "cuda.tensors"
#: How many times a growth is re-queried after cleaning before it is confirmed.
REQUERIES = 3


def _torch() -> Any:
    return sys.modules["torch"]


def cuda_in_use() -> bool:
    """torch is imported and has initialised CUDA (this never initialises it)."""
    torch: Any = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "cuda"):
        return False
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:  # a broken driver means "no GPU in use", not a failed test
        return False


def device_metric(metric: str, device: int) -> str:
    return f"{metric}.{device}"


def byte_metrics(allocated: str, reserved: str) -> tuple[Metric, Metric]:
    """Allocated bytes are exact; reserved bytes are the cache (noisy). A growth of either
    stands only if the allocated bytes (and, for reserved, the reserved bytes too) stay
    above their clean baseline after ``recheck`` cleaned the allocator."""
    return (
        Metric(allocated, BYTES, "memory", recheck=(allocated,)),
        Metric(reserved, BYTES, "memory", noisy=True, recheck=(allocated, reserved)),
    )


_TOTALS = (*byte_metrics(ALLOCATED, RESERVED), Metric(TENSORS, OBJECTS, "tensors"))


class CudaProbe(ProbeBase):
    name = "cuda"
    absent = "no CUDA device is in use (torch.cuda is not available or not initialised)"
    #: and per-device byte metrics with several GPUs (``available``)
    metrics: tuple[Metric, ...] = _TOTALS
    needs_heap = True  # CUDA tensors alive before the check form its baseline

    def __init__(self) -> None:
        self._devices: list[int] = []
        self._baseline = WeakBaseline()
        #: metric -> value after cleaning at the end of warmup (plain numbers only).
        self._clean_baseline: dict[str, float] = {}

    def available(self) -> bool:
        if not cuda_in_use():
            return False
        self._devices = list(range(int(_torch().cuda.device_count())))
        self.metrics = _TOTALS
        if len(self._devices) > 1:
            for device in self._devices:
                self.metrics += byte_metrics(
                    device_metric(ALLOCATED, device), device_metric(RESERVED, device)
                )
        return bool(self._devices)

    # -- protocol ----------------------------------------------------------------------
    def start(self, heap: Sequence[object]) -> None:
        self._baseline = WeakBaseline()
        self._baseline.add(_cuda_tensors(heap))
        self._clean_baseline = self.clean_and_query(requeries=1, collect=False)

    def absorb(self, fresh: Sequence[object]) -> None:
        """End of warmup: fresh CUDA tensors join the baseline; the clean baseline that
        ``recheck`` compares against is taken now, after warmup's one-off allocations."""
        self._baseline.add(_cuda_tensors(fresh))
        self._clean_baseline = self.clean_and_query(requeries=1, collect=False)

    def sample(self, fresh: Sequence[object]) -> dict[str, float]:
        self._synchronize()
        values = self._query()
        values[TENSORS] = float(len(_cuda_tensors(fresh)) + self._baseline.count())
        return values

    def stop(self) -> None:
        # Only plain numbers survive: ``recheck`` may still run after the check.
        self._baseline = WeakBaseline()

    # -- the allocator-cache rule ------------------------------------------------------
    def recheck(self) -> Recheck | None:
        """The byte metrics after cleaning the allocator, beside their clean baseline."""
        if not self._clean_baseline or not cuda_in_use():
            return None
        baseline, cleaned = dict(self._clean_baseline), self.clean_and_query()
        return Recheck(
            baseline=baseline,
            cleaned=cleaned,
            confirmed="CUDA growth confirmed after empty_cache()",
            withdrawn="growth was the caching allocator: gone after gc.collect(), "
            f"synchronize() and empty_cache() (allocated {_fmt(cleaned.get(ALLOCATED))} vs "
            f"{_fmt(baseline.get(ALLOCATED))} after warmup)",
        )

    def clean_and_query(
        self, requeries: int = REQUERIES, *, collect: bool = True
    ) -> dict[str, float]:
        """Collect (unless the tracker just did), synchronise, drop cuBLAS workspaces and
        the allocator cache, then query the byte metrics ``requeries`` times and keep each
        one's lowest value (a growth that disappears on any query was transient)."""
        if collect:
            gc.collect()
        self._synchronize()
        cuda = _torch().cuda
        clear_workspaces = getattr(_torch()._C, "_cuda_clearCublasWorkspaces", None)
        if clear_workspaces is not None:  # private API: workspaces count as "allocated"
            clear_workspaces()
        cuda.empty_cache()
        lowest: dict[str, float] = {}
        for _ in range(max(1, requeries)):
            self._synchronize()
            for metric, value in self._query().items():
                lowest[metric] = min(value, lowest.get(metric, value))
        return lowest

    # -- measurement -------------------------------------------------------------------
    def _query(self) -> dict[str, float]:
        cuda = _torch().cuda
        allocated = [float(cuda.memory_allocated(d)) for d in self._devices]
        reserved = [float(cuda.memory_reserved(d)) for d in self._devices]
        values = {ALLOCATED: sum(allocated), RESERVED: sum(reserved)}
        if len(self._devices) > 1:
            for device, a, r in zip(self._devices, allocated, reserved, strict=True):
                values[device_metric(ALLOCATED, device)] = a
                values[device_metric(RESERVED, device)] = r
        return values

    def _synchronize(self) -> None:
        """Synchronise the current device and every device that holds memory: those
        already have a context, so this never creates one."""
        cuda = _torch().cuda
        current = int(cuda.current_device())
        for device in self._devices:
            if device == current or cuda.memory_reserved(device) > 0:
                cuda.synchronize(device)


def _cuda_tensors(objects: Sequence[object]) -> list[Any]:
    return [tensor for tensor in tensors_among(objects) if _on_cuda(tensor)]


def _on_cuda(tensor: Any) -> bool:
    try:
        return bool(tensor.is_cuda)
    except Exception:  # exotic subclasses may refuse: not a CUDA tensor for us
        return False


def _fmt(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f} B"

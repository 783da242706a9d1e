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
end of warmup. ``CudaProbe.confirm(verdict)`` is that hook; the verdict path calls it
after ``judge()`` and before diagnosis.

Never initialises CUDA: the probe is available only when ``torch`` is already imported
and ``torch.cuda.is_initialized()``; devices without a context are read from the
allocator's host-side statistics but never synchronised (that would create a context).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from pytest_graphleak.probes.base import BYTES, OBJECTS
from pytest_graphleak.probes.torch_probe import WeakBaseline, tensors_among
from pytest_graphleak.result import Growth, Verdict
from pytest_graphleak.verdict import classify

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


class CudaProbe:
    name = "cuda"
    needs_heap = True  # CUDA tensors alive before the check form its baseline

    def __init__(self) -> None:
        self.units: dict[str, str] = {ALLOCATED: BYTES, RESERVED: BYTES, TENSORS: OBJECTS}
        self._devices: list[int] = []
        self._baseline = WeakBaseline()
        #: metric -> value after cleaning at the end of warmup (plain numbers only).
        self._clean_baseline: dict[str, float] = {}

    def available(self) -> bool:
        if not cuda_in_use():
            return False
        self._devices = list(range(int(_torch().cuda.device_count())))
        if len(self._devices) > 1:
            for device in self._devices:
                self.units[device_metric(ALLOCATED, device)] = BYTES
                self.units[device_metric(RESERVED, device)] = BYTES
        return bool(self._devices)

    # -- protocol ----------------------------------------------------------------------
    def start(self, heap: Sequence[object]) -> None:
        self._baseline = WeakBaseline()
        self._baseline.add(_cuda_tensors(heap))
        self._clean_baseline = self.clean_and_query(requeries=1, collect=False)

    def absorb(self, fresh: Sequence[object]) -> None:
        """End of warmup: fresh CUDA tensors join the baseline; the clean baseline that
        ``confirm`` compares against is taken now, after warmup's one-off allocations."""
        self._baseline.add(_cuda_tensors(fresh))
        self._clean_baseline = self.clean_and_query(requeries=1, collect=False)

    def sample(self, fresh: Sequence[object]) -> dict[str, float]:
        self._synchronize()
        values = self._query()
        values[TENSORS] = float(len(_cuda_tensors(fresh)) + self._baseline.count())
        return values

    def stop(self) -> None:
        # Only plain numbers survive: ``confirm`` may still run after the check.
        self._baseline = WeakBaseline()

    # -- the allocator-cache rule ------------------------------------------------------
    def confirm(self, verdict: Verdict) -> Verdict:
        """Re-judge CUDA byte growth after cleaning the allocator; other metrics untouched.

        Call after ``judge()`` when the verdict is a leak, before diagnosis.
        """
        if not verdict.leaked or not any(_is_cuda_bytes(g.metric) for g in verdict.growths):
            return verdict
        if not self._clean_baseline or not cuda_in_use():
            return verdict
        return reconsider(verdict, self._clean_baseline, self.clean_and_query())

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


def _is_cuda_bytes(metric: str) -> bool:
    return metric.startswith((ALLOCATED, RESERVED))


def _allocated_metric_for(metric: str) -> str:
    """The allocated-bytes metric that decides a byte metric (same device, or total)."""
    return ALLOCATED + metric[len(RESERVED) :] if metric.startswith(RESERVED) else metric


def reconsider(
    verdict: Verdict, clean_baseline: Mapping[str, float], cleaned: Mapping[str, float]
) -> Verdict:
    """Pure: drop CUDA byte growths that cleaning the allocator made disappear.

    A growth of allocated bytes (total or per device) stands only when the cleaned value
    is still above the clean baseline. Reserved bytes are the cache: their growth stands
    only when the allocated bytes of the same device (or total) stand too, and the
    cleaned reserved bytes are above their baseline.
    """
    standing: list[Growth] = []
    dropped: list[str] = []
    for growth in verdict.growths:
        metric = growth.metric
        if _is_cuda_bytes(metric) and not (
            _above(_allocated_metric_for(metric), clean_baseline, cleaned)
            and _above(metric, clean_baseline, cleaned)
        ):
            dropped.append(metric)
        else:
            standing.append(growth)
    if not dropped:
        return replace(
            verdict, reason=f"{verdict.reason}; CUDA growth confirmed after empty_cache()"
        )
    note = (
        f"{', '.join(dropped)} growth was the caching allocator: gone after gc.collect(), "
        f"synchronize() and empty_cache() (allocated {_fmt(cleaned.get(ALLOCATED))} vs "
        f"{_fmt(clean_baseline.get(ALLOCATED))} after warmup)"
    )
    if not standing:
        return Verdict(leaked=False, growths=[], pattern=None, reason=f"clean: {note}")
    pattern = classify([g.metric for g in standing])
    return replace(verdict, growths=standing, pattern=pattern, reason=f"{verdict.reason}; {note}")


def _above(metric: str, baseline: Mapping[str, float], cleaned: Mapping[str, float]) -> bool:
    if metric not in baseline or metric not in cleaned:
        return True  # nothing to compare with: keep the verdict's judgement
    return cleaned[metric] > baseline[metric]


def _fmt(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f} B"

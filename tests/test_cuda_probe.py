"""The CUDA probe with ``torch.cuda`` faked: runs on any machine, GPU or not.

A ``FakeCuda`` stands in for the allocator (per-device allocated / reserved bytes,
cuBLAS workspaces, a cache that ``empty_cache`` drops); CUDA tensors are a Tensor
subclass whose ``is_cuda`` is True. The real-GPU twins live in ``test_cuda_gpu.py``.
"""

from __future__ import annotations

import gc
import sys
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest

from pytest_graphleak.metrics import Metric

if TYPE_CHECKING:
    import torch
else:
    torch = pytest.importorskip("torch")

from pytest_graphleak.engine.tracker import run
from pytest_graphleak.metrics import Recheck
from pytest_graphleak.probes import TorchProbe, make_probes
from pytest_graphleak.probes.cuda_probe import (
    ALLOCATED,
    RESERVED,
    TENSORS,
    CudaProbe,
    byte_metrics,
    device_metric,
)
from pytest_graphleak.result import Growth, Verdict
from pytest_graphleak.verdict import confirm, judge, needs_recheck

MiB = 1 << 20


class FakeCudaTensor(torch.Tensor):
    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True


def cuda_tensor() -> torch.Tensor:
    return torch.Tensor._make_subclass(FakeCudaTensor, torch.zeros(2))


@dataclass
class FakeCuda:
    """Per-device allocator numbers; ``live`` is held by tensors, ``cached`` by the cache."""

    devices: int = 1
    live: list[int] = field(default_factory=list)
    cached: list[int] = field(default_factory=list)
    workspace: list[int] = field(default_factory=list)
    #: allocated bytes that vanish after this many more queries (a transient free)
    transient: int = 0
    transient_queries: int = 0
    synchronized: list[int] = field(default_factory=list)
    emptied: int = 0

    def __post_init__(self) -> None:
        self.live = self.live or [0] * self.devices
        self.cached = self.cached or [0] * self.devices
        self.workspace = self.workspace or [0] * self.devices

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        cuda = torch.cuda
        monkeypatch.setattr(cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(cuda, "device_count", lambda: self.devices)
        monkeypatch.setattr(cuda, "current_device", lambda: 0)
        monkeypatch.setattr(cuda, "memory_allocated", self.memory_allocated)
        monkeypatch.setattr(cuda, "memory_reserved", self.memory_reserved)
        monkeypatch.setattr(cuda, "synchronize", self.synchronized.append)
        monkeypatch.setattr(cuda, "empty_cache", self.empty_cache)
        monkeypatch.setattr(
            torch._C, "_cuda_clearCublasWorkspaces", self.clear_workspaces, raising=False
        )

    def memory_allocated(self, device: int) -> int:
        extra = 0
        if device == 0 and self.transient_queries > 0:
            self.transient_queries -= 1
            extra = self.transient
        return self.live[device] + self.workspace[device] + extra

    def memory_reserved(self, device: int) -> int:
        return self.memory_allocated_quiet(device) + self.cached[device]

    def memory_allocated_quiet(self, device: int) -> int:
        return self.live[device] + self.workspace[device]

    def empty_cache(self) -> None:
        self.emptied += 1
        self.cached = [0] * self.devices

    def clear_workspaces(self) -> None:
        self.workspace = [0] * self.devices


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    cuda = FakeCuda()
    cuda.install(monkeypatch)
    return cuda


def leak_verdict(*metrics: str) -> Verdict:
    growths = [Growth(metric=m, start=0.0, end=10.0, per_step=1.0) for m in metrics]
    return Verdict(leaked=True, growths=growths, pattern="memory-growth", reason="grew: ...")


def declared(probe: CudaProbe) -> dict[str, Metric]:
    return {m.name: m for m in (*probe.metrics, *TorchProbe.metrics)}


def recheck(probe: CudaProbe, verdict: Verdict) -> Verdict:
    """What ``check()`` does after judging: when a grown metric declares a recheck, its
    probe measures again and the verdict decides with those numbers."""
    if not needs_recheck(verdict, {m.name: m for m in probe.metrics}):
        return verdict
    found = probe.recheck()
    return verdict if found is None else confirm(verdict, declared(probe), found)


# --------------------------------------------------------------------------- activation


def test_inactive_without_cuda_and_never_initialises_it(monkeypatch: pytest.MonkeyPatch) -> None:
    if torch.cuda.is_initialized():
        pytest.skip("CUDA already initialised in this process")
    assert not CudaProbe().available()
    assert "cuda" not in [p.name for p in make_probes()]
    assert not torch.cuda.is_initialized()
    monkeypatch.delitem(sys.modules, "torch")
    assert not CudaProbe().available()  # torch not imported: never import it to look


def test_broken_driver_reads_as_not_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom() -> bool:
        raise RuntimeError("CUDA driver version is insufficient")

    monkeypatch.setattr(torch.cuda, "is_initialized", boom)
    assert not CudaProbe().available()


def test_active_once_initialised(fake: FakeCuda) -> None:
    assert "cuda" in [p.name for p in make_probes()]


# --------------------------------------------------------------------------- sampling


def test_sample_reads_bytes_after_synchronising_only_devices_with_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cuda = FakeCuda(devices=3, live=[4 * MiB, 0, 1 * MiB], cached=[2 * MiB, 0, 0])
    cuda.install(monkeypatch)
    probe = CudaProbe()
    assert probe.available()
    probe.start([])
    cuda.synchronized.clear()
    values = probe.sample([])
    assert values[ALLOCATED] == 5 * MiB and values[RESERVED] == 5 * MiB  # start emptied cache
    assert values[f"{ALLOCATED}.0"] == 4 * MiB and values[f"{ALLOCATED}.2"] == 1 * MiB
    assert values[f"{RESERVED}.1"] == 0
    # device 1 holds nothing: synchronising it would create a CUDA context there
    assert sorted(set(cuda.synchronized)) == [0, 2]
    assert set(values) == {m.name for m in probe.metrics}
    reserved = {m.name: m for m in probe.metrics}[device_metric(RESERVED, 2)]
    assert reserved.noisy and reserved.recheck == (device_metric(ALLOCATED, 2), reserved.name)


def test_one_device_has_only_the_total_metrics(fake: FakeCuda) -> None:
    probe = CudaProbe()
    assert probe.available()
    assert [m.name for m in probe.metrics] == [ALLOCATED, RESERVED, TENSORS]
    probe.available()  # asking again declares nothing twice
    assert [m.name for m in probe.metrics] == [ALLOCATED, RESERVED, TENSORS]


def test_counts_alive_cuda_tensors_and_keeps_none(fake: FakeCuda) -> None:
    probe = CudaProbe()
    probe.available()
    kept = cuda_tensor()
    doomed = cuda_tensor()
    probe.start([kept, doomed, torch.zeros(3), object()])
    fresh = [cuda_tensor(), torch.ones(2)]
    assert probe.sample(fresh)[TENSORS] == 3  # 2 baseline + 1 fresh; CPU tensors ignored
    watch = weakref.ref(doomed)
    del doomed
    assert watch() is None  # the baseline holds its tensors weakly
    assert probe.sample([])[TENSORS] == 1
    probe.stop()
    watch_kept = weakref.ref(kept)
    del kept, fresh
    gc.collect()
    assert watch_kept() is None


def test_baseline_absorbs_a_tensor_twice_and_forgets_it_when_it_dies(fake: FakeCuda) -> None:
    probe = CudaProbe()
    probe.available()
    kept, dying = cuda_tensor(), cuda_tensor()
    probe.start([kept, dying])
    probe.absorb([kept, dying, kept])  # a set of tensors would compare them elementwise
    assert probe.sample([])[TENSORS] == 2
    del dying
    assert probe.sample([])[TENSORS] == 1
    probe.stop()


# --------------------------------------------------------------------------- the cache rule


def test_confirm_drops_growth_that_was_the_allocator_cache(fake: FakeCuda) -> None:
    probe = CudaProbe()
    probe.available()
    probe.start([])
    fake.workspace[0] = 8 * MiB  # a cuBLAS workspace and cached blocks appeared
    fake.cached[0] = 32 * MiB
    verdict = recheck(probe, leak_verdict(ALLOCATED, RESERVED))
    assert not verdict.leaked and verdict.growths == []
    assert "caching allocator" in verdict.reason and "empty_cache()" in verdict.reason
    assert fake.emptied >= 2 and fake.workspace == [0]


def test_confirm_keeps_a_real_leak(fake: FakeCuda) -> None:
    probe = CudaProbe()
    probe.available()
    probe.start([])
    fake.live[0] += 3 * MiB  # tensors still alive after cleaning
    fake.cached[0] = 16 * MiB
    verdict = recheck(probe, leak_verdict(ALLOCATED, RESERVED))
    assert verdict.leaked
    assert [g.metric for g in verdict.growths] == [ALLOCATED, RESERVED]
    assert "confirmed after empty_cache()" in verdict.reason


def test_confirm_requeries_so_a_transient_allocation_is_not_a_leak(fake: FakeCuda) -> None:
    probe = CudaProbe()
    probe.available()
    probe.start([])
    fake.transient, fake.transient_queries = 1 * MiB, 2  # freed before the third query
    assert not recheck(probe, leak_verdict(ALLOCATED)).leaked
    fake.transient, fake.transient_queries = 1 * MiB, 10  # still there every time
    assert recheck(probe, leak_verdict(ALLOCATED)).leaked


def test_baseline_is_taken_after_warmup(fake: FakeCuda) -> None:
    probe = CudaProbe()
    probe.available()
    probe.start([])
    fake.live[0] += 10 * MiB  # optimizer state made during warmup: not a leak
    probe.absorb([])
    assert not recheck(probe, leak_verdict(ALLOCATED)).leaked


def test_confirm_leaves_other_metrics_and_clean_verdicts_alone(fake: FakeCuda) -> None:
    probe = CudaProbe()
    probe.available()
    probe.start([])
    clean = Verdict(leaked=False, reason="no metric grew")
    assert recheck(probe, clean) is clean
    no_cuda = leak_verdict("torch.tensors")
    assert recheck(probe, no_cuda) is no_cuda
    assert fake.emptied == 1  # only start() cleaned: no CUDA growth, nothing re-queried
    mixed = recheck(probe, leak_verdict("torch.tensors", RESERVED))
    assert mixed.leaked and [g.metric for g in mixed.growths] == ["torch.tensors"]
    assert mixed.pattern == "list-accumulation"  # re-classified without the cache growth


def test_confirm_is_per_device() -> None:
    baseline = {
        ALLOCATED: 10.0,
        f"{ALLOCATED}.0": 4.0,
        f"{ALLOCATED}.1": 6.0,
        RESERVED: 10.0,
        f"{RESERVED}.0": 4.0,
        f"{RESERVED}.1": 6.0,
    }
    cleaned = {
        ALLOCATED: 12.0,
        f"{ALLOCATED}.0": 4.0,
        f"{ALLOCATED}.1": 8.0,
        RESERVED: 12.0,
        f"{RESERVED}.0": 4.0,
        f"{RESERVED}.1": 8.0,
    }
    metrics = {
        m.name: m for d in (0, 1) for m in byte_metrics(f"{ALLOCATED}.{d}", f"{RESERVED}.{d}")
    }
    verdict = confirm(
        leak_verdict(f"{ALLOCATED}.0", f"{ALLOCATED}.1", f"{RESERVED}.0", f"{RESERVED}.1"),
        metrics,
        Recheck(baseline, cleaned, confirmed="confirmed", withdrawn="was the cache"),
    )
    assert [g.metric for g in verdict.growths] == [f"{ALLOCATED}.1", f"{RESERVED}.1"]
    assert f"{ALLOCATED}.0, {RESERVED}.0 was the cache" in verdict.reason
    # reserved bytes above their baseline do not stand when allocated bytes fell back
    cleaned[f"{ALLOCATED}.1"] = 6.0
    alone = confirm(leak_verdict(f"{RESERVED}.1"), metrics, Recheck(baseline, cleaned))
    assert not alone.leaked and alone.pattern is None


# --------------------------------------------------------------------------- with the verdict


def drive(probe: CudaProbe, step: object, *, steps: int = 8, warmup: int = 2) -> Verdict:
    """The tracker's protocol by hand: start, a sample after each call, absorb at the end
    of warmup, then judge and confirm with the same probe."""
    assert probe.available()
    probe.start([])
    series: dict[str, list[float]] = {}
    try:
        for call in range(1, warmup + steps + 1):
            step()  # type: ignore[operator]
            for metric, value in probe.sample([]).items():
                series.setdefault(metric, []).append(value)
            if call == warmup:
                probe.absorb([])
    finally:
        probe.stop()
    return recheck(probe, judge(series, declared(probe), warmup=warmup))


def test_judge_then_confirm(fake: FakeCuda) -> None:
    """1 MiB more live memory a step is a leak and stays one after cleaning; a cache that
    grows each step is judged a leak on its series but confirm() clears it."""

    def leaky_step() -> None:
        fake.live[0] += MiB

    def caching_step() -> None:
        fake.cached[0] += 4 * MiB  # bigger temporaries each step: the cache grows

    leak = drive(CudaProbe(), leaky_step)
    assert leak.leaked and ALLOCATED in [g.metric for g in leak.growths]
    cuda = {m.name: m for m in CudaProbe().metrics}
    assert judge({RESERVED: [float(i * 4 * MiB) for i in range(10)]}, cuda, warmup=2).leaked
    cache = drive(CudaProbe(), caching_step)
    assert not cache.leaked and "caching allocator" in cache.reason


def test_tracker_samples_the_cuda_probe(fake: FakeCuda) -> None:
    def leaky_step() -> None:
        fake.live[0] += MiB

    series = run(leaky_step, steps=6, warmup=2, probes=["cuda"])
    assert series.series[ALLOCATED] == [float(i * MiB) for i in range(1, 9)]
    assert series.series[TENSORS] == [0.0] * 8
    assert judge(series.series, series.metrics, warmup=2).leaked


def test_check_applies_the_cache_rule_end_to_end(fake: FakeCuda) -> None:
    """``pytest_graphleak.check`` calls ``confirm`` after judging: a growing cache is
    clean, live bytes that stay after cleaning are a leak."""
    from pytest_graphleak import check

    def caching_step() -> None:
        fake.cached[0] += 64 * MiB  # reserved grows far beyond any RSS tolerance

    def leaky_step() -> None:
        fake.live[0] += 512

    cache = check(caching_step, steps=8, warmup=2, probes=["cuda"], diagnose=False)
    assert not cache.leaked and "caching allocator" in cache.verdict.reason
    assert cache.series[RESERVED][-1] > cache.series[RESERVED][2]
    leak = check(leaky_step, steps=8, warmup=2, probes=["cuda"], diagnose=False)
    assert leak.leaked and [g.metric for g in leak.verdict.growths] == [ALLOCATED]
    assert "confirmed after empty_cache()" in leak.verdict.reason

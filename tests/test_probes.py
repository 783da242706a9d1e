"""Probes measure the right things and keep nothing alive."""

from __future__ import annotations

import gc
import math
import subprocess
import sys
import time
import weakref

import numpy as np
import pytest

from pytest_graphleak.probes import METRICS, PROBE_NAMES, GcProbe, make_probes, process_probe
from pytest_graphleak.probes.minigrad_probe import MinigradProbe
from pytest_graphleak.probes.process_probe import ProcessProbe
from pytest_graphleak.probes.torch_probe import TorchProbe, count_nodes, storage_bytes

torch = pytest.importorskip("torch")
mg = pytest.importorskip("minigrad")


def fresh_since(baseline: list[object]) -> list[object]:
    """Objects that were not in ``baseline`` (stands in for gc.get_objects() after freeze)."""
    seen = {id(o) for o in baseline}
    return [o for o in gc.get_objects() if id(o) not in seen]


def test_torch_probe_counts_tensors_nodes_and_unique_storage() -> None:
    probe = TorchProbe()
    heap = gc.get_objects()
    probe.start(heap)
    base = probe.sample([])
    weight = torch.ones(4, 4, requires_grad=True)
    loss = (weight * 2).sum()  # MulBackward0 -> AccumulateGrad, SumBackward0
    view = weight[0]  # shares weight's storage
    after = probe.sample(fresh_since(heap))
    heap.clear()
    assert after["torch.tensors"] - base["torch.tensors"] == 3
    assert after["torch.nodes"] - base["torch.nodes"] >= 3
    # weight (64 B) counted once although the view shares it; loss adds 4 B
    assert after["torch.storage_bytes"] - base["torch.storage_bytes"] == 64 + 4
    del loss, view, weight
    probe.stop()


def test_node_walk_dedupes_shared_subgraphs_and_counts_held_nodes() -> None:
    x = torch.ones(3, requires_grad=True)
    y = x * 2
    a, b = y + 1, y + 2  # share MulBackward0 and AccumulateGrad
    assert count_nodes([a, b], []) == 4  # Add, Add, Mul, AccumulateGrad
    assert count_nodes([], [a.grad_fn]) == 3
    assert storage_bytes([x, x[1:], y]) == 24


def test_torch_baseline_is_weak_and_dead_tensors_stop_counting() -> None:
    probe = TorchProbe()
    tensor = torch.zeros(2)
    ref = weakref.ref(tensor)
    probe.start(gc.get_objects())
    before = probe.sample([])["torch.tensors"]
    del tensor
    assert ref() is None  # the probe's baseline did not keep it alive
    assert probe.sample([])["torch.tensors"] == before - 1
    probe.stop()


def test_minigrad_probe_reads_exact_stats() -> None:
    probe = MinigradProbe()
    assert probe.available()
    base = probe.sample([])
    w = mg.Tensor(np.ones((2, 2)), requires_grad=True)
    loss = (w * w).sum()
    after = probe.sample([])
    assert after["minigrad.tensors"] > base["minigrad.tensors"]
    assert after["minigrad.nodes"] > base["minigrad.nodes"]
    del w, loss
    assert probe.sample([]) == base


def test_gc_probe_counts_only_what_the_cyclic_collector_frees() -> None:
    class Holder:
        me: object
        t: object

    probe = GcProbe([MinigradProbe()])
    probe.start([])
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(3):
            holder = Holder()
            holder.me = holder  # a cycle carrying a tensor
            holder.t = mg.Tensor(np.ones(2), requires_grad=True) * 2
            del holder
            plain = mg.Tensor(np.ones(2)) * 3  # freed by reference counting
            del plain
            probe.before_collect([])
            gc.collect()
            values = probe.sample([])
    finally:
        if enabled:
            gc.enable()
    per_step = values["gc.cyclic_garbage"] / 3
    assert per_step >= 2  # the result tensor and its node (at least)


def test_process_probe_reads_this_process_resident_memory() -> None:
    psutil = pytest.importorskip("psutil")
    probe = ProcessProbe()
    assert probe.available()
    rss = probe.metrics[0]
    assert rss.name == "process.rss_bytes"
    assert probe.sample([])[rss.name] == pytest.approx(
        psutil.Process().memory_info().rss, abs=4 * 2**20
    )
    probe.start([])  # reads /proc/self/statm itself where there is one
    try:
        before = probe.sample([])[rss.name]
        assert before == pytest.approx(psutil.Process().memory_info().rss, abs=4 * 2**20)
        block = np.ones(64 * 2**20, dtype=np.uint8)  # written, so resident
        assert probe.sample([])[rss.name] - before >= 48 * 2**20
        del block
    finally:
        probe.stop()


@pytest.mark.usefixtures("malloc_sampled")
def test_process_probe_counts_malloc_bytes_wherever_they_lie_and_resident_or_not() -> None:
    """A buffer kept is counted by its size even when it lands in pages that earlier code
    freed and left resident (RSS flat), and a buffer freed is taken off."""
    probe = ProcessProbe()
    assert probe.available()
    assert [m.name for m in probe.metrics] == ["process.rss_bytes", "process.malloc_bytes"]
    probe.start([])
    try:
        before = probe.sample([])["process.malloc_bytes"]
        block = np.empty(32 * 2**20, dtype=np.uint8)  # never written: not resident
        grown = probe.sample([])["process.malloc_bytes"] - before
        assert 32 * 2**20 <= grown < 33 * 2**20
        del block
        assert abs(probe.sample([])["process.malloc_bytes"] - before) < 2**20
    finally:
        probe.stop()


def _warmup_then_measured(probe: ProcessProbe, step_s: float, warmup: int = 3) -> list[float]:
    """malloc's bytes over ``warmup`` samples, the end of warmup, then 3 more; each step
    takes ``step_s``."""
    values = []
    probe.start([])
    try:
        for call in range(1, warmup + 4):
            time.sleep(step_s)
            values.append(probe.sample([])["process.malloc_bytes"])
            if call == warmup:
                probe.absorb([])
    finally:
        probe.stop()
    return values


@pytest.mark.parametrize("warmup", [3, 0])
def test_dear_malloc_sampling_is_kept_where_the_step_costs_more(
    monkeypatch: pytest.MonkeyPatch, warmup: int
) -> None:
    """Cheap relative to the step: a call dearer than ``MAX_MALLINFO_S`` is still paid
    after a step that costs more (the steps of the warmup are timed)."""
    if process_probe.mallinfo2() is None:
        pytest.skip("no glibc mallinfo2 here")
    monkeypatch.setattr(process_probe, "MAX_MALLINFO_S", -1.0)  # every call "dear"
    probe = ProcessProbe()
    assert probe.available()
    assert "process.malloc_bytes" in [m.name for m in probe.metrics]
    values = _warmup_then_measured(probe, step_s=0.005, warmup=warmup)
    assert all(math.isfinite(v) for v in values), values
    assert probe.notes() == []


def test_dear_malloc_sampling_is_kept_where_the_whole_check_pays_little(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A step faster than one call (a numpy step keeping 1 MiB on a fragmented heap):
    malloc stays sampled where the check's known samples together cost little."""
    if process_probe.mallinfo2() is None:
        pytest.skip("no glibc mallinfo2 here")
    monkeypatch.setattr(process_probe, "MAX_MALLINFO_S", -1.0)
    monkeypatch.setattr(process_probe, "STEP_SHARE", 0.0)  # any call costs more than a step
    probe = ProcessProbe()
    assert probe.available()
    probe.plan(19)
    values = _warmup_then_measured(probe, step_s=0.0)
    assert all(math.isfinite(v) for v in values), values
    assert probe.notes() == []
    monkeypatch.setattr(process_probe, "CHECK_BUDGET_S", 0.0)  # now the check pays too much
    assert probe.available()
    probe.plan(19)
    values = _warmup_then_measured(probe, step_s=0.0)
    assert all(math.isnan(v) for v in values[3:]), values
    (note,) = probe.notes()
    assert " s over the check's 19 samples; memory growth was judged on RSS alone" in note


@pytest.mark.parametrize("warmup", [3, 0])
def test_dear_malloc_sampling_stops_after_warmup_where_it_costs_more_than_the_step(
    monkeypatch: pytest.MonkeyPatch, warmup: int
) -> None:
    if process_probe.mallinfo2() is None:
        pytest.skip("no glibc mallinfo2 here")
    monkeypatch.setattr(process_probe, "MAX_MALLINFO_S", -1.0)
    monkeypatch.setattr(process_probe, "STEP_SHARE", 0.0)  # any call costs more than a step
    probe = ProcessProbe()
    assert probe.available()
    values = _warmup_then_measured(probe, step_s=0.0, warmup=warmup)
    decided = warmup or process_probe.DECIDE_AFTER  # the end of warmup, else 3 samples
    assert all(math.isfinite(v) for v in values[:decided]), values
    assert all(math.isnan(v) for v in values[decided:]), values  # never judged: NaN
    (note,) = probe.notes()
    assert note.startswith(
        "process.malloc_bytes not sampled after warmup: counting the C heap's allocated bytes took "
    )
    assert "more than the step itself (" in note and note.endswith(
        " ms a step as checked); memory growth was judged on RSS alone"
    )


def test_make_probes_selects_and_validates_names() -> None:
    names = [p.name for p in make_probes()]
    assert names[:4] == ["minigrad", "torch", "gc", "process"]
    assert [p.name for p in make_probes(["torch"])] == ["torch"]
    assert [p.name for p in make_probes(["gc"])] == ["gc"]
    with pytest.raises(ValueError, match="unknown probe"):
        make_probes(["tensorflow"])
    # every name that can be asked for is a probe (in PROBE_NAMES order), and every
    # metric a probe declares is named "<probe>.<metric>"
    available = make_probes(PROBE_NAMES)
    assert [p.name for p in available] == [n for n in PROBE_NAMES if n in names]
    for probe in available:
        assert all(m.name.startswith(f"{probe.name}.") for m in probe.metrics), probe.name
    assert {name.split(".")[0] for name in METRICS} == set(PROBE_NAMES)


def test_probes_never_import_torch_or_minigrad() -> None:
    code = (
        "import sys, pytest_graphleak, pytest_graphleak.plugin;"
        "from pytest_graphleak.probes import make_probes;"
        "names = [p.name for p in make_probes()];"
        "assert 'torch' not in sys.modules and 'minigrad' not in sys.modules, sys.modules.keys();"
        "print(names)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['process']"


def test_torch_baseline_absorbs_a_tensor_twice_and_forgets_it_when_it_dies() -> None:
    torch = pytest.importorskip("torch")
    from pytest_graphleak.probes.torch_probe import TorchProbe

    probe = TorchProbe()
    kept, dying = torch.ones(3), torch.zeros(2)
    probe.start([kept, dying])
    probe.absorb([kept, dying, kept])  # a set of tensors would compare them elementwise
    assert probe.sample([])["torch.tensors"] == 2
    del dying
    assert probe.sample([])["torch.tensors"] == 1
    probe.stop()


def test_fake_tensors_are_not_asked_for_a_data_pointer() -> None:
    """torch.compile's FakeTensors warn when their storage's data pointer is read: the
    probe skips them (they own no memory) and the user's warnings summary stays clean."""
    import warnings

    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.ones(4)
    real = torch.ones(4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert storage_bytes([fake, real]) == 16


def test_storage_bytes_reuses_a_baseline_tensors_storage_until_its_address_changes() -> None:
    from pytest_graphleak.probes.torch_probe import WeakBaseline

    torch = pytest.importorskip("torch")
    param = torch.zeros(4)  # 16 bytes
    baseline = WeakBaseline()
    baseline.add([param])
    assert storage_bytes([param], baseline) == 16
    assert id(param) in baseline.storages  # read once, then reused
    param.data = torch.zeros(10)  # a new storage: a new address
    assert storage_bytes([param], baseline) == 40
    view = param[2:]
    assert storage_bytes([param, view], baseline) == 40
    key = id(param)
    del param, view
    assert key not in baseline.storages  # forgotten when the tensor dies


def test_storage_bytes_reuses_the_baseline_table_while_no_address_changes() -> None:
    """The baseline's storage table is reused from sample to sample; a view of a baseline
    tensor, a new address and a baseline tensor's death are still counted right."""
    from pytest_graphleak.probes.torch_probe import WeakBaseline

    torch = pytest.importorskip("torch")
    a, b = torch.zeros(4), torch.zeros(2, dtype=torch.float64)  # 16 + 16 bytes
    baseline = WeakBaseline()
    baseline.add([a, b])
    base = list(baseline.alive())
    assert storage_bytes([], baseline, base) == 32
    assert baseline.table(base)[0] is baseline.table(base)[0]  # read once, then reused
    fresh = torch.ones(3)  # 12 bytes
    assert storage_bytes([fresh, a[1:]], baseline, base) == 44  # the view adds nothing
    a.data = torch.zeros(8)  # a new storage at a new address
    assert storage_bytes([fresh], baseline, list(baseline.alive())) == 32 + 16 + 12
    del base, a
    assert storage_bytes([fresh], baseline, list(baseline.alive())) == 16 + 12


def test_baseline_fakes_are_counted_but_not_asked_for_a_data_pointer() -> None:
    """A FakeTensor in the start set counts as a tensor in every sample, but the
    baseline's storage table never reads its data pointer (it warns) nor its bytes."""
    import warnings

    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.ones(4)
    real = torch.ones(4)
    probe = TorchProbe()
    probe.start([fake, real])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):  # the table is built, then reused
            values = probe.sample([])
            assert values["torch.tensors"] == 2
            assert values["torch.storage_bytes"] == 16
    probe.stop()


def test_a_baseline_tensor_whose_graph_grows_in_place_is_counted_every_sample() -> None:
    """``total += loss`` on a tensor of the start set: no new Python object, yet the
    graph behind the baseline tensor grows, and every sample sees it."""
    probe = TorchProbe()
    total, weight = torch.zeros(()), torch.ones(2, requires_grad=True)
    probe.start([total, weight])
    nodes = []
    for _ in range(3):
        total += (weight * 2).sum()
        nodes.append(probe.sample([])["torch.nodes"])
    assert nodes[1] - nodes[0] == nodes[2] - nodes[1] > 0
    del total
    probe.stop()


def test_the_probe_roster_is_one_table_and_the_rest_derives_from_it() -> None:
    """A new probe is its module plus one line in ``PROBES``, an autograd library's its
    bundle plus one line in ``probes/autograd.BUNDLES``: names, metrics, coverage's
    libraries and absent reasons, and the diagnosis backends all read them."""
    from pytest_graphleak import probes
    from pytest_graphleak.engine import coverage
    from pytest_graphleak.probes.autograd import BUNDLES

    assert probes.PROBE_NAMES == ("minigrad", "torch", "gc", "process", "cuda")
    assert probes.BACKENDS == ("minigrad", "torch")
    assert vars(coverage)["BACKENDS"] is probes.BACKENDS
    for kind in probes.PROBES:
        assert kind.absent, f"{kind.name}: no reason for being absent"
        assert all(metric.name.startswith(f"{kind.name}.") for metric in kind.metrics)
    for bundle in BUNDLES:  # the library's probe, and its backend, carry its name
        assert bundle.probe in probes.PROBES and bundle.probe.name == bundle.name
    assert set(probes.METRICS) == {m.name for kind in probes.PROBES for m in kind.metrics}

"""What is measured: one probe per backend, chosen by what is already imported.

Metric names are ``"<probe>.<metric>"``, and only the probes know them: each declares
what its metrics are (``metrics.Metric``); see each module. ``make_probes`` never
imports torch or minigrad: a probe is active only when its library is in
``sys.modules`` already.
"""

from __future__ import annotations

from collections.abc import Collection

from pytest_graphleak.metrics import Metric
from pytest_graphleak.probes.base import BackendProbe, Probe
from pytest_graphleak.probes.cuda_probe import CudaProbe
from pytest_graphleak.probes.gc_probe import GcProbe
from pytest_graphleak.probes.minigrad_probe import MinigradProbe
from pytest_graphleak.probes.process_probe import ProcessProbe
from pytest_graphleak.probes.torch_probe import TorchProbe

#: Every probe name, in sampling order.
PROBE_NAMES = ("minigrad", "torch", "gc", "process", "cuda")

#: Every metric a probe declares, by name (with several GPUs the CUDA probe adds
#: per-device byte metrics when it starts).
METRICS: dict[str, Metric] = {
    metric.name: metric
    for probe in (MinigradProbe, TorchProbe, GcProbe, ProcessProbe, CudaProbe)
    for metric in probe.metrics
}

__all__ = ["METRICS", "PROBE_NAMES", "BackendProbe", "CudaProbe", "GcProbe", "MinigradProbe",
           "Probe", "ProcessProbe", "TorchProbe", "make_probes"]  # fmt: skip


def make_probes(names: Collection[str] | None = None) -> list[Probe]:
    """The available probes among ``names`` (all when None), in PROBE_NAMES order."""
    if names is not None:
        unknown = sorted(set(names) - set(PROBE_NAMES))
        if unknown:
            raise ValueError(
                f"unknown probe(s) {', '.join(unknown)}; choose from {', '.join(PROBE_NAMES)}"
            )
    wanted = set(PROBE_NAMES if names is None else names)
    backends: list[BackendProbe] = [
        probe for probe in (MinigradProbe(), TorchProbe()) if probe.available()
    ]
    probes: list[Probe] = [probe for probe in backends if probe.name in wanted]
    if "gc" in wanted and backends:
        # Cyclic garbage is counted through every imported backend, even one whose own
        # metrics were not asked for.
        probes.append(GcProbe(backends))
    for probe in (ProcessProbe(), CudaProbe()):
        if probe.name in wanted and probe.available():
            probes.append(probe)
    return probes

"""What is measured: one probe per backend, chosen by what is already imported.

Metric names are ``"<probe>.<metric>"``, and only the probes know them: each declares
what its metrics are (``metrics.Metric``); see each module. ``make_probes`` never
imports torch or minigrad: a probe is active only when its library is in
``sys.modules`` already.

``PROBES`` is the roster: a new probe is its module plus one line there, and an autograd
library's probe comes with its bundle (``probes/autograd.BUNDLES``). A probe's name, its
metrics, why it may be absent (``absent``) and how it is built (``takes_backends``) are
declared on its class, and everything else is derived from them: the names the
``probes`` option accepts, the metric table, ``make_probes``, ``engine/coverage``'s
libraries and absent reasons.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from pytest_graphleak.metrics import Metric
from pytest_graphleak.probes.autograd import BUNDLES
from pytest_graphleak.probes.base import BackendProbe, Probe, ProbeBase
from pytest_graphleak.probes.cuda_probe import CudaProbe
from pytest_graphleak.probes.gc_probe import GcProbe
from pytest_graphleak.probes.minigrad_probe import MinigradProbe
from pytest_graphleak.probes.process_probe import ProcessProbe
from pytest_graphleak.probes.torch_probe import TorchProbe

#: The probes of the autograd libraries (one per bundle), whose names are the libraries'.
_BACKEND_PROBES: tuple[type[ProbeBase], ...] = tuple(bundle.probe for bundle in BUNDLES)

#: Every probe, in sampling order (the backends first: the gc probe counts through them).
PROBES: tuple[type[ProbeBase], ...] = (*_BACKEND_PROBES, GcProbe, ProcessProbe, CudaProbe)

#: Every probe name, in sampling order.
PROBE_NAMES: tuple[str, ...] = tuple(probe.name for probe in PROBES)

#: The autograd libraries a probe can measure (each probe's name is its library's).
BACKENDS: tuple[str, ...] = tuple(bundle.name for bundle in BUNDLES)

#: Why a probe named in ``probes=`` may be absent.
ABSENT: dict[str, str] = {probe.name: probe.absent for probe in PROBES}

#: Every metric a probe declares, by name (with several GPUs the CUDA probe adds
#: per-device byte metrics when it starts).
METRICS: dict[str, Metric] = {metric.name: metric for probe in PROBES for metric in probe.metrics}

__all__ = [
    "ABSENT",
    "BACKENDS",
    "METRICS",
    "PROBES",
    "PROBE_NAMES",
    "BackendProbe",
    "CudaProbe",
    "GcProbe",
    "MinigradProbe",
    "Probe",
    "ProcessProbe",
    "TorchProbe",
    "make_probes",
]


def make_probes(names: Collection[str] | None = None) -> list[Probe]:
    """The available probes among ``names`` (all when None), in PROBE_NAMES order."""
    if names is not None:
        unknown = sorted(set(names) - set(PROBE_NAMES))
        if unknown:
            raise ValueError(
                f"unknown probe(s) {', '.join(unknown)}; choose from {', '.join(PROBE_NAMES)}"
            )
    wanted = set(PROBE_NAMES if names is None else names)
    # Every imported autograd library has a backend probe, even one whose own metrics
    # were not asked for: cyclic garbage is counted through all of them.
    made: list[Any] = [kind() for kind in _BACKEND_PROBES]  # ProbeBase + BackendProbe
    backends: list[BackendProbe] = [probe for probe in made if probe.available()]
    probes: list[Probe] = []
    for kind in PROBES:
        if kind.name not in wanted:
            continue
        if kind in _BACKEND_PROBES:
            probes.extend(probe for probe in backends if probe.name == kind.name)
            continue
        probe: Any = kind(backends) if kind.takes_backends else kind()  # type: ignore[call-arg]
        if probe.available():
            probes.append(probe)
    return probes

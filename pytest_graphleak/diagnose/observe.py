"""Run the training step a few more times and find what it leaves behind.

``observe(step, backends)`` runs the step ``RUNS`` times with the cyclic GC off and
creation-site recording on for the first ``RECORDED_RUNS``. Tensors and graph nodes made
by a recorded run that are still alive after the last run are the leaked ones: what a
step merely replaces (``param.grad``, activations, optimizer state) dies in the next run.

Then one ``gc.collect()`` with ``DEBUG_SAVEALL`` sorts them: those the collector finds
unreachable were kept only by reference cycles; the rest are held by live references
(or from C++, where Python cannot see). Every gc setting and recording mode is restored
in ``finally``; the observation keeps leaked objects only until ``release()``.

Leaked objects are remembered without keeping them alive: by weak reference (torch and
minigrad tensors, minigrad nodes) or, for torch graph nodes, by autograd sequence number
(the counter that numbers nodes as they are made, per thread).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_graphleak.diagnose.backends import NODE, Backend, MinigradBackend, TorchBackend
from pytest_graphleak.diagnose.sites import Site, function_at, make_torch_recorder
from pytest_graphleak.heap.gcstate import Measuring

#: Steps run by the diagnosis, and how many of them record creation sites.
RUNS = 5
RECORDED_RUNS = 3
#: Objects of the collector's garbage kept to draw a cycle of plain Python objects.
_MAX_GARBAGE = 10_000


@dataclass
class Leaked:
    """One leaked object, held strongly until ``Observation.release()``."""

    obj: Any
    backend: Backend
    kind: str  # "tensor" | "node"
    run: int  # which diagnostic run made it (1-based)
    site: Site | None


@dataclass
class Observation:
    alive: list[Leaked] = field(default_factory=list)  # held by live references
    cyclic: list[Leaked] = field(default_factory=list)  # found only by the cyclic GC
    #: Range of torch autograd sequence numbers of the recorded runs: [lo, hi).
    torch_seq: tuple[int, int] | None = None
    node_sites: dict[int, Site] = field(default_factory=dict)
    pack_hooks: dict[int, Any] = field(default_factory=dict)
    #: user site -> library line that made a tensor for it ("via"), when there was one
    site_via: dict[Site, str] = field(default_factory=dict)
    #: The other objects the collector found with the cyclic ones (plain objects of a
    #: cycle that holds a leaked tensor), kept to draw that cycle; at most _MAX_GARBAGE.
    garbage: list[Any] = field(default_factory=list)
    #: The creation sites of graph nodes were recorded for the first nodes only.
    node_sites_truncated: bool = False
    runs_done: int = 0
    #: runs asked for, and how many of them recorded what they made
    runs: int = RUNS
    recorded_runs: int = RECORDED_RUNS
    error: str | None = None

    def release(self) -> None:
        self.alive.clear()
        self.cyclic.clear()
        self.garbage.clear()

    @property
    def leaked(self) -> list[Leaked]:
        return [*self.cyclic, *self.alive]

    def take_sites(self, recorder: Any) -> None:
        """The creation sites of the leaked objects: from the torch ``recorder`` (None
        without torch) and from minigrad's own record."""
        if recorder is not None:
            self.node_sites = dict(recorder.node_sites)
            self.pack_hooks = dict(recorder.pack_hooks)
            self.site_via = dict(recorder.via)
        for leaked in self.leaked:
            leaked.site = _site_of(leaked, recorder)


def observe(
    step: Callable[[], object],
    backends: list[Backend],
    *,
    runs: int = RUNS,
    recorded_runs: int = RECORDED_RUNS,
) -> Observation:
    """Run ``step`` ``runs`` times and return what the first ``recorded_runs`` leaked."""
    result = Observation(runs=runs, recorded_runs=recorded_runs)
    torch_backend = next((b for b in backends if isinstance(b, TorchBackend)), None)
    mg_backend = next((b for b in backends if isinstance(b, MinigradBackend)), None)
    recorder = make_torch_recorder(torch_backend.torch) if torch_backend else None
    # id -> (weak reference, backend, kind, run); a weakref tells a reused id apart.
    made: dict[int, tuple[weakref.ref[Any], Backend, str, int]] = {}
    measuring = Measuring()
    mg_previous: bool | None = None
    try:
        # No gc.collect() first: a full collection costs ~0.4 s per 300k objects, and
        # garbage older than the freeze is not ours to report (it is unfrozen unchanged).
        measuring.begin()
        measuring.freeze()
        if measuring.whole_heap:  # what is alive now was not made by a diagnostic run
            note_new(measuring.objects(), backends, made, 0)
        if torch_backend is not None:
            seq_lo = torch_backend.current_sequence_nr()
        for run in range(1, runs + 1):
            recording = run <= recorded_runs
            if mg_backend is not None:
                mg_previous = mg_backend.mg.record_creation_sites(recording)
            try:
                if recorder is not None and recording:
                    with recorder:
                        step()
                else:
                    step()
            except Exception as exc:  # the diagnosis reports it; the verdict stands
                result.error = f"{type(exc).__name__}: {exc} (diagnostic step {run})"
                break
            finally:
                if mg_backend is not None and mg_previous is not None:
                    mg_backend.mg.record_creation_sites(mg_previous)
                    mg_previous = None
            result.runs_done = run
            if recording:
                note_new(measuring.objects(), backends, made, run)
            if run == recorded_runs and torch_backend is not None:
                result.torch_seq = (seq_lo, torch_backend.current_sequence_nr())
        candidates = {oid for oid, (ref, _, _, run) in made.items() if run and ref() is not None}
        _sort_by_collector(result, candidates, made, measuring)
        for oid, (ref, backend, kind, run) in made.items():
            obj = ref()
            if obj is not None and oid in candidates:
                result.alive.append(Leaked(obj, backend, kind, run, None))
        result.take_sites(recorder)
        result.node_sites_truncated = recorder is not None and recorder.nodes_truncated
        return result
    finally:
        made.clear()
        if recorder is not None:
            recorder.forget()
        measuring.end()


def note_new(
    objects: list[Any],
    backends: list[Backend],
    made: dict[int, tuple[weakref.ref[Any], Backend, str, int]],
    run: int,
) -> None:
    for obj in objects:
        for backend in backends:
            kind = backend.kind(obj)
            if kind is None:
                continue
            known = made.get(id(obj))
            if known is not None and known[0]() is obj:
                break
            # torch graph nodes refuse weak references: found later by sequence number.
            with contextlib.suppress(TypeError):
                made[id(obj)] = (weakref.ref(obj), backend, kind, run)
            break


def _sort_by_collector(
    result: Observation,
    candidates: set[int],
    made: dict[int, tuple[weakref.ref[Any], Backend, str, int]],
    measuring: Measuring,
) -> None:
    """Move the candidates that only the cyclic GC would free into ``result.cyclic``."""
    garbage = measuring.collect_saving()
    try:
        for obj in garbage:
            info = made.get(id(obj))
            if info is None or id(obj) not in candidates:
                continue
            _, backend, kind, run = info
            if backend.kind(obj) == kind:  # the same object (its weakref is cleared now)
                result.cyclic.append(Leaked(obj, backend, kind, run, None))
                candidates.discard(id(obj))
        if result.cyclic:
            made_ids = set(made)
            result.garbage = [o for o in garbage if id(o) not in made_ids][:_MAX_GARBAGE]
    finally:
        garbage.clear()


def _site_of(leaked: Leaked, recorder: Any) -> Site | None:
    backend = leaked.backend
    if isinstance(backend, MinigradBackend):
        found = backend.creation_site(leaked.obj)
        if found is None:
            return None
        filename, lineno = found
        return filename, lineno, function_at(filename, lineno)
    if recorder is not None and isinstance(backend, TorchBackend):
        if leaked.kind == NODE:
            seq = backend.sequence_nr(leaked.obj)
            return recorder.node_sites.get(seq) if seq is not None else None
        return recorder.site_of_tensor(leaked.obj)
    return None

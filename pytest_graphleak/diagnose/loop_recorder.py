"""Record what steps make and leave alive: for the diagnosis's own re-run steps
(``observe``) and for the last few steps of a loop that cannot be re-run
(``track(steps=N)``, the framework callbacks), which runs its own steps and tells the
recorder where each ends.

The recorder records creation sites during a few steps (a bundle's ``site_recorder``,
torch's ``TorchFunctionMode``; a library's own recording, minigrad's), then a few more
steps run unrecorded: what a recorded step made and is still alive after them is what
the loop leaks.
``observation()`` returns it as an ``Observation`` for ``diagnose``.

It never runs during a sample (the loop's checker calls ``stop_step`` before sampling
and ``start_step`` after), and it remembers objects by weak reference (torch nodes by
autograd sequence number: the counter that numbers nodes as they are made, per thread),
so it keeps nothing alive. The tracker collects cyclic garbage after every step, so what
only the cyclic GC frees is gone by the judgement: the collection after a recorded step runs
through ``collect()``, which looks at what it frees first and keeps the first cycle found
among this loop's objects as plain text (``SeenCycle``), then frees it all.
"""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from pytest_graphleak.diagnose.backends import (
    NODE,
    TENSOR,
    Backend,
    active_backends,
)
from pytest_graphleak.diagnose.churn import split
from pytest_graphleak.diagnose.cycles import see_cycle
from pytest_graphleak.diagnose.edges import ObjectEdges
from pytest_graphleak.diagnose.observed import Churn, Leaked, Observation, SeenCycle
from pytest_graphleak.diagnose.sites import (
    function_at,
    recorded_by_mode,
    recorder_trouble,
    site_recorder,
)
from pytest_graphleak.heap.gcstate import Measuring
from pytest_graphleak.heap.graphwalk import grad_fn_of
from pytest_graphleak.probes.autograd import loaded
from pytest_graphleak.probes.autograd.bundle import Site, SiteRecorder
from pytest_graphleak.words import notes as said

#: id -> (weak reference, backend, kind, step); a weakref tells a reused id apart.
Made = dict[int, tuple[weakref.ref[Any], Backend, str, int]]


def take_sites(
    obs: Observation,
    recorder: SiteRecorder | None,
    tensor_sites: Mapping[int, Site] | None = None,
) -> None:
    """The creation sites of the leaked objects: from the site ``recorder`` (None
    without one) and from a library's own record. ``tensor_sites``: the recorder's
    sites read before a collection (``alive_tensor_sites``), which cleared the weak
    references of the cyclic tensors that it saved."""
    if recorder is not None:
        obs.node_sites = dict(recorder.node_sites)
        obs.pack_hooks = dict(recorder.pack_hooks)
        obs.site_via = dict(recorder.via)
        trouble = recorder_trouble(recorder)
        if trouble and trouble not in obs.trouble:
            obs.trouble.append(trouble)
    for leaked in obs.leaked:
        known = tensor_sites.get(id(leaked.obj)) if tensor_sites else None
        leaked.site = known or _site_of(leaked, recorder)
    node_sites_from_outputs(obs.leaked, obs.node_sites)


class LoopRecorder:
    """``start_step()`` before a recorded step, ``stop_step()`` after it (before the sample);
    ``observation()`` once a few more steps have run; ``close()`` always."""

    def __init__(self, backends: list[Backend] | None = None) -> None:
        self.backends = backends if backends is not None else active_backends()
        self.mode = site_recorder(self.backends)
        names = {backend.name for backend in self.backends}
        #: The libraries that record their own sites, each with its module and the
        #: setting to restore (None: not switched on by this recorder).
        self._own: list[tuple[Callable[[Any, bool], bool | None], Any, bool | None]] = [
            (bundle.record_sites, module, None)
            for bundle, module in loaded()
            if bundle.record_sites is not None and bundle.name in names
        ]
        self.made: Made = {}  # step 0: alive before the recording
        #: The node numbers of the libraries that number their nodes (torch's), when the
        #: recording began and when its last step ended (``numbered``).
        self._first_number: list[tuple[Backend, int]] = []
        self._last_number: dict[int, int] = {}
        self.steps_recorded = 0
        self.recording = False
        self.seen_cycle: SeenCycle | None = None
        self.churn: Churn | None = None
        #: What the recording could not do (``Observation.trouble``): a recorder runs
        #: inside the user's step or loop, and never raises into it.
        self.trouble: list[str] = []

    def _failed(self, doing: str, exc: Exception) -> None:
        note = said.recording_failed(doing, exc)
        if note not in self.trouble:
            self.trouble.append(note)

    def start_step(self) -> None:
        try:
            self._start_step()
        except Exception as exc:
            self.leave_modes()
            self._failed("start a recorded step", exc)

    def _start_step(self) -> None:
        if self.steps_recorded == 0:
            # What is alive now is older than the recording: step 0, dropped at the end.
            note_new(gc.get_objects(), self.backends, self.made, 0)
            self._first_number = [
                (backend, number)
                for backend in self.backends
                if (number := backend.node_number_now()) is not None
            ]
        self._own = [(switch, module, switch(module, True)) for switch, module, _ in self._own]
        if self.mode is not None:
            self.mode.__enter__()
        self.recording = True

    def stop_step(self) -> None:
        self.leave_modes()
        self.steps_recorded += 1
        try:
            note_new(gc.get_objects(), self.backends, self.made, self.steps_recorded)
            for backend, _ in self._first_number:
                number = backend.node_number_now()
                if number is not None:
                    self._last_number[id(backend)] = number
        except Exception as exc:
            self._failed("list what a recorded step made", exc)

    def collect(self) -> None:
        """The full collection after a recorded step: what it frees of the recorded steps'
        objects is looked at (the first cycle drawn, the rest counted), then freed."""
        # The collector clears the weak references of what it frees: read the tensors'
        # sites while they are alive (ids stay theirs while the saved garbage holds them).
        sites = self.mode.alive_tensor_sites() if self.mode is not None else {}
        garbage = Measuring().collect_saving()
        cyclic: list[Leaked] = []
        try:
            cyclic = self._recorded_among(garbage, sites)
            churn: Churn | None = None
            if cyclic:  # a library's own cycles of tensors without a graph: counted apart
                cyclic, churn = split(cyclic, garbage, ObjectEdges(self.backends))
            garbage.clear()
            sites.clear()
            if churn is not None and self.churn is not None:
                self.churn.add(churn)
            elif churn is not None:
                self.churn = churn
            if cyclic:
                self.seen_cycle = see_cycle(cyclic, self.backends, self.seen_cycle)
        except Exception as exc:  # it runs inside the user's loop: never raises into it
            self._failed("read the cycles a collection freed", exc)
        finally:
            garbage.clear()
            sites.clear()
            cyclic.clear()
        gc.collect()  # what it saved is garbage again: freed now, before the sample counts

    def _recorded_among(self, garbage: list[Any], tensor_sites: dict[int, Site]) -> list[Leaked]:
        """The recorded steps' objects in ``garbage`` (no loop variable outlives the call:
        it would keep one of them alive through the next collection)."""
        found: list[Leaked] = []
        for obj in garbage:
            info = self.made.get(id(obj))
            if info is None or not info[3]:
                continue
            _, backend, kind, step = info
            if backend.kind(obj) == kind:  # the same object (its weakref is cleared now)
                site = tensor_sites.get(id(obj)) or _site_of_made(obj, backend, kind, self.mode)
                found.append(Leaked(obj, backend, kind, step, site))
        if self.mode is not None:
            node_sites_from_outputs(found, self.mode.node_sites)
        return found

    def leave_modes(self) -> None:
        if self.recording and self.mode is not None:
            with contextlib.suppress(Exception):  # someone else's mode left on top of ours
                self.mode.__exit__(None, None, None)
        self.recording = False
        for switch, module, previous in self._own:
            if previous is not None:
                switch(module, previous)
        self._own = [(switch, module, None) for switch, module, _ in self._own]

    @property
    def numbered(self) -> list[tuple[Backend, int, int]]:
        """The node numbers the recorded steps' nodes got, [lo, hi), per library that
        numbers its nodes (``Backend.node_number_now``)."""
        last = self._last_number
        return [
            (backend, lo, last[id(backend)])
            for backend, lo in self._first_number
            if id(backend) in last
        ]

    def observation(self, *, later_steps: int) -> Observation:
        """What the recorded steps made that is still alive (call after a collection)."""
        obs = Observation(self.steps_recorded + later_steps, self.steps_recorded)
        obs.runs_done = obs.runs
        obs.numbered = self.numbered
        for ref, backend, kind, step in self.made.values():
            obj = ref()
            if obj is not None and step > 0:
                obs.alive.append(Leaked(obj, backend, kind, step, None))
        try:
            take_sites(obs, self.mode)
            if self.mode is not None:
                obs.made_in = self.mode.made_in()
        except Exception as exc:
            self._failed("read the sites it recorded", exc)
        obs.trouble.extend(note for note in self.trouble if note not in obs.trouble)
        obs.seen_cycle, self.seen_cycle = self.seen_cycle, None
        obs.churn, self.churn = self.churn, None
        self.made.clear()
        return obs

    def site_of(self, obj: Any) -> Site | None:
        """Where a recorded step made ``obj`` (None: not recorded)."""
        for backend in self.backends:
            kind = backend.kind(obj)
            if kind is not None:
                return _site_of_made(obj, backend, kind, self.mode)
        return None

    def close(self) -> None:
        """Leave every recording mode and forget everything (also on error)."""
        self.leave_modes()
        self.made.clear()
        if self.mode is not None:
            self.mode.forget()


def note_new(objects: list[Any], backends: list[Backend], made: Made, run: int) -> None:
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


def node_sites_from_outputs(leaked: list[Leaked], node_sites: dict[int, Site]) -> None:
    """A node no recorded op made gets its output's site: a custom autograd Function's
    node is attached to its output after ``apply`` returns, where no torch function mode
    sees it (the output itself was recorded inside its forward)."""
    for item in leaked:
        backend = item.backend
        if item.kind == TENSOR and item.site is not None and recorded_by_mode(backend):
            grad_fn = grad_fn_of(item.obj)
            seq = backend.sequence_nr(grad_fn) if grad_fn is not None else None
            if seq is not None:
                node_sites.setdefault(seq, item.site)
    for item in leaked:
        backend = item.backend
        if item.kind == NODE and item.site is None and recorded_by_mode(backend):
            seq = backend.sequence_nr(item.obj)
            item.site = node_sites.get(seq) if seq is not None else None


def _site_of(leaked: Leaked, recorder: SiteRecorder | None) -> Site | None:
    return _site_of_made(leaked.obj, leaked.backend, leaked.kind, recorder)


def _site_of_made(
    obj: Any, backend: Backend, kind: str, recorder: SiteRecorder | None
) -> Site | None:
    """Where ``obj`` was made: from the site recorder for a library that records through
    one, else from the library's own record (``Backend.creation_site``)."""
    if recorded_by_mode(backend):
        if recorder is None:
            return None
        return recorder.site_of_node(obj) if kind == NODE else recorder.site_of_tensor(obj)
    found = backend.creation_site(obj)
    if found is None:
        return None
    filename, lineno = found
    return filename, lineno, function_at(filename, lineno)

"""Record what the last few steps of a running loop make: ``observe()`` for a loop that
cannot be re-run (``track(steps=N)``, the framework callbacks).

``observe`` runs the step itself; here the loop runs its own steps and tells the recorder
where each ends. The recorder records creation sites during a few steps (torch's
``TorchSiteRecorder`` mode, minigrad's creation-site recording), then a few more
steps run unrecorded: what a recorded step made and is still alive after them is what
the loop leaks, exactly as in ``observe``. ``observation()`` returns it as an
``Observation`` for ``diagnose``.

It never runs during a sample (the loop's checker calls ``stop_step`` before sampling
and ``start_step`` after), and it remembers objects by weak reference (torch nodes by
autograd sequence number), so it keeps nothing alive. The tracker collects cyclic
garbage after every step, so what only the cyclic GC frees is gone by then: the
observation holds the objects kept by live references, and the verdict's
cyclic-garbage series tells the cycles.
"""

from __future__ import annotations

import contextlib
import gc
import weakref
from typing import Any

from pytest_graphleak.diagnose.backends import (
    Backend,
    MinigradBackend,
    TorchBackend,
    active_backends,
)

# The same package's helpers: a recorded loop step is noted exactly as a re-run step.
from pytest_graphleak.diagnose.observe import Leaked, Observation, note_new
from pytest_graphleak.diagnose.sites import make_torch_recorder


class LoopRecorder:
    """``start_step()`` before a recorded step, ``stop_step()`` after it (before the sample);
    ``observation()`` once a few more steps have run; ``close()`` always."""

    def __init__(self) -> None:
        self.backends: list[Backend] = active_backends()
        self._torch = next((b for b in self.backends if isinstance(b, TorchBackend)), None)
        self._mg = next((b for b in self.backends if isinstance(b, MinigradBackend)), None)
        self._mode: Any = make_torch_recorder(self._torch.torch) if self._torch else None
        self._mg_previous: bool | None = None
        # id -> (weak reference, backend, kind, step); step 0: alive before recording.
        self._made: dict[int, tuple[weakref.ref[Any], Backend, str, int]] = {}
        self._seq_lo: int | None = None
        self._seq_hi: int | None = None
        self.steps_recorded = 0
        self.recording = False

    def start_step(self) -> None:
        if self.steps_recorded == 0:
            # What is alive now is older than the recording: step 0, dropped at the end.
            note_new(gc.get_objects(), self.backends, self._made, 0)
            if self._torch is not None:
                self._seq_lo = self._torch.current_sequence_nr()
        if self._mg is not None:
            self._mg_previous = self._mg.mg.record_creation_sites(True)
        if self._mode is not None:
            self._mode.__enter__()
        self.recording = True

    def stop_step(self) -> None:
        self._leave_modes()
        self.steps_recorded += 1
        note_new(gc.get_objects(), self.backends, self._made, self.steps_recorded)
        if self._torch is not None:
            self._seq_hi = self._torch.current_sequence_nr()

    def _leave_modes(self) -> None:
        if self.recording and self._mode is not None:
            with contextlib.suppress(Exception):  # someone else's mode left on top of ours
                self._mode.__exit__(None, None, None)
        self.recording = False
        if self._mg is not None and self._mg_previous is not None:
            self._mg.mg.record_creation_sites(self._mg_previous)
            self._mg_previous = None

    def observation(self, *, later_steps: int) -> Observation:
        """What the recorded steps made that is still alive (call after a collection)."""
        obs = Observation(runs=self.steps_recorded + later_steps, recorded_runs=self.steps_recorded)
        obs.runs_done = obs.runs
        if self._seq_lo is not None and self._seq_hi is not None:
            obs.torch_seq = (self._seq_lo, self._seq_hi)
        for ref, backend, kind, step in self._made.values():
            obj = ref()
            if obj is not None and step > 0:
                obs.alive.append(Leaked(obj, backend, kind, step, None))
        obs.take_sites(self._mode)
        self._made.clear()
        return obs

    def close(self) -> None:
        """Leave every recording mode and forget everything (also on error)."""
        self._leave_modes()
        self._made.clear()
        if self._mode is not None:
            self._mode.forget()

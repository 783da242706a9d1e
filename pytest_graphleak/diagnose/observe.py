"""Run the training step a few more times and find what it leaves behind.

``observe(step, backends)`` runs the step ``RUNS`` times with the cyclic GC off and
creation-site recording on for the first ``RECORDED_RUNS``. Tensors and graph nodes made
by a recorded run that are still alive after the last run are the leaked ones: what a
step merely replaces (``param.grad``, activations, optimizer state) dies in the next run.

Then one ``gc.collect()`` with ``DEBUG_SAVEALL`` sorts them: those the collector finds
unreachable were kept only by reference cycles; the rest are held by live references
(or from C++, where Python cannot see). Every gc setting and recording mode is restored
in ``finally``; the observation keeps leaked objects only until ``release()``.

The recording itself (creation sites, what each step made, by weak reference) is the
``LoopRecorder``'s, the same a running loop's last steps are recorded with.
"""

from __future__ import annotations

from collections.abc import Callable

from pytest_graphleak.diagnose.backends import Backend
from pytest_graphleak.diagnose.churn import split
from pytest_graphleak.diagnose.edges import ObjectEdges
from pytest_graphleak.diagnose.loop_recorder import LoopRecorder, take_sites
from pytest_graphleak.diagnose.observed import Leaked, Observation
from pytest_graphleak.heap.gcstate import Measuring

#: Steps run by the diagnosis, and how many of them record creation sites.
RUNS = 5
RECORDED_RUNS = 3
#: Objects of the collector's garbage kept to draw a cycle of plain Python objects.
_MAX_GARBAGE = 10_000


def observe(
    step: Callable[[], object],
    backends: list[Backend],
    *,
    runs: int = RUNS,
    recorded_runs: int = RECORDED_RUNS,
) -> Observation:
    """Run ``step`` ``runs`` times and return what the first ``recorded_runs`` leaked."""
    result = Observation(runs, recorded_runs)
    recorder = LoopRecorder(backends)
    measuring = Measuring()
    try:
        # No gc.collect() first: a full collection costs ~0.4 s per 300k objects, and
        # garbage older than the freeze is not ours to report (it is unfrozen unchanged).
        measuring.begin()
        measuring.freeze()
        for run in range(1, runs + 1):
            recording = run <= recorded_runs
            if recording:
                recorder.start_step()
            try:
                step()
            except Exception as exc:  # the diagnosis reports it; the verdict stands
                result.error = f"{type(exc).__name__}: {exc} (diagnostic step {run})"
                break
            finally:
                recorder.leave_modes()
            result.runs_done = run
            if recording:
                recorder.stop_step()
        if result.runs_done >= recorded_runs:
            result.numbered = recorder.numbered
        made = recorder.made
        candidates = {oid for oid, (ref, _, _, run) in made.items() if run and ref() is not None}
        # The candidates that only the cyclic GC frees go to result.cyclic. The collector
        # clears their weak references: their sites are read while they are alive.
        mode = recorder.mode
        sites = mode.alive_tensor_sites() if mode is not None else {}
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
                result.garbage = [o for o in garbage if id(o) not in made][:_MAX_GARBAGE]
        finally:
            garbage.clear()
        for oid, (ref, backend, kind, run) in made.items():
            obj = ref()
            if obj is not None and oid in candidates:
                result.alive.append(Leaked(obj, backend, kind, run, None))
        take_sites(result, recorder.mode, sites)
        sites.clear()
        result.trouble.extend(recorder.trouble)
        if result.cyclic:  # a library's own cycles of tensors without a graph: counted apart
            result.cyclic, result.churn = split(
                result.cyclic, result.garbage, ObjectEdges(backends)
            )
            if not result.cyclic:
                result.garbage.clear()
        result.node_sites_truncated = recorder.mode is not None and recorder.mode.nodes_truncated
        return result
    finally:
        recorder.close()
        measuring.end()

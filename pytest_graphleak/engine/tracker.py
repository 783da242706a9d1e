"""Runs a step warmup + steps times and samples every probe after each call.

The gc state while measuring (collection off, debug flags cleared, freezes so a sample
sees only the objects created since) is ``heap.gcstate.Measuring``'s, which puts the
user's state back in ``end()`` (also on KeyboardInterrupt and when a step raises).
Before the first freeze the probes get their start set (below). When the user has frozen
objects the check samples the whole unfrozen heap instead (``Measuring.whole_heap``):
probes get an empty heap at ``start`` and at ``absorb`` (a baseline would count objects
twice), and the check starts with a ``gc.collect()``, so garbage older than it is not
counted as its own.

The start set: the tensors alive before the check, whose graphs can grow in place
(``total += loss``) without any new Python object. With ``start_scan="roots"`` (default):

* ``warmup >= 1`` and a probe that records what the warmup steps use
  (``Probe.warmup_recorder``: the torch probe's records every tensor passed to a torch
  operation, ``probes/warmup_tensors``): a short walk (``RECORDING_WALK_LIMIT`` objects)
  of what the step reaches, plus what the recorder found, which joins that probe's
  baseline at the end of warmup (``Probe.adopt``). When the walk gives up (a big dataset
  in a global), the recording alone is the start set and the result says what that
  cannot see. O(what the step touches), whatever the heap holds.
* otherwise: the walk up to ``reach.DEFAULT_LIMIT`` objects, then the whole heap
  (O(heap)) when it gives up.

``start_scan="heap"``, or no roots: every gc-tracked object. A probe that counts every
alive object of its library itself (``needs_heap`` False) needs none of this.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_graphleak import session
from pytest_graphleak.engine.coverage import Coverage
from pytest_graphleak.engine.reach import DEFAULT_LIMIT, reachable
from pytest_graphleak.heap.gcstate import Measuring
from pytest_graphleak.metrics import Metric
from pytest_graphleak.probes import GcProbe, Probe, make_probes
from pytest_graphleak.probes.base import WarmupRecorder

#: The start walk's limit when the warmup recording finds the tensors the step uses:
#: the walk only adds what the recording cannot see, and must stay cheap (~ms).
RECORDING_WALK_LIMIT = 10_000


@dataclass
class Series:
    """What a run measured: one sample per metric after each call."""

    series: dict[str, list[float]] = field(default_factory=dict)
    #: metric name -> its probe's declaration
    metrics: dict[str, Metric] = field(default_factory=dict)
    calls: int = 0
    #: Steps per sample: 1, or k when a long run is sampled every k-th step (window mode,
    #: see ``loop``); the verdict states its rates and its slowest leak per step.
    sample_every: int = 1
    #: Steps run before the measured ones, when the series' head (the ``warmup`` samples
    #: that are not judged) does not hold one sample for each: window mode samples only
    #: the last warmup step, and a later window's baseline is the last sample of the one
    #: before (0). None: one sample per warmup step.
    warmup_steps: int | None = None
    #: The step (counted from the loop's start) after which each sample was taken, when
    #: not simply 1, 2, 3, ... (window mode, a rolling check's later windows).
    sample_steps: list[int] | None = None
    duration_s: float = 0.0
    #: Stopped probes that declare a recheck (the CUDA allocator-cache rule), for a leak
    #: verdict on their metrics; after ``stop`` they hold plain numbers only.
    rechecking: list[Probe] = field(default_factory=list)
    #: How the probes' start set was found: "roots" (what the step reaches), "heap"
    #: (every object), "roots+warmup" (a short walk and the tensors the warmup steps
    #: used), "warmup" (those tensors alone: the walk gave up), or "none" (no active
    #: probe needs one); how many objects the walk or scan gave.
    start_scan: str = "none"
    start_objects: int = 0
    #: What the user should know about this run's measurement (true sentences only).
    notes: list[str] = field(default_factory=list)
    #: Set when the check ended: why it measured nothing the step uses ("" when it did),
    #: and remarks on what it left unmeasured beside what it measured (``coverage``).
    unmeasured: str = ""
    unmeasured_fix: str = ""  # what to change for it (``CheckResult.unmeasured_fix``)
    coverage_notes: list[str] = field(default_factory=list)
    #: What the probes could not measure exactly (``Probe.notes``): ``CheckResult.notes``.
    probe_notes: list[str] = field(default_factory=list)

    @property
    def units(self) -> dict[str, str]:
        """metric name -> "objects" | "bytes" (what ``CheckResult.units`` keeps)."""
        return {name: metric.unit for name, metric in self.metrics.items()}


def annotate_step_error(
    exc: BaseException, call: int, warmup: int, planned: int | None, *, measuring: bool = False
) -> None:
    """Add 'raised at step k' to the step's own exception (a note on 3.11+).

    Any exception counts, not only ``Exception``: ``pytest.fail()``, ``SystemExit`` and
    pytest-timeout's ``Failed`` end a step too. ``measuring``: it was raised while the
    probes sampled after that step (a timeout firing there), not by the step itself.
    """
    if getattr(exc, "graphleak_step", None) is not None:
        return  # already placed (an exception re-raised through a second check)
    phase = "warmup step" if call <= warmup else "measured step"
    of = f" of {planned}" if planned else ""
    where = f"while measuring after step {call}" if measuring else f"at step {call}"
    note = f"graphleak: raised {where}{of} ({phase}; warmup={warmup})"
    exc.graphleak_step = call  # type: ignore[attr-defined]
    exc.graphleak_where = where  # type: ignore[attr-defined]
    exc.graphleak_note = note  # type: ignore[attr-defined]
    if getattr(exc, "pytrace", True) is False and isinstance(getattr(exc, "msg", None), str):
        # pytest.fail(..., pytrace=False) shows only its message, never the notes.
        exc.msg += "\n" + note  # type: ignore[attr-defined]
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    else:  # Python 3.10 shows no notes, but keep them for tools that read them
        notes = list(getattr(exc, "__notes__", []))
        with contextlib.suppress(AttributeError):
            exc.__notes__ = [*notes, note]  # type: ignore[attr-defined]


class Sampler:
    """The low-level loop body shared by ``run`` and hand-written loops (``track``).

    ``begin()`` -> (``after_step()`` after each step) -> ``end()`` in ``finally``.
    Its arguments come from ``Settings``, checked once by the options table: none is
    checked again here.
    """

    def __init__(
        self,
        *,
        warmup: int,
        probes: Sequence[str] | None = None,
        start_scan: str = "roots",
        samples: int | None = None,
    ) -> None:
        """``samples``: how many samples the check takes, where it is known (a loop's is
        not): a probe whose reading has a cost of its own sizes it by them (``plan``)."""
        self._samples = samples
        self.warmup = warmup
        self.start_scan = start_scan
        self._probe_names = probes
        self._probes: list[Probe] = []
        self._gc: Measuring | None = None
        #: The probes recording what the warmup steps use, each with its recorder.
        self._recorders: list[tuple[Probe, WarmupRecorder]] = []
        self._started = 0.0
        self._coverage: Coverage | None = None
        self.result = Series()

    def begin(self, roots: list[object] | None = None) -> None:
        """Start measuring. ``roots``: what the step can reach (its function, fixture
        values, the caller's locals); with ``start_scan="roots"`` the probes' start set
        is what they reach, else (or with no roots, or past the walk's limit) the heap.
        The list is emptied, so the check itself holds none of them."""
        self._gc = measuring = Measuring()
        self._started = time.perf_counter()
        try:
            measuring.begin()
            self._probes = make_probes(self._probe_names)
            for probe in self._probes:
                plan = getattr(probe, "plan", None)  # ``ProbeBase.plan``; optional
                if plan is not None:
                    plan(self._samples)
            self.result.metrics.update((m.name, m) for probe in self._probes for m in probe.metrics)
            # Watches for libraries the step uses that no probe measures (no silent pass).
            self._coverage = Coverage(self._probe_names, self._probes)
            self._probes.extend(self._coverage.watchers)
            if roots:
                self._coverage.look_at_roots(roots)
            if measuring.whole_heap:
                # Every sample sees the whole unfrozen heap, so the baseline is empty (it
                # would count twice). Collect first: garbage older than the check is not
                # its cycles (in freeze mode it is frozen with the baseline instead).
                gc.collect()
                self._call_probes("start", [])
                return
            # No full collection here: it costs O(heap) on every check. Garbage alive now
            # is frozen with the baseline and stays constant, so it cannot look like growth.
            needs_heap = any(probe.needs_heap for probe in self._probes)
            self._call_probes("start", self._start_set(roots) if needs_heap else [])
            measuring.freeze()
            for _, recorder in self._recorders:
                recorder.start()
        except BaseException:
            self.end()
            raise
        finally:
            if roots is not None:
                roots.clear()

    def _start_set(self, roots: list[object] | None) -> list[object]:
        walk = self.start_scan == "roots" and roots is not None
        if walk and self.warmup >= 1:
            self._recorders = [
                (probe, recorder)
                for probe in self._probes
                if (recorder := probe.warmup_recorder()) is not None
            ]
        found = None
        if walk:
            limit = RECORDING_WALK_LIMIT if self._recorders else DEFAULT_LIMIT
            with contextlib.suppress(Exception):  # an object breaks the walk's rules: no walk
                found = reachable(roots or [], limit=limit)
        if self._recorders:
            self.result.start_scan = "warmup" if found is None else "roots+warmup"
            if found is None:
                found = []
                recorders = [recorder for _, recorder in self._recorders]
                self.result.notes.append(_recording_only_note(self.warmup, recorders))
        else:
            self.result.start_scan = "heap" if found is None else "roots"
            if found is None:
                found = Measuring.objects()
        self.result.start_objects = len(found)
        return found

    def _adopt_recorded(self) -> None:
        """End of warmup: what the warmup steps used joins its probe's baseline."""
        recorders, self._recorders = self._recorders, []
        for probe, recorder in recorders:
            probe.adopt(recorder.stop())  # empties the list

    def _paused(self) -> contextlib.ExitStack:
        """The recorders paused: what a sample's probes call is not the step's."""
        stack = contextlib.ExitStack()
        for _, recorder in self._recorders:
            stack.enter_context(recorder.paused())
        return stack

    def _call_probes(self, method: str, objects: list[object]) -> list[Any]:
        """``probe.<method>(objects)`` for every probe; the list is emptied afterwards,
        so the check holds none of the objects it measured."""
        try:
            return [getattr(probe, method)(objects) for probe in self._probes]
        finally:
            objects.clear()

    def after_step(
        self, collect: Callable[[], object] | None = None, *, step: int | None = None
    ) -> None:
        """Sample every probe; at the end of warmup, move the baseline forward.
        ``collect``: what runs the sample's full collection instead of ``gc.collect``
        (a loop's recorder looks at what it frees); it must free what gc.collect frees.
        ``step``: the loop's step number when not every step is sampled (what a library
        imported late is said to have been imported at)."""
        self.result.calls += 1
        if self.result.calls == self.warmup:
            # Before the last warmup sample, so it counts what the measured ones count.
            self._adopt_recorded()
        with self._paused():  # a warmup sample: the probes' own calls unrecorded
            for hook in list(session.current().before_sample):  # what pytest keeps of a step
                with contextlib.suppress(Exception):
                    hook()
            self._look_for_libraries(step)
            values = self._sample(collect or gc.collect)
        for metric, value in values.items():
            self.result.series.setdefault(metric, []).append(value)
        if self.result.calls == self.warmup:
            self.rebase()

    def skip(self, *, step: int | None = None) -> None:
        """A warmup step that no sample follows (a long run in window mode samples only
        the end of its warmup): counted, so that warmup still ends at its last step, which
        is always sampled; a library the step imported is still found (``Coverage``)."""
        if self.result.calls + 1 >= self.warmup:
            raise RuntimeError("the last warmup step and every measured step are sampled")
        self.result.calls += 1
        with self._paused():
            self._look_for_libraries(step)

    def _look_for_libraries(self, step: int | None) -> None:
        """Probes for the libraries the step just run imported (``Coverage``); ``step``:
        the loop's step number, when not every step is counted in ``result.calls``."""
        if self._coverage is not None:
            self._start_late(self._coverage.after_step(step or self.result.calls))

    def _start_late(self, names: list[str]) -> None:
        """Probes for libraries the first step imported. Nothing of such a library existed
        before that step, and all it made since is still unfrozen, so the probes start
        with an empty start set and measure from this first sample on."""
        assert self._coverage is not None
        if not names:  # the common case, every step: build no probe to throw away
            return
        for probe in make_probes(names):
            probe.start([])
            self._probes.insert(0, probe)
            self.result.metrics.update((metric.name, metric) for metric in probe.metrics)
            counter = next((p for p in self._probes if isinstance(p, GcProbe)), None)
            if counter is not None:
                counter.add_backend(probe)  # type: ignore[arg-type]
            elif self._coverage.wants("gc"):
                counter = GcProbe([probe])  # type: ignore[list-item]
                counter.start([])
                self._probes.append(counter)
                self.result.metrics.update((m.name, m) for m in counter.metrics)
                self._coverage.started(counter.name)

    def rebase(self) -> None:
        """Move the baseline forward to now: what is alive joins it (the end of warmup,
        or of a window in a long run), so later samples see only newer objects."""
        assert self._gc is not None, "rebase() before begin()"
        # With the whole heap sampled nothing joins the baseline (every sample sees
        # everything), but the end of warmup still reaches the probes (the CUDA probe's
        # clean baseline).
        self._call_probes("absorb", [] if self._gc.whole_heap else self._gc.objects())
        if not self._gc.whole_heap:
            self._gc.freeze()

    def hold_gc(self) -> None:
        """gc as a sample needs it (off) from now on: called before the step that ends in a
        sample, so the sample's collection sees what that step left to the cyclic gc."""
        if self._gc is not None and not self._gc.held:
            self._gc.hold()

    def release_gc(self) -> None:
        """The user's automatic collection back until ``hold_gc()`` (steps not sampled)."""
        if self._gc is not None:
            self._gc.release()

    def _sample(self, collect: Callable[[], object]) -> dict[str, float]:
        self.hold_gc()  # a caller that released gc and sampled without holding it first
        self._call_probes("before_collect", Measuring.objects())  # emptied before collecting
        collect()
        values: dict[str, float] = {}
        for found in self._call_probes("sample", Measuring.objects()):
            values.update(found)
        return values

    def probe_notes(self) -> list[str]:
        """What the probes could not measure exactly so far (``Probe.notes``)."""
        notes: list[str] = []
        for probe in self._probes:
            with contextlib.suppress(Exception):
                notes.extend(probe.notes())
        return notes

    def end(self) -> None:
        """Stop every probe and restore the gc state; safe to call more than once."""
        try:
            recorders, self._recorders = self._recorders, []
            for _, recorder in recorders:  # the run ended during warmup
                recorder.stop().clear()
            if self._coverage is not None:
                coverage, self._coverage = self._coverage, None
                with contextlib.suppress(Exception):  # never in the way of restoring gc
                    found = coverage.conclude(self.result.series)
                    self.result.unmeasured, self.result.unmeasured_fix = found.why, found.fix
                    self.result.coverage_notes = list(found.notes)
            self.result.probe_notes += self.probe_notes()  # end() may run twice
            for probe in self._probes:
                with contextlib.suppress(Exception):  # must not leave gc frozen or disabled
                    probe.stop()
                if any(metric.recheck for metric in probe.metrics):
                    self.result.rechecking.append(probe)
            self._probes = []
        finally:
            if self._gc is not None:
                self._gc.end()
                self._gc = None
                self.result.duration_s = time.perf_counter() - self._started


def _recording_only_note(warmup: int, recorders: list[WarmupRecorder]) -> str:
    records = " and ".join(recorder.records for recorder in recorders)
    misses = ", or only ".join(recorder.misses for recorder in recorders)
    return (
        f"start set: {records} in the {warmup} warmup "
        f"step(s), because the walk from the test's objects gave up past "
        f"{RECORDING_WALK_LIMIT:,} objects; a graph growing in place on an older tensor "
        f"that only the measured steps, or only {misses}, touch would not be seen: "
        "start_scan='heap' (--graphleak-start-scan=heap) scans every object"
    )


def refuse_unrun(outcome: object) -> None:
    """TypeError when a step returned a coroutine or a generator: its body never ran
    (a ``lambda: train_async()``), so measuring it would find an empty step clean."""
    if inspect.isawaitable(outcome) or inspect.isgenerator(outcome) or inspect.isasyncgen(outcome):
        if inspect.iscoroutine(outcome) or inspect.isgenerator(outcome):
            outcome.close()  # no "coroutine was never awaited" warning on top of the error
        raise TypeError(
            f"the step returned a {type(outcome).__name__}, so its body did not run: "
            "check a plain function that runs it to the end (asyncio.run(...), or "
            "iterate the generator)"
        )


def run(
    step: Callable[[], object],
    *,
    steps: int,
    warmup: int,
    probes: Sequence[str] | None = None,
    start_scan: str = "roots",
    roots: Iterable[object] = (),
) -> Series:
    """Call ``step`` ``warmup + steps`` times, sampling after each call.

    The start set is what ``step`` and ``roots`` reach (see ``Sampler.begin``).
    A step that raises (anything: ``pytest.fail()``, ``SystemExit``, a timeout) stops the
    run; its exception propagates unchanged, with a note saying at which call it was
    raised.
    """
    __tracebackhide__ = True  # pytest shows the step's frames, not the path to them
    planned = warmup + steps
    sampler = Sampler(warmup=warmup, probes=probes, start_scan=start_scan, samples=planned)
    sampler.begin([step, *roots])  # a temporary list: begin() empties it
    try:
        for call in range(1, planned + 1):
            try:
                outcome = step()
                if outcome is not None:
                    refuse_unrun(outcome)
            except BaseException as exc:
                annotate_step_error(exc, call, warmup, planned)
                raise
            try:
                sampler.after_step()
            except Exception:
                raise  # the plugin's own failure, not the step's: no step note
            except BaseException as exc:  # a timeout, Ctrl-C or SystemExit while sampling
                annotate_step_error(exc, call, warmup, planned, measuring=True)
                raise
    finally:
        sampler.end()
    return sampler.result

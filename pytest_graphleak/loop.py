"""Check a running loop from inside: one sample per step, judged at a planned step.

``LoopCheck`` is what ``track()`` and the framework callbacks share. The loop runs its
own steps and calls ``after_step()`` after each one. With ``steps=N`` the check is
judged *at* step warmup + N, inside the loop, and a leak is diagnosed right there, before
the framework's teardown (an ``on_train_epoch_end`` that clears a list) can free the
evidence. Creation sites are recorded during a few steps just before that
(``LoopRecorder``): a loop has no step to re-run.

Without ``steps`` (``track()`` of unknown length, a callback measuring the whole run) the
check rolls: judged at warmup + ``settings.steps`` (what a marker test measures), then
window after window of ``settings.steps`` to the end of the run, each judged inside the
loop. A tail shorter than a window gets no verdict of its own (with a known length the
check ends at its last full window; a run shorter than its first window is judged at
its end). Growth is judged across the loop's own reset points: an
epoch's end the framework announces (``epoch_ended``) or a sample where what the loop
held dropped. A window whose growth a reset could take back (tensors without a graph,
no graph node, no cyclic garbage) and that lies within one period of the loop
(``verdict.within_one_period``) is kept open and judged a window later (``_extend``), or
when the loop ends, its last sample taken again after the loop's own end (epoch-end
hooks, ``_sample_the_end``), so a list of this epoch's detached
losses, emptied each epoch, is never judged inside one epoch; the last period of a loop
already judged is not judged on its own. A loop that ends with fewer measured steps
than a loop is judged from (``verdict.loop_fewest_steps``: 3, or fewer when ``window=``
asks for fewer) gets no leak verdict but an unmeasured result (``_too_short``):
it fails a pytest test as an unmeasured check does, and warns in a real run, where a
callback never stops training for it. A run announced that short is measured as one of
unknown length, so that its end says how many steps really ran.

Window mode (``window=N``) judges each consecutive window of N steps of a long run:
a clean window moves the baseline forward (``Sampler.rebase``), a leaky one is
reported (raise or warn) and a fresh window starts. After the warmup a window is sampled
every ``stride`` steps (``engine.stride``: chosen from the CPU time the steps and the
samples took, so that the check stays a small share of a fast step; ``sample_every``
fixes it), the samples aligned on the judged step; the verdict states its rates and its
slowest catchable leak per step.

gc state: from ``start()`` to the last judgement, objects alive at the baseline are
frozen and every sample runs the tracker's ``gc.collect()`` of the objects made since.
Automatic collection is off during every step that ends in a sample (so that collection
counts what the step left to the cyclic gc) and during the few steps recorded for a
diagnosis; in window mode, between samples, it is as the user set it. The state is
restored by the final judgement, ``finish()`` or ``close()``. A check left open by a loop
that raised through a framework without an exception hook is closed by
``close_open_checks()`` (the pytest plugin calls it after every test) or when the next
check starts.
"""

from __future__ import annotations

import atexit
import dataclasses
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from pytest_graphleak import exceptions, pipeline, session
from pytest_graphleak.engine import tracker
from pytest_graphleak.engine.stride import MIN_SAMPLES, CpuLedger
from pytest_graphleak.heap import gcstate
from pytest_graphleak.options import OptionError, Settings
from pytest_graphleak.report.text import render_text
from pytest_graphleak.result import CheckResult, Verdict
from pytest_graphleak.values import optional_int_at_least
from pytest_graphleak.verdict import (
    FEWEST_STEPS,
    dropped,
    fewest_steps,
    loop_fewest_steps,
    too_few_steps,
    too_short_loop,
    undone_by_a_reset,
    within_one_period,
)

#: "return": only give the result back (``track()`` outside pytest without raise_on_leak).
ON_LEAK = ("raise", "warn", "return")

#: Steps that record creation sites, then steps that must pass before what they made
#: counts as leaked (the numbers of the diagnosis's own re-run of a step).
RECORDED_STEPS = 3
LATER_STEPS = 2

#: Why a loop's leak has no ``stored at:`` line (the diagnosis's notes).
LOOP_ENDED = (
    "the loop ended at the judged step: no later step ran in which to see the line that "
    "stores the leak (stored at)"
)
LOOP_RAISED = "the loop raised during the step after the judged one: no stored-at line"
NOT_STORED_NEXT_STEP = (
    "no user line changed the holder during the loop's next step, so no stored-at line "
    "(stored less often than once a step, or by library code that no user line calls)"
)

#: Why a loop's memory-growth names no holder (``loop_memory``'s note), by the note above.
GROWTH_UNSEEN = {
    LOOP_ENDED: "the loop ended at the judged step",
    LOOP_RAISED: "the loop raised during the step after the judged one",
}


def close_open_checks(*, keep_scoped: bool = False, of: session.Session | None = None) -> int:
    """End every open check without a verdict and restore the gc state; how many.
    ``keep_scoped``: leave the checks of ``with`` blocks still running (``scoped``): their
    block ends them, and a ``track()`` nested in another's block must not end the outer.
    ``of``: the checks of that session (default: ``session.current()``'s)."""
    closed = 0
    for check in (of if of is not None else session.current()).open_checks[::-1]:
        if not (keep_scoped and check.scoped):
            check.close()
            closed += 1
    return closed


atexit.register(close_open_checks)


def _under_pytest() -> bool:
    """A pytest test is running in this process: its session's (the plugin's), or any
    test phase (pytest sets PYTEST_CURRENT_TEST; a script that a test starts inherits the
    variable but has not imported pytest's runner)."""
    if session.current().test is not None:
        return True
    return bool(os.environ.get("PYTEST_CURRENT_TEST")) and "_pytest.runner" in sys.modules


#: Packages whose frames a loop's warning skips: this one, and the frameworks that call
#: a callback, so that the warning points at the user's ``fit()`` / ``run()`` line.
_NOT_USER = frozenset({
    "pytest_graphleak", "ignite", "lightning", "pytorch_lightning", "lightning_fabric",
    "transformers", "accelerate", "torch",
})  # fmt: skip


def _user_stacklevel() -> int:
    """``warnings.warn``'s stacklevel, for the function that calls this one, that points
    at the first frame of user code (else the outermost frame)."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if module.partition(".")[0] not in _NOT_USER:
            break
        frame = frame.f_back
        level += 1
    return level


def check_sample_every(value: object, window: int | None, *, where: str) -> int | None:
    """``sample_every``: None (chosen from the steps' cost), or 1 to ``window // 2``."""
    every = check_count("sample_every", value, minimum=1)
    if every is None:
        return None
    if window is None:
        raise OptionError(f"{where}: sample_every= applies to window mode only (give window=)")
    if every > window // 2:
        raise OptionError(
            f"{where}: sample_every={every} leaves fewer than 2 samples in a window of "
            f"{window} steps; at most {window // 2} (window // {MIN_SAMPLES} or less keeps "
            "the verdict's slowest catchable leak within window / 2 steps)"
        )
    return every


def check_count(key: str, value: object, *, minimum: int) -> int | None:
    return optional_int_at_least(key, value, minimum)


class LoopCheck:
    """``start()`` -> ``after_step()`` per step -> ``finish()`` (or ``close()`` on error).

    ``steps``: measured steps after warmup, judged once (None: rolling, judged every
    ``settings.steps`` steps to the end of the loop, and measuring stops at the first
    leak); ``window``: judge every ``window`` steps and go on after a leak (exclusive with
    ``steps``); ``sample_every``: in window mode, sample every that many steps after
    warmup (None: chosen from the steps' CPU time, see ``engine.stride``). ``on_leak``:
    "raise" (GraphLeakError from the step that was judged), "warn" (GraphLeakWarning) or
    "return".
    ``on_result`` gets every result (the pytest plugin records them).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        name: str,
        steps: int | None = None,
        window: int | None = None,
        sample_every: int | None = None,
        on_leak: str = "raise",
        on_result: Callable[[CheckResult], None] | None = None,
    ) -> None:
        self.steps = check_count("steps", steps, minimum=1)
        self.window = check_count("window", window, minimum=2)
        if self.steps is not None and self.window is not None:
            raise OptionError(f"{name}: give steps= or window=, not both")
        self.sample_every = check_sample_every(sample_every, self.window, where=name)
        if on_leak not in ON_LEAK:
            raise OptionError(f"{name}: on_leak must be one of {ON_LEAK}, got {on_leak!r}")
        self.settings = settings
        #: steps=None and no window: judged every settings.steps steps, to the end.
        self.rolling = self.steps is None and self.window is None
        #: Steps per judged window: window=, else a marker test's steps (never fewer than
        #: a verdict needs: --graphleak-steps=2 gives no two-step windows).
        self._span = self.window if self.window is not None else max(settings.steps, FEWEST_STEPS)
        self.name = name
        self.on_leak = on_leak
        self._on_result = on_result
        self.results: list[CheckResult] = []
        self._sampler: tracker.Sampler | None = None
        self._recorder: Any = None
        self._roots: Callable[[], Mapping[str, object]] = dict
        self._length: int | None = None
        self._done = False
        #: The session's list of open checks this check is on while its sampler runs.
        self._listed_in: list[LoopCheck] = []
        self._calls = 0  # steps seen since start()
        self._window_start = 0  # calls before the current window
        self._window_warmup = settings.warmup  # samples of the window that are not judged
        self._judge_at: int | None = None
        self._window_began = 0.0
        self._leaks = 0
        self._last_recorded = 0
        #: a rolling window's leak verdict, judged again once creation sites are recorded
        self._deferred: Any = None
        #: Steps after which the loop reset (rolling checks): an epoch's end the framework
        #: announced (``epoch_ended``), or a sample where what the loop held dropped.
        self._resets: list[int] = []
        #: The open rolling window grew within one period of the loop and is judged later,
        #: across its next reset point (``_extend``); the step first planned for it.
        self._extended_from: int | None = None
        #: a judged leak and the holder's watch, reported after the next step
        self._pending: tuple[CheckResult, Any] | None = None
        #: Ended by its own ``with`` block (``track()``), never as a leftover of another.
        self.scoped = False
        #: Steps per sample in the current window (1 during warmup and outside window mode).
        self.stride = 1
        self._ledger: CpuLedger | None = None  # window mode: what steps and samples cost
        #: Steps up to this one need nothing but counting (between two samples): the fast
        #: path of ``after_step``, whose cost a fast step pays every time.
        self._quiet_until = 0
        #: The step after which each sample of the open window's series was taken
        #: (``CheckResult.sample_steps``).
        self._sample_steps: list[int] = []
        #: How a too-short loop's length reads: "it ran 2 steps" (``track()``:
        #: "track() saw 2 t.step() calls").
        self.saw = "it ran"
        self.unit = "step"

    # -- lifecycle --------------------------------------------------------------------
    @property
    def result(self) -> CheckResult | None:
        """The latest leaky result, else the latest (None before the first judgement):
        a clean window after a leaky one does not hide the leak."""
        leaky = [result for result in self.results if result.leaked]
        return leaky[-1] if leaky else self.results[-1] if self.results else None

    @property
    def calls(self) -> int:
        return self._calls

    @property
    def active(self) -> bool:
        return self._sampler is not None

    def start(
        self,
        *,
        length: float | None,
        roots: Callable[[], Mapping[str, object]] | None = None,
        start_objects: list[object] | None = None,
    ) -> None:
        """Begin measuring a loop of ``length`` more steps (None: unknown). ``roots``
        gives what the loop's steps reach, labelled for the diagnosis's chains;
        ``start_objects`` (default: the roots' values) is where the start walk begins."""
        if self._sampler is not None or self._done:
            raise RuntimeError(f"{self.name}: this check was started already")
        close_open_checks(keep_scoped=True)  # a loop that raised through a framework left one
        self._length = int(length) if length is not None and 0 < length < math.inf else None
        self._roots = roots or dict
        self._judge_at = self._plan(first=True)
        if self._judge_at is not None and self._judge_at - self.settings.warmup < self.fewest:
            # Too short to judge, by its announced length: measured as a loop of unknown
            # length, so that its end (``finish``) says how many steps really ran.
            self._length = None
            self._judge_at = self._plan(first=True)
        self._begin_sampler(warmup=self.settings.warmup, start_objects=start_objects)
        if self.window is not None:
            self._ledger = CpuLedger()
            if self.settings.warmup == 0:
                self._choose_stride()
            else:  # only the end of warmup is sampled: the baseline (see _samples)
                self._window_warmup = 1
        self._maybe_record_next()

    def _begin_sampler(self, *, warmup: int, start_objects: list[object] | None = None) -> None:
        sampler = tracker.Sampler(
            warmup=warmup, probes=self.settings.probes, start_scan=self.settings.start_scan
        )
        sampler.begin(start_objects if start_objects is not None else list(self._roots().values()))
        self._sampler = sampler
        self._listed_in = session.current().open_checks  # ended from any context
        self._listed_in.append(self)
        self._sample_steps = []
        self._open_window(warmup)

    def _open_window(self, warmup: int) -> None:
        """A window begins after step ``self._calls``; ``warmup``: the samples at the
        head of its series that are not judged (its baseline)."""
        self._window_start = self._calls
        self._window_warmup = warmup
        self._window_began = time.perf_counter()

    def _plan(self, *, first: bool) -> int | None:
        """The step (counted from start) at which the current window is judged; None: a
        rolling check's run has less than a window left, a tail with no verdict of its
        own (a run shorter than its first window is judged at its end)."""
        start = self._window_start
        length = self._length if self._length is not None and self._length > start else None
        warm = self.settings.warmup if first else 0
        if self.steps is not None:
            planned = start + warm + self.steps
            return planned if length is None else min(planned, length)
        planned = start + warm + self._span
        if self.rolling and length is not None and planned > length:
            # A later window that the run's end cuts short lies inside the loop's last
            # epoch when epochs are longer (a per-epoch list only grows there).
            return length if first else None
        if not self.rolling and length is not None and length - planned < fewest_steps(0):
            planned = length  # fold a short tail into this window
        return planned

    def after_step(self) -> CheckResult | None:
        """Sample after one step; at the planned step, judge (and raise or warn)."""
        __tracebackhide__ = True
        if self._calls < self._quiet_until and self._pending is None:
            self._calls += 1
            return None
        if self._pending is not None:
            self._settle(note=None, report=True)
        if self._done or self._sampler is None:
            return None  # past the judged step: not measured
        self._calls += 1
        collect = None
        if self._recorder is not None and self._recorder.recording:
            self._recorder.stop_step()
            self._last_recorded = self._calls
            collect = self._recorder.collect  # sees the cycles the sample's collection frees
        elif self.stride > 1:  # window mode between warmup and the judged step: see there
            collect = gcstate.collect_young
        ledger = self._ledger
        if not self._samples(self._calls):
            if collect is not None:
                collect()  # a recorded step that no sample follows: its cycles looked at here
            if self._calls < self.settings.warmup and self._window_start == 0:
                self._sampler.skip(step=self._calls)  # a warmup step in window mode
                if ledger is not None:
                    ledger.steps_done(self._calls)  # each warmup step's CPU: the stride's
            self._maybe_record_next()
            self._gc_for_next_step()
            return None
        self._sample_steps.append(self._calls)
        if ledger is None:
            self._sampler.after_step(collect, step=self._calls)
        else:
            began = ledger.steps_done(self._calls)
            self._sampler.after_step(collect, step=self._calls)
            ledger.sampled(began)
        if self.rolling and dropped(self._sampler.result.series, self._sampler.result.metrics):
            self._reset_after(self._calls - 1)
        if self._calls == self._judge_at:
            return self._judge(at_end=False)
        if ledger is not None and self._window_start == 0 and self._calls == self.settings.warmup:
            self._choose_stride()  # the end of warmup: sampled every step so far
        self._maybe_record_next()
        self._gc_for_next_step()
        return None

    def _samples(self, call: int) -> bool:
        """Whether step ``call`` ends in a sample: every step outside window mode; in
        window mode the last warmup step (the baseline: the verdict compares with it
        alone, and a sample costs ~0.5-1 ms), then every ``stride``-th step, counted back
        from the judged one."""
        if self.window is not None and self._window_start == 0 and call < self.settings.warmup:
            return False
        if self.stride == 1 or self._judge_at is None:
            return True
        return (self._judge_at - call) % self.stride == 0

    def _choose_stride(self) -> None:
        """The stride for the window ahead: ``sample_every`` or what the steps cost, for
        the steps it has left (a run's last window may be shorter than ``window``): a
        window keeps ``MIN_SAMPLES`` samples (2 with ``sample_every``) however short."""
        assert self.window is not None and self._ledger is not None
        span = self.window if self._judge_at is None else self._judge_at - self._calls
        fixed = self.sample_every
        if fixed is not None:
            self.stride = max(1, min(fixed, span // 2))
        else:
            self.stride = self._ledger.stride(max(1, span))
        self._ledger.reset()

    def _gc_for_next_step(self) -> None:
        """The user's automatic gc for a step that no sample follows; off for one that
        ends in a sample or is recorded for the diagnosis."""
        sampler = self._sampler
        if sampler is None or self.stride == 1 or self._judge_at is None:
            return
        if self._recorder is not None or self._samples(self._calls + 1):
            sampler.hold_gc()
            return
        sampler.release_gc()
        # Quiet: the steps before the one that ends in the next sample (its predecessor
        # holds gc for it), and before any step that could be recorded for a diagnosis.
        after = (self._judge_at - self._calls) % self.stride or self.stride
        recorded = self._judge_at - LATER_STEPS - RECORDED_STEPS
        self._quiet_until = min(self._calls + after - 2, recorded - 1)

    def finish(self) -> CheckResult | None:
        """The loop ended: judge the open window if it has two measured steps or more."""
        __tracebackhide__ = True
        if self._pending is not None:
            self._settle(note=LOOP_ENDED, report=True)
        if self._sampler is None:
            return None
        if self.rolling and self._extended_from is not None:
            self._sample_the_end()
        measured = self._calls - self._window_start  # a later window's baseline: the last
        if self._window_start == 0:  # step of the one before, so all of its steps count
            measured -= self.settings.warmup
        if self.window is not None:  # steps not sampled: count the measured samples
            measured = min(measured, self._window_samples() - self._window_warmup)
        if not self.results and measured < self.fewest:
            self.close()
            self._too_short()
            return None
        short = self.rolling and self.results and measured < self._span
        if measured < fewest_steps(self._window_warmup) or short:
            # A tail after judged windows, shorter than a window: no verdict of its own
            # (inside one epoch, a per-epoch list only grows there).
            self.close()
            return None
        return self._judge(at_end=True)

    @property
    def fewest(self) -> int:
        """The fewest measured steps this loop is judged from (``loop_fewest_steps``)."""
        return loop_fewest_steps(self.settings.warmup, self.window)

    def _too_short(self) -> None:
        """The loop ended before it had the measured steps of a verdict: an unmeasured
        result, never a leak. Under pytest it fails the test as any unmeasured check does
        (``on_leak="raise"``); in a real run, or with "warn" / "return", it warns and
        lets the loop's caller go on (a callback never stops training for it)."""
        __tracebackhide__ = True
        why, fix = too_short_loop(self._calls, self.settings.warmup, self.fewest, saw=self.saw,
                                  unit=self.unit)  # fmt: skip
        self._unmeasured(why, fix)

    def _unmeasured(self, why: str, fix: str) -> None:
        """Publish a result with no verdict (``why``, ``fix``): fails a pytest test when
        ``on_leak="raise"``, else warns (see ``_too_short``)."""
        __tracebackhide__ = True
        warmup = self.settings.warmup
        result = CheckResult(
            name=self.name, steps=max(0, self._calls - warmup), warmup=warmup, series={},
            units={}, verdict=Verdict(leaked=False, reason=f"no verdict: {why}"), unmeasured=why,
            unmeasured_fix=fix,
        )  # fmt: skip
        self._publish(result, report=False)
        text = render_text(result)
        if self.on_leak == "raise" and _under_pytest():
            raise pipeline.failure(text, leaked=False, result=result)
        warnings.warn(exceptions.GraphLeakWarning(text), stacklevel=_user_stacklevel())

    def close(self) -> None:
        """End measuring (the loop raised: no verdict on the open window, and a judged
        leak is recorded without raising); restores the gc state."""
        if self._pending is not None:
            self._settle(note=LOOP_RAISED, report=False)
        if self._recorder is not None:
            self._recorder.close()
            self._recorder = None
        self._done = True
        self._quiet_until = 0
        self._roots = dict  # the caller's frame, a trainer: nothing outlives the check
        self._end_sampler()

    def _window_samples(self) -> int:
        """Samples in the open window's series (with the baseline kept from the last)."""
        assert self._sampler is not None
        return len(next(iter(self._sampler.result.series.values()), []))

    # -- creation sites ---------------------------------------------------------------
    def _maybe_record_next(self) -> None:
        """Record the next step's creation sites if it is one of the few recorded ones:
        ``RECORDED_STEPS`` steps, then ``LATER_STEPS`` more before the judged step."""
        if self._judge_at is None or not self.settings.diagnose:
            return
        upcoming = self._calls + 1
        first = self._judge_at - LATER_STEPS - RECORDED_STEPS + 1
        if not max(first, self._window_start + 1) <= upcoming <= self._judge_at - LATER_STEPS:
            return
        if self.window is not None:
            if not self._leaks and self._recorder is None and not self._growing():
                # Before a first leak a window records only once a measured metric rose
                # above its baseline: recording costs a few ms of the check's own time
                # and slows the recorded steps, so a clean run records nothing, while the
                # first leaky window still gets its created-at lines. The verdict is the
                # same; a leak not seen rising by then is reported without them.
                return
        elif self.rolling and not (
            self._leaks or self._window_start == 0 or self._judge_at == self._length
            or self._deferred is not None or self._extended_from is not None
        ):  # fmt: skip
            return  # later rolling windows: after a first leak, in the last, or deferred
        if self._recorder is None:
            from pytest_graphleak.diagnose import for_loop

            self._recorder = for_loop.LoopRecorder()
        self._recorder.start_step()

    def _growing(self) -> bool:
        """Some exact metric (not a noisy one: resident memory) of the open window has a
        sample above the window's baseline sample."""
        assert self._sampler is not None
        result = self._sampler.result
        base = self._window_warmup - 1
        for name, values in result.series.items():
            metric = result.metrics.get(name)
            if metric is None or metric.noisy or len(values) <= base + 1:
                continue
            if base < 0 or max(values[base + 1 :]) > values[base]:
                return True
        return False

    # -- judgement --------------------------------------------------------------------
    def _judge(self, *, at_end: bool) -> CheckResult | None:
        __tracebackhide__ = True
        if self.steps is not None and self.steps < FEWEST_STEPS:
            # steps=1 or 2: too few to tell a one-off from a leak, as for a marker test.
            self.close()
            source = self.settings.source("steps")
            self._unmeasured(*too_few_steps(self.steps, source=source))
            return None
        ledger = self._ledger
        began = ledger.steps_done(self._calls) if ledger is not None else 0.0
        try:
            return self._judge_window(at_end=at_end)
        finally:
            if ledger is not None:
                ledger.window_work(began)

    def _judge_window(self, *, at_end: bool) -> CheckResult | None:
        __tracebackhide__ = True
        sampler = self._sampler
        assert sampler is not None
        whole = sampler.result
        window = tracker.Series(
            series={metric: values[:] for metric, values in whole.series.items()},
            metrics=dict(whole.metrics),
            calls=self._calls - self._window_start,
            sample_every=self.stride,
            warmup_steps=self.settings.warmup if self._window_start == 0 else 0,
            sample_steps=self._numbered_samples(),
            duration_s=time.perf_counter() - self._window_began,
            notes=list(whole.notes),  # what the start walk and the probes could not see
            probe_notes=sampler.probe_notes(),
        )
        warmup = self._window_warmup
        settings = dataclasses.replace(self.settings, warmup=warmup)
        verdict = pipeline.judged(window, settings)
        if self._within_one_period(verdict, window):
            if not at_end and self._calls != self._length:
                self._extend()  # judged again across the loop's next reset point
                return None
            if self.results:
                # The loop's last period (its last epoch): judged with the windows before
                # it, never on its own growth, which its next reset would have taken back.
                self.close()
                return None
            if not at_end:
                # The last step of a run of known length, in its first period: judged when
                # the run ends, after its epoch-end hooks (``finish``).
                self._extend()
                self._judge_at = None
                return None
        if self._defer(verdict, at_end=at_end):
            return None
        if self._deferred is not None:  # the leak seen before the recorded steps counts
            verdict = verdict if verdict.leaked else self._deferred
            self._deferred = None
        final = (
            at_end
            or not self._is_windowed
            or self._calls == self._length
            or (verdict.leaked and (self.on_leak == "raise" or self.rolling))
        )
        observation = None
        recorder, self._recorder = self._recorder, None
        if verdict.leaked and recorder is not None and recorder.steps_recorded and not at_end:
            observation = recorder.observation(later_steps=self._calls - self._last_recorded)
            observation.wants_follow = True  # the holder is watched during the next step
        elif verdict.leaked and self.settings.diagnose:
            from pytest_graphleak.diagnose import for_loop

            # Nothing recorded: the heap as it is, and (memory-growth) the next step.
            observation = for_loop.heap_observation(follow=not at_end)
        if recorder is not None:
            recorder.close()
        if final or verdict.leaked:
            self._end_sampler()
            for known in ("rechecking", "unmeasured", "unmeasured_fix", "coverage_notes"):
                setattr(window, known, getattr(whole, known))  # once the sampler has ended
        try:
            result = pipeline.conclude(
                window, settings=settings, name=self._result_name(final=final),
                diagnose_step=None, roots=self._roots, exclude=(id(self),),
                observation=observation, verdict=verdict,
            )  # fmt: skip
        finally:
            follow = observation.follow if observation is not None else None
            growth = observation.growth if observation is not None else None
            if observation is not None:
                observation.follow = observation.growth = None
                observation.release()
        watch = self._live_watch(follow) if follow is not None else None
        if growth is not None:  # memory-growth: the arrays the roots reach, weighed again
            growth.roots = self._roots
            watch = growth
        if at_end:
            self._add_note(result)
        if final:
            self.close()  # the sampler has ended: marks it done and lets go of the roots
        else:
            self._next_window(leaked=result.leaked)
        if watch is not None:
            # Reported after the next step, which shows the line that stores the leak.
            self._pending = (result, watch)
            if self not in self._listed_in:  # a loop that raises without telling us:
                self._listed_in.append(self)  # close_open_checks removes the tracer
            watch.start()
            return result
        self._publish(result, report=True)
        return result

    def epoch_ended(self) -> None:
        """The framework says an epoch ended after the step just sampled: a point where the
        loop may reset what it holds (a rolling check judges growth across it)."""
        if self.rolling and self._sampler is not None:
            self._reset_after(self._calls)

    def _reset_after(self, step: int) -> None:
        if step > 0 and (not self._resets or self._resets[-1] < step):
            self._resets.append(step)

    def _within_one_period(self, verdict: Any, window: tracker.Series) -> bool:
        """A rolling window's growth that the loop's next reset could take back: tensors
        without a graph were added, no graph node or cyclic garbage
        (``verdict.undone_by_a_reset``), and the window holds none of the loop's reset
        points and is no longer than its period (``verdict.within_one_period``): a list
        of this epoch's losses, emptied when the epoch ends, grows so in every window
        inside one epoch."""
        return (
            self.rolling and self._deferred is None
            and undone_by_a_reset(verdict, window.metrics)
            and within_one_period(self._window_start, self._calls, self._resets)
        )  # fmt: skip

    def _sample_the_end(self) -> None:
        """A window kept open for a reset point that the loop ended first: its last sample
        is taken again now, after the loop's own end (an epoch-end hook that empties the
        epoch's list has run), so a container emptied there reads as reset."""
        sampler = self._sampler
        assert sampler is not None
        if self._recorder is not None:  # a step recorded ahead that never ran
            self._recorder.close()
            self._recorder = None
        sampler.after_step(None, step=self._calls)
        result = sampler.result
        result.calls -= 1  # the same step, measured again: not one more
        if dropped(result.series, result.metrics):
            self._reset_after(self._calls - 1)
        for values in result.series.values():
            if len(values) >= 2:
                values[-2] = values.pop()

    def _extend(self) -> None:
        """Keep the open window (its baseline too) one more window long, to the loop's end
        when less than a window would be left after it."""
        if self._extended_from is None:
            self._extended_from = self._calls
        if self._recorder is not None:  # recorded for this judgement: record again later
            self._recorder.close()
            self._recorder = None
        planned = self._calls + self._span
        if self._length is not None and self._length - planned < self._span:
            planned = self._length
        self._judge_at = planned
        self._maybe_record_next()

    def _defer(self, verdict: Any, *, at_end: bool) -> bool:
        """A rolling check's later window leaked with no creation sites recorded (only the
        first window records them ahead): judge again after recording the next steps,
        so the report has its created-at and stored-at lines."""
        recorded = self._recorder is not None and self._recorder.steps_recorded
        more = RECORDED_STEPS + LATER_STEPS
        if (
            not verdict.leaked or not self.rolling or at_end or recorded
            or self._deferred is not None or not self.settings.diagnose
            or (self._length is not None and self._calls + more > self._length)
        ):  # fmt: skip
            return False
        self._deferred = verdict
        self._judge_at = self._calls + more
        self._maybe_record_next()
        return True

    def _live_watch(self, follow: tuple[Any, Any]) -> Any:
        from pytest_graphleak.diagnose import for_loop

        return for_loop.watch_holder(follow, self._roots)

    def _settle(self, *, note: str | None, report: bool) -> None:
        """The judged step's leak, watched during the step after it: its ``stored at:``
        lines (or a note saying why there are none), then reported."""
        __tracebackhide__ = True
        from pytest_graphleak.diagnose import for_loop

        assert self._pending is not None
        result, watch = self._pending
        self._pending = None
        for_loop.settle(watch, result.diagnosis, ran=note is None,
                        why=GROWTH_UNSEEN.get(note or "", ""),
                        unseen=note or NOT_STORED_NEXT_STEP)  # fmt: skip
        if self._sampler is None and self in self._listed_in:
            self._listed_in.remove(self)
        self._publish(result, report=report)

    def _publish(self, result: CheckResult, *, report: bool) -> None:
        __tracebackhide__ = True
        self.results.append(result)
        self._leaks += result.leaked
        if self._on_result is not None:
            self._on_result(result)
        if not report:
            return
        # unmeasured: no clean verdict; a known leak (the baseline file's) fails nothing
        if (result.leaked and not result.known) or result.unmeasured:
            self._report(result)

    def _end_sampler(self) -> None:
        sampler, self._sampler = self._sampler, None
        if self in self._listed_in:
            self._listed_in.remove(self)
        if sampler is not None:
            sampler.end()

    def _next_window(self, *, leaked: bool) -> None:
        """Start the next window: a fresh sampler after a leak (the diagnosis needed the
        heap unfrozen), else the same one with its baseline moved forward."""
        self._extended_from = None
        if leaked or self._sampler is None:
            self._begin_sampler(warmup=0)
        else:
            sampler = self._sampler
            sampler.rebase()
            last = len(next(iter(sampler.result.series.values()), [])) - 1
            for values in sampler.result.series.values():
                del values[: max(0, last)]  # keep the last sample: the next baseline
            del self._sample_steps[:-1]
            self._open_window(1)
        self._judge_at = self._plan(first=False)
        if self._judge_at is None:
            self.close()  # only a tail shorter than a window is left: nothing to judge
            return
        if self._ledger is not None:
            self._choose_stride()
        self._maybe_record_next()
        self._gc_for_next_step()

    def _numbered_samples(self) -> list[int] | None:
        """The open window's sample steps, unless they are simply 1, 2, 3, ..."""
        steps = self._sample_steps
        return None if steps == list(range(1, len(steps) + 1)) else list(steps)

    @property
    def _is_windowed(self) -> bool:
        return self.window is not None or self.rolling

    def _result_name(self, *, final: bool) -> str:
        if not self._is_windowed or (self.rolling and self._window_start == 0 and final):
            return self.name  # a rolling check judged once: as a steps=N check
        return f"{self.name} steps {self._window_start + 1}-{self._calls}"

    def _add_note(self, result: CheckResult) -> None:
        """Judged after the loop ended: say why the holder may be missing."""
        if self.rolling:
            judged = self._calls - self._window_start
            note = (
                f"the loop ended after {self._calls} steps, so its last {judged} were judged "
                "after it ended: teardown (an epoch-end hook clearing a list) may have "
                "freed the holder"
            )
            if self._extended_from is not None:
                note += (
                    f"; it was not judged at step {self._extended_from}, inside the loop, "
                    "because tensors without a graph grew (no graph node, no cyclic "
                    "garbage) and the loop had "
                    "shown no reset point (what it held dropping, or an epoch ending) "
                    "before, so the growth could have been a container the loop empties "
                    "each epoch"
                )
            elif not self.results:
                note += (
                    f"; a loop of warmup + {self._span} steps or more is judged "
                    "and diagnosed inside the loop"
                )
        elif self._length is None:  # steps=N, and the loop ended before warmup + N
            note = (
                f"the loop ended after {self._calls} of {self._judge_at} planned steps: "
                "judged after it ended, when teardown may have freed the holder"
            )
        else:
            note = (
                f"the loop ended after {self._calls} of {self._length} planned steps: judged "
                "after it ended, when teardown may have freed the holder"
            )
        if result.diagnosis is not None:
            result.diagnosis.notes.append(note)
        elif result.leaked:
            result.verdict.reason += "; " + note

    def _report(self, result: CheckResult) -> None:
        __tracebackhide__ = True
        if self.on_leak in ("warn", "raise"):
            pipeline.raise_or_warn(render_text(result), leaked=result.leaked, result=result,
                                   warn=self.on_leak == "warn", stacklevel=3)  # fmt: skip

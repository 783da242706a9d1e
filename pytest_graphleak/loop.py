"""Check a running loop from inside: one sample per step, judged at a planned step.

``LoopCheck`` is what ``track()`` and the framework callbacks share. The loop runs its
own steps and calls ``after_step()`` after each one. With ``steps=N`` the check is
judged *at* step warmup + N, inside the loop, and a leak is diagnosed right there, before
the framework's teardown (an ``on_train_epoch_end`` that clears a list) can free the
evidence. Creation sites are recorded during a few steps just before that
(``LoopRecorder``): a loop has no step to re-run.

Without ``steps`` the check rolls, window after window to the end of the run, judged
across the loop's own reset points; ``window=N`` judges each window of N steps of a long
run, sampled every ``stride`` steps. Where each window is judged, and when judging waits
(a growth one epoch's reset could take back, a leak with no creation sites recorded),
is ``loop_windows.LoopWindows``, which ``LoopCheck`` extends.

A loop that ends with fewer measured steps than a loop is judged from gets no leak verdict
but an unmeasured result (``loop_unmeasured``). A run announced that short is measured as
one of unknown length, so that its end says how many steps really ran.

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
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pytest_graphleak import pipeline, session
from pytest_graphleak.engine import tracker
from pytest_graphleak.engine.stride import CpuLedger
from pytest_graphleak.exceptions import OptionError
from pytest_graphleak.heap import gcstate
from pytest_graphleak.loop_unmeasured import fail_or_warn, unmeasured_result
from pytest_graphleak.loop_windows import LoopWindows, check_count, check_sample_every
from pytest_graphleak.report.text import render_text
from pytest_graphleak.result import CheckResult, Verdict
from pytest_graphleak.settings import Settings
from pytest_graphleak.verdict import (
    FEWEST_STEPS,
    dropped,
    fewest_steps,
    too_few_steps,
    too_short_loop,
)

if TYPE_CHECKING:
    from pytest_graphleak.diagnose.for_loop import After

#: "return": only give the result back (``track()`` outside pytest without raise_on_leak).
ON_LEAK = ("raise", "warn", "return")


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


class LoopCheck(LoopWindows):
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
        measured = check_count("steps", steps, minimum=1)
        windowed = check_count("window", window, minimum=2)
        if measured is not None and windowed is not None:
            raise OptionError(f"{name}: give steps= or window=, not both")
        self.sample_every = check_sample_every(sample_every, windowed, where=name)
        if on_leak not in ON_LEAK:
            raise OptionError(f"{name}: on_leak must be one of {ON_LEAK}, got {on_leak!r}")
        super().__init__(settings, steps=measured, window=windowed)
        self.name = name
        self.on_leak = on_leak
        self._on_result = on_result
        self.results: list[CheckResult] = []
        self._sampler: tracker.Sampler | None = None
        self._recorder: Any = None
        self._roots: Callable[[], Mapping[str, object]] = dict
        self._done = False
        #: The session's list of open checks this check is on while its sampler runs.
        self._listed_in: list[LoopCheck] = []
        self._calls = 0  # steps seen since start()
        self._leaks = 0
        self._last_recorded = 0
        #: a judged leak and the holder's watch, reported after the next step
        self._pending: tuple[CheckResult, Any] | None = None
        #: Ended by its own ``with`` block (``track()``), never as a leftover of another.
        self.scoped = False
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

    def after_step(self) -> CheckResult | None:
        """Sample after one step; at the planned step, judge (and raise or warn)."""
        __tracebackhide__ = True
        if self._calls < self._quiet_until and self._pending is None:
            self._calls += 1
            return None
        if self._pending is not None:
            self._settle(after="step", report=True)
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

    def finish(self) -> CheckResult | None:
        """The loop ended: judge the open window if it has two measured steps or more."""
        __tracebackhide__ = True
        if self._pending is not None:
            self._settle(after="ended", report=True)
        if self._sampler is None:
            return None
        if self.rolling and self._extended_from is not None:
            self._sample_the_end()
        measured = self._measured_steps()
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

    def _too_short(self) -> None:
        """The loop ended before it had the measured steps of a verdict: an unmeasured
        result, never a leak. Under pytest it fails the test as any unmeasured check does
        (``on_leak="raise"``); in a real run, or with "warn" / "return", it warns and
        lets the loop's caller go on (a callback never stops training for it)."""
        __tracebackhide__ = True
        why, fix = too_short_loop(
            self._calls, self.settings.warmup, self.fewest, saw=self.saw, unit=self.unit
        )
        self._unmeasured(why, fix)

    def _unmeasured(self, why: str, fix: str) -> None:
        """Publish a result with no verdict (``why``, ``fix``), then fail or warn
        (``loop_unmeasured.fail_or_warn``)."""
        __tracebackhide__ = True
        result = unmeasured_result(self.name, self._calls, self.settings.warmup, why, fix)
        self._publish(result, report=False)
        fail_or_warn(result, on_leak=self.on_leak)

    def close(self) -> None:
        """End measuring (the loop raised: no verdict on the open window, and a judged
        leak is recorded without raising); restores the gc state."""
        if self._pending is not None:
            self._settle(after="raised", report=False)
        if self._recorder is not None:
            self._recorder.close()
            self._recorder = None
        self._done = True
        self._quiet_until = 0
        self._roots = dict  # the caller's frame, a trainer: nothing outlives the check
        self._end_sampler()

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
        assert self._sampler is not None
        whole = self._sampler.result
        window = self._window_series()
        settings = dataclasses.replace(self.settings, warmup=self._window_warmup)
        verdict = pipeline.judged(window, settings)
        if self._judged_later(verdict, window, at_end=at_end):
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
        observation = self._observe(verdict, at_end=at_end)
        if final or verdict.leaked:
            self._end_sampler()
            for known in ("rechecking", "unmeasured", "unmeasured_fix", "coverage_notes"):
                setattr(window, known, getattr(whole, known))  # once the sampler has ended
        return self._conclude(window, settings, verdict, observation, final=final, at_end=at_end)

    def _observe(self, verdict: Verdict, *, at_end: bool) -> Any:
        """What the diagnosis of a leak starts from: the steps recorded ahead, else the
        heap as it is; None when clean. The recorder is done either way."""
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
        return observation

    def _conclude(
        self,
        window: tracker.Series,
        settings: Settings,
        verdict: Verdict,
        observation: Any,
        *,
        final: bool,
        at_end: bool,
    ) -> CheckResult:
        """The judged window's result, diagnosed from ``observation``; then the next
        window (or the end), and the result reported now or after the next step."""
        __tracebackhide__ = True
        try:
            result = pipeline.conclude(
                window,
                settings=settings,
                name=self._result_name(final=final),
                diagnose_step=None,
                roots=self._roots,
                exclude=(id(self),),
                observation=observation,
                verdict=verdict,
            )
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

    def _live_watch(self, follow: tuple[Any, Any]) -> Any:
        from pytest_graphleak.diagnose import for_loop

        return for_loop.watch_holder(follow, self._roots)

    def _settle(self, *, after: After, report: bool) -> None:
        """The judged step's leak, watched during the step after it: its ``stored at:``
        lines (or a note saying why there are none), then reported."""
        __tracebackhide__ = True
        from pytest_graphleak.diagnose import for_loop

        assert self._pending is not None
        result, watch = self._pending
        self._pending = None
        for_loop.settle(watch, result.diagnosis, after=after)
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

    def _report(self, result: CheckResult) -> None:
        __tracebackhide__ = True
        if self.on_leak in ("warn", "raise"):
            pipeline.raise_or_warn(
                render_text(result),
                leaked=result.leaked,
                result=result,
                warn=self.on_leak == "warn",
                stacklevel=3,
            )

"""The windows of a loop check: where each is judged, and when judging waits.

``loop.LoopCheck`` extends ``LoopWindows``: the check measures and reports, its windows
decide at which step each window is judged (``_plan``), which steps end in a sample
(``_samples``, ``stride``) or are recorded for the diagnosis (``_maybe_record_next``),
and whether a verdict is given now or later (``_judged_later``, ``_defer``).

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
already judged is not judged on its own. A rolling window that leaked with no creation
sites recorded is judged again after a few recorded steps (``_defer``).

Window mode (``window=N``) judges each consecutive window of N steps of a long run:
a clean window moves the baseline forward (``Sampler.rebase``), a leaky one is
reported (raise or warn) and a fresh window starts. After the warmup a window is sampled
every ``stride`` steps (``engine.stride``: chosen from the CPU time the steps and the
samples took, so that the check stays a small share of a fast step; ``sample_every``
fixes it), the samples aligned on the judged step; the verdict states its rates and its
slowest catchable leak per step.
"""

from __future__ import annotations

import abc
import time
from typing import Any

from pytest_graphleak.engine import tracker
from pytest_graphleak.engine.stride import MIN_SAMPLES, CpuLedger
from pytest_graphleak.exceptions import OptionError
from pytest_graphleak.result import CheckResult
from pytest_graphleak.settings import Settings
from pytest_graphleak.values import optional_int_at_least
from pytest_graphleak.verdict import (
    FEWEST_STEPS,
    dropped,
    fewest_steps,
    loop_fewest_steps,
    undone_by_a_reset,
    within_one_period,
)

#: Steps that record creation sites, then steps that must pass before what they made
#: counts as leaked (the numbers of the diagnosis's own re-run of a step).
RECORDED_STEPS = 3
LATER_STEPS = 2


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


class LoopWindows(abc.ABC):
    """The window state of a loop check, and its plan: ``steps`` (judged once),
    ``window`` (judged every ``window`` steps) or neither (rolling, see the module)."""

    # What the check (``loop.LoopCheck``) holds and the windows read.
    name: str
    sample_every: int | None
    results: list[CheckResult]
    _calls: int
    _leaks: int
    _sampler: tracker.Sampler | None
    _recorder: Any

    def __init__(self, settings: Settings, *, steps: int | None, window: int | None) -> None:
        self.settings = settings
        self.steps = steps
        self.window = window
        #: steps=None and no window: judged every settings.steps steps, to the end.
        self.rolling = steps is None and window is None
        #: Steps per judged window: window=, else a marker test's steps (never fewer than
        #: a verdict needs: --graphleak-steps=2 gives no two-step windows).
        self._span = window if window is not None else max(settings.steps, FEWEST_STEPS)
        self._length: int | None = None
        self._window_start = 0  # calls before the current window
        self._window_warmup = settings.warmup  # samples of the window that are not judged
        self._judge_at: int | None = None
        self._window_began = 0.0
        #: a rolling window's leak verdict, judged again once creation sites are recorded
        self._deferred: Any = None
        #: Steps after which the loop reset (rolling checks): an epoch's end the framework
        #: announced (``epoch_ended``), or a sample where what the loop held dropped.
        self._resets: list[int] = []
        #: The open rolling window grew within one period of the loop and is judged later,
        #: across its next reset point (``_extend``); the step first planned for it.
        self._extended_from: int | None = None
        #: Steps per sample in the current window (1 during warmup and outside window mode).
        self.stride = 1
        self._ledger: CpuLedger | None = None  # window mode: what steps and samples cost
        #: Steps up to this one need nothing but counting (between two samples): the fast
        #: path of ``after_step``, whose cost a fast step pays every time.
        self._quiet_until = 0
        #: The step after which each sample of the open window's series was taken
        #: (``CheckResult.sample_steps``).
        self._sample_steps: list[int] = []

    @abc.abstractmethod
    def close(self) -> None:
        """End measuring (the check's)."""

    @abc.abstractmethod
    def _begin_sampler(self, *, warmup: int, start_objects: list[object] | None = None) -> None:
        """A fresh sampler, and a window opened on it (the check's)."""

    def epoch_ended(self) -> None:
        """The framework says an epoch ended after the step just sampled: a point where the
        loop may reset what it holds (a rolling check judges growth across it)."""
        if self.rolling and self._sampler is not None:
            self._reset_after(self._calls)

    @property
    def fewest(self) -> int:
        """The fewest measured steps this loop is judged from (``loop_fewest_steps``)."""
        return loop_fewest_steps(self.settings.warmup, self.window)

    @property
    def _is_windowed(self) -> bool:
        return self.window is not None or self.rolling

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

    def _measured_steps(self) -> int:
        """The open window's measured steps: in window mode, its measured samples."""
        measured = self._calls - self._window_start  # a later window's baseline: the last
        if self._window_start == 0:  # step of the one before, so all of its steps count
            measured -= self.settings.warmup
        if self.window is not None:  # steps not sampled: count the measured samples
            measured = min(measured, self._window_samples() - self._window_warmup)
        return measured

    def _window_samples(self) -> int:
        """Samples in the open window's series (with the baseline kept from the last)."""
        assert self._sampler is not None
        return len(next(iter(self._sampler.result.series.values()), []))

    def _numbered_samples(self) -> list[int] | None:
        """The open window's sample steps, unless they are simply 1, 2, 3, ..."""
        steps = self._sample_steps
        return None if steps == list(range(1, len(steps) + 1)) else list(steps)

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
            self._leaks
            or self._window_start == 0
            or self._judge_at == self._length
            or self._deferred is not None
            or self._extended_from is not None
        ):
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
            self.rolling
            and self._deferred is None
            and undone_by_a_reset(verdict, window.metrics)
            and within_one_period(self._window_start, self._calls, self._resets)
        )

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
            not verdict.leaked
            or not self.rolling
            or at_end
            or recorded
            or self._deferred is not None
            or not self.settings.diagnose
            or (self._length is not None and self._calls + more > self._length)
        ):
            return False
        self._deferred = verdict
        self._judge_at = self._calls + more
        self._maybe_record_next()
        return True

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

    def _window_series(self) -> tracker.Series:
        """The open window's samples, as the verdict judges them."""
        sampler = self._sampler
        assert sampler is not None
        whole = sampler.result
        return tracker.Series(
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

    def _judged_later(self, verdict: Any, window: tracker.Series, *, at_end: bool) -> bool:
        """A rolling window whose growth the loop's next reset could take back
        (``_within_one_period``) gets no verdict now: judged again across the next reset
        point, or when the run ends; never on its own if it is the loop's last period."""
        if not self._within_one_period(verdict, window):
            return False
        if not at_end and self._calls != self._length:
            self._extend()  # judged again across the loop's next reset point
        elif self.results:
            # The loop's last period (its last epoch): judged with the windows before
            # it, never on its own growth, which its next reset would have taken back.
            self.close()
        elif not at_end:
            # The last step of a run of known length, in its first period: judged when
            # the run ends, after its epoch-end hooks (``finish``).
            self._extend()
            self._judge_at = None
        else:
            return False  # the loop's end, and nothing judged before: judged now
        return True

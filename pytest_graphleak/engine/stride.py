"""How often a long run is sampled: every k-th step, k chosen from what steps cost.

A sample costs about the same whatever the step (~0.1-0.5 ms: the probes' reads and one
``gc.collect()`` over the objects made since the baseline), so on a fast step sampling
after every one is a large share of the step. A window of a long run (``window=N``) is
therefore sampled every ``k`` steps, with ``k`` the smallest stride that keeps the check's
own CPU time per window (its samples, its judgement, and its call on every step between
samples) within ``TARGET_SHARE`` of the steps' CPU time, as measured in the steps before
(the warmup, then each window for the next).

Detection is kept: a leak of one object every ``p`` steps still raises the count between
samples ``ceil(p / k)`` apart, and ``k`` is at most ``window // MIN_SAMPLES``, so a window
keeps enough samples for the verdict's rule (``verdict.max_leak_period``), which the
verdict states per step for the stride in use (``slowest_leak_steps``): at the cap, 2 of
the 5 samples, ``2 * window / 5`` steps (40 at ``window=100``; 30 with 10 samples, 33
with every step sampled). Where the cap binds (very fast steps, short windows) the check
costs more than the target rather than catching less.

CPU time is the calling thread's (``time.thread_time``): the check runs in the loop's
thread, and unlike wall time it does not count what other processes of a busy machine
took from the core.
"""

from __future__ import annotations

import math
import statistics
import time

#: The check's own CPU time per window the stride aims at, as a share of the steps' CPU
#: time: a sixth of the 0.3% the check must stay under, leaving room for what a run pays
#: once (the start walk, the warmup sample: ~4 ms, 0.02 ms a step over 200 steps), for the
#: steps the call into the callback costs whatever it does, and for noise. On a step of
#: ~40 ms or less the stride is then at its cap (``window // MIN_SAMPLES``) and the check
#: costs the same in ms as on a 20 ms step; a slower step buys more samples.
TARGET_SHARE = 0.0005

#: The check's CPU time on a step between samples (a counter compare, and the call into
#: the callback on caches the step has just flushed): ~8 us measured in a transformers
#: Trainer. Not timed per step (a thread-CPU clock read costs ~2 us); taken from the
#: budget, for every step of the window, before the samples.
STEP_HOOK_CPU = 8e-6

#: Samples a window keeps at least (``window // MIN_SAMPLES`` caps the stride): with 5,
#: a leak is caught when the count rises every 2 samples (``max_leak_period(5)``), and a
#: series that settles in the first half of the window is still refuted.
MIN_SAMPLES = 5


def max_stride(window: int) -> int:
    """The largest stride that leaves a window of ``window`` steps ``MIN_SAMPLES``."""
    return max(1, window // MIN_SAMPLES)


def choose_stride(
    *,
    window: int,
    step_cpu: float,
    sample_cpu: float,
    window_cpu: float = 0.0,
    hook_cpu: float = STEP_HOOK_CPU,
    share: float = TARGET_SHARE,
) -> int:
    """The smallest stride whose samples (``sample_cpu`` seconds each), once-a-window
    work (``window_cpu``: the judgement, moving the baseline) and calls on the steps
    between samples (``hook_cpu`` each) cost at most ``share`` of the window's steps
    (``step_cpu`` seconds each), capped by ``max_stride(window)``."""
    if step_cpu <= 0 or sample_cpu <= 0:
        return 1  # nothing measured yet (or a clock too coarse): sample every step
    budget = share * step_cpu * window - window_cpu - hook_cpu * window
    if budget <= 0:
        return max_stride(window)
    samples = max(1.0, budget / sample_cpu)
    return max(1, min(max_stride(window), math.ceil(window / samples)))


class CpuLedger:
    """The loop thread's CPU time, split into the steps' and the check's own: marks are
    read only around the check's work (a sample, a judgement), never on other steps.
    Medians, so that a first step's lazy setup or a step that saves a checkpoint does not
    decide the stride."""

    def __init__(self) -> None:
        self._mark = time.thread_time()
        self._mark_step = 0
        #: CPU seconds per step between two marks, and per sample
        self.step_cpu: list[float] = []
        self.sample_cpu: list[float] = []
        #: the last judgement's CPU time (0 before the first)
        self.window_cpu = 0.0

    def reset(self) -> None:
        """Forget the steps and samples (a new window measures its own), keeping the mark
        and the last judgement's cost."""
        self.step_cpu.clear()
        self.sample_cpu.clear()

    def steps_done(self, step: int) -> float:
        """The loop reached ``step`` (counted from the start) and the check begins its
        work: the CPU time since the last mark is the steps'. Returns the time read."""
        now = time.thread_time()
        if step > self._mark_step:
            self.step_cpu.append((now - self._mark) / (step - self._mark_step))
        self._mark, self._mark_step = now, step
        return now

    def sampled(self, began: float) -> float:
        """A sample begun at ``began`` ended now (the check's own time)."""
        now = time.thread_time()
        self.sample_cpu.append(now - began)
        self._mark = now
        return now

    def window_work(self, began: float) -> None:
        """Once-a-window work (a judgement) begun at ``began`` ended now."""
        now = time.thread_time()
        self.window_cpu = now - began
        self._mark = now

    def stride(self, window: int) -> int:
        """The stride for the next ``window`` steps from what was measured so far."""
        if not self.step_cpu or not self.sample_cpu:
            return 1
        return choose_stride(
            window=window,
            step_cpu=statistics.median(self.step_cpu),
            sample_cpu=statistics.median(self.sample_cpu),
            window_cpu=self.window_cpu,
        )

"""How often a long run is sampled: every k-th step, k chosen from what steps cost.

A sample costs about the same whatever the step (~0.1-0.25 ms: the probes' reads and one
``gc.collect()`` over the objects made since the baseline), so on a fast step sampling
after every one is a large share of the step. A window of a long run (``window=N``) is
therefore sampled every ``k`` steps, with ``k`` the smallest stride that keeps the check's
own CPU time within ``TARGET_SHARE`` of the steps' CPU time, as measured in the steps
before (the warmup, then each window for the next).

Detection is kept: a leak of one object every ``p`` steps still raises the count between
samples ``ceil(p / k)`` apart, and ``k`` is at most ``window // MIN_SAMPLES``, so a window
keeps enough samples for the verdict's rule (``verdict.max_leak_period``); the slowest
leak it catches for sure stays near ``window / 3`` steps. Where the cap binds (very fast
steps, short windows) the check costs more than the target rather than catching less.

CPU time is the calling thread's (``time.thread_time``): the check runs in the loop's
thread, and unlike wall time it does not count what other processes of a busy machine
took from the core.
"""

from __future__ import annotations

import math
import statistics
import time

#: The samples' CPU time per step the stride aims at, as a share of a step's CPU time:
#: a third of the 0.3% the check must stay under, leaving room for what the ledger does
#: not see (the few microseconds every step's hook costs on cold caches, the creation
#: sites recorded in a run's last window) and for noise.
TARGET_SHARE = 0.001

#: Samples a window keeps at least (``window // MIN_SAMPLES`` caps the stride): with 9 or
#: more, a series that settles is refuted and a leak every ``samples // 3`` samples caught.
MIN_SAMPLES = 10


def max_stride(window: int) -> int:
    """The largest stride that leaves a window of ``window`` steps ``MIN_SAMPLES``."""
    return max(1, window // MIN_SAMPLES)


def choose_stride(
    *,
    window: int,
    step_cpu: float,
    sample_cpu: float,
    window_cpu: float = 0.0,
    share: float = TARGET_SHARE,
) -> int:
    """The smallest stride whose samples (``sample_cpu`` seconds each) and once-a-window
    work (``window_cpu``: the judgement, moving the baseline) cost at most ``share`` of
    the window's steps (``step_cpu`` seconds each), capped by ``max_stride(window)``."""
    if step_cpu <= 0 or sample_cpu <= 0:
        return 1  # nothing measured yet (or a clock too coarse): sample every step
    budget = share * step_cpu * window - window_cpu
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

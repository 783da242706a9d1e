"""Process memory: resident set size, and the bytes the C allocator has handed out.

psutil gives RSS everywhere. On Linux the probe reads ``/proc/self/statm`` itself through
a descriptor kept open for the check (what psutil reads too, without a new file object,
parser and named tuple per sample: 3 us instead of 30 us, paid after every step).

RSS alone cannot judge memory growth in a process that has run other code first (a test
suite): memory that earlier code freed stays resident, so a step's new buffers land in
pages already counted and RSS stays flat; and the allocator hands pages back to the
system when the step frees something (an old buffer at the top of the heap, the big
blocks earlier code freed), so RSS dips mid-series and hides the rise before the dip.
Where glibc's ``mallinfo2()`` exists (glibc 2.33+), the probe also samples
``process.malloc_bytes``: bytes in use in every malloc arena plus those in mmapped
blocks. That counts what is allocated, wherever it lies and whatever is resident, so a
numpy array or a CPU tensor kept every step adds its size to it in any process. Python's
small objects (pymalloc arenas) are not in it: RSS still covers those.

``mallinfo2()`` walks the allocator's free lists: ~1-20 us on the heaps measured (a torch
test process), but milliseconds on a heap that a long suite fragmented (a cache miss per
free block). What is cheap is relative to the step: the probe times a call when asked
whether it is available, and where it costs more than ``MAX_MALLINFO_S`` it also times
the steps of the warmup (the time between its samples: the step as the check runs it) and
decides at the end of warmup. It keeps the metric when a call costs at most
``STEP_SHARE`` of a step, or when the check's samples are known (a marker, ``check()``)
and all of them together cost at most ``CHECK_BUDGET_S``: a numpy step that keeps 1 MiB
takes a fraction of a millisecond, less than one call on a heap a suite fragmented, and
only malloc's bytes see its growth there. Otherwise it reads NaN from then on (the
verdict judges no series with a NaN in it, so memory is judged on RSS alone) and says so
in a note. A call's cost is its CPU time, the cheapest of those measured (the three calls
of ``available`` and those of the warmup): on a loaded machine a call's wall time is
mostly the time it waited for a core (80 ms for a heap that costs 2 ms).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from pytest_graphleak.metrics import BYTES, Metric
from pytest_graphleak.probes.base import ProbeBase

_STATM = "/proc/self/statm"

#: Resident memory moves with the allocator and the interpreter's own caches: noisy.
RSS = Metric("process.rss_bytes", BYTES, "memory", noisy=True)

#: Bytes malloc has handed out and not had back. Exact for what is kept, but other threads
#: and the interpreter's caches move it too: noisy, judged with 7/8 of the tolerance so
#: that a step keeping the tolerance is caught when its count falls a few KiB short.
MALLOC = Metric("process.malloc_bytes", BYTES, "memory", noisy=True, noise_share=0.875)

#: A ``mallinfo2()`` call this cheap is paid after every step, whatever the step costs.
MAX_MALLINFO_S = 0.0005
#: A dearer call is kept when it costs at most this share of a step (the time between two
#: samples in warmup): sampling malloc at most doubles a sampled step's time.
STEP_SHARE = 1.0
#: Or when a check of known length pays at most this for all its calls together.
CHECK_BUDGET_S = 0.25
#: Samples after which a check without warmup decides (``absorb`` decides with warmup).
DECIDE_AFTER = 3


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


@functools.cache
def mallinfo2() -> Callable[[], _MallInfo2] | None:
    """glibc's ``mallinfo2`` (None where the C library has none: musl, macOS, Windows,
    glibc before 2.33); looked up once."""
    try:
        function = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError, TypeError):
        return None
    function.restype = _MallInfo2
    function.argtypes = []
    return function


def malloc_bytes(read: Callable[[], _MallInfo2]) -> int:
    """Bytes in use: in the arenas' chunks (``uordblks``) and in mmapped blocks."""
    info = read()
    return int(info.uordblks + info.hblkhd)


class ProcessProbe(ProbeBase):
    name = "process"
    absent = "psutil cannot read this process"
    #: RSS, and ``process.malloc_bytes`` where ``mallinfo2`` is cheap (``available``).
    metrics: tuple[Metric, ...] = (RSS, MALLOC)

    def __init__(self) -> None:
        self._process: Any = None  # a psutil.Process, made where /proc is unreadable
        self._statm: int | None = None  # open descriptor of /proc/self/statm
        self._page = 0
        self._malloc: Callable[[], _MallInfo2] | None = None
        self._notes: list[str] = []
        #: Whether malloc stays sampled is still to be decided from the steps' time.
        self._deciding = False
        self._costs: list[float] = []  # seconds of each mallinfo2 call while deciding
        self._intervals: list[float] = []  # seconds between samples while deciding
        self._last = 0.0  # when the last sample (or start) ended
        self._planned: int | None = None  # the check's samples, where known (``plan``)

    def available(self) -> bool:
        self._choose_malloc()
        if os.access(_STATM, os.R_OK):
            return True  # read directly: importing psutil (~30 ms) is not needed
        try:
            import psutil  # noqa: F401 - made into a Process only where /proc is unreadable
        except ImportError:  # psutil is a dependency, but a broken install must not crash a run
            return False
        return True

    def _choose_malloc(self) -> None:
        """Sample malloc's bytes when ``mallinfo2`` exists and is cheap on this heap, or
        may be cheap next to the step (decided at the end of warmup, ``_decide``)."""
        self.metrics = (RSS,)
        self._malloc = None
        self._notes = []
        self._deciding = False
        read = mallinfo2()
        if read is None:
            return
        cost = 1.0
        for _ in range(3):  # the cheapest of three: a preempted call is not the heap's cost
            started = time.thread_time()  # CPU time: the heap's cost, not the machine's load
            read()
            cost = min(cost, time.thread_time() - started)
            if cost <= MAX_MALLINFO_S:
                break
        self._malloc = read
        self.metrics = (RSS, MALLOC)
        self._deciding = cost > MAX_MALLINFO_S
        self._costs = [cost] if self._deciding else []
        self._intervals = []

    def plan(self, samples: int | None) -> None:
        self._planned = samples

    def _decide(self) -> None:
        """Keep malloc sampled when a call costs at most ``STEP_SHARE`` of a step, or all
        the check's calls at most ``CHECK_BUDGET_S``."""
        if not self._intervals:
            return
        self._deciding = False
        cost = min(self._costs)  # the heap's cost: a slower call was preempted
        step = sorted(self._intervals)[len(self._intervals) // 2]
        self._costs, self._intervals = [], []
        if cost <= max(MAX_MALLINFO_S, STEP_SHARE * step):
            return
        if self._planned is not None and cost * self._planned <= CHECK_BUDGET_S:
            return
        self._malloc = None
        total = (
            f" and {cost * self._planned:.2f} s over the check's {self._planned} samples"
            if self._planned is not None
            else ""
        )
        self._notes = [
            _not_sampled(
                cost,
                " after warmup",
                f", more than the step itself ({step * 1e3:.1f} ms a step as checked){total}",
            )
        ]

    def start(self, heap: Sequence[object]) -> None:
        self.stop()
        self._last = time.perf_counter()
        try:
            self._page = os.sysconf("SC_PAGE_SIZE")
            self._statm = os.open(_STATM, os.O_RDONLY)
            _resident_pages(self._statm)  # a format we cannot read: psutil instead
        except (OSError, AttributeError, ValueError, IndexError):
            self.stop()

    def absorb(self, fresh: Sequence[object]) -> None:
        if self._deciding:  # the end of warmup: its steps were timed
            self._decide()

    def sample(self, fresh: Sequence[object]) -> dict[str, float]:
        began = time.perf_counter()
        values = {RSS.name: self._rss()}
        if self._malloc is not None:
            read = time.thread_time()
            values[MALLOC.name] = float(malloc_bytes(self._malloc))
            if self._deciding:
                self._costs.append(time.thread_time() - read)
                self._intervals.append(began - self._last)
                if len(self._intervals) >= DECIDE_AFTER:  # no warmup ended it (warmup=0)
                    self._decide()
        elif MALLOC in self.metrics:  # left out after warmup: not judged (a NaN)
            values[MALLOC.name] = math.nan
        self._last = time.perf_counter()
        return values

    def _rss(self) -> float:
        if self._statm is not None:
            return float(_resident_pages(self._statm) * self._page)
        import psutil

        if not isinstance(self._process, psutil.Process):
            self._process = psutil.Process()
        return float(self._process.memory_info().rss)

    def notes(self) -> list[str]:
        return list(self._notes)

    def stop(self) -> None:
        if self._statm is not None:
            with contextlib.suppress(OSError):
                os.close(self._statm)
            self._statm = None


def _not_sampled(cost: float, when: str, why: str) -> str:
    return (
        f"{MALLOC.name} not sampled{when}: counting the C heap's allocated bytes took "
        f"{cost * 1e3:.1f} ms a sample on this fragmented heap{why}; memory growth was "
        "judged on RSS alone"
    )


def _resident_pages(descriptor: int) -> int:
    # statm: size resident shared text lib data dt, in pages
    return int(os.pread(descriptor, 128, 0).split()[1])

"""Process memory: resident set size.

psutil gives RSS everywhere. On Linux the probe reads ``/proc/self/statm`` itself through
a descriptor kept open for the check (what psutil reads too, without a new file object,
parser and named tuple per sample: 3 us instead of 30 us, paid after every step).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from typing import Any

from pytest_graphleak.metrics import BYTES, Metric
from pytest_graphleak.probes.base import ProbeBase

_STATM = "/proc/self/statm"


#: Resident memory moves with the allocator and the interpreter's own caches: noisy.
RSS = Metric("process.rss_bytes", BYTES, "memory", noisy=True)


class ProcessProbe(ProbeBase):
    name = "process"
    absent = "psutil cannot read this process"
    metrics = (RSS,)

    def __init__(self) -> None:
        self._process: Any = None  # a psutil.Process, made where /proc is unreadable
        self._statm: int | None = None  # open descriptor of /proc/self/statm
        self._page = 0

    def available(self) -> bool:
        if os.access(_STATM, os.R_OK):
            return True  # read directly: importing psutil (~30 ms) is not needed
        try:
            import psutil  # noqa: F401 - made into a Process only where /proc is unreadable
        except ImportError:  # psutil is a dependency, but a broken install must not crash a run
            return False
        return True

    def start(self, heap: Sequence[object]) -> None:
        self.stop()
        try:
            self._page = os.sysconf("SC_PAGE_SIZE")
            self._statm = os.open(_STATM, os.O_RDONLY)
            _resident_pages(self._statm)  # a format we cannot read: psutil instead
        except (OSError, AttributeError, ValueError, IndexError):
            self.stop()

    def sample(self, fresh: Sequence[object]) -> dict[str, float]:
        if self._statm is not None:
            return {RSS.name: float(_resident_pages(self._statm) * self._page)}
        import psutil

        if not isinstance(self._process, psutil.Process):
            self._process = psutil.Process()
        return {RSS.name: float(self._process.memory_info().rss)}

    def stop(self) -> None:
        if self._statm is not None:
            with contextlib.suppress(OSError):
                os.close(self._statm)
            self._statm = None


def _resident_pages(descriptor: int) -> int:
    # statm: size resident shared text lib data dt, in pages
    return int(os.pread(descriptor, 128, 0).split()[1])

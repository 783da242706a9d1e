"""Process memory: resident set size via psutil."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_graphleak.probes.base import BYTES, PassiveProbe


class ProcessProbe(PassiveProbe):
    name = "process"
    units = {"process.rss_bytes": BYTES}  # noqa: RUF012

    def __init__(self) -> None:
        self._process: object | None = None

    def available(self) -> bool:
        try:
            import psutil
        except ImportError:  # psutil is a dependency, but a broken install must not crash a run
            return False
        self._process = psutil.Process()
        return True

    def sample(self, fresh: Sequence[object]) -> dict[str, float]:
        import psutil

        process = self._process if isinstance(self._process, psutil.Process) else psutil.Process()
        return {"process.rss_bytes": float(process.memory_info().rss)}

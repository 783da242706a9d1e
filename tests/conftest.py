"""Suite-wide settings for the pytest and graphleak subprocesses that tests start."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _lean_subprocesses(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each pytester/CLI subprocess would otherwise import hypothesis' pytest plugin
    # (~1.5 s of CPU) and start one OpenMP thread per core for tiny models: on a small
    # CI machine that contention, not the code under test, dominated the suite's time.
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:hypothesispytest")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")

"""Suite-wide settings for the pytest and graphleak subprocesses that tests start."""

from __future__ import annotations

import os
import sys
import sysconfig
import types
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _lean_subprocesses(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each pytester/CLI subprocess would otherwise import hypothesis' pytest plugin
    # (~1.5 s of CPU) and start one OpenMP thread per core for tiny models: on a small
    # CI machine that contention, not the code under test, dominated the suite's time.
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:hypothesispytest")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.fixture
def fake_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., types.ModuleType]:
    """Make a module in sys.modules (for this test only) whose file looks like the user's
    (in tmp_path) or like an installed package's (in site-packages): the start walk
    enters the first kind's globals and not the second's."""

    def make(name: str, *, installed: bool) -> types.ModuleType:
        base = sysconfig.get_paths()["purelib"] if installed else str(tmp_path)
        module = types.ModuleType(name)
        module.__file__ = os.path.join(base, f"{name}.py")
        monkeypatch.setitem(sys.modules, name, module)
        return module

    return make

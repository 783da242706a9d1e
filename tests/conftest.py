"""Suite-wide settings for the pytest and graphleak subprocesses that tests start, and
the fixtures several test modules share; shared constants and functions are in
``suite_helpers`` (``from suite_helpers import FAST, REPO``).

In-process ``pytester.runpytest`` or ``runpytest_subprocess``: see CONTRIBUTING.md,
"Testing the plugin". The guard ``_in_process_runs_keep_gc_state`` below enforces the
part of that rule a test can check.
"""

from __future__ import annotations

import gc
import os
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest
from suite_helpers import FakeModule, GcState, MakeModule, gc_state

#: Plugins that the pytest runs tests start do without (see ``_lean_subprocesses``).
LEAN_ADDOPTS = "-p no:hypothesispytest -p no:trio -p no:anyio"


@pytest.fixture
def restore_gc() -> Iterator[GcState]:
    """Whatever a test does to gc, the rest of the session gets the original back
    (``gc.garbage`` too); yields the state it will restore."""
    before = gc_state()
    garbage = list(gc.garbage)
    try:
        yield before
    finally:
        gc.unfreeze()
        gc.set_debug(before[2])
        gc.set_threshold(*before[1])
        (gc.enable if before[0] else gc.disable)()
        gc.garbage[:] = garbage


@pytest.fixture(scope="session", autouse=True)
def _lean_environment() -> Iterator[None]:
    """The lean settings below, set before module- and session-scoped fixtures run (two
    start pytest runs of their own); each test sets them again (pytester deletes one)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTEST_ADDOPTS", LEAN_ADDOPTS)
        patch.setenv("OMP_NUM_THREADS", "1")
        patch.setenv("COLUMNS", "80")
        yield


@pytest.fixture(autouse=True)
def _lean_subprocesses(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each pytest run a test starts (pytester, the CLI, xdist workers) would otherwise
    # import hypothesis' pytest plugin, pytest-trio's and anyio's (~0.6 s of CPU each
    # time: trio, anyio and hypothesis) and start one OpenMP thread per core for tiny
    # models: on a small CI machine that contention, not the code under test, dominated
    # the suite's time. The tests of async plugins turn theirs back on (``-p trio``).
    if "pytester" in request.fixturenames:
        # Pytester deletes PYTEST_ADDOPTS when it starts: set it after that.
        request.getfixturevalue("pytester")
    monkeypatch.setenv("PYTEST_ADDOPTS", LEAN_ADDOPTS)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # Runs write to a pipe: 80 columns, as in a CI log, whatever the runner's COLUMNS (a
    # test that passed only in a wider terminal once hid a wrapped headline).
    monkeypatch.setenv("COLUMNS", "80")


@pytest.fixture(autouse=True)
def _in_process_runs_keep_gc_state(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that runs pytest in this process (``pytester.runpytest``) shares the
    runner's gc: the run must leave it as it found it, or the tests after it measure with
    another gc. Tests that change gc on purpose restore it (``restore_gc``) or run pytest
    in a subprocess."""
    if "pytester" not in request.fixturenames or "restore_gc" in request.fixturenames:
        yield
        return
    before = gc_state()
    yield
    assert gc_state() == before, (
        "an in-process pytest run changed the gc state: run it "
        "with runpytest_subprocess (CONTRIBUTING.md, Testing the plugin)"
    )


@pytest.fixture
def fake_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MakeModule:
    """Make a module in sys.modules (for this test only) whose file looks like the user's
    (in tmp_path) or like an installed package's (in site-packages): the start walk
    enters the first kind's globals and not the second's."""

    def make(name: str, *, installed: bool) -> FakeModule:
        base = sysconfig.get_paths()["purelib"] if installed else str(tmp_path)
        module = FakeModule(name)
        module.__file__ = os.path.join(base, f"{name}.py")
        monkeypatch.setitem(sys.modules, name, module)
        return module

    return make


@pytest.fixture(autouse=True)
def _malloc_bytes_sampled_whatever_the_heap(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process probe samples ``process.malloc_bytes`` however dear ``mallinfo2()`` is.

    The probe leaves the metric out when one call costs more than ``MAX_MALLINFO_S`` and
    says so in the result's notes. In a worker that has run hundreds of tests (torch's
    thread arenas, a fragmented heap) a call costs 0.1-0.5 ms on a quiet machine and
    0.8 ms under CI's load, so an in-process test of memory growth would be judged on
    RSS alone some of the time, and RSS misses a buffer built in pages freed earlier (two
    CI runs failed so). The suite's verdicts must not depend on how many tests ran
    before in the worker; the tests of that choice set the threshold themselves."""
    from pytest_graphleak.probes import process_probe

    monkeypatch.setattr(process_probe, "MAX_MALLINFO_S", 1.0)


@pytest.fixture
def malloc_sampled() -> None:
    """Skip where the C library has no ``mallinfo2`` (musl, macOS, glibc < 2.33): the test
    needs ``process.malloc_bytes``."""
    from pytest_graphleak.probes import process_probe

    if process_probe.mallinfo2() is None:
        pytest.skip("no glibc mallinfo2: RSS alone judges memory here")

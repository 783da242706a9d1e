"""State handed over, not global (``session.py``): the running test's session is reached
through a context variable, restored after its block, and by threads through the run's
finder while the test runs, with nothing patched."""

from __future__ import annotations

import _thread
import json
import threading
import types

import pytest

from pytest_graphleak import session
from pytest_graphleak.result import CheckResult
from pytest_graphleak.settings import Settings

torch: types.ModuleType | None
try:  # imported here, once: an in-process pytester run drops the modules it imported, and
    # torch cannot be imported a second time in one process
    import torch
except ImportError:  # minigrad alone: the torch test skips
    torch = None


@pytest.fixture
def outside_pytest(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rules of ``session`` alone, as outside pytest: this run's finder (which gives
    the running test's session when the run has no --graphleak) is set aside."""
    monkeypatch.setattr(session, "_FINDERS", [])


@pytest.mark.usefixtures("outside_pytest")
def test_entered_hands_a_session_over_and_gives_the_one_before_back() -> None:
    before = session.current()
    assert session.current() is before  # made once in this context, then kept
    recorded: list[CheckResult] = []
    test = session.RunningTest("t.py::test_x", Settings(), recorded.append)
    inner = session.Session(test=test, before_sample=[lambda: None])
    with session.entered(inner):
        assert session.current() is inner and session.current().test is test
        with session.entered(session.Session()):
            assert session.current().test is None
        assert session.current() is inner
    assert session.current() is before


@pytest.mark.usefixtures("outside_pytest")
def test_a_thread_gets_the_session_the_finder_gives_and_nothing_is_patched() -> None:
    """A new thread's context is empty (Python 3.11 to 3.13), however it was started:
    ``current()`` there asks the run's finder, so no ``Thread.start`` patch is needed; the
    thread that entered a session keeps its own."""
    test = session.RunningTest("t.py::test_x", Settings(), lambda result: None)
    running = session.Session(test=test)
    mine = session.Session()
    before = threading.Thread.start
    seen: list[session.Session] = []
    done = threading.Event()

    def run() -> None:
        seen.append(session.current())
        done.set()

    session.push_finder(lambda: running)
    with session.entered(mine):
        assert session.current() is mine
        worker = threading.Thread(target=run)
        worker.start()
        worker.join()
        done.clear()
        _thread.start_new_thread(run, ())
        assert done.wait(10)
    assert seen == [running, running]
    assert threading.Thread.start is before


@pytest.mark.usefixtures("outside_pytest")
def test_a_thread_with_no_finder_session_has_a_session_of_its_own() -> None:
    """Between tests (the finder gives nothing) a thread's check runs as outside pytest."""
    seen: list[session.Session] = []
    session.push_finder(lambda: None)
    with session.entered(session.Session()):
        worker = threading.Thread(target=lambda: seen.append(session.current()))
        worker.start()
        worker.join()
    assert len(seen) == 1 and seen[0].test is None and not seen[0].ended


@pytest.mark.usefixtures("outside_pytest")
def test_an_ended_session_is_not_handed_out_again() -> None:
    """A thread started during a test and still running later (a pool's worker) keeps
    that test's context: once the test ended, its checks get a session of their own."""
    released: list[str] = []

    class Span:
        def check_begins(self) -> None: ...

        def check_ends(self) -> None: ...

        def abandon(self) -> None:
            released.append("released")

    test = session.RunningTest("t.py::test_x", Settings(), lambda result: None)
    old = session.Session(test=test, before_sample=[lambda: None], spans=[Span()])
    with session.entered(old):
        old.end()
        assert released == ["released"] and old.spans == [] and old.before_sample == []
        fresh = session.current()
        assert fresh is not old and fresh.test is None and not fresh.ended
        assert session.current() is fresh


THREADED = """
import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor

import minigrad as mg
from pytest_graphleak import check, session

kept = []
POOL = ThreadPoolExecutor(max_workers=1)


def leaky_step():
    w = mg.Tensor([1.0], requires_grad=True)
    kept.append(w * 2)


def in_a_thread(work):
    found = []

    def run():
        try:
            found.append(work())
        except BaseException as exc:
            found.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    if isinstance(found[0], BaseException):
        raise found[0]
    return found[0]


def test_thread_start_is_not_patched():
    start = threading.Thread.start
    assert (start.__module__, start.__qualname__) == ("threading", "Thread.start"), start


def test_check_in_a_thread():
    in_a_thread(lambda: check(leaky_step, steps=6, warmup=2, raise_on_leak=True))


def test_pool_started_here():
    assert POOL.submit(lambda: session.current().test.nodeid).result().endswith("started_here")


def test_pool_worker_of_an_earlier_test():
    # The worker belongs to the test running when its check asks, as without the flag.
    nodeid = POOL.submit(lambda: session.current().test.nodeid).result()
    assert nodeid.endswith("of_an_earlier_test")
    handed = contextvars.copy_context()
    nodeid = POOL.submit(handed.run, lambda: session.current().test.nodeid).result()
    assert nodeid.endswith("of_an_earlier_test")
"""


def test_a_thread_the_test_starts_is_the_tests(pytester: pytest.Pytester) -> None:
    """A check in a thread the test started lifts the outlive audit's freeze (its
    diagnosis finds the module's list, made before the test and so frozen by the audit)
    and sees the test; a pool's worker started by an earlier test does not, unless the
    session is handed to it (``contextvars.copy_context().run``)."""
    pytester.makepyfile(test_threaded=THREADED)
    result = pytester.runpytest("--graphleak", "-p", "no:randomly", "-p", "no:cacheprovider")
    # No GraphOutliveWarning: the check's own steps are the check's to judge (the audit's
    # freeze, lifted while the check ran in the thread, takes them in when it resumes).
    result.assert_outcomes(failed=1, passed=3, warnings=0)
    result.stdout.fnmatch_lines(["*held by: global 'kept' -> list*"])


FIT_IN_A_THREAD = """
import threading

import torch
from ignite.engine import Engine
from pytest_graphleak.integrations.ignite import GraphLeakHandler


def test_fit_in_a_thread():
    model = torch.nn.Linear(4, 1)
    kept = []

    def update(engine, batch):
        loss = model(batch).pow(2).mean()
        loss.backward()
        kept.append(loss)
        return loss.item()

    engine = Engine(update)
    GraphLeakHandler(warmup=2).attach(engine)
    batches = [torch.randn(2, 4) for _ in range(20)]
    worker = threading.Thread(target=engine.run, args=(batches,), kwargs={"max_epochs": 1})
    worker.start()
    worker.join()
"""


def test_a_framework_callback_in_a_thread_takes_the_runs_options_and_joins_the_report(
    pytester: pytest.Pytester,
) -> None:
    """A trainer run in a thread the test started: its callback's check reads the run's
    ``--graphleak-warn-only`` (a warning, not an error in the thread) and its result is
    the test's row in the JSON report."""
    if torch is None:
        pytest.skip("torch is not installed")
    pytest.importorskip("ignite")
    pytester.makepyfile(test_fit=FIT_IN_A_THREAD)
    result = pytester.runpytest(
        "--graphleak-warn-only",
        "--graphleak-report=r.json",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*GraphLeakWarning: graphleak: test_fit.py::test_fit_in_a_thread"
            "::ignite(update) leaks: list-accumulation*"
        ]
    )
    document = json.loads((pytester.path / "r.json").read_text())
    assert [(t["nodeid"], t["status"]) for t in document["tests"]] == [
        ("test_fit.py::test_fit_in_a_thread", "warned")
    ]

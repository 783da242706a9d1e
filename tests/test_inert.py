"""Inert without ``--graphleak`` (issue 33, item 7): a project that installs the plugin and
runs its suite without the flag gets nothing patched and nothing set up per test, and no
hook of the plugin runs per test; a test that runs a check (the fixture, ``track()``, a
framework callback) gets what it needs when it first asks, restored at its teardown.

The runs are subprocesses: ``threading.Thread.start`` is process state, which a run of
this suite with ``--graphleak`` patches around each of its own tests.
"""

from __future__ import annotations

import json

import pytest
from suite_helpers import FAST

#: Counts the plugin's hook implementations that pytest calls while the tests run (not
#: at configure or collection), from pluggy's hook-call monitor.
COUNTING_CONFTEST = """
import json
import pytest

CALLS = []


def _ours(plugin):
    name = getattr(plugin, "__name__", None) if isinstance(plugin, type(json)) else None
    return (name or type(plugin).__module__).startswith("pytest_graphleak")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtestloop(session):
    def before(name, impls, kwargs):
        item = kwargs.get("item") or kwargs.get("pyfuncitem") or kwargs.get("report")
        CALLS.extend(
            [getattr(item, "nodeid", "?"), name] for impl in impls if _ours(impl.plugin)
        )

    undo = session.config.pluginmanager.add_hookcall_monitoring(before, lambda *a: None)
    yield
    undo()
    with open("calls.json", "w") as out:
        json.dump(CALLS, out)
"""

PLAIN_TESTS = """
import threading

import pytest

from pytest_graphleak import session
from pytest_graphleak.plugin import LAZY_SESSION_KEY


def _nothing_set_up(request):
    start = threading.Thread.start
    assert (start.__module__, start.__qualname__) == ("threading", "Thread.start"), start
    assert session._CURRENT.get(None) is None  # no session entered in this context
    assert LAZY_SESSION_KEY not in request.node.stash


def test_plain(request):
    _nothing_set_up(request)


@pytest.mark.no_graph_growth(steps=4, warmup=1)
def test_marked_runs_once_as_a_plain_test(request):
    _nothing_set_up(request)


class TestInClass:
    def test_method(self, request):
        _nothing_set_up(request)
"""


def test_without_the_flag_nothing_is_patched_set_up_or_called_per_test(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(COUNTING_CONFTEST)
    pytester.makepyfile(test_plain=PLAIN_TESTS)
    result = pytester.runpytest_subprocess(*FAST)
    result.assert_outcomes(passed=3)
    calls = json.loads((pytester.path / "calls.json").read_text())
    assert calls == []  # no hook implementation of the plugin ran during the tests


def test_with_the_flag_the_per_test_hooks_run(pytester: pytest.Pytester) -> None:
    """The counter sees them when they are there (so the test above proves something)."""
    pytester.makeconftest(COUNTING_CONFTEST)
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    result = pytester.runpytest(*FAST, "--graphleak", "--graphleak-outlive=off")
    result.assert_outcomes(passed=1)
    names = {name for _, name in json.loads((pytester.path / "calls.json").read_text())}
    assert {
        "pytest_runtest_protocol",
        "pytest_runtest_call",
        "pytest_pyfunc_call",
        "pytest_runtest_makereport",
        "pytest_runtest_logreport",
    } <= names


CHECKING_TESTS = """
import logging
import threading
import warnings

import minigrad as mg
import pytest

from pytest_graphleak import session
from pytest_graphleak.plugin import LAZY_SESSION_KEY

log = logging.getLogger("train")
W = mg.Tensor([[0.5, -0.25], [0.125, 1.0]], requires_grad=True)
KEPT = []
SEEN = {}


def loss():
    return ((W * 2.0).tanh()).sum()


def test_fixture_check_gets_its_session_when_asked(request, graphleak):
    made = request.node.stash[LAZY_SESSION_KEY]  # set up by the fixture, for this test
    assert session.current() is made and made.test.nodeid == request.node.nodeid
    start = threading.Thread.start
    assert (start.__module__, start.__qualname__) == ("threading", "Thread.start")
    # What pytest keeps of each step (a log record holding the loss) is released.
    graphleak.check(lambda: log.warning("loss=%s", loss()), steps=6, warmup=2)
    SEEN["made"] = made


def test_the_session_ended_with_its_test(request):
    assert SEEN["made"].ended and SEEN["made"].test is None
    assert LAZY_SESSION_KEY not in request.node.stash
    assert session._CURRENT.get(None) is None


def test_a_thread_started_before_any_check_finds_the_test(request):
    found = []
    go = threading.Event()

    def work():
        go.wait(10)
        found.append(session.current())

    worker = threading.Thread(target=work)
    worker.start()  # started before this test asked for anything
    assert LAZY_SESSION_KEY not in request.node.stash
    go.set()
    worker.join()
    assert found[0] is request.node.stash[LAZY_SESSION_KEY]
    assert found[0].test.nodeid == request.node.nodeid


def test_users_own_list_still_leaks(graphleak):
    def step():
        KEPT.append(loss())

    graphleak.check(step, steps=6, warmup=2)
"""


def test_a_check_without_the_flag_gets_what_it_needs_when_used(pytester: pytest.Pytester) -> None:
    pytest.importorskip("minigrad")
    pytester.makepyfile(test_checks=CHECKING_TESTS)
    result = pytester.runpytest_subprocess(*FAST, "--graphleak-report=r.json")
    result.assert_outcomes(passed=3, failed=1)
    document = json.loads((pytester.path / "r.json").read_text())
    statuses = {test["nodeid"].split("::")[1]: test["status"] for test in document["tests"]}
    assert statuses == {
        "test_fixture_check_gets_its_session_when_asked": "clean",
        "test_users_own_list_still_leaks": "leaked",
    }
    result.stdout.fnmatch_lines(["*held by: global 'KEPT' -> list*"])

"""The per-test hooks, registered only where a run needs them: ``Reports`` puts a
test's check results on its call report (and words a leak's failure), ``Ranks`` runs
the marker (also without --graphleak for a ``world_size=N`` marker), ``Checking``
(--graphleak) gives every test its session and runs the marker on unittest methods.
``need_report_hooks`` registers the report hooks once a run needs them."""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Generator
from typing import Any

import pytest

from pytest_graphleak.exceptions import GraphLeakError, GraphLeakWarning, UnmeasuredError
from pytest_graphleak.plugin import async_tests, stash, terminal
from pytest_graphleak.plugin.failure_repr import one_line_repr, story_repr
from pytest_graphleak.plugin.marker import (
    check_marked,
    check_marked_on_ranks,
    checks_marker,
    refuse_async,
    swap_unittest_method,
)
from pytest_graphleak.plugin.pytest_held import PytestHeld
from pytest_graphleak.plugin.stash import (
    FINDER_KEY,
    ITEM_SETTINGS_KEY,
    MARKER,
    RESULTS_KEY,
    WORLD_SIZE_KEY,
    settings_of,
)
from pytest_graphleak.report.text import render_text
from pytest_graphleak.result import CheckResult
from pytest_graphleak.session import RunningTest, Session, current, entered

#: Plugin objects with per-test hooks, registered only where a run needs them.
CHECKING = "graphleak-checking"
REPORTS = "graphleak-reports"
REPORT_HOOKS = "graphleak-report-hooks"
SESSION_REPORT = "graphleak-session-report"


def need_report_hooks(config: pytest.Config) -> None:
    """Register the per-test hooks that put a test's check results on its report and
    read them into the session's reports (once a run needs them, they stay: pytest asks
    a report's status word again at the end)."""
    manager = config.pluginmanager
    if not manager.has_plugin(REPORTS) and not manager.has_plugin(CHECKING):
        manager.register(Reports(), REPORTS)
    from pytest_graphleak.plugin.session_report import ReportHooks, SessionReport

    reporter = manager.get_plugin(SESSION_REPORT)
    if (
        isinstance(reporter, SessionReport)
        and not isinstance(reporter, ReportHooks)  # a conftest's whole GraphleakSessionReport
        and not manager.has_plugin(REPORT_HOOKS)
    ):
        manager.register(ReportHooks(reporter), REPORT_HOOKS)


class Reports:
    """A test's check results go onto its call report (``report.graphleak``; a fixture's
    that failed its setup or ran in its teardown onto that phase's), and a leak's
    failure reads as the leak. With --graphleak from the start; without it, from the first
    test that runs a check (``need_report_hooks``)."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, Any, None]:
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        results = item.stash.get(RESULTS_KEY, None)
        # A fixture's checks wait for the call's report, but a failed or skipped setup's
        # (no call follows) and a teardown's: on their own phase's report.
        if results and (call.when != "setup" or not report.passed):
            _mark_warned(results, call.excinfo)
            attach(report, results)
            del item.stash[RESULTS_KEY]  # pop, so nothing outlives the report
        # A check run by a fixture (setup or teardown) fails as an ERROR, pytest's word;
        # its text is the same as a check run by the test's body.
        excinfo = call.excinfo
        if excinfo is None or not isinstance(excinfo.value, (GraphLeakError, UnmeasuredError)):
            return
        config = item.config
        style = config.getoption("tbstyle", "auto")
        result = excinfo.value.result
        if getattr(excinfo.value, "graphleak_plain", False):
            # The marker's failure is the report itself: no traceback into the plugin.
            report.longrepr = excinfo.getrepr(style="value")
        elif style not in ("native", "line", "no"):
            # A check of the user's own code (check(), track(), a framework callback,
            # check_distributed()): the same report as the marker's, under the user's line
            # that ran it, not a traceback through the framework with the report as a
            # wall of E lines. --tb=native keeps Python's traceback: every frame, asked for.
            verbose = (config.getoption("verbose") or 0) > 0
            story = str(excinfo.value) if result is None else render_text(result, series=verbose)
            message = (
                story.partition("\n")[0]
                if result is None
                else terminal.crash_message(item, result, call.when)
            )
            report.longrepr = story_repr(item, excinfo, story, message, every_frame=style == "long")
        worker = hasattr(config, "workerinput")  # pytest-xdist's worker
        terminal.colour_failure(
            report.longrepr,  # pattern, held by, stored at, fix
            worker_columns=terminal.columns_of(config) if worker else None,
        )
        crash = getattr(report.longrepr, "reprcrash", None)
        if crash is not None and result is not None:
            # pytest's short summary line reads this: say what leaked, not the exception type.
            crash.message = terminal.crash_message(item, result, call.when)
            if style == "line":
                # One line per failure, at the user's line: not the leak text, not ours.
                report.longrepr = one_line_repr(
                    item, excinfo, crash.message, printed=call.when != "call"
                )


def attach(report: pytest.TestReport, results: list[CheckResult]) -> None:
    """Add ``results`` to ``report.graphleak`` as data, after the checks already on it."""
    earlier = getattr(report, "graphleak", None) or []
    report.graphleak = [*earlier, *(result.to_dict() for result in results)]  # type: ignore[attr-defined]


def _mark_warned(results: list[CheckResult], excinfo: pytest.ExceptionInfo[Any] | None) -> None:
    """Mark the leaks that failed nothing (``CheckResult.warned``): all of them, unless
    the call ended with a leak's error (or its warning raised as an error), in itself or
    in its chain (a framework may wrap it); then all but the check that raised it, or
    none when the error does not say which check it was. None either after an ``xfail``
    exception: unittest's ``expectedFailure`` turns the method's error into one that
    does not say what failed."""
    if excinfo is not None and isinstance(excinfo.value, pytest.xfail.Exception):
        return
    failure = _leak_failure(excinfo.value) if excinfo is not None else None
    raised = getattr(failure, "result", None)  # a GraphLeakWarning names no check
    if failure is not None and raised is None:
        return
    for result in results:
        if result.leaked and result is not raised:
            result.warned = True


def _leak_failure(exc: BaseException | None) -> BaseException | None:
    """A leak's error (or warning raised as an error) in ``exc`` or its chain."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, (GraphLeakError, GraphLeakWarning)):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


class Ranks(Reports):
    """The marker's hooks: with --graphleak, or without it in a run that collected a
    ``world_size=N`` marker (whose ranks run, unjudged, without the flag too)."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> bool | None:
        settings = pyfuncitem.stash.get(ITEM_SETTINGS_KEY, None)
        world_size = pyfuncitem.stash.get(WORLD_SIZE_KEY, 1)
        checking = settings_of(pyfuncitem.config).enabled
        if settings is not None and world_size > 1:
            # Spawned ranks run the test function even without --graphleak (unjudged).
            check_marked_on_ranks(pyfuncitem, settings, world_size=world_size, checking=checking)
            return True
        if settings is None or not checking:
            return None  # unmarked, or checking is off: pytest runs the test once
        function = pyfuncitem.obj
        refuse_async(pyfuncitem, function)
        argnames = getattr(getattr(pyfuncitem, "_fixtureinfo", None), "argnames", None)
        if argnames is None:
            argnames = tuple(inspect.signature(function).parameters)
        funcargs = pyfuncitem.funcargs
        arguments = {name: funcargs[name] for name in argnames}
        check_marked(pyfuncitem, function, arguments, settings, instance=pyfuncitem.instance)
        return True

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, None]:
        """The marker on a unittest.TestCase method (see ``Checking``'s)."""
        original = swap_unittest_method(item)
        try:
            yield
        finally:
            if original is not None:
                item.obj = original  # type: ignore[attr-defined]


class Checking(Ranks):
    """--graphleak: every test has a session, entered for its setup, call and teardown
    (the outlive audit's census is told of its checks), and the marker checks its test."""

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, Any, None]:
        """The checks of a test (its fixtures', its call's, a framework callback's, its
        threads') share one session (a context variable; a thread asks the finder); it
        ends with the test, releasing what is still held."""
        test_session = Session()
        finder = item.config.stash[FINDER_KEY]  # a thread's check finds the test through it
        finder.entered = test_session
        try:
            with entered(test_session):
                yield
        finally:
            finder.entered = None
            test_session.end()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, None]:
        """unittest items never reach ``pytest_pyfunc_call``: their runtest calls
        ``TestCase.run()``, which calls ``getattr(testcase, name)`` after pytest has set
        that attribute to ``item.obj`` (pytest 7 to 9). Swapping ``item.obj`` for a
        checking wrapper for the call phase makes the method one step, run warmup + steps
        times between one setUp and one tearDown (as fixtures are set up once for plain
        tests)."""
        original = swap_unittest_method(item)
        # What pytest keeps of each step (captured log records, warnings, properties) is
        # released before every sample of a check in this test: it is not the user's leak.
        held = PytestHeld(item)
        record = functools.partial(stash.record_result, item)  # looked up now: tests replace it
        test = RunningTest(item.nodeid, settings_of(item.config), record)
        checked_async = checks_marker(item) and async_tests.is_async_test(item)
        # The checks of this call (the marker's, the fixture's, a framework callback's)
        # reach the test through the test's session.
        running = current()
        running.test = test
        running.before_sample.append(held.release)
        try:
            with contextlib.ExitStack() as during:
                if checked_async:
                    during.enter_context(async_tests.anyio_steps(item))
                outcome = yield
            if checked_async and outcome.excinfo is None and not item.stash.get(RESULTS_KEY, None):
                # A plugin ran the coroutine itself, once: no silent pass.
                pytest.fail(async_tests.unchecked_refusal(item, MARKER), pytrace=False)
        finally:
            running.test = None
            with contextlib.suppress(ValueError):
                running.before_sample.remove(held.release)
            held.close()
            if original is not None:
                item.obj = original  # type: ignore[attr-defined]
            from pytest_graphleak.loop import close_open_checks

            close_open_checks()  # a loop that raised through a framework left one open

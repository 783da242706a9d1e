"""pytest wiring only: options, the ``no_graph_growth`` marker, the ``graphleak``
fixture and the hooks that carry results to the session reporter. The plugin never
measures (``tracker``/``probes`` do) and never decides (``verdict`` does). Results travel
on the call-phase report as ``report.graphleak``: a list of ``CheckResult.to_dict()``
(plain JSON data, so it crosses pytest-xdist unchanged).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import sys
import threading
from collections.abc import Callable, Generator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_graphleak import api, distributed, options, patterns, pipeline
from pytest_graphleak.api import Track
from pytest_graphleak.exceptions import GraphLeakError, GraphLeakWarning, UnmeasuredError
from pytest_graphleak.heap.usercode import is_pytest_module
from pytest_graphleak.options import CheckOptions, OptionError, Settings, TrackOptions
from pytest_graphleak.plugin import async_tests, terminal
from pytest_graphleak.plugin.baseline import mark_known
from pytest_graphleak.plugin.failure_repr import one_line_repr
from pytest_graphleak.plugin.pytest_held import PytestHeld
from pytest_graphleak.plugin.subtests_once import subtests_reported_once
from pytest_graphleak.report.ascii_text import degrade_to_ascii, restore
from pytest_graphleak.report.text import render_text
from pytest_graphleak.result import CheckResult
from pytest_graphleak.session import (
    RunningTest,
    Session,
    current,
    entered,
    push_finder,
    remove_finder,
)
from pytest_graphleak.values import int_at_least

if TYPE_CHECKING:
    from typing_extensions import Unpack


MARKER = terminal.MARKER

SETTINGS_KEY = pytest.StashKey[Settings]()
ITEM_SETTINGS_KEY = pytest.StashKey[Settings]()
RESULTS_KEY = pytest.StashKey["list[CheckResult]"]()
WORLD_SIZE_KEY = pytest.StashKey[int]()
ASCII_KEY = pytest.StashKey["list[tuple[Any, str]]"]()
FINDER_KEY = pytest.StashKey["_TestFinder"]()
#: The session a test got when it first ran a check without --graphleak.
LAZY_SESSION_KEY = pytest.StashKey[Session]()

#: Plugin objects with per-test hooks, registered only where a run needs them.
_CHECKING = "graphleak-checking"
_REPORTS = "graphleak-reports"
_REPORT_HOOKS = "graphleak-report-hooks"
_SESSION_REPORT = "graphleak-session-report"

#: Fixture values never offered to the diagnosis as roots (pytest's own objects).
_INTERNAL_FIXTURES = frozenset({"request", "graphleak", "pytestconfig"})


_MARKER_HELP = (
    "the test body is ONE training step. With --graphleak it is called warmup + steps "
    "times with the same fixture values and fails when alive tensors, graph nodes, cyclic "
    "garbage or memory keep growing; the failure names the pattern "
    f"({patterns.words_text()}). Without --graphleak the test runs once. "
    "world_size=N > 1: the test function is a step factory run on N torch.distributed "
    "ranks (gloo), each rank checked."
)


# -- configuration --------------------------------------------------------------------
def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    options.add_options(parser)
    # The per-test hooks are registered now, with this module (before any conftest, whose
    # tryfirst hooks then still come first), and taken off at configure without the flag.
    if not pluginmanager.has_plugin(_CHECKING):
        pluginmanager.register(_Checking(), _CHECKING)


def pytest_configure(config: pytest.Config) -> None:
    # The keywords come from the options table; world_size is the marker's own.
    signature = f"{options.marker_signature()}, world_size=N"
    config.addinivalue_line("markers", f"{MARKER}({signature}): {_MARKER_HELP}")
    config.addinivalue_line("markers", terminal.OPT_OUT_HELP)
    try:
        config.stash[SETTINGS_KEY] = options.settings_from_config(config)
    except OptionError as exc:
        raise pytest.UsageError(f"graphleak: {exc}") from None
    settings = settings_of(config)
    manager = config.pluginmanager
    auditing = settings.enabled and settings.outlive != "off"
    if auditing and not manager.has_plugin("graphleak-outlive-audit"):
        from pytest_graphleak.plugin import audit  # only when it runs: half of our import

        manager.register(audit.OutliveAudit(settings), "graphleak-outlive-audit")
    if not manager.has_plugin(_SESSION_REPORT):
        from pytest_graphleak.plugin.session_report import SessionReport

        manager.register(SessionReport(config, settings), _SESSION_REPORT)
    # Inert without --graphleak (as pytest-memray is without --memray): no hook of ours
    # runs per test until a test runs a check; then it gets its session (_TestFinder).
    if settings.enabled:
        if not manager.has_plugin(_CHECKING):
            manager.register(_Checking(), _CHECKING)
        need_report_hooks(config)
    elif isinstance(manager.get_plugin(_CHECKING), _Checking):
        manager.unregister(name=_CHECKING)
    finder = _TestFinder(lazy=not settings.enabled)
    config.stash[FINDER_KEY] = finder
    push_finder(finder)


def need_report_hooks(config: pytest.Config) -> None:
    """Register the per-test hooks that put a test's check results on its report and
    read them into the session's reports (once a run needs them, they stay: pytest asks
    a report's status word again at the end)."""
    manager = config.pluginmanager
    if not manager.has_plugin(_REPORTS) and not manager.has_plugin(_CHECKING):
        manager.register(_Reports(), _REPORTS)
    from pytest_graphleak.plugin.session_report import ReportHooks, SessionReport

    reporter = manager.get_plugin(_SESSION_REPORT)
    if (
        isinstance(reporter, SessionReport)
        and not isinstance(reporter, ReportHooks)  # a conftest's whole GraphleakSessionReport
        and not manager.has_plugin(_REPORT_HOOKS)
    ):
        manager.register(ReportHooks(reporter), _REPORT_HOOKS)


def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    finder = config.stash.get(FINDER_KEY, None)
    if finder is not None:
        finder.session = session
    if config.pluginmanager.has_plugin("dsession"):
        # pytest-xdist's controller: the workers run the checks, their reports come here.
        need_report_hooks(config)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    terminal_file = getattr(getattr(reporter, "_tw", None), "_file", None)
    if terminal_file is not None and config.getoption("capture", "fd") != "no":
        # pytest's terminal on a stdout that is not UTF-8 (its writer's file, which the
        # test's own output never reaches while captured): sparklines in ASCII, not "\u2581".
        config.stash[ASCII_KEY] = degrade_to_ascii(terminal_file)


def pytest_unconfigure(config: pytest.Config) -> None:
    restore(config.stash.get(ASCII_KEY, []))
    finder = config.stash.get(FINDER_KEY, None)
    if finder is not None:
        remove_finder(finder)
        finder.session = None


def settings_of(config: pytest.Config) -> Settings:
    return config.stash.get(SETTINGS_KEY, None) or Settings()


def marker_settings(item: pytest.Item, base: Settings) -> Settings | None:
    """Settings of a marked test (closest marker wins per keyword); None if unmarked.
    ``world_size`` is a marker-only keyword (no CLI/ini twin): it goes to the item's
    stash, not to the settings shared with the fixture."""
    markers = list(item.iter_markers(MARKER))
    if not markers:
        return None
    values: dict[str, object] = {}
    where = f"@pytest.mark.{MARKER} on {item.nodeid}"
    for marker in reversed(markers):  # farthest first, so the closest overrides
        if marker.args:
            raise OptionError(
                f"{where}: takes keyword arguments only (steps=, warmup=, ...), "
                f"got positional {', '.join(map(repr, marker.args))}"
            )
        values.update(marker.kwargs)
    world_size = values.pop("world_size", 1)
    try:
        world_size = int_at_least("world_size", world_size, 1)
    except OptionError as exc:
        raise OptionError(f"{where}: {exc}") from None
    item.stash[WORLD_SIZE_KEY] = world_size
    shown = ", ".join(f"{key}={value!r}" for key, value in values.items())
    return base.override(values, where=f"@pytest.mark.{MARKER}({shown}) on {item.nodeid}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Validate every marker before anything runs: a bad argument is a usage error."""
    base = settings_of(config)
    errors = []
    on_ranks = False
    for item in items:
        if MARKER not in item.keywords:  # a third of iter_markers' cost, on every test
            continue
        try:
            settings = marker_settings(item, base)
        except OptionError as exc:
            errors.append(str(exc))
            continue
        if settings is not None:
            item.stash[ITEM_SETTINGS_KEY] = settings
            on_ranks |= item.stash.get(WORLD_SIZE_KEY, 1) > 1
    if errors:
        raise pytest.UsageError("graphleak: " + "\ngraphleak: ".join(errors))
    manager = config.pluginmanager
    if on_ranks and not manager.has_plugin(_CHECKING):
        # Without --graphleak a world_size=N marker still runs its ranks (unjudged).
        manager.register(_Ranks(), _CHECKING)
        need_report_hooks(config)


# -- the marker -------------------------------------------------------------------------
def _refuse_async(item: pytest.Item, function: Callable[..., object]) -> None:
    __tracebackhide__ = True
    if (
        inspect.iscoroutinefunction(function)
        or inspect.isasyncgenfunction(function)
        or inspect.isgeneratorfunction(function)
    ):
        pytest.fail(
            f"{item.nodeid}: @pytest.mark.{MARKER} needs a plain (synchronous, "
            "non-generator) test function: its body is called as one training step. "
            "Move the step into a plain function, or use the graphleak fixture; an "
            "async def test function (not a unittest.IsolatedAsyncioTestCase method) is "
            "checked when an async test plugin runs it (pytest-asyncio, pytest-trio, "
            "anyio: @pytest.mark.anyio).",
            pytrace=False,
        )


def _check_marked(
    item: pytest.Function,
    function: Callable[..., object],
    arguments: dict[str, object],
    settings: Settings,
    *,
    instance: object | None,
) -> None:
    """The marker's check: ``function(**arguments)`` is one step."""
    __tracebackhide__ = True
    funcargs = item.funcargs
    progress = terminal.Progress(item.config, settings.warmup + settings.steps)

    def step() -> None:
        progress.tick()
        outcome = function(**arguments)
        if inspect.isawaitable(outcome) or inspect.isgenerator(outcome):
            close = getattr(outcome, "close", None)
            if close is not None:
                close()
            raise TypeError(f"{item.nodeid} returned {type(outcome).__name__}")

    def roots() -> dict[str, object]:
        found: dict[str, object] = {
            f"fixture '{name}'": value
            for name, value in funcargs.items()
            if name not in _INTERNAL_FIXTURES and not is_pytest_module(type(value).__module__)
        }
        if instance is not None:
            found["self"] = instance
        return found

    exclude = (id(arguments), id(funcargs))
    with subtests_reported_once(funcargs, item.config):
        _measure_and_record(item, step, settings, item.nodeid, roots, exclude, from_marker=True)


def _check_marked_on_ranks(
    item: pytest.Function, settings: Settings, *, world_size: int, checking: bool
) -> None:
    """``@pytest.mark.no_graph_growth(world_size=N)``: the marked test function is each
    spawned rank's step factory; without ``--graphleak`` each rank runs it once, unjudged.
    It cannot take fixtures or be parametrized: fixture values live in this process."""
    __tracebackhide__ = True
    function = item.obj
    where = f"{item.nodeid}: @pytest.mark.{MARKER}(world_size={world_size})"
    fixtures = [n for n in getattr(item, "fixturenames", ()) if n != "request"]
    if getattr(item, "instance", None) is not None or hasattr(item, "callspec") or fixtures:
        pytest.fail(
            f"{where} runs the test function in spawned ranks, so it must be a module-level "
            "function without fixtures or parameters; use the graphleak fixture's "
            "check_distributed(step_factory) instead",
            pytrace=False,
        )
    path = str(Path(str(item.path)).resolve())
    ref = distributed.FactoryRef(function.__module__, path, function.__qualname__)
    if not checking:
        settings = dataclasses.replace(settings, steps=1, warmup=0, diagnose=False)
    _check_on_ranks(item, ref, settings, judge=checking, world_size=world_size, name=item.nodeid)


def _checks_marker(item: pytest.Item) -> bool:
    """A marked test that ``--graphleak`` checks in this process (not on spawned ranks)."""
    return (
        item.stash.get(ITEM_SETTINGS_KEY, None) is not None
        and item.stash.get(WORLD_SIZE_KEY, 1) == 1
        and settings_of(item.config).enabled
    )


def record_result(item: pytest.Item, result: CheckResult) -> None:
    """Add a result made outside the marker and the fixture (a framework callback) to the
    test's results: its report, the JSON, the summary (``session.RunningTest.record``)."""
    _record(item, result)


def _swap_unittest_method(item: pytest.Item) -> Any:
    """Put the checking wrapper in place of a marked TestCase method; the method it
    replaced, or None when nothing was swapped."""
    settings = item.stash.get(ITEM_SETTINGS_KEY, None)
    unittest = sys.modules.get("unittest")
    cls = getattr(item, "cls", None)
    if settings is None or unittest is None or not isinstance(item, pytest.Function):
        return None
    if not (isinstance(cls, type) and issubclass(cls, unittest.TestCase)):
        return None
    checking = settings_of(item.config).enabled
    world_size = item.stash.get(WORLD_SIZE_KEY, 1)
    if not checking and world_size == 1:
        return None  # checking is off: the method runs once, as unittest runs it
    method = item.obj
    instance = getattr(method, "__self__", None)

    def checked() -> None:
        __tracebackhide__ = True
        if world_size > 1:
            pytest.fail(
                f"{item.nodeid}: @pytest.mark.{MARKER}(world_size={world_size}) is not "
                "supported on unittest.TestCase methods (the ranks run a module-level "
                "step factory). Use a plain test function for the distributed check.",
                pytrace=False,
            )
        _refuse_async(item, method)
        _check_marked(item, method, {}, settings, instance=instance)

    # Keep what unittest reads from the method: @unittest.skip, @expectedFailure.
    functools.update_wrapper(checked, method)
    del checked.__wrapped__  # type: ignore[attr-defined]  # no reference to the instance
    item.obj = checked
    return method


def _measure_and_record(
    item: pytest.Item,
    step: Callable[[], object],
    settings: Settings,
    name: str,
    roots: Callable[[], Mapping[str, object]],
    exclude: tuple[int, ...],
    *,
    from_marker: bool,
) -> CheckResult:
    """Check ``step``, record the result on the test, fail (or warn) on a leak."""
    __tracebackhide__ = True
    try:
        result = pipeline.measure(step, settings=settings, name=name, diagnose_step=step,
                             roots=roots, exclude=exclude)  # fmt: skip
    except (pytest.skip.Exception, pytest.xfail.Exception):
        raise  # the test declared its own outcome (skip, xfail): pytest reports it
    except BaseException as exc:
        # Every way a step ends gets a row: an assert, pytest.fail(), SystemExit, a
        # pytest-timeout at step k, Ctrl-C.
        _record(item, pipeline.error_result(name, steps=settings.steps, warmup=settings.warmup,
                                            exc=exc))  # fmt: skip
        raise
    _record(item, result)
    if result.known or not (result.leaked or result.unmeasured):
        return result
    if warns_instead(item, settings):
        terminal.warn_leak(item, result, GraphLeakWarning)
        return result
    # An unmeasured check fails too: "clean" with nothing measured is a silent pass.
    text = render_text(result, series=(item.config.getoption("verbose") or 0) > 0)  # -v: samples
    error = pipeline.failure(text, leaked=result.leaked, result=result)
    error.graphleak_plain = from_marker  # type: ignore[attr-defined]
    raise error


def warns_instead(item: pytest.Item, settings: Settings) -> bool:
    """Whether a leak warns rather than fails: warn-only mode, except in a test that is
    expected to fail (``xfail``), where the leak is that expected failure: warning
    would make the test pass and turn a strict xfail red as XPASS(strict)."""
    return settings.warn_only and not _expects_leak_failure(item)


def _expects_leak_failure(item: pytest.Item) -> bool:
    """True when pytest would count a GraphLeakError in this test as its expected
    failure: an ``xfail`` mark whose condition holds, without ``--runxfail``, whose
    ``raises=`` (if any) admits an AssertionError."""
    if item.config.getoption("runxfail", default=False):
        return False
    try:
        from _pytest.skipping import xfailed_key
    except ImportError:  # pytest moved its private key: keep the plain warn-only rule
        return False
    xfailed = item.stash.get(xfailed_key, None)
    if xfailed is None or xfailed.raises is None:
        return xfailed is not None
    raises = xfailed.raises
    try:
        return isinstance(raises, (type, tuple)) and issubclass(GraphLeakError, raises)
    except TypeError:  # a tuple holding something other than classes
        return False


def _check_on_ranks(
    item: pytest.Item,
    factory: distributed.FactoryLike,
    settings: Settings,
    *,
    judge: bool = True,
    **group: Any,
) -> distributed.DistributedResult:
    """Every rank's result goes into the test's report; with ``judge``, a leak on any rank
    (not a known one: the baseline file's) fails the test naming the rank (warns in
    warn-only mode), and so does a rank that measured nothing, as a single-process check."""
    __tracebackhide__ = True
    result = distributed.check_distributed(
        factory, raise_on_leak=False, on_result=functools.partial(_record, item),
        settings=settings, **group,
    )  # fmt: skip
    new = [r for r in result.ranks if r.leaked and not getattr(r.result, "known", False)]
    if not judge or not (new or result.unmeasured_ranks):
        return result
    text = result.leak_text() if new else result.unmeasured_text()
    pipeline.raise_or_warn(text, leaked=bool(new), warn=warns_instead(item, settings), stacklevel=2)
    return result


def _record(item: pytest.Item, result: CheckResult) -> None:
    # Plain data, made into the report's dicts when the report is made: a window judged
    # inside a training loop does not pay ~0.1 ms for asdict() on the loop's time.
    mark_known(item, result)  # a leak listed in the baseline file: known, it fails nothing
    item.stash.setdefault(RESULTS_KEY, []).append(result)


# -- per-test hooks: registered only where a run needs them --------------------------------
class _Reports:
    """A test's check results go onto its call report (``report.graphleak``), and a leak's
    failure reads as the leak. With --graphleak from the start; without it, from the first
    test that runs a check (``need_report_hooks``)."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, Any, None]:
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        if call.when != "call":
            return
        results = item.stash.get(RESULTS_KEY, None)
        if results:
            _mark_warned(results, call.excinfo)
            report.graphleak = [result.to_dict() for result in results]  # type: ignore[attr-defined]
            del item.stash[RESULTS_KEY]  # pop, so nothing outlives the report
        excinfo = call.excinfo
        if excinfo is None or not isinstance(excinfo.value, (GraphLeakError, UnmeasuredError)):
            return
        if getattr(excinfo.value, "graphleak_plain", False):
            # The marker's failure is the report itself: no traceback into the plugin.
            report.longrepr = excinfo.getrepr(style="value")
            terminal.colour_failure(report.longrepr)  # pattern, held by, stored at, fix
        crash = getattr(report.longrepr, "reprcrash", None)
        if crash is not None and excinfo.value.result is not None:
            # pytest's short summary line reads this: say what leaked, not the exception type.
            crash.message = terminal.crash_message(item, excinfo.value.result)
            if item.config.getoption("tbstyle", "auto") == "line":
                # One line per failure, at the user's line: not the leak text, not ours.
                report.longrepr = one_line_repr(item, excinfo, crash.message)


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


class _Ranks(_Reports):
    """The marker's hooks: with --graphleak, or without it in a run that collected a
    ``world_size=N`` marker (whose ranks run, unjudged, without the flag too)."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> bool | None:
        settings = pyfuncitem.stash.get(ITEM_SETTINGS_KEY, None)
        world_size = pyfuncitem.stash.get(WORLD_SIZE_KEY, 1)
        checking = settings_of(pyfuncitem.config).enabled
        if settings is not None and world_size > 1:
            # Spawned ranks run the test function even without --graphleak (unjudged).
            _check_marked_on_ranks(pyfuncitem, settings, world_size=world_size,
                                   checking=checking)  # fmt: skip
            return True
        if settings is None or not checking:
            return None  # unmarked, or checking is off: pytest runs the test once
        function = pyfuncitem.obj
        _refuse_async(pyfuncitem, function)
        argnames = getattr(getattr(pyfuncitem, "_fixtureinfo", None), "argnames", None)
        if argnames is None:
            argnames = tuple(inspect.signature(function).parameters)
        funcargs = pyfuncitem.funcargs
        arguments = {name: funcargs[name] for name in argnames}
        _check_marked(pyfuncitem, function, arguments, settings, instance=pyfuncitem.instance)
        return True

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, None]:
        """The marker on a unittest.TestCase method (see ``_Checking``'s)."""
        original = _swap_unittest_method(item)
        try:
            yield
        finally:
            if original is not None:
                item.obj = original  # type: ignore[attr-defined]


class _Checking(_Ranks):
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
        original = _swap_unittest_method(item)
        # What pytest keeps of each step (captured log records, warnings, properties) is
        # released before every sample of a check in this test: it is not the user's leak.
        held = PytestHeld(item)
        record = functools.partial(record_result, item)
        test = RunningTest(item.nodeid, settings_of(item.config), record)
        checked_async = _checks_marker(item) and async_tests.is_async_test(item)
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
            if (checked_async and outcome.excinfo is None
                    and not item.stash.get(RESULTS_KEY, None)):  # fmt: skip
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


# -- without --graphleak: a test's session, made when it first runs a check ----------------
class _TestFinder:
    """What ``session.current()`` asks in a context with no session of this run (a
    thread's). With --graphleak, ``_Checking`` sets ``entered`` while a test runs. Without
    it, the test pytest runs now (the top of its setup stack) gets its session when a
    check first asks for it, ended at the test's teardown. ``session``: pytest's session."""

    def __init__(self, *, lazy: bool) -> None:
        self.lazy = lazy
        self.session: pytest.Session | None = None
        self.entered: Session | None = None
        self._lock = threading.Lock()  # two threads of one test asking at once

    def __call__(self) -> Session | None:
        if not self.lazy:
            return self.entered
        item = _running_item(self.session)
        if item is None:
            return None
        found = item.stash.get(LAZY_SESSION_KEY, None)
        if found is None:
            with self._lock:
                found = item.stash.get(LAZY_SESSION_KEY, None)
                if found is None:
                    found = _start_session(item)
        return found


def _running_item(session: pytest.Session | None) -> pytest.Item | None:
    """The test pytest is setting up, running or has not yet begun to tear down: the
    last node on pytest's setup stack when it is an item (pytest 7 to 9 keep one, a
    dict; its teardown takes the item off before the item's finalizers run)."""
    stack = getattr(getattr(session, "_setupstate", None), "stack", None)
    if not stack:
        return None
    try:
        node = next(reversed(stack))
    except (TypeError, StopIteration, RuntimeError):  # changed meanwhile by pytest's thread
        return None
    return node if isinstance(node, pytest.Item) else None


def _start_session(item: pytest.Item) -> Session:
    """The session of a test that runs a check without --graphleak: what ``_Checking``
    sets up for every test with it (the running test, pytest's kept objects released
    before each sample), ended by a finalizer of the test. Its results need the report
    hooks, registered now."""
    held = PytestHeld(item)
    test = RunningTest(item.nodeid, settings_of(item.config),
                       functools.partial(record_result, item))  # fmt: skip
    made = Session(test=test, before_sample=[held.release])
    item.stash[LAZY_SESSION_KEY] = made
    need_report_hooks(item.config)

    def end() -> None:
        from pytest_graphleak.loop import close_open_checks

        with contextlib.suppress(KeyError):
            del item.stash[LAZY_SESSION_KEY]
        try:
            close_open_checks(of=made)  # a loop that raised through a framework left one open
        finally:
            held.close()
            made.end()

    item.addfinalizer(end)
    return made


@pytest.hookimpl(tryfirst=True)  # pytest prints header lines in reverse: ours comes last
def pytest_report_header(config: pytest.Config) -> str | None:
    return terminal.header_line(settings_of(config))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if settings_of(terminalreporter.config).enabled:
        return
    reports = [r for group in terminalreporter.stats.values() for r in group]
    if hint := terminal.unchecked_hint(reports):
        terminalreporter.write_line(hint, yellow=True)


# -- the fixture ------------------------------------------------------------------------
class GraphleakFixture:
    """``graphleak.check(step, steps=, warmup=)`` and ``with graphleak.track() as t``.

    Both fail the test with GraphLeakError (the same report as the marker) on a leak,
    with or without ``--graphleak``; in warn-only mode they warn instead.
    """

    def __init__(self, item: pytest.Item, settings: Settings) -> None:
        self._item = item
        self._settings = settings
        self._checks = 0

    def resolve(self, what: str, values: Mapping[str, object], place: str = "check") -> Settings:
        """The test's settings with call keywords applied; ValueError names the call."""
        where = f"graphleak.{what} in {self._item.nodeid}"
        try:
            return self._settings.override(values, where=where, place=place)
        except OptionError as exc:
            raise ValueError(str(exc)) from None

    def check(self, step: Callable[[], object], **options: Unpack[CheckOptions]) -> CheckResult:
        """Run ``step`` warmup + steps times; fail the test if it leaks. Keywords: the
        options that apply to "check" (``pytest_graphleak.options``)."""
        __tracebackhide__ = True
        api.require_runnable(step, f"graphleak.check(step) in {self._item.nodeid}")
        settings = self.resolve("check()", options)
        self._checks += 1
        name = f"{self._item.nodeid}::check({getattr(step, '__qualname__', 'step')})"
        roots = api.roots_of_frame(sys._getframe(1), exclude=(id(self),))
        return _measure_and_record(self._item, step, settings, name, roots, (id(self),),
                                   from_marker=False)  # fmt: skip

    def track(self, **options: Unpack[TrackOptions]) -> Track:
        """``with graphleak.track(warmup=3) as t:`` ... ``t.step()`` after each step;
        with ``steps=N`` judged (and diagnosed) at step warmup + N, inside the loop."""
        settings = self.resolve("track()", options, place="track")
        steps = settings.steps if options.get("steps") is not None else None
        self._checks += 1
        name = f"{self._item.nodeid}::track({self._checks})"

        warn = warns_instead(self._item, settings)

        def on_result(result: CheckResult) -> None:
            _record(self._item, result)
            if result.leaked and warn and not result.known:
                terminal.warn_leak(self._item, result, GraphLeakWarning)

        return Track(settings=settings, name=name, raise_on_leak=not warn,
                     on_result=on_result, steps=steps)  # fmt: skip

    def check_distributed(
        self,
        step_factory: distributed.FactoryLike,
        *,
        world_size: int = 2,
        backend: str = "gloo",
        timeout: float | None = None,
        start_timeout: float | None = None,
        **options: Unpack[CheckOptions],
    ) -> distributed.DistributedResult:
        """Check a step on N torch.distributed ranks: ``step_factory`` (a module-level
        function or "module:function") builds each rank's step. The fixture's settings
        (ini, CLI, these keywords) go to every rank, each rank's result goes into the
        test report, and a leak on any rank fails the test naming the rank (warns in
        warn-only mode); a rank that raised, crashed or hung fails it with its
        traceback. See ``pytest_graphleak.distributed.check_distributed``."""
        __tracebackhide__ = True
        settings = self.resolve("check_distributed()", options)
        label = distributed.factory_label(step_factory)
        return _check_on_ranks(
            self._item, step_factory, settings, world_size=world_size, backend=backend,
            timeout=distributed.DEFAULT_TIMEOUT_S if timeout is None else timeout,
            start_timeout=(distributed.DEFAULT_START_TIMEOUT_S if start_timeout is None
                           else start_timeout),
            name=f"{self._item.nodeid}::check_distributed({label})",
        )  # fmt: skip


@pytest.fixture
def graphleak(request: pytest.FixtureRequest) -> GraphleakFixture:
    """Check a step function (``graphleak.check(step, steps=, warmup=)``) or a hand-written
    loop (``with graphleak.track(warmup=) as t: ... t.step()``) for autograd graph leaks;
    fails the test with the same report as @pytest.mark.no_graph_growth. Works with or
    without --graphleak."""
    # Without --graphleak the test's session is made now, before its body runs: the
    # warnings list it releases is pytest's, not one the body opens (PytestHeld).
    current()
    return GraphleakFixture(request.node, settings_of(request.config))

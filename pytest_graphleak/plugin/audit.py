"""The outlive audit's pytest hooks: with ``--graphleak``, every test (marked or not) is
checked after its teardown for autograd graphs it made that are still alive
(docs/getting-started.md, "Checking a whole suite").

pytest wiring only: the audit itself is ``outlive/`` (the census, the roots and the
keep list, the explanation, what a re-run records: ``outlive.Audit``). These hooks begin
the census with the call phase (not for ``@pytest.mark.graphleak_outlive_ok``), hand the
audit the test after its teardown and the wider-scope fixtures as pytest sets them up
and finalises them, run a test once more for its sites (``plugin/outlive_rerun``), and
warn (``GraphOutliveWarning``) or fail the test at its teardown (``GraphOutliveError``).
Results travel on the teardown report as ``report.graphleak`` (plain data, so they cross
pytest-xdist), where the session reporter adds them to the test's row.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Generator
from typing import Any

import pytest

from pytest_graphleak.exceptions import GraphOutliveError, GraphOutliveWarning
from pytest_graphleak.outlive import Audit, AuditedTest, Census, FixtureDef, root_of
from pytest_graphleak.patterns import RETAINED_GRAD_FN
from pytest_graphleak.plugin import outlive_rerun
from pytest_graphleak.plugin.baseline import FIXTURE_FINDINGS, FIXTURES_JUDGED, unknown
from pytest_graphleak.plugin.session_report import AUDITED
from pytest_graphleak.plugin.terminal import OPT_OUT, columns_of, summary_room, warn_at_test
from pytest_graphleak.report.model import results_of
from pytest_graphleak.report.text import render_text, wrap_line
from pytest_graphleak.result import CheckResult
from pytest_graphleak.settings import Settings

_CENSUS_KEY = pytest.StashKey[Census]()
_FOUND_KEY = pytest.StashKey["list[CheckResult]"]()
#: Roots of the chains of this test's leaked step checks: the audit does not repeat them.
_CHECKED_ROOTS_KEY = pytest.StashKey["set[str]"]()
#: The census ran to its end (the session report counts the tests audited).
_AUDITED_KEY = pytest.StashKey[bool]()
#: The wider-scope fixture instances judged at this test's teardown (``FIXTURES_JUDGED``).
_TORN_DOWN_KEY = pytest.StashKey["list[list[str]]"]()
#: Findings of fixtures this test did not request, torn down in its teardown
#: (``FIXTURE_FINDINGS``): the session's, carried by its report to the session reporter.
_THEIRS_KEY = pytest.StashKey["list[CheckResult]"]()


class OutliveAudit:
    """The plugin object, registered when ``--graphleak`` is on and the audit is not off."""

    def __init__(self, settings: Settings) -> None:
        self.mode = settings.outlive
        self.audit = Audit(
            keep=settings.outlive_keep,
            sites=settings.outlive_sites,
            verify_fix=settings.verify_fix != "off",
        )
        #: The test whose protocol runs (a fixture's teardown is judged during it).
        self._item: pytest.Item | None = None

    @property
    def notes(self) -> set[str]:
        return self.audit.notes

    # -- the census -------------------------------------------------------------------
    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, None]:
        rerun = self.audit.rerun
        if rerun is not None:  # the test's second run: record its sites
            rerun.call_begins()
            outcome = None
            try:
                outcome = yield
            finally:
                rerun.call_ends(_raised(outcome))
            return
        census = None
        if item.get_closest_marker(OPT_OUT) is None:
            census = item.stash[_CENSUS_KEY] = self.audit.census()
        try:
            yield
        finally:
            if census is not None:
                census.stop_recording()

    # trylast: after pytest's own teardown has finalised the fixtures. A plain hook, not
    # a wrapper, so that a failure is the teardown's error; when the teardown itself
    # raised, this does not run and the census is abandoned in makereport.
    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        audit = self.audit
        if audit.rerun is not None:
            return  # the re-run's teardown: judged by the run that started it
        census = item.stash.get(_CENSUS_KEY, None)
        if census is not None:
            del item.stash[_CENSUS_KEY]
        results: list[CheckResult] = []
        test = audited(item)
        with audit.quiet(item.nodeid):
            if census is not None:
                checked = item.stash.get(_CHECKED_ROOTS_KEY, set())
                results = audit.audit(test, census, checked=checked, rerun=_Rerun(item, nextitem))
                item.stash[_AUDITED_KEY] = True
        results.extend(audit.judged())  # judged at the fixture teardowns just done
        torn = audit.torn_down()
        if torn:  # the baseline: entries keyed on these instances were checked
            item.stash[_TORN_DOWN_KEY] = [[t.fixture, t.scope, t.node] for t in torn]
        audit.requested(test)
        with audit.quiet(item.nodeid):
            results.extend(audit.judge_pending(test))
        theirs = [r for r in results if not _charged_to(r, item.nodeid)]
        if theirs:  # a fixture this test did not request: the session's, on no test
            results = [r for r in results if _charged_to(r, item.nodeid)]
            for result in unknown(item, theirs):  # marks the known ones
                result.warned = self.mode != "fail"
            item.stash[_THEIRS_KEY] = theirs
        if not results:
            return
        new = unknown(item, results)  # one listed in the baseline file is known: no error
        item.stash[_FOUND_KEY] = results
        if not new:
            return
        if self.mode == "fail":
            raise GraphOutliveError("\n".join(render_text(result) for result in new), results)
        # The warning points to the graphleak report section, which tells the story (its
        # row of the test): a finding is told once.
        warn_at_test(item, GraphOutliveWarning, outlive_pointer(new))

    # -- wider-scope fixtures ----------------------------------------------------------
    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, Any, None]:
        self._item = item
        self.audit.judged()  # left by a teardown that raised before it was reported
        self.audit.torn_down()
        try:
            yield
        finally:
            self._item = None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(
        self, fixturedef: FixtureDef, request: pytest.FixtureRequest
    ) -> Generator[None, Any, None]:
        """The ``request.cls`` attributes a class-scoped fixture sets are its own."""
        cls = request_cls(request) if fixturedef.scope == "class" else None
        before = self.audit.class_attributes(cls)
        outcome = yield
        self.audit.fixture_set_up(
            fixturedef, cls, before, scope_node(request), defined_at(fixturedef)
        )
        add = getattr(fixturedef, "addfinalizer", None)
        if fixturedef.scope != "function" and add is not None and outcome.excinfo is None:
            # finalizers run last first: this one before the fixture's own teardown code
            add(lambda: self._finalising(fixturedef))

    def _finalising(self, fixturedef: FixtureDef) -> None:
        """A wider-scope fixture is about to be torn down (``Audit.fixture_finalising``)."""
        item = self._item
        census = item.stash.get(_CENSUS_KEY, None) if item is not None else None
        if census is not None and item is not None:
            self.audit.fixture_finalising(fixturedef, audited(item), census)

    def pytest_fixture_post_finalizer(
        self, fixturedef: FixtureDef, request: pytest.FixtureRequest
    ) -> None:
        """A wider-scope fixture's finalizers ran: what the graphs the tests handed it are
        still kept by is named now (``Audit.fixture_finalised``)."""
        item = self._item
        self.audit.fixture_finalised(fixturedef, audited(item) if item is not None else None)

    # -- reports --------------------------------------------------------------------------
    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, Any, None]:
        outcome = yield
        if self.audit.rerun is not None:
            return  # the re-run's reports are dropped
        report: pytest.TestReport = outcome.get_result()
        if call.when == "call":
            checks = getattr(report, "graphleak", None) or []
            roots = {root_of(c) for c in results_of(checks) if c.leaked}
            item.stash[_CHECKED_ROOTS_KEY] = {root for root in roots if root}
            return
        if call.when != "teardown":
            return
        census = item.stash.get(_CENSUS_KEY, None)
        if census is not None:  # the teardown raised before the audit ran
            del item.stash[_CENSUS_KEY]
            census.abandon()
        if item.stash.get(_AUDITED_KEY, False):
            del item.stash[_AUDITED_KEY]
            setattr(report, AUDITED, True)
        torn = item.stash.get(_TORN_DOWN_KEY, None)
        if torn is not None:
            del item.stash[_TORN_DOWN_KEY]
            setattr(report, FIXTURES_JUDGED, torn)
        theirs = item.stash.get(_THEIRS_KEY, None)
        if theirs is not None:
            del item.stash[_THEIRS_KEY]
            setattr(report, FIXTURE_FINDINGS, [result.to_dict() for result in theirs])
        found = item.stash.get(_FOUND_KEY, None)
        excinfo = call.excinfo
        # The findings failed the teardown (fail mode, or the warning raised as an error
        # by a filter: -W error::pytest_graphleak.GraphOutliveWarning, filterwarnings =
        # error), or they failed nothing and read as warnings whatever else failed the
        # test (an assert, a timeout, sys.exit) or skipped it.
        failed_by_them = excinfo is not None and isinstance(
            excinfo.value, (GraphOutliveError, GraphOutliveWarning)
        )
        if found:
            del item.stash[_FOUND_KEY]  # pop: nothing outlives the report
            if not failed_by_them:  # set on the typed results, then they travel as data
                for result in found:
                    result.warned = True
            earlier = getattr(report, "graphleak", None) or []  # teardown checks: kept
            report.graphleak = [*earlier, *(result.to_dict() for result in found)]  # type: ignore[attr-defined]
        if failed_by_them:
            assert excinfo is not None
            # The story only, as the fail mode's: no frames of the plugin's own source.
            report.longrepr = excinfo.getrepr(style="value")
            if isinstance(excinfo.value, GraphOutliveWarning) and found:
                # the warning raised as an error says one line: the story, as fail's
                _tell_story(report.longrepr, [r for r in found if not r.known])
            crash = getattr(report.longrepr, "reprcrash", None)
            if crash is not None and found:  # pytest's short summary line reads this
                first = next((r for r in found if not r.known), found[0])
                crash.message = _short(first, summary_room(item, "ERROR"))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        # A run stopped between a test's call and its teardown (Ctrl-C) leaves its census
        # unfinished: the test's session let go of it when the test ended.
        self.audit.end()

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        columns = columns_of(terminalreporter.config)
        for note in sorted(self.notes):
            for line in wrap_line(f"graphleak: {note}", columns):
                terminalreporter.write_line(line, yellow=True)


def _tell_story(longrepr: Any, results: list[CheckResult]) -> None:
    """Put the findings' story in place of the value-style entry's lines (in place)."""
    if not results:
        return
    story = "\n".join(render_text(result) for result in results).split("\n")
    for element in getattr(longrepr, "chain", ()):
        for entry in getattr(element[0], "reprentries", ()):
            if getattr(entry, "style", None) == "value":
                entry.lines = story


def audited(item: pytest.Item) -> AuditedTest:
    """The test as the audit reads it (``outlive.AuditedTest``), from pytest's item."""
    module = getattr(item, "module", None)
    cls = getattr(item, "cls", None)
    return AuditedTest(
        item.nodeid,
        module if isinstance(module, types.ModuleType) else None,
        cls if isinstance(cls, type) else None,
        fixturedefs(item),
    )


def fixturedefs(item: pytest.Item) -> dict[str, FixtureDef]:
    """name -> the fixture definition this test used (the closest one)."""
    info = getattr(item, "_fixtureinfo", None)  # pytest's, on a Function item
    defs = getattr(info, "name2fixturedefs", None) or {}
    return {name: chain[-1] for name, chain in defs.items() if chain}


def scope_node(request: pytest.FixtureRequest) -> str:
    """The node id of the scope a fixture's instance lives in (its class, module or
    package; "" for the session): what pytest caches it for."""
    try:
        return str(request.node.nodeid)
    except Exception:  # no node for this scope: the session's
        return ""


def defined_at(fixturedef: FixtureDef) -> tuple[str, int]:
    """The file and 1-based line of a fixture's function (("", 0) when not known)."""
    function = getattr(fixturedef, "func", None)
    code = getattr(inspect.unwrap(function), "__code__", None) if callable(function) else None
    return (code.co_filename, code.co_firstlineno) if code is not None else ("", 0)


def request_cls(request: pytest.FixtureRequest) -> type | None:
    """The class of a fixture's request (None outside a class)."""
    try:
        cls = request.cls
    except Exception:  # no class in this scope
        return None
    return cls if isinstance(cls, type) else None


def _raised(outcome: Any) -> str:
    """The exception a call hook's ``outcome`` carries, in its own words ("" when none)."""
    excinfo = getattr(outcome, "excinfo", None)
    if not excinfo:
        return ""
    exc = excinfo[1]
    return f"{type(exc).__name__}: {exc}"


class _Rerun:
    """The test once more, for its sites (``outlive.Rerun``)."""

    def __init__(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        self._item, self._next = item, nextitem

    def refusal(self) -> str:
        return outlive_rerun.refusal(self._item, fixturedefs(self._item))

    def run(self) -> str:
        return outlive_rerun.failed_phase(outlive_rerun.run_again(self._item, self._next))

    def functions(self) -> dict[str, object]:
        """The test's function, then its fixtures' (where the line a fix changes runs)."""
        found: dict[str, object] = {}
        function = getattr(self._item, "function", None)
        if function is not None:
            found["the test"] = function
        for name, fixturedef in fixturedefs(self._item).items():
            func = getattr(fixturedef, "func", None)
            if func is not None:
                found[f"fixture '{name}'"] = func
        return found


def _charged_to(result: CheckResult, nodeid: str) -> bool:
    """The result is this test's to report: its own, or one of a fixture it requested
    (``JudgedAt.charged_to``), never one of a fixture it did not."""
    return result.judged_at is None or result.judged_at.charged_to == nodeid


def outlive_pointer(results: list[CheckResult]) -> str:
    """The warning's one line: what outlived the test and who holds it, and where the
    story is (the graphleak report section's row of the test)."""
    first = results[0]
    at = first.judged_at
    what = (
        f"{at.row} kept autograd graphs alive after its teardown"
        if at is not None and at.label
        else "autograd graphs outlived the test"
    )
    held = root_of(first, raw=True)
    held = f", held by {held}" if held else ""
    more = f", and {len(results) - 1} more" if len(results) > 1 else ""
    return (
        f"graphleak: {what}: {first.pattern or RETAINED_GRAD_FN}{held}{more}; the "
        "graphleak report section tells where and the fix"
    )


def _short(result: CheckResult, room: int | None = None) -> str:
    """pytest's short summary message of a finding, within ``room`` columns where it can
    be (``summary_room``): the holder left out rather than a word cut."""
    told = f"outlived the test: {result.pattern}"
    held = f", held by {root_of(result, raw=True) or 'no root'}"
    shorter = (f"graphleak: {told}{held}", f"graphleak: {told}", told, str(result.pattern))
    return next((m for m in shorter if room is None or len(m) <= room), shorter[-1])

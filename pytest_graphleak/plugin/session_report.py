"""Session-wide reports of graphleak checks: the terminal summary, the status letter
(``plugin/status_word``), the JSON and HTML files, and JUnit XML properties.

The reporter reads only ``report.graphleak`` (a list of ``CheckResult.to_dict()``) from
each phase's report in ``pytest_runtest_logreport``, which pytest-xdist replays on the
controller with the same plain data, so a run on many workers gives the same reports as
one process. Workers write nothing. It also works without the core plugin
(``add_options`` and ``GraphleakSessionReport(config)`` from a conftest).

"Pop rather than get": once every hook has seen it, ``report.graphleak`` is taken off
the report (pytest's terminal reporter keeps every report to the end), also on a worker
after pytest-xdist has sent it. What is kept instead (``docs/reports.md``, "Memory"): one
compact JSON text per checked test, the node ids of leaked tests (for the status word in
pytest's short summary), and JUnit properties only when a JUnit XML file is written.

An expected failure (``@pytest.mark.xfail``, ``unittest.expectedFailure``) is recorded
with the outcome ``xfailed``, so that its leak reads as expected, not as a leak on a
passing test (``warned``). Of a test that pytest-rerunfailures runs again only the final
attempt counts.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Generator, Mapping, Sequence
from typing import Any

import pytest

from pytest_graphleak.exceptions import OptionError
from pytest_graphleak.plugin import flags
from pytest_graphleak.plugin.baseline import (
    FIXTURE_FINDINGS,
    BaselineRun,
    configured,
    stopped_early,
)
from pytest_graphleak.plugin.report_files import (
    ReportFile,
    configured_path,
    refuse_unsafe_outputs,
    write_report,
)
from pytest_graphleak.plugin.report_section import section_lines
from pytest_graphleak.plugin.status_word import StatusWords
from pytest_graphleak.report.environment import describe_run
from pytest_graphleak.report.github_rows import Row
from pytest_graphleak.report.json_doc import (
    CheckedTest,
    build_report,
    document_of,
    dumps,
)
from pytest_graphleak.report.model import Report, TestRow, results_of
from pytest_graphleak.report.summary import NOTHING_CHECKED, counts, sentence
from pytest_graphleak.report.text import line_markup, render_text, words, wrap_line, wrapped
from pytest_graphleak.report.writers import WRITER_OPTIONS, WRITERS, Run, Writer, annotators
from pytest_graphleak.result import CheckResult
from pytest_graphleak.settings import Settings

#: The outcome recorded for an expected failure (pytest's own word for it).
_XFAILED = "xfailed"
#: The outcome pytest-rerunfailures gives an attempt that it is going to run again.
_RERUN = "rerun"

REPORT_OPTIONS = WRITER_OPTIONS
#: The flag the outlive audit sets on a teardown report when it looked at the test
#: (plain data, so pytest-xdist carries it to the controller, which counts it).
AUDITED = "graphleak_audited"


def add_options(parser: pytest.Parser) -> None:
    """The report options (from the options table), for using this reporter without the
    core plugin; the core plugin registers them with all the others."""
    flags.add_options(parser, keys=REPORT_OPTIONS)


class SessionReport:
    """Collects check results and writes the reports: the session's hooks. The per-test
    hooks that feed it are ``ReportHooks(reporter)``, a plugin object of their own, so
    that a run that checks nothing calls no hook of ours per test (the core plugin
    registers them with ``--graphleak``, else when a test first runs a check)."""

    def __init__(self, config: pytest.Config, settings: Settings | None = None) -> None:
        self.config = config
        if settings is None:  # without the core plugin: only the report options exist
            try:
                settings = flags.settings_from_config(config, keys=REPORT_OPTIONS)
            except OptionError as exc:
                raise pytest.UsageError(f"graphleak: {exc}") from None
        self.settings = settings
        #: On a pytest-xdist worker: results travel to the controller, which reports.
        self.is_worker = hasattr(config, "workerinput")
        #: node id -> compact JSON of (outcome, checks); of a rerun test, the last attempt.
        self._results: dict[str, str] = {}
        self.notes: list[str] = []
        #: The status word pytest prints for each checked test (``plugin/status_word``).
        self.status_words = StatusWords()
        #: The writers that add to pytest's own file (``Writer.properties``: JUnit XML):
        #: their properties go on the teardown report, which pytest keeps to the end, only
        #: when that file is written (its writer keeps every test until then anyway).
        self._annotators = annotators(lambda dest: config.getoption(dest, default=None))
        self._junit_pending: dict[str, list[tuple[str, str]]] = {}
        #: node id -> pytest's call outcome, from its call report to its teardown report
        #: (the outlive audit's results come with the teardown).
        self._call_outcomes: dict[str, str] = {}
        self._rows: list[CheckedTest] | None = None  # decoded once, at the end
        #: New findings of fixtures torn down after their last test that requested them,
        #: in fail mode: they fail the session, not a test (``JudgedAt.charged_to``).
        self.session_failures: list[CheckResult] = []
        #: Those in warn mode: told in a section of their own, as no test's warning.
        self.session_warnings: list[CheckResult] = []
        #: Node ids of the tests the outlive audit looked at (a set: of a test that
        #: pytest-rerunfailures ran again, one).
        self._audited: set[str] = set()
        self.outputs: list[ReportFile] = []
        #: Findings of other kinds for the writers that are no file (an after-teardown
        #: audit, say): each a ``report.github_rows.Row``, annotated and tabled like a check's.
        self.extra_rows: list[Row] = []
        self.publishers: list[Writer] = []
        self._started = time.time()  # for the HTML page's environment block
        loaded = configured(config, settings)  # a worker too: a known leak fails nothing
        #: The baseline file's findings matched (``--graphleak-baseline``), on the controller.
        self.baseline = (
            None if loaded is None or self.is_worker else BaselineRun(config, loaded, settings)
        )
        if self.baseline is not None:  # its hooks: what was collected (stale entries)
            config.pluginmanager.register(self.baseline, "graphleak-baseline")
        if self.is_worker:
            return
        #: node id -> (absolute file, 1-based line) of each checked test (the GitHub gate)
        self._locations: dict[str, tuple[str, int]] = {}
        self.outputs = [
            ReportFile(writer, path, settings.source(writer.option))
            for writer in WRITERS
            if writer.to_file
            and (path := configured_path(config, settings, writer.option)) is not None
        ]
        #: Writers that are no file and are on for this run (GitHub Actions).
        self.publishers = [
            writer
            for writer in WRITERS
            if writer.wanted is not None
            and writer.wanted(getattr(settings, writer.option), os.environ)
        ]
        refuse_unsafe_outputs(config, self.outputs)

    # -- collecting ---------------------------------------------------------------

    # A wrapper: its first half runs before junitxml reads the teardown's properties, its
    # second half after every other hook (a conftest, pytest-xdist's worker sending the
    # report, the terminal reporter's status letter) has read ``report.graphleak``. The
    # call report is recorded in the second half: pytest's own hooks may still change its
    # outcome while it is logged (pytest's subtests fail a test with a failed subtest in
    # ``pytest_report_teststatus``), and the reports must say what pytest says.
    def logreport(self, report: pytest.TestReport) -> Generator[None, None, None]:
        """The body of ``pytest_runtest_logreport`` (a wrapper, see above)."""
        if self.baseline is not None:  # marks known findings before they are kept
            self.baseline.logreport(report)
        if report.when == "teardown" and not self.is_worker:
            self._collect_teardown(report)
        if report.when == "teardown" and report.nodeid in self._junit_pending:
            properties = self._junit_pending.pop(report.nodeid)
            report.user_properties = [*report.user_properties, *properties]
        self.status_words.logging, data = report, hasattr(report, "graphleak")
        yield
        self.status_words.logging = None
        if not self.is_worker and (report.when == "call" or (report.when == "setup" and data)):
            self._collect(report)  # a setup's checks: it failed or skipped, no call follows
        if hasattr(report, "graphleak"):
            del report.graphleak  # pop: kept as text

    def _collect(self, report: pytest.TestReport) -> None:
        """Record a call report's checks, or an ending setup's (``logreport``)."""
        self.status_words.forget(report.nodeid)  # of a rerun test, the last attempt decides
        if report.outcome == _RERUN:
            # pytest-rerunfailures runs this test again: only its final attempt counts.
            # (It logs no teardown for this attempt, so nothing else would drop these.)
            self._junit_pending.pop(report.nodeid, None)
            return
        self._call_outcomes[report.nodeid] = _outcome(report)  # until its teardown
        data = getattr(report, "graphleak", None)
        # typed once: every question below asks the results; malformed data is noted
        checks = self._checks_of(data, report.nodeid, "results") if data else None
        results = checks if checks is not None else results_of(data)
        self.status_words.remember(report, results)  # asked again at the end
        if checks is None:
            return
        self._locations[report.nodeid] = _location(self.config, report)
        self._keep(report.nodeid, _outcome(report), checks)

    def _collect_teardown(self, report: pytest.TestReport) -> None:
        """Add the outlive audit's results (on the teardown report) to the test's row.
        The outcome is the call's, or ``failed`` when the audit failed the teardown."""
        outcome = self._call_outcomes.pop(report.nodeid, "passed")
        if getattr(report, AUDITED, False):
            self._audited.add(report.nodeid)
        theirs = getattr(report, FIXTURE_FINDINGS, None)
        if theirs:
            self._collect_fixture_findings(theirs, report.nodeid)
        data = getattr(report, "graphleak", None)
        if not data or not isinstance(data, list):
            return
        if report.failed:
            outcome = "failed"
        found = self._checks_of(data, report.nodeid, "outlive results")
        if found is None:
            return
        checks: list[dict[str, Any]] = []
        if report.nodeid in self._results:
            earlier, checks = json.loads(self._results[report.nodeid])
            outcome = "failed" if report.failed else earlier
        self._locations.setdefault(report.nodeid, _location(self.config, report))
        self._keep(report.nodeid, outcome, found, earlier=checks)

    def _collect_fixture_findings(self, data: object, nodeid: str) -> None:
        """Findings of fixtures the test ``nodeid`` did not request, torn down in its
        teardown (``FIXTURE_FINDINGS``): each on a row of its own, named for the fixture
        (its check's name), never on that test's. In fail mode a new one fails the session
        (``pytest_sessionfinish``)."""
        found = self._checks_of(data, nodeid, "fixture findings")
        for check in found or ():
            row = check.name
            failing = check.leaked and not check.warned and not check.known
            checks: list[dict[str, Any]] = []
            outcome = "failed" if failing else "passed"
            if row in self._results:  # another pytest-xdist worker's instance
                earlier, checks = json.loads(self._results[row])
                outcome = "failed" if failing or earlier == "failed" else outcome
            if failing:
                self.session_failures.append(check)
            elif check.leaked and not check.known:
                self.session_warnings.append(check)
            judged = check.judged_at
            self._locations.setdefault(row, (judged.file, judged.line) if judged else ("", 0))
            self._keep(row, outcome, [check], earlier=checks)
            self._junit_pending.pop(row, None)  # no test case of its own in the JUnit XML

    def _checks_of(self, data: object, nodeid: str, what: str) -> list[CheckResult] | None:
        """A report's ``graphleak`` checks (the dicts that crossed pytest-xdist), typed:
        ``CheckResult`` checks the layout; None, and a note naming ``what`` was ignored,
        when they are malformed."""
        try:
            if not isinstance(data, list):
                raise TypeError(f"expected a list of check dicts, got {type(data).__name__}")
            return [CheckResult.from_dict(check) for check in data]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            self.notes.append(
                f"ignored malformed graphleak {what} of {nodeid}: {type(exc).__name__}: {exc}"
            )
            return None

    def _keep(
        self,
        nodeid: str,
        outcome: str,
        found: Sequence[CheckResult],
        earlier: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """The test's row (the checks kept ``earlier``, then those ``found`` now), kept as
        compact JSON text until the session ends: one object a test, not thousands, for
        the collector's passes over a long session (benchmarks/results/session_rows.md);
        and its JUnit properties, from the typed checks. A note instead when its checks
        are not JSON data."""
        checks = [*earlier, *(check.to_dict() for check in found)]
        try:  # NaN stays NaN: this text is read back by json, not by others
            self._results[nodeid] = json.dumps([outcome, checks], separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            self.notes.append(
                f"ignored graphleak results of {nodeid} that are not JSON "
                f"data: {type(exc).__name__}: {exc}"
            )
            return
        if self._annotators:
            row = TestRow.of(nodeid, outcome, [*map(CheckResult.from_dict, earlier), *found])
            self._junit_pending[nodeid] = [
                pair for properties in self._annotators for pair in properties(row)
            ]

    # -- writing --------------------------------------------------------------------

    def rows(self) -> list[CheckedTest]:
        """Every checked test, sorted by node id: decoded once, at the end."""
        if self._rows is None:
            self._rows = [
                CheckedTest(nodeid, *json.loads(self._results[nodeid]))
                for nodeid in sorted(self._results)
            ]
        return self._rows

    def report(self) -> Report:
        """The typed report every writer renders (``json_doc.build_report``)."""
        return build_report(
            self.rows(),
            generated_by=_generated_by(),
            warn_only=self.settings.warn_only,
            notes=sorted(self.notes),
            audited=len(self._audited),
            baseline=self.baseline.section() if self.baseline is not None else None,
            rootdir=str(self.config.rootpath),
        )

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.session_failures and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if self.baseline is not None:
            self.baseline.write(stopped_early=stopped_early(session))
            if self.baseline.error and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        if not self.outputs:  # none on a worker: the controller writes the reports
            return
        report = self.report()
        run = Run(environment=self._environment(), locations=self._locations)
        failed = False
        for output in self.outputs:
            assert output.writer.render is not None  # a file writer
            failed |= not write_report(output, output.writer.render(report, run))
        if failed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        if failed and all(o.written_to is None for o in self.outputs):
            # Neither the file nor its fallback could be written: keep the data in the log.
            sys.stdout.write("graphleak JSON report follows:\n" + dumps(document_of(report)))

    def _environment(self) -> dict[str, str]:
        command = ["pytest", *self.config.invocation_params.args]
        return describe_run(command, str(self.config.rootpath), self._started, time.time())

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self._results.clear()
        self._audited.clear()
        self._rows = None

    @pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: absent without it
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport) -> None:
        self.notes.append(
            f"a pytest-xdist worker crashed while running {crashitem}, so it has no graphleak "
            "result (a leak may have exhausted the worker's memory: run it alone)"
        )

    # -- terminal -------------------------------------------------------------------

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.is_worker or not (
            self._results or self.outputs or self.notes or self.baseline or self._audited
        ):
            return
        tr = terminalreporter
        rows = [test.typed() for test in self.rows()]  # the read model (report.model)
        columns = self.config.get_terminal_writer().fullwidth
        body = section_lines(
            rows,
            self.notes,
            self.settings.warn_only,
            columns=columns,
            verbose=(self.config.getoption("verbose") or 0) > 0,
            baseline_file=self.baseline.file if self.baseline else "",
        )
        for theirs, title in (
            (self.session_failures, "fixture findings that failed the session"),
            (self.session_warnings, "fixture findings, on no test"),
        ):
            if theirs:  # no test's failure text or warning shows them
                tr.write_sep("=", f"graphleak: {title}")
            for check in theirs:
                for part, line in wrapped(render_text(check), columns):
                    tr.write_line(part, **line_markup(line))
        if body:  # a clean run ends with the count line alone: what was checked, audited
            tr.write_sep("=", "graphleak report")
        for line, markup in body:
            tr.write_line(line, **markup)
        fixed = len(self.baseline.fixed()) if self.baseline is not None else None
        told = sentence(
            counts(
                (t.status for t in rows),
                audited=len(self._audited),
                fixed=fixed,
                fixtures=sum(t.is_fixture for t in rows),
            )
        )
        for part in wrap_line(told if told == NOTHING_CHECKED else f"graphleak: {told}", columns):
            tr.write_line(part)
        for line, markup in self.baseline.lines(columns) if self.baseline is not None else ():
            tr.write_line(line, **markup)
        for output in self.outputs:  # a path wider than the line folds after a "/"
            said = f"{output.writer.label} report: {output.written_to}"
            for part in words(
                f"ERROR: {output.error}" if output.error else said,
                columns,
                7 if output.error else 4,
            ):
                if output.error or output.written_to is not None:
                    tr.write_line(part, red=bool(output.error), bold=bool(output.error))
        if rows or self.extra_rows:
            self._publish(tr)

    def _publish(self, tr: pytest.TerminalReporter) -> None:
        """The writers that deliver themselves (the GitHub gate), each line through the
        terminal reporter, which starts it on a line of its own."""
        run = Run(locations=self._locations, rows=self.extra_rows, print_line=tr.write_line)
        for writer in self.publishers:
            assert writer.publish is not None
            for problem in writer.publish(self.report(), run):
                tr.write_line(f"ERROR: {problem}", red=True, bold=True)


def _location(config: pytest.Config, report: pytest.TestReport) -> tuple[str, int]:
    """The test's file (absolute) and 1-based line, from pytest's report location."""
    path, lineno, _ = report.location
    return str(config.rootpath / path), (lineno + 1 if lineno is not None else 0)


def _outcome(report: pytest.TestReport) -> str:
    """pytest's call outcome, except that an expected failure (which pytest reports
    as skipped with ``wasxfail``) is ``xfailed``: its leak was expected."""
    if report.skipped and hasattr(report, "wasxfail"):
        return _XFAILED
    return report.outcome


def _generated_by() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"pytest-graphleak {version('pytest-graphleak')}"
    except PackageNotFoundError:
        return "pytest-graphleak"


class ReportHooks:
    """The per-test hooks of a ``SessionReport``: they read each report's results."""

    def __init__(self, reporter: SessionReport) -> None:
        self.reporter = reporter

    # A wrapper: see ``SessionReport.logreport``.
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> Generator[None, None, None]:
        yield from self.reporter.logreport(report)

    def pytest_report_teststatus(
        self, report: pytest.TestReport, config: pytest.Config
    ) -> tuple[str, str, str | tuple[str, Mapping[str, bool]]] | None:
        return self.reporter.status_words.teststatus(report)


class GraphleakSessionReport(SessionReport, ReportHooks):
    """The whole reporter as one plugin object, for a conftest that uses it without the
    core plugin (``add_options`` and ``GraphleakSessionReport(config)``)."""

    def __init__(self, config: pytest.Config, settings: Settings | None = None) -> None:
        SessionReport.__init__(self, config, settings)
        ReportHooks.__init__(self, self)

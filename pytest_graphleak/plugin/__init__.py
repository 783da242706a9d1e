"""pytest wiring only: the hooks pytest calls on this plugin (the ``pytest11`` entry
point) and the ``graphleak`` fixture. The plugin never measures (``tracker``/``probes``
do) and never decides (``verdict`` does). Results travel on the call-phase report (a
fixture's that failed its setup or ran in its teardown, and the outlive audit's, on that
phase's) as ``report.graphleak``: a list of ``CheckResult.to_dict()`` (plain JSON data,
so it crosses pytest-xdist unchanged).

What the hooks call lives beside them: ``stash`` (what the plugin keeps on pytest's
objects; ``record``), ``marker`` (the marker's check), ``per_test`` (the per-test hook
objects, registered only where a run needs them), ``finder`` (a test's session without
--graphleak), ``fixture`` (``GraphleakFixture``), ``session_report`` and ``terminal``
(the session's report), ``audit`` (the outlive audit), ``baseline``.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_graphleak import options
from pytest_graphleak.exceptions import OptionError
from pytest_graphleak.plugin import flags, terminal
from pytest_graphleak.plugin.finder import TestFinder
from pytest_graphleak.plugin.fixture import GraphleakFixture
from pytest_graphleak.plugin.marker import MARKER_HELP, marker_settings, warns_instead
from pytest_graphleak.plugin.per_test import (
    CHECKING,
    SESSION_REPORT,
    Checking,
    Ranks,
    need_report_hooks,
)
from pytest_graphleak.plugin.stash import (
    ASCII_KEY,
    FINDER_KEY,
    ITEM_SETTINGS_KEY,
    LAZY_SESSION_KEY,
    MARKER,
    SETTINGS_KEY,
    WORLD_SIZE_KEY,
    record_result,
    settings_of,
)
from pytest_graphleak.report.ascii_text import degrade_to_ascii, restore
from pytest_graphleak.session import current, push_finder, remove_finder

#: Names other code and tests import from the plugin (each defined beside it).
__all__ = [
    "LAZY_SESSION_KEY",
    "MARKER",
    "GraphleakFixture",
    "graphleak",
    "marker_settings",
    "need_report_hooks",
    "record_result",
    "settings_of",
    "warns_instead",
]


# -- configuration --------------------------------------------------------------------
def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    flags.add_options(parser)
    # The per-test hooks are registered now, with this module (before any conftest, whose
    # tryfirst hooks then still come first), and taken off at configure without the flag.
    if not pluginmanager.has_plugin(CHECKING):
        pluginmanager.register(Checking(), CHECKING)


def pytest_configure(config: pytest.Config) -> None:
    # The keywords come from the options table; world_size is the marker's own.
    signature = f"{options.marker_signature()}, world_size=N"
    config.addinivalue_line("markers", f"{MARKER}({signature}): {MARKER_HELP}")
    config.addinivalue_line("markers", terminal.OPT_OUT_HELP)
    try:
        config.stash[SETTINGS_KEY] = flags.settings_from_config(config)
    except OptionError as exc:
        raise pytest.UsageError(f"graphleak: {exc}") from None
    settings = settings_of(config)
    manager = config.pluginmanager
    auditing = settings.enabled and settings.outlive != "off"
    if auditing and not manager.has_plugin("graphleak-outlive-audit"):
        from pytest_graphleak.plugin import audit  # only when it runs: half of our import

        manager.register(audit.OutliveAudit(settings), "graphleak-outlive-audit")
    if not manager.has_plugin(SESSION_REPORT):
        from pytest_graphleak.plugin.session_report import SessionReport

        manager.register(SessionReport(config, settings), SESSION_REPORT)
    # Inert without --graphleak (as pytest-memray is without --memray): no hook of ours
    # runs per test until a test runs a check; then it gets its session (TestFinder).
    if settings.enabled:
        if not manager.has_plugin(CHECKING):
            manager.register(Checking(), CHECKING)
        need_report_hooks(config)
    elif isinstance(manager.get_plugin(CHECKING), Checking):
        manager.unregister(name=CHECKING)
    finder = TestFinder(lazy=not settings.enabled)
    config.stash[FINDER_KEY] = finder
    push_finder(finder)


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


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: absent without it
def pytest_configure_node(node: Any) -> None:
    """Tell each pytest-xdist worker the width this terminal writes at: the worker breaks
    a failure's lines at it, since the controller prints them as they came."""
    node.workerinput[terminal.WORKER_COLUMNS] = terminal.columns_of(node.config)


def pytest_unconfigure(config: pytest.Config) -> None:
    restore(config.stash.get(ASCII_KEY, []))
    finder = config.stash.get(FINDER_KEY, None)
    if finder is not None:
        remove_finder(finder)
        finder.session = None


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
    if on_ranks and not manager.has_plugin(CHECKING):
        # Without --graphleak a world_size=N marker still runs its ranks (unjudged).
        manager.register(Ranks(), CHECKING)
        need_report_hooks(config)


@pytest.hookimpl(tryfirst=True)  # pytest prints header lines in reverse: ours comes last
def pytest_report_header(config: pytest.Config) -> list[str] | None:
    return terminal.header_lines(settings_of(config), terminal.columns_of(config))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if settings_of(terminalreporter.config).enabled:
        return
    reports = [r for group in terminalreporter.stats.values() for r in group]
    if hint := terminal.unchecked_hint(reports):
        terminalreporter.write_line(hint, yellow=True)


# -- the fixture ------------------------------------------------------------------------
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

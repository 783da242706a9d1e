"""``--graphleak-outlive-sites=rerun``: a test that left graphs alive runs once more,
under the diagnosis's own recorders, to say where they were made and stored.

The re-run is ``_pytest.runner.runtestprotocol(item, log=False)`` from the audit's
teardown hook, after pytest's teardown: the test's function-scoped fixtures are set up
and torn down again, its reports are dropped (never logged: the test is reported once,
with its first run's outcome), and what pytest and its plugins keep on the item for the
first run's report (stash, captured output sections, user properties, the request) is
put back afterwards. Warnings the re-run raises are dropped.

What the re-run records, and how its findings join the first run's, is
``outlive/rerun``'s (``SiteRun``, ``amend``); this module is the pytest side: whether the
test may run again (``refusal``), the run (``run_again``) and its outcome
(``failed_phase``).

It runs only where it sets up nothing but what the test itself owns: a wider-scope
fixture the test uses that its teardown finalised (it was that fixture's last test), or
a package whose ``setUpModule`` would run again, rules it out (``refusal``), and the
story says so.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import pytest
from _pytest.nodes import Node
from _pytest.runner import runtestprotocol


def refusal(item: pytest.Item, fixturedefs: Mapping[str, Any]) -> str:
    """Why this test is not run again ("" when it can be). ``fixturedefs``: name -> the
    definition of each fixture the test uses."""
    config = item.config
    if config.getoption("usepdb", False):
        return "--pdb is on"
    if any(config.getoption(name, False) for name in ("setupshow", "setuponly", "setupplan")):
        return "--setup-show/--setup-only/--setup-plan is on"
    if item.session.shouldstop or item.session.shouldfail:
        return "the session is stopping"
    if item.get_closest_marker("no_graph_growth") is not None or "graphleak" in getattr(
        item, "fixturenames", ()
    ):
        return "it runs a graphleak check, which is not repeated"
    stack = getattr(getattr(item.session, "_setupstate", None), "stack", None)
    if not isinstance(stack, dict):
        return "this pytest does not say which scopes are set up"
    for name, fixturedef in fixturedefs.items():
        scope = getattr(fixturedef, "scope", "function")
        if scope != "function" and getattr(fixturedef, "cached_result", None) is None:
            return (
                f"its {scope}-scoped fixture '{name}' was torn down after it (it was its "
                "last test), and a re-run would set it up again"
            )
    for node in item.listchain()[:-1]:
        if node not in stack and type(node).setup is not Node.setup:
            return f"'{node.name}' was torn down after it and has a setup of its own"
    return ""


def run_again(item: pytest.Item, nextitem: pytest.Item | None) -> list[pytest.TestReport]:
    """The test once more, unreported; what the first run left on the item for its own
    report is put back (see the module docstring)."""
    storage = getattr(item.stash, "_storage", None)
    stash = dict(storage) if isinstance(storage, dict) else None
    sections = list(item._report_sections)
    properties = list(item.user_properties)
    names = ("_request", "funcargs", "_instance", "_obj")
    saved: dict[str, Any] = {name: item.__dict__[name] for name in names if name in item.__dict__}
    capman = item.config.pluginmanager.getplugin("capturemanager")
    out, err = _read_capture(capman)
    try:
        item.__dict__.pop("_instance", None)  # a test class gets a fresh instance
        if "_obj" in saved and "_instance" in saved:
            item._obj = None  # type: ignore[attr-defined]
        if hasattr(item, "_request"):
            item._request = False  # runtestprotocol makes a new one
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            return runtestprotocol(item, log=False, nextitem=nextitem)
    finally:
        if stash is not None and isinstance(storage, dict):
            storage.clear()
            storage.update(stash)
        item._report_sections[:] = sections
        item.user_properties[:] = properties
        item.__dict__.update(saved)
        if capman is not None:
            capman.resume_global_capture()
        item.add_report_section("teardown", "stdout", out)
        item.add_report_section("teardown", "stderr", err)


def _read_capture(capman: Any) -> tuple[str, str]:
    """What the teardown printed so far (the re-run's capture would take it)."""
    try:
        found = capman.read_global_capture() if capman is not None else None
    except Exception:
        return "", ""
    return (found.out, found.err) if found is not None else ("", "")


def failed_phase(reports: list[pytest.TestReport]) -> str:
    """The re-run's setup or teardown that failed ("" when none did)."""
    for report in reports:
        if report.failed and report.when != "call":
            return report.when
    return ""

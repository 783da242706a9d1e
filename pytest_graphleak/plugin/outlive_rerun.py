"""``--graphleak-outlive-sites=rerun``: a test that left graphs alive runs once more,
under the diagnosis's own recorders, to say where they were made and stored.

The re-run is ``_pytest.runner.runtestprotocol(item, log=False)`` from the audit's
teardown hook, after pytest's teardown: the test's function-scoped fixtures are set up
and torn down again, its reports are dropped (never logged: the test is reported once,
with its first run's outcome), and what pytest and its plugins keep on the item for the
first run's report (stash, captured output sections, user properties, the request) is
put back afterwards. Warnings the re-run raises are dropped.

While its call phase runs, ``LoopRecorder`` (torch's ``TorchSiteRecorder`` mode,
minigrad's site recording) notes where each tensor and node is made (``created at:``)
and ``LiveWatch`` traces the user's lines and charges a change of the first holder (a
container's length, a rebound global, a new ``grad_fn``) to the line that made it
(``stored at:``). A fresh census after its teardown finds what the re-run kept; the
holders found again get its sites. A holder the re-run kept nothing in is said so, with
no sites.

It runs only where it sets up nothing but what the test itself owns: a wider-scope
fixture the test uses that its teardown finalised (it was that fixture's last test), or
a package whose ``setUpModule`` would run again, rules it out (``refusal``), and the
story says so.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from _pytest.nodes import Node
from _pytest.runner import runtestprotocol

from pytest_graphleak.diagnose.loop_recorder import LoopRecorder
from pytest_graphleak.diagnose.search import Path
from pytest_graphleak.diagnose.sites import Site, per_step
from pytest_graphleak.diagnose.stored import LiveWatch
from pytest_graphleak.engine.outlive import Census
from pytest_graphleak.result import CheckResult
from pytest_graphleak.words.fix import choose_fix

#: What the first run's story says when the re-run is its source.
FOUND_BY = (
    "created at and stored at: from one more run of the test (--graphleak-outlive-sites=rerun)"
)


class SiteRun:
    """One re-run's recorders: ``call_begins()`` / ``call_ends()`` around its call phase
    (the audit's call hook), ``finish()`` after its teardown, ``close()`` always."""

    def __init__(self, watched: Path | None, walker: Any, root: Callable[[], object] | None):
        self.census = Census()
        self.recorder: LoopRecorder | None = None
        self._watch = LiveWatch(watched, walker, root) if watched is not None else None
        self.stored: Counter[Site] = Counter()
        self.via: dict[Site, str] = {}
        self.called = False
        self.counted = False

    def call_begins(self) -> None:
        self.called = True
        self.counted = self.census.begin()
        if not self.counted:
            return
        self.recorder = LoopRecorder()
        self.recorder.start_step()
        if self._watch is not None:
            self._watch.start()

    def call_ends(self) -> None:
        if self._watch is not None:
            self.stored, self.via = self._watch.stop()
            self._watch = None
        if self.recorder is not None:
            self.recorder.leave_modes()
        self.census.stop_recording()

    def site_of(self, obj: Any) -> Site | None:
        return self.recorder.site_of(obj) if self.recorder is not None else None

    def close(self) -> None:
        if self._watch is not None:  # the call phase never ended (it was not run)
            self._watch.stop()
            self._watch = None
        if self.recorder is not None:
            self.recorder.close()
            self.recorder = None
        if self.counted:
            self.census.abandon()
            self.counted = False


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
            return (f"its {scope}-scoped fixture '{name}' was torn down after it (it was its "
                    "last test), and a re-run would set it up again")  # fmt: skip
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


def amend(
    results: list[CheckResult],
    again: list[CheckResult],
    *,
    watched: str,
    stored: Counter[Site],
    via: dict[Site, str],
) -> None:
    """Give each first-run result the re-run's sites for the same holder, and ``watched``
    (the holder the live watch followed) its ``stored at:`` lines."""
    by_root = {_root(result): result for result in again}
    for result in results:
        diagnosis = result.diagnosis
        if diagnosis is None:
            continue
        root = _root(result)
        found = by_root.get(root)
        if found is None or found.diagnosis is None:
            diagnosis.notes.append(
                "the test ran once more to find where its graphs were made, and that run "
                "left none in this holder: created at and stored at unknown"
            )
            continue
        if not diagnosis.sites:
            diagnosis.sites = list(found.diagnosis.sites)
        if root == watched:
            diagnosis.stored_at = per_step(stored, 1, via)
            if not stored:
                diagnosis.notes.append("stored at: no user line of the re-run changed the holder")
            diagnosis.fix = choose_fix(diagnosis)  # worded for the storing line, as a step's is
        diagnosis.notes.append(FOUND_BY)


def _root(result: CheckResult) -> str:
    chain = result.diagnosis.chain if result.diagnosis is not None else []
    return chain[0] if chain else ""


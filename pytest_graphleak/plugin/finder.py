"""Without --graphleak: a test's session, made when it first runs a check. ``TestFinder``
is what ``session.current()`` asks in a context with no session of this run (a
thread's); with --graphleak, ``per_test.Checking`` sets its ``entered`` session."""

from __future__ import annotations

import contextlib
import functools
import threading

import pytest

from pytest_graphleak.plugin import stash
from pytest_graphleak.plugin.per_test import need_report_hooks
from pytest_graphleak.plugin.pytest_held import PytestHeld
from pytest_graphleak.plugin.stash import LAZY_SESSION_KEY, settings_of
from pytest_graphleak.session import RunningTest, Session


class TestFinder:
    """What ``session.current()`` asks in a context with no session of this run (a
    thread's). With --graphleak, ``Checking`` sets ``entered`` while a test runs. Without
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
    """The session of a test that runs a check without --graphleak: what ``Checking``
    sets up for every test with it (the running test, pytest's kept objects released
    before each sample), ended by a finalizer of the test. Its results need the report
    hooks, registered now."""
    held = PytestHeld(item)
    test = RunningTest(
        item.nodeid, settings_of(item.config), functools.partial(stash.record_result, item)
    )
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

"""What the plugin keeps on pytest's objects (its stash keys) and the one way a check's
result joins its test (``record``): the marker, the fixture, a framework callback and a
thread's check all hand results here, and the report hooks (``per_test.Reports``) move
them onto the test's call report."""

from __future__ import annotations

from typing import Any, Protocol

import pytest

from pytest_graphleak.plugin import terminal
from pytest_graphleak.plugin.baseline import mark_known
from pytest_graphleak.result import CheckResult
from pytest_graphleak.session import Session
from pytest_graphleak.settings import Settings


class Finder(Protocol):
    """What ``session.current()`` asks in a thread (``finder.TestFinder``): the session
    ``per_test.Checking`` entered for the running test, and pytest's session."""

    session: pytest.Session | None
    entered: Session | None

    def __call__(self) -> Session | None: ...


MARKER = terminal.MARKER

SETTINGS_KEY = pytest.StashKey[Settings]()
ITEM_SETTINGS_KEY = pytest.StashKey[Settings]()
RESULTS_KEY = pytest.StashKey[list[CheckResult]]()
WORLD_SIZE_KEY = pytest.StashKey[int]()
ASCII_KEY = pytest.StashKey[list[tuple[Any, str]]]()
FINDER_KEY = pytest.StashKey[Finder]()
#: The session a test got when it first ran a check without --graphleak.
LAZY_SESSION_KEY = pytest.StashKey[Session]()


def settings_of(config: pytest.Config) -> Settings:
    return config.stash.get(SETTINGS_KEY, None) or Settings()


def record_result(item: pytest.Item, result: CheckResult) -> None:
    """Add a result made outside the marker and the fixture (a framework callback) to the
    test's results: its report, the JSON, the summary (``session.RunningTest.record``)."""
    record(item, result)


def record(item: pytest.Item, result: CheckResult) -> None:
    """Add ``result`` to the test's results (moved onto its call report at its end)."""
    # Plain data, made into the report's dicts when the report is made: a window judged
    # inside a training loop does not pay ~0.1 ms for asdict() on the loop's time.
    mark_known(item, result)  # a leak listed in the baseline file: known, it fails nothing
    item.stash.setdefault(RESULTS_KEY, []).append(result)

"""A marked test's subtests are reported once per check, not once per step.

The marker calls the test body warmup + steps times; pytest's ``subtests`` fixture
reports every ``with subtests.test(...)`` block each time it runs, so one failing
subtest showed up as 19 SUBFAILED lines and "contains 19 failed subtests". While the
check runs, the fixture's hook relay is wrapped: the first report of each subtest (by
its message and keywords) and outcome goes through, the same one at a later step does
not.

This reads the fixture's private ``_ihook`` (pytest >= 9; ``ihook`` in the
pytest-subtests plugin) and pytest's private failed-subtest counter; where they are
missing, subtests are reported as the fixture reports them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

_RELAY_NAMES = ("_ihook", "ihook")


class _FirstReports:
    """A hook relay that passes on each subtest's first report of each outcome."""

    def __init__(self, relay: Any, config: Any) -> None:
        self._relay = relay
        self._config = config
        self._seen: set[tuple[str, str]] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._relay, name)

    def pytest_runtest_logreport(self, report: Any) -> Any:
        context = getattr(report, "context", None)
        key = (repr(context), str(report.outcome))
        if context is None or key not in self._seen:
            self._seen.add(key)
            return self._relay.pytest_runtest_logreport(report=report)
        if report.failed:
            _uncount_failure(self._config, report)
        return None


def _uncount_failure(config: Any, report: Any) -> None:
    """Undo the fixture's count of a failure that is not reported again."""
    try:
        from _pytest.subtests import failed_subtests_key  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return
    counts = config.stash.get(failed_subtests_key, None) or {}
    for key in {getattr(report, "id", None), getattr(report, "nodeid", None)}:
        if counts.get(key, 0) > 0:
            counts[key] -= 1
            return


@contextlib.contextmanager
def subtests_reported_once(funcargs: dict[str, Any], config: Any) -> Iterator[None]:
    """While the check runs, the ``subtests`` fixture value reports each subtest once."""
    fixture = funcargs.get("subtests")
    name = next((n for n in _RELAY_NAMES if hasattr(fixture, n)), None)
    if fixture is None or name is None:
        yield
        return
    relay = getattr(fixture, name)
    setattr(fixture, name, _FirstReports(relay, config))
    try:
        yield
    finally:
        setattr(fixture, name, relay)

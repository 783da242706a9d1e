"""What a check running now is handed: the session it belongs to (bottom layer).

The pytest plugin makes one ``Session`` per test call and enters it (``entered``) around the
call; the tracker, the loop checks and the framework integrations reach it through
``current()``, a context variable, never through a module-level list or a ``sys.modules``
lookup of the plugin. Outside pytest (a script, a notebook) ``current()`` makes a session
on first use in that context, as ``decimal.getcontext()`` does, so a check there still has
a place to be listed while it is open.

A context variable follows the test into its coroutines (an async test's tasks copy it);
a thread the test starts begins with no session, and its checks then run as outside pytest.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for annotations only: this module imports nothing of the package
    from pytest_graphleak.options import Settings
    from pytest_graphleak.result import CheckResult


@dataclass(frozen=True)
class RunningTest:
    """The pytest test whose call phase is running."""

    nodeid: str
    settings: Settings
    #: Adds a result made outside the marker and the fixture (a framework callback) to the
    #: test's graphleak results: its report, the JSON and the summary.
    record: Callable[[CheckResult], None]


@dataclass
class Session:
    """The state checks share while they run: plain references, handed over explicitly."""

    #: The test this session runs for; None outside pytest.
    test: RunningTest | None = None
    #: Called before every sample to drop what the test runner, not the step, keeps of
    #: each step's objects (the pytest plugin releases pytest's captured log records, see
    #: ``plugin/pytest_held``). A hook that fails is skipped.
    before_sample: list[Callable[[], None]] = field(default_factory=list)
    #: Loop checks started and not yet ended (gc is disabled and frozen while one is open);
    #: ``loop.close_open_checks`` ends them.
    open_checks: list[Any] = field(default_factory=list)


_CURRENT: ContextVar[Session] = ContextVar("pytest_graphleak_session")


def current() -> Session:
    """This context's session: the running test's, else one made here on first use."""
    try:
        return _CURRENT.get()
    except LookupError:
        made = Session()
        _CURRENT.set(made)
        return made


@contextlib.contextmanager
def entered(session: Session) -> Iterator[Session]:
    """``session`` is ``current()`` inside the block; the one before it after."""
    token = _CURRENT.set(session)
    try:
        yield session
    finally:
        _CURRENT.reset(token)

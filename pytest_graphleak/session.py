"""What a check running now is handed: the session it belongs to (bottom layer).

The pytest plugin makes one ``Session`` per test and enters it (``entered``) around the
test's setup, call and teardown; the tracker, the loop checks, the framework integrations
and gc's state (``heap.gcstate``) reach it through ``current()``, a context variable, never
through a module-level list or a ``sys.modules`` lookup of the plugin. Outside pytest (a
script, a notebook) ``current()`` makes a session on first use in that context, as
``decimal.getcontext()`` does, so a check there still has a place to be listed while it
is open.

A context variable follows the test into its coroutines (an async test's tasks copy it).
A new thread begins with an empty context, so ``current()`` there asks the finder the
plugin pushed (``push_finder``): the session of the test pytest runs at that moment, from
whatever thread. With ``--graphleak`` that is the session the plugin entered for the test;
without it, the plugin enters nothing per test and makes the test's session when a check
first asks. Nothing is patched either way (``threading.Thread.start`` included). A thread
still running after its test (a pool's worker) belongs to the test running when its check
asks, or to none between tests (docs/limits.md, "Threads").
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # for annotations only: this module imports nothing of the package
    from pytest_graphleak.result import CheckResult
    from pytest_graphleak.settings import Settings


@dataclass(frozen=True)
class RunningTest:
    """The pytest test whose call phase is running."""

    nodeid: str
    settings: Settings
    #: Adds a result made outside the marker and the fixture (a framework callback) to the
    #: test's graphleak results: its report, the JSON and the summary.
    record: Callable[[CheckResult], None]


class CheckSpan(Protocol):
    """Told when a check inside the test begins and ends (the outlive audit's census:
    what a check's own steps made is the check's to judge)."""

    def check_begins(self) -> None: ...

    def check_ends(self) -> None: ...

    def abandon(self) -> None: ...


@dataclass
class Session:
    """The state checks share while they run: plain references, handed over explicitly."""

    #: The test whose call phase runs now; None outside it and outside pytest.
    test: RunningTest | None = None
    #: Called before every sample to drop what the test runner, not the step, keeps of
    #: each step's objects (the pytest plugin releases pytest's captured log records, see
    #: ``plugin/pytest_held``). A hook that fails is skipped.
    before_sample: list[Callable[[], None]] = field(default_factory=list)
    #: Loop checks started and not yet ended (gc is disabled and frozen while one is open);
    #: ``loop.close_open_checks`` ends them.
    open_checks: list[Any] = field(default_factory=list)
    #: Told of every check's start and end (the outlive audit's census).
    spans: list[CheckSpan] = field(default_factory=list)
    #: The test is over: a context that still holds this session (a thread started
    #: during the test) gets a session of its own from ``current()``.
    ended: bool = False

    def end(self) -> None:
        """The test is over: let go of what is still listed (a run stopped between a
        test's call and its teardown leaves the audit's census)."""
        for span in self.spans[::-1]:
            span.abandon()
        self.spans.clear()
        self.before_sample.clear()
        self.test = None
        self.ended = True


#: This context's session, with the number of finders pushed when it was entered (-1: one
#: ``current()`` made on first use, which a finder's test session always comes before).
_CURRENT: ContextVar[tuple[Session, int]] = ContextVar("pytest_graphleak_session")

#: The running pytest's way to the session of the test it runs now (``push_finder``):
#: pushed when pytest is configured, removed when it is unconfigured (a stack: a pytest
#: run can run another in its process, as pytester does). A finder returns None where
#: its run enters its sessions itself (``--graphleak``) or no test runs now. Module
#: state, because a thread the test starts has an empty context.
_FINDERS: list[Callable[[], Session | None]] = []


def push_finder(finder: Callable[[], Session | None]) -> None:
    """``current()`` asks ``finder``, from every thread, until it is removed."""
    _FINDERS.append(finder)


def remove_finder(finder: Callable[[], Session | None]) -> None:
    """Undo ``push_finder(finder)`` (by identity: a nested run removes its own)."""
    with contextlib.suppress(ValueError):
        _FINDERS.remove(finder)


def current() -> Session:
    """This context's session when it was entered under the newest pytest run (or
    outside any), else the test session that run's finder gives, else this context's,
    else one made here on first use."""
    held = _CURRENT.get(None)
    if held is not None and not held[0].ended and held[1] == len(_FINDERS):
        return held[0]
    if _FINDERS:
        found = _FINDERS[-1]()
        if found is not None:
            return found
    if held is not None and not held[0].ended:
        return held[0]
    made = Session()
    _CURRENT.set((made, -1))
    return made


@contextlib.contextmanager
def entered(session: Session) -> Iterator[Session]:
    """``session`` is ``current()`` inside the block; the one before it after."""
    token = _CURRENT.set((session, len(_FINDERS)))
    try:
        yield session
    finally:
        _CURRENT.reset(token)


@contextlib.contextmanager
def check_span() -> Iterator[None]:
    """A check runs inside the block, its diagnosis included: the census of the running
    test is told (``Session.spans``), so that what the check's steps make is its own."""
    told = list(current().spans)
    for span in told:
        span.check_begins()
    try:
        yield
    finally:
        for span in told:
            span.check_ends()

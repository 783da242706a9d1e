"""State handed over, not global (``session.py``): the running test's session is reached
through a context variable, restored after its block, and private to a thread."""

from __future__ import annotations

import threading

from pytest_graphleak import session
from pytest_graphleak.options import Settings
from pytest_graphleak.result import CheckResult


def test_entered_hands_a_session_over_and_gives_the_one_before_back() -> None:
    before = session.current()
    assert session.current() is before  # made once in this context, then kept
    recorded: list[CheckResult] = []
    test = session.RunningTest("t.py::test_x", Settings(), recorded.append)
    inner = session.Session(test=test, before_sample=[lambda: None])
    with session.entered(inner):
        assert session.current() is inner and session.current().test is test
        with session.entered(session.Session()):
            assert session.current().test is None
        assert session.current() is inner
    assert session.current() is before


def test_a_thread_starts_with_no_test() -> None:
    seen: list[session.Session] = []
    test = session.RunningTest("t.py::test_x", Settings(), lambda result: None)
    with session.entered(session.Session(test=test)):
        worker = threading.Thread(target=lambda: seen.append(session.current()))
        worker.start()
        worker.join()
    assert seen and seen[0].test is None

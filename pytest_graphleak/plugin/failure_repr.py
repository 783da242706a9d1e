"""A leak failure as one line, for ``--tb=line``.

pytest's line style still prints an exception's whole message (``E   ...``) before the
crash line, and a leak's message is the full report; with ``--tb=line`` the user asked
for one line per failure, so the report's ``longrepr`` becomes just that line, at the
user's own line (pytest's crash location is the plugin's ``raise``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _pytest._code.code import ExceptionChainRepr, ReprFileLocation, ReprTraceback


def one_line_repr(
    item: pytest.Item, excinfo: pytest.ExceptionInfo[BaseException], message: str
) -> ExceptionChainRepr:
    """A repr that prints ``PATH:LINE: message`` (and crosses pytest-xdist as pytest's
    own reprs do)."""
    path, lineno = user_line(item, excinfo)
    crash = ReprFileLocation(path, lineno, message)
    return ExceptionChainRepr([(ReprTraceback([], None, "line"), crash, None)])


def user_line(item: pytest.Item, excinfo: pytest.ExceptionInfo[BaseException]) -> tuple[str, int]:
    """Where a failure is in the test's own file: the last traceback entry there (the
    fixture's ``graphleak.check`` call, a ``t.step()``), else the test's definition."""
    for entry in reversed(excinfo.traceback):
        if Path(entry.path) == Path(item.path):
            return str(entry.path), entry.lineno + 1
    path, lineno, _ = item.reportinfo()
    return str(path), (lineno or 0) + 1

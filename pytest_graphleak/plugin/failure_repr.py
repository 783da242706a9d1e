"""How pytest shows a failed check of the user's own code (``graphleak.check()``, a
``track()`` loop, a framework callback raising inside ``fit()``), and a leak in one line
for ``--tb=line``.

pytest would print such a failure as a raw exception: the test's source with the fixture's
repr, every frame down into the framework, then the report as a wall of unwrapped ``E``
lines. The marker's failure is the report alone; these read the same, under one short
location: the user's line that was running when the check failed (``path:line: in
function`` and its source line, as pytest's ``--tb=short`` shows a frame; with
``--tb=long`` every frame of the user's code on the way there). The reprs are built of
pytest's own classes, so they cross pytest-xdist as pytest's do.
"""

from __future__ import annotations

import linecache
from collections.abc import Sequence
from pathlib import Path

import pytest
from _pytest._code.code import (
    ExceptionChainRepr,
    ReprEntry,
    ReprFileLocation,
    ReprTraceback,
    TracebackEntry,
)
from _pytest.pathlib import bestrelpath

from pytest_graphleak.heap.usercode import is_user_file


def one_line_repr(
    item: pytest.Item,
    excinfo: pytest.ExceptionInfo[BaseException],
    message: str,
    *,
    printed: bool = False,
) -> ExceptionChainRepr:
    """A repr that prints ``PATH:LINE: message`` (and crosses pytest-xdist as pytest's
    own reprs do). pytest's ``--tb=line`` prints a failure's crash line itself, but an
    ERROR's (a fixture's setup or teardown) only as its repr prints it: ``printed``
    makes the repr print that line."""
    path, lineno = user_line(item, excinfo)
    crash = ReprFileLocation(path, lineno, message)
    entries = [ReprEntry([str(crash)], None, None, None, "value")] if printed else []
    return ExceptionChainRepr([(ReprTraceback(entries, None, "line"), crash, None)])


def story_repr(
    item: pytest.Item,
    excinfo: pytest.ExceptionInfo[BaseException],
    story: str,
    message: str,
    *,
    every_frame: bool = False,
) -> ExceptionChainRepr:
    """The failure of a check run by the user's code: where (the deepest frame of the
    user's code, or with ``every_frame`` each of them, outermost first) then ``story``,
    the report, as a value-style entry (``terminal.colour_failure`` colours and breaks
    its lines). ``message`` is what pytest's short summary line says."""
    frames = user_frames(item, excinfo)
    shown = frames if every_frame else frames[-1:]
    entries: list[ReprEntry] = [_where(entry) for entry in shown]
    entries.append(ReprEntry(story.split("\n"), None, None, None, "value"))
    if frames:
        path, lineno = _shown_path(frames[-1]), frames[-1].lineno + 1
    else:
        path, lineno = user_line(item, excinfo)
    crash = ReprFileLocation(path, lineno, message)
    return ExceptionChainRepr([(ReprTraceback(entries, None, "short"), crash, None)])


def user_frames(
    item: pytest.Item, excinfo: pytest.ExceptionInfo[BaseException]
) -> Sequence[TracebackEntry]:
    """The traceback's frames in the user's code (``heap.usercode``: not pytest's, not a
    framework's, not this plugin's), outermost first, without those that hide themselves
    (``__tracebackhide__``)."""
    traceback = excinfo.traceback.filter(excinfo)
    return [entry for entry in traceback if is_user_file(str(entry.path))]


def _where(entry: TracebackEntry) -> ReprEntry:
    """``path:line: in function`` and the line's source, as ``--tb=short`` shows a frame."""
    source = linecache.getline(str(entry.path), entry.lineno + 1).strip()
    location = ReprFileLocation(_shown_path(entry), entry.lineno + 1, f"in {entry.name}")
    return ReprEntry([f"    {source}"] if source else [], None, None, location, "short")


def _shown_path(entry: TracebackEntry) -> str:
    """The path as pytest shows a frame's: relative to the working directory when that
    is shorter."""
    path = Path(str(entry.path))
    try:
        relative = bestrelpath(Path.cwd(), path)
    except (OSError, ValueError):  # another drive, a deleted directory
        return str(path)
    return relative if len(relative) < len(str(path)) else str(path)


def user_line(item: pytest.Item, excinfo: pytest.ExceptionInfo[BaseException]) -> tuple[str, int]:
    """Where a failure is in the test's own file: the last traceback entry there (the
    fixture's ``graphleak.check`` call, a ``t.step()``), else the test's definition."""
    for entry in reversed(excinfo.traceback):
        if Path(entry.path) == Path(item.path):
            return str(entry.path), entry.lineno + 1
    path, lineno, _ = item.reportinfo()
    return str(path), (lineno or 0) + 1

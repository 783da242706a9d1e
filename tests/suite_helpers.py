"""Constants and functions that several test modules share: ``from suite_helpers import
FAST, REPO``. A plain module, not ``conftest``: ``tests/minigrad`` and
``tests/integrations`` have conftests of their own, and under pytest's default import
mode whichever conftest was imported last answers ``from conftest import ...``."""

from __future__ import annotations

import gc
import re
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_graphleak.heap.gcstate import user_frozen_count

#: The repository's root directory.
REPO = Path(__file__).resolve().parents[1]

#: Flags for a pytester run of this plugin alone: no cache files, the tests in file
#: order (not pytest-randomly's), one process (not pytest-xdist's workers).
FAST = ("-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist")

#: (enabled, thresholds, debug flags, objects frozen by the user): the gc state a check,
#: a test or an in-process pytest run must leave as it found it.
GcState = tuple[bool, tuple[int, ...], int, int]

#: A JSON document as ``json.loads`` reads it: what each value is, the test says.
JsonDoc = dict[str, Any]

if TYPE_CHECKING:

    class FakeModule(types.ModuleType):
        """A plain module that a test fills with whatever attributes it needs."""

        def __setattr__(self, name: str, value: object) -> None: ...
else:
    FakeModule = types.ModuleType

#: The ``fake_module`` fixture (conftest.py): ``make(name, installed=...)``.
MakeModule = Callable[..., FakeModule]


def unchecked(call: Callable[..., object]) -> Callable[..., object]:
    """``call`` as a caller who ignores its signature sees it: for a test that passes a
    wrong argument on purpose, to see the error it raises."""
    return call


def gc_state() -> GcState:
    return gc.isenabled(), gc.get_threshold(), gc.get_debug(), user_frozen_count()


def folded(text: str) -> str:
    """``text`` with every run of whitespace made one space: the terminal wraps its lines
    at the terminal's width (80 columns in a subprocess), so a sentence is matched folded."""
    return " ".join(text.split())


def said_in_order(output: str, patterns: Sequence[str]) -> None:
    """Assert that ``output`` says each of ``patterns`` (fnmatch-style ``*``), in that
    order, read folded: a line the terminal broke at 80 columns still matches."""
    text, at = folded(output), 0
    for pattern in patterns:
        found = re.compile(_unanchored(folded(pattern).strip("*"))).search(text, at)
        assert found, f"not said after offset {at}: {pattern!r}\n{text}"
        at = found.end()


def _unanchored(pattern: str) -> str:
    """fnmatch's ``*``, ``?`` and ``[seq]`` as a regular expression found anywhere (the
    shortest match of each ``*``)."""
    out = []
    for token in re.findall(r"\[[^\]]+\]|.", pattern):
        if token == "*":
            out.append(".*?")
        elif token == "?":
            out.append(".")
        elif len(token) > 1:  # [seq] or [!seq]
            out.append(
                "[^" + re.escape(token[2:-1]) + "]"
                if token[1] == "!"
                else "[" + re.escape(token[1:-1]) + "]"
            )
        else:
            out.append(re.escape(token))
    return "".join(out)


def report_section(lines: Sequence[str]) -> list[str]:
    """The lines of the "graphleak report" section of a pytest run's output: its
    header line up to the next ``=`` line."""
    start = next(
        i for i, line in enumerate(lines) if line.startswith("=") and " graphleak report " in line
    )
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("=")), len(lines))
    return list(lines[start:end])


def failure_section(output: str, name: str) -> str:
    """The failure section of one test (its name a part of the ``___ name ___`` line) in
    a pytest run's output."""
    match = re.search(
        r"_{3,} (\S*" + re.escape(name) + r"\S*) _{3,}\n(.*?)(?=\n_{3,} |\n={3,})", output, re.S
    )
    assert match, f"no failure section for {name}"
    return match.group(2)

"""Recorders the user does not write: a test double (``unittest.mock``'s ``Mock``,
``MagicMock``...) keeps every call's arguments in ``mock_calls``, ``call_args_list`` and
its private twins (``_mock_mock_calls``). A graph-carrying tensor passed to the mock stays
alive as long as the mock does. The story and the fix name what the user controls (the
mock, the fixture that makes it, the call), never the mock's private attributes.

``recorder_of(links)`` reads the typed chain only; ``call_name(objects)`` reads the
chain's objects (where the diagnosis is made) for the method that was called.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_graphleak.result import CreationSite, Link

#: ``unittest.mock``'s classes of test doubles, by type name (``Link.type``).
MOCK_TYPES = frozenset({"Mock", "MagicMock", "NonCallableMock", "NonCallableMagicMock",
                        "AsyncMock", "PropertyMock", "NonCallableMagicMixin"})  # fmt: skip
#: Where a mock keeps what it was called with (and its children, which keep their own).
_RECORDING = frozenset({"mock_calls", "call_args_list", "method_calls", "call_args",
                        "_mock_mock_calls", "_mock_call_args_list", "_mock_method_calls",
                        "_mock_call_args", "_mock_children", "_mock_return_value"})  # fmt: skip
_ASSIGNED = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?::[^=]*)?=[^=]")


@dataclass(frozen=True)
class Recorder:
    """A mock on the holder chain: the user's name for it ("" unknown) and whether the
    chain's root is a fixture (whose scope the user chooses)."""

    name: str
    fixture: str  # the root fixture's name, "" when the root is no fixture


def recorder_of(links: Sequence[Link]) -> Recorder | None:
    """The first mock on the chain that keeps the graph in what it records; None."""
    for at, link in enumerate(links[1:], start=1):
        if link.type not in MOCK_TYPES:
            continue
        if link.edge != "attribute" or link.key not in _RECORDING:
            return None  # reached through the mock, not kept by its records
        before = links[at - 1]
        name = links[0].name if at == 1 else before.key if before.edge == "attribute" else ""
        fixture = links[0].name if links[0].type == "fixture" else ""
        return Recorder(name, fixture)
    return None


def call_name(objects: Sequence[Any]) -> str:
    """The method of the mock that was called with the kept tensor (``on_batch_end``),
    read from the recorded call on the chain; "" when none says."""
    mock = sys.modules.get("unittest.mock")
    if mock is None:
        return ""
    name = ""
    for obj in objects:
        if isinstance(obj, mock.NonCallableMock):  # a child mock is named for its method
            own = getattr(obj, "_mock_name", None)  # read, not called: no child is made
            name = own if isinstance(own, str) else name
        elif type(obj).__name__ == "_Call" and len(obj) == 3 and isinstance(obj[0], str):
            name = obj[0].rsplit(".", 1)[-1] or name  # ("on_batch_end", args, kwargs)
    return name


def argument_name(sites: Sequence[CreationSite]) -> str:
    """The user's name for the kept tensor: the name its creation line assigns."""
    for site in sites:
        found = _ASSIGNED.match(site.line)
        if found:
            return found.group(1)
    return ""


def recorder_story(recorder: Recorder, argument: str, method: str) -> str:
    """The mock `cb` records every call's arguments, so the graph-carrying `y_pred`
    passed to `on_batch_end` stays alive as long as the fixture."""
    mock = f"the mock `{recorder.name}`" if recorder.name else "a mock"
    what = f"the graph-carrying `{argument}`" if argument else "a graph-carrying tensor"
    passed = f" passed to `{method}`" if method else " passed to it"
    lasts = "the fixture" if recorder.fixture else "the mock"
    return (f"{mock} records every call's arguments, so {what}{passed} stays alive as "
            f"long as {lasts}")  # fmt: skip


def recorder_fix(recorder: Recorder, argument: str) -> str:
    """What the user controls: reset the mock, a function-scoped fixture, or detach in
    the code that makes the call."""
    mock = recorder.name or "the mock"
    parts = [f"call {mock}.reset_mock() once the test has read its calls"]
    if recorder.fixture:
        parts.append(f"make fixture '{recorder.fixture}' function-scoped")
    passed = (f"{argument}.detach() (or {argument}.item())" if argument
              else "detached tensors (.detach()) or numbers (.item())")  # fmt: skip
    parts.append(f"pass {passed} in the code that calls the mock")
    return f"{', '.join(parts[:-1])}, or {parts[-1]}"

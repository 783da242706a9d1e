"""Recorders the user does not write: a test double (``unittest.mock``'s ``Mock``,
``MagicMock``...) keeps every call's arguments in ``mock_calls``, ``call_args_list`` and
its private twins (``_mock_mock_calls``). A graph-carrying tensor passed to the mock stays
alive as long as the mock does. The story and the fix name what the user controls (the
mock, the fixture that makes it, the call), never the mock's private attributes.

``recorder_of(links)`` reads the typed chain only; ``call_name(objects)`` reads the
chain's objects (where the diagnosis is made) for the method that was called.

A framework's own record of logged values is another recorder the user does not write
(``history_of``): transformers' ``TrainerState.log_history`` keeps every dict given to
``Trainer.log()``, ignite's ``State.metrics`` each attached metric's last value. The
story names what fills it and the fix what the user passes to it, never the record's
insides. (Lightning's ``self.log`` detaches what it keeps unless ``enable_graph=True``;
its records are private attributes: told with the pattern's usual words.)
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_graphleak.result import CreationSite, Link

#: ``unittest.mock``'s classes of test doubles, by type name (``Link.type``).
MOCK_TYPES = frozenset(
    {
        "Mock",
        "MagicMock",
        "NonCallableMock",
        "NonCallableMagicMock",
        "AsyncMock",
        "PropertyMock",
        "NonCallableMagicMixin",
    }
)
#: Where a mock keeps what it was called with (and its children, which keep their own).
_RECORDING = frozenset(
    {
        "mock_calls",
        "call_args_list",
        "method_calls",
        "call_args",
        "_mock_mock_calls",
        "_mock_call_args_list",
        "_mock_method_calls",
        "_mock_call_args",
        "_mock_children",
        "_mock_return_value",
    }
)
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


@dataclass(frozen=True)
class History:
    """A framework's record of logged values on the holder chain (``history_of``)."""

    holder: str  # the user's words for it: ``trainer.state.log_history``
    fills: str  # what puts values there, told after "keeps"
    put: str  # how a value gets there: "logged", "stored"
    lasts: str  # what it lives as long as
    fix: str


#: (type name, attribute) -> (fallback words for the holder, what fills it, how a value
#: gets there, what it lives as long as, the fix with {holder}): the records frameworks
#: keep of what was logged.
_HISTORIES = {
    ("TrainerState", "log_history"): (
        "TrainerState.log_history",
        "every dict logged with `Trainer.log()` (the trainer's own logs and the results "
        "of `compute_metrics`) for the whole run",
        "logged",
        "the trainer",
        "log numbers: put loss.item() (or loss.detach()) in the dict given to "
        "Trainer.log() and return numbers from compute_metrics, not graph-carrying tensors",
    ),
    ("State", "metrics"): (
        "engine.state.metrics",
        "the last value of every metric attached to the engine (and whatever a handler "
        "stores there)",
        "stored",
        "the engine",
        "have the metric's compute() return a number (.item()) or a detached tensor "
        "(.detach()), and store value.item() or value.detach() where a handler sets "
        "{holder}[...]",
    ),
}


def history_of(links: Sequence[Link]) -> History | None:
    """The first framework record of logged values on the chain that keeps the graph in
    what it records (``_HISTORIES``); None."""
    for at, link in enumerate(links[1:], start=1):
        known = _HISTORIES.get((link.type, link.key)) if link.edge == "attribute" else None
        if known is None:
            continue
        path = [links[0].name, *(before.key for before in links[1 : at + 1])]
        plain = bool(links[0].name) and all(b.edge == "attribute" for b in links[1 : at + 1])
        fallback, fills, put, lasts, fix = known
        holder = ".".join(path) if plain else fallback
        return History(holder, fills, put, lasts, fix.format(holder=holder))
    return None


def history_story(history: History) -> str:
    """transformers' record `trainer.state.log_history` keeps every dict logged...,
    so a graph-carrying tensor logged there stays alive as long as the trainer."""
    return (
        f"`{history.holder}` keeps {history.fills}, so a graph-carrying tensor "
        f"{history.put} there stays alive as long as {history.lasts}"
    )


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
    return (
        f"{mock} records every call's arguments, so {what}{passed} stays alive as long as {lasts}"
    )


def recorder_fix(recorder: Recorder, argument: str) -> str:
    """What the user controls: reset the mock, a function-scoped fixture, or detach in
    the code that makes the call."""
    mock = recorder.name or "the mock"
    parts = [f"call {mock}.reset_mock() once the test has read its calls"]
    if recorder.fixture:
        parts.append(f"make fixture '{recorder.fixture}' function-scoped")
    passed = (
        f"{argument}.detach() (or {argument}.item())"
        if argument
        else "detached tensors (.detach()) or numbers (.item())"
    )
    parts.append(f"pass {passed} in the code that calls the mock")
    return f"{', '.join(parts[:-1])}, or {parts[-1]}"

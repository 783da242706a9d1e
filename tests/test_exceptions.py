"""One exceptions module: every error graphleak raises derives from ``GraphleakError``
and carries its result; every warning from ``GraphleakWarning``; each is still importable
where it was, and keeps the built-in base users' ``except`` clauses name."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any

import pytest
from suite_helpers import unchecked

import pytest_graphleak
from pytest_graphleak import exceptions
from pytest_graphleak.exceptions import GraphleakError, GraphleakWarning
from pytest_graphleak.integrations.base import FrameworkCheck
from pytest_graphleak.result import CheckResult, Verdict
from pytest_graphleak.values import int_at_least

PACKAGE = Path(pytest_graphleak.__file__).parent

#: Where each error was importable before it moved (and still is), and its built-in base.
WHERE = {
    "GraphLeakError": ("pytest_graphleak", AssertionError),
    "UnmeasuredError": ("pytest_graphleak", AssertionError),
    "GraphOutliveError": ("pytest_graphleak", AssertionError),
    "RankError": ("pytest_graphleak.distributed", AssertionError),
    "OptionError": ("pytest_graphleak.options", ValueError),
    "OutputPathError": ("pytest_graphleak.report.output_paths", ValueError),
    "SchemaError": ("pytest_graphleak.report.validate", ValueError),
    "BaselineError": ("pytest_graphleak.baseline", ValueError),
    "UsageError": ("pytest_graphleak.cli.exits", Exception),
    "UserCodeError": ("pytest_graphleak.cli.exits", Exception),
    "NotSwappable": ("pytest_graphleak.diagnose.fix_swap", Exception),
    "Refused": ("pytest_graphleak.cli.patches", Exception),
    "Unjudged": ("pytest_graphleak.outlive.rerun_fix", Exception),
}
WARNINGS = {"GraphLeakWarning": "pytest_graphleak", "GraphOutliveWarning": "pytest_graphleak"}


def _public(kind: type) -> dict[str, type]:
    return {
        name: value
        for name, value in vars(exceptions).items()
        if isinstance(value, type)
        and issubclass(value, kind)
        and value is not kind
        and not name.startswith("_")
    }


def test_every_public_error_derives_from_graphleak_error() -> None:
    errors = _public(BaseException)
    assert set(errors) - set(WARNINGS) - {"GraphleakError", "GraphleakWarning"} == set(WHERE)
    for name, (module, builtin) in WHERE.items():
        error = errors[name]
        assert issubclass(error, GraphleakError), name
        assert issubclass(error, builtin), name  # ``except AssertionError`` still catches it
        assert getattr(importlib.import_module(module), name) is error, f"{module}.{name}"
    for name, module in WARNINGS.items():
        assert issubclass(errors[name], GraphleakWarning), name
        assert issubclass(errors[name], UserWarning), name
        assert getattr(importlib.import_module(module), name) is errors[name]
    assert pytest_graphleak.GraphleakError is GraphleakError
    assert pytest_graphleak.GraphleakWarning is GraphleakWarning


def test_no_module_but_exceptions_defines_an_error() -> None:
    """An error class of its own elsewhere would have no common base."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "exceptions.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(base, ast.Name) and base.id.endswith(("Error", "Exception", "Warning"))
                for base in node.bases
            ):
                found.append(f"{path.relative_to(PACKAGE)}::{node.name}")
    # a private control-flow exception (a walk that stops early) is no error a user sees
    assert [name for name in found if not name.split("::")[1].startswith("_")] == []


def test_each_error_carries_its_result() -> None:
    result = CheckResult("t", 1, 1, {}, {}, Verdict(leaked=True))
    assert pytest_graphleak.GraphLeakError("text", result).result is result
    assert exceptions.UnmeasuredError("text", result).result is result
    outlive = exceptions.GraphOutliveError("text", [result, result])
    assert outlive.result is result and outlive.results == [result, result]
    assert exceptions.RankError("text").result is None
    assert exceptions.OptionError("bad").result is None
    with pytest.raises(GraphleakError, match="must be an integer"):
        int_at_least("steps", 0, 1)  # an option's bad value, caught by the common base


class _ToyCallback(FrameworkCheck):
    framework = "toy"


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (
            lambda: pytest_graphleak.check(lambda: None, name="step", steps=0),
            r"check\(step\): steps must be an integer >= 1, got 0",
        ),
        (
            lambda: unchecked(pytest_graphleak.check)(lambda: None, name="step", on_leak="warn"),
            r"check\(step\): unknown keyword argument 'on_leak'",
        ),
        (
            lambda: pytest_graphleak.track(warmup=-1),
            r"track\(\): warmup must be an integer >= 0, got -1",
        ),
        (
            lambda: _ToyCallback(window=1),
            r"_ToyCallback\(\) \(toy\): window must be an integer >= 2 \(or None\), got 1",
        ),
        (
            lambda: _ToyCallback(steps=3, window=4),
            r"_ToyCallback\(\) \(toy\): give steps= or window=, not both",
        ),
        (
            lambda: unchecked(_ToyCallback)(on_leak="log"),
            r"_ToyCallback\(\) \(toy\): on_leak must be 'raise' or 'warn', got 'log'",
        ),
    ],
    ids=[
        "check-steps",
        "check-keyword",
        "track-warmup",
        "callback-window",
        "callback-both",
        "callback-on-leak",
    ],
)
def test_a_bad_argument_raises_option_error_naming_the_call(call: Any, words: str) -> None:
    """A bad keyword of a check is the caller's mistake: an ``OptionError``, so that
    ``except GraphleakError`` catches it, still a ``ValueError``, naming the call and the
    keyword, raised before any step runs. (A bad marker argument stops the run with one:
    tests/test_bad_input.py.)"""
    with pytest.raises(exceptions.OptionError, match=words) as caught:
        call()
    assert isinstance(caught.value, GraphleakError) and isinstance(caught.value, ValueError)
    assert caught.value.result is None

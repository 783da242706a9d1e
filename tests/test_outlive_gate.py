"""The audit's gate (``outlive/gate``): its "no root reaches it" must be final, so it
agrees with the labelled search (``outlive/explain``) on every holder shape, reads a
library function's globals no more than that search does, and says "not known" past its
limit."""

from __future__ import annotations

import contextvars
import functools
import json
import sys
import types
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from importlib.util import find_spec
from typing import Any
from unittest import mock

import numpy as np
import pytest

import minigrad as mg
from pytest_graphleak.heap import usercode
from pytest_graphleak.outlive import audit_roots as audit_module
from pytest_graphleak.outlive.audit import Audit
from pytest_graphleak.outlive.explain import explain
from pytest_graphleak.outlive.found import Holder, Listed
from pytest_graphleak.outlive.gate import Gate
from pytest_graphleak.outlive.subjects import AuditedTest
from pytest_graphleak.probes.autograd import active_backends


def graph_tensor() -> mg.Tensor:
    return (mg.Tensor([1.0, 2.0], requires_grad=True) * 3).sum()


class Box:
    def __init__(self, value: object) -> None:
        self.value = value


class Holds(Box):
    def read(self) -> object:
        return self.value


class Slotted:
    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value


def _closure(value: object) -> Callable[[], object]:
    return lambda: value


def _defaults(value: object) -> Callable[..., object]:
    def use(x: object = value) -> object:
        return x

    return use


def _paused(value: object) -> Iterator[object]:
    held = [value]
    yield held


def _class_attribute(value: object) -> type:
    return type("Holding", (), {"KEPT": value, "__module__": __name__})


def _cached(value: object) -> Callable[[int], object]:
    @functools.lru_cache(maxsize=8)
    def make(n: int) -> object:
        return value

    make(1)
    return make


def _mock(value: object) -> mock.Mock:
    double = mock.Mock()
    double.on_batch_end(value)
    return double


def _context_var(value: object) -> contextvars.ContextVar[object]:
    var: contextvars.ContextVar[object] = contextvars.ContextVar("graphleak_gate_test")
    var.set(value)
    return var


def _object_array(value: object) -> np.ndarray:
    array = np.empty(2, dtype=object)
    array[1] = value
    return array


#: name -> a root that keeps the value, the way a library or a test double would.
SHAPES: dict[str, Callable[[object], object]] = {
    "list": lambda v: [v],
    "dict value": lambda v: {"k": v},
    "deque": lambda v: deque([v]),
    "tuple in a set": lambda v: {(1, Box(v))},
    "instance attribute": Box,
    "slot": Slotted,
    "closure": _closure,
    "default": _defaults,
    "bound method": lambda v: Holds(v).read,
    "partial": lambda v: functools.partial(print, v),
    "generator local": _paused,
    "class attribute": _class_attribute,
    "lru_cache": _cached,
    "mock call_args_list": _mock,
    "context variable": _context_var,
    "numpy object array": _object_array,
}


def _verdicts(root: object, target: object) -> tuple[bool | None, bool]:
    """(the gate's answer, does the labelled search name a holder) for one root."""
    backends = active_backends()
    targets = Listed([target])
    gate = Gate().may_reach([root], targets.made_during, backends)
    found = explain(targets, [Holder("global 'x'", "x", root)], nodeid="t", backends=backends)
    named = bool(found.results)
    found.release()
    return gate, named


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_gate_finds_what_the_labelled_search_names(shape: str) -> None:
    target = graph_tensor()
    root = SHAPES[shape](target)
    assert _verdicts(root, target) == (True, True)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_root_that_does_not_keep_it_is_no(shape: str) -> None:
    target = graph_tensor()
    root = SHAPES[shape](graph_tensor())  # another graph, not the one looked for
    assert _verdicts(root, target) == (False, False)


@pytest.mark.skipif(find_spec("torch") is None, reason="torch is not installed")
def test_a_weight_a_forward_pre_hook_remakes_is_no_reach() -> None:
    """A weight-normed layer's ``weight`` is remade by every forward: the labelled search
    passes over it, and so does the gate, or every test that runs such a layer from a
    module global would pay for the search; a graph in another attribute is still found."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the old weight_norm is deprecated
        layer = torch.nn.utils.weight_norm(torch.nn.Linear(3, 1))
    layer(torch.ones(2, 3))  # the pre-hook remade layer.weight, with a graph
    assert _verdicts(layer, layer.weight) == (False, False)
    layer.kept = (layer.weight * 2).sum()
    assert _verdicts(layer, layer.kept) == (True, True)


def test_a_library_functions_globals_are_not_read() -> None:
    """A function of the standard library leads to its module's globals through
    ``__globals__``; neither walk follows that (the whole package would be read)."""
    target = graph_tensor()
    json._graphleak_gate_test = target  # type: ignore[attr-defined]
    try:
        assert _verdicts(json.dumps, target) == (False, False)
    finally:
        del json._graphleak_gate_test  # type: ignore[attr-defined]


def test_a_weak_reference_keeps_nothing() -> None:
    target = graph_tensor()
    box = Box(target)
    assert _verdicts(weakref.proxy(box), target) == (False, False)
    assert _verdicts([weakref.ref(box)], target) == (False, False)


def test_past_its_limit_the_gate_does_not_know() -> None:
    target = graph_tensor()
    crowd: list[Any] = [[i] for i in range(1_000)]
    crowd.append([target])
    backends = active_backends()
    wanted = Listed([target]).made_during
    assert Gate().may_reach([crowd], wanted, backends, limit=100) is None
    assert Gate().may_reach([crowd], wanted, backends) is True


def test_the_gate_keeps_nothing_alive() -> None:
    target = graph_tensor()
    holder = Box([target])
    gate = Gate()
    assert gate.may_reach([holder], Listed([target]).made_during, active_backends())
    ref = weakref.ref(holder)
    del holder
    assert ref() is None  # only the class is remembered, by weak reference


def test_what_is_kept_on_purpose_is_not_walked_through() -> None:
    target = graph_tensor()
    cache = {"kept": target}
    wanted = Listed([target]).made_during
    assert Gate().may_reach([Box(cache)], wanted, active_backends()) is True
    assert Gate().may_reach([Box(cache)], wanted, active_backends(), kept=[cache]) is False


DUNDER = """
import minigrad as mg


class Registry:
    __kept__ = []  # a dunder class attribute: the holder search reads no such name


def test_keeps_it_under_a_dunder_name():
    Registry.__kept__.append(mg.Tensor([1.0], requires_grad=True) * 2)
"""

CROWDED = """
import sys

import numpy as np
import minigrad as mg

CROWD = [[i] for i in range(120_000)]  # more than the gate's 100,000 objects


def test_leaves_a_graph_in_an_array_no_root_reaches():
    # an object array's items are references the collector does not show: climbing up
    # from the graph cannot tell who holds it, so the walk down from the roots runs
    kept = np.empty(1, dtype=object)
    kept[0] = mg.Tensor([1.0], requires_grad=True) * 2
    sys.graphleak_gate_test = kept  # the standard library's: not one of the user's roots
"""

THREE = """
import minigrad as mg

A, B, C, D = [], [], [], []


def test_keeps_four():
    for kept in (A, B, C, D):
        kept.append(mg.Tensor([1.0], requires_grad=True) * 2)
"""


def test_a_graph_the_walk_reached_but_no_search_named_is_said(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_dunder=DUNDER)
    result = pytester.runpytest_subprocess(
        "-p", "no:randomly", "-p", "no:cacheprovider", "--graphleak"
    )
    text = " ".join(result.stdout.str().split())
    assert (
        "graphleak: outlive audit: 1 test left graphs alive that a first, unlabelled look "
        "found your roots holding but the holder search did not name"
    ) in text
    assert "the first: test_dunder.py::test_keeps_it_under_a_dunder_name" in text
    result.assert_outcomes(passed=1)


def test_roots_past_the_gates_limit_are_said(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_crowded=CROWDED)
    result = pytester.runpytest_subprocess(
        "-p", "no:randomly", "-p", "no:cacheprovider", "--graphleak"
    )
    text = " ".join(result.stdout.str().split())
    assert (
        "graphleak: outlive audit: in 1 test your roots reach more than 100,000 objects, "
        "so only the holder search looked for the graphs left alive"
    ) in text
    assert "the first: test_crowded.py::test_leaves_a_graph_in_an_array_no_root_reaches" in text
    result.assert_outcomes(passed=1)


def test_past_three_holders_the_last_finding_says_the_rest_was_not_looked_for(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_three=THREE)
    result = pytester.runpytest_subprocess(
        "-p", "no:randomly", "-p", "no:cacheprovider", "--graphleak"
    )
    text = " ".join(result.stdout.str().split())
    assert (
        text.count(
            "at most 3 holders are named per test: what other holders keep was not looked for"
        )
        == 1
    )


def test_which_modules_are_the_users_is_asked_once_per_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The roots' modules: each name is asked about once, a new one when it is imported."""
    asked: list[str] = []
    real = usercode.is_user_module  # what audit.py imports

    def counting(name: object) -> bool | None:
        asked.append(str(name))
        return real(name)

    monkeypatch.setattr(audit_module, "is_user_module", counting)
    audit = Audit()
    test = AuditedTest("t")
    audit.root_values(test)
    first = len(asked)
    assert first >= len(sys.modules) - 5  # every module once (a few may come and go)
    audit.root_values(test)
    assert len(asked) == first  # nothing asked again while sys.modules is unchanged
    module = types.ModuleType("graphleak_gate_new_module")
    monkeypatch.setitem(sys.modules, "graphleak_gate_new_module", module)
    audit.root_values(test)
    assert asked[first:] == ["graphleak_gate_new_module"]


def test_plain_values_are_passed_over_without_a_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """Numbers, strings and tuples or dicts of them are most of what a walk reads, and
    none leads on: the gate asks no per-type rule of them (a dict lookup and a weak
    reference each, twice the walk's time on a config-heavy root), and still finds
    the tensor beside them."""
    target = graph_tensor()
    plain: list[object] = [1, 2.0, 3j, True, "s", b"b", None, (1, "a"), {"k": 1}]
    root = [*plain, [target]]
    asked: list[type] = []
    rule = Gate._rule

    def counted(self: Gate, obj: object, backends: Any) -> int:
        asked.append(type(obj))
        return rule(self, obj, backends)

    monkeypatch.setattr(Gate, "_rule", counted)
    wanted = Listed([target]).made_during
    assert Gate().may_reach([root], wanted, active_backends()) is True
    assert not {type(value) for value in plain} & set(asked)

"""A list rebuilt one longer each step (``h = h + [loss]``) is ``list-accumulation``.

Repro ``rebind_list_reads_retained_grad_fn``: ``state["history"] = state["history"] +
[loss]`` keeps one more graph-carrying tensor per step, exactly as ``.append(loss)`` does,
but the old list never grows (a new one takes its place), so it read as
``retained-grad-fn`` with a fix ("update it under no_grad()") that left the leak. The
watched chain is now followed again after each step, and the fix is the line with the
kept value made a number; applied, the test passes. Also for a class attribute
(``type(self).k = type(self).k + [loss]``) and a rebound module global.
"""

from __future__ import annotations

import numpy as np
import pytest
from suite_helpers import FAST, failure_section, folded

import minigrad as mg
from pytest_graphleak import check
from pytest_graphleak.report.text import render_text
from pytest_graphleak.words.lines import stored_fix

pytest_plugins = ["pytester"]
#: Imported before the in-process run, which must not be the first to load it.
torch = pytest.importorskip("torch")

_TESTS = """
import unittest

import pytest
import torch

model = torch.nn.Linear(4, 1)
state = {{"history": []}}
h = []


@pytest.mark.no_graph_growth
def test_dict_entry():
    loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward()
    state["history"] = state["history"] + [{kept}]


@pytest.mark.no_graph_growth
def test_global():
    global h
    loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward()
    h = h + [{kept}]


@pytest.mark.no_graph_growth
class TestClassAttribute(unittest.TestCase):
    k = []

    def test_k(self):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        loss.backward()
        type(self).k = type(self).k + [{kept}]
"""


def test_a_rebuilt_list_is_list_accumulation_and_its_fix_removes_the_leak(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_rebind=_TESTS.format(kept="loss"))
    result = pytester.runpytest("--graphleak", *FAST)
    result.assert_outcomes(failed=3)
    out = result.stdout.str()
    fixes = {
        "test_dict_entry": 'state["history"] = state["history"] + [loss.item()]',
        "test_global": "h = h + [loss.item()]",
        "test_k": "type(self).k = type(self).k + [loss.item()]",
    }
    for name, fixed in fixes.items():
        text = folded(failure_section(out, name))
        assert "leaks: list-accumulation" in text, text
        assert "retained-grad-fn" not in text, text
        assert "is replaced by a longer one per step" in text, text
        # The change tried and verified (the step re-run with it grew nothing).
        assert "fix (verified: " in text and f": {fixed}" in text, text
    pytester.makepyfile(test_rebind=_TESTS.format(kept="loss.item()"))
    pytester.runpytest("--graphleak", *FAST).assert_outcomes(passed=3)


def test_the_fix_of_a_concatenated_list_names_the_one_new_entry() -> None:
    fixed = stored_fix("list-accumulation", 'state["h"] = [out] + state["h"]')
    assert fixed.endswith('state["h"] = [out.detach()] + state["h"]'), fixed
    # Two new entries, or a join with something else: no shape known here.
    assert stored_fix("list-accumulation", "h = h + [a, b]") == ""
    assert stored_fix("list-accumulation", "h = g + [a]") == ""


def test_check_reads_a_rebuilt_list_of_minigrad_tensors() -> None:
    w = mg.Tensor(np.ones((3, 1)), requires_grad=True)
    state: dict[str, list[object]] = {"h": []}

    def step() -> None:
        loss = (mg.Tensor(np.ones((2, 3))) @ w).sum()
        loss.backward()
        w.grad = None
        state["h"] = state["h"] + [loss]

    result = check(step, steps=8)
    text = render_text(result)
    d = result.diagnosis
    assert d is not None and d.pattern == "list-accumulation", text
    assert d.fix.endswith('state["h"] = state["h"] + [loss.item()]'), text

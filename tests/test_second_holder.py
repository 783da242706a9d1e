"""Repro ``marker_second_holder_hidden``: a step that leaks into two holders.

``losses.append(loss)`` and ``outs[i] = out``: the chain names ``losses``; a note says
that it keeps 1 of the 2 graph-carrying tensors each step leaves and names the other
holder with its line, so one round of fixes makes the test pass.
"""

from __future__ import annotations

import pytest
from suite_helpers import FAST, folded

import minigrad as mg
from pytest_graphleak import check
from pytest_graphleak.report.text import render_text

pytest_plugins = ["pytester"]
#: Imported before the in-process run, which must not be the first to load it.
torch = pytest.importorskip("torch")

_TEST = """
import pytest
import torch

model = torch.nn.Linear(4, 1)
x = torch.randn(8, 4)
losses = []
outs = {{}}
step = [0]


@pytest.mark.no_graph_growth
def test_two_holders():
    out = model(x)
    loss = out.pow(2).mean()
    loss.backward()
    losses.append({loss})
    step[0] += 1
    outs[step[0]] = {out}
"""


def test_both_holders_are_named_and_one_round_of_fixes_passes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_two=_TEST.format(loss="loss", out="out"))
    result = pytester.runpytest("--graphleak", *FAST)
    result.assert_outcomes(failed=1)
    out = folded(result.stdout.str())
    assert "held by: global 'losses' -> list(len=" in out, out
    assert (
        "a second holder: the holder above keeps 1 of the 2 graph-carrying tensors each "
        "step leaves; the other 1 is kept by global 'outs' -> dict[" in out
    ), out
    assert "(stored at test_two.py:18: outs[step[0]] = out)" in out, out
    # Each holder fixed as a number: the test passes.
    pytester.makepyfile(test_two=_TEST.format(loss="loss.item()", out="out.sum().item()"))
    pytester.runpytest("--graphleak", *FAST).assert_outcomes(passed=1)


def test_one_holder_of_records_is_not_named_twice() -> None:
    """Tensors in records of one list: the list that grew keeps them all."""
    w = mg.Tensor([[1.0], [2.0]], requires_grad=True)
    rows: list[tuple[object, object]] = []

    def step() -> None:
        out = mg.Tensor([[1.0, 2.0]]) @ w
        loss = out.sum()
        loss.backward()
        w.grad = None
        rows.append((out, loss))

    result = check(step, steps=8)
    text = render_text(result)
    d = result.diagnosis
    assert d is not None and d.pattern == "list-accumulation", text
    assert not any("second holder" in note for note in d.notes), text


def test_a_minigrad_step_with_two_holders_names_both() -> None:
    w = mg.Tensor([[1.0], [2.0]], requires_grad=True)
    losses: list[object] = []
    outs: dict[int, object] = {}

    def step() -> None:
        out = mg.Tensor([[1.0, 2.0]]) @ w
        loss = out.sum()
        loss.backward()
        w.grad = None
        losses.append(loss)
        outs[len(outs)] = out

    result = check(step, steps=8)
    text = render_text(result)
    d = result.diagnosis
    assert d is not None and d.pattern == "list-accumulation", text
    second = [note for note in d.notes if note.startswith("a second holder")]
    assert len(second) == 1, text
    other = "outs" if d.chain[0] == "local 'losses'" else "losses"
    assert f"local '{other}'" in second[0] and "(stored at " in second[0], text

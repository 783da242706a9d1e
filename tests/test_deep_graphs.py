"""Deep autograd graphs never crash the run (issue 13.1).

torch keeps a graph node's Python wrapper alive with the node once Python touched it,
and a deep chain whose nodes were wrapped in one go cannot be freed: the process dies
with SIGSEGV when the graph goes. The torch probe and the diagnosis walk graphs through
``heap.graphwalk``, bounded per walk, so these runs end normally.

One pytest subprocess (a subprocess: a crash is what is tested) runs two files: a
200,000-node graph held by a fixture (with the walks unbounded this run dies with
SIGSEGV, exit 139, when the fixture's graph is freed), and a leak that grows the graph
by 20,000 nodes per step, twice the walk's bound, so its count is a lower bound that
still grows and is diagnosed. Its exit code, outcomes and JSON report are checked.
"""

from __future__ import annotations

import itertools
import json

import pytest
from suite_helpers import FAST, JsonDoc

pytest.importorskip("torch")


HELD_BY_A_FIXTURE = """
import pytest
import torch


@pytest.fixture
def deep():
    x = torch.ones(1, requires_grad=True)
    y = x
    for _ in range(200_000):  # e.g. a sequence model unrolled over many time steps
        y = y * 1.0
    return {"y": y}


@pytest.mark.no_graph_growth(steps=4, warmup=1)
def test_a_clean_step(deep):
    (deep["y"].detach() * 2).sum()


def test_b_runs_after():
    pass
"""

GROWN_BY_A_LEAK = """
import pytest
import torch


def deep(x):
    for _ in range(20_000):  # twice the walk's bound of new nodes per sample
        x = x * 1.0
    return x


@pytest.fixture
def state():
    return {"total": torch.zeros(1), "w": torch.ones(1, requires_grad=True)}


@pytest.mark.no_graph_growth(steps=3, warmup=1)
def test_a_deep_running_total(state):
    state["total"] = state["total"] + deep(state["w"]).sum()


def test_b_runs_after():
    pass
"""


def _checks(pytester: pytest.Pytester) -> list[JsonDoc]:
    document = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    return [check for test in document["tests"] for check in test["checks"]]


def test_deep_graphs_are_measured_freed_and_diagnosed_without_a_crash(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_held=HELD_BY_A_FIXTURE, test_grown=GROWN_BY_A_LEAK)
    result = pytester.runpytest_subprocess("--graphleak", "-v", "--graphleak-report=r.json", *FAST)
    # 139 (SIGSEGV) before the bounded walk; 1: the grown leak fails its test
    assert result.ret == 1, result.stdout.str()
    result.assert_outcomes(passed=3, failed=1)  # test_b_runs_after ran after each graph went
    checks = _checks(pytester)
    assert len(checks) == 2, checks

    # A deep graph held by a fixture: measured (a constant lower bound), clean, freed.
    result.stdout.fnmatch_lines(
        ["CLEAN *test_held.py::test_a_clean_step*", "    note: torch.nodes is a lower bound*"]
    )
    (held,) = (c for c in checks if c["name"].startswith("test_held.py"))
    assert not held["leaked"]
    nodes = held["series"]["torch.nodes"]
    assert len(set(nodes)) == 1 and nodes[0] >= 10_000, nodes  # the same lower bound
    assert any("torch.nodes is a lower bound" in note for note in held["notes"])

    # A leak that grows the graph faster than the bound: caught and diagnosed.
    result.stdout.fnmatch_lines(
        [
            "*test_a_deep_running_total leaks: retained-grad-fn",
            "*held by: fixture 'state' -> dict*total*Tensor*",
            "*graph node counts here are lower bounds*",
            "*torch.nodes is a lower bound*",
        ]
    )
    (grown,) = (c for c in checks if c["name"].startswith("test_grown.py"))
    assert grown["leaked"] and grown["pattern"] == "retained-grad-fn"
    nodes = grown["series"]["torch.nodes"]
    assert all(b > a for a, b in itertools.pairwise(nodes)), nodes  # a lower bound that grows
    assert any("torch.nodes is a lower bound" in note for note in grown["notes"])

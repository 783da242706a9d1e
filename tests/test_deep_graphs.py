"""Deep autograd graphs never crash the run (issue 13.1).

torch keeps a graph node's Python wrapper alive with the node once Python touched it,
and a 50,000-node chain whose nodes were wrapped in one go cannot be freed: the process
dies with SIGSEGV when the graph goes. The torch probe and the diagnosis walk graphs
through ``heap.graphwalk``, bounded per walk, so these runs end normally: each is a
subprocess whose exit code, outcomes and JSON report are checked.
"""

from __future__ import annotations

import itertools
import json

import pytest

pytest.importorskip("torch")

FAST = ("-p", "no:randomly", "-p", "no:cacheprovider")

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
    for _ in range(50_000):
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


def _checks(pytester: pytest.Pytester) -> list[dict]:
    document = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    return [check for test in document["tests"] for check in test["checks"]]


def test_a_deep_graph_held_by_a_fixture_is_measured_and_freed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_held=HELD_BY_A_FIXTURE)
    result = pytester.runpytest_subprocess(
        "--graphleak", "-v", "--graphleak-report=r.json", *FAST
    )
    assert result.ret == 0, result.stdout.str()  # 139 (SIGSEGV) before the bounded walk
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["CLEAN *test_a_clean_step*", "    note: torch.nodes is a lower bound*"]
    )
    (check,) = _checks(pytester)
    assert not check["leaked"]
    nodes = check["series"]["torch.nodes"]
    assert len(set(nodes)) == 1 and nodes[0] >= 10_000, nodes  # the same lower bound
    assert any("torch.nodes is a lower bound" in note for note in check["notes"])


def test_a_deep_leak_is_caught_and_diagnosed_without_a_crash(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_grown=GROWN_BY_A_LEAK)
    result = pytester.runpytest_subprocess("--graphleak", "--graphleak-report=r.json", *FAST)
    assert result.ret == 1, result.stdout.str()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_a_deep_running_total leaks: retained-grad-fn",
            "*held by: fixture 'state' -> dict*total*Tensor*",
            "*graph node counts here are lower bounds*",
            "*torch.nodes is a lower bound*",
        ]
    )
    (check,) = _checks(pytester)
    assert check["leaked"] and check["pattern"] == "retained-grad-fn"
    nodes = check["series"]["torch.nodes"]
    assert all(b > a for a, b in itertools.pairwise(nodes)), nodes  # a lower bound that grows
    assert any("torch.nodes is a lower bound" in note for note in check["notes"])

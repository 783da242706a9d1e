"""A suite whose tests leave graphs alive where no root of the user's reaches them (a
library's cache and ``lru_cache``, torch's C++, cyclic garbage, a test double made in the
test): the audit's gate answers "no" for them, and the run is the plain run's, outcome
for outcome, with no warning; a graph the user's own ``lru_cache`` keeps is still named,
with its holder (issue 43, items 1 and 5)."""

from __future__ import annotations

import pytest
from suite_helpers import FAST, folded

pytest.importorskip("torch")

LIBRARY = """
import functools
import torch

_CACHE = {}


def transform(x):
    out = (x * 2).tanh()
    _CACHE[len(_CACHE) % 4] = out
    return out


@functools.lru_cache(maxsize=8)
def basis(n):
    return torch.ones(4, requires_grad=True) * n
"""

SUITE = """
import functools
from unittest import mock

import pytest
import torch

import heavylib

MODELS = {"mlp": torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(),
                                     torch.nn.Linear(8, 1))}
RECORDER = mock.Mock()
INPUTS = [torch.randn(2, 4) for _ in range(4)]


@functools.lru_cache(maxsize=8)
def detached(n):
    return torch.randn(n)


class Node:
    def __init__(self, value):
        self.me = self
        self.value = value


@pytest.mark.parametrize("i", range(12))
def test_step(i):
    loss = MODELS["mlp"](INPUTS[i % 4]).pow(2).mean()
    loss.backward()
    kind = i % 6
    if kind == 1:
        heavylib.transform(torch.randn(4, requires_grad=True)).sum().backward()
    elif kind == 2:
        assert heavylib.basis(i).sum().item() >= 0
    elif kind == 3:
        Node(MODELS["mlp"](INPUTS[0]).sum())
    elif kind == 4:
        mock.Mock().on_batch_end(y_pred=MODELS["mlp"](INPUTS[1]))
    elif kind == 5:
        RECORDER.on_step(loss.detach())
        detached(i)
    assert loss.item() >= 0


def test_fails_as_it_would():
    assert MODELS["mlp"](INPUTS[0]).sum().item() == 12345
"""

KEEPER = """
import functools
import torch

WEIGHT = torch.ones(3, requires_grad=True)


@functools.lru_cache(maxsize=4)
def scaled(n):
    return WEIGHT * n  # the user's own cache keeps a graph


def test_keeps_a_graph_in_the_users_lru_cache():
    assert scaled(2).sum().item() == 6
"""


def _outcomes(output: str) -> list[str]:
    """Each test's outcome, from the -rA short summary (``PASSED test_heavy.py::...``)."""
    return sorted(
        line.split(" - ")[0]
        for line in output.splitlines()
        if line.startswith(("PASSED ", "FAILED ", "ERROR "))
    )


def _suite(pytester: pytest.Pytester) -> None:
    library = pytester.path / "site-packages" / "heavylib"
    library.mkdir(parents=True)
    (library / "__init__.py").write_text(LIBRARY, encoding="utf-8")
    pytester.makepyfile(test_heavy=SUITE)
    pytester.makeconftest("import torch\ntorch.set_num_threads(1)\n")


def test_graphs_no_root_reaches_change_nothing_and_warn_nothing(
    pytester: pytest.Pytester,
) -> None:
    _suite(pytester)
    env = str(pytester.path / "site-packages")
    pytester._monkeypatch.setenv("PYTHONPATH", env)
    plain = pytester.runpytest_subprocess(*FAST, "-rA")
    audited = pytester.runpytest_subprocess(*FAST, "-rA", "--graphleak", "-W", "error")
    plain.assert_outcomes(passed=12, failed=1)
    audited.assert_outcomes(passed=12, failed=1)
    assert _outcomes(audited.stdout.str()) == _outcomes(plain.stdout.str())
    assert len(_outcomes(plain.stdout.str())) == 13
    text = folded(audited.stdout.str())
    assert "warnings summary" not in text and "GraphOutlive" not in text
    assert "0 tests with results; 13 audited for graphs that outlive them" in text


def test_a_graph_the_users_lru_cache_keeps_is_still_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_keeper=KEEPER)
    result = pytester.runpytest_subprocess(*FAST, "--graphleak")
    text = folded(result.stdout.str())
    assert "test_keeps_a_graph_in_the_users_lru_cache" in text
    assert "global 'test_keeper.scaled'" in text, text

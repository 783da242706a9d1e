"""10-zin/cpp-micrograd#3: "Memory leaks" — each op's ``_backward`` lambda captures its own
output (``out->_backward = [this, other, out] {...}``), so an output owns a closure that
owns the output, and nothing is ever destroyed.

The same habit ported to a minigrad custom op: ``smooth_abs`` is a proper ``mg.Function``
(its graph is fine), but the helper that wraps it keeps micrograd's ``out._backward``
closure for a gradient check, and that closure captures ``out``. In Python the cycle
``out -> out._backward -> closure cell -> out`` is freed only by the cyclic garbage
collector: until it runs, every step's outputs (with their arrays) pile up.

Pattern: cycle (freed only by gc.collect()).
Fix: capture a weak reference (``weakref.ref(out)``), as the C++ fix did with a raw
pointer, or drop the closure.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import minigrad as mg
from minigrad import nn, optim

SOURCE = "10-zin/cpp-micrograd#3"
EXPECTED_PATTERN = "cycle"
CULPRIT = "_backward"
#: No ``stored at:`` line: that line is given for list-accumulation and retained-grad-fn.
STORED_AT = None


class SmoothAbs(mg.Function):
    """sqrt(x^2 + eps): a differentiable |x|."""

    @staticmethod
    def forward(ctx: Any, x: np.ndarray) -> np.ndarray:
        out = np.sqrt(x * x + 1e-3)
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx: Any, grad: np.ndarray) -> np.ndarray:
        x, out = ctx.saved_tensors
        return grad * x / out


def smooth_abs(x: mg.Tensor, *, weak: bool = False) -> mg.Tensor:
    out = SmoothAbs.apply(x)
    if weak:
        ref = weakref.ref(out)
        out._backward = lambda: ref().grad  # type: ignore[union-attr]
    else:
        out._backward = lambda: out.grad  # micrograd's habit: the closure captures `out`
    return out


@dataclass
class FitState:
    model: nn.Module
    optimizer: optim.Optimizer
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))


def make_state() -> FitState:
    rng = np.random.default_rng(0)
    model = nn.Linear(6, 1, rng=rng)
    return FitState(model, optim.SGD(model.parameters(), lr=0.01))


def _train(state: FitState, *, weak: bool) -> None:
    x = mg.Tensor(state.rng.standard_normal((10, 6)).astype(np.float32))
    y = state.rng.standard_normal((10, 1)).astype(np.float32)
    loss = smooth_abs(state.model(x) - y, weak=weak).mean()  # an L1-like loss
    state.optimizer.zero_grad()
    loss.backward()
    state.optimizer.step()


def leaky_train_step(state: FitState) -> None:
    _train(state, weak=False)


def fixed_train_step(state: FitState) -> None:
    _train(state, weak=True)


_STATES: dict[str, FitState] = {}


def _state(kind: str) -> FitState:
    if kind not in _STATES:
        _STATES[kind] = make_state()
    return _STATES[kind]


def leaky_step() -> None:
    leaky_train_step(_state("leaky"))


def fixed_step() -> None:
    fixed_train_step(_state("fixed"))


@pytest.fixture
def fit_state() -> FitState:
    return make_state()


@pytest.mark.no_graph_growth
def test_leaky(fit_state: FitState) -> None:
    leaky_train_step(fit_state)


@pytest.mark.no_graph_growth
def test_fixed(fit_state: FitState) -> None:
    fixed_train_step(fit_state)

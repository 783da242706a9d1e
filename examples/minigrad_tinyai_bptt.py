"""Leavesfly/TinyAI: truncated BPTT without ``unChainBackward`` (minigrad).

TinyAI's Java engine keeps every ``Variable``'s creator chain until
``Variable.unChainBackward()`` cuts it; its RNN examples call it after each truncated
BPTT window. Forgetting it here, on a minigrad RNN, looks harmless: the loss falls.
But the carried hidden state still refers to the previous window's graph, and
``backward(retain_graph=True)`` (the usual answer to "backward through a freed graph")
keeps that graph intact, so the history behind ``hidden`` grows by one window a step.

Pattern: retained-grad-fn (hidden state never unchained).
Fix: ``hidden.unchain_backward()`` after each window (``hidden.detach()`` works too).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

import minigrad as mg
from minigrad import nn, optim
from minigrad.functional import mse_loss

SOURCE = "Leavesfly/TinyAI (Variable.unChainBackward)"
EXPECTED_PATTERN = "retained-grad-fn"
CULPRIT = "hidden"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "state.hidden = state.cell(mg.Tensor(x), state.hidden)"

WINDOW = 3  # time steps per truncated-BPTT window


@dataclass
class SeqState:
    cell: nn.RNNCell
    head: nn.Linear
    optimizer: optim.Optimizer
    hidden: mg.Tensor
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))


def make_state() -> SeqState:
    rng = np.random.default_rng(0)
    cell = nn.RNNCell(4, 12, rng=rng)
    head = nn.Linear(12, 1, rng=rng)
    params = [*cell.parameters(), *head.parameters()]
    return SeqState(cell, head, optim.SGD(params, lr=0.01), mg.zeros(2, 12))


def _window_loss(state: SeqState) -> mg.Tensor:
    xs = state.rng.standard_normal((WINDOW, 2, 4)).astype(np.float32)
    ys = np.sin(xs.sum(axis=2, keepdims=True))
    loss = None
    for x, y in zip(xs, ys, strict=True):
        state.hidden = state.cell(mg.Tensor(x), state.hidden)
        term = mse_loss(state.head(state.hidden), y)
        loss = term if loss is None else loss + term
    assert loss is not None
    return loss


def leaky_train_step(state: SeqState) -> None:
    loss = _window_loss(state)
    state.optimizer.zero_grad()
    loss.backward(retain_graph=True)
    state.optimizer.step()


def fixed_train_step(state: SeqState) -> None:
    loss = _window_loss(state)
    state.optimizer.zero_grad()
    loss.backward()
    state.optimizer.step()
    state.hidden.unchain_backward()


_STATES: dict[str, SeqState] = {}


def _state(kind: str) -> SeqState:
    if kind not in _STATES:
        _STATES[kind] = make_state()
    return _STATES[kind]


def leaky_step() -> None:
    leaky_train_step(_state("leaky"))


def fixed_step() -> None:
    fixed_train_step(_state("fixed"))


@pytest.fixture
def seq_state() -> SeqState:
    return make_state()


@pytest.mark.no_graph_growth
def test_leaky(seq_state: SeqState) -> None:
    leaky_train_step(seq_state)


@pytest.mark.no_graph_growth
def test_fixed(seq_state: SeqState) -> None:
    fixed_train_step(seq_state)

"""ray-project/ray#40714 (fixed by ray-project/ray#40940): the LLM fine-tuning template
summed the loss for logging with ``loss_sum += loss``.

``loss_sum`` lives for the whole epoch; adding the loss tensor makes it the root of a
graph that links every step's graph to the previous one, so host memory grew until the
workers were killed. The fix logged ``loss.item()``. Shown on minigrad, where the
alive Node count makes the growth exact.

Pattern: retained-grad-fn (a running total keeps every step's graph).
Fix: ``loss_sum += loss.item()`` (or ``loss.detach()``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

import minigrad as mg
from minigrad import nn, optim
from minigrad.functional import cross_entropy

SOURCE = "ray-project/ray#40714"
EXPECTED_PATTERN = "retained-grad-fn"
CULPRIT = "loss_sum"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "state.loss_sum += loss"


@dataclass
class EpochState:
    model: nn.Module
    optimizer: optim.Optimizer
    loss_sum: mg.Tensor | float = 0.0
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))


def make_state() -> EpochState:
    rng = np.random.default_rng(0)
    model = nn.Sequential(nn.Linear(20, 32, rng=rng), nn.ReLU(), nn.Linear(32, 5, rng=rng))
    return EpochState(model, optim.Adam(model.parameters(), lr=1e-3))


def _loss(state: EpochState) -> mg.Tensor:
    batch = mg.Tensor(state.rng.standard_normal((16, 20)).astype(np.float32))
    labels = state.rng.integers(0, 5, size=16)
    return cross_entropy(state.model(batch), labels)


def leaky_train_step(state: EpochState) -> None:
    loss = _loss(state)
    state.optimizer.zero_grad()
    loss.backward()
    state.optimizer.step()
    state.loss_sum += loss  # the leak: a running total of graph-carrying tensors


def fixed_train_step(state: EpochState) -> None:
    loss = _loss(state)
    state.optimizer.zero_grad()
    loss.backward()
    state.optimizer.step()
    state.loss_sum += loss.item()


_STATES: dict[str, EpochState] = {}


def _state(kind: str) -> EpochState:
    if kind not in _STATES:
        _STATES[kind] = make_state()
    return _STATES[kind]


def leaky_step() -> None:
    leaky_train_step(_state("leaky"))


def fixed_step() -> None:
    fixed_train_step(_state("fixed"))


@pytest.fixture
def epoch() -> EpochState:
    return make_state()


@pytest.mark.no_graph_growth
def test_leaky(epoch: EpochState) -> None:
    leaky_train_step(epoch)


@pytest.mark.no_graph_growth
def test_fixed(epoch: EpochState) -> None:
    fixed_train_step(epoch)

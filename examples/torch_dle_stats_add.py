"""NVIDIA/DeepLearningExamples#1102: training statistics accumulated in place into a
long-lived tensor, ``stats.add_(loss)``.

The running-sum buffer lives in a metrics module for the whole run. ``add_`` with a
graph-carrying loss turns the buffer into a non-leaf whose ``grad_fn`` chains every
step's ``AddBackward0`` onto the previous one, each holding that step's graph: host
memory grows by one graph per step although no new tensor stays alive.

Pattern: retained-grad-fn (in-place accumulation into a long-lived tensor).
Fix: update statistics under ``torch.no_grad()`` (or ``add_(loss.detach())``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

SOURCE = "NVIDIA/DeepLearningExamples#1102"
EXPECTED_PATTERN = "retained-grad-fn"
CULPRIT = "loss_sum"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "self.loss_sum.add_(loss)"


class LossMeter(torch.nn.Module):
    """Running sum and count of the training loss, kept as buffers (saved with the model)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("loss_sum", torch.zeros(()))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))

    def update(self, loss: torch.Tensor) -> None:
        self.loss_sum.add_(loss)  # the leak when loss carries its graph
        self.count.add_(1)


@dataclass
class TrainState:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    meter: LossMeter = field(default_factory=LossMeter)
    generator: torch.Generator = field(default_factory=lambda: torch.Generator().manual_seed(0))


def make_state() -> TrainState:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.Tanh(), torch.nn.Linear(24, 1))
    return TrainState(model, torch.optim.Adam(model.parameters(), lr=1e-3))


def _step(state: TrainState) -> torch.Tensor:
    x = torch.randn(16, 12, generator=state.generator)
    y = torch.randn(16, 1, generator=state.generator)
    loss = torch.nn.functional.mse_loss(state.model(x), y)
    state.optimizer.zero_grad()
    loss.backward()
    state.optimizer.step()
    return loss


def leaky_train_step(state: TrainState) -> None:
    state.meter.update(_step(state))


def fixed_train_step(state: TrainState) -> None:
    loss = _step(state)
    with torch.no_grad():
        state.meter.update(loss)


_STATES: dict[str, TrainState] = {}


def _state(kind: str) -> TrainState:
    if kind not in _STATES:
        _STATES[kind] = make_state()
    return _STATES[kind]


def leaky_step() -> None:
    leaky_train_step(_state("leaky"))


def fixed_step() -> None:
    fixed_train_step(_state("fixed"))


@pytest.fixture
def train_state() -> TrainState:
    return make_state()


@pytest.mark.no_graph_growth
def test_leaky(train_state: TrainState) -> None:
    leaky_train_step(train_state)


@pytest.mark.no_graph_growth
def test_fixed(train_state: TrainState) -> None:
    fixed_train_step(train_state)

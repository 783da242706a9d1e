"""pytest-graphleak/pytest-graphleak#44: a library metric that accumulates until it is
reset, and never is. The training step logs each batch's loss into a torchmetrics
``CatMetric`` (to plot the epoch's losses), but the loop never calls ``reset()``.

``CatMetric.update`` appends its input to its ``value`` list state; it turns gradients
off while it does so, but a float32 tensor passes its checks as it is, so the list keeps
the loss tensor itself, with its graph. ``.detach()`` alone would still leave the list
growing by one tensor a step: the metric must be reset once its values are read.

Needs torchmetrics (an optional test dependency: the module is skipped without it).

Pattern: list-accumulation (the metric's ``value`` list). Fix: ``state.losses.reset()``
after the values are read (here, each step: an epoch of one batch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

torchmetrics = pytest.importorskip("torchmetrics")
from torchmetrics.aggregation import CatMetric  # noqa: E402

SOURCE = "pytest-graphleak/pytest-graphleak#44"
EXPECTED_PATTERN = "list-accumulation"
#: The attribute the culprit chain must name.
CULPRIT = "CatMetric"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "state.losses.update(loss)"
#: The store happens inside the library: the ``stored at:`` line names where, as "via".
STORED_VIA = "torchmetrics/aggregation.py:"


@dataclass
class TrainState:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    losses: Any
    reset: bool
    epoch_losses: list[float] = field(default_factory=list)
    generator: torch.Generator = field(default_factory=lambda: torch.Generator().manual_seed(0))


def make_state(*, reset: bool) -> TrainState:
    torch.manual_seed(0)
    model = torch.nn.Linear(10, 1)
    return TrainState(model, torch.optim.SGD(model.parameters(), lr=0.01), CatMetric(), reset)


def train_batch(state: TrainState) -> None:
    x = torch.randn(16, 10, generator=state.generator)
    loss = state.model(x).pow(2).mean()
    state.optimizer.zero_grad()
    loss.backward()
    state.optimizer.step()
    if state.reset:  # the epoch's end (an epoch of one batch here): read, then reset
        state.losses.update(loss)
        state.epoch_losses = state.losses.compute().tolist()
        state.losses.reset()
    else:  # never reset: the metric keeps every loss
        state.losses.update(loss)


_STATES: dict[str, TrainState] = {}


def _state(kind: str) -> TrainState:
    if kind not in _STATES:
        _STATES[kind] = make_state(reset=kind == "fixed")
    return _STATES[kind]


def leaky_step() -> None:
    train_batch(_state("leaky"))


def fixed_step() -> None:
    train_batch(_state("fixed"))


@pytest.fixture
def state(request: pytest.FixtureRequest) -> TrainState:
    return make_state(reset=request.function.__name__ == "test_fixed")


@pytest.mark.no_graph_growth
def test_leaky(state: TrainState) -> None:
    train_batch(state)


@pytest.mark.no_graph_growth
def test_fixed(state: TrainState) -> None:
    train_batch(state)

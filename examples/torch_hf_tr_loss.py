"""huggingface/transformers#6939: the Trainer summed the loss tensor, ``tr_loss += loss``.

``tr_loss`` lives as long as the training run. Adding the loss *tensor* to it in place
records an ``AddBackward0`` node whose input is this step's whole graph, so every step's
graph stays reachable from ``tr_loss`` (the report: CPU memory grew by ~120 GB over
240k steps; the Trainer switched to ``loss.detach()``).

Pattern: retained-grad-fn (a bounded set of live tensors whose graph keeps growing).
Fix: accumulate ``loss.detach()`` (or ``loss.item()``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

SOURCE = "huggingface/transformers#6939"
EXPECTED_PATTERN = "retained-grad-fn"
#: The attribute the culprit chain must name.
CULPRIT = "tr_loss"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "state.tr_loss += loss"


@dataclass
class TrainerState:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    tr_loss: torch.Tensor = field(default_factory=lambda: torch.tensor(0.0))
    generator: torch.Generator = field(default_factory=lambda: torch.Generator().manual_seed(0))


def make_state() -> TrainerState:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    return TrainerState(model, torch.optim.SGD(model.parameters(), lr=0.01))


def _loss(state: TrainerState) -> torch.Tensor:
    inputs = torch.randn(8, 16, generator=state.generator)
    labels = torch.randint(0, 4, (8,), generator=state.generator)
    return torch.nn.functional.cross_entropy(state.model(inputs), labels)


def leaky_train_step(state: TrainerState) -> None:
    loss = _loss(state)
    state.optimizer.zero_grad()
    loss.backward()
    state.optimizer.step()
    state.tr_loss += loss  # the leak: an in-place add of a graph-carrying tensor


def fixed_train_step(state: TrainerState) -> None:
    loss = _loss(state)
    state.optimizer.zero_grad()
    loss.backward()
    state.optimizer.step()
    state.tr_loss += loss.detach()


_STATES: dict[str, TrainerState] = {}


def _state(kind: str) -> TrainerState:
    if kind not in _STATES:  # built on first use, so importing the module costs nothing
        _STATES[kind] = make_state()
    return _STATES[kind]


def leaky_step() -> None:
    leaky_train_step(_state("leaky"))


def fixed_step() -> None:
    fixed_train_step(_state("fixed"))


@pytest.fixture
def trainer() -> TrainerState:
    return make_state()


@pytest.mark.no_graph_growth
def test_leaky(trainer: TrainerState) -> None:
    leaky_train_step(trainer)


@pytest.mark.no_graph_growth
def test_fixed(trainer: TrainerState) -> None:
    fixed_train_step(trainer)

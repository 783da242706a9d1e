"""pnnl/neuromancer#292: the Trainer stored its metrics without ``detach()``.

Neuromancer's ``Trainer`` kept the metrics of every epoch (the training loss and the
other terms the problem returns) for its history and logging, as the tensors the loss
function returned. Each of them still held its autograd graph, so "hundreds of MB or a
few GB of autograd graph" accumulated over a long run; the fix detached the metrics
before storing them.

Pattern: list-accumulation (a dict of lists, one graph-carrying tensor per metric and
epoch). Fix: store ``value.detach()`` (or ``value.item()``) in the history.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

SOURCE = "pnnl/neuromancer#292"
EXPECTED_PATTERN = "list-accumulation"
#: The attribute the culprit chain must name.
CULPRIT = "history"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "trainer.history.setdefault(name, []).append(value)"


@dataclass
class Trainer:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    detach: bool
    history: dict[str, list[object]] = field(default_factory=dict)
    generator: torch.Generator = field(default_factory=lambda: torch.Generator().manual_seed(0))


def make_trainer(detach: bool) -> Trainer:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 6))
    return Trainer(model, torch.optim.Adam(model.parameters(), lr=1e-3), detach)


def problem(trainer: Trainer) -> dict[str, torch.Tensor]:
    """The loss terms of a constrained regression, as neuromancer's Problem returns."""
    x = torch.randn(16, 6, generator=trainer.generator)
    y = trainer.model(x)
    objective = (y - x).pow(2).mean()
    penalty = torch.relu(y.abs() - 2.0).mean()
    return {"train_loss": objective + 0.1 * penalty, "train_objective": objective}


def train_epoch(trainer: Trainer) -> None:
    output = problem(trainer)
    trainer.optimizer.zero_grad()
    output["train_loss"].backward()
    trainer.optimizer.step()
    for name, value in output.items():
        if trainer.detach:  # the fixed twin keeps numbers
            trainer.history.setdefault(name, []).append(value.item())
        else:  # the leak: the graph is kept
            trainer.history.setdefault(name, []).append(value)


_TRAINERS: dict[str, Trainer] = {}


def _trainer(kind: str) -> Trainer:
    if kind not in _TRAINERS:  # built on first use, so importing the module costs nothing
        _TRAINERS[kind] = make_trainer(detach=kind == "fixed")
    return _TRAINERS[kind]


def leaky_step() -> None:
    train_epoch(_trainer("leaky"))


def fixed_step() -> None:
    train_epoch(_trainer("fixed"))


@pytest.fixture
def leaky_trainer() -> Trainer:
    return make_trainer(detach=False)


@pytest.fixture
def fixed_trainer() -> Trainer:
    return make_trainer(detach=True)


@pytest.mark.no_graph_growth
def test_leaky(leaky_trainer: Trainer) -> None:
    train_epoch(leaky_trainer)


@pytest.mark.no_graph_growth
def test_fixed(fixed_trainer: Trainer) -> None:
    train_epoch(fixed_trainer)

"""pytest-graphleak/pytest-graphleak#44: an object that holds several graph-carrying
tensors. Each step keeps a ``StepOutput(loss, logits, hidden)`` for the epoch's end, the
way a training loop keeps its per-batch outputs; all three fields carry the step's graph.

Advice that names one field (``loss.detach()``) leaves the others holding the graph, and
the list still grows by one object a step. The change that holds keeps numbers for every
field, written on the object's own arguments.

Pattern: list-accumulation (``history`` grows, each entry holds three graphs). Fix: build
the ``StepOutput`` from plain numbers (``loss.item()``, ``logits.tolist()``, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import minigrad as mg
from minigrad import nn, optim

SOURCE = "pytest-graphleak/pytest-graphleak#44"
EXPECTED_PATTERN = "list-accumulation"
CULPRIT = "StepOutput"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "self.history.append(StepOutput(loss, logits, hidden))"


@dataclass
class StepOutput:
    """What the epoch's end reads of each step: its loss, logits and hidden features."""

    loss: Any
    logits: Any
    hidden: Any


class Trainer:
    def __init__(self, *, fixed: bool = False) -> None:
        self.rng = np.random.default_rng(0)
        self.encoder = nn.Linear(6, 5, rng=self.rng)
        self.head = nn.Linear(5, 2, rng=self.rng)
        params = [*self.encoder.parameters(), *self.head.parameters()]
        self.optimizer = optim.SGD(params, lr=0.01)
        self.history: list[StepOutput] = []
        self.fixed = fixed

    def step(self) -> None:
        x = mg.Tensor(self.rng.standard_normal((4, 6)).astype(np.float32))
        hidden = self.encoder(x).tanh()
        logits = self.head(hidden)
        loss = (logits**2).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        if self.fixed:
            self.history.append(StepOutput(loss.item(), logits.tolist(), hidden.tolist()))
        else:
            self.history.append(StepOutput(loss, logits, hidden))


_TRAINERS: dict[str, Trainer] = {}


def _trainer(kind: str) -> Trainer:
    if kind not in _TRAINERS:
        _TRAINERS[kind] = Trainer(fixed=kind == "fixed")
    return _TRAINERS[kind]


def leaky_step() -> None:
    _trainer("leaky").step()


def fixed_step() -> None:
    _trainer("fixed").step()


@pytest.fixture
def trainer(request: pytest.FixtureRequest) -> Trainer:
    return Trainer(fixed=request.function.__name__ == "test_fixed")


@pytest.mark.no_graph_growth
def test_leaky(trainer: Trainer) -> None:
    trainer.step()


@pytest.mark.no_graph_growth
def test_fixed(trainer: Trainer) -> None:
    trainer.step()

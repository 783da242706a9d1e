"""pytest-graphleak/pytest-graphleak#44: a training loop that keeps each step's loss and
output together, ``self.history.append([loss, out])``, to plot them after training.

Every entry is a list of two graph-carrying tensors, so the history keeps one whole
forward graph per step. The advice the plugin once gave, ``.detach()`` on the stored
value, was a method call on a Python list: pasted, it raised ``AttributeError``. Each
tensor must be changed on its own, written on the list's items; and since the history
grows by one entry per step, even detached tensors would pile up, so the fix keeps
numbers.

Pattern: list-accumulation (a list of lists of tensors). Fix:
``self.history.append([loss.tolist(), out.tolist()])``.
"""

from __future__ import annotations

import numpy as np
import pytest

import minigrad as mg
from minigrad import nn, optim

SOURCE = "pytest-graphleak/pytest-graphleak#44"
EXPECTED_PATTERN = "list-accumulation"
CULPRIT = "history"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "self.history.append([loss, out])"


class Trainer:
    def __init__(self, *, fixed: bool = False) -> None:
        self.rng = np.random.default_rng(0)
        self.net = nn.Linear(6, 3, rng=self.rng)
        self.optimizer = optim.SGD(self.net.parameters(), lr=0.01)
        self.history: list[list[object]] = []
        self.fixed = fixed

    def step(self) -> None:
        out = self.net(mg.Tensor(self.rng.standard_normal((4, 6)).astype(np.float32)))
        loss = (out**2).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        if self.fixed:
            self.history.append([loss.tolist(), out.tolist()])
        else:
            self.history.append([loss, out])


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

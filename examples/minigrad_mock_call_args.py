"""pytest-graphleak/pytest-graphleak#44: a test double keeps what it is called with. The
trainer reports each step's loss to a logger, ``self.logger.log("loss", loss)``; the test
replaces the logger with a ``unittest.mock.Mock`` to check the calls afterwards.

A ``Mock`` records every call (``call_args_list``, ``mock_calls``) with its arguments,
so it keeps each step's loss tensor and the graph behind it. The leak is in the test's
double, but the line to change is the trainer's: pass the number. The changes the plugin
once tried here treated ``loss`` as the tuple of the mock's call record (``tuple(t.detach()
for t in loss)``), so each raised and none was verified.

Pattern: list-accumulation (the mock's list of calls). Fix:
``self.logger.log("loss", loss.item())`` (or ``logger.reset_mock()`` once the test has
read the calls).
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest

import minigrad as mg
from minigrad import nn, optim

SOURCE = "pytest-graphleak/pytest-graphleak#44"
EXPECTED_PATTERN = "list-accumulation"
CULPRIT = "Mock"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = 'self.logger.log("loss", loss)'


class Trainer:
    def __init__(self, logger: object, *, fixed: bool = False) -> None:
        self.rng = np.random.default_rng(0)
        self.net = nn.Linear(6, 2, rng=self.rng)
        self.optimizer = optim.SGD(self.net.parameters(), lr=0.01)
        self.logger = logger
        self.fixed = fixed

    def step(self) -> None:
        out = self.net(mg.Tensor(self.rng.standard_normal((4, 6)).astype(np.float32)))
        loss = (out**2).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        if self.fixed:
            self.logger.log("loss", loss.item())
        else:
            self.logger.log("loss", loss)


_TRAINERS: dict[str, Trainer] = {}


def _trainer(kind: str) -> Trainer:
    if kind not in _TRAINERS:
        _TRAINERS[kind] = Trainer(mock.Mock(), fixed=kind == "fixed")
    return _TRAINERS[kind]


def leaky_step() -> None:
    _trainer("leaky").step()


def fixed_step() -> None:
    _trainer("fixed").step()


@pytest.fixture
def trainer(request: pytest.FixtureRequest) -> Trainer:
    return Trainer(mock.Mock(), fixed=request.function.__name__ == "test_fixed")


@pytest.mark.no_graph_growth
def test_leaky(trainer: Trainer) -> None:
    trainer.step()


@pytest.mark.no_graph_growth
def test_fixed(trainer: Trainer) -> None:
    trainer.step()

"""pytest-graphleak/pytest-graphleak#23, on minigrad: a module keeps a moving average of
its outputs, ``self.running_mean = (1 - m) * self.running_mean + m * x.mean(axis=0)``,
inside ``forward``, which the training loop calls through ``model(x)``.

Outside ``mg.no_grad()`` each update records a node whose input is the previous
``running_mean``, so the attribute stays one tensor while its graph reaches every batch
seen so far.

Pattern: retained-grad-fn. Fix: update the statistic under ``mg.no_grad()``.
"""

from __future__ import annotations

import numpy as np
import pytest

import minigrad as mg
from minigrad import nn, optim

SOURCE = "pytest-graphleak/pytest-graphleak#23"
EXPECTED_PATTERN = "retained-grad-fn"
CULPRIT = "running_mean"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "self.running_mean = (1 - m) * self.running_mean + m * x.mean(axis=0)"


class CenteredLinear(nn.Module):
    def __init__(self, features: int, rng: np.random.Generator, *, fixed: bool) -> None:
        super().__init__()
        self.linear = nn.Linear(features, features, rng=rng)
        self.running_mean = mg.zeros(features)
        self.fixed = fixed

    def forward(self, x: mg.Tensor) -> mg.Tensor:
        x = self.linear(x)
        m = 0.1
        if self.fixed:
            with mg.no_grad():
                self.running_mean = (1 - m) * self.running_mean + m * x.mean(axis=0)
        else:
            self.running_mean = (1 - m) * self.running_mean + m * x.mean(axis=0)  # the leak
        return x - self.running_mean.detach()


class Model:
    def __init__(self, *, fixed: bool = False) -> None:
        self.rng = np.random.default_rng(0)
        self.net = nn.Sequential(CenteredLinear(8, self.rng, fixed=fixed), nn.ReLU(),
                                 nn.Linear(8, 1, rng=self.rng))  # fmt: skip
        self.optimizer = optim.SGD(self.net.parameters(), lr=0.01)

    def step(self) -> None:
        x = mg.Tensor(self.rng.standard_normal((4, 8)).astype(np.float32))
        y = mg.Tensor(self.rng.standard_normal((4, 1)).astype(np.float32))
        loss = ((self.net(x) - y) ** 2).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()


_MODELS: dict[str, Model] = {}


def _model(kind: str) -> Model:
    if kind not in _MODELS:
        _MODELS[kind] = Model(fixed=kind == "fixed")
    return _MODELS[kind]


def leaky_step() -> None:
    _model("leaky").step()


def fixed_step() -> None:
    _model("fixed").step()


@pytest.fixture
def model(request: pytest.FixtureRequest) -> Model:
    return Model(fixed=request.function.__name__ == "test_fixed")


@pytest.mark.no_graph_growth
def test_leaky(model: Model) -> None:
    model.step()


@pytest.mark.no_graph_growth
def test_fixed(model: Model) -> None:
    model.step()

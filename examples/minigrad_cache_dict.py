"""pytest-graphleak/pytest-graphleak#23, on minigrad: outputs kept by step,
``self.cache[key] = out``, to be looked at after training.

Every step adds an entry, and each entry is an output of the model being trained, so
the dict keeps one whole forward graph per step.

Pattern: list-accumulation (a dict that grows). Fix: keep the numbers,
``self.cache[key] = out.detach().numpy().tolist()``.
"""

from __future__ import annotations

import numpy as np
import pytest

import minigrad as mg
from minigrad import nn, optim

SOURCE = "pytest-graphleak/pytest-graphleak#23"
EXPECTED_PATTERN = "list-accumulation"
CULPRIT = "cache"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "self.cache[key] = out"


class CachedModel:
    def __init__(self, *, fixed: bool = False) -> None:
        self.rng = np.random.default_rng(0)
        self.net = nn.Linear(8, 4, rng=self.rng)
        self.optimizer = optim.SGD(self.net.parameters(), lr=0.01)
        self.cache: dict[int, object] = {}
        self.fixed = fixed

    def step(self) -> None:
        out = self.net(mg.Tensor(self.rng.standard_normal((2, 8)).astype(np.float32)))
        loss = (out**2).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        key = len(self.cache)
        if self.fixed:
            self.cache[key] = out.detach().numpy().tolist()
        else:
            self.cache[key] = out


_MODELS: dict[str, CachedModel] = {}


def _model(kind: str) -> CachedModel:
    if kind not in _MODELS:
        _MODELS[kind] = CachedModel(fixed=kind == "fixed")
    return _MODELS[kind]


def leaky_step() -> None:
    _model("leaky").step()


def fixed_step() -> None:
    _model("fixed").step()


@pytest.fixture
def model(request: pytest.FixtureRequest) -> CachedModel:
    return CachedModel(fixed=request.function.__name__ == "test_fixed")


@pytest.mark.no_graph_growth
def test_leaky(model: CachedModel) -> None:
    model.step()


@pytest.mark.no_graph_growth
def test_fixed(model: CachedModel) -> None:
    model.step()

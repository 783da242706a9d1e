"""pytest-graphleak/pytest-graphleak#23: embeddings kept by step, ``self.cache[key] =
emb``, to be looked at (or logged) after training.

Every step adds an entry, and each entry is an output of the encoder being trained, so
the dict keeps one whole forward graph per step. A log of training outputs must hold
their values, not their graph (nor a tensor each, which the tensor count sees grow).

Pattern: list-accumulation (a dict that grows). Fix: keep the numbers,
``self.cache[key] = emb.detach().tolist()``.
"""

from __future__ import annotations

import pytest
import torch

SOURCE = "pytest-graphleak/pytest-graphleak#23"
EXPECTED_PATTERN = "list-accumulation"
#: The attribute the culprit chain must name.
CULPRIT = "cache"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "self.cache[key] = emb"


class CachedEncoder:
    def __init__(self, *, fixed: bool = False) -> None:
        torch.manual_seed(0)
        self.encoder = torch.nn.Linear(8, 4)
        self.optimizer = torch.optim.SGD(self.encoder.parameters(), lr=0.01)
        self.cache: dict[int, object] = {}
        self.seen = 0
        self.fixed = fixed

    def step(self) -> None:
        emb = self.encoder(torch.randn(2, 8))
        loss = emb.pow(2).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        key = self.seen
        self.seen += 1
        if self.fixed:
            self.cache[key] = emb.detach().tolist()
        else:
            self.cache[key] = emb


_MODELS: dict[str, CachedEncoder] = {}


def _model(kind: str) -> CachedEncoder:
    if kind not in _MODELS:
        _MODELS[kind] = CachedEncoder(fixed=kind == "fixed")
    return _MODELS[kind]


def leaky_step() -> None:
    _model("leaky").step()


def fixed_step() -> None:
    _model("fixed").step()


@pytest.fixture
def model(request: pytest.FixtureRequest) -> CachedEncoder:
    return CachedEncoder(fixed=request.function.__name__ == "test_fixed")


@pytest.mark.no_graph_growth
def test_leaky(model: CachedEncoder) -> None:
    model.step()


@pytest.mark.no_graph_growth
def test_fixed(model: CachedEncoder) -> None:
    model.step()

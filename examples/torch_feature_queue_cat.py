"""pytest-graphleak/pytest-graphleak#23: a contrastive model keeps a queue of recent keys
(MoCo-style negatives) and rebuilds it every step with
``self.queue = torch.cat([keys, self.queue])[: self.size]``.

The keys come from the encoder being trained, so each new queue is a ``SliceBackward0``
of a ``CatBackward0`` whose input is the previous queue: the queue stays ``size`` rows,
but its graph chains every step's encoder graph together and is never freed. MoCo fills
its queue from the momentum encoder under ``torch.no_grad()``.

Pattern: retained-grad-fn. Fix: enqueue ``keys.detach()``.
"""

from __future__ import annotations

import pytest
import torch

SOURCE = "pytest-graphleak/pytest-graphleak#23"
EXPECTED_PATTERN = "retained-grad-fn"
#: The attribute the culprit chain must name.
CULPRIT = "queue"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "self.queue = torch.cat([keys, self.queue])[: self.size]"


class KeyQueue:
    def __init__(self, dim: int = 8, size: int = 32, *, fixed: bool = False) -> None:
        self.queue = torch.zeros(0, dim)
        self.size = size
        self.fixed = fixed

    def push(self, keys: torch.Tensor) -> None:
        if self.fixed:
            keys = keys.detach()
        self.queue = torch.cat([keys, self.queue])[: self.size]


class Contrastive:
    def __init__(self, *, fixed: bool = False) -> None:
        torch.manual_seed(0)
        self.encoder = torch.nn.Linear(8, 8)
        self.optimizer = torch.optim.SGD(self.encoder.parameters(), lr=0.01)
        self.negatives = KeyQueue(fixed=fixed)

    def step(self) -> None:
        queries = self.encoder(torch.randn(4, 8))
        keys = self.encoder(torch.randn(4, 8))
        logits = queries @ torch.cat([keys, self.negatives.queue]).detach().T
        loss = logits.logsumexp(1).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.negatives.push(keys)


_MODELS: dict[str, Contrastive] = {}


def _model(kind: str) -> Contrastive:
    if kind not in _MODELS:
        _MODELS[kind] = Contrastive(fixed=kind == "fixed")
    return _MODELS[kind]


def leaky_step() -> None:
    _model("leaky").step()


def fixed_step() -> None:
    _model("fixed").step()


@pytest.fixture
def model(request: pytest.FixtureRequest) -> Contrastive:
    return Contrastive(fixed=request.function.__name__ == "test_fixed")


@pytest.mark.no_graph_growth
def test_leaky(model: Contrastive) -> None:
    model.step()


@pytest.mark.no_graph_growth
def test_fixed(model: Contrastive) -> None:
    model.step()

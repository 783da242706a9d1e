"""pytest-graphleak/pytest-graphleak#44: a ``functools.lru_cache`` of graph-carrying
results. The step looks up the embedding of each batch's bucket through a cached
function, so that a bucket seen again is not embedded again; the cache is unbounded
(``maxsize=None``) and each result carries the graph that made it, so every new bucket
keeps its embedding and that graph for the rest of the run.

Pattern: list-accumulation (the cache's dict grows by one graph-carrying tensor a step).
Fix: clear the cache once the step has used it (``bucket_embedding.cache_clear()``), or
cache only what needs no graph.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import minigrad as mg
from minigrad import nn, optim

SOURCE = "pytest-graphleak/pytest-graphleak#44"
EXPECTED_PATTERN = "list-accumulation"
CULPRIT = "_lru_cache_wrapper"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "loss = (self.embed(self.steps) * x).mean()"


class Trainer:
    def __init__(self, *, fixed: bool = False) -> None:
        self.rng = np.random.default_rng(0)
        self.table = nn.Linear(1, 6, rng=self.rng)
        self.optimizer = optim.SGD(self.table.parameters(), lr=0.01)
        self.fixed = fixed
        self.steps = 0

        @functools.lru_cache(maxsize=None)  # noqa: UP033  (the spelling the reports use)
        def bucket_embedding(bucket: int) -> mg.Tensor:
            return self.table(mg.Tensor([[float(bucket % 97)]]))

        self.embed = bucket_embedding

    def step(self) -> None:
        self.steps += 1  # a new bucket each step
        x = mg.Tensor(self.rng.standard_normal((4, 6)).astype(np.float32))
        loss = (self.embed(self.steps) * x).mean()
        self.optimizer.zero_grad()
        loss.backward(retain_graph=True)  # a cached result's graph is used again
        self.optimizer.step()
        if self.fixed:
            self.embed.cache_clear()


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

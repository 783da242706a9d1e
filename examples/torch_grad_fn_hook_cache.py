"""cornellius-gp/gpytorch#2631 (fixed by #2734): a cache that registers a hook on its
cached tensor's ``grad_fn`` which refers back to the cache.

gpytorch's prediction strategy memoized ``mean_cache`` and registered
``mean_cache.grad_fn.register_hook(partial(clear_cache_hook, self))``: strategy ->
cache -> tensor -> ``grad_fn`` (C++) -> hook -> strategy. Here a per-step statistics
object keeps ``self.mean = features.mean(0)`` and registers its bound method
``self._on_grad`` on that tensor's ``grad_fn`` to log the gradient. torch keeps a node's
hooks in C++, where the garbage collector cannot follow them: nothing ever frees the
object, its tensor and the graph behind it, one of each per step.

Pattern: cycle (through a ``grad_fn`` hook, never freed).
Fix: hold the object weakly in the hook (gpytorch's fix: ``weakref.ref(module)``), remove
the hook with its handle, or keep the tensor detached when it needs no graph.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

SOURCE = "cornellius-gp/gpytorch#2631"
EXPECTED_PATTERN = "cycle"
CULPRIT = "FeatureStats._on_grad"
#: No ``stored at:`` line: that line is given for list-accumulation and retained-grad-fn.
STORED_AT = None
#: The line ``created at:`` must name first.
CREATED_AT = "self.mean = features.mean(dim=0)"


class FeatureStats:
    """The batch mean of a layer's features, and the norm of its gradient once known."""

    def __init__(self, features: torch.Tensor, log: list[float], *, weak: bool) -> None:
        self.log = log
        self.mean = features.mean(dim=0)
        hook = _weakly(self) if weak else self._on_grad
        self.mean.grad_fn.register_hook(hook)

    def _on_grad(self, grad_inputs: Any, grad_outputs: Any) -> None:
        self.log.append(float(grad_outputs[0].norm()))


def _weakly(stats: FeatureStats) -> Callable[[Any, Any], None]:
    ref = weakref.ref(stats)

    def on_grad(grad_inputs: Any, grad_outputs: Any) -> None:
        alive = ref()
        if alive is not None:
            alive._on_grad(grad_inputs, grad_outputs)

    return on_grad


@dataclass
class Trainer:
    encoder: torch.nn.Module
    head: torch.nn.Module
    optimizer: torch.optim.Optimizer
    grad_norms: list[float] = field(default_factory=list)
    generator: torch.Generator = field(default_factory=lambda: torch.Generator().manual_seed(0))


def make_trainer() -> Trainer:
    torch.manual_seed(0)
    encoder = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU())
    head = torch.nn.Linear(16, 3)
    params = [*encoder.parameters(), *head.parameters()]
    return Trainer(encoder, head, torch.optim.SGD(params, lr=0.01))


def _train(trainer: Trainer, *, weak: bool) -> None:
    x = torch.randn(12, 8, generator=trainer.generator)
    labels = torch.randint(0, 3, (12,), generator=trainer.generator)
    features = trainer.encoder(x)
    stats = FeatureStats(features, trainer.grad_norms, weak=weak)
    loss = torch.nn.functional.cross_entropy(trainer.head(features), labels)
    loss = loss + 1e-3 * stats.mean.pow(2).sum()  # a small penalty on the feature mean
    trainer.optimizer.zero_grad()
    loss.backward()
    trainer.optimizer.step()
    del trainer.grad_norms[:-8]  # the log stays short


def leaky_train_step(trainer: Trainer) -> None:
    _train(trainer, weak=False)


def fixed_train_step(trainer: Trainer) -> None:
    _train(trainer, weak=True)


_STATES: dict[str, Trainer] = {}


def _state(kind: str) -> Trainer:
    if kind not in _STATES:
        _STATES[kind] = make_trainer()
    return _STATES[kind]


def leaky_step() -> None:
    leaky_train_step(_state("leaky"))


def fixed_step() -> None:
    fixed_train_step(_state("fixed"))


@pytest.fixture
def trainer() -> Trainer:
    return make_trainer()


@pytest.mark.no_graph_growth
def test_leaky(trainer: Trainer) -> None:
    leaky_train_step(trainer)


@pytest.mark.no_graph_growth
def test_fixed(trainer: Trainer) -> None:
    fixed_train_step(trainer)

"""Lightning-AI/torchmetrics#1461: "AUROC runs into memory issues".

An exact AUROC (``thresholds=None``) keeps every prediction and target it is given in
its list states ``preds`` and ``target``, to sort them all in ``compute()``. The report's
training loop already passed ``predictions.detach()``: no graph is kept, yet memory
still grows with every update (4 MB over 1000 steps there). ``.detach()`` cannot help,
so the text must not advise it; a fixed-size state does: ``thresholds=N`` bins the
predictions into a constant-size confusion-matrix state.

Needs torchmetrics (an optional test dependency: the module is skipped without it).

Pattern: list-accumulation, without a graph (tensors grow, graph nodes do not).
Fix: ``BinaryAUROC(thresholds=200)`` (binned, constant memory), and ``compute()`` /
``reset()`` each epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

torchmetrics = pytest.importorskip("torchmetrics")
from torchmetrics.classification import BinaryAUROC  # noqa: E402

SOURCE = "Lightning-AI/torchmetrics#1461"
EXPECTED_PATTERN = "list-accumulation"
#: The attribute the culprit chain must name.
CULPRIT = "preds"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "state.auroc.update(probabilities.detach(), labels)"
#: The store happens inside the library: the ``stored at:`` line names where, as "via".
STORED_VIA = "torchmetrics/classification/precision_recall_curve.py:"
#: The kept tensors carry no autograd graph: the text must say so.
NO_GRAPH = True


@dataclass
class TrainState:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    auroc: Any
    generator: torch.Generator = field(default_factory=lambda: torch.Generator().manual_seed(0))


def make_state(thresholds: int | None) -> TrainState:
    torch.manual_seed(0)
    model = torch.nn.Linear(20, 1)
    return TrainState(
        model, torch.optim.SGD(model.parameters(), lr=0.01), BinaryAUROC(thresholds=thresholds)
    )


def train_batch(state: TrainState) -> None:
    x = torch.randn(32, 20, generator=state.generator)
    labels = torch.randint(0, 2, (32,), generator=state.generator)
    logits = state.model(x).squeeze(1)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels.float())
    state.optimizer.zero_grad()
    loss.backward()
    state.optimizer.step()
    probabilities = torch.sigmoid(logits)
    state.auroc.update(probabilities.detach(), labels)


_STATES: dict[str, TrainState] = {}


def _state(kind: str) -> TrainState:
    if kind not in _STATES:  # built on first use, so importing the module costs nothing
        _STATES[kind] = make_state(thresholds=None if kind == "leaky" else 200)
    return _STATES[kind]


def leaky_step() -> None:
    train_batch(_state("leaky"))


def fixed_step() -> None:
    train_batch(_state("fixed"))


@pytest.fixture
def exact_auroc_state() -> TrainState:
    return make_state(thresholds=None)


@pytest.fixture
def binned_auroc_state() -> TrainState:
    return make_state(thresholds=200)


@pytest.mark.no_graph_growth
def test_leaky(exact_auroc_state: TrainState) -> None:
    train_batch(exact_auroc_state)


@pytest.mark.no_graph_growth
def test_fixed(binned_auroc_state: TrainState) -> None:
    train_batch(binned_auroc_state)

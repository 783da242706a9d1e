"""pytorch/pytorch#13613: "GPU memory leak" — predictions accumulated with
``y_predlabel = torch.cat((y_predlabel, batch_y_predlabel.cpu()))``.

Here the training step keeps every batch's predictions for a metric at the end of the
epoch: after ``optimizer.step()`` it rebuilds ``all_preds`` as ``torch.cat`` of the old
buffer and the new batch. The predictions are detached, so no graph grows and the
number of live tensors stays the same (each step replaces the buffer by a bigger one):
only the bytes grow, by one batch of predictions per step, until memory runs out.

Pattern: memory-growth, created at the ``torch.cat`` line (not at ``loss.backward()`` or
``optimizer.step()``, which every step runs). Fix: update running counts batch by batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

SOURCE = "pytorch/pytorch#13613"
EXPECTED_PATTERN = "memory-growth"
CULPRIT = "all_preds"
#: No ``stored at:`` line: that line is given for list-accumulation and retained-grad-fn.
STORED_AT = None
#: The line ``created at:`` must name (what makes the growing buffer).
CREATED_AT = "state.all_preds = torch.cat((state.all_preds, logits.detach().cpu()))"

CLASSES = 500


@dataclass
class TrainState:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    all_preds: torch.Tensor = field(default_factory=lambda: torch.zeros(0, CLASSES))
    correct: int = 0
    seen: int = 0
    generator: torch.Generator = field(default_factory=lambda: torch.Generator().manual_seed(0))


def make_state() -> TrainState:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, CLASSES))  # fmt: skip
    return TrainState(model, torch.optim.Adam(model.parameters(), lr=1e-3))


def _step(state: TrainState) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(16, 16, generator=state.generator)
    labels = torch.randint(0, CLASSES, (16,), generator=state.generator)
    logits = state.model(x)
    loss = torch.nn.functional.cross_entropy(logits, labels)
    state.optimizer.zero_grad()
    loss.backward()
    state.optimizer.step()
    return logits, labels


def leaky_train_step(state: TrainState) -> None:
    logits, _ = _step(state)
    state.all_preds = torch.cat((state.all_preds, logits.detach().cpu()))


def fixed_train_step(state: TrainState) -> None:
    logits, labels = _step(state)
    state.correct += int((logits.argmax(dim=-1) == labels).sum())
    state.seen += len(labels)


_STATES: dict[str, TrainState] = {}


def _state(kind: str) -> TrainState:
    if kind not in _STATES:
        _STATES[kind] = make_state()
    return _STATES[kind]


def leaky_step() -> None:
    leaky_train_step(_state("leaky"))


def fixed_step() -> None:
    fixed_train_step(_state("fixed"))


@pytest.fixture
def train_state() -> TrainState:
    return make_state()


@pytest.mark.no_graph_growth
def test_leaky(train_state: TrainState) -> None:
    leaky_train_step(train_state)


@pytest.mark.no_graph_growth
def test_fixed(train_state: TrainState) -> None:
    fixed_train_step(train_state)

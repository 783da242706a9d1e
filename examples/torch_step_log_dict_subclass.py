"""pytest-graphleak/pytest-graphleak#34: each step's loss kept by step number in a
user's ``dict`` subclass, ``self.losses[self.steps] = loss``, for a plot at the end.

``StepLog`` adds a helper or two to ``dict``; it grows by one entry a step, and each
entry is a loss with its graph. The plugin's container rule once listed built-in types
only, so a user's subclass of a list or dict got the generic fix instead of one worded
for its line.

Pattern: list-accumulation (a user's dict subclass that grows). Fix: keep the numbers,
``self.losses[self.steps] = loss.item()``.
"""

from __future__ import annotations

import pytest
import torch

SOURCE = "pytest-graphleak/pytest-graphleak#34"
EXPECTED_PATTERN = "list-accumulation"
#: The attribute the culprit chain must name.
CULPRIT = "losses"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "self.losses[self.steps] = loss"
#: The line ``created at:`` must name first.
CREATED_AT = "loss = torch.nn.functional.mse_loss(self.model(x), y)"
#: The ``fix:`` line, worded for the stored line.
FIX = (
    "store loss.item() (a plain number) instead of loss, so that self.losses keeps no "
    "graph: self.losses[self.steps] = loss.item()"
)


class StepLog(dict):  # type: ignore[type-arg]
    """Values by step number, with the helpers a plot needs."""

    def last(self) -> object:
        return self[max(self)]

    def series(self) -> list[object]:
        return [self[step] for step in sorted(self)]


class Trainer:
    def __init__(self, *, fixed: bool = False) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Linear(8, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.fixed = fixed
        self.steps = 0
        self.losses = StepLog()

    def step(self) -> None:
        x, y = torch.randn(4, 8), torch.randn(4, 1)
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.steps += 1
        if self.fixed:
            self.losses[self.steps] = loss.item()
        else:
            self.losses[self.steps] = loss


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

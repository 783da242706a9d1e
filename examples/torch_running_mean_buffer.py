"""pytest-graphleak/pytest-graphleak#34: a running mean kept in a registered buffer,
``self.running_mean = (1 - m) * self.running_mean + m * x.mean(0)`` in ``forward``.

``register_buffer("running_mean", ...)`` makes the statistic part of the ``state_dict``,
and assigning a tensor to that name later goes through ``nn.Module.__setattr__`` into
the module's ``_buffers`` table, not its ``__dict__``. Outside ``torch.no_grad()`` each
update chains a ``MulBackward0`` / ``AddBackward0`` pair onto the previous mean, so the
one buffer tensor reaches the graph of every batch seen. The plugin once watched only
``__dict__`` for the storing line: this leak got no ``stored at:`` and no worded fix.

Pattern: retained-grad-fn. Fix: detach the update (or make it under ``no_grad()``).
"""

from __future__ import annotations

import pytest
import torch

SOURCE = "pytest-graphleak/pytest-graphleak#34"
EXPECTED_PATTERN = "retained-grad-fn"
#: The attribute the culprit chain must name.
CULPRIT = "running_mean"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "self.running_mean = (1 - m) * self.running_mean + m * x.mean(0)"
#: The line ``created at:`` must name first.
CREATED_AT = STORED_AT
#: The ``fix:`` line, worded for the stored line.
FIX = (
    "cut the graph that self.running_mean keeps: self.running_mean = ((1 - m) * "
    "self.running_mean + m * x.mean(0)).detach() (or compute it under no_grad())"
)


class RunningCenter(torch.nn.Module):
    """A linear layer that centres its output on a running mean kept in a buffer."""

    def __init__(self, features: int = 8, *, fixed: bool = False) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(features, features)
        self.momentum = 0.1
        self.fixed = fixed
        self.register_buffer("running_mean", torch.zeros(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.linear(x)
        m = self.momentum
        if self.fixed:
            with torch.no_grad():
                self.running_mean = (1 - m) * self.running_mean + m * x.mean(0)
        else:
            self.running_mean = (1 - m) * self.running_mean + m * x.mean(0)  # the leak
        return x - self.running_mean.detach()


def make_model(*, fixed: bool = False) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(RunningCenter(fixed=fixed), torch.nn.ReLU(), torch.nn.Linear(8, 1))


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


_STATES: dict[str, tuple[torch.nn.Module, torch.optim.Optimizer]] = {}


def _state(kind: str) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    if kind not in _STATES:
        model = make_model(fixed=kind == "fixed")
        _STATES[kind] = (model, torch.optim.SGD(model.parameters(), lr=0.01))
    return _STATES[kind]


def leaky_step() -> None:
    train_step(*_state("leaky"))


def fixed_step() -> None:
    train_step(*_state("fixed"))


@pytest.fixture
def model_and_optimizer(request: pytest.FixtureRequest) -> tuple[torch.nn.Module, object]:
    model = make_model(fixed=request.function.__name__ == "test_fixed")
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


@pytest.mark.no_graph_growth
def test_leaky(model_and_optimizer: tuple[torch.nn.Module, torch.optim.Optimizer]) -> None:
    train_step(*model_and_optimizer)


@pytest.mark.no_graph_growth
def test_fixed(model_and_optimizer: tuple[torch.nn.Module, torch.optim.Optimizer]) -> None:
    train_step(*model_and_optimizer)

"""pytest-graphleak/pytest-graphleak#23: a module keeps an exponential moving average of
its inputs, ``self.running_mean = (1 - m) * self.running_mean + m * x.mean(0)``, inside
the ``forward`` that the training loop (or a framework's) calls.

Outside ``torch.no_grad()`` each update records a ``MulBackward0`` / ``AddBackward0``
pair whose input is the previous ``running_mean``: the attribute stays one tensor, but
its graph reaches every batch seen so far (the input's graph included). BatchNorm keeps
its running statistics in buffers updated without autograd; a hand-written one must too.

Pattern: retained-grad-fn. Fix: update the statistic under ``torch.no_grad()`` (or from
``x.detach()``).
"""

from __future__ import annotations

import pytest
import torch

SOURCE = "pytest-graphleak/pytest-graphleak#23"
EXPECTED_PATTERN = "retained-grad-fn"
#: The attribute the culprit chain must name.
CULPRIT = "running_mean"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "self.running_mean = (1 - m) * self.running_mean + m * x.mean(0)"


class CenteredLinear(torch.nn.Module):
    """A linear layer that centres its output on a running mean of it."""

    def __init__(self, features: int = 8, *, fixed: bool = False) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(features, features)
        self.running_mean = torch.zeros(features)
        self.momentum = 0.1
        self.fixed = fixed

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
    return torch.nn.Sequential(CenteredLinear(fixed=fixed), torch.nn.ReLU(), torch.nn.Linear(8, 1))


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


_STATE: dict[str, tuple[torch.nn.Module, torch.optim.Optimizer]] = {}


def _state(kind: str) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    if kind not in _STATE:
        model = make_model(fixed=kind == "fixed")
        _STATE[kind] = (model, torch.optim.SGD(model.parameters(), lr=0.01))
    return _STATE[kind]


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

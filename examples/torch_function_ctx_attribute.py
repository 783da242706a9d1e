"""pytorch/pytorch#25340: "Memory leak: autograd contexts not being garbage collected when
assigned output Tensors as attributes".

A custom ``torch.autograd.Function`` needs its own output in backward (the derivative of
a smooth clipping ``c * tanh(x / c)`` is ``1 - (out / c)**2``), and its forward keeps it
as ``ctx.out = out``. The output's ``grad_fn`` is that ``ctx`` itself, so each call makes
``out -> grad_fn (ctx) -> .out -> out``: reference counting never frees it, only the
cyclic garbage collector does, and until it runs every step's outputs and graphs pile up
(the pyro, RevTorch and sru fixes of the same habit say the same).

Pattern: cycle (freed only by gc.collect()).
Fix: ``ctx.save_for_backward(out)`` in forward and ``ctx.saved_tensors`` in backward.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

SOURCE = "pytorch/pytorch#25340"
EXPECTED_PATTERN = "cycle"
CULPRIT = "(ctx).out"
#: No ``stored at:`` line: that line is given for list-accumulation and retained-grad-fn.
STORED_AT = None
#: The line ``created at:`` must name first.
CREATED_AT = "pred = clip.apply(reg.model(x))"

CLIP = 3.0


class SoftClip(torch.autograd.Function):
    """``CLIP * tanh(x / CLIP)``, keeping its output for backward as a ctx attribute."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        out = CLIP * torch.tanh(x / CLIP)
        ctx.out = out  # the leak: the output's grad_fn is this ctx
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * (1 - (ctx.out / CLIP) ** 2)


class SavedSoftClip(torch.autograd.Function):
    """The same op, saving its output the way autograd expects."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        out = CLIP * torch.tanh(x / CLIP)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (out,) = ctx.saved_tensors
        return grad * (1 - (out / CLIP) ** 2)


@dataclass
class Regressor:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    generator: torch.Generator = field(default_factory=lambda: torch.Generator().manual_seed(0))


def make_regressor() -> Regressor:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    return Regressor(model, torch.optim.SGD(model.parameters(), lr=0.01))


def _train(reg: Regressor, clip: type[torch.autograd.Function]) -> None:
    x = torch.randn(16, 6, generator=reg.generator)
    y = torch.randn(16, 1, generator=reg.generator)
    pred = clip.apply(reg.model(x))
    loss = torch.nn.functional.mse_loss(pred, y)
    reg.optimizer.zero_grad()
    loss.backward()
    reg.optimizer.step()


def leaky_train_step(reg: Regressor) -> None:
    _train(reg, SoftClip)


def fixed_train_step(reg: Regressor) -> None:
    _train(reg, SavedSoftClip)


_STATES: dict[str, Regressor] = {}


def _state(kind: str) -> Regressor:
    if kind not in _STATES:
        _STATES[kind] = make_regressor()
    return _STATES[kind]


def leaky_step() -> None:
    leaky_train_step(_state("leaky"))


def fixed_step() -> None:
    fixed_train_step(_state("fixed"))


@pytest.fixture
def regressor() -> Regressor:
    return make_regressor()


@pytest.mark.no_graph_growth
def test_leaky(regressor: Regressor) -> None:
    leaky_train_step(regressor)


@pytest.mark.no_graph_growth
def test_fixed(regressor: Regressor) -> None:
    fixed_train_step(regressor)

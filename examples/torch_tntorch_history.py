"""rballester/tntorch#19: "There was a dangerous memory leak in loss_history. Every added
loss used to be a full computational graph" (1000 iterations froze a 12 GB machine).

The fitting loop appended the loss tensor to ``loss_history`` to decide convergence
later. Each entry keeps its whole graph — the decomposition's intermediate tensors —
alive, and the list grows by one graph per iteration.

Pattern: list-accumulation. Fix: ``loss_history.append(loss.item())``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

SOURCE = "rballester/tntorch#19"
EXPECTED_PATTERN = "list-accumulation"
CULPRIT = "loss_history"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "fit.loss_history.append(loss)"


@dataclass
class LowRankFit:
    """Fits a rank-r factorisation ``U @ V`` of a target matrix, tntorch-style."""

    target: torch.Tensor
    u: torch.Tensor
    v: torch.Tensor
    optimizer: torch.optim.Optimizer
    loss_history: list = field(default_factory=list)


def make_fit() -> LowRankFit:
    gen = torch.Generator().manual_seed(0)
    target = torch.randn(24, 24, generator=gen)
    u = torch.randn(24, 4, generator=gen).requires_grad_()
    v = torch.randn(4, 24, generator=gen).requires_grad_()
    return LowRankFit(target, u, v, torch.optim.Adam([u, v], lr=0.05))


def _loss(fit: LowRankFit) -> torch.Tensor:
    approx = fit.u @ fit.v
    return torch.linalg.norm(fit.target - approx) / torch.linalg.norm(fit.target)


def leaky_train_step(fit: LowRankFit) -> None:
    loss = _loss(fit)
    fit.optimizer.zero_grad()
    loss.backward()
    fit.optimizer.step()
    fit.loss_history.append(loss)  # the leak: the tensor keeps its graph


def fixed_train_step(fit: LowRankFit) -> None:
    loss = _loss(fit)
    fit.optimizer.zero_grad()
    loss.backward()
    fit.optimizer.step()
    fit.loss_history.append(loss.item())


_FITS: dict[str, LowRankFit] = {}


def _fit(kind: str) -> LowRankFit:
    if kind not in _FITS:
        _FITS[kind] = make_fit()
    return _FITS[kind]


def leaky_step() -> None:
    leaky_train_step(_fit("leaky"))


def fixed_step() -> None:
    fixed_train_step(_fit("fixed"))


@pytest.fixture
def fit() -> LowRankFit:
    return make_fit()


@pytest.mark.no_graph_growth
def test_leaky(fit: LowRankFit) -> None:
    leaky_train_step(fit)


@pytest.mark.no_graph_growth
def test_fixed(fit: LowRankFit) -> None:
    fixed_train_step(fit)

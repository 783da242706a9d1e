"""pdearena/pdearena#4: extra training-step outputs returned without ``detach()``.

A LightningModule's ``training_step`` returned ``{"loss": loss, "scalar_loss": ...,
"vector_loss": ...}``. Lightning 1.x kept every step's outputs for the epoch-end hook,
detaching only ``"loss"``: the two extra losses kept their graphs (back to the
prediction tensor) until the end of the epoch. GPU memory grew by ~2 MB per step and
ran out at iteration 4800; the fix detached the extra outputs before returning them.

``EpochLoop`` below does what the Trainer did with the outputs.

Pattern: list-accumulation (each step's extra outputs carry their graph into the list).
Fix: return ``scalar_loss.detach()`` and ``vector_loss.detach()`` (the PR). The fixed
twin also keeps plain numbers for the epoch-end hook: detached tensors would still pile
up until the epoch ends, which the plugin reports too (tensors without a graph).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

SOURCE = "pdearena/pdearena#4"
EXPECTED_PATTERN = "list-accumulation"
#: The attribute the culprit chain must name.
CULPRIT = "epoch_outputs"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "loop.epoch_outputs.append(kept)"


class PDEModel(torch.nn.Module):
    """A small surrogate: predicts the next state of a scalar and a vector field."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(12, 32), torch.nn.GELU(), torch.nn.Linear(32, 12)
        )

    def training_step(
        self, batch: tuple[torch.Tensor, torch.Tensor], detach: bool
    ) -> dict[str, Any]:
        x, y = batch
        pred = self.net(x)
        scalar_loss = torch.nn.functional.mse_loss(pred[:, :4], y[:, :4])
        vector_loss = torch.nn.functional.mse_loss(pred[:, 4:], y[:, 4:])
        loss = scalar_loss + vector_loss
        if detach:  # the fix
            return {"loss": loss, "scalar_loss": scalar_loss.detach(),
                    "vector_loss": vector_loss.detach()}  # fmt: skip
        return {"loss": loss, "scalar_loss": scalar_loss, "vector_loss": vector_loss}


@dataclass
class EpochLoop:
    model: PDEModel
    optimizer: torch.optim.Optimizer
    detach: bool
    epoch_outputs: list[dict[str, Any]] = field(default_factory=list)
    generator: torch.Generator = field(default_factory=lambda: torch.Generator().manual_seed(0))


def make_loop(detach: bool) -> EpochLoop:
    torch.manual_seed(0)
    model = PDEModel()
    return EpochLoop(model, torch.optim.SGD(model.parameters(), lr=0.01), detach)


def train_batch(loop: EpochLoop) -> None:
    batch = (torch.randn(8, 12, generator=loop.generator),
             torch.randn(8, 12, generator=loop.generator))  # fmt: skip
    out = loop.model.training_step(batch, loop.detach)
    loop.optimizer.zero_grad()
    out["loss"].backward()
    loop.optimizer.step()
    if loop.detach:  # the fixed twin keeps numbers for the epoch-end hook
        loop.epoch_outputs.append({key: value.item() for key, value in out.items()})
    else:  # the Trainer kept each step's outputs for the epoch-end hook, "loss" detached
        kept = {key: value.detach() if key == "loss" else value for key, value in out.items()}
        loop.epoch_outputs.append(kept)


_LOOPS: dict[str, EpochLoop] = {}


def _loop(kind: str) -> EpochLoop:
    if kind not in _LOOPS:  # built on first use, so importing the module costs nothing
        _LOOPS[kind] = make_loop(detach=kind == "fixed")
    return _LOOPS[kind]


def leaky_step() -> None:
    train_batch(_loop("leaky"))


def fixed_step() -> None:
    train_batch(_loop("fixed"))


@pytest.fixture
def leaky_loop() -> EpochLoop:
    return make_loop(detach=False)


@pytest.fixture
def fixed_loop() -> EpochLoop:
    return make_loop(detach=True)


@pytest.mark.no_graph_growth
def test_leaky(leaky_loop: EpochLoop) -> None:
    train_batch(leaky_loop)


@pytest.mark.no_graph_growth
def test_fixed(fixed_loop: EpochLoop) -> None:
    train_batch(fixed_loop)

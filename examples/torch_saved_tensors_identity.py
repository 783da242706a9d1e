"""pytorch/pytorch#115255: "lambda saved_tensor_hook memory leak?" — an identity pack
hook, ``saved_tensors_hooks(lambda x: x, lambda x: x)``, around part of the model.

ReLU saves its own *output* for backward. PyTorch normally stores a saved output without
its ``grad_fn`` to avoid a cycle; a pack hook that returns the tensor itself stores the
real output, whose ``grad_fn`` owns the saved value: output -> grad_fn -> saved output.
Backward breaks the cycle, but a forward that is never backpropagated (here, a
monitoring pass run with grad enabled each step) leaves it to the collector, which
cannot see into autograd's C++ objects: it is never freed.

Pattern: cycle (held from C++ through a saved-tensor pack hook).
Fix: detach in the pack hook (``lambda x: x.detach()``; autograd keeps the grad_fn).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import torch

SOURCE = "pytorch/pytorch#115255"
EXPECTED_PATTERN = "cycle"
CULPRIT = "pack hook"
#: No ``stored at:`` line: that line is given for list-accumulation and retained-grad-fn.
STORED_AT = None


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def _detached(x: torch.Tensor) -> torch.Tensor:
    return x.detach()


class PartlyHookedNet(torch.nn.Module):
    """ln1 -> relu, then ln2 -> relu under saved-tensor hooks, then ln3 (as in the report)."""

    def __init__(self, pack: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.ln1 = torch.nn.Linear(10, 20)
        self.ln2 = torch.nn.Linear(20, 64)
        self.ln3 = torch.nn.Linear(64, 4)
        self.pack = pack

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.ln1(x))
        with torch.autograd.graph.saved_tensors_hooks(self.pack, _identity):
            x = torch.relu(self.ln2(x))
        return self.ln3(x)


@dataclass
class State:
    model: PartlyHookedNet
    optimizer: torch.optim.Optimizer
    monitor: list = field(default_factory=list)
    generator: torch.Generator = field(default_factory=lambda: torch.Generator().manual_seed(0))


def make_state(pack: Callable[[torch.Tensor], torch.Tensor]) -> State:
    torch.manual_seed(0)
    model = PartlyHookedNet(pack)
    return State(model, torch.optim.SGD(model.parameters(), lr=0.01))


def train_step(state: State) -> None:
    x = torch.randn(8, 10, generator=state.generator)
    y = torch.randint(0, 4, (8,), generator=state.generator)
    loss = torch.nn.functional.cross_entropy(state.model(x), y)
    state.optimizer.zero_grad()
    loss.backward()
    state.optimizer.step()
    # A monitoring pass with grad enabled: its graph is never backpropagated.
    probe = state.model(torch.randn(4, 10, generator=state.generator))
    state.monitor = [probe.abs().mean().item()]


_STATES: dict[str, State] = {}


def _state(kind: str) -> State:
    if kind not in _STATES:
        _STATES[kind] = make_state(_identity if kind == "leaky" else _detached)
    return _STATES[kind]


def leaky_step() -> None:
    train_step(_state("leaky"))


def fixed_step() -> None:
    train_step(_state("fixed"))


@pytest.fixture
def leaky_state() -> State:
    return make_state(_identity)


@pytest.fixture
def fixed_state() -> State:
    return make_state(_detached)


@pytest.mark.no_graph_growth
def test_leaky(leaky_state: State) -> None:
    train_step(leaky_state)


@pytest.mark.no_graph_growth
def test_fixed(fixed_state: State) -> None:
    train_step(fixed_state)

"""pytorch/pytorch#84413: "reentrant checkpoint cause cyclic reference if run_fn capture
object that reference output".

``checkpoint(block, x, use_reentrant=True)`` keeps ``run_function`` on the autograd
ctx until the graph is freed. Here the checkpointed closure captures a per-step
``features`` dict, and the step stores the checkpoint's output in that same dict for
logging: output -> grad_fn (the ctx) -> run_function -> closure -> dict -> output.
Only the cyclic garbage collector frees each step's tensors and graph.

Pattern: cycle (freed only by gc.collect()).
Fix: ``use_reentrant=False`` (the ctx no longer keeps run_function), or keep the
features outside the closure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch
from torch.utils.checkpoint import checkpoint

SOURCE = "pytorch/pytorch#84413"
EXPECTED_PATTERN = "cycle"
CULPRIT = "run_function"
#: No ``stored at:`` line: that line is given for list-accumulation and retained-grad-fn.
STORED_AT = None


@dataclass
class State:
    block: torch.nn.Module
    head: torch.nn.Module
    optimizer: torch.optim.Optimizer
    use_reentrant: bool
    generator: torch.Generator = field(default_factory=lambda: torch.Generator().manual_seed(0))


def make_state(use_reentrant: bool) -> State:
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU())
    head = torch.nn.Linear(16, 1)
    params = [*block.parameters(), *head.parameters()]
    return State(block, head, torch.optim.SGD(params, lr=0.01), use_reentrant)


def train_step(state: State) -> None:
    x = torch.randn(8, 16, generator=state.generator).requires_grad_()
    features: dict[str, torch.Tensor] = {"input_scale": x.abs().mean()}

    def run_block(inp: torch.Tensor) -> torch.Tensor:
        features  # noqa: B018  (the closure captures the dict, as in the report)
        return state.block(inp)

    hidden = checkpoint(run_block, x, use_reentrant=state.use_reentrant)
    features["hidden"] = hidden  # closes the cycle when run_block stays on the ctx
    loss = state.head(hidden).pow(2).mean()
    state.optimizer.zero_grad()
    loss.backward()
    state.optimizer.step()


_STATES: dict[str, State] = {}


def _state(kind: str) -> State:
    if kind not in _STATES:
        _STATES[kind] = make_state(use_reentrant=kind == "leaky")
    return _STATES[kind]


def leaky_step() -> None:
    train_step(_state("leaky"))


def fixed_step() -> None:
    train_step(_state("fixed"))


@pytest.fixture
def reentrant_state() -> State:
    return make_state(use_reentrant=True)


@pytest.fixture
def non_reentrant_state() -> State:
    return make_state(use_reentrant=False)


@pytest.mark.no_graph_growth
def test_leaky(reentrant_state: State) -> None:
    train_step(reentrant_state)


@pytest.mark.no_graph_growth
def test_fixed(non_reentrant_state: State) -> None:
    train_step(non_reentrant_state)

"""pytest-graphleak/pytest-graphleak#34: gradient accumulation by keeping each step's
loss and, every 4th step, running ``torch.stack(self.pending[-4:]).mean().backward()``.

The list is never cleared, so it keeps every loss with its graph objects. The tensors
are needed with their graphs until that backward, so ``.item()`` on the storing line
would make the backward raise (``TypeError: expected Tensor as element 0``): the fix is
to clear the list right after the backward that uses it. The plugin once advised
``.item()`` here.

Pattern: list-accumulation. Fix: ``self.pending.clear()`` after the backward.
"""

from __future__ import annotations

import pytest
import torch

SOURCE = "pytest-graphleak/pytest-graphleak#34"
EXPECTED_PATTERN = "list-accumulation"
#: The attribute the culprit chain must name.
CULPRIT = "pending"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "self.pending.append(loss)"
#: The ``fix:`` line: clear after the backward that reads the list (line 47), no .item().
FIX = (
    "the tensors in self.pending are used with their graphs by a later backward (line 47: "
    "torch.stack(self.pending[-4:]).mean().backward()), so .item() or .detach() here would "
    "break it: clear self.pending right after that backward (self.pending.clear()), so "
    "that it keeps only what the next backward needs"
)


class Accumulator:
    """Averages the gradients of 4 steps by one backward through their stacked losses."""

    def __init__(self, *, fixed: bool = False) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Linear(8, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.pending: list[torch.Tensor] = []
        self.fixed = fixed

    def step(self) -> None:
        loss = self.model(torch.randn(4, 8)).pow(2).mean()
        self.pending.append(loss)
        if len(self.pending) % 4 == 0:
            torch.stack(self.pending[-4:]).mean().backward()
            self.optimizer.step()
            self.optimizer.zero_grad()
            if self.fixed:
                self.pending.clear()


_MODELS: dict[str, Accumulator] = {}


def _model(kind: str) -> Accumulator:
    if kind not in _MODELS:
        _MODELS[kind] = Accumulator(fixed=kind == "fixed")
    return _MODELS[kind]


def leaky_step() -> None:
    _model("leaky").step()


def fixed_step() -> None:
    _model("fixed").step()


@pytest.fixture
def model(request: pytest.FixtureRequest) -> Accumulator:
    return Accumulator(fixed=request.function.__name__ == "test_fixed")


@pytest.mark.no_graph_growth
def test_leaky(model: Accumulator) -> None:
    model.step()


@pytest.mark.no_graph_growth
def test_fixed(model: Accumulator) -> None:
    model.step()

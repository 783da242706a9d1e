"""pytest-graphleak/pytest-graphleak#34: a module-level cache of predictions by batch
name, ``PREDICTIONS[name] = pred``, filled by a helper that the tests call.

An unmarked test that calls it once leaves its prediction, graph and all, in the cache:
the outlive audit (``--graphleak``, every test) names it after the test's teardown, held
by ``global '...PREDICTIONS'``. The same helper in a training loop keeps one graph per
batch, which a step check calls ``list-accumulation``. Without its re-run the audit knows
the holder but not the line, and its fix once named a variable that was not in the code.

Pattern: list-accumulation. Fix: keep what the cache is for, plain labels
(``pred.argmax(-1).tolist()``), not the tensor with its graph.
"""

from __future__ import annotations

import itertools

import pytest
import torch

SOURCE = "pytest-graphleak/pytest-graphleak#34"
EXPECTED_PATTERN = "list-accumulation"
#: The dict the culprit chain must name.
CULPRIT = "PREDICTIONS"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "PREDICTIONS[name] = pred"
#: The line ``created at:`` must name first.
CREATED_AT = "pred = model(x).softmax(-1)"
#: The ``fix:`` line, worded for the stored line (a step check, or the audit's re-run).
FIX = (
    "store pred.detach() instead of pred, so that PREDICTIONS keeps no graph: "
    "PREDICTIONS[name] = pred.detach()"
)
#: The audit's fix without its re-run: no line, so worded with the holder.
AUDIT_FIX = (
    "store plain numbers (.item()) or detached tensors (.detach()) in PREDICTIONS, not "
    "graph-carrying tensors"
)
#: Unmarked tests for the outlive audit: it must name the first and pass the second.
AUDITED = ("test_audit_leaky", "test_audit_fixed")

PREDICTIONS: dict[str, object] = {}
_BATCHES = itertools.count()


def predict(model: torch.nn.Module, x: torch.Tensor, name: str, *, fixed: bool) -> torch.Tensor:
    pred = model(x).softmax(-1)
    if fixed:
        PREDICTIONS[name] = pred.argmax(-1).tolist()
    else:
        PREDICTIONS[name] = pred
    return pred


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, fixed: bool) -> None:
    x, y = torch.randn(4, 8), torch.randint(0, 3, (4,))
    name = f"{'fixed' if fixed else 'leaky'}-{next(_BATCHES)}"
    pred = predict(model, x, name, fixed=fixed)
    loss = torch.nn.functional.nll_loss(pred.log(), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


_STATES: dict[str, tuple[torch.nn.Module, torch.optim.Optimizer]] = {}


def _state(kind: str) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    if kind not in _STATES:
        model = make_model()
        _STATES[kind] = (model, torch.optim.SGD(model.parameters(), lr=0.01))
    return _STATES[kind]


def leaky_step() -> None:
    train_step(*_state("leaky"), fixed=False)


def fixed_step() -> None:
    train_step(*_state("fixed"), fixed=True)


@pytest.fixture
def model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = make_model()
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


@pytest.mark.no_graph_growth
def test_leaky(model_and_optimizer: tuple[torch.nn.Module, torch.optim.Optimizer]) -> None:
    train_step(*model_and_optimizer, fixed=False)


@pytest.mark.no_graph_growth
def test_fixed(model_and_optimizer: tuple[torch.nn.Module, torch.optim.Optimizer]) -> None:
    train_step(*model_and_optimizer, fixed=True)


def test_audit_leaky() -> None:  # no marker: only the outlive audit looks at it
    pred = predict(make_model(), torch.randn(4, 8), "audit-leaky", fixed=False)
    assert pred.shape == (4, 3)


def test_audit_fixed() -> None:
    pred = predict(make_model(), torch.randn(4, 8), "audit-fixed", fixed=True)
    assert pred.shape == (4, 3)

"""Lightning-AI/pytorch-lightning#5735: validation outputs cached until the next epoch.

``trainer.evaluation_loop.outputs`` kept what every ``validation_step`` returned, and
was reset only when the next validation epoch started: the outputs of a whole
validation run stayed in memory in between ("bounded memory leak"). Validation runs
under ``torch.no_grad()``: the kept tensors carry **no autograd graph**, so the text
must not say they do, nor advise ``.detach()``; what grows is their data.

``EvaluationLoop`` below does what the Trainer did; the validation epoch is long (as in
the report) so, within the measured steps, the list only grows.

Pattern: list-accumulation, without a graph (tensors grow, graph nodes do not).
Fix: reduce each batch to numbers as it comes (running sums and counts), or clear the
outputs at the end of the validation epoch (Lightning 2.x: the user's own list, cleared
in ``on_validation_epoch_end``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

SOURCE = "Lightning-AI/pytorch-lightning#5735"
EXPECTED_PATTERN = "list-accumulation"
#: The attribute the culprit chain must name.
CULPRIT = "outputs"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "loop.outputs.append(output)"
#: The kept tensors carry no autograd graph: the text must say so.
NO_GRAPH = True


@dataclass
class EvaluationLoop:
    model: torch.nn.Module
    outputs: list[dict[str, torch.Tensor]] = field(default_factory=list)
    loss_sum: float = 0.0
    batches: int = 0
    generator: torch.Generator = field(default_factory=lambda: torch.Generator().manual_seed(0))


def make_loop() -> EvaluationLoop:
    torch.manual_seed(0)
    return EvaluationLoop(torch.nn.Linear(32, 2))


def validation_step(loop: EvaluationLoop) -> dict[str, torch.Tensor]:
    batch = torch.randn(16, 32, generator=loop.generator)
    prediction = loop.model(batch)
    loss = torch.nn.functional.mse_loss(prediction, torch.ones_like(prediction))
    return {"val_loss": loss, "prediction": prediction}


def leaky_validation_batch(loop: EvaluationLoop) -> None:
    with torch.no_grad():
        output = validation_step(loop)
    loop.outputs.append(output)  # cached until the next validation epoch starts


def fixed_validation_batch(loop: EvaluationLoop) -> None:
    with torch.no_grad():
        output = validation_step(loop)
    loop.loss_sum += output["val_loss"].item()  # numbers, reduced as they come
    loop.batches += 1


_LOOPS: dict[str, EvaluationLoop] = {}


def _loop(kind: str) -> EvaluationLoop:
    if kind not in _LOOPS:  # built on first use, so importing the module costs nothing
        _LOOPS[kind] = make_loop()
    return _LOOPS[kind]


def leaky_step() -> None:
    leaky_validation_batch(_loop("leaky"))


def fixed_step() -> None:
    fixed_validation_batch(_loop("fixed"))


@pytest.fixture
def evaluation_loop() -> EvaluationLoop:
    return make_loop()


@pytest.mark.no_graph_growth
def test_leaky(evaluation_loop: EvaluationLoop) -> None:
    leaky_validation_batch(evaluation_loop)


@pytest.mark.no_graph_growth
def test_fixed(evaluation_loop: EvaluationLoop) -> None:
    fixed_validation_batch(evaluation_loop)

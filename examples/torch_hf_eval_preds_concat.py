"""huggingface/transformers#7232: "trainer.evaluate() aggregates predictions on GPU and
causes CUDA out of memory issues for large datasets".

The prediction loop kept every batch's logits for ``compute_metrics`` at the end:
``preds_host = logits if preds_host is None else torch.cat((preds_host, logits))``. No
graph is involved (evaluation runs under ``no_grad``) and the number of live tensors
stays the same, since each step replaces ``preds_host`` by a bigger one, but its bytes
grow by one batch of logits per step until the device runs out (469,530 sentences in
the report). ``eval_accumulation_steps`` (#7767) only moves the pile to the CPU.

Pattern: memory-growth. Fix: compute the metric batch by batch (#10722) and keep the
running counts, not the logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

SOURCE = "huggingface/transformers#7232"
EXPECTED_PATTERN = "memory-growth"
CULPRIT = "preds_host"
#: No ``stored at:`` line: that line is given for list-accumulation and retained-grad-fn.
STORED_AT = None
#: The line ``created at:`` must name first.
CREATED_AT = "torch.cat((loop.preds_host, logits), dim=0)"

CLASSES = 2_000  # a vocabulary-sized head: one batch of logits is 16 x 2000 floats


@dataclass
class EvalLoop:
    model: torch.nn.Module
    inputs: torch.Tensor
    labels: torch.Tensor
    preds_host: torch.Tensor | None = None
    correct: int = 0
    seen: int = 0


def make_loop() -> EvalLoop:
    gen = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(),
                                torch.nn.Linear(64, CLASSES))  # fmt: skip
    inputs = torch.randn(16, 32, generator=gen)
    labels = torch.randint(0, CLASSES, (16,), generator=gen)
    return EvalLoop(model.eval(), inputs, labels)


def leaky_eval_step(loop: EvalLoop) -> None:
    with torch.no_grad():
        logits = loop.model(loop.inputs)
    # the leak: every batch's logits stay, concatenated into one ever larger tensor
    loop.preds_host = (
        logits if loop.preds_host is None else torch.cat((loop.preds_host, logits), dim=0)
    )


def fixed_eval_step(loop: EvalLoop) -> None:
    with torch.no_grad():
        logits = loop.model(loop.inputs)
    loop.correct += int((logits.argmax(dim=-1) == loop.labels).sum())
    loop.seen += len(loop.labels)


_LOOPS: dict[str, EvalLoop] = {}


def _loop(kind: str) -> EvalLoop:
    if kind not in _LOOPS:
        _LOOPS[kind] = make_loop()
    return _LOOPS[kind]


def leaky_step() -> None:
    leaky_eval_step(_loop("leaky"))


def fixed_step() -> None:
    fixed_eval_step(_loop("fixed"))


@pytest.fixture
def eval_loop() -> EvalLoop:
    return make_loop()


@pytest.mark.no_graph_growth
def test_leaky(eval_loop: EvalLoop) -> None:
    leaky_eval_step(eval_loop)


@pytest.mark.no_graph_growth
def test_fixed(eval_loop: EvalLoop) -> None:
    fixed_eval_step(eval_loop)

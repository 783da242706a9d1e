"""The seed's transformer step: validation losses kept in a list with their graphs.

This project started from a C++ transformer engine whose training log showed RSS
rising ~160 MB every 100 steps while ``alive TensorImpl`` and ``Node`` grew with
``created`` (see this repository's issue 2). The step below is that training step on
minigrad's tiny character transformer: each step also measures a validation loss with
gradient recording on and appends the tensor to ``history``, so every validation
graph — embeddings, attention, MLP, every saved activation — stays alive.

Pattern: list-accumulation. Fix: evaluate under ``mg.no_grad()`` and keep ``loss.item()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

import minigrad as mg
from minigrad.data import TEXT, CharVocab, batches
from minigrad.functional import cross_entropy

SOURCE = "seed C++ transformer engine (pytest-graphleak issue 2)"
EXPECTED_PATTERN = "list-accumulation"
CULPRIT = "history"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "run.history.append(val_loss)"

BLOCK, BATCH, EVAL_BATCH = 12, 4, 2


@dataclass
class TransformerRun:
    model: mg.nn.TinyTransformer
    optimizer: mg.optim.Optimizer
    ids: np.ndarray
    history: list = field(default_factory=list)
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))


def make_run() -> TransformerRun:
    rng = np.random.default_rng(0)
    vocab = CharVocab(TEXT)
    model = mg.nn.TinyTransformer(
        vocab.size, d_model=16, n_heads=2, n_layers=1, block_size=BLOCK, rng=rng
    )
    return TransformerRun(model, mg.optim.Adam(model.parameters(), lr=3e-3), vocab.encode(TEXT))


def _train(run: TransformerRun) -> None:
    x, y = batches(run.ids, BLOCK, BATCH, run.rng)
    loss = cross_entropy(run.model(x), y)
    run.optimizer.zero_grad()
    loss.backward()
    run.optimizer.step()


def leaky_train_step(run: TransformerRun) -> None:
    _train(run)
    xv, yv = batches(run.ids, BLOCK, EVAL_BATCH, run.rng)
    val_loss = cross_entropy(run.model(xv), yv)  # grad mode on: the graph is recorded
    run.history.append(val_loss)  # ... and kept alive by the list


def fixed_train_step(run: TransformerRun) -> None:
    _train(run)
    xv, yv = batches(run.ids, BLOCK, EVAL_BATCH, run.rng)
    with mg.no_grad():
        val_loss = cross_entropy(run.model(xv), yv)
    run.history.append(val_loss.item())


_RUNS: dict[str, TransformerRun] = {}


def _run(kind: str) -> TransformerRun:
    if kind not in _RUNS:
        _RUNS[kind] = make_run()
    return _RUNS[kind]


def leaky_step() -> None:
    leaky_train_step(_run("leaky"))


def fixed_step() -> None:
    fixed_train_step(_run("fixed"))


@pytest.fixture
def run() -> TransformerRun:
    return make_run()


@pytest.mark.no_graph_growth
def test_leaky(run: TransformerRun) -> None:
    leaky_train_step(run)


@pytest.mark.no_graph_growth
def test_fixed(run: TransformerRun) -> None:
    fixed_train_step(run)

"""pytorch/pytorch#2198: "Memory leak problem in LSTM and RNN" — the hidden state is
carried from batch to batch without ``detach()``.

``out, hidden = rnn(data, hidden)`` makes the new hidden state a function of every
previous one, so the graph behind ``hidden`` grows by one RNN step per batch and is never
freed, even though ``backward()`` runs on every batch (``retain_graph=True`` was added to
silence "Trying to backward through the graph a second time"; the parameters are updated
through ``p.data`` as the 2017 word_language_model example did, so autograd's version
check does not stop it).

Pattern: retained-grad-fn. Fix: truncated BPTT, ``hidden = hidden.detach()`` per batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

SOURCE = "pytorch/pytorch#2198"
EXPECTED_PATTERN = "retained-grad-fn"
CULPRIT = "hidden"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "state.hidden = state.rnn(data, state.hidden)"


@dataclass
class RNNState:
    rnn: torch.nn.RNNCell
    head: torch.nn.Linear
    hidden: torch.Tensor
    lr: float = 0.01
    generator: torch.Generator = field(default_factory=lambda: torch.Generator().manual_seed(0))


def make_state() -> RNNState:
    torch.manual_seed(0)
    rnn = torch.nn.RNNCell(8, 16)
    head = torch.nn.Linear(16, 1)
    return RNNState(rnn, head, torch.zeros(4, 16))


def _sgd(state: RNNState) -> None:
    for module in (state.rnn, state.head):
        for p in module.parameters():
            if p.grad is not None:
                p.data.add_(p.grad, alpha=-state.lr)
                p.grad = None


def _batch_loss(state: RNNState) -> torch.Tensor:
    data = torch.rand(4, 8, generator=state.generator)
    state.hidden = state.rnn(data, state.hidden)
    return state.head(state.hidden).pow(2).mean()


def leaky_train_step(state: RNNState) -> None:
    loss = _batch_loss(state)
    loss.backward(retain_graph=True)  # keeps the history alive for the next batch
    _sgd(state)


def fixed_train_step(state: RNNState) -> None:
    loss = _batch_loss(state)
    loss.backward()
    _sgd(state)
    state.hidden = state.hidden.detach()


_STATES: dict[str, RNNState] = {}


def _state(kind: str) -> RNNState:
    if kind not in _STATES:
        _STATES[kind] = make_state()
    return _STATES[kind]


def leaky_step() -> None:
    leaky_train_step(_state("leaky"))


def fixed_step() -> None:
    fixed_train_step(_state("fixed"))


@pytest.fixture
def rnn_state() -> RNNState:
    return make_state()


@pytest.mark.no_graph_growth
def test_leaky(rnn_state: RNNState) -> None:
    leaky_train_step(rnn_state)


@pytest.mark.no_graph_growth
def test_fixed(rnn_state: RNNState) -> None:
    fixed_train_step(rnn_state)

"""jacobgil/pytorch-grad-cam#88 on minigrad: a gradient hook whose closure holds the tensor
it is registered on.

The Grad-CAM pattern — ``activations.register_hook(lambda g: ... activations ...)`` —
links the tensor to its graph node's hook table, the table to the closure, and the
closure back to the tensor. minigrad drops a node's hooks when backward runs through it,
so the cycle survives only when no backward comes: here the explanation pass registers
the hook on every step but backpropagates only every ``EXPLAIN_EVERY`` steps. Every link
is a Python reference, so the cyclic garbage collector frees it, but only when it runs:
until then each step's activations and graph pile up (torch's C++ hook table makes the
same cycle permanent, see ``torch_hook_closure.py``).

Pattern: cycle (freed only by gc.collect()).
Fix: capture ``activations.detach()`` in the hook, or register it only when explaining.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

import minigrad as mg
from minigrad import nn, optim
from minigrad.functional import cross_entropy

SOURCE = "jacobgil/pytorch-grad-cam#88"
EXPECTED_PATTERN = "cycle"
CULPRIT = "pre_hooks"
#: No ``stored at:`` line: that line is given for list-accumulation and retained-grad-fn.
STORED_AT = None


@dataclass
class CamState:
    features: nn.Module
    classifier: nn.Module
    optimizer: optim.Optimizer
    cams: list = field(default_factory=list)
    steps: int = 0
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))


def make_state() -> CamState:
    rng = np.random.default_rng(0)
    features = nn.Sequential(nn.Linear(12, 16, rng=rng), nn.ReLU())
    classifier = nn.Linear(16, 3, rng=rng)
    params = [*features.parameters(), *classifier.parameters()]
    return CamState(features, classifier, optim.SGD(params, lr=0.01))


EXPLAIN_EVERY = 1000  # steps between explanations that actually run backward


def _train(state: CamState, *, detach_in_hook: bool) -> None:
    images = mg.Tensor(state.rng.standard_normal((6, 12)).astype(np.float32))
    labels = state.rng.integers(0, 3, size=6)
    loss = cross_entropy(state.classifier(state.features(images)), labels)
    state.optimizer.zero_grad()
    loss.backward()
    state.optimizer.step()

    # Explanation pass: hook the activations of a probe image to compute a CAM.
    state.steps += 1
    probe = mg.Tensor(state.rng.standard_normal((1, 12)).astype(np.float32))
    activations = state.features(probe)
    held = activations.detach() if detach_in_hook else activations

    def save_cam(grad: mg.Tensor) -> None:
        state.cams = [float((grad * held).sum().item())]  # `held` is the closure's reference

    activations.register_hook(save_cam)
    score = state.classifier(activations).sum()
    if state.steps % EXPLAIN_EVERY == 0:
        score.backward()


def leaky_train_step(state: CamState) -> None:
    _train(state, detach_in_hook=False)


def fixed_train_step(state: CamState) -> None:
    _train(state, detach_in_hook=True)


_STATES: dict[str, CamState] = {}


def _state(kind: str) -> CamState:
    if kind not in _STATES:
        _STATES[kind] = make_state()
    return _STATES[kind]


def leaky_step() -> None:
    leaky_train_step(_state("leaky"))


def fixed_step() -> None:
    fixed_train_step(_state("fixed"))


@pytest.fixture
def cam_state() -> CamState:
    return make_state()


@pytest.mark.no_graph_growth
def test_leaky(cam_state: CamState) -> None:
    leaky_train_step(cam_state)


@pytest.mark.no_graph_growth
def test_fixed(cam_state: CamState) -> None:
    fixed_train_step(cam_state)

"""jacobgil/pytorch-grad-cam#88: "Memory leaks due to circular references" — a gradient
hook whose closure holds the very tensor it is registered on.

Grad-CAM needs the activations and their gradients. Registering
``activations.register_hook(lambda grad: ... activations ...)`` makes the tensor's hook
table refer to a closure that refers back to the tensor. torch keeps the hook table
from C++, so the garbage collector cannot see the cycle: each step's activations and
graph stay alive for good.

Pattern: cycle (a hook closure that holds its own tensor).
Fix: capture ``activations.detach()`` (or a weak reference) in the hook, or remove the
hook handle after backward.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

SOURCE = "jacobgil/pytorch-grad-cam#88"
EXPECTED_PATTERN = "cycle"
CULPRIT = "_backward_hooks"
#: No ``stored at:`` line: that line is given for list-accumulation and retained-grad-fn.
STORED_AT = None


@dataclass
class CamState:
    features: torch.nn.Module
    classifier: torch.nn.Module
    optimizer: torch.optim.Optimizer
    cams: list = field(default_factory=list)
    generator: torch.Generator = field(default_factory=lambda: torch.Generator().manual_seed(0))


def make_state() -> CamState:
    torch.manual_seed(0)
    features = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU())
    classifier = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 5))
    params = [*features.parameters(), *classifier.parameters()]
    return CamState(features, classifier, torch.optim.SGD(params, lr=0.01))


def _train(state: CamState, *, detach_in_hook: bool) -> None:
    images = torch.randn(2, 3, 8, 8, generator=state.generator)
    labels = torch.randint(0, 5, (2,), generator=state.generator)
    activations = state.features(images)
    held = activations.detach() if detach_in_hook else activations

    def save_cam(grad: torch.Tensor) -> None:
        weights = grad.mean(dim=(2, 3), keepdim=True)
        state.cams = [float((weights * held).sum())]  # `held` is the closure's reference

    activations.register_hook(save_cam)
    loss = torch.nn.functional.cross_entropy(state.classifier(activations), labels)
    state.optimizer.zero_grad()
    loss.backward()
    state.optimizer.step()


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

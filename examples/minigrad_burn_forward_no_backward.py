"""tracel-ai/burn#4339: "Performance: memory explosion" — forward passes under an autodiff
backend with no backward: every forward records a graph that nothing ever frees.

In burn the autodiff backend keeps each recorded graph until a backward consumes it. The
same mistake in minigrad: a rollout that feeds the model's output back in as the next
input (here a small dynamics model stepped forward to produce targets) with gradient
recording on. The state is never backpropagated, so each step's graph hangs on the
previous one through the fed-back tensor.

Pattern: retained-grad-fn (forward fed back without backward).
Fix: run the rollout under ``mg.no_grad()`` (or ``detach()`` the fed-back state).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import minigrad as mg
from minigrad import nn

SOURCE = "tracel-ai/burn#4339"
EXPECTED_PATTERN = "retained-grad-fn"
CULPRIT = "position"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "rollout.position = rollout.dynamics(rollout.position)"


@dataclass
class Rollout:
    dynamics: nn.Module
    position: mg.Tensor
    trace: list


def make_rollout() -> Rollout:
    rng = np.random.default_rng(0)
    dynamics = nn.Sequential(nn.Linear(8, 8, rng=rng), nn.Tanh(), nn.Linear(8, 8, rng=rng))
    start = mg.Tensor(rng.standard_normal((4, 8)).astype(np.float32))
    return Rollout(dynamics, start, [])


def leaky_rollout_step(rollout: Rollout) -> None:
    rollout.position = rollout.dynamics(rollout.position)  # recorded, never backpropagated
    rollout.trace = [float(rollout.position.mean().item())]


def fixed_rollout_step(rollout: Rollout) -> None:
    with mg.no_grad():
        rollout.position = rollout.dynamics(rollout.position)
    rollout.trace = [float(rollout.position.mean().item())]


_ROLLOUTS: dict[str, Rollout] = {}


def _rollout(kind: str) -> Rollout:
    if kind not in _ROLLOUTS:
        _ROLLOUTS[kind] = make_rollout()
    return _ROLLOUTS[kind]


def leaky_step() -> None:
    leaky_rollout_step(_rollout("leaky"))


def fixed_step() -> None:
    fixed_rollout_step(_rollout("fixed"))


@pytest.fixture
def rollout() -> Rollout:
    return make_rollout()


@pytest.mark.no_graph_growth
def test_leaky(rollout: Rollout) -> None:
    leaky_rollout_step(rollout)


@pytest.mark.no_graph_growth
def test_fixed(rollout: Rollout) -> None:
    fixed_rollout_step(rollout)

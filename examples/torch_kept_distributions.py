"""pytest-graphleak/pytest-graphleak#34: a policy returns a
``torch.distributions.Normal``, and the agent keeps every step's distribution,
``self.dists.append(dist)``, to compute a KL divergence against them later.

A distribution is not a tensor, but its ``loc`` and ``scale`` are the policy's outputs
with their graphs, so the list keeps one graph per step. The plugin once called this
``retained-grad-fn`` with a generic fix because the kept object was not a tensor; the
chain shows the list growing and the attribute that carries the graph.

Pattern: list-accumulation. Fix: keep the last few distributions, built from detached
tensors: ``Normal(dist.loc.detach(), dist.scale.detach())`` in a ``deque(maxlen=4)``.
"""

from __future__ import annotations

import collections

import pytest
import torch

SOURCE = "pytest-graphleak/pytest-graphleak#34"
EXPECTED_PATTERN = "list-accumulation"
#: The attribute the culprit chain must name.
CULPRIT = "dists"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "self.dists.append(dist)"
#: The ``fix:`` line: both of the kept Normal's graph-carrying tensors, not .loc alone.
FIX = (
    "self.dists keeps each Normal with the graphs that its .loc and .scale carry: keep "
    "dist.loc.detach() and dist.scale.detach() instead of dist, or build the Normal from "
    "detached tensors before it is stored"
)
#: What the fix line adds once the rebuilt Normal was tried: it cut the graph, but the
#: list still grew (a check re-runs the step; a loop cannot, and prints ``FIX`` alone).
TRIED_ADDS = (
    "; cutting the graph alone does not fix it here: with the graph cut, what it keeps "
    "still grew every step, so also bound or clear it (collections.deque(maxlen=N), or "
    "empty it once the values are used)"
)
#: The line ``created at:`` must name first.
CREATED_AT = "return torch.distributions.Normal(self.body(obs), self.log_std.exp())"


class Policy(torch.nn.Module):
    """A Gaussian policy: the mean from a linear layer, a learned log standard deviation."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Linear(6, 2)
        self.log_std = torch.nn.Parameter(torch.zeros(2))

    def forward(self, obs: torch.Tensor) -> torch.distributions.Normal:
        return torch.distributions.Normal(self.body(obs), self.log_std.exp())


class Agent:
    def __init__(self, *, fixed: bool = False) -> None:
        torch.manual_seed(0)
        self.policy = Policy()
        self.optimizer = torch.optim.SGD(self.policy.parameters(), lr=0.01)
        self.fixed = fixed
        # The fixed twin keeps the last few, detached: a KL needs no graph of old steps.
        self.dists: collections.deque[torch.distributions.Normal] | list[
            torch.distributions.Normal
        ] = collections.deque(maxlen=4) if fixed else []

    def step(self) -> None:
        dist = self.policy(torch.randn(16, 6))
        loss = -dist.log_prob(dist.sample()).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        if self.fixed:
            self.dists.append(torch.distributions.Normal(dist.loc.detach(), dist.scale.detach()))
        else:
            self.dists.append(dist)


_AGENTS: dict[str, Agent] = {}


def _agent(kind: str) -> Agent:
    if kind not in _AGENTS:
        _AGENTS[kind] = Agent(fixed=kind == "fixed")
    return _AGENTS[kind]


def leaky_step() -> None:
    _agent("leaky").step()


def fixed_step() -> None:
    _agent("fixed").step()


@pytest.fixture
def agent(request: pytest.FixtureRequest) -> Agent:
    return Agent(fixed=request.function.__name__ == "test_fixed")


@pytest.mark.no_graph_growth
def test_leaky(agent: Agent) -> None:
    agent.step()


@pytest.mark.no_graph_growth
def test_fixed(agent: Agent) -> None:
    agent.step()

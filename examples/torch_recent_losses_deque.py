"""pytest-graphleak/pytest-graphleak#34: the recent losses kept for a smoothed log line
in a ``collections.deque()`` that was given no ``maxlen``: ``self.recent.append(loss)``.

A deque without ``maxlen`` grows as a list does, and each entry is a loss with its whole
graph. The plugin's rule for containers once left deques out, so this leak got
``retained-grad-fn``, no ``stored at:`` line and the generic fix, while the same code
with a list got all of them.

Pattern: list-accumulation (a deque that grows). Fix: keep the numbers,
``self.recent.append(loss.item())``, in a ``deque(maxlen=100)``.
"""

from __future__ import annotations

import collections

import pytest
import torch

SOURCE = "pytest-graphleak/pytest-graphleak#34"
EXPECTED_PATTERN = "list-accumulation"
#: The attribute the culprit chain must name.
CULPRIT = "recent"
#: Text of the line that stores the leaked tensor (the ``stored at:`` line).
STORED_AT = "self.recent.append(loss)"
#: The ``fix:`` line, worded for that line.
FIX = (
    "store loss.item() (a plain number) instead of loss, so that self.recent keeps no "
    "graph: self.recent.append(loss.item())"
)


class SmoothedLogger:
    def __init__(self, *, fixed: bool = False) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Linear(8, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.fixed = fixed
        # The leak: no maxlen, so every step's loss stays.
        self.recent: collections.deque[object] = (
            collections.deque(maxlen=100) if fixed else collections.deque()
        )

    def step(self) -> None:
        loss = self.model(torch.randn(4, 8)).pow(2).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        if self.fixed:
            self.recent.append(loss.item())
        else:
            self.recent.append(loss)


_LOGGERS: dict[str, SmoothedLogger] = {}


def _logger(kind: str) -> SmoothedLogger:
    if kind not in _LOGGERS:
        _LOGGERS[kind] = SmoothedLogger(fixed=kind == "fixed")
    return _LOGGERS[kind]


def leaky_step() -> None:
    _logger("leaky").step()


def fixed_step() -> None:
    _logger("fixed").step()


@pytest.fixture
def logger(request: pytest.FixtureRequest) -> SmoothedLogger:
    return SmoothedLogger(fixed=request.function.__name__ == "test_fixed")


@pytest.mark.no_graph_growth
def test_leaky(logger: SmoothedLogger) -> None:
    logger.step()


@pytest.mark.no_graph_growth
def test_fixed(logger: SmoothedLogger) -> None:
    logger.step()

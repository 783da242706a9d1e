"""pytest-graphleak: catch autograd computation-graph leaks in training loops.

Public API (see README): ``check(step, ...)`` -> CheckResult, ``track(...)`` context
manager for a hand-written loop, ``GraphLeakError`` (an AssertionError whose message
is the full report), ``GraphLeakWarning`` (a leak reported without failing),
``GraphOutliveWarning`` / ``GraphOutliveError`` (a test left graphs alive after it),
``UnmeasuredError`` (a check whose probes measured nothing the step uses); every error
derives from ``GraphleakError`` and every warning from ``GraphleakWarning``
(``pytest_graphleak.exceptions``).
Framework callbacks: ``pytest_graphleak.integrations.{lightning,transformers,ignite}``.
The pytest plugin itself lives in ``pytest_graphleak.plugin``.
"""

from __future__ import annotations

from pytest_graphleak.api import check, track
from pytest_graphleak.exceptions import (
    GraphLeakError,
    GraphleakError,
    GraphLeakWarning,
    GraphleakWarning,
    GraphOutliveError,
    GraphOutliveWarning,
    UnmeasuredError,
)
from pytest_graphleak.result import CheckResult

__version__ = "0.1.0"

__all__ = [
    "CheckResult",
    "GraphLeakError",
    "GraphLeakWarning",
    "GraphOutliveError",
    "GraphOutliveWarning",
    "GraphleakError",
    "GraphleakWarning",
    "UnmeasuredError",
    "__version__",
    "check",
    "track",
]

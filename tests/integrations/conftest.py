"""Shared by the framework integration tests: one torch thread, results caught."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from pytest_graphleak.plugin import stash
from pytest_graphleak.result import CheckResult

# Tiny models are built from configs: nothing may be downloaded.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny models on a shared 2-core machine: torch's thread pool only adds contention
    (a 1.7 s transformers run took 23 s with the default threads under load)."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[CheckResult]:
    """The results the callbacks hand to the running test's report, kept here instead
    (a leak made on purpose must not show up as this test's own warning)."""
    results: list[CheckResult] = []

    def record(item: pytest.Item, result: CheckResult) -> None:
        results.append(result)

    # set before the call phase, where the plugin hands it to the test's session
    monkeypatch.setattr(stash, "record_result", record)
    return results

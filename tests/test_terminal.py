"""Terminal lines: the short message of a leak, the header, the unchecked hint, progress."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from pytest_graphleak.options import Settings
from pytest_graphleak.plugin.terminal import Progress, header_line, short_message, unchecked_hint
from pytest_graphleak.result import CheckResult, Diagnosis, Growth, Verdict


def _result(pattern: str, growths: list[Growth], diagnosis: Diagnosis | None) -> CheckResult:
    units = {g.metric: "bytes" if g.metric.endswith("bytes") else "objects" for g in growths}
    return CheckResult(
        name="t.py::test_step", steps=16, warmup=3, series={}, units=units,
        verdict=Verdict(True, growths, pattern, "grew"), diagnosis=diagnosis,
    )  # fmt: skip


def test_short_message_names_pattern_rate_and_holder() -> None:
    chain = ["fixture 'state'", "dict['losses']", "list(len=24)", "Tensor(shape=())"]
    result = _result(
        "list-accumulation",
        [Growth("torch.nodes", 18, 78, 4), Growth("torch.storage_bytes", 88, 148, 4),
         Growth("torch.tensors", 8, 23, 1)],
        Diagnosis(pattern="list-accumulation", chain=chain),
    )  # fmt: skip
    assert short_message(result) == (
        "list-accumulation: +1 tensor/step, held by fixture 'state' -> dict['losses']"
    )
    total = _result(
        "retained-grad-fn",
        [Growth("minigrad.nodes", 5, 50, 3)],
        Diagnosis(pattern="retained-grad-fn", chain=["self", "Trainer.tr_loss", "Tensor(x)"]),
    )
    assert short_message(total) == (
        "retained-grad-fn: +3 graph nodes/step, held by self -> Trainer.tr_loss"
    )
    memory = _result("memory-growth", [Growth("process.rss_bytes", 0, 1e8, 4 * 2**20)], None)
    assert short_message(memory) == "memory-growth: process.rss_bytes +4.0 MiB/step"
    cycle = _result("cycle", [Growth("gc.cyclic_garbage", 0, 16, 1)],
                    Diagnosis(pattern="cycle", cycle=["Tensor", "hook"]))  # fmt: skip
    assert short_message(cycle) == "cycle: gc.cyclic_garbage +1/step, kept by a reference cycle"


def test_header_line_only_when_checking() -> None:
    assert header_line(Settings()) is None
    line = header_line(Settings(enabled=True, warn_only=True, probes=("torch", "gc")))
    assert line is not None
    assert "steps=16 warmup=3 rss_tolerance=1.0 MiB/step probes=torch,gc" in line
    assert line.endswith("warn-only (leaks do not fail)")


def test_unchecked_hint_counts_marked_call_reports() -> None:
    marked = SimpleNamespace(when="call", keywords={"no_graph_growth": 1, "test_x": 1})
    setup = SimpleNamespace(when="setup", keywords={"no_graph_growth": 1})
    plain = SimpleNamespace(when="call", keywords={"test_y": 1})
    assert unchecked_hint([plain, setup]) is None
    hint = unchecked_hint([marked, setup, plain])
    assert hint is not None and hint.startswith("graphleak: 1 test marked")


class _Config:
    def __init__(self, verbose: int, written: list[str]) -> None:
        self.verbose = verbose
        plugins = {"terminalreporter": SimpleNamespace(write=written.append)}
        self.pluginmanager = SimpleNamespace(get_plugin=plugins.get)

    def getoption(self, name: str, default: Any = None) -> Any:
        return self.verbose


def test_progress_only_with_verbose_and_past_its_delay() -> None:
    written: list[str] = []
    quiet = Progress(_Config(0, written), total=2, after_s=0, every_s=0)
    for _ in range(3):
        quiet.tick()
    assert written == []
    progress = Progress(_Config(1, written), total=2, after_s=0, every_s=0)
    for _ in range(3):
        progress.tick()
    assert written[0].startswith("[step 1/2") and written[-1].startswith("[diagnosing")
    late = Progress(_Config(1, written := []), total=2, after_s=60)
    late.tick()
    assert written == []

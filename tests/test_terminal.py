"""Terminal lines: the short message of a leak, the header, the unchecked hint, progress,
the failure text's colours."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from pytest_graphleak.pipeline import declarations
from pytest_graphleak.plugin.terminal import (
    Progress,
    colour_failure,
    header_lines,
    line_markup,
    short_message,
    unchecked_hint,
)
from pytest_graphleak.probes import METRICS
from pytest_graphleak.result import CheckResult, Diagnosis, Growth, Link, Verdict
from pytest_graphleak.settings import Settings


def _result(pattern: str, growths: list[Growth], diagnosis: Diagnosis | None) -> CheckResult:
    """A result as a check makes it: the probes' declarations of its metrics kept on it."""
    measured = {g.metric: METRICS[g.metric] for g in growths}
    return CheckResult(
        name="t.py::test_step",
        steps=16,
        warmup=3,
        series={},
        units={name: metric.unit for name, metric in measured.items()},
        verdict=Verdict(True, growths, pattern, "grew"),
        diagnosis=diagnosis,
        declarations=declarations(measured, Settings()),
    )


def test_short_message_names_pattern_rate_and_holder() -> None:
    chain = ["fixture 'state'", "dict['losses']", "list(len=24)", "Tensor(shape=())"]
    result = _result(
        "list-accumulation",
        [
            Growth("torch.nodes", 18, 78, 4),
            Growth("torch.storage_bytes", 88, 148, 4),
            Growth("torch.tensors", 8, 23, 1),
        ],
        Diagnosis(
            pattern="list-accumulation",
            chain=chain,
            links=[
                Link("root", "fixture", name="state"),
                Link("container", "dict", edge="key", key="'losses'", base="dict"),
                Link("container", "list", edge="index", base="list", length=24),
                Link("tensor", "Tensor", shape=[]),
            ],
        ),
    )
    assert short_message(result) == (
        "list-accumulation: +1 tensor/step, held by fixture 'state' -> dict['losses']"
    )
    total = _result(
        "retained-grad-fn",
        [Growth("minigrad.nodes", 5, 50, 3)],
        Diagnosis(
            pattern="retained-grad-fn",
            chain=["self", "Trainer.tr_loss", "Tensor(x)"],
            links=[
                Link("root", "self", name="self"),
                Link("object", "Trainer", edge="attribute", key="tr_loss"),
                Link("tensor", "Tensor", shape=[2]),
            ],
        ),
    )
    assert short_message(total) == (
        "retained-grad-fn: +3 graph nodes/step, held by self -> Trainer.tr_loss"
    )
    memory = _result("memory-growth", [Growth("process.rss_bytes", 0, 1e8, 4 * 2**20)], None)
    assert short_message(memory) == "memory-growth: process.rss_bytes +4.0 MiB/step"
    cycle = _result(
        "cycle",
        [Growth("gc.cyclic_garbage", 0, 16, 1)],
        Diagnosis(pattern="cycle", cycle=["Tensor", "hook"]),
    )
    assert short_message(cycle) == "cycle: gc.cyclic_garbage +1/step, kept by a reference cycle"


def test_header_lines_only_when_checking_folded_between_settings() -> None:
    assert header_lines(Settings(), 80) is None
    lines = header_lines(Settings(enabled=True, warn_only=True, probes=("torch", "gc")), 80)
    assert lines == [
        "graphleak: checking @pytest.mark.no_graph_growth tests: steps=16 warmup=3",
        "    rss_tolerance=1.0 MiB/step probes=torch,gc start_scan=roots diagnose=on",
        "    warn-only (leaks do not fail)",
    ]
    wide = header_lines(Settings(enabled=True, probes=("torch", "gc")), 200)
    assert wide is not None and len(wide) == 1


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


def test_failure_lines_are_coloured_by_their_label() -> None:
    assert line_markup("  fix: append loss.item()") == {"green": True, "bold": True}
    assert line_markup("  stored at: t.py:3 in f: x") == {"cyan": True, "bold": True}
    assert line_markup("  held by: fixture 'state'") == {"yellow": True, "bold": True}
    assert line_markup("  pattern: cycle (...)") == {"red": True}
    assert line_markup("  created at: t.py:3") == {} == line_markup("    torch.nodes  1 -> 2")


LEAKY = """
import pytest
import minigrad as mg
kept = []

@pytest.mark.no_graph_growth(steps=4, warmup=1)
def test_leaks():
    kept.append(mg.Tensor([1.0], requires_grad=True) * 2)
"""


def test_the_failure_text_is_coloured_when_pytest_colours(pytester: pytest.Pytester) -> None:
    # A subprocess: an in-process run drops minigrad and numpy from sys.modules after
    # it, and numpy cannot be imported twice in one process.
    pytester.makepyfile(test_leak=LEAKY)
    result = pytester.runpytest_subprocess("--graphleak", "--color=yes", "-p", "no:randomly")
    out = result.stdout.str()
    assert result.ret == 1
    assert "\x1b[32m\x1b[1m  fix (" in out and "\x1b[33m\x1b[1m  held by: " in out


@pytest.mark.parametrize("markup", [True, False])
def test_coloured_entries_write_markup_only_when_the_writer_has_it(markup: bool) -> None:
    """pytest decides (``--color``, ``NO_COLOR``, a terminal) through ``hasmarkup``."""
    import io

    from _pytest._code.code import ExceptionChainRepr, ReprEntry, ReprTraceback
    from _pytest._io import TerminalWriter

    entry = ReprEntry(
        ["graphleak: t leaks: cycle", "  x", "  fix: do it"], None, None, None, "value"
    )
    longrepr = ExceptionChainRepr([(ReprTraceback([entry], None, "value"), None, None)])
    colour_failure(longrepr)
    buffer = io.StringIO()
    writer = TerminalWriter(buffer)
    writer.hasmarkup = markup
    longrepr.toterminal(writer)
    text = buffer.getvalue()
    assert "  fix: do it" in text and "  x" in text
    assert ("\x1b[32m\x1b[1m  fix: do it" in text) is markup
    assert ("\x1b[" in text) is markup


def test_warned_detail_lines_are_coloured_as_the_failure_text() -> None:
    from pytest_graphleak.plugin.report_section import summary_lines
    from pytest_graphleak.report.json_doc import CheckedTest

    growth = Growth("minigrad.tensors", 1.0, 4.0, 1.0)
    check = CheckResult(
        name="t.py::t",
        steps=3,
        warmup=1,
        series={"minigrad.tensors": [1.0, 2.0, 3.0, 4.0]},
        units={"minigrad.tensors": "objects"},
        verdict=Verdict(True, [growth], "list-accumulation", "grew"),
        diagnosis=Diagnosis(
            "list-accumulation", chain=["fixture 'x'", "list(len=3)"], fix="append loss.item()"
        ),
    ).to_dict()
    lines = dict(summary_lines(CheckedTest("t.py::t", "passed", [check]).typed(), 20, True))
    assert lines["    fix: append loss.item()"] == {"green": True, "bold": True}
    assert lines["    held by: fixture 'x' -> list(len=3)"] == {"yellow": True, "bold": True}

"""True statuses (issue 33, item 7): a leak reads ``LEAKED`` (and gets an ``::error``) only
where it failed the test. A test that failed for its own reason (an assert, a timeout,
``sys.exit``), was skipped or expected to fail keeps that outcome, and its outlive
finding in warn mode (or a warn-only check's leak) stays a warning row with a
``::warning``; the finding that fails the teardown (``--graphleak-outlive=fail``, or the
warning raised as an error by a filter) reads ``LEAKED`` and shows its story only.

Subprocess runs: the GitHub environment and ``-W error`` are the process's.
"""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path

import pytest
from suite_helpers import FAST, folded, report_section

pytest.importorskip("minigrad")


OWN_REASONS = """
import sys
import time

import minigrad as mg
import pytest

W = mg.Tensor([[0.5, -0.25], [0.125, 1.0]], requires_grad=True)
HISTORY = []


def keep():
    HISTORY.append((W * 2.0).tanh().sum())


def test_assert():
    keep()
    assert W.shape == (3, 3)


def test_exit():
    keep()
    sys.exit(3)


@pytest.mark.timeout(0.5, method="signal")
def test_timeout():
    keep()
    time.sleep(5)


def test_skip():
    keep()
    pytest.skip("no gpu")


@pytest.mark.xfail(reason="known shape bug", strict=True)
def test_xfail():
    keep()
    assert W.shape == (3, 3)


def test_passes():
    keep()


def test_warn_only_check_then_assert(graphleak):
    kept = []
    graphleak.check(lambda: kept.append((W * 3.0).sum()), steps=6, warmup=2)
    assert not kept
"""

#: Each test's outcome, status and the end of its WARNING row.
EXPECTED = {
    "test_assert": ("failed", "(the test failed for another reason)"),
    "test_exit": ("failed", "(the test failed for another reason)"),
    "test_timeout": ("failed", "(the test failed for another reason)"),
    "test_skip": ("skipped", "(test skipped)"),
    "test_xfail": ("xfailed", "(the test was expected to fail for another reason)"),
    "test_passes": ("passed", "(warn-only: not failed)"),
}


@pytest.fixture
def github(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(pytester.path))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    return summary


def _commands(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if line.startswith("::")]


def test_a_test_failed_for_its_own_reason_keeps_its_findings_as_warnings(
    pytester: pytest.Pytester, github: Path
) -> None:
    pytest.importorskip("pytest_timeout")
    pytester.makepyfile(test_own=OWN_REASONS)
    result = pytester.runpytest_subprocess(
        *FAST, "--graphleak", "--graphleak-warn-only", "--graphleak-report=r.json"
    )
    # pytest's outcomes are the tests' own: the assert, sys.exit, the timeout.
    result.assert_outcomes(failed=4, passed=1, skipped=1, xfailed=1)
    out = result.stdout.str()
    assert "LEAKED" not in out, out
    document = json.loads((pytester.path / "r.json").read_text())
    rows = {t["nodeid"].split("::")[1]: (t["outcome"], t["status"]) for t in document["tests"]}
    expected = {name: (outcome, "warned") for name, (outcome, _) in EXPECTED.items()}
    expected["test_warn_only_check_then_assert"] = ("failed", "warned")
    assert rows == expected
    assert document["summary"]["leaked"] == 0 and document["summary"]["warned"] == 7
    lines = folded("\n".join(report_section(result.outlines))).split("WARNING test_own.py::")
    for name, (_, why) in EXPECTED.items():
        # the row's lines (status, held by, why it failed nothing), folded
        assert any(line.startswith(f"{name} ") and why in line for line in lines), (name, out)
    result.stdout.fnmatch_lines(["*FAILED test_own.py::test_assert - assert*"])
    commands = _commands(result)
    # one per leak: six outlive findings, the warn-only check's (its list dies with it)
    assert len(commands) == 7 and all(c.startswith("::warning ") for c in commands), commands
    assert "7 tests with results: 7 warned;" in github.read_text()  # the step summary


WARN_MODE_ASSERT = """
import minigrad as mg

W = mg.Tensor([[0.5, -0.25], [0.125, 1.0]], requires_grad=True)
HISTORY = []


def test_shape_bug():
    out = (W * 2.0).tanh()
    HISTORY.append(out.sum())
    assert out.shape == (2, 1)
"""


def test_the_repro_warn_mode_and_a_failing_assert(pytester: pytest.Pytester, github: Path) -> None:
    """``round4/outlive_warn_on_failed_test_reads_leaked``: the default warn mode."""
    pytester.makepyfile(test_fail_other=WARN_MODE_ASSERT)
    result = pytester.runpytest_subprocess(*FAST, "--graphleak", "--graphleak-report=r.json")
    result.assert_outcomes(failed=1)
    out = folded(result.stdout.str())  # the terminal wraps at 80 columns
    assert fnmatch.fnmatch(
        out,
        "*WARNING test_fail_other.py::test_shape_bug outlived the test: "
        "list-accumulation*(the test failed for another reason)*",
    )
    assert "graphleak: 1 test with results: 1 warned; 1 audited for graphs that outlive them" in out
    assert "LEAKED" not in result.stdout.str()
    [command] = _commands(result)
    assert command.startswith("::warning file=test_fail_other.py,line=")
    document = json.loads((pytester.path / "r.json").read_text())
    assert document["summary"]["leaked"] == 0 and document["summary"]["warned"] == 1
    assert [(t["outcome"], t["status"]) for t in document["tests"]] == [("failed", "warned")]


KEEP = """
import minigrad as mg

W = mg.Tensor([[0.5, -0.25], [0.125, 1.0]], requires_grad=True)
H = []


def test_keep():
    H.append((W * 2.0).tanh().sum())
"""

#: The plugin's own source, which the teardown's error showed before the story.
PLUGIN_FRAMES = ("pytest_runtest_teardown", "warn_explicit", "audit.py", "self = <pytest_graphleak")


@pytest.mark.parametrize(
    "how",
    [
        ("-W", "error::pytest_graphleak.GraphOutliveWarning"),
        ("--graphleak-outlive=fail",),
        ("ini: filterwarnings = error",),
    ],
    ids=["W-error", "outlive-fail", "ini-filterwarnings-error"],
)
def test_a_finding_that_fails_the_teardown_shows_its_story_only(
    pytester: pytest.Pytester, github: Path, how: tuple[str, ...]
) -> None:
    pytester.makepyfile(test_keep=KEEP)
    args: tuple[str, ...] = how
    if how[0].startswith("ini:"):
        pytester.makeini("[pytest]\nfilterwarnings =\n    error\n")
        args = ()
    result = pytester.runpytest_subprocess(*FAST, "--graphleak", "--graphleak-report=r.json", *args)
    result.assert_outcomes(passed=1, errors=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_keep*",
            "*test_keep.py::test_keep left autograd graphs alive after its teardown (outlive)*",
            "*held by: global 'test_keep.H' -> list*",
        ]
    )
    for frame in PLUGIN_FRAMES:
        assert frame not in out, (frame, out)
    # the finding failed the test: LEAKED, an ::error, counted as leaked
    result.stdout.fnmatch_lines(["LEAKED  test_keep.py::test_keep  outlived the test: *"])
    [command] = _commands(result)
    assert command.startswith("::error file=test_keep.py,line=")
    document = json.loads((pytester.path / "r.json").read_text())
    assert [(t["outcome"], t["status"]) for t in document["tests"]] == [("failed", "leaked")]

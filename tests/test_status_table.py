"""One status table with behaviour (``status.TABLE``): every renderer asks a status's row
what to do (fails the run, annotation level, badge, word, order) and never compares a
status with its string, so a new status, or a changed rule, is one row."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pytest_graphleak import status
from pytest_graphleak.report.github import commands
from pytest_graphleak.report.github_rows import Row
from pytest_graphleak.report.github_rows import _level as github_level

PACKAGE = Path(status.__file__).parent
#: Where statuses are rendered: the report writers, the plugin's terminal and session
#: report, the ``graphleak`` command.
RENDERING = ("report", "plugin", "cli")
WORDS = frozenset(status.STATUSES)


def _operands(node: ast.expr) -> list[ast.expr]:
    """A comparison's operand, or the elements of a tuple, list or set it tests against."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value if isinstance(e, ast.Starred) else e for e in node.elts]
    return [node]


def _is_outcome(node: ast.expr) -> bool:
    """pytest's outcome (``outcome``, ``test.outcome``): its word ``xfailed`` is also a
    status's, but an outcome is pytest's word, not a status."""
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return name == "outcome" or name.endswith("_outcome")


def status_comparisons(source: str) -> list[str]:
    """``x == "leaked"``, ``s in ("error", "unmeasured")``, ``"known" != s``: every
    comparison with a status word as a string literal, as ``line N: 'word'``."""
    found: list[tuple[int, int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if any(_is_outcome(side) for side in sides):
            continue
        for side in sides:
            for operand in _operands(side):
                if isinstance(operand, ast.Constant) and operand.value in WORDS:
                    found.append((operand.lineno, operand.col_offset, operand.value))
    return [f"line {line}: {word!r}" for line, _, word in sorted(found)]


def _modules() -> list[Path]:
    return sorted(p for part in RENDERING for p in (PACKAGE / part).rglob("*.py"))


@pytest.mark.parametrize("module", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_renderer_compares_a_status_with_its_string(module: Path) -> None:
    assert status_comparisons(module.read_text(encoding="utf-8")) == []


def test_the_scan_catches_a_planted_comparison(tmp_path: Path) -> None:
    planted = tmp_path / "renderer.py"
    planted.write_text(
        "def word(test, check, level):\n"
        "    if test.status == 'known':\n"
        "        return 1\n"
        "    if status in ('error', 'unmeasured') or 'warned' != check.status:\n"
        "        return 2\n"
        "    if check.status in (*LEAK_STATUSES, 'clean'):\n"
        "        return 3\n"
        "    if test.outcome == 'xfailed' or level == 'notice':  # pytest's word; no status\n"
        "        return 4\n",
        encoding="utf-8",
    )
    assert status_comparisons(planted.read_text(encoding="utf-8")) == [
        "line 2: 'known'",
        "line 4: 'error'",
        "line 4: 'unmeasured'",
        "line 4: 'warned'",
        "line 6: 'clean'",
    ]


def test_every_status_is_a_named_word_of_the_table() -> None:
    named = {
        status.LEAKED,
        status.WARNED,
        status.XFAILED,
        status.ERROR,
        status.UNMEASURED,
        status.KNOWN,
        status.CLEAN,
    }
    assert named == WORDS == set(status.BY_WORD)
    assert len(status.TABLE) == len(WORDS)


@pytest.mark.parametrize(
    ("word", "outcome", "level"),
    [
        (status.LEAKED, "failed", "error"),
        (status.WARNED, "passed", "warning"),
        (status.KNOWN, "failed", "notice"),
        (status.XFAILED, "xfailed", ""),
        # no verdict: by what the check did to the test
        (status.UNMEASURED, "failed", "error"),
        (status.UNMEASURED, "passed", "warning"),
        (status.ERROR, "xfailed", ""),
        (status.CLEAN, "passed", ""),
    ],
)
def test_the_annotation_level_is_the_rows(word: status.Status, outcome: str, level: str) -> None:
    assert github_level(word, outcome) == level
    row = Row("t.py::test_x", word, "cycle", "", 0, "held", github_level(word, outcome))
    shown = commands([row], "/nowhere")
    assert [line.split(" ", 1)[0] for line in shown] == ([f"::{level}"] if level else [])


def test_the_rows_say_what_each_surface_asks() -> None:
    rows = status.BY_WORD
    assert [w for w in status.DISPLAY_ORDER if rows[w].found] == [
        "leaked",
        "warned",
        "xfailed",
        "known",
    ]
    assert [w for w in status.STATUSES if rows[w].no_verdict] == ["error", "unmeasured"]
    assert [w for w in status.STATUSES if not rows[w].opened] == ["known", "clean"]
    # bold in the terminal: it fails the test, or it is a leak that only warns
    assert [w for w in status.STATUSES if rows[w].bold] == [
        "leaked",
        "warned",
        "error",
        "unmeasured",
    ]
    assert {w: rows[w].sarif_level for w in status.STATUSES if rows[w].found} == {
        "leaked": "error",
        "warned": "warning",
        "xfailed": "note",
        "known": "note",
    }

"""The graphleak command on a stdout that is not UTF-8 (``PYTHONIOENCODING=ascii``, a
Windows cp1252 console): what the encoding cannot show degrades to ASCII look-alikes,
the exit code is the verdict's and ``--json`` is written. Read from real processes: the
encoding of a real stdout is what is tested."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from suite_helpers import REPO

from pytest_graphleak.cli.exits import EXIT_CLEAN, EXIT_LEAK
from pytest_graphleak.report.ascii_text import ascii_look_alike

_STEPS = """\
import minigrad as mg
w = mg.Tensor([1.0, 2.0], requires_grad=True)
kept = []

def clean_step():
    (w * w).sum().backward()
    w.grad = None

def leaky_step():  # the name has a character cp1252 and ASCII lack: \u2192
    kept.append((w * w).sum())
"""


def _graphleak(cwd: Path, encoding: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONIOENCODING": encoding}
    return subprocess.run(
        [sys.executable, "-m", "pytest_graphleak", *args],
        cwd=cwd,
        capture_output=True,
        env=env,
        timeout=300,
    )


@pytest.mark.parametrize("encoding", ["ascii", "cp1252"])
def test_check_and_report_on_a_narrow_stdout(tmp_path: Path, encoding: str) -> None:
    (tmp_path / "steps.py").write_text(_STEPS, encoding="utf-8")
    leak = _graphleak(
        tmp_path,
        encoding,
        "check",
        "steps.py::leaky_step",
        "steps.py::clean_step",
        "--steps",
        "6",
        "--json",
        "out.json",
    )
    assert leak.returncode == EXIT_LEAK, leak.stderr.decode(errors="replace")
    out = leak.stdout.decode(encoding)  # every byte is the encoding's own
    assert "steps.py::leaky_step" in out and "steps.py::clean_step" in out
    assert "|______" in out  # a flat sparkline, in ASCII levels
    statuses = [t["status"] for t in json.loads((tmp_path / "out.json").read_text())["tests"]]
    assert len(statuses) == 2

    shown = _graphleak(tmp_path, encoding, "report", "out.json")
    assert shown.returncode == EXIT_LEAK, shown.stderr.decode(errors="replace")
    assert "steps.py::leaky_step" in shown.stdout.decode(encoding)

    clean = _graphleak(tmp_path, encoding, "check", "steps.py::clean_step", "--steps", "4")
    assert clean.returncode == EXIT_CLEAN, clean.stderr.decode(errors="replace")


def test_look_alikes() -> None:
    assert "".join(map(ascii_look_alike, "▁▂▃▄▅▆▇█")) == "_.-=+*%#"
    assert [ascii_look_alike(c) for c in "—→é€a"] == ["--", "->", "e", "?", "a"]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_dumb_terminal_gets_no_redrawn_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """TERM=dumb (an editor's shell, a CI log viewer) cannot erase a line: the check's
    step counter and the demo's status line stay off, as in a pipe."""
    from pytest_graphleak.cli.check_cmd import _is_terminal
    from pytest_graphleak.demo.progress import Display

    monkeypatch.setenv("TERM", "xterm")
    assert _is_terminal(_Tty()) and Display(_Tty()).live
    monkeypatch.setenv("TERM", "dumb")
    assert not _is_terminal(_Tty()) and not Display(_Tty()).live


def test_pytest_output_on_a_narrow_stdout(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pytest's own writer escapes what its stdout cannot encode (``\\u2581``); with the
    plugin its terminal shows the ASCII look-alikes, as the commands do."""
    monkeypatch.setenv("PYTHONIOENCODING", "ascii")
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    pytester.makepyfile(
        test_narrow=_STEPS
        + """
import pytest

@pytest.mark.no_graph_growth(steps=5, warmup=2)
def test_leaky():
    leaky_step()
"""
    )
    result = pytester.runpytest_subprocess("--graphleak", "-p", "no:randomly")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "\\u2581" not in out and re.search(r"  [_.=+*%#-]+\|[_.=+*%#-]+\n", out), out

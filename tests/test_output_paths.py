"""Nothing overwritten: a report path that would replace a file graphleak did not write,
or that another output of the same run also writes, is a usage error before anything
runs (pytest: exit 4 at configure; the graphleak command: exit 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from suite_helpers import FAST

from pytest_graphleak.exceptions import OutputPathError
from pytest_graphleak.report.output_paths import Output, check_outputs

TEST_MODEL = """\
import pytest

@pytest.mark.no_graph_growth(steps=4, warmup=1)
def test_step():
    pass
"""


def test_foreign_files_and_shared_paths_are_refused(tmp_path: Path) -> None:
    source = tmp_path / "train.py"
    source.write_text("print('mine')\n")
    with pytest.raises(
        OutputPathError,
        match=r"--json .*train.py.*exists and is not a "
        r"graphleak JSON report.*--json takes a path",
    ):
        check_outputs([Output("--json", source, "json")])
    shared = tmp_path / "out"
    with pytest.raises(OutputPathError, match="--json and --html both write"):
        check_outputs([Output("--json", shared, "json"), Output("--html", shared, "html")])
    # the same file under another spelling is still the same file
    with pytest.raises(OutputPathError, match="both write"):
        check_outputs([Output("a", shared, "json"), Output("b", tmp_path / "." / "out", "other")])
    empty = tmp_path / "empty.json"
    empty.write_text("")
    check_outputs([Output("--json", empty, "json")])  # nothing to lose
    html = tmp_path / "r.html"
    html.write_text("<!DOCTYPE html>\n<html><head><title>graphleak report</title>")
    check_outputs([Output("--html", html, "html")])
    with pytest.raises(OutputPathError, match="not a graphleak JSON report"):
        check_outputs([Output("--json", html, "json")])  # an HTML report is not a JSON one
    with pytest.raises(OutputPathError, match="does not exist"):
        check_outputs([Output("--json", tmp_path / "no" / "r.json", "json")])


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", *FAST, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_report_flag_used_as_a_switch_leaves_the_test_file_alone(tmp_path: Path) -> None:
    test_file = tmp_path / "test_model.py"
    test_file.write_text(TEST_MODEL)
    result = _pytest(tmp_path, "--graphleak", "--graphleak-report", "test_model.py")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert "command line option --graphleak-report" in result.stderr
    assert "exists and is not a graphleak JSON report" in result.stderr
    assert "--graphleak-report takes a path" in result.stderr
    assert "passed" not in result.stdout  # refused before any test ran
    assert test_file.read_text() == TEST_MODEL


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--graphleak-report=out", "--graphleak-html=out"],
            "command line option --graphleak-report and command line option --graphleak-html "
            "both write",
        ),
        (
            ["--graphleak-report=j.xml", "--junitxml=j.xml"],
            "command line option --graphleak-report and --junitxml both write",
        ),
    ],
)
def test_two_outputs_on_one_path_are_a_usage_error(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    (tmp_path / "test_model.py").write_text(TEST_MODEL)
    result = _pytest(tmp_path, "--graphleak", *flags, "test_model.py")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr, result.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "j.xml").exists()


def test_a_report_from_an_earlier_run_is_replaced(tmp_path: Path) -> None:
    (tmp_path / "test_model.py").write_text(TEST_MODEL)
    for _ in range(2):  # the second run writes over the first run's reports
        result = _pytest(
            tmp_path,
            "--graphleak",
            "--graphleak-report=r.json",
            "--graphleak-html=r.html",
            "test_model.py",
        )
        assert result.returncode == 0, result.stdout + result.stderr
    assert '"generated_by": "pytest-graphleak' in (tmp_path / "r.json").read_text()


def _graphleak(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_graphleak", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_graphleak_check_refuses_to_write_over_the_step_source(tmp_path: Path) -> None:
    source = "def step():\n    pass\n"
    (tmp_path / "s.py").write_text(source)
    result = _graphleak(tmp_path, "check", "s.py::step", "--json", "s.py")
    assert result.returncode == 2, result.stderr
    assert "--json 's.py': the file exists and is not a graphleak JSON report" in result.stderr
    assert (tmp_path / "s.py").read_text() == source
    assert not result.stdout.strip()  # refused before the step ran
    result = _graphleak(tmp_path, "check", "s.py::step", "--json", "o", "--html", "o")
    assert result.returncode == 2 and "--json and --html both write" in result.stderr
    # its own report may be replaced by the next run
    for _ in range(2):
        result = _graphleak(tmp_path, "check", "s.py::step", "--steps", "3", "--json", "r.json")
        assert result.returncode == 0, result.stderr
        assert "JSON report written to r.json" in result.stderr


def test_report_and_demo_refuse_foreign_files(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me\n")
    result = _graphleak(tmp_path, "report", "missing.json", "--html", "notes.txt")
    assert result.returncode == 2 and "not a graphleak HTML report" in result.stderr
    result = _graphleak(tmp_path, "demo", "--steps", "4", "--plot", "notes.txt")
    assert result.returncode == 2 and "not a graphleak demo plot" in result.stderr
    assert notes.read_text() == "keep me\n"

"""No silent pass (issue 13, item 3): a check whose probes measured nothing the step uses
has no clean verdict. A library imported during the first step is measured from then on;
imported later, or left out by ``probes=``, or with no probe available at all, the check
is *unmeasured*: the test fails (warn-only: warns), the JSON says ``unmeasured`` with the
reason, and ``graphleak check`` exits 4. A clean verdict says the slowest leak it catches
(issue 14, item 6), in ``-v`` output, the JSON and the CLI.
"""

from __future__ import annotations

import fnmatch
import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from suite_helpers import FAST, folded, said_in_order

from pytest_graphleak import UnmeasuredError, check, track
from pytest_graphleak.cli.exits import EXIT_UNMEASURED
from pytest_graphleak.report.json_doc import load_schema

pytest.importorskip("minigrad")
# Imported here, not inside a test: pytester restores sys.modules after each test, and a
# second import of torch in one process crashes.
torch: types.ModuleType | None
try:
    import torch
except ImportError:  # the torch cases skip
    torch = None

# The other runs are in-process (pytester.runpytest): their files import torch and
# minigrad at the top, as this process has, so a subprocess would test nothing more.

LAZY = """
import pytest

KEEP = []
CALLS = {"late": 0}

@pytest.mark.no_graph_growth(steps=6, warmup=1)
def test_imported_in_the_first_step_is_measured():
    import minigrad as mg
    KEEP.append(mg.Tensor([1.0], requires_grad=True) * 2.0)

def test_reset():
    import sys
    # the next test imports minigrad itself, after its first step
    for name in [n for n in sys.modules if n == "minigrad" or n.startswith("minigrad.")]:
        del sys.modules[name]

@pytest.mark.no_graph_growth(steps=6, warmup=1)
def test_imported_at_step_3_is_unmeasured():
    CALLS["late"] += 1
    if CALLS["late"] >= 3:
        import minigrad as mg
        KEEP.append(mg.Tensor([1.0], requires_grad=True) * 2.0)

@pytest.mark.no_graph_growth(steps=6, warmup=1)
def test_pure_python_clean():
    sum(range(100))
"""


def _statuses(path: Path) -> dict[str, dict[str, Any]]:
    document = json.loads(path.read_text())
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(document, load_schema())
    return {
        test["nodeid"].split("::")[1]: {**test["checks"][0], "status": test["status"]}
        for test in document["tests"]
    }


def test_a_library_imported_inside_the_step(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_lazy=LAZY)
    # A subprocess: minigrad must not be imported before the first step.
    result = pytester.runpytest_subprocess(*FAST, "--graphleak", "-v", "--graphleak-report=r.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=2, failed=2)
    checks = _statuses(pytester.path / "r.json")
    # imported in the first step: its probe started then, with a full series
    first = checks["test_imported_in_the_first_step_is_measured"]
    assert first["status"] == "leaked", first
    assert len(first["series"]["minigrad.tensors"]) == 7
    late = checks["test_imported_at_step_3_is_unmeasured"]
    assert late["status"] == "unmeasured"
    assert late["leaked"] is False
    assert late["unmeasured"].startswith(
        "no probe measured minigrad: it was first imported inside the step, at step 3"
    ), late["unmeasured"]
    out = folded(result.stdout.str())  # the terminal wraps at 80 columns
    assert (
        "test_imported_at_step_3_is_unmeasured: not measured, so no verdict: no probe "
        "measured minigrad: it was first imported inside the step, at step 3"
    ) in out
    assert "UNMEASURED test_lazy.py::test_imported_at_step_3_is_unmeasured not measured:" in out
    # a step that uses no autograd library: the process probe measured it, clean
    clean = checks["test_pure_python_clean"]
    assert clean["status"] == "clean" and clean["unmeasured"] is None
    assert clean["verdict"]["slowest_leak_steps"] == 2
    assert (
        "CLEAN test_lazy.py::test_pure_python_clean (6 steps after 1 warmup; catches "
        "1 object every 2 steps or faster)"
    ) in out


CHOSEN = """
import pytest
import torch
import minigrad as mg

KEEP = []
W = torch.ones(3, requires_grad=True)
MG_W = mg.Tensor([1.0, 2.0], requires_grad=True)

@pytest.mark.no_graph_growth(steps=6, warmup=1)
def test_torch_leak():
    KEEP.append(W * 2)

@pytest.mark.no_graph_growth(steps=6, warmup=1)
def test_minigrad_clean():
    (MG_W * 2.0).sum().backward()

@pytest.mark.no_graph_growth(steps=6, warmup=1)
def test_both_clean():
    (MG_W * 2.0).sum().backward()
    (W * 2).sum().backward()

@pytest.mark.no_graph_growth(steps=6, warmup=1, probes="process")
def test_memory_only_by_choice():
    (W * 2).sum().backward()
"""


@pytest.mark.skipif(torch is None, reason="needs torch")
def test_probes_that_leave_out_the_library_the_step_uses(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_chosen=CHOSEN)
    result = pytester.runpytest(
        *FAST, "--graphleak", "--graphleak-probes=minigrad", "--graphleak-report=r.json"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    checks = _statuses(pytester.path / "r.json")
    assert {name: c["status"] for name, c in checks.items()} == {
        "test_torch_leak": "unmeasured",  # both libraries loaded: still not clean
        "test_minigrad_clean": "clean",
        "test_both_clean": "clean",
        "test_memory_only_by_choice": "clean",
    }
    text = checks["test_torch_leak"]["unmeasured"]
    assert text.startswith("no probe measured torch: the step's module imports torch"), text
    assert "torch tensor(s)" in text and "(probes=minigrad)" in text
    assert text.endswith("add torch to the probes"), text
    # measured beside an unmeasured library, or memory only by choice: clean with a note
    assert "torch was not measured" in checks["test_both_clean"]["verdict"]["reason"]
    assert "torch was not measured" in checks["test_memory_only_by_choice"]["verdict"]["reason"]
    result.assert_outcomes(passed=3, failed=1)


@pytest.mark.skipif(torch is None, reason="needs torch")
def test_no_probe_at_all_and_warn_only(pytester: pytest.Pytester) -> None:
    assert torch is not None
    if torch.cuda.is_available():
        pytest.skip("needs a machine without a CUDA device")
    pytester.makepyfile(test_chosen=CHOSEN)
    result = pytester.runpytest(
        *FAST, "--graphleak", "--graphleak-probes=cuda", "-k", "torch_leak or minigrad"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=2)
    assert fnmatch.fnmatch(
        folded(result.stdout.str()),  # the terminal wraps at 80 columns
        "*test_torch_leak: not measured, so no verdict: no probe measured anything (cuda: no "
        "CUDA device is in use*; yet the step's module imports torch*add torch to the probes*",
    )
    warned = pytester.runpytest(
        *FAST,
        "--graphleak",
        "--graphleak-probes=cuda",
        "--graphleak-warn-only",
        "-k",
        "torch_leak",
    )
    assert warned.ret == pytest.ExitCode.OK
    warned.assert_outcomes(passed=1, warnings=1)
    said_in_order(
        warned.stdout.str(),
        ["*GraphLeakWarning: no verdict (warn-only, not failed) not measured, so no verdict: *"],
    )


def test_the_api_and_the_cli(tmp_path: Path) -> None:
    calls = {"n": 0}

    def late_step() -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            sys.modules.pop("json.tool", None)
            __import__("json.tool")  # stands for any library; only autograd ones count

    result = check(late_step, steps=4, warmup=1)
    assert result.unmeasured is None  # not an autograd library: nothing missed
    script = tmp_path / "lazy_steps.py"
    script.write_text(
        "N = [0]\nKEEP = []\n\n"
        "def step():\n"
        "    N[0] += 1\n"
        "    if N[0] >= 2:\n"
        "        import minigrad as mg\n"
        "        KEEP.append(mg.Tensor([1.0], requires_grad=True) * 2.0)\n"
    )
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_graphleak",
            "check",
            f"{script}::step",
            "--steps",
            "4",
            "--warmup",
            "1",
            "--json",
            str(tmp_path / "r.json"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert run.returncode == EXIT_UNMEASURED, run.stdout + run.stderr
    assert "UNMEASURED" in run.stdout and "at step 2" in run.stdout, run.stdout
    document = json.loads((tmp_path / "r.json").read_text())
    (test,) = document["tests"]
    assert test["status"] == "unmeasured"


def test_check_raises_unmeasured_error_on_request() -> None:
    import minigrad as mg

    weights = mg.Tensor([1.0, 2.0], requires_grad=True)

    def step() -> None:
        (weights * 2.0).sum().backward()

    with pytest.raises(UnmeasuredError, match="no probe measured anything"):
        check(step, steps=4, warmup=1, probes="cuda", raise_on_leak=True)
    result = check(step, steps=4, warmup=1, probes="cuda")
    assert result.unmeasured and not result.leaked
    measured = check(step, steps=4, warmup=1)
    assert measured.unmeasured is None and measured.verdict.slowest_leak_steps == 1


def test_track_without_a_probe_has_no_verdict() -> None:
    import minigrad as mg

    weights = mg.Tensor([1.0, 2.0], requires_grad=True)
    with track(warmup=1, probes="cuda") as t:
        for _ in range(5):
            (weights * 2.0).sum().backward()
            t.step()
    assert t.result is not None and not t.result.leaked
    assert t.result.unmeasured and t.result.unmeasured.startswith("no probe measured anything")
    with (
        pytest.raises(UnmeasuredError, match="not measured, so no verdict"),
        track(warmup=1, probes="cuda", raise_on_leak=True) as t,
    ):
        for _ in range(5):
            (weights * 2.0).sum().backward()
            t.step()


def test_reports_show_an_unmeasured_check() -> None:
    from pytest_graphleak.report.html import render_html
    from pytest_graphleak.report.json_doc import CheckedTest, build_document
    from pytest_graphleak.report.model import Report

    result = check(lambda: None, steps=4, warmup=1, probes="cuda")
    assert result.unmeasured
    document = build_document(
        [CheckedTest("test_x.py::test_step", "failed", [result.to_dict()])], generated_by="t"
    )
    assert document["summary"]["unmeasured"] == 1
    assert document["tests"][0]["status"] == "unmeasured"
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(document, load_schema())
    page = render_html(Report.from_dict(document), draw=None)
    assert "UNMEASURED" in page
    assert "not measured, so there is no verdict" in page
    assert "no probe measured anything" in page

"""A callback inside a pytest test: its result joins the graphleak report, the JSON and
the exit code like any other check, without --graphleak and under pytest-xdist; and the
same callback in a plain script, outside pytest."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("ignite")

TESTS = """
import torch
from ignite.engine import Engine
from pytest_graphleak.integrations.ignite import GraphLeakHandler

def run(leak, **options):
    model = torch.nn.Linear(4, 1)
    kept = []

    def update(engine, batch):
        loss = model(batch).pow(2).mean()
        loss.backward()
        if leak:
            kept.append(loss)
        return loss.item()

    engine = Engine(update)
    GraphLeakHandler(warmup=2, **options).attach(engine)
    engine.run([torch.randn(2, 4) for _ in range(20)], max_epochs=1)

def test_clean():
    run(False)

def test_leaky():
    run(True)

def test_leaky_warns():
    run(True, on_leak="warn")
"""


def test_results_join_the_report_json_and_exit_code_under_xdist(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(test_fit=TESTS)
    result = pytester.runpytest_subprocess(
        "-n", "2", "-p", "no:randomly", "--graphleak-report=r.json"
    )
    result.assert_outcomes(passed=2, failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "graphleak: test_fit.py::test_leaky::ignite(update) leaks: list-acc*",
            "*GraphLeakWarning: graphleak: test_fit.py::test_leaky_warns::ignite(update) leaks*",
        ]
    )
    document = json.loads((pytester.path / "r.json").read_text())
    status = {test["nodeid"]: test["status"] for test in document["tests"]}
    assert status == {
        "test_fit.py::test_clean": "clean",
        "test_fit.py::test_leaky": "leaked",
        "test_fit.py::test_leaky_warns": "warned",
    }
    leaky = next(t for t in document["tests"] if t["nodeid"] == "test_fit.py::test_leaky")
    chain = leaky["checks"][0]["diagnosis"]["chain"]
    assert chain[0] == "closure 'kept' of update" and chain[1].startswith("list(len=")


SCRIPT = """
import torch
from ignite.engine import Engine
from pytest_graphleak import GraphLeakError
from pytest_graphleak.integrations.ignite import GraphLeakHandler

model = torch.nn.Linear(4, 1)
kept = []

def update(engine, batch):
    loss = model(batch).pow(2).mean()
    kept.append(loss)
    return loss.item()

engine = Engine(update)
engine.logger.disabled = True
handler = GraphLeakHandler(warmup=2, steps=10).attach(engine)
try:
    engine.run([torch.randn(2, 4) for _ in range(30)], max_epochs=1)
except GraphLeakError as exc:
    print("raised at iteration", engine.state.iteration)
    print(exc)
print("result:", handler.result.leaked, handler.result.pattern, handler.result.name)
"""


def test_outside_pytest_a_script_gets_the_error_and_the_result(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    # Judged at iteration 12 (warmup 2 + steps 10), inside the run, and raised after the
    # next one, which shows the line that stores the loss.
    assert "raised at iteration 13" in out
    assert "stored at: " in out
    assert "graphleak: ignite(update) leaks: list-accumulation" in out
    assert "held by: global 'kept' -> list(len=12) -> Tensor(" in out
    assert "result: True list-accumulation ignite(update)" in out

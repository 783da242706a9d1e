"""One status rule (``status.py``): the precedence leaked > error > unmeasured > clean and
one word per status, the same on every surface: the JSON report and its schema, the
terminal lines, ``graphleak check`` (its --json outcome and exit code) and
``graphleak report`` (its counts and exit code, also for a report written in warn-only mode).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Imported before any in-process pytester run, which drops the modules first imported
# inside it (numpy then refuses a second import in this process).
import minigrad  # noqa: F401
from pytest_graphleak import status
from pytest_graphleak.cli import main
from pytest_graphleak.cli.exits import EXIT_LEAK, EXIT_UNMEASURED, EXIT_USER_CODE, exit_code
from pytest_graphleak.report.json_doc import CheckedTest, build_document, dumps
from pytest_graphleak.report.text import render_result, verdict_line
from pytest_graphleak.result import CheckResult, Growth, Verdict

SCHEMA = Path(status.__file__).parent / "report" / "schema.json"


def _result(
    *, leaked: bool = False, error: str | None = None, unmeasured: str | None = None
) -> CheckResult:
    growths = [Growth("minigrad.tensors", 3.0, 8.0, 1.0)] if leaked else []
    verdict = Verdict(leaked, growths, "list-accumulation" if leaked else None, "why")
    return CheckResult(
        "t.py::step",
        6,
        2,
        {"minigrad.tensors": [1.0] * 8},
        {"minigrad.tensors": "objects"},
        verdict,
        error=error,
        unmeasured=unmeasured,
    )


def test_the_schema_lists_the_table_statuses() -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert schema["$defs"]["test"]["properties"]["status"]["enum"] == list(status.STATUSES)
    summary = schema["properties"]["summary"]["properties"]
    # fixed: with a baseline file, its entries no longer found (no status: no test row);
    # fixtures: of the rows checked, those of a fixture's findings on no test
    assert set(summary) == {"checked", "audited", "fixed", "fixtures", *status.STATUSES}


def test_a_leak_outranks_an_error_on_every_surface() -> None:
    both = _result(leaked=True, error="ValueError: x at step 9")
    assert both.status == "leaked"
    assert verdict_line(both).startswith("LEAKED t.py::step: list-accumulation")
    assert render_result(both).startswith("graphleak: t.py::step leaks: list-accumulation")
    assert exit_code([_result(error="E: at step 1"), both]) == EXIT_LEAK
    test = CheckedTest("t.py::step", "failed", [_result(error="E").to_dict(), both.to_dict()])
    assert test.status == "leaked"
    assert exit_code([_result(error="E"), _result(unmeasured="no probe")]) == EXIT_USER_CODE


@pytest.mark.parametrize(
    ("checks", "outcome", "expected"),
    [
        ([{"leaked": True}], "passed", "warned"),
        ([{"leaked": True}], "xfailed", "xfailed"),
        ([{"error": "E"}, {"unmeasured": "u"}], "failed", "error"),
        ([{"unmeasured": "u"}, {}], "failed", "unmeasured"),
        ([{}], "passed", "clean"),
    ],
)
def test_a_test_status_is_its_worst_check_read_by_its_outcome(
    checks: list[dict[str, object]], outcome: str, expected: str
) -> None:
    # each check a whole result (``CheckResult.to_dict()``): the typed model reads it
    results = [_result(**check).to_dict() for check in checks]  # type: ignore[arg-type]
    assert CheckedTest("t", outcome, results).status == expected


@pytest.fixture
def lazy_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A minigrad step, checked with only the torch probe: nothing it uses is measured."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    name = f"status_steps_{abs(hash(str(tmp_path)))}"
    (tmp_path / f"{name}.py").write_text(
        "import minigrad as mg\nW = mg.Tensor([1.0, 2.0], requires_grad=True)\n"
        "def step():\n    (W * 2.0).sum().backward()\n    W.grad = None\n"
    )
    yield f"{name}.py::step"
    sys.modules.pop(name, None)


def test_an_unmeasured_cli_check_is_failed_not_passed(
    lazy_step: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "check",
            lazy_step,
            "--steps",
            "4",
            "--warmup",
            "1",
            "--probes",
            "torch",
            "--json",
            "u.json",
            "-q",
        ]
    )
    out, err = capsys.readouterr()
    assert code == EXIT_UNMEASURED, (out, err)
    assert out.startswith(f"UNMEASURED {lazy_step}: no verdict"), out
    (test,) = json.loads(Path("u.json").read_text())["tests"]
    assert (test["outcome"], test["status"]) == ("failed", "unmeasured")
    assert main(["report", "u.json"]) == EXIT_UNMEASURED
    assert "1 checked: 1 unmeasured" in capsys.readouterr().out


def _saved(path: Path, tests: list[CheckedTest], *, warn_only: bool = False) -> str:
    path.write_text(dumps(build_document(tests, generated_by="test", warn_only=warn_only)))
    return str(path)


def test_report_says_error_where_the_json_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raised = CheckedTest("t.py::step", "failed", [_result(error="E: boom at step 2").to_dict()])
    assert main(["report", _saved(tmp_path / "e.json", [raised])]) == EXIT_USER_CODE
    out = capsys.readouterr().out
    assert "1 checked: 1 error" in out and "raised," not in out
    assert "ERROR t.py::step: the step raised E: boom at step 2" in out


def test_report_of_a_warn_only_run_exits_1_on_its_leak(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    warned = CheckedTest("t.py::step", "passed", [_result(leaked=True).to_dict()])
    assert warned.status == "warned"
    path = _saved(tmp_path / "w.json", [warned], warn_only=True)
    assert main(["report", path]) == EXIT_LEAK
    assert "1 checked: 1 warned" in capsys.readouterr().out  # the JSON's word for the test

"""The fix in the JSON report (issue 44): an object ``{text, verified, why_not, diff,
...}`` that the schema describes, read back by ``graphleak report``; a report of an
older version, whose fix is a string, still reads."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from suite_helpers import FAST, JsonDoc

from pytest_graphleak.cli import main
from pytest_graphleak.report.json_doc import load_schema
from pytest_graphleak.report.validate import validate
from pytest_graphleak.result import CheckResult

pytest_plugins = ["pytester"]

LEAKY = """\
import minigrad as mg
import pytest

losses = []


@pytest.mark.no_graph_growth(steps=6, warmup=2)
def test_accumulates():
    x = mg.Tensor([1.0, 2.0], requires_grad=True)
    loss = (x * 2).sum()
    losses.append(loss)
"""


def leak_report(pytester: pytest.Pytester, *flags: str) -> tuple[Path, JsonDoc]:
    pytester.makepyfile(test_keep=LEAKY)
    report = pytester.path / "graphleak.json"
    result = pytester.runpytest_subprocess(
        "--graphleak", f"--graphleak-report={report}", *FAST, *flags
    )
    result.assert_outcomes(failed=1)
    return report, json.loads(report.read_text(encoding="utf-8"))


def only_check(document: JsonDoc) -> JsonDoc:
    [test] = document["tests"]
    [check] = test["checks"]
    return check  # type: ignore[no-any-return]


def test_a_verified_fix_is_an_object_that_validates_and_round_trips(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    path, document = leak_report(pytester)
    jsonschema.validate(document, load_schema())
    validate(document, load_schema())
    assert document["rootdir"] == str(pytester.path)
    check = only_check(document)
    fix = check["diagnosis"]["fix"]
    assert "fix_tried" not in check["diagnosis"]
    assert fix["verified"] is True and fix["why_not"] is None, fix
    assert fix["text"] == "test_keep.py:11: losses.append(loss.item())", fix
    assert fix["diff"].splitlines()[:2] == ["--- a/test_keep.py", "+++ b/test_keep.py"]
    assert "-    losses.append(loss)\n+    losses.append(loss.item())\n" in fix["diff"]
    assert fix["filename"] == str(pytester.path / "test_keep.py")
    assert fix["advice"] and fix["advice"] != fix["text"]
    # Read back typed and written again: the same object, the same check.
    assert CheckResult.from_dict(check).to_dict()["diagnosis"]["fix"] == fix
    capsys.readouterr()
    assert main(["report", str(path), "--color=no"]) == 1
    text = " ".join(capsys.readouterr().out.split())
    assert (
        "fix (verified: 8 more steps with this change grew nothing): "
        "test_keep.py:11: losses.append(loss.item())"
    ) in text, text


def test_a_fix_not_verified_says_why_in_the_object(pytester: pytest.Pytester) -> None:
    _, document = leak_report(pytester, "--graphleak-verify-fix=off")
    jsonschema.validate(document, load_schema())
    fix = only_check(document)["diagnosis"]["fix"]
    assert fix["verified"] is False and fix["diff"] is None, fix
    assert fix["why_not"] == "fix verification is off (--graphleak-verify-fix=off)"
    assert fix["text"] == fix["advice"]


def test_an_older_report_with_the_fix_as_a_string_still_reads(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    path, document = leak_report(pytester, "--graphleak-verify-fix=off")
    diagnosis = only_check(document)["diagnosis"]
    advice = diagnosis["fix"]["advice"]
    diagnosis["fix"] = advice  # as versions before the fix was tried wrote it
    del document["rootdir"]
    path.write_text(json.dumps(document), encoding="utf-8")
    jsonschema.validate(document, load_schema())
    capsys.readouterr()
    assert main(["report", str(path), "--color=no"]) == 1
    text = " ".join(capsys.readouterr().out.split())
    assert f"fix: {advice}" in text and "verified" not in text, text

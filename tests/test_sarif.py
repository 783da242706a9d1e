"""The SARIF 2.1.0 log (``--graphleak-sarif``, issue 44): valid against the official
schema (``tests/data``), one result per finding on the line to change, the verified fix
as replacements that write the same change as ``graphleak fix --apply``, and the
baseline's state of each finding."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from suite_helpers import FAST, JsonDoc

# Imported here, before pytester's in-process runs: each run drops the modules it imported
# from sys.modules, and numpy cannot be imported twice in one process.
import minigrad  # noqa: F401
from pytest_graphleak.cli import main
from pytest_graphleak.cli.patches import apply
from pytest_graphleak.exceptions import OutputPathError
from pytest_graphleak.report.model import Report
from pytest_graphleak.report.output_paths import Output, check_outputs
from pytest_graphleak.report.sarif import fix_object, is_sarif_report, sarif_log
from pytest_graphleak.result import Fix

pytest_plugins = ["pytester"]

SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text())

SUITE = """\
import minigrad as mg
import pytest

losses = []
history = []
KEPT = []


@pytest.mark.no_graph_growth(steps=6, warmup=2)
def test_list():
    x = mg.Tensor([1.0, 2.0], requires_grad=True)
    loss = (x * 2).sum()
    losses.append(loss)


@pytest.mark.no_graph_growth(steps=6, warmup=2)
def test_clean():
    x = mg.Tensor([1.0, 2.0], requires_grad=True)
    (x * 2).sum().backward()


@pytest.mark.no_graph_growth(steps=6, warmup=2)
def test_history():
    x = mg.Tensor([1.0, 2.0], requires_grad=True)
    history.append(x * 3)


def test_keeps():
    x = mg.Tensor([1.0], requires_grad=True)
    KEPT.append((x * 2).sum())
"""


def valid(log: JsonDoc) -> None:
    validator = jsonschema.Draft4Validator(
        SCHEMA, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER
    )
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(log)]
    assert not errors, errors


def by_test(log: JsonDoc) -> dict[str, JsonDoc]:
    return {result["properties"]["test"]: result for result in log["runs"][0]["results"]}


def with_replacements(text: str, replacements: list[JsonDoc]) -> str:
    """``text`` with SARIF whole-line replacements made (a region from the start of one
    line to the start of another), as a SARIF viewer applies a fix."""
    lines = text.splitlines(keepends=True)
    for change in sorted(replacements, key=lambda r: -r["deletedRegion"]["startLine"]):
        region = change["deletedRegion"]
        assert region["startColumn"] == region["endColumn"] == 1, region
        first, end = region["startLine"] - 1, region["endLine"] - 1
        lines[first:end] = change["insertedContent"]["text"].splitlines(keepends=True)
    return "".join(lines)


def test_a_run_writes_one_valid_result_per_finding_with_its_fix_and_baseline_state(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    source = (pytester.path / "test_suite.py").read_text()
    baseline = pytester.path / "baseline.json"
    pytester.runpytest(
        "--graphleak", f"--graphleak-baseline={baseline}", "--graphleak-baseline-update", *FAST
    )
    # Known: test_list. Fixed since: an entry of test_clean. New: test_history, test_keeps.
    written = json.loads(baseline.read_text())
    [entry] = [e for e in written["findings"] if e["test"].endswith("::test_list")]
    entry["reason"] = "tracked in #12"
    written["findings"] = [entry, {**entry, "test": entry["test"].replace("list", "clean")}]
    baseline.write_text(json.dumps(written))
    sarif, report = pytester.path / "out.sarif", pytester.path / "out.json"
    result = pytester.runpytest(
        "--graphleak",
        f"--graphleak-baseline={baseline}",
        f"--graphleak-sarif={sarif}",
        f"--graphleak-report={report}",
        *FAST,
    )
    result.assert_outcomes(passed=3, failed=1)
    assert f"SARIF report: {sarif}" in result.stdout.str().replace("/\n    ", "/")  # folded
    log = json.loads(sarif.read_text())
    valid(log)
    run = log["runs"][0]
    assert [rule["id"] for rule in run["tool"]["driver"]["rules"]] == [
        "list-accumulation",
        "retained-grad-fn",
        "cycle",
        "memory-growth",
    ]
    results = by_test(log)
    assert sorted(results) == [
        "test_suite.py::test_history",
        "test_suite.py::test_keeps",
        "test_suite.py::test_list",
    ]
    known, new, kept = (
        results[f"test_suite.py::{name}"] for name in ("test_list", "test_history", "test_keeps")
    )
    assert (known["baselineState"], known["level"]) == ("unchanged", "note")
    assert known["properties"]["knownReason"] == "tracked in #12"
    assert "Known, in baseline.json: tracked in #12 (it fails nothing)." in known["message"]["text"]
    assert "knownReason" not in new["properties"]
    assert (new["baselineState"], new["level"]) == ("new", "error")
    assert (kept["baselineState"], kept["level"], kept["properties"]["kind"]) == (
        "new",
        "warning",
        "outlive",
    )
    # On the line that stores the leaked tensor, relative to the workspace.
    line = source.splitlines().index("    history.append(x * 3)") + 1
    assert new["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": "test_suite.py", "uriBaseId": "%SRCROOT%"},
        "region": {"startLine": line},
    }
    assert new["ruleId"] == "list-accumulation" and new["ruleIndex"] == 0
    message = new["message"]["text"].splitlines()
    assert message[0] == "test_suite.py::test_history leaks: list-accumulation."
    assert (
        f"stored at: test_suite.py:{line} in test_history: history.append(x * 3)  "
        "(once per step)" in message
    )
    assert kept["message"]["text"].splitlines()[0] == (
        "test_suite.py::test_keeps: autograd graphs outlived the teardown (list-accumulation)."
    )
    # The verified fixes: their replacements make the change graphleak fix --apply writes.
    [fix] = new["fixes"]
    assert fix["description"]["text"].startswith("fix (verified: ")
    [change] = fix["artifactChanges"]
    assert change["artifactLocation"] == {"uri": "test_suite.py", "uriBaseId": "%SRCROOT%"}
    # graphleak fix --apply writes the known finding's fix too.
    both = [*change["replacements"], *known["fixes"][0]["artifactChanges"][0]["replacements"]]
    fixed = with_replacements(source, both)
    assert main(["fix", str(report), "--apply"]) == 0
    assert fixed == (pytester.path / "test_suite.py").read_text() != source
    # The entry fixed since the baseline is no result: the run's properties list it.
    [gone] = run["properties"]["baseline"]["fixedSinceBaseline"]
    assert gone["test"] == "test_suite.py::test_clean"
    # graphleak report writes the same results from the JSON report.
    capsys.readouterr()
    again = pytester.path / "again.sarif"
    assert main(["report", str(report), "--sarif", str(again)]) == 1
    assert by_test(json.loads(again.read_text())).keys() == results.keys()
    assert is_sarif_report(sarif) and not is_sarif_report(report)


DIFF = """\
--- a/m.py
+++ b/m.py
@@ -1,5 +1,6 @@
 a = 1
-b = 2
+with g():
+    b = 2
 c = 3
-d = 4
 e = 5
"""


def test_replacements_of_a_diff_write_what_the_patch_writes(tmp_path: Path) -> None:
    """A line replaced by two and a line removed: the SARIF replacements and
    ``graphleak fix --apply``'s patch make the same file."""
    text = "a = 1\nb = 2\nc = 3\nd = 4\ne = 5\n"
    target = tmp_path / "m.py"
    target.write_text(text)
    fix = Fix("m.py:2: ...", verified=True, diff=DIFF, filename=str(target))
    sarif = fix_object(fix, str(tmp_path), "verified")
    [change] = sarif["artifactChanges"]
    apply(str(target), [DIFF])
    assert with_replacements(text, change["replacements"]) == target.read_text()
    assert [r["deletedRegion"]["startLine"] for r in change["replacements"]] == [2, 4]


def test_a_report_without_findings_is_a_valid_log_with_no_results(tmp_path: Path) -> None:
    log = sarif_log(Report(), base=str(tmp_path))
    valid(log)
    assert log["runs"][0]["results"] == []
    assert "properties" not in log["runs"][0]  # no baseline: no baseline section


def test_a_sarif_path_replaces_only_graphleaks_own_log(tmp_path: Path) -> None:
    """``--graphleak-sarif`` over another tool's SARIF log (or the test file, the flag
    used as a switch) is refused before the run; graphleak's own log is replaced."""
    other = tmp_path / "codeql.sarif"
    other.write_text(
        json.dumps(
            {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "CodeQL"}}, "results": []}]}
        )
    )
    with pytest.raises(OutputPathError, match="a graphleak SARIF log"):
        check_outputs([Output("--graphleak-sarif", other, "sarif")])
    own = tmp_path / "graphleak.sarif"
    own.write_text(json.dumps(sarif_log(Report(), base=str(tmp_path))))
    check_outputs([Output("--graphleak-sarif", own, "sarif")])

"""Every writer renders the typed report (``model.Report``), as coverage.py's reporters
render its ``Analysis``: the session and ``graphleak check`` build it once
(``json_doc.build_report``), ``graphleak report`` reads a file into it, and no writer
reads a report's dicts or types them again."""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path

import pytest

from pytest_graphleak import report as report_package
from pytest_graphleak.cli.report_cmd import load_report
from pytest_graphleak.report.json_doc import CheckedTest, build_document, build_report, dumps
from pytest_graphleak.report.model import Report
from pytest_graphleak.report.writers import WRITERS, Run
from pytest_graphleak.result import CheckResult, Growth, Verdict

REPORT = Path(report_package.__file__).parent
#: Where a report's dicts are read into the model (the schema's boundary and the model).
READERS = {"model.py", "json_doc.py", "validate.py"}


def _from_dict_calls(source: str) -> list[int]:
    """The lines of ``<anything>.from_dict(...)`` calls."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "from_dict"
    ]


WRITING = sorted(p.name for p in REPORT.glob("*.py") if p.name not in READERS)


@pytest.mark.parametrize("module", WRITING)
def test_no_writer_types_a_report_again(module: str) -> None:
    assert _from_dict_calls((REPORT / module).read_text(encoding="utf-8")) == []


def test_the_scan_sees_a_from_dict_call() -> None:
    assert _from_dict_calls("x = 1\nreport = Report.from_dict(document)\n") == [2]


def test_every_writer_takes_the_typed_report() -> None:
    rendered = []
    leak = CheckResult(
        "t.py::test_leak",
        6,
        2,
        {"minigrad.tensors": [float(i) for i in range(8)]},
        {"minigrad.tensors": "objects"},
        Verdict(True, [Growth("minigrad.tensors", 2.0, 7.0, 1.0)], "list-accumulation", "grew"),
    )
    report = build_report([CheckedTest(leak.name, "failed", [leak.to_dict()])], generated_by="t")
    assert isinstance(report, Report) and report.tests[0].checks[0].leaked
    for writer in WRITERS:
        if writer.render is not None:
            rendered.append(writer.kind)
            assert "list-accumulation" in writer.render(report, Run(environ={}))
    assert {"json", "html", "sarif"} <= set(rendered)
    # a publisher's parameters are the same pair
    github = next(w for w in WRITERS if w.publish is not None)
    assert github.publish is not None
    assert next(iter(inspect.signature(github.publish).parameters)) == "report"
    # JUnit XML's properties too: on pytest's --junitxml, each test's from its typed row
    junit = next(w for w in WRITERS if w.kind == "junit")
    assert junit.host_option == "xmlpath" and junit.properties is not None
    assert junit.properties(report.tests[0])[:2] == [
        ("graphleak.status", "leaked"),
        ("graphleak.leaked", "true"),
    ]


def _baseline_document() -> dict[str, object]:
    """A document with every part of a baseline section: reasons, stale entries, an
    update's counts."""
    entry = {
        "test": "t.py::test_a",
        "check": "marker",
        "pattern": "cycle",
        "holder": "global 'x'",
        "reason": "a cache, on purpose",
    }
    stale = {**entry, "test": "t.py::test_gone", "reason": ""}
    section = {
        "file": "/tmp/graphleak-baseline.json",
        "entries": 3,
        "fixed": [entry],
        "unchecked": 1,
        "stale": [stale],
        "update_command": "pytest --graphleak-baseline-update",
        "updated": {"findings": 2, "added": 1, "removed": 1, "pruned": 0},
    }
    clean = CheckResult(
        "t.py::test_b",
        6,
        2,
        {"minigrad.tensors": [1.0] * 8},
        {"minigrad.tensors": "objects"},
        Verdict(False, reason="steady"),
    )
    return build_document(
        [CheckedTest(clean.name, "passed", [clean.to_dict()])],
        generated_by="pytest-graphleak test",
        baseline=section,
        rootdir="/tmp",
    )


def test_graphleak_report_writes_a_report_back_byte_for_byte(tmp_path: Path) -> None:
    text = dumps(_baseline_document())
    assert '"reason": "a cache, on purpose"' in text and '"pruned": 0' in text
    saved = tmp_path / "r.json"
    saved.write_text(text, encoding="utf-8")
    report = load_report(str(saved))  # the same types as the run's
    assert report.baseline is not None and report.baseline.unchecked == 1
    assert report.rootdir == "/tmp"
    json_writer = next(w for w in WRITERS if w.kind == "json")
    assert json_writer.render is not None
    assert json_writer.render(report, Run()) == text
    # a report written before the baseline's stale entries existed stays without them
    document = json.loads(text)
    del document["baseline"]["stale"]
    old = dumps(document)
    saved.write_text(old, encoding="utf-8")
    assert json_writer.render(load_report(str(saved)), Run()) == old


PLUGIN = REPORT.parent / "plugin"
CHECK_FIELDS = frozenset({*CheckResult.__dataclass_fields__, "leaked", "status", "pattern"})


def _check_field_writes(source: str) -> list[str]:
    """``check["known"] = ...`` (or ``+=``): a check's field set on its dict."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.Assign, ast.AugAssign)):
            continue
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AugAssign)
            else []
        )
        for target in targets:
            if (
                isinstance(target, ast.Subscript)
                and isinstance(target.slice, ast.Constant)
                and target.slice.value in CHECK_FIELDS
            ):
                found.append(f"line {node.lineno}: {target.slice.value!r}")
    return found


@pytest.mark.parametrize("module", sorted(p.name for p in PLUGIN.glob("*.py")))
def test_known_and_warned_are_set_on_typed_results(module: str) -> None:
    assert _check_field_writes((PLUGIN / module).read_text(encoding="utf-8")) == []


def test_the_scan_sees_a_field_set_on_a_dict() -> None:
    planted = 'check["known"] = True\nfor c in found:\n    c["warned"] = 1\nenv["CI"] = "1"\n'
    assert _check_field_writes(planted) == ["line 1: 'known'", "line 3: 'warned'"]

"""The renderers read the typed read model (``report/model.py``), never a report's dicts,
and name a check's growth by one metric order (``model.headline_growth``)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from pytest_graphleak import report as report_package
from pytest_graphleak.plugin.terminal import short_message
from pytest_graphleak.report.html import render_html
from pytest_graphleak.report.json_doc import CheckedTest, build_document, dumps
from pytest_graphleak.report.model import Report, headline_growth
from pytest_graphleak.report.text import render_text
from pytest_graphleak.result import (
    CheckResult,
    CreationSite,
    Declaration,
    Diagnosis,
    Growth,
    Verdict,
)

REPORT = Path(report_package.__file__).parent

#: The renderers of a report document. ``json_doc`` and ``validate`` are the schema's
#: boundary and ``model`` the one reader; ``dot`` is being moved onto a drawing record.
RENDERERS = ("github.py", "html.py", "html_cards.py")

#: What a report's dicts are keyed by: a document's, a test's, a check's, a diagnosis'.
DOCUMENT_KEYS = frozenset(
    {
        "tests",
        "checks",
        "summary",
        "baseline",
        "fixed",
        "update_command",
        "nodeid",
        "outcome",
        "status",
        "metrics",
        "generated_by",
        "warn_only",
        "notes",
        *CheckResult.__dataclass_fields__,
        *Diagnosis.__dataclass_fields__,
        *CreationSite.__dataclass_fields__,
        *Verdict.__dataclass_fields__,
    }
)


def _dict_reads(source: str) -> list[str]:
    """``x.get("field")`` and ``x["field"]`` with a report's field name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.Call, ast.Subscript)):
            continue
        key = None
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
        ):
            key = node.args[0]
        elif isinstance(node, ast.Subscript):
            key = node.slice
        if isinstance(key, ast.Constant) and key.value in DOCUMENT_KEYS:
            found.append(f"line {node.lineno}: {key.value!r}")
    return found


@pytest.mark.parametrize("module", RENDERERS)
def test_a_renderer_reads_no_field_of_a_report_dict(module: str) -> None:
    assert _dict_reads((REPORT / module).read_text(encoding="utf-8")) == []


def test_the_scan_sees_a_dict_read() -> None:
    assert _dict_reads('d.get("diagnosis")\nx = t["nodeid"]\nos.environ.get("CI")') == [
        "line 1: 'diagnosis'",
        "line 2: 'nodeid'",
    ]


def _minigrad_leak(pattern: str = "list-accumulation") -> CheckResult:
    """A minigrad leak whose verdict lists its growths by name (autograd_meta first), as
    the probe declares tensors, nodes, then autograd_meta."""
    names = ("minigrad.tensors", "minigrad.nodes", "minigrad.autograd_meta")
    counts = {
        "minigrad.tensors": "tensors",
        "minigrad.nodes": "nodes",
        "minigrad.autograd_meta": "tensors",
    }
    rates = {"minigrad.tensors": 1.0, "minigrad.nodes": 3.0, "minigrad.autograd_meta": 2.0}
    growths = [Growth(name, 5.0, 5.0 + 5 * rates[name], rates[name]) for name in sorted(names)]
    return CheckResult(
        "t.py::test_leak",
        6,
        2,
        {name: [float(i) * rates[name] for i in range(8)] for name in names},
        dict.fromkeys(names, "objects"),
        Verdict(True, growths, pattern, "grew"),
        declarations={name: Declaration("objects", counts[name]) for name in names},
    )


def test_the_headline_growth_is_the_tensor_count_before_another_tensor_record() -> None:
    growth = headline_growth(_minigrad_leak())
    assert growth is not None and growth.metric == "minigrad.tensors"
    # read back from a report (keys sorted: autograd_meta first), the same metric
    saved = json.loads(
        dumps(
            build_document(
                [CheckedTest("t.py::test_leak", "failed", [_minigrad_leak().to_dict()])],
                generated_by="t",
            )
        )
    )
    read_back = Report.from_dict(saved).tests[0].checks[0]
    assert next(iter(read_back.series)) == "minigrad.autograd_meta"
    growth = headline_growth(read_back)
    assert growth is not None and growth.metric == "minigrad.tensors"
    # a pattern told by its nodes names them first (patterns.TABLE's told_by)
    growth = headline_growth(_minigrad_leak("retained-grad-fn"))
    assert growth is not None and growth.metric == "minigrad.nodes"


def test_the_html_index_names_the_metric_the_terminal_names() -> None:
    check = _minigrad_leak()
    document = build_document(
        [CheckedTest(check.name, "failed", [check.to_dict()])], generated_by="t"
    )
    page = render_html(Report.from_dict(document), draw=None)
    start = page.index('<table class="index">')
    index = page[start : page.index("</table>", start)]
    growth = re.search(
        r'<td class="mono">([^<]*(?:<wbr>[^<]*)*) <span class="rate">(.*?)</span>', index
    )
    assert growth is not None
    assert growth.group(1).replace("<wbr>", "") == "minigrad.tensors"
    assert growth.group(2) == "+1/step"
    assert short_message(check).startswith("list-accumulation: +1 tensor/step")


def test_the_model_reads_the_baseline_section() -> None:
    section = {
        "fixed": [
            {
                "test": "t.py::test_a",
                "check": "marker",
                "pattern": "cycle",
                "holder": "global 'x'",
                "reason": "",
            }
        ],
        "update_command": "pytest --graphleak-baseline-update",
        "entries": 1,
    }
    document = build_document([], generated_by="t", baseline=section)
    report = Report.from_dict(document)
    assert report.baseline is not None
    assert [key.text() for key in report.baseline.fixed] == [
        "t.py::test_a [marker] cycle, held by global 'x'"
    ]
    assert report.baseline.update_command == "pytest --graphleak-baseline-update"
    assert Report.from_dict(build_document([], generated_by="t")).baseline is None


# -- an unmeasured check's fix: a field of its own, set where the reason is made ---------
def test_a_loop_too_short_carries_its_fix() -> None:
    import minigrad as mg
    from pytest_graphleak import track

    w = mg.Tensor([1.0, 2.0], requires_grad=True)
    with pytest.warns(Warning), track(warmup=3) as t:
        for _ in range(4):
            (w * 2.0).sum().backward()
            w.grad = None
            t.step()
    result = t.result
    assert result is not None and result.status == "unmeasured"
    assert result.unmeasured_fix == (
        "run at least 6 t.step() calls in the checked loop, or fewer warmup steps "
        "(warmup=1 needs 4 t.step() calls)"
    )


def test_a_library_no_probe_measured_carries_its_fix() -> None:
    import minigrad as mg
    from pytest_graphleak import check

    w = mg.Tensor([1.0, 2.0], requires_grad=True)

    def step() -> None:
        (w * 2.0).sum().backward()
        w.grad = None

    # torch's probe only (whether torch is imported here or not): nothing the step uses
    result = check(step, steps=4, warmup=1, probes=["torch"], raise_on_leak=False)
    assert result.status == "unmeasured", result
    assert result.unmeasured_fix == (
        'add minigrad to the probes: probes=["minigrad", ...] on the marker, check() or '
        "track(), or --graphleak-probes=minigrad,..."
    )


def _unmeasured(fix: str) -> CheckResult:
    """A reason with none of the words the renderers once looked for, and its fix."""
    return CheckResult(
        "t.py::test_u",
        0,
        3,
        {},
        {},
        Verdict(False, reason="no verdict"),
        unmeasured="the probes saw nothing",
        unmeasured_fix=fix,
    )


def test_every_surface_reads_the_unmeasured_fix_field() -> None:
    from pytest_graphleak.plugin.report_section import summary_lines
    from pytest_graphleak.report.github import commands
    from pytest_graphleak.report.github_rows import report_rows
    from pytest_graphleak.report.json_doc import load_schema
    from pytest_graphleak.report.model import TestRow
    from pytest_graphleak.report.validate import validate

    check = _unmeasured("import torch before the check")
    document = build_document(
        [CheckedTest(check.name, "failed", [check.to_dict()])], generated_by="t"
    )
    validate(document, load_schema())
    assert CheckResult.from_dict(check.to_dict()).unmeasured_fix == check.unmeasured_fix
    page = render_html(Report.from_dict(document), draw=None)
    assert '<dt>fix</dt><dd class="fix">import torch before the check</dd>' in page
    assert '<span class="fix">fix: import torch before the check</span>' in page  # the index
    (command,) = commands(report_rows(Report.from_dict(document), {}), "/")
    message = command.split("::", 2)[2].split("%0A")
    assert message[:2] == [
        "fix: import torch before the check",
        "not measured, so no verdict: the probes saw nothing",
    ]
    lines = [
        line
        for line, _ in summary_lines(TestRow.of(check.name, "failed", [check]), 0, warn_only=False)
    ]
    assert "    fix: import torch before the check" in lines
    # the failure text (pytest's failure block, UnmeasuredError): why, then the fix
    assert render_text(check) == (
        "graphleak: t.py::test_u: not measured, so no verdict: "
        "the probes saw nothing\n  fix: import torch before the check"
    )
    # no fix known: no line that claims one
    bare = _unmeasured("")
    assert "fix:" not in render_text(bare)
    assert not any(
        "fix:" in line
        for line, _ in summary_lines(TestRow.of(bare.name, "failed", [bare]), 0, warn_only=False)
    )

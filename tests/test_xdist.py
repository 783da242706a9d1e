"""End to end with the real plugin: the same leaky suite gives the same verdicts and
reports in one process and under pytest-xdist; warn-only and fixture leaks set the
exit code as documented.

Absolute object counts depend on what else lives in a process (which other tests a
worker ran), so runs are compared on what must not change: outcomes, statuses,
patterns, which metrics grew and by how much per step, culprit chains and creation
sites, and the terminal summary with its start -> end figures masked.
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from suite_helpers import JsonDoc, folded, report_section

from pytest_graphleak.report.json_doc import load_schema

pytest_plugins = ["pytester"]
pytest.importorskip("minigrad")  # LEAKY_SUITE's; imported here for the in-process runs

LEAKY_SUITE = """
import pytest
import minigrad as mg


@pytest.fixture
def state():
    w = mg.Tensor([[0.5, -0.2], [0.1, 0.3]], requires_grad=True)
    return {"w": w, "losses": [], "total": 0.0}


def _loss(state):
    x = mg.Tensor([[1.0, 2.0]])
    return ((x @ state["w"]).tanh() ** 2).mean()


@pytest.mark.no_graph_growth
def test_list_accumulation(state):
    loss = _loss(state)
    loss.backward()
    state["losses"].append(loss)


@pytest.mark.no_graph_growth
def test_running_total(state):
    state["total"] = state["total"] + _loss(state)


@pytest.mark.no_graph_growth
@pytest.mark.parametrize("scale", [1.0, 2.0])
def test_fixed(state, scale):
    loss = _loss(state) * scale
    loss.backward()
    state["losses"].append(loss.item())


@pytest.mark.no_graph_growth
def test_raises(state):
    if len(state["losses"]) == 2:
        raise ValueError("bad batch")
    state["losses"].append(1.0)


def test_fixture_check(graphleak):
    kept = []

    def step():
        kept.append(mg.Tensor([1.0], requires_grad=True) * 2)

    graphleak.check(step)
"""

ARGS = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-v")


def _run(
    pytester: pytest.Pytester, *args: str, subprocess: bool = True
) -> tuple[pytest.RunResult, JsonDoc, str]:
    """A run and its reports. Runs compared with an xdist run are subprocesses, as its
    workers are (what else lives in a process changes absolute counts); the others may
    run in-process (minigrad, which LEAKY_SUITE imports, is imported here for them:
    numpy cannot be imported twice in one process)."""
    out = pytester.path / "out"
    out.mkdir(exist_ok=True)
    run = pytester.runpytest_subprocess if subprocess else pytester.runpytest
    result = run(
        *ARGS,
        "--graphleak-report=out/r.json",
        "--graphleak-html=out/r.html",
        "--junitxml=out/junit.xml",
        *args,
    )
    document = json.loads((out / "r.json").read_text())
    jsonschema.validate(document, load_schema())
    return result, document, (out / "r.html").read_text()


def _verdicts(document: JsonDoc) -> list[Any]:
    """What must be identical between runs, per test and check."""
    return [
        (
            test["nodeid"],
            test["outcome"],
            test["status"],
            [
                (
                    check["name"],
                    check["leaked"],
                    check["pattern"],
                    check["error"],
                    {m: i["per_step"] for m, i in check["metrics"].items() if i["grew"]},
                    (check["diagnosis"] or {}).get("chain"),
                    [
                        (Path(s["filename"]).name, s["lineno"])
                        for s in (check["diagnosis"] or {}).get("sites", [])
                    ],
                )
                for check in test["checks"]
            ],
        )
        for test in document["tests"]
    ]


def _junit(pytester: pytest.Pytester) -> dict[str, dict[str, str]]:
    """Per test case its graphleak properties, minus process-dependent byte figures."""
    tree = ET.parse(pytester.path / "out" / "junit.xml")
    return {
        case.get("name", ""): {
            p.get("name", ""): p.get("value", "")
            for p in case.iter("property")
            if "bytes" not in p.get("name", "")
        }
        for case in tree.iter("testcase")
    }


_QUANTITY = r"\S+(?: (?:B|KiB|MiB|GiB|TiB))?"
_FIGURES = re.compile(f"{_QUANTITY} -> {_QUANTITY}")


def _summary(result: pytest.RunResult) -> list[str]:
    # Figures and the padding that aligns them depend on the process: mask both.
    return [
        re.sub(r"\s+", " ", _FIGURES.sub("A -> B", line))
        for line in report_section(result.outlines)
    ]


class _Sections(HTMLParser):
    """The page's outline: test sections, badges, folds, charts of grown metrics and
    graph drawings. Charts of other metrics are left out: which probes are active
    depends on what a process imported before (a worker that ran only minigrad tests
    never imported torch, so it has no torch series)."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.shape: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        css = found.get("class", "")
        if (
            tag in ("section", "details")
            or css.startswith("badge")
            or (tag == "svg" and css != "chart")
            or (tag == "polyline" and css == "series grew")
        ):
            self.shape.append(f"{tag}.{css}#{found.get('id', '')}")


def _workers(result: pytest.RunResult) -> set[str]:
    """The xdist workers that ran tests, from -v's ``[gw0] ... PASSED`` lines."""
    return set(re.findall(r"^\[(gw\d+)\] .*(?:PASSED|FAILED|LEAKED)", result.stdout.str(), re.M))


def test_same_verdicts_and_reports_alone_and_on_two_workers(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(test_leaks=LEAKY_SUITE)
    alone, doc_alone, html_alone = _run(pytester, "--graphleak", "-p", "no:xdist")
    junit_alone = _junit(pytester)
    # Two workers merge reports as four would (each worker sends its own; the controller
    # merges), at half the start-up cost; both must have run tests for that to be shown.
    spread, doc_spread, html_spread = _run(pytester, "--graphleak", "-n", "2")
    assert _workers(spread) == {"gw0", "gw1"}, spread.stdout.str()
    assert _junit(pytester) == junit_alone
    assert junit_alone["test_running_total"]["graphleak.pattern"] == "retained-grad-fn"
    assert float(junit_alone["test_running_total"]["graphleak.minigrad.nodes.per_step"]) > 0

    assert alone.ret == spread.ret == pytest.ExitCode.TESTS_FAILED
    assert alone.parseoutcomes() == spread.parseoutcomes() == {"failed": 4, "passed": 2}
    alone.stdout.fnmatch_lines(["*test_leaks.py::test_list_accumulation LEAKED*"])
    spread.stdout.fnmatch_lines(["*LEAKED test_leaks.py::test_list_accumulation*"])
    assert _verdicts(doc_alone) == _verdicts(doc_spread)
    assert _summary(alone) == _summary(spread)  # its count line: the workers' audits too
    assert doc_alone["summary"] == doc_spread["summary"]
    assert _Sections(html_alone).shape == _Sections(html_spread).shape

    by_id = {t["nodeid"]: t for t in doc_alone["tests"]}
    assert by_id["test_leaks.py::test_list_accumulation"]["checks"][0]["pattern"] == (
        "list-accumulation"
    )
    assert by_id["test_leaks.py::test_running_total"]["checks"][0]["pattern"] == (
        "retained-grad-fn"
    )
    # A leak found through the fixture fails its test like the marker's does.
    assert by_id["test_leaks.py::test_fixture_check"]["status"] == "leaked"
    assert by_id["test_leaks.py::test_raises"]["status"] == "error"
    assert by_id["test_leaks.py::test_fixed[1.0]"]["status"] == "clean"
    section = folded("\n".join(_summary(alone)))  # the terminal wraps at 80 columns
    assert "LEAKED test_leaks.py::test_list_accumulation list-accumulation held: " in section
    assert (
        "graphleak: 6 tests with results: 3 leaked, 1 error, 2 clean; 6 audited for "
        "graphs that outlive them"
    ) in section


def test_warn_only_reports_without_failing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_leaks=LEAKY_SUITE)
    result, document, _ = _run(
        pytester,
        "--graphleak",
        "--graphleak-warn-only",
        "-p",
        "no:xdist",
        "-k",
        "not raises",
        subprocess=False,
    )
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*test_leaks.py::test_list_accumulation LEAK-WARNING*"])
    out = folded(result.stdout.str())  # the terminal wraps at 80 columns
    assert re.search(r"WARNING test_leaks\.py::test_list_accumulation +list-accumulation\b", out)
    assert "(warn-only: not failed)" in out
    assert (
        "graphleak: 5 tests with results: 3 warned, 2 clean; 5 audited for graphs that outlive them"
    ) in out
    assert document["warn_only"] is True
    assert document["summary"]["warned"] == 3 and document["summary"]["leaked"] == 0


def test_fixture_leak_fails_the_run_without_the_graphleak_flag(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_leaks=LEAKY_SUITE)
    result, document, _ = _run(pytester, "-p", "no:xdist", subprocess=False)
    # Marked tests run once as plain tests; the fixture checks anyway and fails its test.
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert result.parseoutcomes() == {"failed": 1, "passed": 5}
    assert [(t["nodeid"], t["status"]) for t in document["tests"]] == [
        ("test_leaks.py::test_fixture_check", "leaked")
    ]
    result.stdout.fnmatch_lines(["*test_leaks.py::test_fixture_check LEAKED*"])


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("GRAPHLEAK_CATALOGUE_XDIST"),
    reason="the whole catalogue twice (~1-2 min on 2 cores): set GRAPHLEAK_CATALOGUE_XDIST=1",
)
def test_catalogue_same_alone_and_on_two_workers(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    if not any(EXAMPLES.glob("*_*.py")):
        pytest.skip("no example catalogue")
    select = (
        str(EXAMPLES),
        "-o",
        "python_files=torch_*.py minigrad_*.py",
        f"--ignore={EXAMPLES / 'ddp_leaky_and_fixed.py'}",
        "--graphleak",
    )
    alone, doc_alone, html_alone = _run(pytester, *select, "-p", "no:xdist")
    spread, doc_spread, html_spread = _run(pytester, *select, "-n", "2")
    assert _workers(spread) == {"gw0", "gw1"}, spread.stdout.str()
    assert alone.ret == spread.ret == pytest.ExitCode.TESTS_FAILED
    assert alone.parseoutcomes() == spread.parseoutcomes()
    assert _verdicts(doc_alone) == _verdicts(doc_spread)
    assert _summary(alone) == _summary(spread)  # its count line: the workers' audits too
    assert doc_alone["summary"] == doc_spread["summary"]
    assert _Sections(html_alone).shape == _Sections(html_spread).shape
    statuses: dict[str, set[str]] = {
        t["nodeid"].rsplit("::", 1)[1]: set() for t in doc_alone["tests"]
    }
    for test in doc_alone["tests"]:
        statuses[test["nodeid"].rsplit("::", 1)[1]].add(test["status"])
    assert statuses == {"test_leaky": {"leaked"}, "test_fixed": {"clean"}}


WIDE_TEXT = """
import pytest
import minigrad as mg


@pytest.fixture
def state():
    return {"w": mg.Tensor([[0.5, -0.2], [0.1, 0.3]], requires_grad=True), "losses": []}


@pytest.mark.no_graph_growth
def test_train_step_with_a_rather_long_name_that_makes_lines_long(state):
    loss = (mg.Tensor([[1.0, 2.0]]) @ state["w"]).tanh().sum()
    loss.backward()
    state["losses"].append(loss)
"""


@pytest.mark.parametrize("columns", [None, "120"])
def test_a_workers_failure_text_breaks_at_the_controllers_width(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, columns: str | None
) -> None:
    """Under -n 2 the failure text is broken at the width the controller writes at, as in
    one process (80 columns when COLUMNS is unset, as on CI): the controller prints the
    lines its worker sent as they are."""
    pytest.importorskip("xdist")
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    width = int(columns or 80)
    pytester.makepyfile(test_wide=WIDE_TEXT)
    outputs = []
    for workers in (("-p", "no:xdist"), ("-n", "2")):
        result = pytester.runpytest_subprocess("--graphleak", "-p", "no:randomly", *workers)
        result.assert_outcomes(failed=1)
        text = result.stdout.str()
        start = text.index("graphleak: test_wide.py::")
        failure = text[start : text.index("\n=", start)].splitlines()
        outputs.append([line for line in failure if "took" not in line and " s)" not in line])
        held = [line for line in failure if line.startswith("  held by:")]
        assert held, text
        assert all(len(line) <= width for line in failure[1:]), (width, failure)
        assert any(line.startswith("           ") for line in failure), failure  # broken
    assert outputs[0] == outputs[1]  # the same lines in one process and under xdist

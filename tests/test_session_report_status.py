"""How the session reporter words tests that pytest (or a plugin) gives a status of its
own: expected failures, pytest-rerunfailures' reruns, and the status word in pytest's
short test summary (which pytest 7 prints differently from pytest 8+).

End to end with the real plugin (``--graphleak``) on minigrad leaks: each run checks
the terminal summary, the JSON document and the JUnit XML properties together, so
that they cannot disagree.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import jsonschema
import pytest
from suite_helpers import JsonDoc, report_section

from pytest_graphleak.report.json_doc import load_schema

pytest_plugins = ["pytester"]

# pytest-randomly (installed in some environments) would shuffle the expected order.
ARGS = (
    "-p",
    "no:cacheprovider",
    "-p",
    "no:hypothesispytest",
    "-p",
    "no:randomly",
    "-p",
    "no:xdist",
)

COMMON = """
import unittest

import pytest
import minigrad as mg

from pytest_graphleak import GraphLeakError


@pytest.fixture
def state():
    w = mg.Tensor([[0.5, -0.2], [0.1, 0.3]], requires_grad=True)
    return {"w": w, "losses": []}


def _loss(state):
    x = mg.Tensor([[1.0, 2.0]])
    return ((x @ state["w"]).tanh() ** 2).mean()
"""

EXPECTED_FAILURES = (
    COMMON
    + """

@pytest.mark.no_graph_growth
def test_leaky(state):
    state["losses"].append(_loss(state))


def test_warned(graphleak, state):
    with pytest.raises(GraphLeakError):  # caught: the test passes, the leak is a warning
        graphleak.check(lambda: state["losses"].append(_loss(state)))


@pytest.mark.xfail(reason="known leak")
@pytest.mark.no_graph_growth
def test_known_leak(state):
    state["losses"].append(_loss(state))


class TestCaseLeak(unittest.TestCase):
    def setUp(self):
        self.state = {"w": mg.Tensor([[0.5, -0.2], [0.1, 0.3]], requires_grad=True),
                      "losses": []}

    @unittest.expectedFailure
    @pytest.mark.no_graph_growth
    def test_expected_leak(self):
        self.state["losses"].append(_loss(self.state))
"""
)

RERUNS = (
    COMMON
    + """
ATTEMPTS = {}


@pytest.fixture
def attempt(request):
    ATTEMPTS[request.node.name] = ATTEMPTS.get(request.node.name, 0) + 1
    return ATTEMPTS[request.node.name]


@pytest.mark.flaky(reruns=1)
def test_flaky_fixture(graphleak, state, attempt):
    if attempt == 1:  # only the first attempt runs a check (which leaks)
        graphleak.check(lambda: state["losses"].append(_loss(state)))


@pytest.mark.flaky(reruns=1)
@pytest.mark.no_graph_growth
def test_flaky_marker(state, attempt):
    loss = _loss(state)
    if attempt == 1:  # the first attempt leaks, the rerun is clean
        state["losses"].append(loss)


@pytest.mark.flaky(reruns=1)
@pytest.mark.no_graph_growth
def test_leaks_twice(state):
    state["losses"].append(_loss(state))
"""
)


def _run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, JsonDoc]:
    with pytest.MonkeyPatch.context() as patch:  # one row a line: these tests read words
        patch.setenv("COLUMNS", "250")  # (test_session_report reads the 80-column layout)
        result = pytester.runpytest_subprocess(
            *ARGS,
            "--graphleak",
            "-v",
            "-rA",
            "--junitxml=junit.xml",
            "--graphleak-report=r.json",
            *args,
        )
    document = json.loads((pytester.path / "r.json").read_text())
    jsonschema.validate(document, load_schema())
    return result, document


def _junit_statuses(pytester: pytest.Pytester) -> dict[str, list[str]]:
    """Test name -> every ``graphleak.status`` property of its test cases."""
    statuses: dict[str, list[str]] = {}
    for case in ET.parse(pytester.path / "junit.xml").iter("testcase"):
        values = statuses.setdefault(str(case.get("name")), [])
        values += [
            str(p.get("value"))
            for p in case.iter("property")
            if p.get("name") == "graphleak.status"
        ]
    return statuses


def _outcomes(document: JsonDoc) -> dict[str, tuple[str, str]]:
    return {t["nodeid"]: (t["outcome"], t["status"]) for t in document["tests"]}


def test_expected_failures_read_as_xfailed_and_status_words_print_plain(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_status=EXPECTED_FAILURES)
    result, document = _run(pytester)
    result.assert_outcomes(failed=1, passed=1, xfailed=2)
    result.stdout.fnmatch_lines(
        [
            "test_status.py::test_leaky LEAKED*",
            "test_status.py::test_warned LEAK-WARNING*",
            "test_status.py::test_known_leak XFAIL*",
            "test_status.py::TestCaseLeak::test_expected_leak XFAIL*",
        ]
    )
    # The short summary prints the status word itself, on pytest 7 as on pytest 8+.
    result.stdout.fnmatch_lines(
        [
            "*= short test summary info =*",
            "LEAK-WARNING test_status.py::test_warned",
            "XFAIL test_status.py::test_known_leak - known leak",
            "LEAKED test_status.py::test_leaky - list-accumulation: *",
        ]
    )
    assert "('LEAK" not in result.stdout.str()

    section = report_section(result.outlines)
    pytest.LineMatcher(section).fnmatch_lines(
        [
            # leaks first (status.display_key), then by node id
            "LEAKED  test_status.py::test_leaky  list-accumulation  held: *",
            "WARNING test_status.py::test_warned  list-accumulation  (test passed)",
            "XFAIL   test_status.py::TestCaseLeak::test_expected_leak  list-accumulation  "
            "held: *(expected to fail)",
            "XFAIL   test_status.py::test_known_leak  list-accumulation  held: *"
            "(from fixture 'state')  (expected to fail)",
            "graphleak: 4 tests with results: 1 leaked, 1 warned, 2 xfailed; 4 audited for graphs "
            "that outlive them",
        ]
    )
    assert sum("WARNING" in line for line in section) == 1, section

    assert _outcomes(document) == {
        "test_status.py::TestCaseLeak::test_expected_leak": ("xfailed", "xfailed"),
        "test_status.py::test_known_leak": ("xfailed", "xfailed"),
        "test_status.py::test_leaky": ("failed", "leaked"),
        "test_status.py::test_warned": ("passed", "warned"),
    }
    assert document["summary"] == {
        "checked": 4,
        "leaked": 1,
        "warned": 1,
        "xfailed": 2,
        "error": 0,
        "unmeasured": 0,
        "known": 0,
        "clean": 0,
        "audited": 4,
    }
    assert _junit_statuses(pytester) == {
        "test_expected_leak": ["xfailed"],
        "test_known_leak": ["xfailed"],
        "test_leaky": ["leaked"],
        "test_warned": ["warned"],
    }


def test_only_the_final_attempt_of_a_rerun_test_counts(pytester: pytest.Pytester) -> None:
    pytest.importorskip("pytest_rerunfailures")
    pytester.makepyfile(test_rerun=RERUNS)
    result, document = _run(pytester, "-p", "rerunfailures")
    assert result.parseoutcomes() == {"failed": 1, "passed": 2, "rerun": 3}
    result.stdout.fnmatch_lines(
        [
            "test_rerun.py::test_flaky_fixture RERUN*",
            "test_rerun.py::test_flaky_fixture PASSED*",
            "test_rerun.py::test_flaky_marker RERUN*",
            "test_rerun.py::test_flaky_marker PASSED*",
            "test_rerun.py::test_leaks_twice RERUN*",
            "test_rerun.py::test_leaks_twice LEAKED*",
        ]
    )
    result.stdout.fnmatch_lines(["LEAKED test_rerun.py::test_leaks_twice - list-accumulation: *"])
    section = report_section(result.outlines)
    pytest.LineMatcher(section).fnmatch_lines(
        [
            "LEAKED  test_rerun.py::test_leaks_twice  list-accumulation*",
            "CLEAN   test_rerun.py::test_flaky_marker  (* steps after * warmup; catches 1 "
            "object every * steps or faster)",
            # each test audited once: after its final attempt
            "graphleak: 2 tests with results: 1 leaked, 1 clean; 3 audited for graphs that "
            "outlive them",
        ]
    )
    # The first attempt of test_flaky_fixture leaked, then its rerun ran no check.
    assert not any("test_flaky_fixture" in line or "WARNING" in line for line in section)
    assert _outcomes(document) == {
        "test_rerun.py::test_flaky_marker": ("passed", "clean"),
        "test_rerun.py::test_leaks_twice": ("failed", "leaked"),
    }
    assert (document["summary"]["checked"], document["summary"]["audited"]) == (2, 3)
    assert _junit_statuses(pytester) == {
        "test_flaky_fixture": [],
        "test_flaky_marker": ["clean"],
        "test_leaks_twice": ["leaked"],
    }

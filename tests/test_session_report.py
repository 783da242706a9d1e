"""The session reporter through real pytest runs (pytester subprocesses).

A conftest registers the reporter and attaches realistic ``report.graphleak`` data
(built with the result.py classes) to call-phase reports, so the reporter is tested
on its seam alone: terminal summary, status letter, JSON, HTML, JUnit XML, ini
paths, write failures, and pytest-xdist (-n 2, a worker crash) against one process.
Runs use ``-p no:graphleak`` so that the installed core plugin does not register a
second reporter.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Literal

import jsonschema
import pytest
from suite_helpers import report_section

from pytest_graphleak.plugin import session_report
from pytest_graphleak.report.json_doc import load_schema
from pytest_graphleak.result import CheckResult, Verdict
from pytest_graphleak.settings import Settings

pytest_plugins = ["pytester"]

FAKE_CONFTEST = """
import json

import pytest

from pytest_graphleak.plugin import session_report
from pytest_graphleak.result import (
    CheckResult, CreationSite, Declaration, Diagnosis, Growth, Verdict,
)

WARMUP, STEPS = 2, 6


def _series(start, per_step):
    return [float(start + per_step * i) for i in range(WARMUP + STEPS)]


def leaky(name):
    return CheckResult(
        name=name, steps=STEPS, warmup=WARMUP,
        series={"minigrad.tensors": _series(10, 1), "minigrad.nodes": _series(4, 2),
                "process.rss_bytes": [5.0e7] * (WARMUP + STEPS)},
        units={"minigrad.tensors": "objects", "minigrad.nodes": "objects",
               "process.rss_bytes": "bytes"},
        # what each counts orders the metrics on every surface (report.model.metric_order)
        declarations={"minigrad.tensors": Declaration("objects", "tensors"),
                      "minigrad.nodes": Declaration("objects", "nodes"),
                      "process.rss_bytes": Declaration("bytes", "memory")},
        verdict=Verdict(True, [Growth("minigrad.tensors", 12.0, 17.0, 1.0),
                               Growth("minigrad.nodes", 8.0, 18.0, 2.0)],
                        "list-accumulation", "minigrad.tensors grew by 1 per step"),
        diagnosis=Diagnosis(
            "list-accumulation",
            chain=["fixture 'state'", "dict['losses']", "list(len=8)",
                   "Tensor(shape=(), grad_fn=<MeanBackward0>)"],
            sites=[CreationSite("test_x.py", 7, "losses.append(loss)", 1, "step")],
        ),
    ).to_dict()


def clean(name):
    return CheckResult(
        name=name, steps=STEPS, warmup=WARMUP,
        series={"minigrad.tensors": [10.0, 12.0] + [12.0] * STEPS},
        units={"minigrad.tensors": "objects"},
        verdict=Verdict(False, reason="steady after warmup"),
    ).to_dict()


def raised(name):
    result = CheckResult(name=name, steps=STEPS, warmup=WARMUP,
                         series={"minigrad.tensors": [10.0, 11.0, 11.0]},
                         units={"minigrad.tensors": "objects"}, verdict=Verdict(False),
                         error="ValueError: bad batch at step 3")
    return result.to_dict()


FAKE = {
    "test_leaky": lambda nodeid: [leaky(nodeid)],
    "test_warned": lambda nodeid: [leaky(nodeid)],
    "test_clean": lambda nodeid: [clean(nodeid)],
    "test_raised": lambda nodeid: [raised(nodeid)],
    "test_two_checks": lambda nodeid: [clean("check_a"), leaky("check_b")],
    "test_malformed": lambda nodeid: [{"name": nodeid}],
}


def pytest_addoption(parser):
    session_report.add_options(parser)


def pytest_configure(config):
    config.pluginmanager.register(
        session_report.GraphleakSessionReport(config), "graphleak-session-report"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    make = FAKE.get(item.originalname)
    if report.when == "call" and make is not None:
        report.graphleak = make(item.nodeid)


def pytest_sessionfinish(session):
    # What this process keeps at the end: reports still carrying results, the rows.
    config = session.config
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    reports = [report for reports in reporter.stats.values() for report in reports]
    kept = [report.nodeid for report in reports if hasattr(report, "graphleak")]
    junit = [report.nodeid for report in reports
             if any(name == "graphleak.status" for name, _ in report.user_properties)]
    rows = len(config.pluginmanager.get_plugin("graphleak-session-report").rows())
    worker = getattr(config, "workerinput", {}).get("workerid", "main")
    with open(f"kept-{worker}.json", "w") as out:
        json.dump({"kept": kept, "junit": junit, "rows": rows}, out)
"""

FAKE_TESTS = """
import pytest

def test_leaky():
    raise AssertionError("graph leak: list-accumulation")

def test_warned():
    pass

def test_clean():
    pass

def test_raised():
    raise ValueError("bad batch")

@pytest.mark.parametrize("n", [1, 2])
def test_two_checks(n):
    raise AssertionError("graph leak in check_b")

def test_malformed():
    pass

def test_unchecked():
    pass
"""

# Plugins a report run does not need (hypothesis alone costs ~1.5 s of import per
# process), and pytest-randomly: the expected output follows the file's order.
BASE_ARGS = (
    "-p",
    "no:graphleak",
    "-p",
    "no:cacheprovider",
    "-p",
    "no:hypothesispytest",
    "-p",
    "no:randomly",
)


def _fake_suite(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(test_fake=FAKE_TESTS)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_verbose_run_summary_status_json_html_junit(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # the width CI logs have (an xdist worker's is wider)
    _fake_suite(pytester)
    pytester.mkdir("out")
    result = pytester.runpytest(
        *BASE_ARGS,
        "-p",
        "no:xdist",
        "-v",
        "-rf",
        "--graphleak-report=out/r.json",
        "--graphleak-html=out/r.html",
        "--junitxml=out/junit.xml",
    )
    # Leaks count as failures: the exit code is the gate.
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=4, failed=4)
    result.stdout.fnmatch_lines(
        [
            "*test_fake.py::test_leaky LEAKED*",
            "*test_fake.py::test_warned LEAK-WARNING*",
            "*test_fake.py::test_clean PASSED*",
            "*test_fake.py::test_raised FAILED*",  # pytest's word, as its count says ("1 failed")
            "*test_fake.py::test_two_checks?1? LEAKED*",
            "LEAKED test_fake.py::test_leaky - AssertionError: graph leak*",
        ]
    )
    section = report_section(result.outlines)
    text = "\n".join(section)
    pytester_lines = pytest.LineMatcher(section)
    pytester_lines.fnmatch_lines(
        [
            "*= graphleak report =*",
            # 80 columns: the holder goes on a line of its own, not cut mid-word
            "LEAKED  test_fake.py::test_leaky  list-accumulation",
            "    held: Tensor(shape=(), grad_fn=<MeanBackward0>) (from fixture 'state')",
            "    minigrad.tensors *12 -> 17  +1/step  *",
            "    minigrad.nodes *8 -> 18  +2/step  *",
            "    fix: store plain numbers (.item()) or detached tensors (.detach()) in the",
            "         growing container, not graph-carrying tensors",  # every leaked row's fix
            # leaks first, as every report lists them (status.display_key), then by node id
            "CLEAN   test_fake.py::test_two_checks[[]1[]] [[]check_a[]]  (6 steps after 2 warmup)",
            "LEAKED  test_fake.py::test_two_checks[[]1[]] [[]check_b[]]  list-accumulation*",
            # a warned row: its chain once, in its held by: line (no held: in its head)
            "WARNING test_fake.py::test_warned  list-accumulation  (test passed)",
            "    held by: *",
            "ERROR   test_fake.py::test_raised  step raised: ValueError: bad batch at step 3",
            "CLEAN   test_fake.py::test_clean  (6 steps after 2 warmup)",
            "note: ignored malformed graphleak results of test_fake.py::test_malformed:",
            "      KeyError*",  # broken at a space, on under its label (80 columns)
            "graphleak: 6 checked: 3 leaked, 1 warned, 1 error, 1 clean",
        ]
    )
    # Where each file is, its path folded after a "/" where it is wider than the line.
    paths = result.stdout.str().split("1 error, 1 clean\n")[1].replace("/\n    ", "/")
    assert paths.startswith(
        f"JSON report: {pytester.path}/out/r.json\nHTML report: {pytester.path}/out/r.html\n"
    ), paths
    # Each grown metric row carries a sparkline of the whole series; flat metrics get no row.
    assert "▁" in text and "█" in text
    assert "process.rss_bytes" not in text
    # With -v the clean test has its one line.
    assert "CLEAN   test_fake.py::test_clean  (6 steps after 2 warmup)" in text

    document = json.loads((pytester.path / "out/r.json").read_text())
    jsonschema.validate(document, load_schema())
    assert document["schema"] == 1
    assert document["summary"] == {
        "checked": 6,
        "leaked": 3,
        "warned": 1,
        "xfailed": 0,
        "error": 1,
        "unmeasured": 0,
        "known": 0,
        "clean": 1,
        "audited": 0,
    }
    nodeids = [t["nodeid"] for t in document["tests"]]
    assert nodeids == sorted(nodeids)
    assert "test_fake.py::test_unchecked" not in nodeids
    by_id = {t["nodeid"]: t for t in document["tests"]}
    leaky = by_id["test_fake.py::test_leaky"]
    assert (leaky["outcome"], leaky["status"]) == ("failed", "leaked")
    check = leaky["checks"][0]
    assert check["series"]["minigrad.tensors"] == [float(10 + i) for i in range(8)]
    assert check["metrics"]["minigrad.nodes"]["per_step"] == 2.0
    assert check["diagnosis"]["chain"][1] == "dict['losses']"
    assert check["diagnosis"]["sites"][0]["line"] == "losses.append(loss)"
    assert by_id["test_fake.py::test_warned"]["status"] == "warned"
    assert document["notes"] and "test_malformed" in document["notes"][0]

    parser = _Tags()
    parser.feed((pytester.path / "out/r.html").read_text())
    charts = [a for tag, a in parser.tags if tag == "svg" and a.get("class") == "chart"]
    # Every series of every check has its chart: leaky 3, warned 3, two_checks 2x(1+3), ...
    expected = sum(len(c["series"]) for t in document["tests"] for c in t["checks"])
    assert len(charts) == expected
    assert "fixture 'state'" in "".join(parser.text)

    junit = ET.parse(pytester.path / "out/junit.xml")
    props = {
        case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")}
        for case in junit.iter("testcase")
    }
    assert props["test_leaky"]["graphleak.status"] == "leaked"
    assert props["test_leaky"]["graphleak.minigrad.tensors.per_step"] == "1"
    assert props["test_leaky"]["graphleak.minigrad.nodes.per_step"] == "2"
    assert props["test_leaky"]["graphleak.process.rss_bytes.per_step"] == "0"
    assert props["test_leaky"]["graphleak.pattern"] == "list-accumulation"
    assert props["test_two_checks[1]"]["graphleak.2.name"] == "check_b"
    assert props["test_two_checks[1]"]["graphleak.2.minigrad.tensors.per_step"] == "1"
    assert props["test_unchecked"] == {}

    # pytest's kept reports lost their results: the reporter's rows are the only copy.
    kept = json.loads((pytester.path / "kept-main.json").read_text())
    assert kept["kept"] == []
    assert kept["rows"] == 6  # every checked test; test_malformed's ignored results not
    assert "test_fake.py::test_leaky" in kept["junit"]  # properties only with --junitxml


def test_quiet_run_with_ini_paths_and_letters(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_suite(pytester)
    pytester.mkdir("reports")
    pytester.makeini(
        "[pytest]\ngraphleak_report = reports/ini.json\ngraphleak_html = reports/ini.html\n"
    )
    # Run from a subdirectory: ini paths stay relative to the ini file's directory.
    monkeypatch.chdir(pytester.mkdir("sub"))
    result = pytester.runpytest(*BASE_ARGS, "-p", "no:xdist", str(pytester.path / "test_fake.py"))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    # The progress line: L for a leak that failed, l for a leak that only warned.
    result.stdout.fnmatch_lines(["../test_fake.py Ll.FLL.. *"])
    section = "\n".join(report_section(result.outlines))
    assert "test_clean" not in section  # clean tests are listed only with -v
    assert "graphleak: 6 checked: 3 leaked, 1 warned, 1 error, 1 clean" in section
    assert (pytester.path / "reports/ini.json").is_file()
    assert (pytester.path / "reports/ini.html").is_file()
    # No --junitxml: no properties left on pytest's kept teardown reports.
    kept = json.loads((pytester.path / "sub/kept-main.json").read_text())
    assert (kept["kept"], kept["junit"]) == ([], [])


def test_unwritable_report_path_is_a_usage_error_before_running(
    pytester: pytest.Pytester,
) -> None:
    _fake_suite(pytester)
    result = pytester.runpytest(
        *BASE_ARGS, "-p", "no:xdist", "--graphleak-report=missing/dir/r.json"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*command line option --graphleak-report '*missing/dir/r.json': "
            "directory '*missing/dir' does not exist*"
        ]
    )
    assert "test_leaky" not in result.stdout.str()


def test_write_failure_at_the_end_falls_back_and_fails_the_run(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(
        test_gone="""
        import shutil

        def test_clean(tmp_path):
            shutil.rmtree("out")  # the report directory vanishes during the run
        """
    )
    pytester.mkdir("out")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COLUMNS", "1000")  # each sentence on one line
        result = pytester.runpytest(
            *BASE_ARGS,
            "-p",
            "no:xdist",
            "--graphleak-report=out/r.json",
            "--graphleak-html=out/r.html",
        )
    # Every test passed, yet the report was not where CI expects it: not a green run.
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    result.stdout.fnmatch_lines(
        [
            "ERROR: could not write the graphleak JSON report to '*out/r.json' "
            "(FileNotFoundError: No such file or directory); saved it to '*r.json' instead",
            "ERROR: could not write the graphleak HTML report to '*out/r.html'*instead",
        ]
    )
    fallback = Path(result.stdout.str().split("saved it to '")[1].split("'")[0])
    try:
        document = json.loads(fallback.read_text())
        jsonschema.validate(document, load_schema())
        assert [t["nodeid"] for t in document["tests"]] == ["test_gone.py::test_clean"]
    finally:
        fallback.unlink()
        for html in fallback.parent.glob("graphleak-*-r.html"):
            html.unlink()


def _run_fake_suite(pytester: pytest.Pytester, *args: str) -> tuple[object, str, str, str]:
    out = pytester.path / "out"
    out.mkdir(exist_ok=True)
    result = pytester.runpytest_subprocess(
        *BASE_ARGS, "-v", "--graphleak-report=out/r.json", "--graphleak-html=out/r.html", *args
    )
    summary = "\n".join(report_section(result.outlines))
    # The environment block names this run (time, command, duration): not compared.
    html = re.sub(r'<details class="env">.*?</details>', "", (out / "r.html").read_text())
    return result.parseoutcomes(), summary, (out / "r.json").read_text(), html


def test_xdist_gives_the_same_reports_as_one_process(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    _fake_suite(pytester)
    alone = _run_fake_suite(pytester, "-p", "no:xdist")
    # Byte for byte with -n 2 here; tests/test_xdist.py runs the real plugin with -n 2.
    spread = _run_fake_suite(pytester, "-n", "2")
    assert spread[0] == alone[0], "outcomes differ"
    assert spread[1] == alone[1], "terminal summary differs"
    assert spread[2] == alone[2], "JSON report differs"
    assert spread[3] == alone[3], "HTML report differs"
    # Results are popped off the reports on the controller and, once sent, on each worker.
    kept = {path.name: json.loads(path.read_text()) for path in pytester.path.glob("kept-*")}
    assert sorted(kept) == ["kept-gw0.json", "kept-gw1.json", "kept-main.json"]
    assert all(k["kept"] == [] for k in kept.values()), kept
    assert kept["kept-gw0.json"]["rows"] == 0  # workers keep nothing


def test_xdist_worker_crash_is_noted(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(
        test_crash="""
        import os

        def test_clean():
            pass

        def test_oom():
            os._exit(1)  # as when a leak exhausts a worker's memory
        """
    )
    pytester.mkdir("out")
    result = pytester.runpytest_subprocess(
        *BASE_ARGS, "-n", "1", "--max-worker-restart=0", "--graphleak-report=out/r.json"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["note: a pytest-xdist worker crashed while running test_crash.py::test_oom*"]
    )
    document = json.loads((pytester.path / "out/r.json").read_text())
    assert any("test_crash.py::test_oom" in note for note in document["notes"])
    assert [t["nodeid"] for t in document["tests"]] == ["test_crash.py::test_clean"]


# ---------------------------------------------------------------- rows kept as text


def test_rows_keep_exact_values_and_the_last_attempt(pytester: pytest.Pytester) -> None:
    """A rerun's last attempt counts; NaN and ints come back as they were recorded."""
    reporter = session_report.GraphleakSessionReport(pytester.parseconfig(), Settings())

    def report(
        nodeid: str, first: float, outcome: Literal["passed", "failed"] = "passed"
    ) -> pytest.TestReport:
        check = CheckResult(
            name=nodeid,
            steps=2,
            warmup=1,
            series={"minigrad.tensors": [first, float("nan"), 3]},
            units={"minigrad.tensors": "objects"},
            verdict=Verdict(False, reason="r"),
        ).to_dict()
        made = pytest.TestReport(nodeid, ("t.py", 1, nodeid), {}, outcome, None, "call")
        made.graphleak = [check]  # type: ignore[attr-defined]
        return made

    for made in (report("t.py::b", 1.0), report("t.py::a", 1.0, "failed"), report("t.py::b", 2.0)):
        hook = reporter.pytest_runtest_logreport(made)
        next(hook)
        with contextlib.suppress(StopIteration):
            next(hook)
        assert not hasattr(made, "graphleak")  # popped off pytest's report
    rows = reporter.rows()
    assert [(t.nodeid, t.outcome) for t in rows] == [("t.py::a", "failed"), ("t.py::b", "passed")]
    series = rows[1].checks[0]["series"]["minigrad.tensors"]
    assert series[0] == 2.0 and math.isnan(series[1]) and series[2] == 3
    assert type(series[2]) is int

"""Findings of wider-scope fixtures (issue 43 items 3 and 4, issue 42 minor_text (a) and
(d)): a graph a module or class fixture keeps is that fixture's finding, in a row named
for it that lists the tests that requested it; it is never put on a test that did not
request the fixture (in fail mode the session fails instead), and a mock's records are
told in the user's words. In a subprocess each: numpy loads once per process.
"""

from __future__ import annotations

import json

import pytest
from suite_helpers import folded, report_section

pytest_plugins = ["pytester"]

MOCK_SUITE = """
from unittest import mock

import pytest
import minigrad as mg

model = mg.nn.Linear(2, 1)


@pytest.fixture(scope="module")
def dummy_callback():
    return mock.Mock()


def run_epoch(callback):
    for _ in range(3):
        y_pred = model(mg.Tensor([[1.0, 2.0]]))
        callback.on_batch_end(y_pred)


class TestTrainer:
    def test_fit(self, dummy_callback):
        run_epoch(dummy_callback)

    def test_called(self, dummy_callback):
        run_epoch(dummy_callback)
        assert dummy_callback.on_batch_end.called


class TestOther:
    def test_last(self):  # the module's last test: it never used the fixture
        pass
"""

STORY = (
    "the mock `dummy_callback` records every call's arguments, so the graph-carrying "
    "`y_pred` passed to `on_batch_end` stays alive as long as the fixture"
)
FIX = (
    "call dummy_callback.reset_mock() once the test has read its calls, make "
    "fixture 'dummy_callback' function-scoped, or pass y_pred.detach() (or "
    "y_pred.item()) in the code that calls the mock"
)
ROW = "fixture 'dummy_callback' (module scope) of test_cb.py"
REQUESTED = (
    "requested by: test_cb.py::TestTrainer::test_fit and test_cb.py::TestTrainer::test_called"
)


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.delenv("CI", raising=False)


def _named(text: str, module: str) -> str:
    return text.replace("test_cb.py", f"{module}.py")


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    flags = ("--graphleak", "-p", "no:randomly", "-p", "no:cacheprovider")
    return pytester.runpytest_subprocess(*flags, *args)


def test_a_module_mock_fixture_is_not_charged_to_a_test_that_never_used_it(
    pytester: pytest.Pytester,
) -> None:
    """Issue 43 items 3 and 4: the mock's records keep every call's graph until the module
    ends, in the teardown of a test of another class. The finding is the fixture's, on a
    row named for it, told as what the mock records, with a fix the user controls."""
    pytester.makepyfile(test_cb=MOCK_SUITE)
    result = _run(pytester, "--graphleak-report=r.json")
    result.assert_outcomes(passed=3)  # no warning put on test_last
    out = folded(result.stdout.str())
    assert "test_last" not in out.split("= graphleak: fixture findings, on no test =")[0]
    assert "= graphleak: fixture findings, on no test =" in out
    for told in (
        f"graphleak: {ROW} kept autograd graphs alive after its teardown (outlive)",
        REQUESTED,
        STORY,
        FIX,
    ):
        assert told in out, told
    assert "dummy_callback._mock" not in out.split("held by:")[-1].split("created at:")[-1]
    section = report_section(result.outlines)
    assert any(line.startswith(f"WARNING {ROW}") for line in section), section
    assert (
        "made during: test_cb.py::TestTrainer::test_fit and "
        "test_cb.py::TestTrainer::test_called; requested by:"
    ) in folded("\n".join(section))
    assert not any("test_last" in line for line in section), section
    # the row is counted as the fixture's, not as a test's
    assert (
        "graphleak: 1 fixture with results: 1 warned; 3 audited for graphs that outlive them"
    ) in out
    document = json.loads((pytester.path / "r.json").read_text())
    assert document["summary"]["fixtures"] == 1
    tests = document["tests"]
    assert [t["nodeid"] for t in tests] == [ROW]
    judged = tests[0]["checks"][0]["judged_at"]
    assert judged["charged_to"] == "" and judged["requested_by"] == [
        "test_cb.py::TestTrainer::test_fit",
        "test_cb.py::TestTrainer::test_called",
    ]
    source = (pytester.path / "test_cb.py").read_text().splitlines()
    assert source[judged["line"] - 1 : judged["line"] + 1] == [  # the fixture's definition
        '@pytest.fixture(scope="module")',
        "def dummy_callback():",
    ]
    assert judged["file"].endswith("test_cb.py")


def test_in_fail_mode_it_fails_the_session_not_the_passing_test(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_cbf=MOCK_SUITE)
    result = _run(pytester, "--graphleak-outlive=fail")
    result.assert_outcomes(passed=3, errors=0)
    assert result.ret == 1
    out = folded(result.stdout.str())
    assert "= graphleak: fixture findings that failed the session =" in out
    assert _named(REQUESTED, "test_cbf") in out and STORY in out
    assert any(
        line.startswith(f"LEAKED  {_named(ROW, 'test_cbf')}")
        for line in report_section(result.outlines)
    )


def test_the_last_test_that_requested_the_fixture_carries_it(
    pytester: pytest.Pytester,
) -> None:
    """Torn down in the teardown of a test that requested it: that test's finding, on the
    fixture's check (an ERROR of that test in fail mode)."""
    pytester.makepyfile(test_cbl=MOCK_SUITE.split("\n\nclass TestOther")[0])
    result = _run(pytester, "--graphleak-outlive=fail")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            f"graphleak: {_named(ROW, 'test_cbl')} kept autograd graphs alive after its teardown "
            "(outlive)",
            "ERROR test_cbl.py::TestTrainer::test_called - *",
        ]
    )


ARCHIVE = """
import pytest
import minigrad as mg

ARCHIVE = []


@pytest.fixture(scope="class")
def store():
    s = []
    yield s
    ARCHIVE.extend(s)


def loss():
    return (mg.Tensor([1.0, 2.0], requires_grad=True) * 2).sum()


class TestArchive:
    def test_a(self, store):
        store.append(loss())

    def test_b(self, store):
        store.append(loss())
"""


def test_a_class_fixtures_finding_has_a_row_of_its_own_named_for_it(
    pytester: pytest.Pytester,
) -> None:
    """minor_text (a): two identical report rows for two findings. Both tests' graphs
    are the class fixture's: one finding, named for the fixture, made during both."""
    pytester.makepyfile(test_arch_rows=ARCHIVE)
    result = _run(pytester)
    section = report_section(result.outlines)
    heads = [line for line in section if line.startswith("WARNING")]
    assert len(heads) == len(set(heads)) == 1, section
    assert "fixture 'store' (class scope) of test_arch_rows.py::TestArchive" in heads[0]
    out = folded(result.stdout.str())
    assert (
        "made during test_arch_rows.py::TestArchive::test_a and "
        "test_arch_rows.py::TestArchive::test_b, still alive at the teardown of fixture "
        "'store' (class scope)"
    ) in out
    assert "TestArchive::test_b left autograd graphs" not in out
    # the row lists the tests that made the graphs and those that requested the fixture
    assert (
        "made during: test_arch_rows.py::TestArchive::test_a and "
        "test_arch_rows.py::TestArchive::test_b; requested by: "
        "test_arch_rows.py::TestArchive::test_a and test_arch_rows.py::TestArchive::test_b"
    ) in folded("\n".join(section))


NOTICE = """
import pytest
import minigrad as mg

LATER = []


@pytest.fixture(scope="module")
def store():
    s = []
    yield s
    LATER.extend(s)


def test_fill(store):
    store.append((mg.Tensor([1.0], requires_grad=True) * 2).sum())


def test_innocent():
    pass
"""


def test_a_module_fixtures_annotation_is_not_put_on_an_innocent_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """minor_text (d): the annotation goes to the line that made the graph (or the
    fixture's definition), never to ``def test_innocent``."""
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.setenv("GITHUB_WORKSPACE", str(pytester.path))
    pytester.makepyfile(test_notice=NOTICE)
    result = _run(pytester)
    commands = [line for line in result.outlines if line.startswith("::warning")]
    assert len(commands) == 1, result.outlines
    source = (pytester.path / "test_notice.py").read_text().splitlines()
    made = 1 + next(i for i, line in enumerate(source) if "store.append(" in line)
    assert source[made] != "def test_innocent():"
    assert commands[0].startswith(f"::warning file=test_notice.py,line={made},"), commands
    assert "test: fixture 'store' (module scope) of test_notice.py" in commands[0]


def test_without_a_known_line_the_annotation_goes_to_the_fixture() -> None:
    from pytest_graphleak.report.github_rows import report_rows
    from pytest_graphleak.report.model import Report, TestRow
    from pytest_graphleak.result import CheckResult, Diagnosis, JudgedAt, Verdict

    at = JudgedAt(
        "store",
        "module",
        "test_m.py",
        label="fixture 'store' (module scope)",
        requested_by=("test_m.py::test_fill",),
        file="/w/test_m.py",
        line=8,
    )
    check = CheckResult(
        at.row,
        0,
        0,
        {},
        {},
        Verdict(leaked=True, pattern="list-accumulation"),
        Diagnosis("list-accumulation"),
        kind="outlive",
        warned=True,
        judged_at=at,
    )
    report = Report(tests=(TestRow(at.row, "passed", (check,)),))
    row = report_rows(report, {at.row: ("/w/test_m.py", 20)})[0]
    assert (row.file, row.line, row.level) == ("/w/test_m.py", 8, "warning")


def test_the_count_line_tells_fixture_rows_from_tests() -> None:
    from pytest_graphleak.report.summary import counts, sentence

    told = sentence(counts(["leaked", "warned", "warned"], audited=5, fixtures=1))
    assert told == (
        "2 tests and 1 fixture with results: 1 leaked, 2 warned; 5 audited for "
        "graphs that outlive them"
    )
    assert "fixtures" not in counts(["warned"], audited=1)  # absent when there are none

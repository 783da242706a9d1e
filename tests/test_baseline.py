"""The baseline file (issue 36): findings listed in ``--graphleak-baseline=FILE`` are
known and fail nothing, new ones fail, listed ones no longer found are "fixed since the
baseline"; ``--graphleak-baseline-update`` writes the file.

The acceptance suite has 20 tests and 5 findings (3 marked leaks, 2 outlive findings),
minigrad only, so the runs are in-process (cheap) but the one under pytest-xdist.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from suite_helpers import JsonDoc

import minigrad  # noqa: F401  # imported once here: in-process runs drop what they import
from pytest_graphleak import baseline, baseline_keys
from pytest_graphleak.baseline import BaselineError, Entry
from pytest_graphleak.baseline_keys import Key
from pytest_graphleak.report.json_doc import load_schema

pytest_plugins = ["pytester"]

# -- the suite: 5 findings in 20 tests ------------------------------------------------------
HEAD = """
import pytest
import minigrad as mg

history = []
cache = {}
kept = []
holder = {}
fresh = []


class State:
    total = None


state = State()


@pytest.fixture(scope="session")
def model():
    return mg.nn.Linear(3, 1)


def _loss(model):
    return (model(mg.Tensor([[1.0, 2.0, 3.0]])) ** 2).mean()
"""

TESTS = {
    "marked_list": """
@pytest.mark.no_graph_growth(steps=8)
def test_marked_list(model):
    history.append(_loss(model))
""",
    "marked_dict": """
@pytest.mark.no_graph_growth(steps=8)
def test_marked_dict(model):
    cache[len(cache)] = _loss(model)
""",
    "marked_total": """
@pytest.mark.no_graph_growth(steps=8)
def test_marked_total(model):
    loss = _loss(model)
    state.total = loss if state.total is None else state.total + loss
""",
    "outlive_list": """
def test_outlive_list(model):
    kept.append(_loss(model))
""",
    "outlive_dict": """
def test_outlive_dict(model):
    holder["x"] = [_loss(model)]
""",
    "clean_marked": """
@pytest.mark.no_graph_growth(steps=8)
def test_clean_marked(model):
    _loss(model).backward()
""",
    "clean_many": """
@pytest.mark.parametrize("n", range(14))
def test_clean(model, n):
    assert _loss(model).item() >= 0
""",
}
FIXED_OUTLIVE = """
def test_outlive_list(model):
    kept.append(_loss(model).item())
"""
NEW_LEAK = """
@pytest.mark.no_graph_growth(steps=8)
def test_new_leak(model):
    fresh.append(_loss(model))
"""
FINDINGS = {
    "test_marked_list",
    "test_marked_dict",
    "test_marked_total",
    "test_outlive_list",
    "test_outlive_dict",
}


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """The count lines whole: the terminal wraps lines at its width (80 in a pytester run)."""
    monkeypatch.setenv("COLUMNS", "250")


def _suite(
    pytester: pytest.Pytester,
    *,
    order: list[str] | None = None,
    above: int = 0,
    replace: dict[str, str] | None = None,
    extra: str = "",
) -> None:
    """The suite's file: its tests in ``order``, ``above`` comment lines first (every
    finding's line moves), some tests replaced, one added."""
    tests = {**TESTS, **(replace or {})}
    body = "".join(tests[name] for name in order or list(TESTS))
    pytester.makepyfile(test_suite="# moved\n" * above + HEAD + body + extra)


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(
        "--graphleak",
        "-p",
        "no:randomly",
        "--graphleak-baseline=bl.json",
        "--graphleak-report=r.json",
        *args,
    )


def _document(pytester: pytest.Pytester) -> JsonDoc:
    document: JsonDoc = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    jsonschema.validate(document, load_schema())
    return document


def _statuses(document: JsonDoc) -> dict[str, str]:
    return {t["nodeid"].split("::")[-1]: t["status"] for t in document["tests"]}


#: The baseline file the first run wrote, kept for the worker's other tests: the file
#: holds no path of the run's folder, and writing it costs a whole run of the suite.
_FIRST_RUN: dict[str, str] = {}


@pytest.fixture
def written(pytester: pytest.Pytester) -> Path:
    """The suite with its baseline written by a first run (run once per worker, then
    copied into each test's folder)."""
    _suite(pytester)
    path = pytester.path / "bl.json"
    if "bl.json" in _FIRST_RUN:
        path.write_text(_FIRST_RUN["bl.json"], encoding="utf-8")
        return path
    result = _run(pytester, "--graphleak-baseline-update")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["*graphleak baseline: wrote 5 findings to *bl.json (5 added, 0 removed as fixed)*"]
    )
    assert str(pytester.path) not in path.read_text(encoding="utf-8")
    _FIRST_RUN["bl.json"] = path.read_text(encoding="utf-8")
    return path


def test_the_first_run_writes_the_file_and_the_next_run_passes_with_5_known(
    pytester: pytest.Pytester, written: Path
) -> None:
    entries = json.loads(written.read_text(encoding="utf-8"))["findings"]
    assert [e["test"].split("::")[1] for e in entries] == sorted(FINDINGS)  # sorted by key
    assert all(set(e) == set(baseline.FIELDS) and e["reason"] == "" for e in entries)
    by_test = {e["test"].split("::")[1]: e for e in entries}
    assert by_test["test_marked_dict"]["holder"] == ("global 'cache' -> dict[*] -> Tensor")
    assert by_test["test_outlive_list"]["check"] == "outlive"
    assert by_test["test_marked_list"]["check"] == "marker"

    result = _run(pytester, "--junitxml=j.xml", "--graphleak-html=r.html")
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=20)
    result.stdout.fnmatch_lines(
        [
            "graphleak: 6 tests with results: 5 known, 1 clean; "
            "20 audited for graphs that outlive them"
        ]
    )
    result.stdout.no_fnmatch_line("*fixed since the baseline*")
    result.stdout.no_fnmatch_line("*GraphOutliveWarning*")
    document = _document(pytester)
    assert document["summary"]["known"] == 5
    assert document["summary"]["fixed"] == 0
    assert {n for n, s in _statuses(document).items() if s == "known"} == FINDINGS
    assert document["baseline"]["entries"] == 5
    junit = (pytester.path / "j.xml").read_text(encoding="utf-8")
    assert junit.count('name="graphleak.status" value="known"') == 5
    page = (pytester.path / "r.html").read_text(encoding="utf-8")
    assert page.count('<span class="badge known">KNOWN</span>') >= 5
    assert '<label for="show-known"><i class="dot known"></i>known (5)' in page  # the chip
    assert "5 known" in page


def test_a_new_leak_fails_naming_only_that_leak(pytester: pytest.Pytester, written: Path) -> None:
    _suite(pytester, extra=NEW_LEAK)
    result = _run(pytester, "--graphleak-outlive=fail")
    assert result.ret == 1
    result.assert_outcomes(passed=20, failed=1)
    result.stdout.fnmatch_lines(["LEAKED test_suite.py::test_new_leak - list-accumulation*"])
    short = result.outlines[
        result.outlines.index(
            next(line for line in result.outlines if "short test summary info" in line)
        ) :
    ]
    failures = [line for line in short if line.startswith(("FAILED", "LEAKED", "ERROR"))]
    assert len(failures) == 1, failures
    result.stdout.fnmatch_lines(["graphleak: 7 tests with results: 1 leaked, 5 known, 1 clean;*"])
    assert _statuses(_document(pytester))["test_new_leak"] == "leaked"


OTHER_HOLDER = """
@pytest.mark.no_graph_growth(steps=8)
def test_marked_list(model):
    fresh.append(_loss(model))
"""


def test_the_same_test_leaking_through_another_holder_is_new(
    pytester: pytest.Pytester, written: Path
) -> None:
    _suite(pytester, replace={"marked_list": OTHER_HOLDER})
    result = _run(pytester)
    assert result.ret == 1
    result.assert_outcomes(passed=19, failed=1)
    result.stdout.fnmatch_lines(
        [
            "graphleak: 6 tests with results: 1 leaked, 4 known, 1 clean, 1 fixed since the "
            "baseline;*",
            "  test_suite.py::test_marked_list ?marker? list-accumulation, held by global "
            "'history'*",
            "LEAKED test_suite.py::test_marked_list - list-accumulation*",
        ]
    )


def test_a_fixed_finding_is_listed_with_the_command_that_updates_the_file(
    pytester: pytest.Pytester, written: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    step_summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    _suite(pytester, replace={"outlive_list": FIXED_OUTLIVE})
    result = _run(pytester)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "graphleak: 5 tests with results: 4 known, 1 clean, 1 fixed since the baseline;*",
            "fixed since the baseline (1, listed in *bl.json):",
            "  test_suite.py::test_outlive_list [outlive] list-accumulation, held by global "
            "'kept' -> list[*] -> Tensor",
            "update the baseline file with:",
            "  pytest --graphleak -p no:randomly --graphleak-baseline=bl.json * "
            "--graphleak-baseline-update",
        ]
    )
    fixed = _document(pytester)["baseline"]["fixed"]
    assert [entry["test"] for entry in fixed] == ["test_suite.py::test_outlive_list"]
    table = step_summary.read_text(encoding="utf-8")
    assert "4 known, 1 clean, 1 fixed since the baseline" in table
    assert "#### Fixed since the baseline (1)\n\n- `test_suite.py::test_outlive_list`" in table
    assert "Update the baseline file: `pytest --graphleak" in table
    monkeypatch.delenv("GITHUB_ACTIONS")

    # The update removes it and keeps the reasons of the others.
    entries = json.loads(written.read_text(encoding="utf-8"))
    for entry in entries["findings"]:
        entry["reason"] = f"kept: {entry['test']}"
    written.write_text(json.dumps(entries), encoding="utf-8")
    result = _run(pytester, "--graphleak-baseline-update")
    result.stdout.fnmatch_lines(["*wrote 4 findings to *bl.json (0 added, 1 removed as fixed)"])
    after = json.loads(written.read_text(encoding="utf-8"))["findings"]
    assert len(after) == 4
    assert all(e["reason"] == f"kept: {e['test']}" for e in after)


def test_reordered_tests_and_moved_lines_change_nothing(
    pytester: pytest.Pytester, written: Path
) -> None:
    _suite(pytester, order=list(reversed(TESTS)), above=7)
    result = _run(pytester, "--graphleak-outlive=fail")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["graphleak: 6 tests with results: 5 known, 1 clean;*"])
    result.stdout.no_fnmatch_line("*fixed since*")


def test_under_xdist_the_controller_matches_the_same(
    pytester: pytest.Pytester, written: Path
) -> None:
    pytest.importorskip("xdist")
    _suite(pytester, extra=NEW_LEAK)
    result = pytester.runpytest_subprocess(
        "--graphleak",
        "-p",
        "no:randomly",
        "--graphleak-baseline=bl.json",
        "-n",
        "2",
        "--graphleak-report=r.json",
        "--graphleak-outlive=fail",
    )
    assert result.ret == 1
    result.assert_outcomes(passed=20, failed=1)
    result.stdout.fnmatch_lines(["graphleak: 7 tests with results: 1 leaked, 5 known, 1 clean;*"])
    statuses = _statuses(_document(pytester))
    assert {n for n, s in statuses.items() if s == "known"} == FINDINGS
    assert statuses["test_new_leak"] == "leaked"


def test_warn_only_and_github_known_findings_get_a_notice_at_most(
    pytester: pytest.Pytester, written: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.setenv("GITHUB_WORKSPACE", str(pytester.path))
    _suite(pytester, extra=NEW_LEAK)
    result = _run(pytester, "--graphleak-warn-only")
    assert result.ret == 0
    errors = [line for line in result.outlines if line.startswith("::error")]
    assert errors == []
    warnings = [line for line in result.outlines if line.startswith("::warning")]
    assert len(warnings) == 1 and "test_new_leak" in warnings[0]
    assert sum(line.startswith("::notice") for line in result.outlines) == 5
    table = summary.read_text(encoding="utf-8")
    assert "1 warned, 5 known, 1 clean" in table
    known = table.split("5 known findings (listed in bl.json: they fail nothing)</summary>")[1]
    assert known.split("</details>")[0].count("known, in bl.json: ") == 5  # folded, each


LOOP_SUITE = """
import minigrad as mg

def test_loop(graphleak):
    losses = []
    with graphleak.track(steps=8, warmup=2) as t:
        for _ in range(14):
            losses.append((mg.Tensor([1.0], requires_grad=True) * 2).sum())
            t.step()
"""


def test_a_loop_leak_is_known_too(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_loop_known=LOOP_SUITE)
    assert _run(pytester).ret == pytest.ExitCode.USAGE_ERROR  # no file yet: write it first
    assert _run(pytester, "--graphleak-baseline-update").ret == 0
    (entry,) = json.loads((pytester.path / "bl.json").read_text(encoding="utf-8"))["findings"]
    assert (entry["check"], entry["holder"]) == ("track(1)", "local 'losses' -> list[*] -> Tensor")
    result = _run(pytester)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["graphleak: 1 test with results: 1 known;*"])
    result.stdout.no_fnmatch_line("*GraphLeakWarning*")


RANKS_SUITE = """
from pytest_graphleak import distributed
from pytest_graphleak.distributed.results import DistributedResult, RankResult
from pytest_graphleak.result import CheckResult, Diagnosis, Verdict


def fake_ranks(factory, *, on_result, name, world_size, **group):
    # what the spawned ranks would report: rank 0 leaks through a list, rank 1 is clean
    chain = ["global 'history'", "list(len=9)", "Tensor(shape=(), grad_fn=MeanBackward)"]
    leak = CheckResult(f"{name} [rank 0/2]", 8, 3, {}, {},
                       Verdict(True, [], "list-accumulation", "grew"),
                       Diagnosis("list-accumulation", chain=chain))
    on_result(leak)
    return DistributedResult(name, world_size, [RankResult(0, leak), RankResult(1)])


def test_ranks(graphleak, monkeypatch):
    monkeypatch.setattr(distributed, "check_distributed", fake_ranks)
    graphleak.check_distributed("steps:make_step", world_size=2)
"""


def test_a_distributed_leak_is_known_too(pytester: pytest.Pytester) -> None:
    """The ranks are faked (spawning torch.distributed ranks is the distributed tests'
    cost): what matters here is that a known rank's leak fails nothing."""
    pytester.makepyfile(test_ranks=RANKS_SUITE)
    assert _run(pytester, "--graphleak-baseline-update").ret == 0
    (entry,) = json.loads((pytester.path / "bl.json").read_text(encoding="utf-8"))["findings"]
    assert entry["check"] == "check_distributed(steps:make_step) [rank 0/2]"
    assert _run(pytester).ret == 0
    (pytester.path / "bl.json").write_text(baseline.render([]), encoding="utf-8")
    failed = _run(pytester)
    assert failed.ret == 1
    failed.stdout.fnmatch_lines(["*rank 0*list-accumulation*"])


# -- version 1 files: keyed on the printed chain ---------------------------------------------
#: The suite's file as version 1 wrote it (holders normalised from the printed chain).
VERSION_1 = {
    "test_marked_dict": ("marker", "global 'cache' -> dict[*] -> Tensor(grad_fn=MeanBackward)"),
    "test_marked_list": ("marker", "global 'history' -> list -> Tensor(grad_fn=MeanBackward)"),
    "test_marked_total": ("marker", "global 'state' -> State.total -> Tensor(grad_fn=AddBackward)"),
    "test_outlive_dict": (
        "outlive",
        "global 'test_suite.holder' -> dict['x'] -> list -> Tensor(grad_fn=MeanBackward)",
    ),
    "test_outlive_list": (
        "outlive",
        "global 'test_suite.kept' -> list -> Tensor(grad_fn=MeanBackward)",
    ),
}


def _version_1(path: Path) -> None:
    patterns = {"test_marked_total": "retained-grad-fn"}
    findings = [
        {
            "test": f"test_suite.py::{name}",
            "check": check,
            "pattern": patterns.get(name, "list-accumulation"),
            "holder": holder,
            "reason": f"ticket {name}",
        }
        for name, (check, holder) in VERSION_1.items()
    ]
    path.write_text(json.dumps({"graphleak_baseline": 1, "findings": findings}), encoding="utf-8")


def test_a_version_1_file_is_refused_then_rewritten_by_the_update(
    pytester: pytest.Pytester,
) -> None:
    _suite(pytester)
    path = pytester.path / "bl.json"
    _version_1(path)
    refused = _run(pytester)
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(
        [
            "*bl.json' has version 1, whose holders were the printed "
            "chain; *--graphleak-baseline-update over the whole suite*"
        ]
    )
    rewritten = _run(pytester, "--graphleak-baseline-update")
    assert rewritten.ret == 0, rewritten.stdout.str()
    rewritten.stdout.fnmatch_lines(
        ["graphleak baseline: rewrote *bl.json from version 1 to 2: 5 findings, 5 reasons kept"]
    )
    document = json.loads(path.read_text(encoding="utf-8"))
    assert document["graphleak_baseline"] == 2
    assert {e["test"].split("::")[1]: e["reason"] for e in document["findings"]} == {
        name: f"ticket {name}" for name in VERSION_1
    }
    assert {e["holder"] for e in document["findings"]} >= {"global 'cache' -> dict[*] -> Tensor"}
    again = _run(pytester)
    assert again.ret == 0, again.stdout.str()
    again.stdout.fnmatch_lines(["graphleak: 6 tests with results: 5 known, 1 clean;*"])


def test_a_rewrite_keeps_a_reason_only_where_one_finding_matches() -> None:
    old = baseline.Baseline(Path("bl.json"), version=1)
    a1, a2 = (Key("t.py::a", "marker", "cycle", h) for h in ("x -> list", "y -> list"))
    b, c = Key("t.py::b", "marker", "cycle", "z"), Key("t.py::c", "marker", "cycle", "w")
    for key in (a1, a2, b, c):
        old.entries[key] = Entry(key, f"why {key.holder}")
    new_a, new_b = Key("t.py::a", "marker", "cycle", "x2"), Key("t.py::b", "marker", "cycle", "z2")
    update = baseline.updated(old, [new_a, new_b], checked=lambda key: key.test != "t.py::c")
    assert [(e.key, e.reason) for e in update.entries] == [(new_a, ""), (new_b, "why z")]
    assert (update.rewritten_from, update.reasons_kept, update.dropped) == (1, 1, 1)


# -- the file: reading errors, writing safety -----------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{not json", "is not JSON"),
        ('{"findings": []}', "is not a graphleak baseline"),
        ('{"graphleak_baseline": 3, "findings": []}', "has version 3; this pytest-graphleak"),
        (
            '{"graphleak_baseline": 1, "findings": []}',
            "has version 1, whose holders were the printed chain; this pytest-graphleak keys "
            "findings on the typed chain (version 2): rewrite it once with "
            "--graphleak-baseline-update",
        ),
        (
            '{"graphleak_baseline": 2, "findings": [{"test": "t.py::a"}]}',
            "entry 1 lacks 'check', 'pattern', 'holder'",
        ),
        (
            '{"graphleak_baseline": 2, "findings": ['
            '{"test": "t.py::a", "check": "marker", "pattern": "cycle", "holder": "", "reason": '
            '""},'
            '{"test": "t.py::b", "check": "marker", "pattern": "cycle", "holder": ""},'
            '{"test": "t.py::a", "check": "marker", "pattern": "cycle", "holder": "", "reason": '
            '"x"}'
            "]}",
            "entry 3 repeats entry 1: t.py::a [marker] cycle",
        ),
    ],
)
def test_a_bad_file_names_the_file_and_the_entry(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "bl.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(BaselineError, match=r"bl\.json") as caught:
        baseline.load(path)
    assert expected in str(caught.value)


def test_a_bad_file_is_a_usage_error_before_the_suite_runs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    pytester.path.joinpath("bl.json").write_text('{"graphleak_baseline": 7}', encoding="utf-8")
    result = pytester.runpytest("--graphleak", "--graphleak-baseline=bl.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*graphleak: the baseline file '*bl.json' has version 7; *"
            "(from command line option --graphleak-baseline)"
        ]
    )
    missing = pytester.runpytest("--graphleak", "--graphleak-baseline=none.json")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["*cannot read the baseline file '*none.json'*"])


def test_the_update_never_replaces_a_file_that_is_not_a_baseline(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    other = pytester.path / "conftest_data.json"
    other.write_text('{"mine": true}', encoding="utf-8")
    result = pytester.runpytest(
        "--graphleak", "--graphleak-baseline=conftest_data.json", "--graphleak-baseline-update"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*will not replace '*conftest_data.json': it is not a graphleak baseline file*"]
    )
    assert other.read_text(encoding="utf-8") == '{"mine": true}'
    nowhere = pytester.runpytest(
        "--graphleak", "--graphleak-baseline=no/bl.json", "--graphleak-baseline-update"
    )
    assert nowhere.ret == pytest.ExitCode.USAGE_ERROR
    nowhere.stderr.fnmatch_lines(["*cannot write '*bl.json': its directory does not exist*"])
    alone = pytester.runpytest("--graphleak", "--graphleak-baseline-update")
    assert alone.ret == pytest.ExitCode.USAGE_ERROR
    alone.stderr.fnmatch_lines(
        ["*--graphleak-baseline-update writes the file that --graphleak-baseline=FILE names*"]
    )


def test_the_ini_key_names_the_file_relative_to_the_ini_file(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ngraphleak_baseline = ci/bl.json\n")
    pytester.mkdir("ci")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("--graphleak", "--graphleak-baseline-update")
    assert result.ret == 0, result.stdout.str()
    assert baseline.load(pytester.path / "ci" / "bl.json").entries == {}


# -- keys ---------------------------------------------------------------------------------
def _link(kind: str, type_: str, edge: str = "", key: str = "", **more: object) -> JsonDoc:
    return {"kind": kind, "type": type_, "edge": edge, "key": key, **more}


def _check(name: str, links: list[JsonDoc], pattern: str = "list-accumulation") -> JsonDoc:
    """``key_of``'s keywords for a leaked check: its name, pattern and typed links."""
    return {"name": name, "pattern": pattern, "links": links}


def _losses(length: int, shape: list[int], nodes: int) -> list[JsonDoc]:
    """``fixture 'state' -> dict['losses'] -> list(len=...) -> Tensor -> nodes``."""
    return [
        {"kind": "root", "type": "fixture", "name": "state"},
        _link("container", "dict", "key", "'losses'", base="dict", length=1),
        _link("container", "list", "index", str(length - 1), base="list", length=length),
        _link("tensor", "Tensor", "graph", shape=shape, graph=True),
        *[_link("node", "AddBackward0", "graph", "0") for _ in range(nodes)],
    ]


def test_keys_leave_out_what_a_run_changes() -> None:
    first = baseline_keys.key_of("t.py::test_a", **_check("t.py::test_a", _losses(12, [3, 4], 9)))
    later = baseline_keys.key_of("t.py::test_a", **_check("t.py::test_a", _losses(40, [8, 4], 1)))
    assert first == later
    assert first.holder == "fixture 'state' -> dict[*] -> list[*] -> Tensor"
    dict_of_steps = [
        {"kind": "root", "type": "global", "name": "cache"},
        _link("container", "dict", "key", "21", length=22),
        _link("tensor", "Tensor"),
    ]
    assert baseline_keys.holder_path(dict_of_steps) == "global 'cache' -> dict[*] -> Tensor"
    itself = [
        {"kind": "root", "type": "self", "name": "self"},
        _link("object", "Model", "attribute", "total"),
        _link("tensor", "Tensor"),
    ]
    assert baseline_keys.holder_path(itself) == "self -> Model.total -> Tensor"
    assert baseline_keys.holder_path([]) == ""


def test_another_holder_or_check_is_another_finding() -> None:
    name = "t.py::test_a"

    def held_by(root: str, edge: str = "index") -> list[JsonDoc]:
        return [
            {"kind": "root", "type": "global", "name": root},
            _link("container", "list", edge, "2"),
            _link("tensor", "Tensor"),
        ]

    one = baseline_keys.key_of(name, **_check(name, held_by("history")))
    assert one != baseline_keys.key_of(name, **_check(name, held_by("others")))
    assert one != baseline_keys.key_of(name, **_check(name, held_by("history", "attribute")))
    tracked = baseline_keys.key_of(name, **_check(f"{name}::track(1) steps 5-12", held_by("xs")))
    assert tracked.check == "track(1)"
    assert baseline_keys.key_of(name, **_check(f"{name}::outlive", [])).check == "outlive"


def test_render_is_sorted_and_reads_back(tmp_path: Path) -> None:
    b = Entry(Key("t.py::b", "marker", "cycle", "global 'x'"), "waiting on #12")
    a = Entry(Key("t.py::a", "outlive", "list-accumulation", ""))
    text = baseline.render([b, a])
    assert text == baseline.render([a, b])
    assert text.index("t.py::a") < text.index("t.py::b")
    path = tmp_path / "bl.json"
    path.write_text(text, encoding="utf-8")
    assert baseline.load(path).entries == {a.key: a, b.key: b}


def test_an_update_keeps_entries_it_did_not_check() -> None:
    old = baseline.Baseline(Path("bl.json"))
    ran = Key("t.py::a", "marker", "cycle", "")
    gone = Key("t.py::b", "marker", "cycle", "")
    not_run = Key("t.py::c", "marker", "cycle", "")
    new = Key("t.py::d", "marker", "cycle", "")
    for key in (ran, gone, not_run):
        old.entries[key] = Entry(key, f"why {key.test}")
    update = baseline.updated(old, [ran, new], checked=lambda key: key.test != "t.py::c")
    assert [e.key for e in update.entries] == [ran, not_run, new]
    assert update.entries[0].reason == "why t.py::a"
    assert (update.added, update.removed, update.kept) == ([new], [gone], 2)

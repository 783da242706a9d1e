"""Baseline keys built from facts that do not change from run to run (round five):
a dict's key is ``[*]`` in the holder, whatever its type (``b_key_runvarying_string``:
a ``tmp_path``, a run name, ``f"run-{n}"``), and entries written before that still match.

In-process runs, minigrad only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from suite_helpers import folded

import minigrad  # noqa: F401  # imported once here: in-process runs drop what they import
from pytest_graphleak import baseline, baseline_keys
from pytest_graphleak.baseline import Entry
from pytest_graphleak.baseline_keys import Key

pytest_plugins = ["pytester"]

RUN_VARYING = """
import minigrad as mg

w = mg.Tensor([1.0, 2.0], requires_grad=True)
RESULTS = {}  # a module-level cache keyed by a run name


def test_cache_by_tmp_path(tmp_path):
    RESULTS[str(tmp_path / "ckpt")] = (w * 2.0).sum()


def test_cache_by_run_name():
    RESULTS[f"run-{len(RESULTS)}"] = (w * 3.0).sum()
"""
HOLDER = "global 'RESULTS' -> dict[*] -> Tensor"


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(
        "--graphleak",
        "-p",
        "no:randomly",
        "--graphleak-outlive=fail",
        "--graphleak-baseline=bl.json",
        *args,
    )


def _findings(pytester: pytest.Pytester) -> list[dict[str, str]]:
    document = json.loads((pytester.path / "bl.json").read_text(encoding="utf-8"))
    findings: list[dict[str, str]] = document["findings"]
    return findings


def test_a_key_that_changes_from_run_to_run_is_not_in_the_holder(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_runs=RUN_VARYING)
    assert _run(pytester, "--graphleak-baseline-update").ret == 0
    assert [e["holder"] for e in _findings(pytester)] == [HOLDER, HOLDER]
    again = _run(pytester)  # a new tmp_path, the same code
    assert again.ret == 0, again.stdout.str()
    again.stdout.fnmatch_lines(["graphleak: 2 tests with results: 2 known;*"])
    again.stdout.no_fnmatch_line("*fixed since the baseline*")
    subset = _run(pytester, "-k", "run_name")  # another counter: run-0, not run-1
    assert subset.ret == 0, subset.stdout.str()
    subset.stdout.no_fnmatch_line("*fixed since the baseline*")
    subset.stdout.fnmatch_lines(["graphleak: 1 test with results: 1 known;*"])


def test_an_entry_written_with_the_key_spelled_still_matches_and_is_respelled(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_runs=RUN_VARYING)
    old = [
        Entry(
            Key(
                "test_runs.py::test_cache_by_run_name",
                "outlive",
                "list-accumulation",
                "global 'RESULTS' -> dict['run-1'] -> Tensor",
            ),
            "the run cache",
        ),
        Entry(
            Key(
                "test_runs.py::test_cache_by_tmp_path",
                "outlive",
                "list-accumulation",
                "global 'RESULTS' -> dict['<pytest basetemp>/test_c...] -> Tensor",
            ),
            "",
        ),
    ]
    (pytester.path / "bl.json").write_text(baseline.render(old), encoding="utf-8")
    gate = _run(pytester)
    assert gate.ret == 0, gate.stdout.str()
    gate.stdout.fnmatch_lines(["graphleak: 2 tests with results: 2 known;*"])
    told = folded(gate.stdout.str())
    assert (
        "graphleak baseline: 2 entries of "
        f"{pytester.path / 'bl.json'} spell a dict's key "
        "in their holder (written before holders read every key as [*]: a key can change "
        "from run to run, a tmp_path, a run name); they were matched with [*] for the "
        "key; --graphleak-baseline-update writes them so"
    ) in told
    gate.stdout.no_fnmatch_line("*fixed since the baseline*")
    update = _run(pytester, "--graphleak-baseline-update")
    assert update.ret == 0
    assert "matched with [*] for the key; this update wrote them so" in folded(update.stdout.str())
    assert [(e["holder"], e["reason"]) for e in _findings(pytester)] == [
        (HOLDER, "the run cache"),
        (HOLDER, ""),
    ]
    quiet = _run(pytester)
    assert quiet.ret == 0
    quiet.stdout.no_fnmatch_line("*spell a dict's key*")


def test_entries_that_respelled_name_one_finding_are_merged(tmp_path: Path) -> None:
    path = tmp_path / "bl.json"
    keys = [
        Key("t.py::a", "marker", "list-accumulation", f"global 'C' -> dict[{k}] -> Tensor")
        for k in ("'a'", "'b'", "'c'")
    ]
    reasons = ["ticket 1", "ticket 2", "ticket 1"]
    path.write_text(
        baseline.render(Entry(k, r) for k, r in zip(keys, reasons, strict=True)), encoding="utf-8"
    )
    loaded = baseline.load(path)
    (key,) = loaded.entries
    assert key.holder == "global 'C' -> dict[*] -> Tensor"
    assert loaded.entries[key].reason == "ticket 1; ticket 2"
    assert (loaded.respelled, loaded.merged) == (3, 2)


@pytest.mark.parametrize(
    ("old", "now"),
    [
        ("global 'R' -> dict['run-1'] -> Tensor", "global 'R' -> dict[*] -> Tensor"),
        (
            "fixture 's' -> dict['a -> b'] -> OrderedDict[3] -> list[*] -> Tensor",
            "fixture 's' -> dict[*] -> OrderedDict[*] -> list[*] -> Tensor",
        ),
        (
            "self -> Model.cache -> dict[('x', 1)] -> Tensor",
            "self -> Model.cache -> dict[*] -> Tensor",
        ),
        (
            "global 'f' -> function.__defaults__[0] -> list[*] -> Tensor",
            "global 'f' -> function.__defaults__[0] -> list[*] -> Tensor",
        ),
        ("global 'h' -> list[*] -> Tensor", "global 'h' -> list[*] -> Tensor"),
        ("", ""),
    ],
)
def test_respelled_reads_each_dict_key_as_a_star(old: str, now: str) -> None:
    assert baseline_keys.respelled(old) == now


def test_a_string_key_is_a_star_in_a_new_key() -> None:
    links = [
        {"kind": "root", "type": "global", "name": "RESULTS"},
        {"kind": "container", "type": "dict", "edge": "key", "key": "'/tmp/pytest-7/x'"},
        {"kind": "tensor", "type": "Tensor", "edge": "graph"},
    ]
    assert baseline_keys.holder_path(links) == HOLDER


# -- stale entries: their test no longer exists (b_stale_entry_unnamed) ----------------------
TRAIN = """
import minigrad as mg

w = mg.Tensor([1.0, 2.0], requires_grad=True)
history = []
kept = []


def test_step():
    history.append((w * 2.0).sum())


def test_eval():
    kept.append((w * 3.0).sum())


def test_clean():
    assert (w * 2.0).sum().item() == 6.0
"""
STALE = (
    "test_train.py::test_eval [outlive] list-accumulation, held by global 'kept' -> "
    "list[*] -> Tensor"
)


def _deleted_eval(pytester: pytest.Pytester) -> None:
    """The suite with its baseline written, then ``test_eval`` (and its leak) deleted."""
    pytester.makepyfile(test_train=TRAIN)
    assert _run(pytester, "--graphleak-baseline-update").ret == 0
    assert len(_findings(pytester)) == 2
    start, end = TRAIN.index("def test_eval"), TRAIN.index("def test_clean")
    pytester.makepyfile(test_train=TRAIN[:start] + TRAIN[end:])


def test_an_entry_of_a_deleted_test_is_named_and_an_update_removes_it(
    pytester: pytest.Pytester,
) -> None:
    _deleted_eval(pytester)
    gate = _run(pytester, "--graphleak-report=r.json")
    assert gate.ret == 0, gate.stdout.str()
    told = folded(gate.stdout.str())
    assert (
        "graphleak baseline: 1 of its 2 entries name tests this run of the whole suite did "
        f"not collect (deleted or renamed), neither known nor fixed: {STALE} remove them "
        "with: pytest --graphleak -p no:randomly --graphleak-outlive=fail "
        "--graphleak-baseline=bl.json --graphleak-report=r.json --basetemp="
    ) in told
    assert "--graphleak-baseline-update JSON report:" in told
    assert "not checked in this run" not in told
    section = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))["baseline"]
    assert [entry["test"] for entry in section["stale"]] == ["test_train.py::test_eval"]
    assert section["unchecked"] == 1
    update = _run(pytester, "--graphleak-baseline-update")
    assert update.ret == 0
    assert (
        "wrote 1 findings to "
        f"{pytester.path / 'bl.json'} (0 added, 0 removed as fixed, 1 "
        "removed as their tests no longer exist)"
    ) in folded(update.stdout.str())
    assert [e["test"] for e in _findings(pytester)] == ["test_train.py::test_step"]


def test_under_xdist_the_controller_names_and_prunes_the_same(pytester: pytest.Pytester) -> None:
    """The controller collects nothing: it learns what its workers collected."""
    pytest.importorskip("xdist")
    _deleted_eval(pytester)
    update = pytester.runpytest_subprocess(
        "--graphleak",
        "-p",
        "no:randomly",
        "--graphleak-outlive=fail",
        "--graphleak-baseline=bl.json",
        "-n",
        "2",
        "--graphleak-report=r.json",
        "--graphleak-baseline-update",
    )
    assert update.ret == 0, update.stdout.str()
    section = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))["baseline"]
    assert section["updated"]["pruned"] == 1
    assert [e["test"] for e in _findings(pytester)] == ["test_train.py::test_step"]


@pytest.mark.parametrize(
    "selection",
    [
        ("-k", "step"),
        ("test_train.py::test_step",),
        ("test_other.py",),
        ("--deselect", "test_train.py::test_clean"),
    ],
    ids=["-k", "node-id", "another-file", "deselect"],
)
def test_a_run_of_part_of_the_suite_calls_no_entry_stale(
    pytester: pytest.Pytester, selection: tuple[str, ...]
) -> None:
    _deleted_eval(pytester)
    pytester.makepyfile(test_other="def test_other():\n    pass\n")
    gate = _run(pytester, *selection)
    assert gate.ret == 0, gate.stdout.str()
    assert "did not collect" not in folded(gate.stdout.str())
    _run(pytester, *selection, "--graphleak-baseline-update")
    assert len(_findings(pytester)) == 2  # kept: this run cannot tell


def test_a_collection_error_calls_no_entry_stale(pytester: pytest.Pytester) -> None:
    _deleted_eval(pytester)
    pytester.makepyfile(test_broken="import no_such_module_here\n")
    gate = _run(pytester, "--continue-on-collection-errors")
    assert "did not collect" not in folded(gate.stdout.str())
    _run(pytester, "--continue-on-collection-errors", "--graphleak-baseline-update")
    assert len(_findings(pytester)) == 2


# -- a JSON typo under the update (minor_text e) ---------------------------------------------
def test_the_update_says_a_file_with_a_json_typo_is_not_json_and_where(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    typo = '{"graphleak_baseline": 2, "findings": [],}'  # a trailing comma, as a merge leaves it
    (pytester.path / "bl.json").write_text(typo, encoding="utf-8")
    for flags in ((), ("--graphleak-baseline-update",)):
        result = pytester.runpytest("--graphleak", "--graphleak-baseline=bl.json", *flags)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(
            [
                "*graphleak: the baseline file '*bl.json' is not JSON: "
                "Expecting property name enclosed in double quotes: "
                "line 1 column 42 (char 41)*"
            ]
        )
        result.stderr.no_fnmatch_line("*not a graphleak baseline*")
    assert (pytester.path / "bl.json").read_text(encoding="utf-8") == typo


# -- graphleak report: known, fixed and stale, as the terminal (report_cmd_hides_known_and_fixed)
FIXED_AND_KNOWN = """
import minigrad as mg

w = mg.Tensor([1.0, 2.0], requires_grad=True)
history = []
TOTAL = [0.0]


def test_step():
    history.append((w * 2.0).sum())


def test_total():
    TOTAL.append((w * 3.0).sum().item())
"""


def test_graphleak_report_marks_known_and_lists_fixed_and_stale_entries(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_graphleak.cli import main

    pytester.makepyfile(test_suite=FIXED_AND_KNOWN.replace(".item())", ")"))
    assert _run(pytester, "--graphleak-baseline-update").ret == 0
    old = _findings(pytester)
    gone = {**old[0], "test": "test_suite.py::test_renamed"}
    text = (pytester.path / "bl.json").read_text(encoding="utf-8")
    entries = [
        Entry(Key(*(e[f] for f in baseline_keys.KEY_FIELDS)), e["reason"]) for e in [*old, gone]
    ]
    (pytester.path / "bl.json").write_text(baseline.render(entries), encoding="utf-8")
    assert text != baseline.render(entries)
    pytester.makepyfile(test_suite=FIXED_AND_KNOWN)  # test_total's leak fixed
    gate = _run(pytester, "--graphleak-report=r.json")
    assert gate.ret == 0, gate.stdout.str()
    capsys.readouterr()
    code = main(["report", str(pytester.path / "r.json")])
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    known = lines.index("KNOWN, in bl.json: no reason written there yet (it fails nothing)")
    assert lines[known + 1].startswith("graphleak: test_suite.py::test_step")
    assert out.count("KNOWN, in bl.json") == 1  # test_step's outlive finding
    path = pytester.path / "bl.json"
    at = next(i for i, line in enumerate(lines) if line.startswith("fixed since the baseline"))
    tail = folded("\n".join(lines[at:]).replace(" \\\n", " "))  # the command unfolded
    said = [
        f"fixed since the baseline (1, listed in {path}): test_suite.py::test_total "
        "[outlive] list-accumulation, held by global 'TOTAL' -> list[*] -> Tensor "
        f"update the baseline file with: {_COMMAND.strip()}",
        " --graphleak-baseline-update graphleak baseline: 1 of its 3 entries name tests "
        "this run of the whole suite did not collect (deleted or renamed), neither known "
        "nor fixed: test_suite.py::test_renamed [",
        f" remove them with: {_COMMAND.strip()}",
    ]
    found_at = [tail.find(text) for text in said]
    assert -1 not in found_at and found_at == sorted(found_at), (found_at, tail)


_COMMAND = (
    "  pytest --graphleak -p no:randomly --graphleak-outlive=fail "
    "--graphleak-baseline=bl.json --graphleak-report=r.json"
)


def test_the_step_summary_lists_stale_entries_with_the_update_command() -> None:
    from pytest_graphleak.report.github import fixed_section
    from pytest_graphleak.report.model import BaselineSection

    entry = {
        "test": "t.py::test_gone",
        "check": "outlive",
        "pattern": "list-accumulation",
        "holder": "global 'kept' -> list[*] -> Tensor",
        "reason": "",
    }
    section = BaselineSection.from_dict(
        {
            "file": "/x/bl.json",
            "entries": 3,
            "fixed": [],
            "stale": [entry],
            "update_command": "pytest --u",
        }
    )
    assert fixed_section(section) == (
        "#### Entries of tests no longer collected (deleted or renamed) (1)\n\n"
        "- `t.py::test_gone` [outlive] list-accumulation, held by "
        "`global 'kept' -> list[*] -> Tensor`\n\nRemove them: `pytest --u`\n\n"
    )
    assert BaselineSection.from_dict({"fixed": [], "update_command": "x"}).stale == ()

"""The baseline key of an outlive finding judged at a wider-scope fixture's teardown
(issue 36): keyed on the fixture instance (its name, scope and scope's node id), not on
the test whose teardown tore it down, which depends on the order and the pytest-xdist
split. Runs in a subprocess each (``runpytest_subprocess``): the suite's own module
fixture must be set up and torn down as pytest does it, under xdist too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_graphleak import baseline, baseline_keys
from pytest_graphleak.baseline import Baseline, Entry
from pytest_graphleak.baseline_keys import Key

pytest_plugins = ["pytester"]

HEAD = """
import pytest
import minigrad as mg


@pytest.fixture(scope="module")
def store():
    kept = []
    yield kept
    {clear}


def _loss():
    return (mg.nn.Linear(2, 1)(mg.Tensor([[1.0, 2.0]])) ** 2).mean()
"""

#: Every test hands the module fixture a graph: under ``-n 2`` both workers' instances
#: keep one, whatever the split.
TESTS = {
    name: f"\n\ndef {name}(store):\n    store.append(_loss())\n"
    for name in ("test_a", "test_b", "test_c", "test_d")
}
LAST = "\n\ndef test_last():\n    pass\n"
OTHER = "def test_other():\n    pass\n"
KEY = (
    "test_mod.py",
    "outlive(module fixture 'store')",
    "list-accumulation",
    "fixture 'store' -> list[*] -> Tensor",
)


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")


def _suite(
    pytester: pytest.Pytester,
    *,
    order: list[str] | None = None,
    extra: str = "",
    clear: bool = False,
) -> None:
    body = "".join(TESTS[name] for name in order or list(TESTS))
    head = HEAD.format(clear="kept.clear()" if clear else "pass")
    pytester.makepyfile(test_mod=head + body + extra, test_other=OTHER)


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "--graphleak",
        "-p",
        "no:randomly",
        "--graphleak-baseline=bl.json",
        "--graphleak-outlive=fail",
        "--graphleak-report=r.json",
        *args,
    )


def _entries(path: Path) -> list[dict[str, str]]:
    baseline.load(path)  # one entry per key: a repeated one is an error
    findings: list[dict[str, str]] = json.loads(path.read_text(encoding="utf-8"))["findings"]
    return findings


def _known_and_nothing_fixed(result: pytest.RunResult, pytester: pytest.Pytester) -> None:
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["graphleak: * known*"])
    result.stdout.no_fnmatch_line("*fixed since the baseline*")
    result.stdout.no_fnmatch_line("*leaked*")
    summary = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))["summary"]
    assert summary["known"] >= 1 and summary["fixed"] == 0 and summary["leaked"] == 0


@pytest.fixture
def written(pytester: pytest.Pytester) -> Path:
    """The suite and its baseline, written by a serial run."""
    _suite(pytester, extra=LAST)
    result = _run(pytester, "--graphleak-baseline-update")
    assert result.ret == 0, result.stdout.str()
    path = pytester.path / "bl.json"
    assert [tuple(e[f] for f in baseline_keys.KEY_FIELDS) for e in _entries(path)] == [KEY]
    return path


@pytest.mark.parametrize("change", ["reordered", "appended", "xdist"])
def test_a_fixture_teardown_finding_stays_known(
    pytester: pytest.Pytester, written: Path, change: str
) -> None:
    """Another test tears the module fixture down: the finding is still the known one."""
    args: tuple[str, ...] = ()
    if change == "reordered":  # test_a tears it down now
        _suite(pytester, order=list(reversed(TESTS)))
    elif change == "appended":
        _suite(pytester, extra=LAST + "\n\ndef test_more(store):\n    pass\n")
    else:
        pytest.importorskip("xdist")
        args = ("-n", "2", "--dist", "worksteal")
    _known_and_nothing_fixed(_run(pytester, *args), pytester)


def test_an_update_under_xdist_writes_one_entry(pytester: pytest.Pytester) -> None:
    """Both workers set the module fixture up and both find its graphs: one entry."""
    pytest.importorskip("xdist")
    _suite(pytester, extra=LAST)
    result = _run(pytester, "-n", "2", "--graphleak-baseline-update")
    assert result.ret == 0, result.stdout.str()
    entries = _entries(pytester.path / "bl.json")
    assert [tuple(e[f] for f in baseline_keys.KEY_FIELDS) for e in entries] == [KEY]
    _known_and_nothing_fixed(_run(pytester, "-n", "2"), pytester)


def test_fixed_only_where_the_fixture_was_torn_down(
    pytester: pytest.Pytester, written: Path
) -> None:
    result = _run(pytester, "test_other.py")  # the module's tests did not run
    assert result.ret == 0, result.stdout.str()
    result.stdout.no_fnmatch_line("*fixed since the baseline*")
    result.stdout.fnmatch_lines(["graphleak baseline: 1 of its 1 entries not checked*"])

    _suite(pytester, clear=True, extra=LAST)  # the fixture lets go of them: fixed
    result = _run(pytester)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*: 1 fixed since the baseline;*"])
    assert "\n  test_mod.py [outlive(module fixture 'store')] list-accumulation" in (
        result.stdout.str()
    )


def test_an_entry_keyed_on_the_tearing_down_test_still_matches(
    pytester: pytest.Pytester, written: Path
) -> None:
    """A file written before the fixture key: its entry names the test that tore the
    fixture down. It matches (known, not fixed), and the update rekeys it, reason kept."""
    test, _, pattern, holder = KEY
    old = Entry(Key("test_mod.py::test_last", "outlive", pattern, holder), "kept on purpose")
    written.write_text(baseline.render([old]), encoding="utf-8")
    _suite(pytester, order=list(reversed(TESTS)))  # test_a tears it down now
    _known_and_nothing_fixed(_run(pytester), pytester)
    result = _run(pytester, "--graphleak-baseline-update")
    result.stdout.fnmatch_lines(
        [
            "*(0 added, 0 removed as fixed, 1 judged at a fixture's "
            "teardown keyed on that fixture now)*"
        ]
    )
    entries = _entries(written)
    assert [(e["test"], e["check"], e["reason"]) for e in entries] == [
        (test, KEY[1], "kept on purpose")
    ]


def test_the_key_names_the_fixture_instance() -> None:
    links = [
        {"kind": "root", "type": "fixture", "name": "store"},
        {"kind": "container", "type": "list", "edge": "index", "key": "0"},
        {"kind": "tensor", "type": "Tensor"},
    ]
    for scope, node, test in [
        ("module", "t/test_m.py", "t/test_m.py"),
        ("class", "t/test_m.py::TestA", "t/test_m.py::TestA"),
        ("package", "t", "t"),
        ("session", "", baseline_keys.SESSION),
    ]:
        key = baseline_keys.key_of(
            "t/test_m.py::TestA::test_x",
            name="t/test_m.py::TestA::test_x::outlive",
            pattern="list-accumulation",
            links=links,
            judged_at={"fixture": "store", "scope": scope, "node": node},
        )
        assert (key.test, key.check) == (test, f"outlive({scope} fixture 'store')")
        assert key.holder == "fixture 'store' -> list[*] -> Tensor"
        old = Key("t/test_m.py::TestA::test_x", "outlive", key.pattern, key.holder)
        other = Key("u/test_n.py::test_y", "outlive", key.pattern, key.holder)
        loaded = Baseline(Path("bl.json"), {k: Entry(k) for k in (old,)})
        assert loaded.match(key) == old
        found_other = Baseline(Path("bl.json"), {other: Entry(other)}).match(key)
        assert found_other == (other if scope == "session" else None)


@pytest.mark.parametrize(
    ("scope", "test"), [("class", "test_mod.py::TestFit"), ("session", baseline_keys.SESSION)]
)
def test_class_and_session_fixtures_are_keyed_on_their_instance(
    pytester: pytest.Pytester, scope: str, test: str
) -> None:
    """Written by a serial run, matched by a run in reversed order under ``-n 2``."""
    pytest.importorskip("xdist")

    def suite(names: list[str]) -> None:
        head = HEAD.format(clear="pass").replace('scope="module"', f'scope="{scope}"')
        body = "".join(TESTS[name].replace("\n", "\n    ") for name in names)
        pytester.makepyfile(
            test_mod=head + "\n\nclass TestFit:" + body.replace("(store)", "(self, store)") + "\n",
            test_other=OTHER,
        )

    suite(list(TESTS))
    result = _run(pytester, "--graphleak-baseline-update")
    assert result.ret == 0, result.stdout.str()
    entries = _entries(pytester.path / "bl.json")
    assert [(e["test"], e["check"]) for e in entries] == [
        (test, f"outlive({scope} fixture 'store')")
    ]
    suite(list(reversed(TESTS)))
    _known_and_nothing_fixed(_run(pytester, "-n", "2"), pytester)


@pytest.mark.parametrize("select", [("-k", "test_more"), ("test_mod.py::test_more",)])
def test_a_run_of_some_of_the_scopes_tests_does_not_read_its_entry_as_fixed(
    pytester: pytest.Pytester, written: Path, select: tuple[str, ...]
) -> None:
    """The fixture is set up and torn down, but only by tests that hand it nothing: its
    entry is not checked (not "fixed"), and an update from that run keeps it."""
    _suite(pytester, extra=LAST + "\n\ndef test_more(store):\n    pass\n")
    result = _run(pytester, *select)
    assert result.ret == 0, result.stdout.str()
    result.stdout.no_fnmatch_line("*fixed since the baseline*")
    result.stdout.fnmatch_lines(
        [
            "graphleak baseline: 1 of its 1 entries not checked*"
            "a fixture's entry is checked by a run of its whole scope)"
        ]
    )
    result = _run(pytester, *select, "--graphleak-baseline-update")
    assert result.ret == 0, result.stdout.str()
    assert [tuple(e[f] for f in baseline_keys.KEY_FIELDS) for e in _entries(written)] == [KEY]
    result = _run(pytester, "test_mod.py")  # the module whole: checked, found, known
    _known_and_nothing_fixed(result, pytester)


def test_a_run_stopped_by_x_does_not_read_its_entry_as_fixed(
    pytester: pytest.Pytester, written: Path
) -> None:
    """``-x`` stops before the tests that hand the fixture its graphs: not checked."""
    _suite(pytester, extra=LAST, order=["test_a", "test_b"])
    pytester.makepyfile(
        test_mod=pytester.path.joinpath("test_mod.py")
        .read_text()
        .replace(
            "def test_a(store):\n    store.append(_loss())", "def test_a(store):\n    assert False"
        )
    )
    result = _run(pytester, "-x")
    assert result.ret == 1, result.stdout.str()
    result.stdout.no_fnmatch_line("*fixed since the baseline*")
    result.stdout.fnmatch_lines(["graphleak baseline: 1 of its 1 entries not checked*"])


ARCHIVE = """
import pytest
import minigrad as mg

ARCHIVE = []  # a module-level archive that the class fixture fills at its teardown


@pytest.fixture(scope="class")
def store():
    kept = []
    yield kept
    ARCHIVE.extend(kept)


def _loss():
    return (mg.nn.Linear(2, 1)(mg.Tensor([[1.0, 2.0]])) ** 2).mean()


class TestArchive:
    def test_a(self, store):
        store.append(_loss())

    def test_b(self, store):
        store.append(_loss())


def test_other():
    pass
"""

#: Runs the collected tests last first (pytest-randomly may not be installed).
REVERSED = """
def pytest_collection_modifyitems(items):
    items.reverse()
"""


@pytest.mark.parametrize("change", ["reversed", "xdist"])
def test_a_class_fixture_that_archives_its_graphs_is_keyed_on_the_fixture(
    pytester: pytest.Pytester, change: str
) -> None:
    """Issue 42 item 4 (``b_fixture_teardown_key_order``): the class fixture's teardown
    moves every test's graph into a module global, the graph of the class's last test
    too. All of them are the fixture's one finding, keyed on it: the gate passes in the
    other order and under ``-n 2``, with nothing new and nothing fixed."""
    pytester.makepyfile(test_archive=ARCHIVE)
    result = _run(pytester, "--graphleak-baseline-update")
    assert result.ret == 0, result.stdout.str()
    entries = _entries(pytester.path / "bl.json")
    assert [tuple(e[f] for f in baseline_keys.KEY_FIELDS) for e in entries] == [
        (
            "test_archive.py::TestArchive",
            "outlive(class fixture 'store')",
            "list-accumulation",
            "global 'ARCHIVE' -> list[*] -> Tensor",
        ),
    ]
    if change == "reversed":
        pytester.makeconftest(REVERSED)
        result = _run(pytester)
    else:
        pytest.importorskip("xdist")
        result = _run(pytester, "-n", "2")
    _known_and_nothing_fixed(result, pytester)

"""The plugin end to end, through ``pytester.runpytest_subprocess``: every pattern in
torch and minigrad with its clean twin, class methods, parametrized tests, raising steps,
the fixture, async/generator tests, and results on ``report.graphleak``.

Each subprocess run costs about a second of start-up, so the cases share runs.
"""

from __future__ import annotations

import json

import pytest
from suite_helpers import FAST, folded, said_in_order

pytest.importorskip("torch")
pytest.importorskip("minigrad")


CATALOGUE = """
import numpy as np
import pytest
import torch
import minigrad as mg


class Holder:
    pass


@pytest.fixture
def torch_state():
    return {"w": torch.randn(8, 8, requires_grad=True), "x": torch.randn(4, 8),
            "losses": [], "total": 0}


@pytest.fixture
def mg_state():
    rng = np.random.default_rng(0)
    return {"w": mg.Tensor(rng.standard_normal((8, 8)), requires_grad=True),
            "x": mg.Tensor(rng.standard_normal((4, 8))), "losses": [], "total": 0}


def torch_loss(s):
    return (s["x"] @ s["w"]).tanh().sum()


def mg_loss(s):
    return (s["x"] @ s["w"]).tanh().sum()


@pytest.mark.no_graph_growth
def test_torch_list(torch_state):
    loss = torch_loss(torch_state)
    loss.backward()
    torch_state["w"].grad = None
    torch_state["losses"].append(loss)


@pytest.mark.no_graph_growth
def test_torch_list_fixed(torch_state):
    loss = torch_loss(torch_state)
    loss.backward()
    torch_state["w"].grad = None
    torch_state["losses"].append(loss.item())


@pytest.mark.no_graph_growth
def test_torch_total(torch_state):
    torch_state["total"] += torch_loss(torch_state)


@pytest.mark.no_graph_growth
def test_torch_total_fixed(torch_state):
    torch_state["total"] += torch_loss(torch_state).item()


@pytest.mark.no_graph_growth
def test_torch_cycle(torch_state):
    holder = Holder()
    holder.me = holder
    holder.loss = torch_loss(torch_state)


@pytest.mark.no_graph_growth
def test_torch_cycle_fixed(torch_state):
    holder = Holder()
    holder.loss = torch_loss(torch_state)


@pytest.mark.no_graph_growth
def test_mg_list(mg_state):
    loss = mg_loss(mg_state)
    loss.backward()
    mg_state["w"].grad = None
    mg_state["losses"].append(loss)


@pytest.mark.no_graph_growth
def test_mg_list_fixed(mg_state):
    loss = mg_loss(mg_state)
    loss.backward()
    mg_state["w"].grad = None
    mg_state["losses"].append(loss.item())


@pytest.mark.no_graph_growth
def test_mg_total(mg_state):
    mg_state["total"] = mg_state["total"] + mg_loss(mg_state)


@pytest.mark.no_graph_growth
def test_mg_total_fixed(mg_state):
    mg_state["total"] = mg_state["total"] + mg_loss(mg_state).item()


@pytest.mark.no_graph_growth
def test_mg_cycle(mg_state):
    holder = Holder()
    holder.me = holder
    holder.loss = mg_loss(mg_state)


@pytest.mark.no_graph_growth
def test_mg_cycle_fixed(mg_state):
    holder = Holder()
    holder.loss = mg_loss(mg_state)


@pytest.fixture
def buffers():
    return []


@pytest.mark.no_graph_growth(rss_tolerance="1MiB")
def test_memory(buffers):
    buffers.append(np.ones(1 << 19))  # 4 MiB a step, no tensor at all


@pytest.mark.no_graph_growth(rss_tolerance="1MiB")
def test_memory_fixed(buffers):
    buffers[:] = [np.ones(1 << 19)]


class TestInClass:
    kept = []

    @pytest.mark.no_graph_growth(steps=12, warmup=2)
    def test_method_leaks(self, mg_state):
        self.kept.append(mg_loss(mg_state))


@pytest.mark.no_graph_growth(steps=12, warmup=2)
@pytest.mark.parametrize("keep", [False, True])
def test_param(mg_state, keep):
    loss = mg_loss(mg_state)
    mg_state["losses"].append(loss if keep else loss.item())


@pytest.mark.no_graph_growth
def test_step_raises(mg_state):
    mg_state["losses"].append(1)
    if len(mg_state["losses"]) == 5:
        raise ValueError("bad batch")


def test_fixture_check(graphleak, mg_state):
    def step():
        mg_state["losses"].append(mg_loss(mg_state))
    graphleak.check(step, steps=12, warmup=2)


def test_fixture_check_clean(graphleak, torch_state):
    result = graphleak.check(lambda: torch_loss(torch_state).backward(), steps=12, warmup=2)
    assert not result.leaked


def test_fixture_track(graphleak, torch_state):
    hidden = torch.zeros(4, 8)
    with graphleak.track(warmup=2) as t:
        for _ in range(14):
            hidden = torch.tanh(torch_state["x"] @ torch_state["w"] + hidden)  # never detached
            t.step()


@pytest.mark.no_graph_growth
async def test_async(mg_state):
    pass
"""

REPORT_CONFTEST = """
import json
def pytest_runtest_logreport(report):
    if report.when == "call" and getattr(report, "graphleak", None):
        with open("graphleak-results.jsonl", "a") as out:
            out.write(json.dumps({"nodeid": report.nodeid, "checks": report.graphleak}) + "\\n")
"""


def test_catalogue_fails_leaks_with_their_pattern_and_passes_clean_twins(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_catalogue=CATALOGUE)
    pytester.makeconftest(REPORT_CONFTEST)
    result = pytester.runpytest_subprocess("--graphleak", "-rA", *FAST)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(  # folded between its settings, in 80 columns
        [
            "graphleak: checking @pytest.mark.no_graph_growth tests: steps=* warmup=*",
            "    rss_tolerance=1.0 MiB/step probes=all imported start_scan=roots diagnose=on",
        ]
    )
    # The short summary says what leaked, not "GraphLeakError: graphleak: t...".
    result.stdout.fnmatch_lines(["LEAKED test_catalogue.py::test_mg_total - retained-grad-fn: *"])
    for name, pattern in [
        ("test_torch_list", "list-accumulation"),
        ("test_torch_total", "retained-grad-fn"),
        ("test_torch_cycle", "cycle"),
        ("test_mg_list", "list-accumulation"),
        ("test_mg_total", "retained-grad-fn"),
        ("test_mg_cycle", "cycle"),
        ("test_memory", "memory-growth"),
        ("TestInClass::test_method_leaks", "list-accumulation"),
        ("test_param[True]", "list-accumulation"),
        ("test_fixture_check::check(step)", "list-accumulation"),
        ("test_fixture_track::track(1)", "retained-grad-fn"),
    ]:
        # folded: a long test id wraps the pattern onto the next line at 80 columns
        assert f"graphleak: test_catalogue.py::{name} leaks: {pattern}" in folded(out), name
    clean_twins = [
        "test_torch_list_fixed",
        "test_torch_total_fixed",
        "test_torch_cycle_fixed",
        "test_mg_list_fixed",
        "test_mg_total_fixed",
        "test_mg_cycle_fixed",
        "test_memory_fixed",
        "test_param[False]",
        "test_fixture_check_clean",
    ]
    for clean in clean_twins:
        clean = clean.replace("[", "[[]")
        result.stdout.fnmatch_lines([f"PASSED test_catalogue.py::{clean}"])
    # the failure text: what grew, from what to what, per step, the fix (each sample's
    # value only with -v: test_plugin_failure_output)
    result.stdout.fnmatch_lines(
        [
            "*graphleak: test_catalogue.py::test_mg_list leaks: list-accumulation",
            "*measured steps after 3 warmup steps*grew:",
            "*minigrad.tensors*->*+*/step*",
            "*pattern: list-accumulation*",
            "*fix (verified: * more steps with this change grew nothing):*",
        ]
    )
    # a raising step fails with its own exception, not with a leak report
    result.stdout.fnmatch_lines(["*ValueError: bad batch*", "*raised at step 5 of 19*"])
    assert "test_step_raises leaks" not in out
    result.stdout.fnmatch_lines(["*test_async*needs a plain (synchronous, non-generator)*"])
    result.assert_outcomes(passed=9, failed=13)

    records = {}
    for line in (pytester.path / "graphleak-results.jsonl").read_text().splitlines():
        record = json.loads(line)
        records[record["nodeid"].split("::", 1)[1]] = record["checks"]
    (mg_list,) = records["test_mg_list"]
    assert mg_list["leaked"] and mg_list["pattern"] == "list-accumulation"
    assert len(mg_list["series"]["minigrad.tensors"]) == 19
    assert not records["test_mg_list_fixed"][0]["leaked"]
    assert records["test_step_raises"][0]["error"] == "ValueError: bad batch"
    assert records["test_step_raises"][0]["error_step"] == 5
    assert records["test_fixture_track"][0]["steps"] == 12


def test_warn_only_reports_without_failing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        import minigrad as mg
        kept = []

        @pytest.mark.no_graph_growth(steps=6, warmup=1)
        def test_leaks():
            kept.append(mg.Tensor([1.0], requires_grad=True) * 2)

        def test_fixture_leaks(graphleak):
            graphleak.check(lambda: kept.append(mg.Tensor([1.0], requires_grad=True) * 2),
                            steps=6, warmup=1)
        """
    )
    pytester.makeini("[pytest]\ngraphleak_warn_only = true\n")
    result = pytester.runpytest_subprocess("--graphleak", *FAST)
    result.assert_outcomes(passed=2)
    # A headline and one short line per leak, attributed to the test (not to the plugin);
    # the report is not repeated in the warning, the graphleak section carries it instead.
    said_in_order(
        result.stdout.str(),
        [  # its lines broken at spaces in 80 columns
            "*test_warn_only*.py:*: GraphLeakWarning: graph leak (warn-only, not failed) "
            "list-accumulation: +1 tensor/step, held by *",
        ],
    )
    result.stdout.fnmatch_lines(
        [
            "WARNING *::test_leaks  list-accumulation*",
            "    held by: *",
            "    fix (*",
        ]
    )
    out = result.stdout.str()
    assert "plugin.py" not in out and "series (warmup" not in out


def test_without_graphleak_marked_tests_run_once(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        calls = []

        @pytest.mark.no_graph_growth(steps=5)
        def test_step():
            calls.append(1)

        @pytest.mark.no_graph_growth
        class TestSteps:
            def test_method(self):
                calls.append(2)

        def test_count():
            assert calls == [1, 2]
        """
    )
    result = pytester.runpytest_subprocess(*FAST)
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "graphleak: 2 tests marked @pytest.mark.no_graph_growth ran once, unchecked: add "
            "--graphleak*"
        ]
    )

"""The outlive audit: with --graphleak every test, marked or not, is checked after its
teardown for autograd graphs it made that are still alive (issue 27).

In-process pytester runs (cheap); one subprocess under pytest-xdist, where the results
must cross from the workers.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

import jsonschema
import pytest
from suite_helpers import FakeModule, folded, report_section, said_in_order

import minigrad as mg
from pytest_graphleak import session
from pytest_graphleak.outlive.census import Census
from pytest_graphleak.report.json_doc import load_schema

pytest_plugins = ["pytester"]

if TYPE_CHECKING:
    import torch
else:
    try:  # imported here, once: an in-process pytester run drops the modules it imported,
        # and torch cannot be imported a second time in one process
        import torch
    except ImportError:  # minigrad alone: the torch tests skip
        torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")

# The acceptance suite: plain unmarked tests; one appends its loss to a module list.
SUITE = """
import pytest
import minigrad as mg

history = []
floats = []


@pytest.fixture(scope="session")
def model():
    return mg.nn.Linear(3, 1)


def _loss(model):
    return (model(mg.Tensor([[1.0, 2.0, 3.0]])) ** 2).mean()


def test_trains_session_model(model):
    opt = mg.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(3):
        opt.zero_grad()
        loss = _loss(model)
        loss.backward()
        opt.step()


def test_keeps_floats(model):
    loss = _loss(model)
    floats.append(loss.item())


def test_appends_loss(model):
    loss = _loss(model)
    history.append(loss)


def test_fails_on_its_assert(model):
    loss = _loss(model)
    assert loss.item() < -1.0
"""


def _outlive_warnings(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if "GraphOutliveWarning" in line]


def test_warns_naming_the_test_and_the_list(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("--graphleak", "-p", "no:randomly")
    result.assert_outcomes(passed=3, failed=1, warnings=1)
    found = _outlive_warnings(result)
    assert len(found) == 1, result.outlines
    out = folded(result.stdout.str())  # the warning's lines break at 80 columns
    # The warning is a pointer under the test's id; the graphleak report tells the story,
    # once: each of its lines appears one time in the whole output.
    said = [
        "test_suite.py::test_appends_loss test_suite.py:31: GraphOutliveWarning: graphleak: "
        "autograd graphs outlived the test: list-accumulation, held by global "
        "'test_suite.history'; the graphleak report section tells where and the fix",
        "WARNING test_suite.py::test_appends_loss outlived the test: list-accumulation",
        "held by: global 'test_suite.history' -> list(len=1) -> Tensor(",
        "created at: test_suite.py:14 in _loss: return (model(",
        "of the kept tensors and nodes)",
        "kept on purpose? mark the test @pytest.mark.graphleak_outlive_ok",
    ]
    assert [out.count(text) for text in said] == [1] * len(said), out
    at = [out.find(text) for text in said]
    assert at == sorted(at), (at, out)
    assert "held: " not in out  # the chain once: held by
    for quiet in ("test_trains_session_model", "test_keeps_floats", "test_fails_on_its_assert"):
        assert not any(f"{quiet} left" in line for line in result.outlines)


def test_fail_mode_fails_the_test_at_teardown(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("--graphleak", "--graphleak-outlive=fail", "-p", "no:randomly")
    result.assert_outcomes(passed=3, failed=1, errors=1)
    said_in_order(
        result.stdout.str(),
        [
            "*ERROR at teardown of test_appends_loss*",
            "graphleak: test_suite.py::test_appends_loss left autograd graphs alive after its *",
            "ERROR test_suite.py::test_appends_loss - *outlived the test: list-accumulation*",
        ],
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_rerun_in_fail_mode_adds_stored_at_to_minigrad_sites(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest(
        "--graphleak",
        "--graphleak-outlive=fail",
        "--graphleak-outlive-sites=rerun",
        "-p",
        "no:randomly",
    )
    result.assert_outcomes(passed=3, failed=1, errors=1)  # as without the re-run
    said_in_order(
        result.stdout.str(),
        [
            "*ERROR at teardown of test_appends_loss*",
            "*created at: test_suite.py:14 in _loss: return (model(*",
            "*stored at: test_suite.py:* in test_appends_loss: history.append(loss)  (once in the "
            "test's re-run)",
        ],
    )


@pytest.mark.parametrize(
    "args",
    [
        ("--graphleak-outlive=off",),
        ("-o", "graphleak_outlive_keep=test_suite.hist*"),
        ("-W", "ignore::pytest_graphleak.GraphOutliveWarning"),
    ],
    ids=["off", "keep-list", "filterwarnings-ignore"],
)
def test_ways_to_accept_a_kept_graph(pytester: pytest.Pytester, args: tuple[str, ...]) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("--graphleak", "-p", "no:randomly", *args)
    result.assert_outcomes(passed=3, failed=1)
    assert not _outlive_warnings(result)


def test_opt_out_marker_and_no_audit_without_graphleak(pytester: pytest.Pytester) -> None:
    marked = SUITE.replace(
        "def test_appends_loss",
        "@pytest.mark.graphleak_outlive_ok(reason='a cache')\ndef test_appends_loss",
    )
    pytester.makepyfile(test_suite=marked)
    result = pytester.runpytest("--graphleak", "-p", "no:randomly")
    result.assert_outcomes(passed=3, failed=1)
    assert not _outlive_warnings(result)
    pytester.makepyfile(test_suite=SUITE)
    plain = pytester.runpytest("-p", "no:randomly")
    plain.assert_outcomes(passed=3, failed=1)
    assert not _outlive_warnings(plain)


def test_warning_as_error_fails_the_teardown(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest(
        "--graphleak", "-p", "no:randomly", "-W", "error::pytest_graphleak.GraphOutliveWarning"
    )
    result.assert_outcomes(passed=3, failed=1, errors=1)
    said_in_order(result.stdout.str(), ["*ERROR at teardown of test_appends_loss*"])


WIDER = """
import pytest
import minigrad as mg

KEPT = []


@pytest.fixture(scope="module")
def cache():
    return {}


@pytest.fixture(scope="module")
def kept():
    yield KEPT


def test_stores_in_module_fixture(cache):
    cache["out"] = (mg.Tensor([1.0], requires_grad=True) * 2).sum()


def test_reads_it(cache):
    assert cache["out"].grad_fn is not None


def test_stores_in_fixture_that_is_a_global(kept):
    kept.append(mg.Tensor([1.0], requires_grad=True) * 3)


class TestCase:
    seen = {}

    def test_class_attribute(self):
        self.seen["x"] = mg.Tensor([2.0], requires_grad=True) * 2
"""


def test_wider_fixture_keeps_its_graph_and_globals_are_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_wider=WIDER)
    result = pytester.runpytest("--graphleak", "-p", "no:randomly")
    result.assert_outcomes(passed=4, warnings=2)
    found = _outlive_warnings(result)
    assert len(found) == 2, found
    told = folded("\n".join(report_section(result.outlines)))
    assert "WARNING test_wider.py::test_stores_in_fixture_that_is_a_global outlived" in told
    assert "WARNING test_wider.py::TestCase::test_class_attribute outlived the test" in told
    said_in_order(
        result.stdout.str(),
        [  # the report's rows, by node id
            "*held by: class attribute 'TestCase.seen' -> dict?'x'? -> Tensor*",
            "*held by: global 'test_wider.KEPT' -> list(len=1) -> Tensor*",
        ],
    )
    said_in_order(
        result.stdout.str(),
        [
            # the module fixture's dict still holds its graph when it is torn down (the last
            # test's teardown, a test that did not request it): named then, with the test
            # that stored it, as the session's finding (issue 43 item 3)
            "*= graphleak: fixture findings, on no test =*",
            "*made during test_wider.py::test_stores_in_module_fixture, still alive at the "
            "teardown of fixture 'cache' (module scope)",
            "*held by: fixture 'cache' (module scope) -> dict?'out'? -> Tensor*",
        ],
    )


def test_graph_outliving_its_module_fixture_is_named_at_its_teardown(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_late="""
        import pytest
        import minigrad as mg

        LATER = []

        @pytest.fixture(scope="module")
        def box():
            box = {}
            yield box
            LATER.append(box)  # the fixture's teardown hands the graph to a global

        def test_fills_box(box):
            box["loss"] = (mg.Tensor([1.0], requires_grad=True) * 2).sum()

        def test_last():
            pass
        """
    )
    result = pytester.runpytest_subprocess("--graphleak", "-p", "no:randomly")
    # torn down in the teardown of test_last, which did not request it: the session's
    result.assert_outcomes(passed=2)
    said_in_order(
        result.stdout.str(),
        [
            "*= graphleak: fixture findings, on no test =*",
            "graphleak: fixture 'box' (module scope) of test_late.py kept autograd graphs alive "
            "after its teardown (outlive)",
            "*made during test_late.py::test_fills_box, still alive at the teardown of fixture "
            "'box' (module scope)",
            "*held by: global 'test_late.LATER' -> list(len=1) -> dict?'loss'? -> Tensor*",
            "*made during test_late.py::test_fills_box; kept by fixture 'box' (module scope) "
            "until*",
        ],
    )


def test_marked_test_is_not_reported_twice(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_marked="""
        import pytest
        import minigrad as mg

        losses = []

        @pytest.mark.no_graph_growth(steps=6, warmup=1)
        def test_leaks():
            losses.append((mg.Tensor([1.0], requires_grad=True) * 2).sum())
        """
    )
    result = pytester.runpytest("--graphleak", "-p", "no:randomly")
    result.assert_outcomes(failed=1)
    said_in_order(result.stdout.str(), ["*list-accumulation*"])
    assert not _outlive_warnings(result)
    assert not any("outlived the test" in line for line in result.outlines)


def test_graph_made_before_a_check_in_the_test_is_audited(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_fixture_check="""
        import minigrad as mg

        early = []

        def test_check_after_a_kept_graph(graphleak):
            early.append(mg.Tensor([1.0], requires_grad=True) * 5)
            w = mg.Tensor([1.0], requires_grad=True)

            def step():
                (w * 2).sum().backward()

            graphleak.check(step, steps=4, warmup=1)
        """
    )
    result = pytester.runpytest("--graphleak", "-p", "no:randomly")
    result.assert_outcomes(passed=1, warnings=1)
    said_in_order(result.stdout.str(), ["*held by: global 'test_fixture_check.early' -> list*"])


def test_reports_under_xdist(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_suite=SUITE)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(pytester.path))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "summary.md"))
    result = pytester.runpytest_subprocess(
        "--graphleak",
        "-p",
        "no:randomly",
        "-n",
        "2",
        "--graphleak-report=out.json",
        "--junitxml=junit.xml",
    )
    result.assert_outcomes(passed=3, failed=1)
    document = json.loads((pytester.path / "out.json").read_text())
    jsonschema.validate(document, load_schema())
    (test,) = [t for t in document["tests"] if t["nodeid"].endswith("test_appends_loss")]
    (check,) = test["checks"]
    assert (test["status"], check["kind"], check["pattern"]) == (
        "warned",
        "outlive",
        "list-accumulation",
    )
    assert check["diagnosis"]["chain"][0] == "global 'test_suite.history'"
    junit = (pytester.path / "junit.xml").read_text()
    assert '<property name="graphleak.kind" value="outlive"' in junit
    # The GitHub Actions gate: a warning (the test passed) on the line that made the graph.
    said_in_order(
        result.stdout.str(),
        [
            "::warning file=test_suite.py,line=14,title=graphleak%3A list-accumulation (outlived "
            "the test) at test_suite.py%3A14::fix (not verified): *%0Aoutlived the test: "
            "1 graph-carrying tensor*"
            "%0Atest: test_suite.py::test_appends_loss",
        ],
    )
    assert "test_appends_loss" in (pytester.path / "summary.md").read_text()


def test_census_tells_what_a_test_made_and_leaves_gc_alone() -> None:
    """Direct: a graph made before the census, inside a check, or nowhere is not the
    test's; one made before or after a check is. gc is never touched meanwhile."""
    gc_state = (gc.isenabled(), gc.get_threshold(), gc.get_freeze_count())
    older = mg.Tensor([1.0], requires_grad=True) * 2
    census = Census()
    assert census.begin()
    assert (gc.isenabled(), gc.get_threshold(), gc.get_freeze_count()) == gc_state
    before = mg.Tensor([1.0], requires_grad=True) * 3  # before a check
    with session.check_span():  # a check runs: its steps' graphs are its own
        inside = mg.Tensor([1.0], requires_grad=True) * 4
    after = mg.Tensor([1.0], requires_grad=True) * 5
    plain = mg.Tensor([1.0])
    assert census.finish()
    assert (gc.isenabled(), gc.get_threshold(), gc.get_freeze_count()) == gc_state
    assert [census.made_during(t) for t in (older, before, inside, after, plain)] == [
        False,
        True,
        False,
        True,
        False,
    ]
    assert census.made_during(after.grad_fn) and not census.grown_in_place(after)
    assert not session.current().spans


def test_census_of_a_test_that_made_no_graph_looks_for_nothing() -> None:
    census = Census()
    assert census.begin()
    mg.Tensor([1.0]) * 2  # no graph
    assert not census.finish()
    assert not session.current().spans


def test_census_works_when_the_user_froze_objects() -> None:
    """The user's own gc.freeze() changes nothing: no freeze is the census's."""
    gc.freeze()
    try:
        census = Census()
        assert census.begin()
        kept = mg.Tensor([1.0], requires_grad=True) * 2
        gc.freeze()  # and again inside the test
        assert census.finish() and census.made_during(kept)
    finally:
        gc.unfreeze()


def test_graph_made_after_a_loop_check_is_audited(pytester: pytest.Pytester) -> None:
    """A loop checked inside a test (track(), as the framework callbacks do) lifts the
    audit's freeze while it runs and hands it back: what the test keeps after it is named."""
    pytester.makepyfile(
        test_loop_then_keep="""
        import minigrad as mg
        from pytest_graphleak import track

        late = []

        def test_loop_then_keep():
            w = mg.Tensor([1.0], requires_grad=True)
            with track(warmup=1, steps=4) as t:
                for _ in range(5):
                    (w * 2).sum().backward()
                    t.step()
            late.append(w * 3)
        """
    )
    result = pytester.runpytest("--graphleak", "-p", "no:randomly")
    result.assert_outcomes(passed=1, warnings=1)
    said_in_order(result.stdout.str(), ["*held by: global 'test_loop_then_keep.late' -> list*"])


# Real torch: in-place growth of tensors alive before the test, and the opt-in re-run
# that finds where torch graphs were made and stored.
TORCH_SUITE = """
import pytest
import torch

history = []
floats = []
TOTAL = torch.zeros(())


@pytest.fixture(scope="session")
def model():
    return torch.nn.Linear(3, 1)


@pytest.fixture(scope="session")
def state():
    return {"total": torch.zeros(())}


@pytest.fixture
def batch():
    print("batch set up")
    return torch.ones(2, 3)


def _loss(model, batch):
    return model(batch).pow(2).mean()


def test_trains_session_model(model, batch):
    for _ in range(2):  # SGD by hand (torch.optim imports modules pytester would drop)
        _loss(model, batch).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.01 * p.grad
                p.grad = None


def test_keeps_floats(model, batch):
    floats.append(_loss(model, batch).item())


def test_appends_loss(model, batch):
    loss = _loss(model, batch)
    history.append(loss)


def test_adds_to_global_total(model, batch):
    global TOTAL
    TOTAL += _loss(model, batch)


def test_adds_to_session_total(model, state, batch):
    state["total"] += _loss(model, batch)


def test_fails_on_its_assert(model, batch):
    assert _loss(model, batch).item() < -1.0
"""

_NAMED = ("test_appends_loss", "test_adds_to_global_total", "test_adds_to_session_total")
_QUIET = ("test_trains_session_model", "test_keeps_floats", "test_fails_on_its_assert")


def _warned(result: pytest.RunResult) -> list[str]:
    """The tests the audit warned about: a row of their own in the graphleak report (the
    warning itself is a pointer to it)."""
    told = folded("\n".join(report_section(result.outlines)))
    return [
        name
        for name in (*_NAMED, *_QUIET)
        if f"WARNING test_torch_suite.py::{name} outlived the test" in told
    ]


@needs_torch
def test_torch_graphs_grown_in_place_on_old_tensors_are_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_torch_suite=TORCH_SUITE)
    result = pytester.runpytest("--graphleak", "-p", "no:randomly")
    result.assert_outcomes(passed=5, failed=1, warnings=3)
    assert _warned(result) == list(_NAMED)
    said_in_order(
        result.stdout.str(),
        ["*held by: global 'test_torch_suite.history' -> list(len=1) -> Tensor*"],
    )
    said_in_order(
        result.stdout.str(),
        [
            "*WARNING test_torch_suite.py::test_adds_to_global_total outlived the test: "
            "retained-grad-fn*",
            "*a tensor whose graph test_torch_suite.py::test_adds_to_global_total extended in "
            "place*",
            "*held by: global 'test_torch_suite.TOTAL' -> Tensor(shape=(), grad_fn=AddBackward0)",
            "*note: an in-place op (+=, add_()) extended the graph of a tensor*",
            "*held by: fixture 'state' (session scope) -> dict?'total'? -> Tensor(*grad_fn=Add*",
        ],
    )
    # torch records no site while a test runs: the story says so and how to get them
    said_in_order(
        result.stdout.str(),
        [
            "*created at: unknown (torch's creation sites are not "
            "recorded while a test runs; --graphleak-outlive-sites=rerun*"
        ],
    )


@needs_torch
def test_rerun_finds_torch_sites_without_changing_the_outcome(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_torch_suite=TORCH_SUITE)
    result = pytester.runpytest_subprocess(
        "--graphleak", "--graphleak-outlive-sites=rerun", "-rP", "-p", "no:randomly"
    )
    result.assert_outcomes(passed=5, failed=1, warnings=3)
    assert _warned(result) == list(_NAMED)
    said_in_order(
        result.stdout.str(),
        [
            "*WARNING *test_appends_loss*outlived the test*",
            "*created at: test_torch_suite.py:26 in _loss: return model(batch).pow(2).mean()*",
            "*stored at: test_torch_suite.py:* in test_appends_loss: history.append(loss)  "
            "(once in the test's re-run)",
            "*note: created at and stored at: from one more run of the test*",
            # tried: the test ran once more with the change and left nothing
            "*fix (verified: one more run of the test with this change left no graph alive): "
            "test_torch_suite.py:44: history.append(loss.item())",
        ],
    )
    said_in_order(
        result.stdout.str(),
        [
            "*WARNING *test_adds_to_global_total*outlived the test*",
            "*stored at: test_torch_suite.py:* in test_adds_to_global_total: TOTAL += _loss(*",
            "*fix (verified: one more run*): test_torch_suite.py:49: TOTAL = (TOTAL + "
            "_loss(model, batch)).detach()",
        ],
    )
    said_in_order(
        result.stdout.str(),
        [
            "*WARNING *test_adds_to_session_total*outlived the test*",
            "*stored at: test_torch_suite.py:* in test_adds_to_session_total: state*total*+=*",
            '*fix (verified: one more run*): test_torch_suite.py:53: state?"total"? = '
            '(state?"total"? + _loss(model, batch)).detach()',
        ],
    )
    # each of the six tests shows its captured setup output once (the re-run's is dropped)
    assert result.stdout.str().count("batch set up") == 6


@needs_torch
def test_rerun_that_leaves_nothing_and_one_that_is_refused_say_so(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_once="""
        import pytest
        import torch

        kept = []

        @pytest.fixture(scope="module")
        def weight():
            return torch.ones(2, requires_grad=True)

        def test_keeps_on_its_first_run_only():
            if not kept:
                kept.append(torch.ones(2, requires_grad=True) * 2)

        def test_last_user_of_a_module_fixture(weight):
            kept.append(weight * 3)
        """
    )
    result = pytester.runpytest(
        "--graphleak", "--graphleak-outlive-sites=rerun", "-p", "no:randomly"
    )
    result.assert_outcomes(passed=2, warnings=2)
    said_in_order(
        result.stdout.str(),
        [
            "*WARNING *test_keeps_on_its_first_run_only*outlived the test*",
            "*note: the test ran once more to find where its graphs were made, and that run left "
            "none in this holder: created at and stored at unknown",
            "*WARNING *test_last_user_of_a_module_fixture*outlived the test*",
            "*note: the test is not run again to find its sites: its module-scoped fixture "
            "'weight' was torn down after it*",
        ],
    )


def test_outlive_sites_option_is_checked(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("--graphleak", "--graphleak-outlive-sites=always")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*graphleak-outlive-sites*'always'*"])


@needs_torch
def test_census_tells_tensors_grown_in_place_from_new_ones() -> None:
    """Direct: an old tensor whose graph the test extended in place (``+=`` on a tensor
    with no graph, or with an older one) is the test's and said to be grown in place; a
    tensor the test made is not; a graph made in a check inside the test is the check's."""
    w = torch.ones(2, requires_grad=True)
    fresh_total = torch.zeros(())
    chained = (w * 1).sum()  # a graph older than the test
    during_check = torch.zeros(())
    census = Census()
    assert census.begin()
    fresh_total += (w * 2).sum()
    chained += (w * 3).sum()
    made = (w * 4).sum()
    with session.check_span():
        during_check += (w * 5).sum()
    assert census.finish()
    assert [census.made_during(t) for t in (fresh_total, chained, made, during_check, w)] == [
        True,
        True,
        True,
        False,
        False,
    ]
    assert [census.grown_in_place(t) for t in (fresh_total, chained, made)] == [
        True,
        True,
        False,
    ]


# Weights that parametrizations recompute in a forward pre-hook (old weight_norm,
# spectral_norm, prune): one small graph per layer, replaced at each forward.
PARAMETRIZED = """
import unittest
import warnings

import torch
import torch.nn.utils.prune as prune

warnings.simplefilter("ignore", FutureWarning)  # torch.nn.utils.weight_norm is deprecated

WN = torch.nn.utils.weight_norm(torch.nn.Linear(4, 1))
SN = torch.nn.utils.spectral_norm(torch.nn.Linear(4, 1))
GRU = torch.nn.utils.weight_norm(torch.nn.GRU(4, 4), name="weight_hh_l0")  # in _flat_weights too
PR = torch.nn.Linear(4, 1)
prune.l1_unstructured(PR, name="weight", amount=0.5)
KEEP = []


def test_weight_norm_step():
    WN(torch.randn(8, 4)).pow(2).mean().backward()


def test_spectral_norm_step():
    SN(torch.randn(8, 4)).pow(2).mean().backward()


def test_pruned_step():
    PR(torch.randn(8, 4)).pow(2).mean().backward()


def test_weight_normed_gru_step():
    GRU(torch.randn(3, 2, 4))[0].pow(2).mean().backward()


def test_keeps_a_loss_of_the_weight_norm_model():
    KEEP.append(WN(torch.randn(8, 4)).pow(2).mean())


class TestGenerator(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gen = torch.nn.Sequential(torch.nn.utils.spectral_norm(torch.nn.Linear(4, 4)),
                                      torch.nn.Tanh())

    def test_forward_backward(self):
        self.gen(torch.randn(8, 4)).pow(2).mean().backward()
"""


@needs_torch
def test_weights_recomputed_by_forward_pre_hooks_are_not_findings(
    pytester: pytest.Pytester,
) -> None:
    """Issue 33 item 5: a model with weight_norm, spectral_norm or prune in a module global
    or a setUpClass attribute is no finding; a loss kept in a list still is."""
    pytester.makepyfile(test_parametrized=PARAMETRIZED)
    result = pytester.runpytest_subprocess(
        "--graphleak", "-p", "no:randomly", "--graphleak-outlive=fail"
    )
    result.assert_outcomes(passed=6, errors=1)
    said_in_order(
        result.stdout.str(),
        [
            "ERROR test_parametrized.py::test_keeps_a_loss_of_the_weight_norm_model*",
        ],
    )
    assert "Linear.weight" not in result.stdout.str() and "_flat_weights" not in result.stdout.str()


@needs_torch
def test_recomputed_attributes_need_a_hook_that_names_them_and_a_parameter_graph() -> None:
    """Direct: the attribute is skipped only when a forward pre-hook carries its name and
    its graph reaches nothing but the module's own parameters."""
    from pytest_graphleak.probes.autograd.torch_modules import recomputed_attributes

    class Scale(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.raw = torch.nn.Parameter(torch.ones(2))

    def recompute(name: str) -> Callable[[Scale, object], None]:
        def hook(module: Scale, args: object) -> None:  # carries the name, as a user's would
            setattr(module, name, module.raw * 2)

        return hook

    def forward_pre_hooks(module: torch.nn.Module) -> None:
        for hook in list(module._forward_pre_hooks.values()):
            hook(module, ())

    own = Scale()
    own.register_forward_pre_hook(recompute("scaled"))
    forward_pre_hooks(own)
    assert recomputed_attributes(own) == {"scaled"}

    fed = Scale()  # the graph reaches a tensor that is not the module's parameter
    other = torch.ones(2, requires_grad=True)
    fed.register_forward_pre_hook(
        lambda module, args, name="scaled": setattr(module, name, module.raw * other)
    )
    forward_pre_hooks(fed)
    assert recomputed_attributes(fed) == set()

    unnamed = Scale()  # no hook names the attribute
    unnamed.scaled = unnamed.raw * 2
    assert recomputed_attributes(unnamed) == set()


MISSED = """
import contextvars

import numpy as np
import minigrad as mg

OBJ_ARR = np.empty((2, 2), dtype=object)
CV = contextvars.ContextVar("last_loss")


def _loss():
    return (mg.Tensor([1.0, 2.0], requires_grad=True) * 2).sum()


def test_numpy_object_array():
    OBJ_ARR[1, 0] = _loss()


def test_contextvar():
    CV.set(_loss())


def test_contextvar_with_a_plain_number():
    CV.set(_loss().item())
"""


def test_graphs_in_numpy_object_arrays_and_contextvars_are_named(
    pytester: pytest.Pytester,
) -> None:
    """Issue 33 item 9: a module-level numpy object array and a ContextVar's value (in the
    context the test ran in) are holders like any other."""
    pytester.makepyfile(test_missed=MISSED)
    result = pytester.runpytest("--graphleak", "-p", "no:randomly")
    result.assert_outcomes(passed=3, warnings=2)
    assert len(_outlive_warnings(result)) == 2
    warned = [line for line in result.outlines if line.startswith("test_missed.py::")]
    assert warned == [
        "test_missed.py::test_numpy_object_array",  # pytest's, over each
        "test_missed.py::test_contextvar",
    ]
    said_in_order(
        result.stdout.str(),
        [
            "*held by: global 'test_missed.OBJ_ARR' -> ndarray(shape=(2, 2), dtype=object) -> "
            "Tensor*",
        ],
    )
    # the report's row, its lines joined (the terminal wraps at its width)
    assert (
        "WARNING test_missed.py::test_numpy_object_array outlived the test: list-accumulation"
    ) in folded(result.stdout.str())
    said_in_order(
        result.stdout.str(),
        [
            "*held by: global 'test_missed.CV' -> ContextVar('last_loss').get() -> Tensor*",
        ],
    )


KEPT_CACHE = """
import minigrad as mg

CACHE = {}


def embed(n):
    if n not in CACHE:
        CACHE[n] = mg.Tensor([float(n)], requires_grad=True) * 2
    return CACHE[n]
"""


@pytest.mark.parametrize(
    "keep",
    [
        "mypkg.cache.CACHE,test_classattr.TestModel.cache",
        "mypkg.cache.CAC?E,test_classattr.TestModel.*",  # patterns resolve to objects too
    ],
)
def test_keep_list_matches_the_holder_object_whatever_alias_reaches_it(
    pytester: pytest.Pytester, keep: str
) -> None:
    """Issue 33 item 6: the class attribute is also reached through its module global, the
    cache through another module's `from mypkg.cache import CACHE`; both are listed."""
    pytester.mkpydir("mypkg")
    pytester.path.joinpath("mypkg", "cache.py").write_text(KEPT_CACHE)
    pytester.makepyfile(
        test_classattr="""
        import minigrad as mg

        class TestModel:
            cache = []  # kept on purpose

            def test_class_attr(self):
                self.cache.append(mg.Tensor([1.0], requires_grad=True) * 2)
        """,
        test_fromimport="""
        from mypkg.cache import CACHE, embed

        def test_uses_cache():
            embed(3)
            assert 3 in CACHE
        """,
        test_modimport="""
        import mypkg.cache as c

        def test_uses_cache2():
            c.embed(5)
        """,
    )
    result = pytester.runpytest(
        "--graphleak", "-p", "no:randomly", f"--graphleak-outlive-keep={keep}"
    )
    result.assert_outcomes(passed=3)
    assert not _outlive_warnings(result)
    # the control: without the list, all three are named
    result = pytester.runpytest("--graphleak", "-p", "no:randomly")
    result.assert_outcomes(passed=3, warnings=3)


def test_keep_names_resolve_without_imports_or_computed_attributes() -> None:
    """Direct: a keep entry is looked up in sys.modules and in attributes already set: no
    import, no module ``__getattr__``, no property."""
    import sys

    from pytest_graphleak.outlive.roots import resolve_name

    calls: list[str] = []
    module = FakeModule("graphleak_keep_probe")
    module.__getattr__ = lambda name: calls.append(name)  # type: ignore[method-assign]

    class Box:
        items: ClassVar[list[int]] = []
        mine: dict[str, object]  # set on BOX below

        @property
        def computed(self) -> list[int]:
            calls.append("computed")
            return []

    module.Box = Box
    module.BOX = Box()
    module.BOX.mine = {}
    sys.modules[module.__name__] = module
    try:
        assert resolve_name("graphleak_keep_probe.Box.items") == [Box.items]
        assert resolve_name("graphleak_keep_probe.BOX.mine") == [module.BOX.mine]
        assert resolve_name("graphleak_keep_probe.BOX.computed") == []
        assert resolve_name("graphleak_keep_probe.LAZY") == []
        assert resolve_name("graphleak_keep_probe.B*") == [Box, module.BOX]
        assert resolve_name("graphleak_not_imported.CACHE") == []
        assert "graphleak_not_imported" not in sys.modules
        assert resolve_name("state") == []  # a fixture's name: matched by name
        assert calls == []
    finally:
        del sys.modules[module.__name__]


CLASS_FIXTURES = """
import unittest

import pytest
import minigrad as mg


def loss():
    return (mg.Tensor([1.0, 2.0], requires_grad=True) * 2).sum()


@pytest.fixture(scope="class")
def history(request):
    request.cls.history = []
    yield
    request.cls.history.clear()


@pytest.mark.usefixtures("history")
class TestSeq:
    def test_first(self):
        self.history.append(loss())

    def test_second(self):
        self.history.append(loss())


@pytest.fixture(scope="class")
def hist2():
    h = []
    yield h
    h.clear()


class TestSeq2:
    def test_first(self, hist2):
        hist2.append(loss())

    def test_second(self, hist2):
        hist2.append(loss())


class TestUnittest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.history = []

    @classmethod
    def tearDownClass(cls):
        cls.history.clear()

    def test_first(self):
        self.history.append(loss())

    def test_second(self):
        self.history.append(loss())


@pytest.fixture(scope="class")
def kept(request):
    request.cls.kept = []
    yield  # not cleared: the class attribute keeps the graphs after the class


@pytest.mark.usefixtures("kept")
class TestKeeps:
    def test_first(self):
        self.kept.append(loss())

    def test_second(self):
        self.kept.append(loss())
"""


def test_request_cls_attributes_are_judged_at_the_class_fixtures_teardown(
    pytester: pytest.Pytester,
) -> None:
    """Issue 33 item 5: a class-scoped fixture's request.cls attributes (and setUpClass's)
    are that fixture's while it lives, as its yielded value is: cleared at its teardown,
    nothing is named; left filled, they are named then, with the test that filled them."""
    pytester.makepyfile(test_cls=CLASS_FIXTURES)
    result = pytester.runpytest_subprocess("--graphleak", "-p", "no:randomly")
    result.assert_outcomes(passed=8, warnings=1)
    found = _outlive_warnings(result)
    assert len(found) == 1, found
    said_in_order(
        result.stdout.str(),
        [
            "*graphleak: fixture 'kept' (class scope) of test_cls.py::TestKeeps kept autograd "
            "graphs alive after its teardown: list-accumulation*",
            # the last test's graph is the fixture's too, as the first's: one finding, whichever
            # test of the class ran last (issue 42 item 4)
            "*made during test_cls.py::TestKeeps::test_first and "
            "test_cls.py::TestKeeps::test_second, still alive at the teardown of "
            "fixture 'kept' (class scope)",
            "*held by: class attribute 'TestKeeps.kept' (set by fixture 'kept') -> list(len=2) -> "
            "Tensor*",
            "*note: fixture 'kept' still kept it after its own teardown code ran*",
        ],
    )
    assert "left autograd graphs alive after its teardown" not in folded(result.stdout.str())
    result = pytester.runpytest_subprocess(
        "--graphleak", "-p", "no:randomly", "--graphleak-outlive=fail"
    )
    result.assert_outcomes(passed=8, errors=1)
    said_in_order(result.stdout.str(), ["ERROR test_cls.py::TestKeeps::test_second*"])


SESSION_VALUE = """
import pytest
import minigrad as mg


def loss():
    return (mg.Tensor([1.0, 2.0], requires_grad=True) * 2).sum()


@pytest.fixture(scope="session")
def store():
    return {}


@pytest.fixture(scope="session")
def cleared():
    box = []
    yield box
    box.clear()


@pytest.fixture(scope="session")
def own():
    return {"mine": loss()}  # a graph the fixture made at its own setup: not a test's


@pytest.fixture(scope="session")
def model():
    return mg.nn.Linear(2, 1)


def test_stores(store, cleared, own, model):
    store["loss"] = loss()
    cleared.append(loss())
    opt = mg.optim.SGD(model.parameters(), lr=0.1)  # a session model's parameters: leaves
    model(mg.Tensor([[1.0, 2.0]])).sum().backward()
    opt.step()


def test_reads(store, cleared, own):
    assert store["loss"].grad_fn is not None and cleared


def test_last():
    pass
"""

MODULE_VALUE = """
import pytest
import minigrad as mg


@pytest.fixture(scope="module")
def store():
    return {}


def test_only(store):  # the module's last test: the fixture is torn down in its teardown
    store["loss"] = (mg.Tensor([1.0, 2.0], requires_grad=True) * 2).sum()
"""


def test_graph_kept_in_a_session_fixtures_value_is_named_at_its_teardown(
    pytester: pytest.Pytester,
) -> None:
    """Issue 33 item 9: a session fixture's dict that a test stored a graph into still
    holds it when the fixture is torn down (the last test's teardown): named then, with the
    test that stored it. A fixture that clears its list there, a graph the fixture made
    itself and a session model's parameters are not named."""
    pytester.makepyfile(test_session_value=SESSION_VALUE)
    result = pytester.runpytest("--graphleak", "-p", "no:randomly")
    # torn down in test_last's teardown, which did not request it: the session's finding
    result.assert_outcomes(passed=3)
    said_in_order(
        result.stdout.str(),
        [
            "*= graphleak: fixture findings, on no test =*",
            "graphleak: fixture 'store' (session scope) kept autograd graphs alive after its "
            "teardown (outlive)",
            "*1 graph-carrying tensor (* graph nodes) made during "
            "test_session_value.py::test_stores, "
            "still alive at the teardown of fixture 'store' (session scope)",
            "*held by: fixture 'store' (session scope) -> dict?'loss'? -> Tensor*",
        ],
    )
    assert "'cleared'" not in result.stdout.str() and "'own'" not in result.stdout.str()
    # the test that stored it is the last one of the fixture's scope: judged in its own
    # teardown, before pytest drops the value
    pytester.makepyfile(test_module_value=MODULE_VALUE)
    result = pytester.runpytest("--graphleak", "-p", "no:randomly", "test_module_value.py")
    result.assert_outcomes(passed=1, warnings=1)
    said_in_order(
        result.stdout.str(),
        [
            "*made during test_module_value.py::test_only, still alive at the teardown of fixture "
            "'store' (module scope)",
            "*held by: fixture 'store' (module scope) -> dict?'loss'? -> Tensor*",
            "*note: fixture 'store' still kept it after its own teardown code ran*",
        ],
    )


@needs_torch
def test_rerun_names_the_line_that_made_the_kept_graph_not_only_the_storing_one(
    pytester: pytest.Pytester,
) -> None:
    """``TOTAL += loss`` keeps a graph most of whose nodes the forward made: the re-run
    names the forward's line (most nodes first), then the ``+=`` line."""
    pytester.makepyfile(
        test_total="""
        import torch

        TOTAL = torch.zeros(())
        MODEL = torch.nn.Sequential(*[torch.nn.Linear(3, 3) for _ in range(6)])


        def _loss(batch):
            return MODEL(batch).pow(2).mean()


        def test_adds_to_global_total():
            global TOTAL
            TOTAL += _loss(torch.ones(2, 3))
        """
    )
    result = pytester.runpytest_subprocess(
        "--graphleak", "--graphleak-outlive-sites=rerun", "-p", "no:randomly"
    )
    result.assert_outcomes(passed=1, warnings=1)
    said_in_order(
        result.stdout.str(),
        [
            "*WARNING *test_adds_to_global_total*outlived the test*",
            "*created at: test_total.py:8 in _loss: return MODEL(batch).pow(2).mean()  (* of "
            "the kept tensors and nodes)",
            "*created at: test_total.py:13 in test_adds_to_global_total: TOTAL += _loss(*",
            "*stored at: test_total.py:13 in test_adds_to_global_total: TOTAL += _loss(*",
        ],
    )

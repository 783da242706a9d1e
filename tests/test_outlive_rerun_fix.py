"""The outlive audit's re-run mode tries its fixes (issue 44): each candidate change is
swapped into the user's function in memory and the whole test runs once more with its
fixtures; the fix prints as verified only when that run left no graph alive, and a
change that raised or left the graph alive is never printed.

In-process pytester runs (minigrad only); minigrad imported here so that an in-process
run does not load numpy a second time.
"""

from __future__ import annotations

import json

import jsonschema
import pytest
from suite_helpers import FAST, JsonDoc, folded, said_in_order

import minigrad  # noqa: F401  # loaded once, before the in-process runs
from pytest_graphleak.report.json_doc import load_schema
from pytest_graphleak.result import CheckResult
from pytest_graphleak.words import verify as why

pytest_plugins = ["pytester"]

SUITE = """\
import pytest
import minigrad as mg

history = []
needed = []
kept = []


@pytest.fixture(scope="module")
def weight():
    return mg.Tensor([1.0, 2.0], requires_grad=True)


def test_appends_loss(weight):
    loss = (weight * 2).sum()
    history.append(loss)


def test_needs_the_graph(weight):
    loss = (weight * 3).sum()
    needed.append(loss)
    assert needed[-1].grad_fn is not None


@pytest.fixture(scope="module")
def store():
    return []


def test_fill(store):
    store.append((mg.Tensor([1.0], requires_grad=True) * 5).sum())


def test_last_user_of_weight(weight):
    kept.append(weight * 4)
"""

RERUN = ("--graphleak", "--graphleak-outlive-sites=rerun", *FAST)


def _fix_of(document: JsonDoc, test: str) -> JsonDoc:
    row = next(row for row in document["tests"] if row["nodeid"].endswith(test))
    fix: JsonDoc = row["checks"][0]["diagnosis"]["fix"]
    return fix


def test_the_rerun_prints_only_the_fix_that_held(pytester: pytest.Pytester) -> None:
    path = pytester.makepyfile(test_suite=SUITE)
    before = path.read_bytes()
    result = pytester.runpytest_subprocess(*RERUN, "--graphleak-report=out.json")
    result.assert_outcomes(passed=4, warnings=3)
    out = result.stdout.str()
    said_in_order(
        out,
        [
            "*test_appends_loss*outlived the test*",
            "*stored at: test_suite.py:16 in test_appends_loss: history.append(loss)*",
            "*fix (verified: one more run of the test with this change left no graph alive): "
            "test_suite.py:16: history.append(loss.item())",
        ],
    )
    # every change needs_the_graph's assert breaks, or leaves the graph: none printed
    said_in_order(
        out,
        [
            "*test_needs_the_graph*outlived the test*",
            "*fix (not verified): * (none of the * changes tried held: * could not run or raised*",
        ],
    )
    assert "needed.append(loss.item())" not in folded(out)
    assert "needed.append(loss.detach())" not in folded(out)
    # the last user of a module fixture is not run again: no change tried, and why
    said_in_order(
        out,
        [
            "*test_last_user_of_weight*outlived the test*",
            f"*fix (not verified): * ({why.not_rerun('its module-scoped fixture')}*",
        ],
    )
    # a graph judged at a module fixture's teardown has no test to run again
    said_in_order(
        out,
        [
            "*fixture 'store' (module scope) of test_suite.py kept autograd graphs alive*",
            f"*fix (not verified): * ({why.FIXTURE_TEARDOWN})",
        ],
    )
    assert path.read_bytes() == before  # no file written
    document = json.loads((pytester.path / "out.json").read_text())
    jsonschema.validate(document, load_schema())
    held = _fix_of(document, "test_appends_loss")
    assert (held["verified"], held["runs"], held["steps"]) == (True, 1, 0), held
    assert "+    history.append(loss.item())" in held["diff"], held
    failed = _fix_of(document, "test_needs_the_graph")
    assert not failed["verified"] and failed["diff"] is None, failed
    row = next(r for r in document["tests"] if r["nodeid"].endswith("test_appends_loss"))
    read = CheckResult.from_dict(row["checks"][0]).diagnosis
    assert read is not None and read.fix_tried is not None and read.fix_tried.runs == 1


def test_verification_off_tries_no_change_in_the_rerun(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess(*RERUN, "--graphleak-verify-fix=off")
    result.assert_outcomes(passed=4, warnings=3)
    out = folded(result.stdout.str())
    # the two tests that are run again (the third is refused, the fixture's has no test)
    assert out.count(f"({why.OFF})") == 2, out
    assert "fix (verified" not in out

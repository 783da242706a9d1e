"""Every way a checked step can end is reported (issue 13, item 5): ``pytest.fail()``,
``SystemExit``, a pytest-timeout at step k and a raising ``track()`` block each get the
"raised at step k" note and a row in the JSON report, as an ``assert`` does; a failed
subtest makes the JSON say "failed" as pytest does; ``--graphleak-warn-only`` keeps a
known leak under ``xfail(strict=True)`` an expected failure instead of an XPASS(strict).

Subprocess runs (``runpytest_subprocess``): the exit code is part of what is tested.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from suite_helpers import FAST

pytest.importorskip("minigrad")


ENDINGS = """
import sys
import time
import pytest
import minigrad as mg

CALLS = {}

def count(name):
    CALLS[name] = CALLS.get(name, 0) + 1
    return CALLS[name]

def forward():
    w = mg.Tensor([1.0, 2.0], requires_grad=True)
    return (w * 3.0).sum()

@pytest.mark.no_graph_growth(steps=6, warmup=1)
def test_fail_traced():
    forward().backward()
    if count("traced") == 4:
        pytest.fail("fail at step 4")

@pytest.mark.no_graph_growth(steps=6, warmup=1)
def test_fail_untraced():
    if count("untraced") == 3:
        pytest.fail("plain fail at step 3", pytrace=False)

@pytest.mark.no_graph_growth(steps=6, warmup=1)
def test_system_exit():
    if count("exit") == 5:
        sys.exit(7)

@pytest.mark.timeout(0.5, method="signal")
@pytest.mark.no_graph_growth(steps=6, warmup=1)
def test_timeout():
    if count("timeout") == 3:
        time.sleep(5)

def test_track_block_raises(graphleak):
    with graphleak.track(warmup=1) as t:
        for i in range(1, 6):
            forward().backward()
            if i == 4:
                raise RuntimeError("broke inside the loop")
            t.step()

def test_track_block_fails(graphleak):
    with graphleak.track(warmup=1) as t:
        for i in range(1, 6):
            if i == 3:
                pytest.fail("failed inside the loop")
            t.step()
"""


def _checks(path: Any) -> dict[str, dict[str, Any]]:
    document = json.loads(path.read_text())
    return {
        check["name"]: {**check, "outcome": test["outcome"], "status": test["status"]}
        for test in document["tests"]
        for check in test["checks"]
    }


def test_fail_exit_timeout_and_raising_track_get_a_note_and_a_row(
    pytester: pytest.Pytester,
) -> None:
    pytest.importorskip("pytest_timeout")
    pytester.makepyfile(test_endings=ENDINGS)
    result = pytester.runpytest_subprocess(*FAST, "--graphleak", "--graphleak-report=r.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=6)
    out = result.stdout.str()
    # pytest.fail(pytrace=False) shows only its message: the note is part of it
    assert "graphleak: raised at step 3 of 7 (measured step; warmup=1)" in out
    if sys.version_info >= (3, 11):  # exception notes are shown from 3.11 on
        for note in (
            "graphleak: raised at step 4 of 7 (measured step; warmup=1)",
            "graphleak: raised at step 5 of 7 (measured step; warmup=1)",
        ):
            assert note in out, note
    checks = _checks(pytester.path / "r.json")
    # The exception's own words, the step kept apart (never "at step 4 at step 4").
    errors = {
        name.split("::", 1)[1]: (check["error"], check["error_step"])
        for name, check in checks.items()
    }
    assert errors == {
        "test_fail_traced": ("Failed: fail at step 4", 4),
        "test_fail_untraced": ("Failed: plain fail at step 3", 3),
        "test_system_exit": ("SystemExit: 7", 5),
        "test_timeout": errors["test_timeout"],
        "test_track_block_raises::track(1)": ("RuntimeError: broke inside the loop", 4),
        "test_track_block_fails::track(1)": ("Failed: failed inside the loop", 3),
    }
    assert errors["test_timeout"][0].startswith("Failed: Timeout"), errors["test_timeout"]
    assert errors["test_timeout"][1] == 3, errors["test_timeout"]
    # The user's line the exception came from (file:line and code) is kept too.
    site = checks["test_endings.py::test_fail_traced"]["error_site"]
    assert site["line"] == 'pytest.fail("fail at step 4")'
    assert site["function"] == "test_fail_traced"
    for name, check in checks.items():
        assert check["status"] == "error", name
        assert check["outcome"] == "failed", name
        assert check["leaked"] is False, name
    result.stdout.fnmatch_lines(
        ["graphleak: 6 tests with results: 6 error; 6 audited for graphs that outlive them"]
    )


RAISES = """
import pytest

@pytest.mark.no_graph_growth(steps=4, warmup=1)
def test_raises():
    raise ValueError("bad batch")

def test_plain():
    pass
"""


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one process", "xdist"])
def test_a_raising_step_reads_failed_as_pytest_counts_it(
    pytester: pytest.Pytester, workers: tuple[str, ...]
) -> None:
    """Counted "1 failed" by pytest, the short summary and the progress word say FAILED
    with the step's exception (the contract), never ERROR, which pytest keeps for a
    setup or teardown; the report section's row says why there is no verdict."""
    if workers:
        pytest.importorskip("xdist")
    pytester.makepyfile(test_raise=RAISES)
    flags = (*FAST, *workers) if not workers else ("-p", "no:randomly", *workers)
    result = pytester.runpytest_subprocess(*flags, "--graphleak", "-rA", "-v")
    result.assert_outcomes(failed=1, passed=1)
    out = result.stdout.str()
    assert "FAILED test_raise.py::test_raises - ValueError: bad batch" in out, out
    assert "ERROR test_raise.py::test_raises -" not in out, out
    result.stdout.fnmatch_lines(["ERROR  test_raise.py::test_raises", "*step raised: ValueError:*"])


SUBTESTS = """
import pytest

N = {"n": 0}

@pytest.mark.no_graph_growth(steps=5, warmup=1)
def test_subtest_fails_at_step_4(subtests):
    N["n"] += 1
    with subtests.test(step=N["n"]):
        assert N["n"] != 4
"""


def test_a_failed_subtest_reads_as_failed_in_the_json(pytester: pytest.Pytester) -> None:
    pytest.importorskip("_pytest.subtests")  # pytest 9 has subtests built in
    pytester.makepyfile(test_sub=SUBTESTS)
    result = pytester.runpytest_subprocess(*FAST, "--graphleak", "--graphleak-report=r.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["FAILED test_sub.py::test_subtest_fails_at_step_4*"])
    (check,) = _checks(pytester.path / "r.json").values()
    assert check["outcome"] == "failed"
    assert check["leaked"] is False


KNOWN_LEAKS = """
import pytest
import minigrad as mg

KEEP = []

def leak():
    KEEP.append(mg.Tensor([1.0], requires_grad=True) * 2.0)

@pytest.mark.xfail(reason="known leak", strict=True)
@pytest.mark.no_graph_growth(steps=6, warmup=1)
def test_known_leak_strict():
    leak()

@pytest.mark.xfail(reason="known leak")
@pytest.mark.no_graph_growth(steps=6, warmup=1)
def test_known_leak_lenient():
    leak()

@pytest.mark.xfail(reason="known leak", strict=True)
def test_known_leak_fixture(graphleak):
    graphleak.check(leak, steps=6, warmup=1)

@pytest.mark.no_graph_growth(steps=6, warmup=1)
def test_new_leak():
    leak()
"""


def test_warn_only_keeps_a_strict_xfail_leak_expected(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_known=KNOWN_LEAKS)
    result = pytester.runpytest_subprocess(
        *FAST, "--graphleak", "--graphleak-warn-only", "--graphleak-report=r.json", "-rA"
    )
    # The known leaks are the expected failures; the new one only warns: the run is green.
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.assert_outcomes(xfailed=3, passed=1, warnings=1)
    out = result.stdout.str()
    assert "XPASS" not in out
    assert "LEAKED" not in out
    checks = _checks(pytester.path / "r.json")
    statuses = {name.split("::")[1]: check["status"] for name, check in checks.items()}
    assert statuses == {
        "test_known_leak_strict": "xfailed",
        "test_known_leak_lenient": "xfailed",
        "test_known_leak_fixture": "xfailed",
        "test_new_leak": "warned",
    }


def test_runxfail_with_warn_only_warns_as_usual(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_known=KNOWN_LEAKS)
    result = pytester.runpytest_subprocess(
        *FAST, "--graphleak", "--graphleak-warn-only", "--runxfail", "-k", "strict or new"
    )
    # --runxfail: xfail marks are ignored, so the known leak is an ordinary warn-only leak
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.assert_outcomes(passed=2, warnings=2)


XFAIL_RAISES = """
import pytest
import minigrad as mg

KEEP = []

def leak():
    KEEP.append(mg.Tensor([1.0], requires_grad=True) * 2.0)

@pytest.mark.xfail(raises=AssertionError, strict=True)
@pytest.mark.no_graph_growth(steps=6, warmup=1)
def test_admits_an_assertion():
    leak()

@pytest.mark.xfail(raises=(KeyError, AssertionError), strict=True)
@pytest.mark.no_graph_growth(steps=6, warmup=1)
def test_admits_it_in_a_tuple():
    leak()

@pytest.mark.xfail(raises=KeyError)
@pytest.mark.no_graph_growth(steps=6, warmup=1)
def test_expects_another_error():
    leak()
"""


def test_warn_only_follows_the_xfail_raises_argument(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_raises=XFAIL_RAISES)
    result = pytester.runpytest_subprocess(*FAST, "--graphleak", "--graphleak-warn-only")
    # raises= admitting an AssertionError makes the leak the expected failure; raises=KeyError
    # does not, so the leak only warns and the (non-strict) xfail test passes: XPASS.
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.assert_outcomes(xfailed=2, xpassed=1, warnings=1)

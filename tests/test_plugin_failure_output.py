"""What pytest prints for a marked or fixture check: a failing subtest once, not once per
step; ``--tb=line`` one line per leak at the user's line; the fixture refuses a step whose
call would not run its body. In-process pytester runs (no exit code or encoding tested)."""

from __future__ import annotations

import pytest

pytest.importorskip("minigrad")

_LEAKY = """
import pytest
import minigrad as mg
w = mg.Tensor([1.0, 2.0], requires_grad=True)
kept = []

@pytest.mark.no_graph_growth(steps=4, warmup=1)
def test_marked():
    kept.append((w * w).sum())

def test_fixture(graphleak):
    graphleak.check(lambda: kept.append((w * w).sum()), steps=4, warmup=1)
"""


def test_tb_line_prints_one_line_per_leak_at_the_users_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_tb=_LEAKY)
    result = pytester.runpytest("--graphleak", "--tb=line", "-p", "no:randomly")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert "series (warmup | measured)" not in out and "pattern:" not in out
    failures = out.split("= FAILURES =")[1].split("= graphleak")[0].strip("= \n").splitlines()
    assert [line.split(": ")[0].rsplit("/", 1)[-1] for line in failures] == [
        "test_tb.py:6", "test_tb.py:11",  # the marker, the graphleak.check call
    ]  # fmt: skip
    assert all("list-accumulation" in line for line in failures)


def test_a_failing_subtest_is_reported_once(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_sub="""
        import pytest

        @pytest.mark.no_graph_growth(steps=4, warmup=1)
        def test_parts(subtests):
            with subtests.test(msg="wrong"):
                assert 1 == 2
            with subtests.test(msg="right"):
                pass
    """)
    if not hasattr(pytest, "Subtests"):
        pytest.skip("pytest < 9 has no subtests fixture")
    result = pytester.runpytest("--graphleak", "-p", "no:randomly")
    out = result.stdout.str()
    assert out.count("SUBFAILED[wrong]") == 1, out
    assert "contains 1 failed subtest" in out


def test_the_fixture_refuses_async_and_generator_steps(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_kinds="""
        async def run():
            pass

        def gen():
            yield

        def test_async(graphleak):
            graphleak.check(run)

        def test_generator(graphleak):
            graphleak.check(gen)
    """)
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "*graphleak.check(step) in test_kinds.py::test_async: step is an async function*",
        "*graphleak.check(step) in test_kinds.py::test_generator: step is a generator function*",
    ])  # fmt: skip

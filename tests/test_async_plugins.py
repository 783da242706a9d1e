"""A marked ``async def`` test under an async test plugin is checked as steps (each step
runs the coroutine once), or fails saying it was not checked: never a silent pass.
anyio's plugin ran the coroutine itself, once, and the test passed with 0 checked."""

from __future__ import annotations

import importlib.util

import pytest

pytest.importorskip("minigrad")

_STEPS = """
import pytest
import minigrad as mg
w = mg.Tensor([1.0, 2.0], requires_grad=True)
kept = []

{setup}

{mark}
@pytest.mark.no_graph_growth(steps=5, warmup=2)
async def test_leaky({args}):
    kept.append((w * w).sum())

{mark}
@pytest.mark.no_graph_growth(steps=5, warmup=2)
async def test_clean({args}):
    (w * w).sum().backward()
    w.grad = None
"""


def _installed(*modules: str) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


def _run(
    pytester: pytest.Pytester, source: str, *modules: str, plugin: str | None = None
) -> pytest.RunResult:
    """Run ``source`` with the async test plugin ``plugin`` turned back on (the suite's
    conftest turns pytest-trio and anyio off in the pytest runs tests start)."""
    missing = _installed(*modules)
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")
    pytester.makepyfile(test_async_steps=source)
    enable = ["-p", plugin] if plugin is not None else []
    return pytester.runpytest("--graphleak", "-p", "no:randomly", *enable)


def _backends() -> list[str]:
    return ["asyncio", *(["trio"] if importlib.util.find_spec("trio") else [])]


def test_anyio_tests_are_checked_on_each_backend(pytester: pytest.Pytester) -> None:
    setup = f"""
@pytest.fixture(params={_backends()!r})
def anyio_backend(request):
    return request.param

@pytest.fixture
async def ready(anyio_backend):  # an async fixture: set up once, on anyio's runner
    import anyio
    await anyio.sleep(0)
    yield 1
"""
    source = _STEPS.format(setup=setup, mark="@pytest.mark.anyio", args="ready")
    result = _run(pytester, source, "anyio", plugin="anyio")
    backends = len(_backends())
    result.assert_outcomes(passed=backends, failed=backends)
    result.stdout.fnmatch_lines(
        [f"graphleak: {2 * backends} tests with results: {backends} leaked*"]
    )
    result.stdout.fnmatch_lines(["*test_leaky?asyncio? - list-accumulation*"])


def test_pytest_trio_tests_are_checked(pytester: pytest.Pytester) -> None:
    source = _STEPS.format(setup="", mark="@pytest.mark.trio", args="")
    result = _run(pytester, source, "trio", "pytest_trio", plugin="trio")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_leaky - list-accumulation*"])


def test_pytest_asyncio_tests_are_checked(pytester: pytest.Pytester) -> None:
    source = _STEPS.format(setup="", mark="@pytest.mark.asyncio", args="")
    result = _run(pytester, source, "pytest_asyncio")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_leaky - list-accumulation*"])


def test_a_plugin_that_runs_the_coroutine_itself_fails_the_test(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        import asyncio, inspect, pytest

        @pytest.hookimpl(tryfirst=True)
        def pytest_pyfunc_call(pyfuncitem):  # as an async plugin would: once, first
            if inspect.iscoroutinefunction(pyfuncitem.obj):
                asyncio.run(pyfuncitem.obj())
                return True
    """)
    pytester.makepyfile(
        test_own_loop="""
        import pytest

        @pytest.mark.no_graph_growth
        async def test_step():
            pass
    """
    )
    result = pytester.runpytest("--graphleak", "-p", "no:randomly")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*no_graph_growth was not checked: an async test plugin ran*"])


def test_an_isolated_asyncio_test_case_method_is_refused(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_iso="""
        import unittest
        import pytest

        class Steps(unittest.IsolatedAsyncioTestCase):
            @pytest.mark.no_graph_growth
            async def test_step(self):
                pass
    """
    )
    result = pytester.runpytest("--graphleak", "-p", "no:randomly")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*no_graph_growth needs a plain (synchronous, non-generator)*"])

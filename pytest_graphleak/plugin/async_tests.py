"""Marked ``async def`` tests under the async test plugins: checked, or refused; never a
silent pass.

pytest-asyncio and pytest-trio turn a coroutine test into a plain function before
``pytest_pyfunc_call``, so the marker checks it as any test: each step runs the
coroutine to its end. anyio's plugin runs the coroutine in its own
``pytest_pyfunc_call``, which may come before the marker's, and then the test ran once,
unchecked ("0 checked"). For anyio the test function is swapped, for the call phase, for
a plain function that runs the coroutine once on anyio's test runner (the one its async
fixtures use), so each step is one run of the coroutine on the same event loop.

Any other plugin that runs a marked coroutine test itself leaves the test with no
graphleak result; ``unchecked_refusal`` turns that into a failure that says so.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Iterator
from typing import Any

import pytest


def _is_async(function: object) -> bool:
    return inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function)


@contextlib.contextmanager
def anyio_steps(item: pytest.Item) -> Iterator[None]:
    """While the call phase runs, an anyio coroutine test is a plain function that runs
    the coroutine once on anyio's test runner (the marker's check then calls it per step);
    nothing changes for any other test."""
    plugin = sys.modules.get("anyio.pytest_plugin")
    funcargs: dict[str, Any] = getattr(item, "funcargs", {})
    backend = funcargs.get("anyio_backend")
    original = getattr(item, "obj", None)
    if plugin is None or not backend or not inspect.iscoroutinefunction(original):
        yield
        return
    name, options = plugin.extract_backend_and_options(backend)
    with plugin.get_runner(name, options) as runner:

        def one_step(**kwargs: Any) -> None:
            __tracebackhide__ = True
            runner.run_test(original, kwargs)

        item.obj = one_step  # type: ignore[attr-defined]
        try:
            yield
        finally:
            item.obj = original  # type: ignore[attr-defined]


def unchecked_refusal(item: pytest.Item, marker: str) -> str:
    """The failure of a marked coroutine test that some plugin ran without the check."""
    return (
        f"{item.nodeid}: @pytest.mark.{marker} was not checked: an async test plugin ran "
        "this async test itself, once, before graphleak could run it as steps. "
        "graphleak checks async tests under pytest-asyncio, pytest-trio and anyio; "
        "otherwise check a plain step with the graphleak fixture "
        "(graphleak.check(lambda: asyncio.run(step())))"
    )


def is_async_test(item: pytest.Item) -> bool:
    return _is_async(getattr(item, "obj", None))

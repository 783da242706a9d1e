"""The ``no_graph_growth`` marker: its settings (validated at collection), its check of
the marked test's body as one step (a plain test, a unittest method, or on spawned
ranks with ``world_size=N``), and what a leak does (fail, or warn in warn-only mode
unless the test expects the failure). The fixture's checks share ``measure_and_record``
and ``check_on_ranks``."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from pytest_graphleak import distributed, patterns, pipeline
from pytest_graphleak.exceptions import GraphLeakError, GraphLeakWarning, OptionError
from pytest_graphleak.heap.usercode import is_pytest_module
from pytest_graphleak.plugin import terminal
from pytest_graphleak.plugin.stash import (
    ITEM_SETTINGS_KEY,
    MARKER,
    WORLD_SIZE_KEY,
    record,
    settings_of,
)
from pytest_graphleak.plugin.subtests_once import subtests_reported_once
from pytest_graphleak.report.text import render_text
from pytest_graphleak.result import CheckResult
from pytest_graphleak.settings import Settings
from pytest_graphleak.values import int_at_least

#: Fixture values never offered to the diagnosis as roots (pytest's own objects).
_INTERNAL_FIXTURES = frozenset({"request", "graphleak", "pytestconfig"})

MARKER_HELP = (
    "the test body is ONE training step. With --graphleak it is called warmup + steps "
    "times with the same fixture values and fails when alive tensors, graph nodes, cyclic "
    "garbage or memory keep growing; the failure names the pattern "
    f"({patterns.words_text()}). Without --graphleak the test runs once. "
    "world_size=N > 1: the test function is a step factory run on N torch.distributed "
    "ranks (gloo), each rank checked."
)


def marker_settings(item: pytest.Item, base: Settings) -> Settings | None:
    """Settings of a marked test (closest marker wins per keyword); None if unmarked.
    ``world_size`` is a marker-only keyword (no CLI/ini twin): it goes to the item's
    stash, not to the settings shared with the fixture."""
    markers = list(item.iter_markers(MARKER))
    if not markers:
        return None
    values: dict[str, object] = {}
    where = f"@pytest.mark.{MARKER} on {item.nodeid}"
    for marker in reversed(markers):  # farthest first, so the closest overrides
        if marker.args:
            raise OptionError(
                f"{where}: takes keyword arguments only (steps=, warmup=, ...), "
                f"got positional {', '.join(map(repr, marker.args))}"
            )
        values.update(marker.kwargs)
    world_size = values.pop("world_size", 1)
    try:
        world_size = int_at_least("world_size", world_size, 1)
    except OptionError as exc:
        raise OptionError(f"{where}: {exc}") from None
    item.stash[WORLD_SIZE_KEY] = world_size
    shown = ", ".join(f"{key}={value!r}" for key, value in values.items())
    return base.override(values, where=f"@pytest.mark.{MARKER}({shown}) on {item.nodeid}")


def refuse_async(item: pytest.Item, function: Callable[..., object]) -> None:
    __tracebackhide__ = True
    if (
        inspect.iscoroutinefunction(function)
        or inspect.isasyncgenfunction(function)
        or inspect.isgeneratorfunction(function)
    ):
        pytest.fail(
            f"{item.nodeid}: @pytest.mark.{MARKER} needs a plain (synchronous, "
            "non-generator) test function: its body is called as one training step. "
            "Move the step into a plain function, or use the graphleak fixture; an "
            "async def test function (not a unittest.IsolatedAsyncioTestCase method) is "
            "checked when an async test plugin runs it (pytest-asyncio, pytest-trio, "
            "anyio: @pytest.mark.anyio).",
            pytrace=False,
        )


def check_marked(
    item: pytest.Function,
    function: Callable[..., object],
    arguments: dict[str, object],
    settings: Settings,
    *,
    instance: object | None,
) -> None:
    """The marker's check: ``function(**arguments)`` is one step."""
    __tracebackhide__ = True
    funcargs = item.funcargs
    progress = terminal.Progress(item.config, settings.warmup + settings.steps)

    def step() -> None:
        progress.tick()
        outcome = function(**arguments)
        if inspect.isawaitable(outcome) or inspect.isgenerator(outcome):
            close = getattr(outcome, "close", None)
            if close is not None:
                close()
            raise TypeError(f"{item.nodeid} returned {type(outcome).__name__}")

    def roots() -> dict[str, object]:
        found: dict[str, object] = {
            f"fixture '{name}'": value
            for name, value in funcargs.items()
            if name not in _INTERNAL_FIXTURES and not is_pytest_module(type(value).__module__)
        }
        if instance is not None:
            found["self"] = instance
        return found

    exclude = (id(arguments), id(funcargs))
    with subtests_reported_once(funcargs, item.config):
        measure_and_record(item, step, settings, item.nodeid, roots, exclude, from_marker=True)


def check_marked_on_ranks(
    item: pytest.Function, settings: Settings, *, world_size: int, checking: bool
) -> None:
    """``@pytest.mark.no_graph_growth(world_size=N)``: the marked test function is each
    spawned rank's step factory; without ``--graphleak`` each rank runs it once, unjudged.
    It cannot take fixtures or be parametrized: fixture values live in this process."""
    __tracebackhide__ = True
    function = item.obj
    where = f"{item.nodeid}: @pytest.mark.{MARKER}(world_size={world_size})"
    fixtures = [n for n in getattr(item, "fixturenames", ()) if n != "request"]
    if getattr(item, "instance", None) is not None or hasattr(item, "callspec") or fixtures:
        pytest.fail(
            f"{where} runs the test function in spawned ranks, so it must be a module-level "
            "function without fixtures or parameters; use the graphleak fixture's "
            "check_distributed(step_factory) instead",
            pytrace=False,
        )
    path = str(Path(str(item.path)).resolve())
    ref = distributed.FactoryRef(function.__module__, path, function.__qualname__)
    if not checking:
        settings = dataclasses.replace(settings, steps=1, warmup=0, diagnose=False)
    check_on_ranks(item, ref, settings, judge=checking, world_size=world_size, name=item.nodeid)


def checks_marker(item: pytest.Item) -> bool:
    """A marked test that ``--graphleak`` checks in this process (not on spawned ranks)."""
    return (
        item.stash.get(ITEM_SETTINGS_KEY, None) is not None
        and item.stash.get(WORLD_SIZE_KEY, 1) == 1
        and settings_of(item.config).enabled
    )


def swap_unittest_method(item: pytest.Item) -> Any:
    """Put the checking wrapper in place of a marked TestCase method; the method it
    replaced, or None when nothing was swapped."""
    settings = item.stash.get(ITEM_SETTINGS_KEY, None)
    unittest = sys.modules.get("unittest")
    cls = getattr(item, "cls", None)
    if settings is None or unittest is None or not isinstance(item, pytest.Function):
        return None
    if not (isinstance(cls, type) and issubclass(cls, unittest.TestCase)):
        return None
    checking = settings_of(item.config).enabled
    world_size = item.stash.get(WORLD_SIZE_KEY, 1)
    if not checking and world_size == 1:
        return None  # checking is off: the method runs once, as unittest runs it
    method = item.obj
    instance = getattr(method, "__self__", None)

    def checked() -> None:
        __tracebackhide__ = True
        if world_size > 1:
            pytest.fail(
                f"{item.nodeid}: @pytest.mark.{MARKER}(world_size={world_size}) is not "
                "supported on unittest.TestCase methods (the ranks run a module-level "
                "step factory). Use a plain test function for the distributed check.",
                pytrace=False,
            )
        refuse_async(item, method)
        check_marked(item, method, {}, settings, instance=instance)

    # Keep what unittest reads from the method: @unittest.skip, @expectedFailure.
    functools.update_wrapper(checked, method)
    del checked.__wrapped__  # type: ignore[attr-defined]  # no reference to the instance
    item.obj = checked
    return method


def measure_and_record(
    item: pytest.Item,
    step: Callable[[], object],
    settings: Settings,
    name: str,
    roots: Callable[[], Mapping[str, object]],
    exclude: tuple[int, ...],
    *,
    from_marker: bool,
) -> CheckResult:
    """Check ``step``, record the result on the test, fail (or warn) on a leak."""
    __tracebackhide__ = True
    try:
        result = pipeline.measure(
            step, settings=settings, name=name, diagnose_step=step, roots=roots, exclude=exclude
        )
    except (pytest.skip.Exception, pytest.xfail.Exception):
        raise  # the test declared its own outcome (skip, xfail): pytest reports it
    except BaseException as exc:
        # Every way a step ends gets a row: an assert, pytest.fail(), SystemExit, a
        # pytest-timeout at step k, Ctrl-C.
        record(
            item, pipeline.error_result(name, steps=settings.steps, warmup=settings.warmup, exc=exc)
        )
        raise
    record(item, result)
    if result.known or not (result.leaked or result.unmeasured):
        return result
    if warns_instead(item, settings):
        terminal.warn_leak(item, result, GraphLeakWarning)
        return result
    # An unmeasured check fails too: "clean" with nothing measured is a silent pass.
    text = render_text(result, series=(item.config.getoption("verbose") or 0) > 0)  # -v: samples
    error = pipeline.failure(text, leaked=result.leaked, result=result)
    error.graphleak_plain = from_marker  # type: ignore[attr-defined]
    raise error


def warns_instead(item: pytest.Item, settings: Settings) -> bool:
    """Whether a leak warns rather than fails: warn-only mode, except in a test that is
    expected to fail (``xfail``), where the leak is that expected failure: warning
    would make the test pass and turn a strict xfail red as XPASS(strict)."""
    return settings.warn_only and not _expects_leak_failure(item)


def _expects_leak_failure(item: pytest.Item) -> bool:
    """True when pytest would count a GraphLeakError in this test as its expected
    failure: an ``xfail`` mark whose condition holds, without ``--runxfail``, whose
    ``raises=`` (if any) admits an AssertionError."""
    if item.config.getoption("runxfail", default=False):
        return False
    try:
        from _pytest.skipping import xfailed_key
    except ImportError:  # pytest moved its private key: keep the plain warn-only rule
        return False
    xfailed = item.stash.get(xfailed_key, None)
    if xfailed is None or xfailed.raises is None:
        return xfailed is not None
    raises = xfailed.raises
    try:
        return isinstance(raises, (type, tuple)) and issubclass(GraphLeakError, raises)
    except TypeError:  # a tuple holding something other than classes
        return False


def check_on_ranks(
    item: pytest.Item,
    factory: distributed.FactoryLike,
    settings: Settings,
    *,
    judge: bool = True,
    **group: Any,
) -> distributed.DistributedResult:
    """Every rank's result goes into the test's report; with ``judge``, a leak on any rank
    (not a known one: the baseline file's) fails the test naming the rank (warns in
    warn-only mode), and so does a rank that measured nothing, as a single-process check."""
    __tracebackhide__ = True
    result = distributed.check_distributed(
        factory,
        raise_on_leak=False,
        on_result=functools.partial(record, item),
        settings=settings,
        **group,
    )
    new = [r for r in result.ranks if r.leaked and not getattr(r.result, "known", False)]
    if not judge or not (new or result.unmeasured_ranks):
        return result
    verbose = (item.config.getoption("verbose") or 0) > 0  # -v: every sample, as the marker's
    text = result.leak_text(series=verbose) if new else result.unmeasured_text()
    pipeline.raise_or_warn(text, leaked=bool(new), warn=warns_instead(item, settings), stacklevel=2)
    return result

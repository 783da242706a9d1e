"""The ``graphleak`` fixture's object: ``check``, ``track`` and ``check_distributed`` in
a test, failing it (or warning, in warn-only mode) as the marker does. The fixture
function itself is registered in ``plugin/__init__``."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import pytest

from pytest_graphleak import api, distributed
from pytest_graphleak.api import Track
from pytest_graphleak.exceptions import GraphLeakWarning
from pytest_graphleak.options import CheckOptions, TrackOptions
from pytest_graphleak.plugin import terminal
from pytest_graphleak.plugin.marker import check_on_ranks, measure_and_record, warns_instead
from pytest_graphleak.plugin.stash import record
from pytest_graphleak.result import CheckResult
from pytest_graphleak.settings import Settings

if TYPE_CHECKING:
    from typing_extensions import Unpack


class GraphleakFixture:
    """``graphleak.check(step, steps=, warmup=)`` and ``with graphleak.track() as t``.

    Both fail the test with GraphLeakError (the same report as the marker) on a leak,
    with or without ``--graphleak``; in warn-only mode they warn instead.
    """

    def __init__(self, item: pytest.Item, settings: Settings) -> None:
        self._item = item
        self._settings = settings
        self._checks = 0

    def resolve(self, what: str, values: Mapping[str, object], place: str = "check") -> Settings:
        """The test's settings with call keywords applied; an OptionError (a ValueError)
        names the call."""
        where = f"graphleak.{what} in {self._item.nodeid}"
        return self._settings.override(values, where=where, place=place)

    def check(self, step: Callable[[], object], **options: Unpack[CheckOptions]) -> CheckResult:
        """Run ``step`` warmup + steps times; fail the test if it leaks. Keywords: the
        options that apply to "check" (``pytest_graphleak.options``)."""
        __tracebackhide__ = True
        api.require_runnable(step, f"graphleak.check(step) in {self._item.nodeid}")
        settings = self.resolve("check()", options)
        self._checks += 1
        # the step's own name: a function or lambda nested in the test is named without
        # the test's ``<locals>`` path (the node id names the test already)
        qualname = str(getattr(step, "__qualname__", "step")).rpartition("<locals>.")[2]
        name = f"{self._item.nodeid}::check({qualname})"
        roots = api.roots_of_frame(sys._getframe(1), exclude=(id(self),))
        return measure_and_record(
            self._item, step, settings, name, roots, (id(self),), from_marker=False
        )

    def track(self, **options: Unpack[TrackOptions]) -> Track:
        """``with graphleak.track(warmup=3) as t:`` ... ``t.step()`` after each step;
        with ``steps=N`` judged (and diagnosed) at step warmup + N, inside the loop."""
        settings = self.resolve("track()", options, place="track")
        steps = settings.steps if options.get("steps") is not None else None
        self._checks += 1
        name = f"{self._item.nodeid}::track({self._checks})"

        warn = warns_instead(self._item, settings)

        def on_result(result: CheckResult) -> None:
            record(self._item, result)
            if result.leaked and warn and not result.known:
                terminal.warn_leak(self._item, result, GraphLeakWarning)

        return Track(
            settings=settings, name=name, raise_on_leak=not warn, on_result=on_result, steps=steps
        )

    def check_distributed(
        self,
        step_factory: distributed.FactoryLike,
        *,
        world_size: int = 2,
        backend: str = "gloo",
        timeout: float | None = None,
        start_timeout: float | None = None,
        **options: Unpack[CheckOptions],
    ) -> distributed.DistributedResult:
        """Check a step on N torch.distributed ranks: ``step_factory`` (a module-level
        function or "module:function") builds each rank's step. The fixture's settings
        (ini, CLI, these keywords) go to every rank, each rank's result goes into the
        test report, and a leak on any rank fails the test naming the rank (warns in
        warn-only mode); a rank that raised, crashed or hung fails it with its
        traceback. See ``pytest_graphleak.distributed.check_distributed``."""
        __tracebackhide__ = True
        settings = self.resolve("check_distributed()", options)
        label = distributed.factory_label(step_factory)
        return check_on_ranks(
            self._item,
            step_factory,
            settings,
            world_size=world_size,
            backend=backend,
            timeout=distributed.DEFAULT_TIMEOUT_S if timeout is None else timeout,
            start_timeout=(
                distributed.DEFAULT_START_TIMEOUT_S if start_timeout is None else start_timeout
            ),
            name=f"{self._item.nodeid}::check_distributed({label})",
        )

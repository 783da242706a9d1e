"""Checking outside and inside pytest: ``check(step)`` and ``with track() as t: t.step()``.

Both run the same pipeline as the marker: tracker -> verdict -> (leak only) diagnose
-> CheckResult, whose ``render_text`` is the failure text.

Choice for ``check``/``track`` outside pytest: they *return* the result by default
(``result.leaked``, ``result.pattern``, ``render_text(result)``), because a script or a
notebook usually wants to look at the numbers; pass ``raise_on_leak=True`` to get a
``GraphLeakError`` instead, as the ``graphleak`` fixture does. Without
``raise_on_leak``, a step that raises is reported in ``result.error`` ("ValueError:
boom", the step in ``result.error_step``) and the result carries no leak verdict; with
it, the step's own exception propagates (with a note naming the step).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Collection, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pytest_graphleak.engine import tracker
from pytest_graphleak.exceptions import GraphLeakError
from pytest_graphleak.loop import LoopCheck
from pytest_graphleak.options import CheckOptions, TrackOptions
from pytest_graphleak.pipeline import error_result, measure, raise_or_warn
from pytest_graphleak.report.text import render_text
from pytest_graphleak.result import CheckResult
from pytest_graphleak.settings import Settings, call_settings

if TYPE_CHECKING:
    from typing_extensions import Unpack


def roots_of_frame(frame: Any, exclude: Collection[int] = ()) -> Callable[[], Mapping[str, object]]:
    """The caller's locals as diagnosis roots ("local 'NAME'"), minus plugin objects;
    read only if a leak needs diagnosing."""
    return lambda: {
        f"local '{key}'": value
        for key, value in frame.f_locals.items()
        if id(value) not in exclude and not key.startswith("@")
    }


def require_runnable(step: object, where: str) -> None:
    """TypeError unless calling ``step`` runs its body: not callable, an ``async def``
    (calling it only makes a coroutine) or a generator function (only makes a generator)
    would be checked as an empty step and always found clean."""
    if not callable(step):
        raise TypeError(f"{where}: step must be callable, got {step!r}")
    calls = (step, type(step).__call__.__get__(step))  # a function, or an object's __call__
    if any(inspect.iscoroutinefunction(c) or inspect.isasyncgenfunction(c) for c in calls):
        raise TypeError(
            f"{where}: step is an async function, so calling it would not run its body; "
            "check a plain function that runs it (asyncio.run(step()) or your event "
            "loop's equivalent)"
        )
    if any(inspect.isgeneratorfunction(c) for c in calls):
        raise TypeError(
            f"{where}: step is a generator function, so calling it would not run its "
            "body; check a plain function that runs it (for _ in step(): pass)"
        )


def check(
    step: Callable[[], object],
    *,
    name: str | None = None,
    raise_on_leak: bool = False,
    settings: Settings | None = None,
    **options: Unpack[CheckOptions],
) -> CheckResult:
    """Call ``step`` ``warmup + steps`` times and judge whether it leaks.

    ``options``: the keywords that apply to "check" in ``pytest_graphleak.options``
    (steps, warmup, rss_tolerance, probes, start_scan, diagnose), over ``settings``.
    Returns the CheckResult (``result.unmeasured`` set when no probe measured anything
    the step uses). With ``raise_on_leak=True`` a leak raises GraphLeakError and an
    unmeasured check UnmeasuredError (message: the full report), and a raising step
    propagates its own exception.
    """
    __tracebackhide__ = True  # pytest shows the step's frames, not the path to them
    require_runnable(step, "check(step)")
    label = name or getattr(step, "__qualname__", None) or repr(step)
    resolved = call_settings(settings, options, where=f"check({label})")
    try:
        result = measure(
            step,
            settings=resolved,
            name=label,
            diagnose_step=step,
            roots=roots_of_frame(sys._getframe(1)),
        )
    except Exception as exc:
        if raise_on_leak:
            raise
        return error_result(label, steps=resolved.steps, warmup=resolved.warmup, exc=exc)
    if raise_on_leak and (result.leaked or result.unmeasured):
        raise_or_warn(render_text(result), leaked=result.leaked, result=result)
    return result


class Track:
    """``with track(warmup=3) as t: for ...: ...; t.step()`` for a hand-written loop.

    Each ``t.step()`` marks the end of one training step and samples the probes; the
    first ``warmup`` steps are not judged. With ``steps=N`` the check is judged and a
    leak diagnosed at step ``warmup + N``, inside the loop (creation sites are recorded
    during the steps just before it); later ``t.step()`` calls are not measured. Without
    ``steps`` it is judged when the block exits. ``t.result`` holds the CheckResult
    (None before the judgement); if the block raised before it, an error result
    (``result.error`` says what was raised, ``result.error_step`` at which step) while
    the exception propagates.
    A block too short to judge (``verdict.loop_fewest_steps``) ends with an unmeasured
    result: ``UnmeasuredError`` with ``raise_on_leak`` inside a pytest test, else a
    ``GraphLeakWarning``.
    """

    def __init__(
        self,
        *,
        settings: Settings,
        name: str,
        raise_on_leak: bool,
        on_result: Callable[[CheckResult], None] | None = None,
        steps: int | None = None,
    ) -> None:
        self._check = LoopCheck(
            settings,
            name=name,
            steps=steps,
            on_result=on_result,
            on_leak="raise" if raise_on_leak else "return",
        )
        self._check.scoped = True  # ended by __exit__, even with a track() nested inside
        self._check.saw, self._check.unit = "track() saw", "t.step() call"
        self._on_result = on_result
        self._entered = False
        self._exited = False

    @property
    def calls(self) -> int:
        """Steps marked so far."""
        return self._check.calls

    @property
    def result(self) -> CheckResult | None:
        return self._check.result

    def __enter__(self) -> Track:
        if self._entered:
            raise RuntimeError("a track() block cannot be entered twice")
        self._entered = True
        check = self._check
        # The loop's state is in the caller's locals and globals: walk from them.
        frame = sys._getframe(1)
        check.start(
            length=None if check.steps is None else check.settings.warmup + check.steps,
            roots=roots_of_frame(frame, (id(self),)),
            start_objects=[*frame.f_locals.values(), frame.f_globals],
        )
        del frame
        return self

    def step(self) -> None:
        """Mark the end of one step: collect garbage and sample every probe."""
        __tracebackhide__ = True
        check = self._check
        if not self._entered or self._exited:
            raise RuntimeError("t.step() called outside its `with graphleak.track() as t:` block")
        check.after_step()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        __tracebackhide__ = True
        self._exited = True
        check = self._check
        warmup = check.settings.warmup
        if exc is not None:
            check.close()
            if isinstance(exc, GraphLeakError):
                return  # the check's own verdict, raised at its judged step
            # The block ended by raising (anything, pytest.fail() and timeouts included):
            # its own exception propagates, and unless the check was judged already, an
            # error result says at which step it was raised.
            tracker.annotate_step_error(exc, check.calls + 1, warmup, None)
            if check.result is None:
                error = error_result(
                    check.name, steps=max(0, check.calls - warmup), warmup=warmup, exc=exc
                )
                check.results.append(error)
                if self._on_result is not None:
                    self._on_result(error)
            return
        # Judged inside the loop (a leak watched after it is reported here), judged now,
        # or too short to judge: unmeasured, never a leak (see ``LoopCheck.finish``).
        check.finish()


def track(
    *,
    name: str = "track()",
    raise_on_leak: bool = False,
    settings: Settings | None = None,
    **options: Unpack[TrackOptions],
) -> Track:
    """A context manager measuring a hand-written loop; see ``Track``. ``options``: the
    keywords that apply to "track" in ``pytest_graphleak.options``; without ``steps`` the
    loop is judged when the block exits."""
    resolved = call_settings(settings, options, where=name, place="track")
    steps = resolved.steps if options.get("steps") is not None else None
    return Track(settings=resolved, name=name, raise_on_leak=raise_on_leak, steps=steps)

"""Checking outside and inside pytest: ``check(step)`` and ``with track() as t: t.step()``.

Both run the same pipeline as the marker: tracker -> verdict -> (leak only) diagnose
-> CheckResult, whose ``render_text`` is the failure text.

Choice for ``check``/``track`` outside pytest: they *return* the result by default
(``result.leaked``, ``result.pattern``, ``render_text(result)``), because a script or a
notebook usually wants to look at the numbers; pass ``raise_on_leak=True`` to get a
``GraphLeakError`` instead, as the ``graphleak`` fixture does. Without
``raise_on_leak``, a step that raises is reported in ``result.error`` ("ValueError: boom
at step 3") and the result carries no leak verdict; with it, the step's own exception
propagates (with a note naming the step).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Collection, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pytest_graphleak import tracker
from pytest_graphleak.metrics import Metric
from pytest_graphleak.options import CheckOptions, OptionError, Settings, TrackOptions
from pytest_graphleak.report.text import render_text
from pytest_graphleak.result import PATTERNS, CheckResult, Diagnosis, Verdict
from pytest_graphleak.verdict import Limits, confirm, judge, needs_recheck

if TYPE_CHECKING:
    from typing_extensions import Unpack


class GraphLeakWarning(UserWarning):
    """A leak reported without failing: warn-only mode, ``on_leak="warn"``."""


class _ReportError(AssertionError):
    def __init__(self, message: str, result: CheckResult | None = None) -> None:
        super().__init__(message)
        #: Plain data only (no measured object), safe to keep.
        self.result = result


class GraphLeakError(_ReportError):
    """A checked step leaked; the message is the full report (``render_text``)."""


class UnmeasuredError(_ReportError):
    """A check measured nothing its step uses (``result.unmeasured`` says why), so it
    has no verdict to give: "clean" would be a silent pass."""


def judged(series: tracker.Series, settings: Settings) -> Verdict:
    """The verdict on a measured series; noisy metrics (as their probes declare them)
    get the RSS tolerance."""
    limits = Limits(noise=settings.rss_tolerance)
    return judge(series.series, series.metrics, warmup=settings.warmup, limits=limits)


def step_error_text(exc: BaseException) -> str:
    """``ValueError: boom at step 3``: the step's exception, placed by the tracker."""
    where = getattr(exc, "graphleak_where", "")
    message = str(exc).replace("\n" + getattr(exc, "graphleak_note", "\0"), "")
    return f"{type(exc).__name__}: {message}" + (f" {where}" if where else "")


def error_result(name: str, *, steps: int, warmup: int, exc: BaseException) -> CheckResult:
    """The result of a check whose step raised: no series and no verdict."""
    verdict = Verdict(leaked=False, reason="the step raised; no verdict")
    return CheckResult(name=name, steps=steps, warmup=warmup, series={}, units={},
                       verdict=verdict, error=step_error_text(exc))  # fmt: skip


def explain(
    verdict: Verdict,
    *,
    metrics: Mapping[str, Metric],
    step: Callable[[], object] | None,
    roots: Mapping[str, object],
    exclude: Collection[int] = (),
    observation: Any = None,
) -> Diagnosis:
    """Run the diagnosis of a leak verdict; never hides the verdict behind its errors.
    ``observation``: what a running loop's last steps made (see ``loop``)."""
    # Imported on a leak only: a passing test never pays for loading the heap walker.
    from pytest_graphleak.diagnose import diagnose

    counted = verdict.pattern or "memory-growth"
    try:
        diagnosis = diagnose(verdict, metrics=metrics, step=step, roots=roots, exclude=exclude,
                             observation=observation)  # fmt: skip
        if not isinstance(diagnosis, Diagnosis):
            raise TypeError(f"diagnose() returned {diagnosis!r}")
    except Exception as exc:
        return Diagnosis(counted, notes=[f"diagnosis failed: {type(exc).__name__}: {exc}"])
    if diagnosis.pattern not in PATTERNS:
        diagnosis.notes.append(f"diagnosis gave pattern {diagnosis.pattern!r}; kept the count's")
        diagnosis.pattern = counted
    return diagnosis


def measure(
    step: Callable[[], object],
    *,
    settings: Settings,
    name: str,
    diagnose_step: Callable[[], object] | None = None,
    roots: Callable[[], Mapping[str, object]] | None = None,
    exclude: Collection[int] = (),
) -> CheckResult:
    """tracker -> verdict -> diagnosis. The step's own exception propagates (annotated).

    ``roots`` gives what the step can reach: its values are walked once at the start
    (the tensors alive before the check, see ``reach``) and, on a leak, labelled in the
    diagnosis's reference chains.
    """
    series = tracker.run(step, steps=settings.steps, warmup=settings.warmup,
                         probes=settings.probes, start_scan=settings.start_scan,
                         roots=list(roots().values()) if roots else ())  # fmt: skip
    return conclude(series, settings=settings, name=name, diagnose_step=diagnose_step,
                    roots=roots, exclude=exclude)  # fmt: skip


def conclude(
    series: tracker.Series,
    *,
    settings: Settings,
    name: str,
    diagnose_step: Callable[[], object] | None,
    roots: Callable[[], Mapping[str, object]] | None,
    exclude: Collection[int],
    observation: Any = None,
    verdict: Verdict | None = None,
) -> CheckResult:
    """verdict (``judged``, unless given) -> (leak only) diagnosis -> CheckResult, from a
    series measured over ``settings.warmup`` and then the judged steps."""
    verdict = _recheck(verdict or judged(series, settings), series)
    if series.notes and (not verdict.leaked or verdict.pattern == "memory-growth"):
        # What the measurement could not see matters when it found no graph growth.
        verdict.reason = "; ".join([verdict.reason, *series.notes])
    result = CheckResult(name=name, steps=series.calls - settings.warmup, warmup=settings.warmup,
                         series=series.series, units=series.units, verdict=verdict,
                         duration_s=series.duration_s, notes=list(series.probe_notes))  # fmt: skip
    remarks = list(series.coverage_notes)
    if series.unmeasured and not verdict.leaked:
        result.unmeasured = series.unmeasured  # no clean verdict without a measurement
    elif series.unmeasured:
        remarks.append(series.unmeasured)
    if remarks:
        verdict.reason += "; " + "; ".join(remarks)
    if verdict.leaked and settings.diagnose:
        started = time.perf_counter()
        result.diagnosis = explain(
            verdict, metrics=series.metrics, step=diagnose_step,
            roots=roots() if roots else {}, exclude=exclude, observation=observation,
        )  # fmt: skip
        result.duration_s += time.perf_counter() - started
    return result


def _recheck(verdict: Verdict, series: tracker.Series) -> Verdict:
    """A leak on a metric that declares a recheck (CUDA: is the growth only the
    allocator's cache?): its probe measures again, the verdict decides."""
    probes, series.rechecking = series.rechecking, []
    for probe in probes:
        if not needs_recheck(verdict, {metric.name: metric for metric in probe.metrics}):
            continue
        try:
            found = probe.recheck()
        except Exception as exc:  # a failing re-check never hides the leak
            verdict.reason += f"; re-check failed: {type(exc).__name__}: {exc}"
            continue
        if found is not None:
            verdict = confirm(verdict, series.metrics, found)
    return verdict


def _settings(
    where: str, base: Settings | None, values: Mapping[str, object], place: str
) -> Settings:
    try:
        return (base or Settings()).override(values, where=where, place=place)
    except OptionError as exc:
        raise ValueError(str(exc)) from None


def roots_of_frame(frame: Any, exclude: Collection[int] = ()) -> Callable[[], Mapping[str, object]]:
    """The caller's locals as diagnosis roots ("local 'NAME'"), minus plugin objects;
    read only if a leak needs diagnosing."""
    return lambda: {
        f"local '{key}'": value
        for key, value in frame.f_locals.items()
        if id(value) not in exclude and not key.startswith("@")
    }


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
    if not callable(step):
        raise TypeError(f"check(step): step must be callable, got {step!r}")
    label = name or getattr(step, "__qualname__", None) or repr(step)
    resolved = _settings(f"check({label})", settings, options, "check")
    try:
        result = measure(step, settings=resolved, name=label, diagnose_step=step,
                         roots=roots_of_frame(sys._getframe(1)))  # fmt: skip
    except Exception as exc:
        if raise_on_leak:
            raise
        return error_result(label, steps=resolved.steps, warmup=resolved.warmup, exc=exc)
    if raise_on_leak and result.leaked:
        raise GraphLeakError(render_text(result), result)
    if raise_on_leak and result.unmeasured:
        raise UnmeasuredError(render_text(result), result)
    return result


class Track:
    """``with track(warmup=3) as t: for ...: ...; t.step()`` for a hand-written loop.

    Each ``t.step()`` marks the end of one training step and samples the probes; the
    first ``warmup`` steps are not judged. With ``steps=N`` the check is judged and a
    leak diagnosed at step ``warmup + N``, inside the loop (creation sites are recorded
    during the steps just before it); later ``t.step()`` calls are not measured. Without
    ``steps`` it is judged when the block exits. ``t.result`` holds the CheckResult
    (None before the judgement); if the block raised before it, an error result
    (``result.error`` says what was raised at which step) while the exception propagates.
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
        from pytest_graphleak.loop import LoopCheck  # loop builds on this module

        self._check = LoopCheck(settings, name=name, steps=steps, on_result=on_result,
                                on_leak="raise" if raise_on_leak else "return")  # fmt: skip
        self._on_result = on_result
        self._entered = False

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
        if not self._entered or (not check.active and check.result is None):
            raise RuntimeError("t.step() called outside its `with graphleak.track() as t:` block")
        check.after_step()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        __tracebackhide__ = True
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
                error = error_result(check.name, steps=max(0, check.calls - warmup),
                                     warmup=warmup, exc=exc)  # fmt: skip
                check.results.append(error)
                if self._on_result is not None:
                    self._on_result(error)
            return
        if not check.active:
            return  # judged inside the loop (steps=N)
        if check.calls - warmup < 1 or check.calls < 2:
            check.close()
            raise ValueError(
                f"{check.name}: track(warmup={warmup}) saw {check.calls} t.step() calls; "
                f"it needs at least warmup + 2 (and warmup + 12 to catch slow leaks)"
            )
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
    resolved = _settings(name, settings, options, "track")
    steps = resolved.steps if options.get("steps") is not None else None
    return Track(settings=resolved, name=name, raise_on_leak=raise_on_leak, steps=steps)


# Shown as ``pytest_graphleak.GraphLeakError`` in failures, where users import it from.
GraphLeakError.__module__ = "pytest_graphleak"
GraphLeakWarning.__module__ = "pytest_graphleak"
UnmeasuredError.__module__ = "pytest_graphleak"

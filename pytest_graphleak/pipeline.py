"""One path for every check: measure (tracker) -> judge (verdict) -> explain (diagnose,
on a leak only) -> CheckResult, and the errors that report a result.

``api`` (``check()``, ``track()``), ``loop`` (a check judged inside a running loop), the
pytest plugin, the CLI and the distributed ranks all run through these functions, so
each front end only decides when to call them and what to do with the result.
"""

from __future__ import annotations

import linecache
import time
import warnings
from collections.abc import Callable, Collection, Mapping
from typing import Any

from pytest_graphleak import session
from pytest_graphleak.engine import tracker
from pytest_graphleak.exceptions import (
    GraphLeakError,
    GraphleakError,
    GraphLeakWarning,
    UnmeasuredError,
)
from pytest_graphleak.heap.usercode import is_user_file
from pytest_graphleak.metrics import Metric
from pytest_graphleak.patterns import FALLBACK, FIXES, MEMORY_GROWTH, PATTERNS
from pytest_graphleak.result import (
    CheckResult,
    CreationSite,
    Declaration,
    Diagnosis,
    Fix,
    Verdict,
)
from pytest_graphleak.settings import Settings
from pytest_graphleak.verdict import (
    FEWEST_STEPS,
    Limits,
    confirm,
    judge,
    needs_recheck,
    too_few_steps,
    withdraw,
)


def failure(text: str, *, leaked: bool, result: CheckResult | None = None) -> GraphleakError:
    """The error a failed check raises: GraphLeakError for a leak, UnmeasuredError for a
    check that measured nothing its step uses; ``text`` is its report."""
    return GraphLeakError(text, result) if leaked else UnmeasuredError(text, result)


def raise_or_warn(
    text: str,
    *,
    leaked: bool,
    result: CheckResult | None = None,
    warn: bool = False,
    stacklevel: int = 1,
) -> None:
    """Fail a check (``failure``), or with ``warn`` report it as a GraphLeakWarning with
    the same text; ``stacklevel`` counts from the caller, as ``warnings.warn``'s does."""
    __tracebackhide__ = True
    if warn:
        warnings.warn(GraphLeakWarning(text), stacklevel=stacklevel + 1)
        return
    raise failure(text, leaked=leaked, result=result)


def judged(series: tracker.Series, settings: Settings) -> Verdict:
    """The verdict on a measured series; noisy metrics (as their probes declare them)
    get the RSS tolerance."""
    limits = Limits(noise=settings.rss_tolerance)
    return judge(
        series.series,
        series.metrics,
        warmup=settings.warmup,
        limits=limits,
        every=series.sample_every,
    )


def declarations(metrics: Mapping[str, Metric], settings: Settings) -> dict[str, Declaration]:
    """What each measured metric is and the noise the verdict let pass for it (``judged``'s
    limits): kept on the result, so the reports draw and word it as it was judged."""
    limits = Limits(noise=settings.rss_tolerance)
    return {
        name: Declaration(
            unit=metric.unit,
            counts=metric.counts,
            noisy=metric.noisy,
            tolerance=limits.for_metric(metric),
        )
        for name, metric in metrics.items()
    }


def step_error_text(exc: BaseException) -> str:
    """``ValueError: boom``: the step's exception in its own words (the tracker's note
    of where it was raised left out: the result keeps the step apart, ``error_step``)."""
    message = str(exc).replace("\n" + getattr(exc, "graphleak_note", "\0"), "")
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def raised_at(exc: BaseException) -> CreationSite | None:
    """The user's line ``exc`` came from: the innermost frame of its traceback in user
    code (file, line, function and the line's text; no frame is kept)."""
    found: tuple[str, int, str] | None = None
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if is_user_file(code.co_filename):
            found = (code.co_filename, tb.tb_lineno, code.co_name)
        tb = tb.tb_next
    if found is None:
        return None
    filename, lineno, function = found
    return CreationSite(filename, lineno, linecache.getline(filename, lineno).strip(), 1, function)


def error_result(name: str, *, steps: int, warmup: int, exc: BaseException) -> CheckResult:
    """The result of a check whose step raised: no series and no verdict; the step that
    raised and the user's line it came from kept apart from the exception's words."""
    verdict = Verdict(leaked=False, reason="the step raised; no verdict")
    where = str(getattr(exc, "graphleak_where", ""))
    return CheckResult(
        name=name,
        steps=steps,
        warmup=warmup,
        series={},
        units={},
        verdict=verdict,
        error=step_error_text(exc),
        error_step=getattr(exc, "graphleak_step", None),
        error_measuring=where.startswith("while measuring"),
        error_site=raised_at(exc),
    )


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

    counted = verdict.pattern or FALLBACK
    try:
        diagnosis = diagnose(
            verdict,
            metrics=metrics,
            step=step,
            roots=roots,
            exclude=exclude,
            observation=observation,
        )
        if not isinstance(diagnosis, Diagnosis):
            raise TypeError(f"diagnose() returned {diagnosis!r}")
    except Exception as exc:
        return Diagnosis(
            counted,
            notes=[f"diagnosis failed: {type(exc).__name__}: {exc}"],
            fix=FIXES.get(counted, ""),
        )
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
    __tracebackhide__ = True  # pytest shows the step's frames, not the path to them
    with session.check_span():  # what the check's steps make is its own, not the audit's
        series = tracker.run(
            step,
            steps=settings.steps,
            warmup=settings.warmup,
            probes=settings.probes,
            start_scan=settings.start_scan,
            roots=list(roots().values()) if roots else (),
        )
        if settings.steps < FEWEST_STEPS:
            # The step ran as asked (its own errors surface), but so few samples cannot
            # tell a one-off from a leak: no verdict, as for a loop too short to judge.
            return too_few(name, settings, series)
        return conclude(
            series,
            settings=settings,
            name=name,
            diagnose_step=diagnose_step,
            roots=roots,
            exclude=exclude,
        )


def too_few(name: str, settings: Settings, series: tracker.Series) -> CheckResult:
    """The unmeasured result of a check asked for fewer than ``FEWEST_STEPS`` measured
    steps (``verdict.too_few_steps``): no series is judged, none is shown."""
    why, fix = too_few_steps(settings.steps, source=settings.source("steps"))
    verdict = Verdict(leaked=False, reason=f"no verdict: {why}")
    return CheckResult(
        name=name,
        steps=settings.steps,
        warmup=settings.warmup,
        series={},
        units={},
        verdict=verdict,
        duration_s=series.duration_s,
        unmeasured=why,
        unmeasured_fix=fix,
    )


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
    if series.notes and (not verdict.leaked or verdict.pattern == MEMORY_GROWTH):
        # What the measurement could not see matters when it found no graph growth.
        verdict.reason = "; ".join([verdict.reason, *series.notes])
    head = settings.warmup if series.warmup_steps is None else series.warmup_steps
    result = CheckResult(
        name=name,
        steps=series.calls - head,
        warmup=settings.warmup,
        series=series.series,
        units=series.units,
        verdict=verdict,
        duration_s=series.duration_s,
        notes=list(series.probe_notes),
        sample_every=series.sample_every,
        sample_steps=series.sample_steps,
        warmup_steps=None if head == settings.warmup else head,
        declarations=declarations(series.metrics, settings),
    )
    remarks = list(series.coverage_notes)
    if series.unmeasured and not verdict.leaked:
        result.unmeasured = series.unmeasured  # no clean verdict without a measurement
        result.unmeasured_fix = series.unmeasured_fix
    elif series.unmeasured:
        remarks.append(series.unmeasured)
    if remarks:
        verdict.reason += "; " + "; ".join(remarks)
    if verdict.leaked and settings.diagnose:
        started = time.perf_counter()
        found_roots = roots() if roots else {}
        result.diagnosis = explain(
            verdict,
            metrics=series.metrics,
            step=diagnose_step,
            roots=found_roots,
            exclude=exclude,
            observation=observation,
        )
        if result.diagnosis.library_cycles:  # a library's own cycles: not the user's leak
            result.verdict = withdraw(
                verdict, series.metrics, "cycles", result.diagnosis.library_cycles
            )
        if result.verdict.leaked:
            tried = tried_fix(
                result.diagnosis, settings=settings, step=diagnose_step, roots=found_roots
            )
            result.diagnosis.fix_tried = tried
            if not tried.verified and tried.text:  # never a change tried that failed
                result.diagnosis.fix = tried.text
        else:  # all it saw grow was the library's: a pass, its reason says why
            result.diagnosis = None
        del found_roots  # the result keeps nothing the step made
        result.duration_s += time.perf_counter() - started
    return result


def tried_fix(
    diagnosis: Diagnosis,
    *,
    settings: Settings,
    step: Callable[[], object] | None,
    roots: Mapping[str, object],
) -> Fix:
    """The diagnosis's fix as tried: each candidate change re-run with the check's own
    steps, probes and verdict (``diagnose.fix_verify``); not verified, and why, where the
    step cannot be re-run (a running loop) or verification is off."""
    from pytest_graphleak.diagnose import fix_verify
    from pytest_graphleak.words import verify as why

    advice = diagnosis.fix or FIXES.get(diagnosis.pattern, "")
    if settings.verify_fix == "off":
        return fix_verify.not_verified(advice, why.OFF)
    if step is None:
        return fix_verify.not_verified(advice, why.LOOP)
    reached = list(roots.values())

    def trial() -> fix_verify.Trial:
        series = tracker.run(
            step,
            steps=settings.steps,
            warmup=settings.warmup,
            probes=settings.probes,
            start_scan=settings.start_scan,
            roots=reached,
        )
        verdict = judged(series, settings)
        if diagnosis.library_cycles:  # the library's own cycles grow whatever is changed
            verdict = withdraw(verdict, series.metrics, "cycles", diagnosis.library_cycles)
        grew = tuple(g.metric for g in verdict.growths) if verdict.leaked else ()
        counted = [series.metrics[name].counts for name in grew if name in series.metrics]
        memory = all(counts == "memory" for counts in counted)
        cut = "tensors" in counted and "nodes" not in counted
        return fix_verify.Trial(grew, series.calls, memory_only=memory, graph_cut=cut)

    try:
        return fix_verify.verify_fix(diagnosis, step=step, roots=roots, trial=trial)
    except Exception as exc:  # a failing verification never hides the leak
        return fix_verify.not_verified(advice, why.failed(exc))
    finally:
        reached.clear()


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


# Shown as ``pytest_graphleak.GraphLeakError`` in failures, where users import it from.
GraphLeakError.__module__ = "pytest_graphleak"
GraphLeakWarning.__module__ = "pytest_graphleak"
UnmeasuredError.__module__ = "pytest_graphleak"

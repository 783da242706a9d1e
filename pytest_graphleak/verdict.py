"""The verdict: a pure function from measured series to pass / leak.

No I/O, no gc, no torch or minigrad here, so every rule is unit-testable with
hand-written series. The rule (also in the README, "How the verdict decides"):

* Judge the *floor*: after each measured step, the lowest value still to come
  (``floor[i] = min(samples[i:])``). A leak raises the floor; a temporary spike (a
  step's own tensors, an allocator burst) never does.
* A metric leaks when, for some period ``k`` from 1 to ``max_leak_period(steps)``, its
  floor rises between **every** measured step and the step ``k`` later, over all the
  measured steps. That is exactly "at least one more object every ``k`` steps", so such a
  series is always caught, whatever the warmup held.
* Clean, whatever happened before:
  - a series that settles during warmup or the first half of the measured steps: its
    flat second half holds two equal floors ``k`` steps apart, so no ``k`` works;
  - a single late one-off rise: it lies between fewer than all the pairs of steps;
  - a sawtooth that returns to its baseline (gradient accumulation, a bounded queue)
    with a period up to ``max(3, steps // 3)``: its floor is the sawtooth's lowest value
    until the last period, where the floor of a cut-off period rises (the end effect)
    but the early, flat pairs still refute every ``k``.
* ``max_leak_period(steps)`` is ``max(3, steps // 3)``, capped at ``ceil(steps / 2) - 1``
  so that a flat second half always refutes it: every second step is caught from 5
  measured steps on, every third step from 7, every ``steps // 3`` from 9 on. With
  fewer steps a series that settles in the first half looks exactly like a slow leak,
  and the verdict passes it. With one or two measured steps (too few to see settling)
  the only period is 1, and a single measured step is compared with the baseline.
* Exact metrics (object counts, tensor storages, CUDA allocated bytes) are a leak at any
  floor rise; noisy ones (process RSS, malloc's bytes, CUDA reserved) only when the floor
  rises by at least the noise tolerance per step (times the metric's ``noise_share``)
  between every pair.
* A noisy metric's one dip: memory older than the judged steps, freed during them (a
  buffer an earlier test made, or pages the allocator hands back), lowers every later
  sample and so every floor before it, which hid a leak. The sample that falls furthest
  below every earlier one, the baseline included, by more than the tolerance of one
  sample, and never climbed back within it of the highest sample before it, is such a
  dip: the samples from it on are lifted by its drop, and the pairs
  across it (whose growth it hides) are not judged. Every other pair must rise, they
  must be more than ``k`` (so no single step's rise lies in all of them), and one of them
  must lie in the second half (where a series that settled is flat, dip or not). A
  sawtooth's return is no such dip: its next period climbs back. So a leak is caught
  whatever older memory is freed once during it, when the free is more than it grew
  before or after the free (plus one sample's tolerance); a smaller free only shortens a
  step, and the leak is caught when every pair still rises by the tolerance.
* A series sampled every ``every`` steps (a long run in window mode) is judged the same
  way over its samples; a period of ``k`` samples is ``k * every`` steps, so a leak of
  one object every ``p <= max_leak_period(samples) * every`` steps raises the floor
  between every sample and the one ``ceil(p / every)`` later and is caught, and rates
  and tolerances are per step.

What a metric is (unit, exact or noisy, what it counts) comes from its probe's
declaration (``metrics.Metric``); no metric name is known here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate

from pytest_graphleak.metrics import Metric, Recheck, count_of, format_rate, listing_key
from pytest_graphleak.patterns import guess
from pytest_graphleak.result import Growth, Verdict
from pytest_graphleak.values import int_at_least


@dataclass(frozen=True)
class Limits:
    """How much growth per step a metric may show before it counts as a leak."""

    #: tolerated floor growth per step of a noisy metric (its unit); exact ones: none.
    noise: float = 0.0

    def for_metric(self, metric: Metric) -> float:
        return float(self.noise) * metric.noise_share if metric.noisy else 0.0


def measured_samples(values: Sequence[float], warmup: int) -> list[float]:
    """The samples the rule judges: the measured steps, without the baseline.

    The baseline (the last warmup sample) is whatever the warmup left (a lazily created
    state, a spike), so it takes part only when there is a single measured step to
    compare it with.
    """
    if warmup == 0:  # no warmup, no baseline: every sample is a measured step
        return [float(v) for v in values]
    window = [float(v) for v in values[warmup - 1 :]]
    return window if len(window) <= 2 else window[1:]


def max_leak_period(steps: int) -> int:
    """The slowest leak (one object every k steps) caught for sure in ``steps`` steps."""
    settles_refuted = (steps + 1) // 2 - 1  # a flat second half holds a pair this far apart
    return max(1, min(max(3, steps // 3), settles_refuted))


def steps_to_catch(period: int) -> int:
    """The fewest measured steps that catch one more object every ``period`` steps for
    sure (``max_leak_period`` inverted): 1 -> 1, 2 -> 5, 3 -> 7, 5 -> 15."""
    steps = 1
    while max_leak_period(steps) < period:
        steps += 1
    return steps


def fewest_steps(warmup: int) -> int:
    """The fewest measured steps a verdict can judge: one, compared with the last warmup
    step's sample; two without warmup (one sample alone has nothing to be compared with).
    Every front end (options, ``check``, ``track``, the loops and callbacks) asks here."""
    return 1 if warmup >= 1 else 2


#: The fewest measured steps any verdict is judged from: the marker, ``check()``,
#: ``graphleak check --steps``, ``--graphleak-steps``, ``track(steps=)``, a loop or a
#: callback. With one or two measured steps a single tensor made once (a lazy init, a
#: cache keyed by batch size meeting an epoch's short last batch) rises between every
#: pair of measured samples and reads as ``+1/step``; from three on a one-off lies between
#: fewer than all of them and the verdict passes it. A check asked for fewer steps, or a
#: loop that ran fewer, is unmeasured (``too_few_steps``, ``too_short_loop``).
FEWEST_STEPS = 3


def loop_fewest_steps(warmup: int, window: int | None = None) -> int:
    """The fewest measured steps a loop is judged from: ``FEWEST_STEPS``, or its
    ``window=`` when fewer (each window of a long run is judged on its own); never fewer
    than ``fewest_steps(warmup)``."""
    wanted = FEWEST_STEPS if window is None else min(window, FEWEST_STEPS)
    return max(fewest_steps(warmup), wanted)


def too_few_steps(steps: int, *, source: str = "") -> tuple[str, str]:
    """Why a check asked for ``steps`` measured steps (fewer than ``FEWEST_STEPS``) has no
    verdict, and what to change; ``source``: where the value came from ("command line
    option --graphleak-steps"), named in the fix."""
    why = (
        f"steps={steps} is too few for a verdict: with fewer than {FEWEST_STEPS} measured "
        "steps, one tensor made once in a measured step would read as a leak"
    )
    came = f" (steps={steps} came from {source})" if source and source != "default" else ""
    return why, f"steps={FEWEST_STEPS} or more{came}"


def too_short_loop(
    ran: int, warmup: int, measured: int, *, saw: str = "it ran", unit: str = "step"
) -> tuple[str, str]:
    """Why a loop that ran ``ran`` steps has no verdict, ``measured`` steps after
    ``warmup`` being the fewest it is judged from, and what to change
    (``too_short_loop_fix``); ``saw ran unit``: how the loop's length reads ("it ran 5
    steps", "track() saw 5 t.step() calls")."""
    why = (
        f"the loop is too short: {saw} {count_of(ran, unit)}; a verdict needs at least "
        f"{warmup + measured} (warmup={warmup} + {count_of(measured, 'measured step')}: with "
        "fewer, one tensor made once in a measured step would read as a leak), and warmup + "
        f"{steps_to_catch(3)} catch a leak of one object every third step"
    )
    return why, too_short_loop_fix(warmup, measured, unit=unit)


def too_short_loop_fix(warmup: int, measured: int, *, unit: str = "step") -> str:
    """What to change for a loop too short to judge (``too_short_loop``): more steps,
    or fewer warmup steps where there are more than one."""
    fix = f"run at least {count_of(warmup + measured, unit)} in the checked loop"
    if warmup > 1:
        fix += f", or fewer warmup steps (warmup=1 needs {count_of(1 + measured, unit)})"
    return fix


def slowest_leak_text(period: int) -> str:
    """``5`` -> ``"1 object every 5 steps"``: the slowest leak a verdict catches for sure."""
    return "1 object per step" if period == 1 else f"1 object every {period} steps"


def suffix_floor(samples: Sequence[float]) -> list[float]:
    """``floor[i]``: the lowest value from sample ``i`` to the last."""
    floors = list(accumulate(reversed(samples), min, initial=math.inf))[1:]
    return floors[::-1]


def rising_period(
    floors: Sequence[float], max_period: int, tolerance: float = 0.0, skip: int | None = None
) -> int:
    """The smallest k <= max_period such that the floor rises between every sample and
    the one k later (by more than 0 and by at least ``tolerance`` per step); 0 if none.
    ``skip``: a dip's index; the pairs across it are not judged, and the others must be
    more than k, one of them within the second half."""
    for k in range(1, min(max_period, len(floors) - 1) + 1):
        needed = tolerance * k
        pairs = [i for i in range(len(floors) - k) if skip is None or not i < skip <= i + k]
        if skip is not None and (len(pairs) <= k or pairs[-1] < len(floors) // 2):
            # Too few, so one step's rise could lie in all of them; or none in the second
            # half, where a series that settled is flat.
            continue
        # Stops at the first pair that does not rise: a flat (clean) series costs
        # O(max_period), not O(steps * max_period), which 200 steps made ~30 ms a check.
        if all(
            floors[i + k] - floors[i] > 0 and floors[i + k] - floors[i] >= needed for i in pairs
        ):
            return k
    return 0


def dip(samples: Sequence[float], before: float, margin: float) -> int | None:
    """The index of the sample that falls furthest below every earlier one (``before``:
    the baseline's, or the first sample's), by more than ``margin``, when no later sample
    climbs back to within ``margin`` of the highest before it (a sawtooth's return does:
    its next period refills what it emptied); None when there is none."""
    lowest, found, deepest = before, None, margin
    for index, value in enumerate(samples):
        if index and lowest - value > deepest:
            found, deepest = index, lowest - value
        lowest = min(lowest, value)
    if found is None or max(samples[found:]) >= max(samples[:found]) - margin:
        return None
    return found


def lifted(samples: Sequence[float], at: int) -> list[float]:
    """``samples`` with those from ``at`` on raised by the drop at ``at``."""
    drop = samples[at - 1] - samples[at]
    return [v + drop if i >= at else v for i, v in enumerate(samples)]


def _dip_of(
    values: Sequence[float], warmup: int, samples: Sequence[float], margin: float | None
) -> int | None:
    if margin is None or len(samples) < 3:
        return None
    before = float(values[warmup - 1]) if warmup >= 1 else samples[0]
    return dip(samples, min(before, samples[0]), margin)


def metric_grows(
    values: Sequence[float], warmup: int, tolerance: float = 0.0, *, dips: bool = False
) -> bool:
    """True when one metric's series shows sustained growth after warmup. ``dips``: a noisy
    metric, whose one dip below every earlier sample is forgiven (module docstring)."""
    samples = measured_samples(values, warmup)
    if len(samples) < 2 or any(math.isnan(v) for v in samples):
        return False
    steps = len(values) - warmup
    period = max_leak_period(steps)
    if rising_period(suffix_floor(samples), period, tolerance) > 0:
        return True
    at = _dip_of(values, warmup, samples, tolerance if dips else None)
    if at is None:
        return False
    return rising_period(suffix_floor(lifted(samples, at)), period, tolerance, skip=at) > 0


def growth_of(
    metric: str,
    values: Sequence[float],
    warmup: int,
    every: int = 1,
    *,
    dip_margin: float | None = None,
) -> Growth:
    """From-what-to-what over the measured steps (``judge`` checked there is one), and
    the floor's mean rise per step (never thrown off by a warmup spike in the baseline or
    a spike in one step); ``every``: steps per sample. ``dip_margin``: a noisy metric's
    tolerance per sample; a growth found only past a dip is measured without the dip's
    step (``metric_grows``)."""
    measured = [float(v) for v in values[warmup:]]
    samples = measured_samples(values, warmup)
    floors = suffix_floor(samples)
    gaps = max(1, len(floors) - 1)
    at = _dip_of(values, warmup, samples, dip_margin)
    if (
        at is not None
        and rising_period(floors, max_leak_period(len(values) - warmup), dip_margin or 0.0) == 0
    ):
        floors = suffix_floor(lifted(samples, at))
        gaps = max(1, len(floors) - 2)  # the dip's step counts as no growth: left out
    per_step = (floors[-1] - floors[0]) / gaps / every
    return Growth(metric=metric, start=measured[0], end=measured[-1], per_step=per_step)


def first_pattern(grown: Iterable[Metric]) -> str:
    """The pattern a leak suggests from what its grown metrics count (diagnosis refines it)."""
    return guess(metric.counts for metric in grown)


def judge(
    series: Mapping[str, Sequence[float]],
    metrics: Mapping[str, Metric],
    *,
    warmup: int,
    limits: Limits | None = None,
    every: int = 1,
) -> Verdict:
    """Decide whether the series show a leak. Pure: same input, same verdict.

    ``metrics``: the probes' declaration of every series (``Series.metrics``); ``every``:
    steps per sample (``warmup`` counts samples).
    """
    int_at_least("warmup", warmup, 0)
    int_at_least("every", every, 1)
    if not series:
        return Verdict(leaked=False, reason="no metric was measured, so none could grow")
    limits = limits or Limits()
    growths: list[Growth] = []
    for metric in sorted(series):
        values = series[metric]
        if len(values) <= warmup:
            raise ValueError(
                f"series {metric!r} has {count_of(len(values), 'sample')}; need more than "
                f"warmup={warmup}"
            )
        if metric not in metrics:
            raise ValueError(f"series {metric!r} has no declaration among the metrics given")
        declared = metrics[metric]
        tolerance = limits.for_metric(declared) * every
        if metric_grows(values, warmup, tolerance, dips=declared.noisy):
            margin = tolerance if declared.noisy else None
            growths.append(growth_of(metric, values, warmup, every, dip_margin=margin))
    samples = min(len(v) - warmup for v in series.values())  # >= 1: checked above
    slowest = max_leak_period(samples) * every
    measured = (
        count_of(samples, "measured step")
        if every == 1
        else f"{count_of(samples, 'sample')}, one every {every} steps"
    )
    if not growths:
        return Verdict(
            leaked=False,
            reason=f"no metric grew: no floor rose every k <= {count_of(slowest, 'step')} over "
            f"{measured} "
            f"({count_of(len(series), 'metric')} judged)",
            slowest_leak_steps=slowest,
        )
    # listed as every report lists them (``metrics.listing_key``), the reason's words too
    growths.sort(key=lambda g: listing_key(g.metric, metrics[g.metric].counts))
    pattern = first_pattern(metrics[g.metric] for g in growths)
    grown = ", ".join(
        f"{g.metric} {format_rate(g.per_step, metrics[g.metric].unit)}" for g in growths
    )
    return Verdict(
        leaked=True,
        growths=growths,
        pattern=pattern,
        reason=f"grew: {grown}",
        slowest_leak_steps=slowest,
    )


def needs_recheck(verdict: Verdict, metrics: Mapping[str, Metric]) -> bool:
    """A leak on a metric (among ``metrics``) whose growth must survive a recheck."""
    return verdict.leaked and any(
        g.metric in metrics and metrics[g.metric].recheck for g in verdict.growths
    )


def confirm(verdict: Verdict, metrics: Mapping[str, Metric], recheck: Recheck) -> Verdict:
    """Pure: the verdict after a probe's second look (``Probe.recheck``).

    A growth whose declaration names recheck metrics stands only while every one of them
    is still above its clean baseline (a metric missing from either side cannot refute
    it); every other growth stands as judged.
    """

    def stands(growth: Growth) -> bool:
        declared = metrics.get(growth.metric)
        if declared is None or growth.metric not in recheck.cleaned:
            return True
        return all(
            name not in recheck.baseline
            or name not in recheck.cleaned
            or recheck.cleaned[name] > recheck.baseline[name]
            for name in declared.recheck
        )

    standing = [g for g in verdict.growths if stands(g)]
    dropped = [g.metric for g in verdict.growths if not stands(g)]
    if not dropped:
        return replace(verdict, reason=f"{verdict.reason}; {recheck.confirmed}")
    note = f"{', '.join(dropped)} {recheck.withdrawn}"
    if not standing:
        return Verdict(leaked=False, growths=[], pattern=None, reason=f"clean: {note}")
    pattern = first_pattern(metrics[g.metric] for g in standing if g.metric in metrics)
    return replace(verdict, growths=standing, pattern=pattern, reason=f"{verdict.reason}; {note}")


def withdraw(verdict: Verdict, metrics: Mapping[str, Metric], counts: str, note: str) -> Verdict:
    """Pure: the verdict without the growths of the metrics that count ``counts``, which
    the diagnosis found are not the user's leak (``cycles``: a library's own reference
    cycles that hold no graph); ``note`` says why. Every other growth stands as judged."""
    standing = [
        g for g in verdict.growths if g.metric not in metrics or metrics[g.metric].counts != counts
    ]
    if not verdict.leaked or len(standing) == len(verdict.growths):
        return verdict
    if not standing:
        return Verdict(
            leaked=False,
            growths=[],
            pattern=None,
            reason=f"clean: {note}",
            slowest_leak_steps=verdict.slowest_leak_steps,
        )
    pattern = first_pattern(metrics[g.metric] for g in standing if g.metric in metrics)
    return replace(verdict, growths=standing, pattern=pattern, reason=f"{verdict.reason}; {note}")


# -- a running loop's own reset points (``loop``: rolling windows) --------------------------
def dropped(series: Mapping[str, Sequence[float]], metrics: Mapping[str, Metric]) -> bool:
    """The last sample of some exact metric (an object count, tensor storage bytes) fell
    below the one before it: the loop let go of what it held (a per-epoch list emptied or
    made anew, a deferred backward's pending list cleared). Noisy metrics never count: RSS
    falls when the allocator hands pages back."""
    for name, values in series.items():
        declared = metrics.get(name)
        exact = declared is not None and not declared.noisy
        if exact and len(values) >= 2 and values[-1] < values[-2]:
            return True
    return False


def reset_period(resets: Sequence[int]) -> int | None:
    """The loop's period as observed: the longest run of steps between two of its reset
    points (``resets``: steps after which it reset, ascending; the check's start counts as
    the first), None before the first."""
    if not resets:
        return None
    return max(b - a for a, b in zip([0, *resets], resets, strict=False))


def within_one_period(start: int, end: int, resets: Sequence[int]) -> bool:
    """Steps ``start`` + 1 to ``end`` (a window after the sample of step ``start``) hold
    none of the loop's reset points and are no longer than its period as observed so far
    (any length before a first reset): what grew there may be the rising edge of a
    container the loop empties at its next reset, such as a list of this epoch's losses."""
    if any(start <= reset < end for reset in resets):
        return False
    period = reset_period(resets)
    return period is None or end - start <= period


def undone_by_a_reset(verdict: Verdict, metrics: Mapping[str, Metric]) -> bool:
    """A growth that a loop's reset can take back: tensors without a graph were added (a
    list of detached values), and no graph node and no cyclic garbage grew (a graph kept
    each step costs its activations, and cyclic garbage only the collector frees). Bytes
    alone (a buffer rebuilt bigger each step) are judged at once, as before: their holder
    is found only while the loop still runs."""
    counts = [metrics[g.metric].counts if g.metric in metrics else "" for g in verdict.growths]
    return verdict.leaked and "tensors" in counts and not {"nodes", "cycles", ""} & set(counts)

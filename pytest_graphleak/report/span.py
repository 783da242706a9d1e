"""What a check measured, in the words every surface uses (failure text, terminal rows,
HTML, the GitHub summary): "100 measured steps after 3 warmup steps, sampled every 20
steps".

A check's series holds ``warmup`` samples that are not judged, then the measured ones.
Usually that is one sample per step. Window mode is the exception:
- it samples only the last warmup step, then every k-th step;
- a later window's one head sample is the last sample of the window before.

``CheckResult.warmup_steps`` and ``sample_steps`` say so (``None`` when the series is
one sample per step). These words follow them, so no surface calls a baseline sample
"warmup steps".
"""

from __future__ import annotations

from pytest_graphleak.metrics import count_of
from pytest_graphleak.result import CheckResult


def span_text(check: CheckResult, *, short: bool = False) -> str:
    """``100 measured steps after 3 warmup steps`` (short: ``100 steps after 3 warmup``;
    no "after" without warmup), ``50 measured steps after the window before`` for a later
    window; with ``, sampled every k steps`` when not every step was sampled."""
    before = check.warmup_steps
    text = count_of(check.steps, "step") if short else count_of(check.steps, "measured step")
    if before == 0:  # one head sample: the window before's last
        text += " after the window before"
    elif (count := check.warmup if before is None else before) > 0:
        text += f" after {count} warmup" if short else f" after {count_of(count, 'warmup step')}"
    if check.sample_every > 1:
        text += f", sampled every {check.sample_every} steps"
    return text


def head_label(check: CheckResult) -> str:
    """What the series' unjudged head is: ``warmup`` (one sample per warmup step) or
    ``baseline`` (one sample: the end of warmup, or the window before's last)."""
    return "warmup" if check.warmup_steps is None else "baseline"


def step_numbers(check: CheckResult, count: int) -> list[int]:
    """The step after which each of a series' last ``count`` samples was taken: the
    check's ``sample_steps`` (a shorter series, from a probe started late, lines up with
    their end), else 1, 2, 3, ..."""
    known = check.sample_steps
    if known and len(known) >= count:
        return [int(step) for step in known[len(known) - count :]]
    return list(range(1, count + 1))


def raised_text(check: CheckResult) -> str:
    """Where a check's step raised: ``raised at step 5 of 19`` (``, a warmup step`` when
    it was one; ``while measuring after step 5`` when the probes' sampling raised);
    ``""`` when no step raised (an import of the target failed)."""
    step = check.error_step
    if not step:
        return ""
    warmup = check.warmup if check.warmup_steps is None else check.warmup_steps
    planned = warmup + check.steps
    where = "while measuring after step" if check.error_measuring else "at step"
    text = f"raised {where} {step}" + (f" of {planned}" if planned >= step else "")
    return text + (", a warmup step" if step <= warmup else "")


def error_line(check: CheckResult) -> str:
    """The exception and where it was raised: ``ValueError: bad batch; raised at step 5
    of 19``: the message is the exception's own, the step kept apart (``error_step``)."""
    error = str(check.error or "")
    where = raised_text(check)
    return f"{error}; {where}" if where else error

"""Terminal text for one CheckResult: the plugin's failure text for a leak, and a short
table of what was measured when the step is clean."""

from __future__ import annotations

from pytest_graphleak.metrics import format_amount, format_rate
from pytest_graphleak.report.scale import sparkline
from pytest_graphleak.report.text import render_text
from pytest_graphleak.result import CheckResult
from pytest_graphleak.verdict import slowest_leak_text


def verdict_line(result: CheckResult) -> str:
    """One line: LEAK / UNMEASURED / CLEAN / ERROR, the name, and why."""
    if result.error:
        # An import failure says so itself ("importing x.py raised ..."); a step's error
        # is its exception ("ValueError: ... at step 3").
        raised = "" if result.error.startswith("importing ") else "the step raised "
        return f"ERROR {result.name}: {raised}{result.error}"
    if result.leaked:
        grown = ", ".join(
            f"{g.metric} {format_rate(g.per_step, result.units.get(g.metric, 'objects'))}"
            for g in result.verdict.growths
        )
        return f"LEAK  {result.name}: {result.pattern} ({grown})"
    if result.unmeasured:
        return f"UNMEASURED {result.name}: no verdict: {result.unmeasured}"
    period = result.verdict.slowest_leak_steps
    catches = f"; catches {slowest_leak_text(period)} or faster" if period else ""
    return (
        f"CLEAN {result.name}: nothing grew over {result.steps} steps after "
        f"{result.warmup} warmup{catches} ({result.duration_s:.1f} s)"
    )


def render_result(result: CheckResult) -> str:
    """The full terminal report of one result."""
    if result.leaked:
        return render_text(result)
    lines = [verdict_line(result)]
    if result.verdict.reason and not result.error and not result.unmeasured:
        lines.append(f"  {result.verdict.reason}")
    lines.extend(metric_rows(result))
    return "\n".join(lines)


def metric_rows(result: CheckResult) -> list[str]:
    """metric  start -> end over the measured steps, and a sparkline of every call."""
    # A probe that read 0 at every step (nothing of its kind exists) says nothing.
    zeros = sorted(m for m, values in result.series.items() if not any(values))
    shown = {m: v for m, v in result.series.items() if m not in zeros}
    width = max((len(metric) for metric in shown), default=0)
    rows = []
    for metric, values in sorted(shown.items()):
        unit = result.units.get(metric, "objects")
        measured = values[result.warmup:] or values
        span = (
            f"{format_amount(measured[0], unit)} -> {format_amount(measured[-1], unit)}"
            if measured
            else "no samples"
        )
        spark = sparkline(values, unit, warmup=result.warmup)
        rows.append(f"  {metric:<{width}}  {span:<24} {spark}")
    if zeros:
        rows.append(f"  (0 at every step, not shown: {', '.join(zeros)})")
    return rows

"""Terminal text of one check (sparklines: ``report.scale``).

Pure: a CheckResult in, a string out. ``render_text`` is the marker's failure, the
``GraphLeakError`` message of the fixture and of ``pytest_graphleak.check``; the
``graphleak`` command prints it for a leak, and ``verdict_line`` with a short table of
what was measured (``render_result``) otherwise.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from pytest_graphleak.baseline import PRUNE_INTRO, UPDATE_INTRO, fixed_heading, stale_heading
from pytest_graphleak.metrics import format_amount, format_rate
from pytest_graphleak.patterns import FALLBACK, RETAINED_GRAD_FN
from pytest_graphleak.report.model import BaselineSection, metric_order
from pytest_graphleak.report.scale import sparkline
from pytest_graphleak.report.span import error_line, head_label, span_text
from pytest_graphleak.report.view import diagnosis_view
from pytest_graphleak.report.view import site_text as view_site_text
from pytest_graphleak.result import JUDGED_AT_FIXTURE_TEARDOWN, CheckResult, CreationSite, Growth
from pytest_graphleak.status import BY_WORD as STATUS_WORDS
from pytest_graphleak.status import CLEAN, ERROR, LEAKED, UNMEASURED
from pytest_graphleak.verdict import slowest_leak_text
from pytest_graphleak.words.outlive import tests_text

#: Series longer than this are shown as head ... tail.
_MAX_SHOWN = 24


def render_text(result: CheckResult, *, series: bool = True) -> str:
    """The report of one check: what grew, from what to what, the pattern and the fix.
    ``series``: with every sample's value (the plugin shows them under ``-v``; the
    sparklines tell the shape without them)."""
    status = result.status  # the one rule: a leak outranks an error, an error no verdict
    if status == ERROR:
        return f"graphleak: {result.name}: the step raised {error_line(result)}"
    if result.kind == "outlive":
        return render_outlive(result)
    notes = [f"  note: {note}" for note in result.notes]
    if status == UNMEASURED:  # why, then what to change, as a leak's text ends
        fix = f"\n  fix: {result.unmeasured_fix}" if result.unmeasured_fix else ""
        return f"graphleak: {result.name}: not measured, so no verdict: {result.unmeasured}{fix}"
    if status == CLEAN:
        return "\n".join([f"graphleak: {result.name}: no leak ({result.verdict.reason})", *notes])
    pattern = result.pattern or FALLBACK
    lines = [
        f"graphleak: {result.name} leaks: {pattern}",
        f"  {span_text(result)} ({result.duration_s:.2f} s); grew:",
    ]
    growths = grown_in_order(result)
    width = max(len(g.metric) for g in growths) if growths else 0
    lines.extend(_growth_rows(result, growths, width))
    if series:
        lines.append(f"  series ({head_label(result)} | measured):")
    for growth in growths if series else ():
        values = result.series.get(growth.metric, [])
        unit = result.declared(growth.metric).unit
        lines.append(f"    {growth.metric:<{width}}  {compact_series(values, result.warmup, unit)}")
    view = diagnosis_view(pattern, result.diagnosis)
    for line in view:
        if line.kind == "fix":
            lines.extend(notes)  # the check's own notes (what it could not measure) before
        lines.append(f"  {line.plain()}")
    if not any(line.kind == "fix" for line in view):
        lines.extend(notes)
    return "\n".join(lines)


def grown_in_order(result: CheckResult) -> list[Growth]:
    """The grown metrics in the order every surface lists them (``model.metric_order``)."""
    found = {g.metric: g for g in result.verdict.growths}
    return [found[metric] for metric in metric_order(result, found)]


def render_outlive(result: CheckResult) -> str:
    """The outlive audit's report of one holder: what the test left alive and why."""
    nodeid = result.name.removesuffix("::outlive")
    pattern = result.pattern or RETAINED_GRAD_FN
    header = f"graphleak: {nodeid} left autograd graphs alive after its teardown (outlive)"
    # judged at a wider-scope fixture's teardown: typed since judged_at was kept; a report
    # saved before then says so in its reason alone
    at = result.judged_at
    if at is not None and at.label:  # its own row, named for the fixture
        header = f"graphleak: {at.row} kept autograd graphs alive after its teardown (outlive)"
    elif at is not None or JUDGED_AT_FIXTURE_TEARDOWN in result.verdict.reason:
        header = (
            f"graphleak: autograd graphs were still alive when a wider-scope fixture "
            f"was torn down, at the teardown of {nodeid} (outlive)"
        )
    lines = [header, f"  {result.verdict.reason}"]
    if at is not None and at.requested_by:
        lines.append(f"  requested by: {tests_text(at.requested_by)}")
    view = diagnosis_view(pattern, result.diagnosis, outlive=True)
    lines.extend(f"  {line.plain()}" for line in view)
    lines.append(f"  {KEPT_ON_PURPOSE}")
    return "\n".join(lines)


#: The outlive story's last line: what to do when the graph is kept on purpose.
KEPT_ON_PURPOSE = (
    "kept on purpose? mark the test @pytest.mark.graphleak_outlive_ok, or "
    "list the holder in graphleak_outlive_keep"
)


def site_text(site: CreationSite) -> str:
    """``path.py:42 in fn: <source line>  (via lib/module.py:7)``, the path relative to
    the working directory when the file is under it."""
    return view_site_text(site)


def _growth_rows(result: CheckResult, growths: Sequence[Growth], width: int) -> list[str]:
    """metric, start -> end, growth per step and a sparkline, in columns as narrow as the
    values (the report section's layout): the rows fit 80 columns."""
    cells = []
    for growth in growths:
        declared = result.declared(growth.metric)
        unit = declared.unit
        cells.append(
            (
                growth.metric,
                f"{format_amount(growth.start, unit)} -> {format_amount(growth.end, unit)}",
                format_rate(growth.per_step, unit),
                sparkline(
                    result.series.get(growth.metric, []),
                    unit,
                    warmup=result.warmup,
                    noise=declared.tolerance,
                ),
            )
        )
    span = max((len(c[1]) for c in cells), default=0)
    rate = max((len(c[2]) for c in cells), default=0)
    return [f"    {m:<{width}}  {r:>{span}}  {g:>{rate}}  {spark}" for m, r, g, spark in cells]


def compact_series(values: Sequence[float], warmup: int, unit: str = "objects") -> str:
    """``1 2 3 | 4 5 6 ... 19 20`` (bytes as every surface writes them, ``88 B  96 B``:
    two spaces apart), with warmup before the bar."""
    shown = [format_amount(v, unit) for v in values]
    gap = "  " if unit == "bytes" else " "
    head = shown[:warmup]
    tail = shown[warmup:]
    if len(tail) > _MAX_SHOWN:
        keep = _MAX_SHOWN // 2
        tail = [*tail[:keep], "...", *tail[-keep:]]
    return gap.join([*head, "|", *tail]) if head else gap.join(tail)


def verdict_line(result: CheckResult) -> str:
    """One line: the status's word (LEAKED / ERROR / UNMEASURED / CLEAN), the name, why."""
    status = result.status
    label = STATUS_WORDS[status].label
    if status == LEAKED:
        grown = ", ".join(
            f"{g.metric} {format_rate(g.per_step, result.declared(g.metric).unit)}"
            for g in grown_in_order(result)
        )
        return f"{label} {result.name}: {result.pattern} ({grown})"
    if status == ERROR:
        # An import failure says so itself ("importing x.py raised ..."); a step's error
        # is its exception and where ("ValueError: ...; raised at step 3 of 19 (...)").
        error = error_line(result)
        raised = "" if error.startswith("importing ") else "the step raised "
        return f"{label} {result.name}: {raised}{error}"
    if status == UNMEASURED:
        return f"{label} {result.name}: no verdict: {result.unmeasured}"
    period = result.verdict.slowest_leak_steps
    catches = f"; catches {slowest_leak_text(period)} or faster" if period else ""
    return (
        f"{label} {result.name}: nothing grew over {span_text(result, short=True)}"
        f"{catches} ({result.duration_s:.1f} s)"
    )


def render_result(result: CheckResult) -> str:
    """The full terminal report of one result."""
    if result.status == LEAKED:
        return render_text(result)
    lines = [verdict_line(result)]
    if result.verdict.reason and result.status == CLEAN:
        lines.append(f"  {result.verdict.reason}")
    if result.status == UNMEASURED and result.unmeasured_fix:  # what to change
        lines.append(f"  fix: {result.unmeasured_fix}")
    lines.extend(metric_rows(result))
    return "\n".join(lines)


def baseline_lines(section: BaselineSection | None, width: int = 80) -> list[str]:
    """What a run said of its baseline file's entries, as its terminal said it, in
    ``width`` columns: the entries fixed since the baseline and those whose test is gone,
    each block with the command that updates the file (``graphleak report``; the
    terminal's own lines are ``plugin/baseline.BaselineRun.lines``)."""
    if section is None:
        return []
    lines: list[str] = []
    blocks = (
        (section.fixed, fixed_heading(len(section.fixed), section.file), UPDATE_INTRO),
        (section.stale, stale_heading(len(section.stale), section.entries), PRUNE_INTRO),
    )
    for keys, heading, intro in blocks:
        if keys:
            lines += [
                *(
                    part
                    for line in (heading, *(f"  {key.text()}" for key in keys), intro)
                    for part in wrap_line(line, width)
                ),
                *command_lines(section.update_command, width),
            ]
    return lines


def metric_rows(result: CheckResult) -> list[str]:
    """metric  start -> end over the measured steps, and a sparkline of every call."""
    # A probe that read 0 at every step (nothing of its kind exists) says nothing.
    ordered = metric_order(result, result.series)
    zeros = [m for m in ordered if not any(result.series[m])]
    shown = {m: result.series[m] for m in ordered if m not in zeros}
    width = max((len(metric) for metric in shown), default=0)
    rows = []
    for metric, values in shown.items():
        declared = result.declared(metric)
        unit = declared.unit
        measured = values[result.warmup :] or values  # not empty: empty series are zeros
        span = f"{format_amount(measured[0], unit)} -> {format_amount(measured[-1], unit)}"
        spark = sparkline(values, unit, warmup=result.warmup, noise=declared.tolerance)
        rows.append(f"  {metric:<{width}}  {span:<24} {spark}")
    if zeros:
        rows.append(f"  (0 at every step, not shown: {', '.join(zeros)})")
    return rows


#: A labelled line (``  fix: ...``, ``  held by: ...``): its continuation lines start
#: under the text after the label.
_LABEL = re.compile(r"^(\s*)([a-z][a-z ]{0,14}: )")
#: The fields of a row (``LEAKED  test_x.py::test  list-accumulation  held: ...``).
_FIELDS = re.compile(r"(?<=\S) {2,}(?=\S)")


def wrap_line(line: str, width: int) -> list[str]:
    """``line`` in lines of at most ``width`` columns, broken at spaces (a path, a chain
    link or a line of code is not cut); only a word wider than a line (a long test id)
    folds, after ``::`` or ``/`` or before ``[`` (``words``). A labelled line
    (``fix: ...``) goes on under the text after its label; a row of fields two spaces
    apart breaks between fields first, each further line indented by four columns. A
    line that fits, or a width under 40 columns, is left as it is."""
    if len(line) <= width or width < 40:
        return [line]
    lead = len(line) - len(line.lstrip())
    found = _LABEL.match(line)
    if found:
        return words(line, width, min(len(found.group(0)), width // 3))
    fields = _FIELDS.split(line.strip())
    column = len(line) - len(fields[-1]) if len(fields) == 2 else width
    if column <= width // 2 and " " in fields[-1]:
        # a metric and its values (a series): the values go on under their own column,
        # so that the rows of a block stay aligned
        return words(line, width, column)
    lines: list[str] = []
    for field in fields:
        if lines and len(lines[-1]) + 2 + len(field) <= width:
            lines[-1] += "  " + field
        elif lines and len(field) > width - lead - 4:  # a long id: folded from this line on
            lines[-1:] = words(f"{lines[-1]}  {field}", width, lead + 4)
        else:
            lines.extend(words(" " * (lead + 4 if lines else lead) + field, width, lead + 4))
    return lines


def command_lines(command: str, width: int, indent: str = "  ") -> list[str]:
    """A shell command (``shlex.join``'s quoting) to be copied as it is, in ``width``
    columns: broken between its words, each line but the last ended by `` \\`` (the
    shell's line continuation), each further line indented two more columns; a word
    longer than a line stays whole. Whole on one line where it fits, or in a width under
    40 columns (as ``wrap_line``)."""
    if len(indent) + len(command) <= width or width < 40:
        return [indent + command]
    words = [shlex.quote(word) for word in shlex.split(command)]
    lines = [indent + words[0]] if words else [indent]
    for word in words[1:]:
        if len(lines[-1]) + 1 + len(word) + 2 <= width:  # room for " \\" after it
            lines[-1] += " " + word
        else:
            lines.append(f"{indent}  {word}")
    return [line + " \\" for line in lines[:-1]] + lines[-1:]


def wrapped(text: str, width: int) -> list[tuple[str, str]]:
    """Each line of a report in ``width`` columns (``wrap_line``), paired with the line it
    came from (whose label gives its colour, ``line_markup``). A leak's headline
    (``graphleak: <test id> leaks: <pattern>``), the line a CI log is searched for, keeps
    ``leaks: <pattern>`` together: where it does not fit, the id goes on its own line
    (folded as ``words`` folds it), the pattern on the next."""
    parts: list[tuple[str, str]] = []
    for line in text.split("\n"):
        head = line.startswith("graphleak: ") and " leaks: " in line
        glued = line.replace(" leaks: ", " leaks:\0", 1) if head else line
        parts.extend((part.replace("\0", " "), line) for part in wrap_line(glued, width))
    return parts


#: Where a word wider than a line (a test id, a path) may fold: after ``::`` or ``/``,
#: before ``[`` (as the HTML report breaks its ids).
_FOLDS = re.compile(r"(?<=::)|(?<=/)(?!/)|(?=\[)")


def words(line: str, width: int, indent: int) -> list[str]:
    """``line`` broken at spaces, its own indent kept, the rest under ``indent``; a word
    wider than a line folds at ``_FOLDS`` (a piece wider than a line stays whole)."""
    lines = [line[: len(line) - len(line.lstrip())]]
    fresh = True  # nothing on the last line but its indent
    for gap, word in re.findall(r"(\s*)(\S+)", line.lstrip()):
        pieces = _FOLDS.split(word) if len(word) > width - indent else [word]
        for index, piece in enumerate(filter(None, pieces)):
            glue = "" if fresh or index else gap
            if not fresh and len(lines[-1]) + len(glue) + len(piece) > width:
                lines.append(" " * indent)
                glue = ""
            lines[-1] += glue + piece
            fresh = False
    return lines


#: How each line of a failure text is coloured in a terminal that shows colour (pytest's
#: ``--color``, the ``graphleak`` commands' ``--color``): by its label, the first match wins.
LINE_MARKUP: tuple[tuple[str, dict[str, bool]], ...] = (
    ("graphleak: ", {"red": True, "bold": True}),
    ("pattern: ", {"red": True}),
    ("held by: ", {"yellow": True, "bold": True}),
    ("cycle: ", {"yellow": True, "bold": True}),
    ("stored at: ", {"cyan": True, "bold": True}),
    ("fix: ", {"green": True, "bold": True}),
    ("fix (", {"green": True, "bold": True}),  # fix (verified: ...): / fix (not verified):
)


def line_markup(line: str) -> dict[str, bool]:
    """The TerminalWriter markup of one failure-text line (``{}``: plain)."""
    text = line.lstrip()
    return next((dict(markup) for label, markup in LINE_MARKUP if text.startswith(label)), {})

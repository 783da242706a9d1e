"""What a person reads in the terminal: the header line, the one-line message of a leak
(pytest's short summary, the warn-only warning), a warned check's detail lines, the hint
for marked tests that ran unchecked, and ``-v`` progress of long checks and diagnoses.
The rows of the ``graphleak report`` summary section are ``plugin/report_section``'s.

Pure text from plain data, apart from ``Progress`` and ``warn_leak``, which write.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from _pytest._code import code as _code
from _pytest.pathlib import bestrelpath

from pytest_graphleak.metrics import format_amount
from pytest_graphleak.patterns import FALLBACK
from pytest_graphleak.report.model import (
    headline_growth,
)
from pytest_graphleak.report.text import (
    LINE_MARKUP,
    line_markup,
    words,
    wrap_line,
    wrapped,
)
from pytest_graphleak.report.view import diagnosis_view
from pytest_graphleak.result import CheckResult
from pytest_graphleak.status import BY_WORD as STATUS_FACTS
from pytest_graphleak.status import (
    LEAKED,
    UNMEASURED,
)
from pytest_graphleak.words.chain import names_of

__all__ = ["LINE_MARKUP", "line_markup"]  # their home is report.text; read here too

MARKER = "no_graph_growth"
#: The outlive audit's opt-out marker (here, not in ``audit``: the plugin registers it in
#: every run, and imports the audit only when it runs).
OPT_OUT = "graphleak_outlive_ok"
OPT_OUT_HELP = (
    f"{OPT_OUT}(reason=''): with --graphleak, do not audit this test for autograd graphs "
    "that outlive it (it keeps them on purpose: a cache, a graph handed to a later test)"
)

_NOUNS = {"tensors": ("tensor", "tensors"), "nodes": ("graph node", "graph nodes")}


def header_lines(settings: Any, columns: int) -> list[str] | None:
    """The header line in ``columns``: folded between its settings (never inside one:
    ``rss_tolerance=1.0 MiB/step`` stays whole), each further line indented by four
    columns; None when checking is off."""
    parts = header_parts(settings)
    if parts is None:
        return None
    lines = [parts[0]]
    for part in parts[1:]:
        if len(lines[-1]) + 1 + len(part) <= columns:
            lines[-1] += " " + part
        else:
            lines.append("    " + part)
    return lines


def header_parts(settings: Any) -> list[str] | None:
    """The header's words: what is checked, then each setting in effect."""
    if not settings.enabled:
        return None
    probes = ",".join(settings.probes) if settings.probes else "all imported"
    parts = [
        f"graphleak: checking @pytest.mark.{MARKER} tests:",
        f"steps={settings.steps}",
        f"warmup={settings.warmup}",
        f"rss_tolerance={format_amount(settings.rss_tolerance, 'bytes')}/step",
        f"probes={probes}",
        f"start_scan={settings.start_scan}",
        "diagnose=" + ("on" if settings.diagnose else "off"),
    ]
    if settings.warn_only:
        parts.append("warn-only (leaks do not fail)")
    return parts


def crash_message(item: Any, result: CheckResult, when: str = "call") -> str:
    """The message of pytest's short summary line (``LEAKED <nodeid> - <message>``, or
    ``ERROR ...`` for a check that failed a fixture's setup or teardown, ``when``): the
    ``short_message``, with fewer links of the holder where pytest would cut the line at
    the terminal's width (it cuts mid-word), unless pytest shows it whole (CI, ``-vv``)."""
    word = STATUS_FACTS[UNMEASURED if result.status == UNMEASURED else LEAKED].label
    if when != "call":  # a fixture's check: pytest's ERROR row, not ours
        word = "ERROR"
    return short_message(result, room=summary_room(item, word))


def summary_room(item: Any, word: str) -> int | None:
    """The columns left for the message of pytest's short summary line ``<word> <nodeid>
    - <message>``, which pytest cuts there, mid-word; None where pytest shows it whole
    (CI, ``-vv``)."""
    config = item.config
    if os.environ.get("CI") or os.environ.get("BUILD_NUMBER") or config.option.verbose >= 2:
        return None
    return columns_of(config) - len(f"{word} {item.nodeid} - ")


#: ``workerinput`` key: the width the pytest-xdist controller writes at (``columns_of``).
WORKER_COLUMNS = "graphleak_columns"


def columns_of(config: Any) -> int:
    """The width pytest writes at (80 where it has no terminal reporter: ``-p no:terminal``);
    on a pytest-xdist worker, the controller's, which prints what the worker wrote (80
    where the controller did not say)."""
    workerinput = getattr(config, "workerinput", None)
    if isinstance(workerinput, dict):
        return int(workerinput.get(WORKER_COLUMNS, 80))
    try:
        return int(config.get_terminal_writer().fullwidth)
    except (AttributeError, AssertionError):
        return 80


def warning_text(text: str, columns: int, *, first: int | None = None) -> str:
    """A warning's text as pytest's warnings summary shows it in ``columns``: broken at
    spaces (``wrap_line``), two columns narrower for the summary's own indent. ``first``:
    the columns left for the first line after pytest's ``file:line: Category: `` (None:
    the first line stays whole)."""
    head, *rest = text.split("\n")
    more: list[str] = []
    if first is not None and len(head) > first:
        cut = words(head, max(first, 20), 0)
        # a first word wider than the room goes under pytest's line, with the rest
        head, cut = ("", cut) if len(cut[0]) > first else (cut[0], cut[1:])
        more = words("  " + " ".join(cut), columns - 2, 2) if cut else []
    broken = [part for line in rest for part in wrap_line(line, columns - 2)]
    return "\n".join([head, *more, *broken])


def warn_at_test(item: Any, category: type[Warning], message: str) -> None:
    """Warn ``message``, attributed to the test's own definition (not to the plugin), its
    file as pytest's short summary names it (relative to where pytest was run, where that
    is shorter), the message broken at spaces so that pytest's ``file:line: Category:``
    line fits the terminal."""
    function = getattr(item, "function", None)
    code = getattr(function, "__code__", None)
    filename = code.co_filename if code is not None else str(getattr(item, "path", "?"))
    lineno = code.co_firstlineno if code is not None else 0
    module = getattr(getattr(item, "module", None), "__name__", "graphleak")
    try:
        shown = bestrelpath(item.config.invocation_params.dir, Path(filename))
    except (OSError, ValueError, AttributeError):  # another drive; no config
        shown = filename
    filename = shown if len(shown) < len(filename) else filename
    columns = columns_of(item.config)
    room = columns - len(f"  {filename}:{lineno}: {category.__name__}: ")
    text = warning_text(message, columns, first=room)
    warnings.warn_explicit(category(text), category, filename, lineno, module=module)


def short_message(result: CheckResult, room: int | None = None) -> str:
    """``list-accumulation: +1 tensor/step, held by fixture 'state' -> dict['losses']``;
    within ``room`` columns where it can be: the holder's last links, then the holder
    left out, never a word cut."""
    if result.status == UNMEASURED:
        told = f"not measured, so no verdict: {result.unmeasured}"
        if room is None or len(told) <= room:
            return told
        # pytest would cut it mid-word: the reason alone, ended at a space, marked as cut
        told = f"not measured: {result.unmeasured}"
        cut = told[: max(0, room - 3)].rsplit(" ", 1)[0].rstrip(",;:")  # a whole word last
        return f"{cut} ..." if len(cut) > len("not measured") else "not measured"
    pattern = result.pattern or "leak"
    growth = headline_growth(result)  # the one order: the HTML index names it too
    parts = [pattern]
    if growth is not None:
        parts[0] += f": {_rate(growth.metric, growth.per_step, result)}"
    diagnosis = result.diagnosis
    if diagnosis is not None and diagnosis.chain:
        # The root and the named links after it (``dict['losses']``), up to the first
        # object that is described (``list(len=3)``): read from the typed links.
        links = list(diagnosis.chain[: max(1, len(names_of(diagnosis.links)))])
        while len(links) > 1 and room is not None and len(_joined(parts, links)) > room:
            links.pop()
        if room is None or len(_joined(parts, links)) <= room:
            parts.append("held by " + " -> ".join(links))
    elif diagnosis is not None and diagnosis.cycle:
        parts.append("kept by a reference cycle")
    told = ", ".join(parts)
    return pattern if room is not None and len(told) > room else told  # then the word alone


def _joined(parts: list[str], links: list[str]) -> str:
    return ", ".join([*parts, "held by " + " -> ".join(links)])


def _rate(metric: str, per_step: float, result: CheckResult) -> str:
    declared = result.declared(metric)
    amount = format_amount(per_step, declared.unit, signed=True)
    nouns = _NOUNS.get(declared.counts)
    if nouns is not None and declared.unit == "objects":
        return f"{amount} {nouns[0] if abs(per_step) == 1 else nouns[1]}/step"
    return f"{metric} {amount}/step"


def warn_leak(item: Any, result: CheckResult, category: type[Warning]) -> None:
    """Warn-only mode: one line, attributed to the test's own definition (not to the
    plugin); the full report is in the ``graphleak report`` section, not repeated."""
    what = "graph leak" if result.leaked else "no verdict"
    # pytest names the test over its warnings: the check's name only where it says more
    # (``check(step)``, ``track(1)``)
    name = result.name.removeprefix(getattr(item, "nodeid", "")).lstrip(":")
    told = f"{name}: {what}" if name else what
    warn_at_test(
        item,
        category,
        f"{told} (warn-only, not failed)\n"
        f"  {short_message(result)}; see the graphleak report section",
    )


def detail_lines(check: CheckResult) -> list[str]:
    """The failure text's diagnosis lines (held by, cycle, created at, stored at, fix) of a
    check: what a warned check shows in the summary section instead of a failure. The
    pattern heads the summary's line; notes have their own lines."""
    pattern = check.pattern or FALLBACK
    outlive = check.kind == "outlive"  # no series: its notes are the diagnosis' own
    view = diagnosis_view(pattern, check.diagnosis, outlive=outlive)
    hidden = ("pattern",) if outlive else ("pattern", "note")
    return [line.plain() for line in view if line.kind not in hidden]


def unchecked_hint(reports: Iterable[Any]) -> str | None:
    """One line when tests marked ``no_graph_growth`` ran without ``--graphleak``."""
    count = sum(
        1
        for report in reports
        if getattr(report, "when", None) == "call" and MARKER in getattr(report, "keywords", {})
    )
    if not count:
        return None
    tests = "test" if count == 1 else "tests"
    return (
        f"graphleak: {count} {tests} marked @pytest.mark.{MARKER} ran once, unchecked: "
        "add --graphleak (or graphleak = true in the ini file) to check them for leaks"
    )


class Progress:
    """``-v`` progress of one check: after ``after_s`` seconds, a short note at most every
    ``every_s`` seconds (``step 12/19``, then ``diagnosing``), written after the test's
    name on the same line. Silent without ``-v`` or a terminal reporter."""

    def __init__(
        self, config: Any, total: int, *, after_s: float = 2.0, every_s: float = 2.0
    ) -> None:
        verbose = (config.getoption("verbose", default=0) or 0) > 0
        reporter = config.pluginmanager.get_plugin("terminalreporter") if verbose else None
        self._reporter_write = getattr(reporter, "write", None)
        self._capture = config.pluginmanager.get_plugin("capturemanager")
        self._total = total
        self._calls = 0
        self._start = time.perf_counter()
        self._after = after_s
        self._every = every_s
        self._last = 0.0

    def tick(self) -> None:
        """Call once per step call; calls past ``total`` are the diagnosis' steps."""
        self._calls += 1
        if self._reporter_write is None:
            return
        now = time.perf_counter() - self._start
        if now < self._after or now - self._last < self._every:
            return
        self._last = now
        what = f"step {self._calls}/{self._total}" if self._calls <= self._total else "diagnosing"
        suspended = getattr(self._capture, "global_and_fixture_disabled", contextlib.nullcontext)
        with suspended():  # the test's output is being captured: write past it
            self._reporter_write(f"[{what}, {now:.0f} s] ")


class ReprEntry(_code.ReprEntry):
    """pytest's entry of a value-style failure (the marker's report, no traceback), its
    lines coloured by ``line_markup``. Named as pytest's own class, so that pytest-xdist
    serializes it as one (the controller then prints it plain)."""

    def _write_entry_lines(self, tw: Any) -> None:
        if self.style != "value":
            super()._write_entry_lines(tw)
            return
        for part, line in wrapped("\n".join(self.lines), getattr(tw, "fullwidth", 80)):
            tw.write(part, **line_markup(line))
            tw.write("\n")


def colour_failure(longrepr: Any, *, worker_columns: int | None = None) -> None:
    """Let the value-style entries of ``longrepr`` colour their lines (in place). On a
    pytest-xdist worker (``worker_columns``: the controller's width) the lines are broken
    here: the controller gets pytest's plain entry, which prints its lines as they are."""
    for element in getattr(longrepr, "chain", ()):
        entries = getattr(element[0], "reprentries", None)
        if entries is None:
            continue
        for index, entry in enumerate(entries):
            if type(entry) is _code.ReprEntry and entry.style == "value":
                fields = {f.name: getattr(entry, f.name) for f in dataclasses.fields(entry)}
                if worker_columns is not None:
                    text = "\n".join(fields["lines"])
                    fields["lines"] = [part for part, _ in wrapped(text, worker_columns)]
                entries[index] = ReprEntry(**fields)

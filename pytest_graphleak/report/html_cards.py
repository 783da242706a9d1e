"""The HTML report's card of one test: one ``<details>`` per test, opened for a leak and
for a check with no verdict, folded for a clean or known one (``status.TABLE``'s group).

Each card switches on its check's status (``model.TestRow.status_of``), never on raw
fields: a leak opens with what to change (pattern, held by, stored at, fix), an error
with the step that raised and the user's line, an unmeasured check with what ran and
what to change, and then the numbers. Every piece of text that came from a test (node
ids, chains, source lines, DOT) is escaped, and long tokens break only at their
separators (``breakable``).
"""

from __future__ import annotations

import linecache
import os
from collections.abc import Callable, Sequence
from html import escape

from pytest_graphleak.metrics import count_of, format_amount, format_rate
from pytest_graphleak.paths import display_path, relative_to
from pytest_graphleak.patterns import FALLBACK
from pytest_graphleak.report.dot import diagnosis_dot
from pytest_graphleak.report.graph_svg import chain_svg, cycle_svg
from pytest_graphleak.report.model import TestRow, metric_rows
from pytest_graphleak.report.span import head_label, raised_text, span_text, step_numbers
from pytest_graphleak.report.svg import draws_band, series_chart
from pytest_graphleak.report.view import (
    LABELS,
    ViewLine,
    diagnosis_view,
    known_text,
    site_text,
    to_change,
)
from pytest_graphleak.result import CheckResult, CreationSite, Diagnosis
from pytest_graphleak.status import BY_WORD, ERROR, KNOWN, UNMEASURED

#: Renders DOT text to an inline ``<svg>``; None means "show the DOT text instead".
DotRenderer = Callable[[str], "str | None"]

#: How each kind of diagnosis line is set (``report.view``).
VIEW_CSS = {
    "held-by": "mono",
    "cycle": "mono",
    "stored-at": "mono",
    "created-at": "mono",
    "fix": "fix",
}

#: Where a long token may break: after these (node ids, paths, dotted names, calls).
_SEPARATORS = ("::", "/", ".", "(", ",", "_", "=", "[")


def breakable(text: str) -> str:
    """Escaped, with break opportunities after ``::``, ``/``, ``.``, ``(``, ``,``, ``_``,
    ``=`` and ``[``: node ids, paths, chains and fixes wrap between their parts on a
    phone, never inside a word (``loss.item()`` may break as ``loss.`` / ``item()``)."""
    # a command-line flag (``--graphleak-probes=...``) is one unit: a browser would break
    # it after a hyphen, and a reader would copy half of it
    return " ".join(
        f'<span class="flag">{escape(word, quote=False)}</span>'
        if word.startswith("--") and len(word) > 2
        else _breakable_word(word)
        for word in text.split(" ")
    )


def breakable_id(nodeid: str) -> str:
    """A test id, escaped, with break opportunities only between its parts: after ``::``
    and ``/``, and before ``[`` (``tests/test_x.py::test_step`` / ``[42]``), never inside
    a name (``test_train_step`` stays whole, as the reader types it)."""
    out = escape(nodeid, quote=False).replace("::", "::\0").replace("/", "/\0")
    return out.replace("[", "\0[", 1).replace("\0", "<wbr>")


def seconds(test: TestRow) -> str:
    """The time a test's checks took (``0.03 s``, ``<0.01 s``), or "" when nothing was
    timed (the outlive audit, which runs no step)."""
    if not any(check.duration_s for check in test.checks):
        return ""
    taken = duration(test)
    return "<0.01 s" if taken < 0.005 else f"{taken:.2f} s"


def _breakable_word(word: str) -> str:
    out = escape(word, quote=False)
    for separator in _SEPARATORS:
        out = out.replace(separator, separator + "\0")
    # a chain's arrow never splits into "-" and ">" (a browser breaks after a hyphen)
    return out.replace("\0", "<wbr>").replace("-&gt;", '<span class="arrow">-&gt;</span>')


def badge(status: str) -> str:
    """The status's badge: its label, in its colour (``status.TABLE``)."""
    facts = BY_WORD.get(status)
    word = facts.word if facts is not None else "error"
    return f'<span class="badge {word}">{escape(facts.label if facts else status)}</span>'


def table(headers: Sequence[str], rows: Sequence[str], css: str = "") -> str:
    """A table that scrolls sideways on a narrow screen; ``headers`` are escaped."""
    head = f"<tr>{''.join(f'<th>{escape(h)}</th>' for h in headers)}</tr>" if headers else ""
    attr = f' class="{css}"' if css else ""
    return f'<div class="scroll"><table{attr}>{head}{"".join(rows)}</table></div>'


def shown_path(filename: str, root: str | None) -> str:
    """A path as the terminal shows it: relative to the rootdir (or the working
    directory) when the file is under it, else as it is."""
    under_root = relative_to(filename, root) if root and os.path.isabs(filename) else None
    return under_root or display_path(filename)


def duration(test: TestRow) -> float:
    """Seconds a test's checks took, all together."""
    return sum(float(check.duration_s or 0.0) for check in test.checks)


class Cards:
    """How the page draws a test: the Graphviz renderer and the rootdir that paths are
    shown relative to. Each block of a check is one method returning HTML text."""

    def __init__(self, draw: DotRenderer | None, root: str | None, baseline: str = "") -> None:
        self.draw = draw
        self.root = root
        self.baseline = baseline  # the baseline file (a known finding's card names it)

    def shown(self, filename: str) -> str:
        return shown_path(filename, self.root)

    def card(self, test: TestRow, anchor: str) -> str:
        """One test: its badge, node id and time, then each check's block."""
        status = test.status
        facts = BY_WORD.get(status)
        opened = " open" if facts is not None and facts.opened else ""
        kinds = "".join(
            '<span class="badge kind">outlived the test</span>'
            for check in test.checks[:1]
            if check.kind == "outlive"
        )
        head = (
            f'<section class="test row s-{status}" id="{escape(anchor)}">'
            f'<details class="card"{opened}><summary>{badge(status)}{kinds}'
            f"<h2>{breakable_id(test.nodeid)}</h2>"
            f'<span class="muted duration">{seconds(test)}</span></summary>'
            f'<p class="muted">pytest outcome: {escape(test.outcome)}</p>'
        )
        body = "".join(
            self.check_block(test, index, check) for index, check in enumerate(test.checks)
        )
        return head + body + "</details></section>"

    def check_block(self, test: TestRow, index: int, check: CheckResult) -> str:
        """By the check's status: what to change (or what ran) first, the chain drawn,
        then the numbers, then the sites."""
        parts: list[str] = []
        status = test.status_of(check)
        if len(test.checks) > 1:
            what = "outlive audit" if check.kind == "outlive" else check.name
            parts.append(f"<h3>{badge(status)}check <code>{breakable(what)}</code></h3>")
        diagnosis = check.diagnosis
        if status == ERROR:
            parts.append(self.error_card(check))
        elif status == UNMEASURED:
            parts.append(self.unmeasured_card(check))
        elif BY_WORD[status].found:
            parts.append(self.what_to_change(check, known=status == KNOWN))
        if diagnosis is not None:
            parts.append(self.graph(diagnosis))
        parts.append(self.outcome_line(check))
        parts += [metrics_table(check), self.charts(check)]
        if diagnosis is not None:
            parts.append(self.evidence(diagnosis))
        return "".join(parts)

    def error_card(self, check: CheckResult) -> str:
        """What raised, where (the step and the user's line) and what to change."""
        rows = [("raised", f"<code>{breakable(check.error or '')}</code>", "")]
        where = raised_text(check)
        if where:
            rows.append(("where", escape(where), ""))
        site = check.error_site
        if site:
            rows.append(("your line", breakable(site_text(site, self.shown)), "mono"))
        rows.append(
            (
                "fix",
                "the step's own error, at your line: once a step runs "
                "through, the check gives a verdict",
                "fix",
            )
        )
        source = ""
        if site:
            source = source_context(site.filename, site.lineno, self.root)
        return _change_block("the step raised, so there is no verdict", rows) + source

    def unmeasured_card(self, check: CheckResult) -> str:
        """The change to make, with its syntax (``CheckResult.unmeasured_fix``), then why
        there is no verdict."""
        rows = []
        if check.unmeasured_fix:
            rows.append(("fix", breakable(check.unmeasured_fix), "fix"))
        rows.append(("why", breakable(check.unmeasured or ""), ""))
        return _change_block("not measured, so there is no verdict", rows)

    def what_to_change(self, check: CheckResult, *, known: bool = False) -> str:
        """The lines to act on (``view.to_change``): pattern, held by, cycle, stored at, fix;
        a known finding's first, with the reason its baseline entry gives."""
        pattern = str(check.pattern or FALLBACK)
        outlive = check.kind == "outlive"
        lines = to_change(
            diagnosis_view(pattern, check.diagnosis, path=self.shown, outlive=outlive)
        )
        # the label alone ("fix"), its qualifier ("verified: 19 more steps ...") under the
        # text: a long label would widen the label column of every row
        rows = [(LABELS[line.kind], view_cell(line), VIEW_CSS.get(line.kind, "")) for line in lines]
        if known:  # why it fails nothing: "known", then "in FILE: <reason>"
            label, _, why = known_text(check.known_reason, self.baseline).partition(", ")
            rows.insert(0, (escape(label), escape(why), "known"))
        return _change_block("what to change", rows)

    def outcome_line(self, check: CheckResult) -> str:
        """What ran: the steps (an error's, up to the step that raised), the verdict."""
        if check.kind == "outlive":  # the audit after teardown: no steps, no series
            line = "outlived the test: still alive after its teardown"
        elif check.error is not None:  # the card above says where it raised
            return ""
        elif check.unmeasured:  # it ran, but nothing was judged: no "measured steps"
            ran = check.warmup + check.steps
            line = f"ran {count_of(ran, 'step')} ({check.warmup} warmup); no verdict"
        else:
            line = span_text(check)
        if check.duration_s:
            taken = float(check.duration_s)
            line += " (<0.01 s)" if taken < 0.005 else f" ({taken:.2f} s)"
        parts = [f"<p>{escape(line)}</p>"]
        if check.verdict.reason and check.error is None and not check.unmeasured:
            said = check.verdict.reason if check.leaked else clean_verdict(check)
            parts.append(f"<p>verdict: {breakable(said)}</p>")
        return "".join(parts)

    def charts(self, check: CheckResult) -> str:
        # in the table's order, every surface's (``model.metric_order``: grown ones first)
        rows = metric_rows(check)
        # A probe with nothing to count (torch.* in a minigrad test) would only add flat zeros.
        zeros = [r.name for r in rows if not any(v for v in r.series)]
        drawn = [r for r in rows if r.name not in zeros]
        head = head_label(check)
        charts = [
            series_chart(
                r.series,
                warmup=check.warmup,
                title=r.name,
                unit=r.unit,
                highlight=r.grew,
                noise=r.tolerance,
                steps=step_numbers(check, len(r.series)),
                head=head,
            )
            for r in drawn
        ]
        if not charts:
            return ""
        shaded = (
            "warmup steps"
            if head == "warmup"
            else "the baseline sample the measured ones are compared with"
        )
        legend = (
            f"each chart on its own scale; shaded: {shaded} (not judged); bytes drawn "
            "as growth from the first measured step"
        )
        # each band is its own metric's tolerance (malloc's is a share of RSS's): name them all
        banded = [
            f"{r.name} {format_amount(r.tolerance, r.unit)}/step"
            for r in drawn
            if draws_band(r.series, check.warmup, r.tolerance)
        ]
        if banded:
            legend += (
                f"; green band: the growth per step tolerated as noise "
                f"({', '.join(banded)}), growth inside it is not a leak"
            )
        if zeros:
            legend += f"; zero throughout, not drawn: {', '.join(zeros)}"
        return f'<p class="muted">{escape(legend)}</p><div class="charts">{"".join(charts)}</div>'

    def evidence(self, diagnosis: Diagnosis) -> str:
        """The creation and storing sites with their source, the notes."""
        parts = []
        for sites, title, count_header in (
            (diagnosis.sites, "created at", "objects/step"),
            (diagnosis.stored_at, "stored at (the line that puts it in its holder)", "times/step"),
        ):
            if sites:
                parts.append(self.sites_block(title, count_header, sites))
        notes = diagnosis.notes
        if notes:
            parts.append("<ul>" + "".join(f"<li>{escape(str(n))}</li>" for n in notes) + "</ul>")
        return "".join(parts)

    def graph(self, diagnosis: Diagnosis) -> str:
        """The plugin's own drawing of the chain and the cycle, fitted to the page (four
        columns wide, two at 800 px, one on a phone, so its text stays at least 11 px)
        with a full-size view; Graphviz's drawing as well when ``dot`` is on PATH (or its
        DOT text when only it has one)."""
        parts = []
        for labels, title, draw in (
            (diagnosis.chain, "held by (root first)", chain_svg),
            (diagnosis.cycle, "reference cycle", cycle_svg),
        ):
            if not labels:
                continue
            wide = draw(labels, columns=4)
            parts.append(
                f"<h3>{title}</h3>{GRAPH_LEGEND}"
                f'<div class="graph wide">{wide}</div>'
                f'<div class="graph medium">{draw(labels, columns=2)}</div>'
                f'<div class="graph narrow">{draw(labels, columns=1)}</div>'
                f'<details class="fullsize"><summary>full size</summary><div>{wide}</div>'
                "</details>"
            )
        dot_text = diagnosis_dot(diagnosis)
        if dot_text:
            svg = self.draw(dot_text) if self.draw is not None else None
            if svg is not None:
                parts.append(
                    '<details class="graphviz"><summary>Graphviz\'s drawing of the retained '
                    f'graph</summary><div class="graph">{svg}</div></details>'
                )
            elif diagnosis.drawing is not None or not parts:
                parts.append(
                    "<details><summary>the retained graph as DOT text (draw it with "
                    "Graphviz: <code>dot -Tsvg</code>)</summary>"
                    f"<pre>{escape(dot_text)}</pre></details>"
                )
        return "".join(parts)

    def sites_block(self, title: str, count_header: str, sites: Sequence[CreationSite]) -> str:
        """The sites as a table, then a few source lines around each."""
        rows = [
            f'<tr><td class="mono">{breakable(self.shown(s.filename))}:{s.lineno}</td>'
            f'<td class="mono">{breakable(s.function)}</td>'
            f'<td class="num">{s.count}</td><td><code>{breakable(s.line)}</code>'
            + (f' <span class="muted">(via {escape(s.via)})</span>' if s.via else "")
            + "</td></tr>"
            for s in sites
        ]
        sources = "".join(source_context(s.filename, s.lineno, self.root) for s in sites)
        headers = ("where", "function", count_header, "line")
        return f"<h3>{escape(title)}</h3>{table(headers, rows, css='sites')}{sources}"


def clean_verdict(check: CheckResult) -> str:
    """A clean check's verdict in plain words: what was judged, and the slowest leak it
    would have caught (the verdict's ``slowest_leak_steps``)."""
    judged = count_of(len(check.series), "metric")
    slowest = check.verdict.slowest_leak_steps
    if slowest > 1:
        caught = f"; a leak that grows at least once every {slowest} steps would have shown"
    elif slowest == 1:
        caught = "; a leak that grows every step would have shown"
    else:
        caught = ""
    return f"nothing grew ({judged} judged over {span_text(check)}){caught}"


def view_cell(line: ViewLine) -> str:
    """One line of the diagnosis view as HTML: the pattern word strong, then its meaning;
    a fix with, under it, whether it was verified (and why not)."""
    if line.kind == "fix":
        said = ": ".join(part for part in (line.qualifier, line.detail) if part)
        under = f'<span class="qualifier">{breakable(said)}</span>' if said else ""
        return f'<span class="fix-text">{breakable(line.text)}</span>{under}'
    if line.kind != "pattern":
        return breakable(line.text)
    why = f" &middot; {escape(line.detail)}" if line.detail else ""
    return f"<strong>{escape(line.text)}</strong>{why}"


def _change_block(title: str, rows: Sequence[tuple[str, str, str]]) -> str:
    cells = "".join(f'<dt>{label}</dt><dd class="{css}">{text}</dd>' for label, text, css in rows)
    return f'<div class="change"><h3>{escape(title)}</h3><dl>{cells}</dl></div>'


def metrics_table(check: CheckResult) -> str:
    """Each metric (``model.metric_order``: grown ones first): its growth per step first
    (the column a phone keeps), then start and end."""
    rows = []
    for row in metric_rows(check):
        css = ' class="grew"' if row.grew else ""
        mark = ' <span class="mark">grew</span>' if row.grew else ""
        rows.append(
            f'<tr{css}><td class="mono">{breakable(row.name)}{mark}</td>'
            f'<td class="num">{escape(format_rate(row.per_step, row.unit))}</td>'
            f'<td class="num">{escape(format_amount(row.start, row.unit))}</td>'
            f'<td class="num">{escape(format_amount(row.end, row.unit))}</td></tr>'
        )
    return table(("metric", "growth", "start", "end"), rows, css="metrics") if rows else ""


GRAPH_LEGEND = (
    '<p class="legend">'
    '<span><i class="swatch root"></i>root: where the chain starts '
    "(a fixture, self, a global, a local)</span>"
    '<span><i class="swatch leaked"></i>leaked: what the leak keeps '
    "alive</span><span>&rarr; a reference (attribute, item, closure, autograd edge)</span></p>"
)

#: Source lines shown on each side of a creation site.
CONTEXT_LINES = 2


def source_context(filename: str, lineno: int, root: str | None = None) -> str:
    """A few numbered source lines around ``filename:lineno``, the line itself marked;
    ``""`` when the file cannot be read here (a report rendered on another machine)."""
    if not filename or lineno <= 0:
        return ""
    path = os.path.join(root or "", filename)  # as it is when absolute or without a root
    first = max(1, lineno - CONTEXT_LINES)
    lines = [linecache.getline(path, n) for n in range(first, lineno + CONTEXT_LINES + 1)]
    if not lines[lineno - first].strip():
        return ""  # unreadable here, or the file changed: show nothing rather than a guess
    width = len(str(lineno + CONTEXT_LINES))
    shown = []
    for number, text in enumerate(lines, start=first):
        if not text and number > lineno:
            break
        row = f"{number:>{width}}  {escape(text.rstrip())}"
        shown.append(f'<span class="here">{row}</span>' if number == lineno else row)
    caption = f'<div class="mono muted">{escape(shown_path(filename, root))}:{lineno}</div>'
    return f'{caption}<pre class="source">' + "\n".join(shown) + "</pre>"

"""The HTML report: one self-contained file rendered from the JSON document.

No network: styles inline in ``<head>`` (``report.html_style``), charts as inline SVG, the
holder chain and the cycle drawn by the plugin itself (``report.graph_svg``). The page
opens with the session's count sentence, one chip per status that counts exactly what
that sentence counts (the document's ``summary``; radio inputs and CSS), and an index:
status, test (the pattern and the fix under it), growth and time, linked to each card.
With findings, the clean tests' rows and cards fold into one line each. Cards
(``report.html_cards``) are ``<details>``: leaks and checks with no verdict open, clean
and known ones folded. One inline script (``report.html_script``) adds a text filter and
"expand all" / "collapse all"; the page works without it. Tests sort by id with their
numbers read as numbers. Anchors are made from the test ids, so a shared link finds the
same test after the next run. Light and dark follow ``prefers-color-scheme``, drawings
included. The index fits any width down to 360 px (four columns, only the test's
flexible; on a phone the badge moves into the test's cell and the time goes).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path

from pytest_graphleak.baseline import PRUNE_INTRO, UPDATE_INTRO, fixed_heading, stale_heading
from pytest_graphleak.metrics import count_of, format_rate
from pytest_graphleak.patterns import FALLBACK
from pytest_graphleak.report.dot import render_svg
from pytest_graphleak.report.html_cards import (
    Cards,
    DotRenderer,
    badge,
    breakable,
    breakable_id,
    seconds,
    shown_path,
    source_context,
    table,
)
from pytest_graphleak.report.html_script import SCRIPT, TOOLS
from pytest_graphleak.report.html_style import stylesheet
from pytest_graphleak.report.json_doc import file_head
from pytest_graphleak.report.model import BaselineSection, Report, TestRow, headline_growth
from pytest_graphleak.report.summary import no_rows
from pytest_graphleak.report.view import fix_of
from pytest_graphleak.status import BY_WORD, DISPLAY_ORDER, GROUP_CLEAN, TABLE, display_key

__all__ = ["anchor_of", "is_html_report", "render_html", "shown_path", "source_context"]

#: What an anchor keeps of a test id as it is; anything else becomes ``-``.
_ANCHOR_SAFE = re.compile(r"[^A-Za-z0-9_.:/-]+")
_DIGITS = re.compile(r"(\d+)")
#: The status word of the clean group (``status.TABLE``).
CLEAN_WORD = next(row.word for row in TABLE if row.group == GROUP_CLEAN)


def render_html(
    report: Report,
    *,
    draw: DotRenderer | None = render_svg,
    environment: Mapping[str, str] | None = None,
) -> str:
    """The whole report page of a report (``json_doc.build_report``, or a file read back).

    ``draw`` turns DOT text into inline SVG (default: Graphviz when on PATH); pass
    None to never draw with Graphviz (the plugin's own drawing of the chain and the
    cycle is always there). ``environment`` (label -> text: time, versions, command,
    ...) is shown as the run's environment block; ``rootdir`` in it also makes paths
    relative and locates creation sites for their source lines. The noise band drawn on
    the charts of noisy metrics (process RSS, CUDA reserved) is each check's own
    (``Declaration.tolerance``).
    """
    # Leaks first, then by node id, its numbers as numbers ([9] before [10]): the order
    # is the same on every run and under xdist.
    rows = sorted(report.tests, key=lambda row: (display_key(row.status), natural(row.nodeid)))
    section = report.baseline
    cards = Cards(draw, (environment or {}).get("rootdir"), section.file if section else "")
    header = [
        "<h1>graphleak report</h1>",
        f'<p class="muted">{escape(report.generated_by)} &middot; {_summary_line(report)}</p>',
    ]
    header.extend(f'<p class="note">{escape(note)}</p>' for note in report.notes)
    header.extend(block for block in [_baseline_block(section)] if block)
    header.append(_environment_block(environment or {}, rows))
    statuses = [w for w in DISPLAY_ORDER if any(row.status == w for row in rows)]
    inputs = _inputs(statuses) if rows else ""
    script = ""
    if rows:
        header.append(_chips(report.summary, statuses, len(rows)))
        header.append(TOOLS)
        anchors = anchors_of([row.nodeid for row in rows])
        # With findings, the clean tests fold into one line each in the index and among
        # the cards: the first finding's card is a screen down, not past every clean row.
        clean = [row for row in rows if _group(row) == GROUP_CLEAN]
        found = [row for row in rows if _group(row) != GROUP_CLEAN]
        if not found or not clean:
            found, clean = rows, []
        main = [_index(found, anchors)]
        if clean:
            main.append(
                _folded(
                    f"{count_of(len(clean), 'clean test')}: nothing grew", _index(clean, anchors)
                )
            )
        main += [cards.card(row, anchors[row.nodeid]) for row in found]
        if clean:
            folded = "".join(cards.card(row, anchors[row.nodeid]) for row in clean)
            main.append(_folded(f"cards of the {count_of(len(clean), 'clean test')}", folded))
        script = f"<script>{SCRIPT}</script>\n"
    else:
        main = [f"<p>{escape(no_rows(report.summary))}</p>"]
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>graphleak report</title>"
        f"<style>{stylesheet(statuses)}</style></head><body>\n{inputs}\n"
        "<header>\n" + "\n".join(header) + "\n</header>\n"
        "<main>\n" + "\n".join(main) + "\n</main>\n" + script + "</body></html>\n"
    )


def is_html_report(path: Path) -> bool:
    """A page written by ``--graphleak-html``, ``graphleak check --html`` or ``report``."""
    head = file_head(path)
    return head.startswith("<!DOCTYPE html>") and "<title>graphleak report</title>" in head


def anchor_of(nodeid: str) -> str:
    """A stable anchor for a test id: the id itself where every character is safe in a
    URL fragment, else its safe characters and a short hash of the whole id (so
    ``test_x[a b]`` and ``test_x[a-b]`` stay apart). The same id gives the same anchor on
    every run."""
    safe = _ANCHOR_SAFE.sub("-", nodeid).strip("-") or "test"
    if safe == nodeid:
        return f"t-{safe}"
    return f"t-{safe}-{hashlib.sha1(nodeid.encode('utf-8')).hexdigest()[:8]}"


def anchors_of(nodeids: Sequence[str]) -> dict[str, str]:
    """Each test id's anchor (``anchor_of``)."""
    return {nodeid: anchor_of(nodeid) for nodeid in nodeids}


def natural(text: str) -> tuple[tuple[int, int | str], ...]:
    """A sort key that reads the numbers in ``text`` as numbers: ``test_x[9]`` sorts
    before ``test_x[10]``."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in _DIGITS.split(text) if part
    )


def _group(row: TestRow) -> str:
    facts = BY_WORD.get(row.status)
    return facts.group if facts is not None else GROUP_CLEAN


def _folded(summary: str, body: str) -> str:
    """Clean rows (or cards) folded into one line, shown by the "clean" chip."""
    return (
        f'<details class="group row s-{CLEAN_WORD}"><summary>{escape(summary)}'
        f"</summary>{body}</details>"
    )


def _inputs(statuses: Sequence[str]) -> str:
    """The status filter's radio inputs: all, then one per status shown."""
    shows = [("all", "all tests"), *((w, f"{w} tests") for w in statuses)]
    out = [
        f'<input type="radio" name="show" class="show" id="show-{word}"'
        f'{" checked" if word == "all" else ""} aria-label="show {label}">'
        for word, label in shows
    ]
    return "".join(out)


def _chips(summary: Mapping[str, int], statuses: Sequence[str], rows: int) -> str:
    """One chip per status with tests, its number the summary's: what the header's
    sentence counts (radio inputs and CSS: no script needed)."""
    chips = ['<span class="muted">show:</span>', f'<label for="show-all">all ({rows})</label>']
    for word in statuses:
        count = summary.get(word, 0)
        chips.append(
            f'<label for="show-{word}"><i class="dot {word}"></i>{escape(word)} ({count})</label>'
        )
    return f'<nav class="filter">{"".join(chips)}</nav>'


def _baseline_block(section: BaselineSection | None) -> str:
    """The baseline file's entries the run no longer found (fixed) and those whose test
    it did not collect (stale), each list with the command that updates the file, as the
    terminal (``report.text.baseline_lines``) and the step summary list them; "" when
    there are none."""
    if section is None:
        return ""
    blocks = (
        (section.fixed, fixed_heading(len(section.fixed), section.file), UPDATE_INTRO),
        (section.stale, stale_heading(len(section.stale), section.entries), PRUNE_INTRO),
    )
    parts = []
    for keys, heading, intro in blocks:
        if keys:
            items = "".join(f"<li><code>{breakable(key.text())}</code></li>" for key in keys)
            parts.append(
                f"<p>{escape(heading)}</p><ul>{items}</ul><p>{escape(intro)}</p>"
                f"<pre><code>{escape(section.update_command)}</code></pre>"
            )
    return f'<section class="baseline">{"".join(parts)}</section>' if parts else ""


def _summary_line(report: Report) -> str:
    told = report.sentence
    if report.warn_only:
        told += "; warn-only mode: leaks do not fail tests"
    return escape(told)


def _index(tests: Sequence[TestRow], anchors: Mapping[str, str]) -> str:
    """The top table: status, test (under it the pattern and the fix), growth, time. Four
    columns, of which only the test's is as wide as the page allows: the table fits any
    width down to 360 px (where the time goes)."""
    rows = []
    for test in tests:
        leaks = [c for c in test.checks if c.leaked]
        patterns = sorted({str(c.pattern or FALLBACK) for c in leaks})
        fixes = sorted({fix_of(str(c.pattern or FALLBACK), c.diagnosis) for c in leaks} - {""})
        # an unmeasured check's change (the probe to add), as its card and GitHub show it
        fixes += sorted({c.unmeasured_fix for c in test.checks if c.unmeasured} - {""})
        outlive = any(c.kind == "outlive" for c in test.checks)
        kind = ' <span class="badge kind">outlived the test</span>' if outlive else ""
        said = []
        if patterns:
            said.append(f'<span class="pattern">{escape(", ".join(patterns))}</span>')
        raised = sorted({c.error for c in test.checks if c.error} - {""})
        if raised:  # what the step raised, as its card opens with it
            said.append(f"raised: <code>{breakable('; '.join(raised))}</code>")
        if fixes:
            said.append(f'<span class="fix">fix: {breakable("; ".join(fixes))}</span>')
        under = f'<div class="said">{" &middot; ".join(said)}</div>' if said else ""
        anchor = escape(anchors[test.nodeid])
        taken = seconds(test) or '<span class="muted" title="not timed">&ndash;</span>'
        rows.append(
            f'<tr class="row s-{test.status}" data-card="{anchor}">'
            f"<td>{badge(test.status)}</td>"
            # on a phone the status column goes and the badge sits in the test's cell
            f'<td><span class="phone">{badge(test.status)}</span>'
            f'<a class="id" href="#{anchor}">{breakable_id(test.nodeid)}</a>{kind}{under}</td>'
            f'<td class="mono">{_growth(test)}</td>'
            f'<td class="num">{taken}</td></tr>'
        )
    head = "".join(f"<th>{h}</th>" for h in ("status", "test", "growth", "time"))
    cols = "".join(f'<col class="{c}">' for c in ("status", "test", "growth", "time"))
    return f'<table class="index"><colgroup>{cols}</colgroup><tr>{head}</tr>{"".join(rows)}</table>'


def _growth(test: TestRow) -> str:
    """A test's growth as HTML: the metric the terminal's short line names
    (``model.headline_growth``: tensors, then nodes, then memory) and its rate per step,
    which never breaks (``+1/step``)."""
    for check in test.checks:
        growth = headline_growth(check)
        if growth is not None:
            rate = format_rate(growth.per_step, check.declared(growth.metric).unit)
            return f'{breakable(growth.metric)} <span class="rate">{escape(rate)}</span>'
    return ""


def _environment_block(environment: Mapping[str, str], tests: Sequence[TestRow]) -> str:
    rows = [(str(k), str(v)) for k, v in environment.items() if v]
    # only the checks that were timed: the outlive audit runs no step and takes no time
    seconds = [float(c.duration_s) for t in tests for c in t.checks if c.duration_s]
    if seconds:
        rows.append(
            (
                "checks",
                f"{count_of(len(seconds), 'timed check')} took "
                f"{sum(seconds):.2f} s in all "
                f"(slowest {max(seconds):.2f} s)",
            )
        )
    if not rows:
        return ""
    cells = [f'<tr><td>{escape(k)}</td><td class="mono">{escape(v)}</td></tr>' for k, v in rows]
    return f'<details class="env"><summary>environment</summary>{table((), cells)}</details>'

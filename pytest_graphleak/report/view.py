"""One view of a diagnosis: the ordered lines every surface draws.

``diagnosis_view`` turns a check's pattern and diagnosis (``result.Diagnosis``) into
tagged lines, in this order: pattern, held by, cycle, created at, stored
at, note, fix. The failure text (``report.text``), the session summary (``plugin``), and
the HTML page (``report.html``) only choose which kinds they show and format or colour
them by ``kind``; none of them words a line itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Literal

from pytest_graphleak.paths import display_path
from pytest_graphleak.patterns import FIXES, MEANINGS
from pytest_graphleak.result import CreationSite, Diagnosis

Kind = Literal["pattern", "held-by", "cycle", "created-at", "stored-at", "note", "fix"]

#: Every kind, in the view's order, with the label a line of that kind starts with.
LABELS: dict[str, str] = {
    "pattern": "pattern",
    "held-by": "held by",
    "cycle": "cycle",
    "created-at": "created at",
    "stored-at": "stored at",
    "note": "note",
    "fix": "fix",
}

#: What a reader acts on first (the HTML page's "what to change").
TO_CHANGE: tuple[str, ...] = ("pattern", "held-by", "cycle", "stored-at", "fix")


@dataclass(frozen=True)
class ViewLine:
    """One line of the view: ``{label}: {text}`` and, after it, ``detail``."""

    kind: Kind
    text: str  # the pattern word, the chain, a site, a note or the fix
    #: What qualifies the text: the pattern's meaning here, how often a site acts per step
    #: (``1 per step``, ``once per step``), why a fix is not verified; "" for none.
    detail: str = ""
    #: What qualifies the label: whether a fix was verified (``fix_qualifier``).
    qualifier: str = ""

    @property
    def label(self) -> str:
        return f"{LABELS[self.kind]} ({self.qualifier})" if self.qualifier else LABELS[self.kind]

    def plain(self) -> str:
        """``stored at: train.py:12 in step: kept.append(loss)  (once per step)``."""
        if not self.detail:
            return f"{self.label}: {self.text}"
        gap = " " if self.kind == "pattern" else "  "
        return f"{self.label}: {self.text}{gap}({self.detail})"


def site_text(site: CreationSite, path: Callable[[str], str] = display_path) -> str:
    """``path.py:42 in fn: <source line>  (via lib/module.py:7)``; ``path`` shortens the
    file name (relative to the working directory by default)."""
    function = f" in {site.function}" if site.function else ""
    via = f"  (via {site.via})" if site.via else ""
    return f"{path(site.filename)}:{site.lineno}{function}: {site.line}{via}"


def diagnosis_view(
    pattern: str,
    diagnosis: Diagnosis | None,
    *,
    path: Callable[[str], str] = display_path,
    outlive: bool = False,
) -> list[ViewLine]:
    """The lines of one leak: its pattern (with what it means here), then what the
    diagnosis found, then the fix that applies (the pattern's usual one when the diagnosis
    names none). ``diagnosis`` is None when diagnosing was off. ``outlive``: the outlive
    audit's finding (graphs kept after the test, counted once, not per step)."""
    found = diagnosis or Diagnosis(pattern)
    made = "of the kept tensors and nodes" if outlive else "per step"
    lines = [ViewLine("pattern", pattern, found.story or MEANINGS.get(pattern, ""))]
    if found.chain:
        lines.append(ViewLine("held-by", _linked(found.chain)))
    if found.cycle:
        lines.append(ViewLine("cycle", _linked(found.cycle)))
    for site in found.sites:
        per = made if outlive else _per(site)
        lines.append(ViewLine("created-at", site_text(site, path), f"{site.count} {per}"))
    for site in found.stored_at:
        times = "once" if site.count == 1 else f"{site.count} times"
        per = "in the test's re-run" if outlive else _per(site)
        lines.append(ViewLine("stored-at", site_text(site, path), f"{times} {per}"))
    lines.extend(ViewLine("note", str(note)) for note in found.notes)
    fix = fix_of(pattern, diagnosis)
    tried = diagnosis.fix_tried if diagnosis is not None else None
    if fix:
        lines.append(
            ViewLine(
                "fix",
                fix,
                detail=tried.why_not or "" if tried else "",
                qualifier=fix_qualifier(diagnosis),
            )
        )
    return lines


def fix_qualifier(diagnosis: Diagnosis | None) -> str:
    """``verified: 19 more steps with this change grew nothing`` or ``not verified`` for
    a fix that was tried or could not be (its why is the line's detail); "" for a
    diagnosis from before fixes were tried (an older report, a result made by hand)."""
    tried = diagnosis.fix_tried if diagnosis is not None else None
    if tried is None:
        return ""
    if tried.verified and tried.runs:  # the outlive audit's: the whole test ran again
        runs = "one more run" if tried.runs == 1 else f"{tried.runs} more runs"
        return f"verified: {runs} of the test with this change left no graph alive"
    if tried.verified:
        return f"verified: {tried.steps} more steps with this change grew nothing"
    return "not verified"


def _per(site: CreationSite) -> str:
    """``per step``, or ``in 3 steps`` for a line that acted less often than once a step."""
    return "per step" if site.every <= 1 else f"in {site.every} steps"


def fix_of(pattern: str, diagnosis: Diagnosis | None) -> str:
    """The fix that applies: the diagnosis's own field, chosen once where it was made
    (``words.fix.choose_fix``). With diagnosing off (no diagnosis), or in a report
    written before that field was always set, the pattern's usual one."""
    tried = diagnosis.fix_tried if diagnosis is not None else None
    if tried is not None and tried.verified and tried.text:
        return tried.text  # the change that was verified
    # Not verified: the advice, which a running loop words again once it sees the line.
    return (diagnosis.fix if diagnosis is not None else "") or FIXES.get(pattern, "")


def to_change(lines: Sequence[ViewLine]) -> list[ViewLine]:
    """The lines a reader acts on: pattern, holder, cycle, where it is stored (or, with no
    stored-at line, the first created-at line), and the fix."""
    chosen = [line for line in lines if line.kind in TO_CHANGE]
    if not any(line.kind == "stored-at" for line in lines):
        created = next((line for line in lines if line.kind == "created-at"), None)
        if created is not None:
            at = next((i for i, line in enumerate(chosen) if line.kind == "fix"), len(chosen))
            chosen.insert(at, created)
    return chosen


def line_to_change(diagnosis: Diagnosis | None) -> CreationSite | None:
    """The one line a finding is placed on (a GitHub annotation, a SARIF result): where
    the leaked object is stored, else the line to change of a cycle (its hook or closure),
    else where the user's code created it; None when the diagnosis names none."""
    if diagnosis is None:
        return None
    for site in (*diagnosis.stored_at, *diagnosis.change_at, *diagnosis.sites):
        if site.filename and not site.filename.startswith("<"):
            return site
    return None


def culprit(diagnosis: Diagnosis | None) -> str:
    """``held: <the chain's last link> (from <its root>)`` or ``cycle through <first>``."""
    chain = diagnosis.chain if diagnosis is not None else []
    cycle = diagnosis.cycle if diagnosis is not None else []
    if chain:
        via = f" (from {chain[0]})" if len(chain) > 1 else ""
        return f"held: {chain[-1]}{via}"
    return f"cycle through {cycle[0]}" if cycle else ""


def _linked(links: Sequence[Any]) -> str:
    return " -> ".join(map(str, links))


#: What a known finding's line says when its entry gives no reason.
NO_REASON = "no reason written there yet"


def known_text(reason: str, file: str) -> str:
    """``known, in graphleak-baseline.json: <reason>``: what every surface says of a known
    finding (the baseline file's entry lists it), with the reason its entry gives."""
    return f"known, in {baseline_name(file)}: {reason or NO_REASON}"


def baseline_name(file: str) -> str:
    """The baseline file as a known finding names it: its file name."""
    return PurePath(file).name if file else "the baseline file"

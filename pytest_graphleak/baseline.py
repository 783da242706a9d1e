"""The baseline file: findings a suite already had, reported as ``known`` instead of
failing, so that a gate switched on over an existing suite fails only on new ones
(``--graphleak-baseline=FILE``, written by ``--graphleak-baseline-update``).

Plain data (bottom layer: no import of the package). The file is JSON, made to be read
and reviewed in a pull request: one entry per finding, sorted by its key, each with a
``reason`` a person fills in::

    {
      "graphleak_baseline": 2,
      "about": "Known findings of pytest-graphleak: ...",
      "findings": [
        {
          "test": "tests/test_x.py::test_step",
          "check": "marker",
          "pattern": "list-accumulation",
          "holder": "global 'history' -> list[*] -> Tensor",
          "reason": "epoch losses kept for the plot; ticket #123"
        }
      ]
    }

A finding's key (what makes two findings the same one) is ``baseline_keys.py``'s.

Version 1 files keyed the holder on the printed chain. They are not matched: reading one
is an error that says so, and ``--graphleak-baseline-update`` rewrites it in version 2,
keeping each reason where the test, the check and the pattern name one finding.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pytest_graphleak.baseline_keys import (
    CYCLE,
    KEY_FIELDS,
    Key,
    renamed,
    respelled,
    written_before,
)
from pytest_graphleak.exceptions import BaselineError as BaselineError  # raised here; re-exported

#: The key naming the file's kind, whose value is its version; bump on any change of the
#: layout that an older reader would misread.
FORMAT_KEY = "graphleak_baseline"
VERSION = 2
#: Versions an update may read and rewrite (their keys are not matched).
OLD_VERSIONS = (1,)
#: What the top of the file says about itself, for a reader who meets it in a review.
ABOUT = (
    "Known findings of pytest-graphleak: each is reported as known instead of failing "
    "the run. Fill in each reason; remove an entry once its leak is fixed (or run pytest "
    "with --graphleak-baseline-update). Keys: docs 'Adopting it on an existing suite'."
)
#: The fields of an entry: the key's four, then the person's reason.
FIELDS = (*KEY_FIELDS, "reason")


@dataclass(frozen=True)
class Entry:
    key: Key
    reason: str = ""

    def to_dict(self) -> dict[str, str]:
        return {**{name: getattr(self.key, name) for name in KEY_FIELDS}, "reason": self.reason}


@dataclass
class Baseline:
    """A loaded file (or none yet: ``entries`` empty)."""

    path: Path
    entries: dict[Key, Entry] = field(default_factory=dict)
    #: The file's version: an older one (``OLD_VERSIONS``) is read only to be rewritten.
    version: int = VERSION
    #: Entries whose holder spelled a dict's key (``respelled``), and how many of them were
    #: merged into another entry that then named the same finding.
    respelled: int = 0
    merged: int = 0
    #: Entries whose check named a nested step with its function's ``<locals>`` path
    #: (``check(test_x.<locals>.step)``), read as ``check()`` names it now (``renamed``).
    renamed: int = 0

    def __contains__(self, key: object) -> bool:
        return key in self.entries

    def match(self, key: Key) -> Key | None:
        """The entry that lists the finding ``key``: its own, or the one an earlier
        pytest-graphleak wrote for a finding judged at a fixture's teardown
        (``written_before``); None for a new finding."""
        return key if key in self.entries else written_before(key, self.entries)


# -- reading ----------------------------------------------------------------------------
def load(path: Path, *, rewriting: bool = False) -> Baseline:
    """The baseline in ``path``; BaselineError naming the file (and the entry) when it
    cannot be read, is not a baseline, has another version or a bad or repeated entry.
    ``rewriting``: an update will rewrite it, so an older version is read too (its
    entries carry their reasons over, ``updated``)."""
    document = read_document(path)
    where = f"the baseline file {str(path)!r}"
    if not isinstance(document, dict) or FORMAT_KEY not in document:
        raise BaselineError(f"{where} is not a graphleak baseline (no {FORMAT_KEY!r} key)")
    version = document[FORMAT_KEY]
    if version in OLD_VERSIONS and not rewriting:
        raise BaselineError(
            f"{where} has version {version!r}, whose holders were the printed chain; this "
            f"pytest-graphleak keys findings on the typed chain (version {VERSION}): rewrite "
            "it once with --graphleak-baseline-update over the whole suite (each reason is "
            "kept where the test, check and pattern name one finding)"
        )
    if version != VERSION and version not in OLD_VERSIONS:
        raise BaselineError(
            f"{where} has version {version!r}; this pytest-graphleak reads version {VERSION}"
        )
    findings = document.get("findings")
    if not isinstance(findings, list):
        raise BaselineError(f"{where}: 'findings' must be a list of entries")
    baseline = Baseline(path, version=version)
    first: dict[Key, int] = {}
    for number, item in enumerate(findings, start=1):
        entry = _entry(item, f"{where}, entry {number}")
        if entry.key in first:
            raise BaselineError(
                f"{where}, entry {number} repeats entry {first[entry.key]}: "
                f"{entry.key.text()} (one entry per finding)"
            )
        first[entry.key] = number
        _add_respelled(baseline, entry)
    return baseline


def _add_respelled(baseline: Baseline, entry: Entry) -> None:
    """Add ``entry`` with its holder as a key spells it now (``respelled``); one that
    then names the finding of an earlier entry is merged into it, reasons joined."""
    if baseline.version != VERSION:  # an older layout: its keys match none, rewritten
        baseline.entries[entry.key] = entry
        return
    key = entry.key
    holder = respelled(key.holder)
    if holder != key.holder:
        baseline.respelled += 1
        key = Key(key.test, key.check, key.pattern, holder)
    check = renamed(key.check)
    if check != key.check:
        baseline.renamed += 1
        key = Key(key.test, check, key.pattern, key.holder)
    earlier = baseline.entries.get(key)
    if earlier is None:
        baseline.entries[key] = Entry(key, entry.reason)
        return
    baseline.merged += 1
    reasons = [r for r in (*earlier.reason.split("; "), entry.reason) if r]
    joined = "; ".join(dict.fromkeys(reasons))  # once each, in the file's order
    baseline.entries[key] = Entry(key, joined)


def read_document(path: Path) -> object:
    """The file's JSON; BaselineError saying why not: it cannot be read, or it is not
    JSON (json's words: what, and the line and column, as a hand merge leaves it)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BaselineError(
            f"cannot read the baseline file {str(path)!r}: {exc.strerror or exc}"
        ) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise BaselineError(f"the baseline file {str(path)!r} is not JSON: {exc}") from None


def _entry(item: object, where: str) -> Entry:
    if not isinstance(item, dict):
        raise BaselineError(f"{where} must be an object with {', '.join(FIELDS)}")
    missing = [name for name in KEY_FIELDS if not isinstance(item.get(name), str)]
    unknown = sorted(set(item) - set(FIELDS))
    if missing or unknown or not isinstance(item.get("reason", ""), str):
        what = (
            f"lacks {', '.join(map(repr, missing))} (text)"
            if missing
            else f"has unknown field {', '.join(map(repr, unknown))}"
            if unknown
            else "has a 'reason' that is not text"
        )
        raise BaselineError(f"{where} {what}: {json.dumps(item, sort_keys=True)[:200]}")
    key = Key(*(item[name] for name in KEY_FIELDS))
    if not key.test or not key.check:
        raise BaselineError(f"{where}: 'test' and 'check' must not be empty")
    return Entry(key, item.get("reason", ""))


def is_baseline(path: Path) -> bool:
    """A file that a baseline update may replace: a JSON object with the format key."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(document, dict) and FORMAT_KEY in document


# -- what a run says of its entries (the terminal, ``graphleak report``) -------------------
#: The line before the command that updates the file, after the fixed entries.
UPDATE_INTRO = "update the baseline file with:"
#: The line before the same command, after the stale entries.
PRUNE_INTRO = "remove them with:"


def fixed_heading(count: int, path: str) -> str:
    """The line over the entries a run checked and no longer found."""
    return f"fixed since the baseline ({count}, listed in {path}):"


def stale_heading(count: int, entries: int) -> str:
    """The line over the entries whose test a run of the whole suite did not collect."""
    return (
        f"graphleak baseline: {count} of its {entries} entries name tests this run of the "
        "whole suite did not collect (deleted or renamed), neither known nor fixed:"
    )


# -- writing ----------------------------------------------------------------------------
def render(entries: Iterable[Entry]) -> str:
    """The file's text: entries sorted by key, one field a line, so that a review's diff
    shows each finding added or removed as a block of its own."""
    rows = [
        json.dumps(entry.to_dict(), indent=2, ensure_ascii=False)
        for entry in sorted(entries, key=lambda e: e.key)
    ]
    findings = ",\n".join("    " + row.replace("\n", "\n    ") for row in rows)
    body = f"[\n{findings}\n  ]" if rows else "[]"
    return (
        "{\n"
        f"  {json.dumps(FORMAT_KEY)}: {VERSION},\n"
        f'  "about": {json.dumps(ABOUT)},\n'
        f'  "findings": {body}\n'
        "}\n"
    )


@dataclass
class Update:
    """What an update writes, and how it differs from the file before."""

    entries: list[Entry]
    added: list[Key]
    removed: list[Key]
    kept: int
    #: An older file rewritten: its version, how many reasons were carried over, and how
    #: many of its entries this run did not check (their tests did not run): dropped.
    rewritten_from: int | None = None
    reasons_kept: int = 0
    dropped: int = 0
    #: Entries of findings judged at a fixture's teardown that an earlier version keyed
    #: on the test whose teardown judged them, rewritten with the fixture's key and reason.
    rekeyed: int = 0
    #: Entries the run did not check whose test no longer exists (``stale``): removed.
    pruned: list[Key] = field(default_factory=list)
    #: Entries of cycles written with no holder, rewritten with the cycle's links (``CYCLE``)
    #: and their reasons.
    cycles: int = 0


def updated(
    old: Baseline | None,
    found: Iterable[Key],
    checked: Callable[[Key], bool],
    *,
    stale: Callable[[Key], bool] = lambda key: False,
) -> Update:
    """The entries after a run that found ``found``: each finding once, with its old
    reason if it had an entry; an old entry that the run ``checked`` and did not find is
    dropped (fixed), one it did not check (its test did not run) is kept, unless it is
    ``stale`` (its test no longer exists: dropped, ``Update.pruned``)."""
    before = old.entries if old is not None else {}
    now = set(found)
    if old is not None and old.version != VERSION:  # its keys match none: rewritten
        return _rewritten(old, now, checked)
    moved: dict[Key, Key] = {}  # a finding -> its entry as an earlier version keyed it
    for key in sorted(now - before.keys()):
        earlier = written_before(key, before)
        if earlier is not None and earlier not in now and earlier not in moved.values():
            moved[key] = earlier
    entries = [
        before.get(key) or Entry(key, before[moved[key]].reason if key in moved else "")
        for key in now
    ]
    gone = [key for key in before if key not in now and key not in moved.values()]
    unchecked = [key for key in gone if not checked(key)]
    pruned = sorted(key for key in unchecked if stale(key))
    kept_unchecked = [before[key] for key in unchecked if key not in pruned]
    return Update(
        entries=sorted([*entries, *kept_unchecked], key=lambda e: e.key),
        added=sorted(key for key in now if key not in before and key not in moved),
        removed=sorted(key for key in gone if checked(key)),
        kept=len(now & set(before)) + len(kept_unchecked),
        rekeyed=sum(not key.holder.startswith(CYCLE) for key in moved),
        pruned=pruned,
        cycles=sum(key.holder.startswith(CYCLE) for key in moved),
    )


def _rewritten(old: Baseline, found: set[Key], checked: Callable[[Key], bool]) -> Update:
    """An older file rewritten from this run's findings: a finding takes the reason of
    the old entry of its test, check and pattern when each side has one such (the holder
    was spelled another way); the old entries are replaced."""

    def triple(key: Key) -> tuple[str, str, str]:
        return key.test, key.check, key.pattern

    def alone(keys: Iterable[Key]) -> dict[tuple[str, str, str], Key]:
        seen: dict[tuple[str, str, str], list[Key]] = {}
        for key in keys:
            seen.setdefault(triple(key), []).append(key)
        return {t: ks[0] for t, ks in seen.items() if len(ks) == 1}

    olds, news = alone(old.entries), alone(found)
    reasons = {news[t]: old.entries[k].reason for t, k in olds.items() if t in news}
    entries = sorted((Entry(key, reasons.get(key, "")) for key in found), key=lambda e: e.key)
    return Update(
        entries=entries,
        added=sorted(found),
        removed=sorted(old.entries),
        kept=0,
        rewritten_from=old.version,
        reasons_kept=sum(map(bool, reasons.values())),
        dropped=sum(not checked(key) for key in old.entries),
    )

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

A finding's key is made so that it survives what does not change the leak and no more:
the test's node id, the kind of check (``marker``, ``check(step)``, ``track(1)``,
``outlive``: the check's name after the node id, a window's step range left out), the
pattern word and the holder path, spelled from the diagnosis' typed chain
(``diagnosis.links``, never its printed labels): the root's kind and the user's name for
it, then each object's type with the edge the chain leaves it by (``.history``; a
dict's key, an index and a set's member are ``[*]``), up to the first tensor or graph
node (what its graph reaches is how deep the walk went). No length, shape, address,
line number or dict key is in it: lines moving, tests reordered, a list growing or a key
that a run makes (a ``tmp_path``, a run name with a timestamp, ``f"run-{n}"``) change
nothing; a new leak of the same test through another holder is a new key.

Files written before keys were ``[*]`` spelled a dict's string key (``dict['rows']``):
reading one respells each such holder (``respelled``) and says how many; entries that
then name one finding are merged, their reasons kept. The version stays 2: the file's
layout did not change, and an update writes the holders respelled.

An outlive finding judged at a wider-scope fixture's teardown (graphs the tests handed a
class, module, package or session fixture, still alive when it is torn down:
``CheckResult.judged_at``) is keyed on that fixture instance, not on the test whose
teardown tore it down (which depends on the order, a test added at the end of a module,
and the pytest-xdist split): ``test`` is the node id of the instance's scope (the class,
the module, the package; ``<session>`` for the session) and ``check`` is
``outlive(module fixture 'store')``. Two pytest-xdist workers that each set the fixture
up and find the same graphs find one key. Such an entry is checked (fixed when not found)
only in a run that judged that fixture instance at its teardown. An entry that an earlier
version wrote for such a finding, keyed on the tearing-down test (``outlive``, the same
pattern and holder, a test inside the scope), still matches (``written_before``), and an
update rewrites it with the fixture's key and its reason: the format's version stays 2.

Version 1 files keyed the holder on the printed chain. They are not matched: reading one
is an error that says so, and ``--graphleak-baseline-update`` rewrites it in version 2,
keeping each reason where the test, the check and the pattern name one finding.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
KEY_FIELDS = ("test", "check", "pattern", "holder")
FIELDS = (*KEY_FIELDS, "reason")
#: The ``test`` of a finding judged at a session-scoped fixture's teardown.
SESSION = "<session>"
_FIXTURE_CHECK = "outlive("


@dataclass(frozen=True, order=True)
class Key:
    """What makes two findings the same one (see the module docstring)."""

    test: str
    check: str
    pattern: str
    holder: str

    def text(self) -> str:
        """One line naming the finding (the terminal's, an error's)."""
        held = f", held by {self.holder}" if self.holder else ""
        return f"{self.test} [{self.check}] {self.pattern}{held}"


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


# -- keys -------------------------------------------------------------------------------
_WINDOW = re.compile(r" steps \d+-\d+$")  # a check's name, not a chain label
#: How the holder spells the edge a chain leaves an object by (``result.Link.edge``);
#: an index, a dict's key (any: a path, a run name, a counter) and a set's member are
#: ``[*]``: they change from run to run. Names of the user's code are kept.
_ACCESS = {"attribute": ".{}", "ctx attribute": ".{}", "hook": ".{}", "key": "[*]",
           "index": "[*]", "member": "[*]", "closure cell": " closure '{}'",
           "generator frame": " local '{}'", "context value": ".get()"}  # fmt: skip
#: How a holder spelled from a cycle's links starts.
CYCLE = "cycle: "
#: The links after which the holder ends: what a graph reaches is how deep the walk went.
_GRAPH_KINDS = ("tensor", "node")


def check_label(nodeid: str, name: str) -> str:
    """The kind of check, from its name: ``marker`` for the test's own (the name is the
    node id), else what follows the node id (``check(step)``, ``track(1)``, ``outlive``),
    a window's step range left out."""
    rest = name[len(nodeid):] if name.startswith(nodeid) else name
    rest = _WINDOW.sub("", rest.lstrip(":"))
    return rest or "marker"


def holder_path(
    links: Sequence[Mapping[str, Any]], cycle: Sequence[Mapping[str, Any]] = ()
) -> str:
    """The holder of a finding from the diagnosis' typed links (``diagnosis.links`` as
    plain data, root first): ``global 'history' -> list[*] -> Tensor``; where no root
    reaches it, the cycle that keeps it (``diagnosis.cycle_links``): ``cycle: Holder.me
    -> Holder``, so that another cycle in the same test is another finding."""
    if not links and cycle:
        return CYCLE + " -> ".join(
            str(link.get("type", "")) + _access(str(link.get("edge", "")), str(link.get("key", "")))
            for link in cycle
        )
    parts: list[str] = []
    for at, link in enumerate(links):
        kind, name = str(link.get("type", "")), str(link.get("name", ""))
        if at == 0:  # the root: its kind, and the user's name for it
            parts.append(f"{kind} '{name}'" if name and name != kind else kind)
            continue
        if link.get("kind") in _GRAPH_KINDS:
            parts.append(kind)
            break
        parts.append(kind + _access(str(link.get("edge", "")), str(link.get("key", ""))))
    return " -> ".join(parts)


def _access(edge: str, key: str) -> str:
    return _ACCESS.get(edge, "").format(key)


#: A dict's key as files written before keys were ``[*]`` spelled it: right after the
#: type that starts a link (``dict['rows']``, ``OrderedDict[3]``), up to the link's end.
_SPELLED_KEY = re.compile(r"(^| -> )(\w+)\[(?!\*\](?: -> |$)).*?\](?= -> |$)")


def respelled(holder: str) -> str:
    """``holder`` with each dict key read ``[*]`` (``global 'R' -> dict['run-1'] ->
    Tensor`` -> ``global 'R' -> dict[*] -> Tensor``): an entry written before keys were
    ``[*]``, as a finding's key spells it now; unchanged when it has no such key."""
    return _SPELLED_KEY.sub(r"\1\2[*]", holder)


#: A nested step's ``<locals>`` path in a check's name, as files written before
#: ``check()`` named the step alone spelled it: ``check(test_x.<locals>.step)``.
_LOCALS = re.compile(r"^check\((?:[^()]*<locals>\.)+")


def renamed(check: str) -> str:
    """``check`` as ``check()`` names a nested step now (``check(step)``, no
    ``<locals>`` path); unchanged when it has none."""
    return _LOCALS.sub("check(", check)


def fixture_check(fixture: str, scope: str) -> str:
    """The kind of check of a finding judged at a wider-scope fixture's teardown:
    ``outlive(module fixture 'store')``."""
    return f"outlive({scope} fixture '{fixture}')"


def scope_test(node: str) -> str:
    """The ``test`` field of such a finding: the node id of the fixture instance's scope
    (the class, the module, the package), ``SESSION`` for the session's ("")."""
    return node or SESSION


def key_of(
    nodeid: str, *, name: str, pattern: str | None, links: Sequence[Mapping[str, Any]],
    judged_at: Mapping[str, str] | None = None, cycle: Sequence[Mapping[str, Any]] = (),
) -> Key:  # fmt: skip
    """The key of a leaked check of the test ``nodeid``: the check's name, its pattern and
    its diagnosis' typed links (and its cycle's, ``cycle``) as plain data
    (``CheckResult``'s fields). ``judged_at``
    (``CheckResult.judged_at``: fixture, scope, node): an outlive finding judged at that
    fixture instance's teardown, keyed on the instance, not on ``nodeid``."""
    if judged_at:
        return Key(
            test=scope_test(judged_at["node"]),
            check=fixture_check(judged_at["fixture"], judged_at["scope"]),
            pattern=pattern or "",
            holder=holder_path(links, cycle),
        )
    return Key(
        test=nodeid,
        check=check_label(nodeid, name),
        pattern=pattern or "",
        holder=holder_path(links, cycle),
    )


def written_before(key: Key, entries: Iterable[Key]) -> Key | None:
    """The entry that an earlier pytest-graphleak wrote for ``key``: for a finding judged
    at a fixture's teardown (``is_fixture_check``), keyed on the test whose teardown
    judged it (``outlive``, a test inside the scope, the same pattern and holder); for a
    cycle no root reaches (its holder spelled from the cycle, ``CYCLE``), the entry of
    its test, check and pattern with no holder, as files written before then keyed it.
    None when there is none, or more than one."""
    if key.holder.startswith(CYCLE):
        empty = Key(key.test, key.check, key.pattern, "")
        return empty if empty in set(entries) else None
    if not is_fixture_check(key.check):
        return None
    found = [old for old in entries if old.check == "outlive" and old.pattern == key.pattern
             and old.holder == key.holder and inside(old.test, key.test)]  # fmt: skip
    return found[0] if len(found) == 1 else None


def is_fixture_check(check: str) -> bool:
    return check.startswith(_FIXTURE_CHECK)


def inside(nodeid: str, scope: str) -> bool:
    """Is the node ``nodeid`` (a test, or a fixture's scope) inside the scope node
    ``scope`` (pytest's node ids: a package is a directory, a module a file under it, a
    class and a test after ``::``)?"""
    if scope in (SESSION, nodeid):
        return True
    below = "::" if "::" in scope or scope.endswith(".py") else "/"
    return nodeid.startswith(scope.rstrip("/") + below)


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
        raise BaselineError(f"cannot read the baseline file {str(path)!r}: "
                            f"{exc.strerror or exc}") from None  # fmt: skip
    except (UnicodeDecodeError, ValueError) as exc:
        raise BaselineError(f"the baseline file {str(path)!r} is not JSON: {exc}") from None


def _entry(item: object, where: str) -> Entry:
    if not isinstance(item, dict):
        raise BaselineError(f"{where} must be an object with {', '.join(FIELDS)}")
    missing = [name for name in KEY_FIELDS if not isinstance(item.get(name), str)]
    unknown = sorted(set(item) - set(FIELDS))
    if missing or unknown or not isinstance(item.get("reason", ""), str):
        what = (f"lacks {', '.join(map(repr, missing))} (text)" if missing
                else f"has unknown field {', '.join(map(repr, unknown))}" if unknown
                else "has a 'reason' that is not text")  # fmt: skip
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
    return (f"graphleak baseline: {count} of its {entries} entries name tests this run of the "
            "whole suite did not collect (deleted or renamed), neither known nor fixed:")


# -- writing ----------------------------------------------------------------------------
def render(entries: Iterable[Entry]) -> str:
    """The file's text: entries sorted by key, one field a line, so that a review's diff
    shows each finding added or removed as a block of its own."""
    rows = [json.dumps(entry.to_dict(), indent=2, ensure_ascii=False)
            for entry in sorted(entries, key=lambda e: e.key)]  # fmt: skip
    findings = ",\n".join("    " + row.replace("\n", "\n    ") for row in rows)
    body = f"[\n{findings}\n  ]" if rows else "[]"
    return (
        "{\n"
        f"  {json.dumps(FORMAT_KEY)}: {VERSION},\n"
        f"  \"about\": {json.dumps(ABOUT)},\n"
        f"  \"findings\": {body}\n"
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
    old: Baseline | None, found: Iterable[Key], checked: Callable[[Key], bool],
    *, stale: Callable[[Key], bool] = lambda key: False,
) -> Update:  # fmt: skip
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
    entries = [before.get(key) or Entry(key, before[moved[key]].reason if key in moved else "")
               for key in now]  # fmt: skip
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
    return Update(entries=entries, added=sorted(found), removed=sorted(old.entries), kept=0,
                  rewritten_from=old.version, reasons_kept=sum(map(bool, reasons.values())),
                  dropped=sum(not checked(key) for key in old.entries))  # fmt: skip

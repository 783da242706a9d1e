"""The baseline file: findings a suite already had, reported as ``known`` instead of
failing, so that a gate switched on over an existing suite fails only on new ones
(``--graphleak-baseline=FILE``, written by ``--graphleak-baseline-update``).

Plain data (bottom layer: no import of the package). The file is JSON, made to be read
and reviewed in a pull request: one entry per finding, sorted by its key, each with a
``reason`` a person fills in::

    {
      "graphleak_baseline": 1,
      "about": "Known findings of pytest-graphleak: ...",
      "findings": [
        {
          "test": "tests/test_x.py::test_step",
          "check": "marker",
          "pattern": "list-accumulation",
          "holder": "global 'history' -> list -> Tensor(grad_fn=MeanBackward)",
          "reason": "epoch losses kept for the plot; ticket #123"
        }
      ]
    }

A finding's key is made so that it survives what does not change the leak and no more:
the test's node id, the kind of check (``marker``, ``check(step)``, ``track(1)``,
``outlive``: the check's name after the node id, a window's step range left out), the
pattern word and the holder path, the diagnosis' chain with every number that depends on
the run left out: lengths (``list(len=12)`` -> ``list``), shapes, integer indices and keys
(``dict[21]`` -> ``dict[*]``), addresses, line numbers, and the graph nodes past the first
tensor (how deep the walk went). Lines moving, tests reordered or a list growing change
nothing; a new leak of the same test through another holder is a new key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_graphleak.exceptions import BaselineError  # defined there, raised here

#: The key naming the file's kind, whose value is its version; bump on any change of the
#: layout that an older reader would misread.
FORMAT_KEY = "graphleak_baseline"
VERSION = 1
#: What the top of the file says about itself, for a reader who meets it in a review.
ABOUT = (
    "Known findings of pytest-graphleak: each is reported as known instead of failing "
    "the run. Fill in each reason; remove an entry once its leak is fixed (or run pytest "
    "with --graphleak-baseline-update). Keys: docs 'Adopting it on an existing suite'."
)
#: The fields of an entry: the key's four, then the person's reason.
KEY_FIELDS = ("test", "check", "pattern", "holder")
FIELDS = (*KEY_FIELDS, "reason")
#: The holder of a finding whose diagnosis named none (``--graphleak-no-diagnose``).
NO_HOLDER = ""


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

    def __contains__(self, key: object) -> bool:
        return key in self.entries


# -- keys -------------------------------------------------------------------------------
_WINDOW = re.compile(r" steps \d+-\d+$")
_NUMBERS = (
    (re.compile(r"\(len=\d+\)"), ""),  # list(len=12) -> list
    (re.compile(r"shape=\([^)]*\)(, )?"), ""),  # Tensor(shape=(3,), grad_fn=X)
    (re.compile(r"\(\)"), ""),  # Tensor(shape=()) -> Tensor
    (re.compile(r"\[-?\d+\]"), "[*]"),  # an index or an integer key: dict[21] -> dict[*]
    (re.compile(r"0x[0-9a-fA-F]+"), "0x*"),  # an address
    (re.compile(r"(\.py):\d+"), r"\1"),  # a file's line
    (re.compile(r"\bline \d+"), "line *"),
)
_TENSOR = re.compile(r"^(Tensor|Parameter)\b")
_ELIDED = re.compile(r"^\.\.\. \(\d+ more graph nodes\)$")


def check_label(nodeid: str, name: str) -> str:
    """The kind of check, from its name: ``marker`` for the test's own (the name is the
    node id), else what follows the node id (``check(step)``, ``track(1)``, ``outlive``),
    a window's step range left out."""
    rest = name[len(nodeid):] if name.startswith(nodeid) else name
    rest = _WINDOW.sub("", rest.lstrip(":"))
    return rest or "marker"


def holder_path(chain: Sequence[str]) -> str:
    """The diagnosis' chain without the numbers a run changes, up to the first tensor."""
    labels: list[str] = []
    for label in chain:
        if _ELIDED.match(label):
            continue
        for pattern, replacement in _NUMBERS:
            label = pattern.sub(replacement, label)
        if not labels or labels[-1] != label:  # a run of the same graph node: one
            labels.append(label)
        if _TENSOR.match(label) and len(labels) > 1:
            break  # what the tensor's graph reaches is how deep the walk went
    return " -> ".join(labels)


def key_of(nodeid: str, *, name: str, pattern: str | None, chain: Sequence[str]) -> Key:
    """The key of a leaked check of the test ``nodeid``: the check's name, its pattern and
    its diagnosis' chain (``CheckResult``'s fields)."""
    return Key(
        test=nodeid,
        check=check_label(nodeid, name),
        pattern=pattern or "",
        holder=holder_path([str(link) for link in chain]),
    )


# -- reading ----------------------------------------------------------------------------
def load(path: Path) -> Baseline:
    """The baseline in ``path``; BaselineError naming the file (and the entry) when it
    cannot be read, is not a baseline, has another version or a bad or repeated entry."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BaselineError(f"cannot read the baseline file {str(path)!r}: "
                            f"{exc.strerror or exc}") from None  # fmt: skip
    except (UnicodeDecodeError, ValueError) as exc:
        raise BaselineError(f"the baseline file {str(path)!r} is not JSON: {exc}") from None
    where = f"the baseline file {str(path)!r}"
    if not isinstance(document, dict) or FORMAT_KEY not in document:
        raise BaselineError(f"{where} is not a graphleak baseline (no {FORMAT_KEY!r} key)")
    version = document[FORMAT_KEY]
    if version != VERSION:
        raise BaselineError(
            f"{where} has version {version!r}; this pytest-graphleak reads version {VERSION}"
        )
    findings = document.get("findings")
    if not isinstance(findings, list):
        raise BaselineError(f"{where}: 'findings' must be a list of entries")
    baseline = Baseline(path)
    first: dict[Key, int] = {}
    for number, item in enumerate(findings, start=1):
        entry = _entry(item, f"{where}, entry {number}")
        if entry.key in first:
            raise BaselineError(
                f"{where}, entry {number} repeats entry {first[entry.key]}: "
                f"{entry.key.text()} (one entry per finding)"
            )
        first[entry.key] = number
        baseline.entries[entry.key] = entry
    return baseline


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


def updated(old: Baseline | None, found: Iterable[Key], checked: Callable[[Key], bool]) -> Update:
    """The entries after a run that found ``found``: each finding once, with its old
    reason if it had an entry; an old entry that the run ``checked`` and did not find is
    dropped (fixed), one it did not check (its test did not run) is kept."""
    before = old.entries if old is not None else {}
    now = set(found)
    entries = [before.get(key) or Entry(key) for key in now]
    kept_unchecked = [e for key, e in before.items() if key not in now and not checked(key)]
    removed = sorted(key for key in before if key not in now and checked(key))
    return Update(
        entries=sorted([*entries, *kept_unchecked], key=lambda e: e.key),
        added=sorted(key for key in now if key not in before),
        removed=removed,
        kept=len(now & set(before)) + len(kept_unchecked),
    )

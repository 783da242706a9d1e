"""A baseline finding's key: what makes two findings the same one.

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

Plain data (bottom layer: no import of the package); ``baseline.py`` reads and writes the
file of these keys.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The fields of a key, in the file's order.
KEY_FIELDS = ("test", "check", "pattern", "holder")
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


_WINDOW = re.compile(r" steps \d+-\d+$")  # a check's name, not a chain label
#: How the holder spells the edge a chain leaves an object by (``result.Link.edge``);
#: an index, a dict's key (any: a path, a run name, a counter) and a set's member are
#: ``[*]``: they change from run to run. Names of the user's code are kept.
_ACCESS = {
    "attribute": ".{}",
    "ctx attribute": ".{}",
    "hook": ".{}",
    "key": "[*]",
    "index": "[*]",
    "member": "[*]",
    "closure cell": " closure '{}'",
    "generator frame": " local '{}'",
    "context value": ".get()",
}
#: How a holder spelled from a cycle's links starts.
CYCLE = "cycle: "
#: The links after which the holder ends: what a graph reaches is how deep the walk went.
_GRAPH_KINDS = ("tensor", "node")


def check_label(nodeid: str, name: str) -> str:
    """The kind of check, from its name: ``marker`` for the test's own (the name is the
    node id), else what follows the node id (``check(step)``, ``track(1)``, ``outlive``),
    a window's step range left out."""
    rest = name[len(nodeid) :] if name.startswith(nodeid) else name
    rest = _WINDOW.sub("", rest.lstrip(":"))
    return rest or "marker"


def holder_path(links: Sequence[Mapping[str, Any]], cycle: Sequence[Mapping[str, Any]] = ()) -> str:
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
    nodeid: str,
    *,
    name: str,
    pattern: str | None,
    links: Sequence[Mapping[str, Any]],
    judged_at: Mapping[str, str] | None = None,
    cycle: Sequence[Mapping[str, Any]] = (),
) -> Key:
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
    found = [
        old
        for old in entries
        if old.check == "outlive"
        and old.pattern == key.pattern
        and old.holder == key.holder
        and inside(old.test, key.test)
    ]
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

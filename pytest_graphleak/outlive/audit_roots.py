"""Where the audit looks for what holds a test's graphs (``Audit``'s part): the roots
(the test module's and the user's other modules' globals, the test class's attributes,
the live wider-scope fixtures, less what is kept on purpose), and which of them hold a
graph: climbed to from the graphs (``outlive/climb``; a module's globals are read only
when a holder leads to its dict), else walked down to from every root (``outlive/gate``).
"""

from __future__ import annotations

import fnmatch
import sys
import types
from collections.abc import Collection, Iterator
from typing import Any

from pytest_graphleak.heap.usercode import is_user_module
from pytest_graphleak.outlive.census import Census
from pytest_graphleak.outlive.climb import Reach, Roots, climb
from pytest_graphleak.outlive.found import Holder, Targets
from pytest_graphleak.outlive.gate import LIMIT as GATE_LIMIT
from pytest_graphleak.outlive.gate import Gate
from pytest_graphleak.outlive.roots import (
    class_attributes,
    global_values,
    globals_of,
    live_fixtures,
    resolve_name,
)
from pytest_graphleak.outlive.subjects import AuditedTest, FixtureDef
from pytest_graphleak.probes.autograd import Backend
from pytest_graphleak.words import outlive as words

#: Objects the first walk down from the roots reads before the climb is asked instead.
FIRST_WALK = 10_000


class AuditRoots:
    """The roots of ``Audit`` (see the module docstring)."""

    keep: tuple[str, ...]
    _gate: Gate
    _set_by: dict[int, tuple[type, dict[str, FixtureDef]]]
    _user_names: list[str]
    _modules_key: tuple[int, str | None]
    _user_module: dict[str, bool]

    # -- where graphs are held ---------------------------------------------------------
    def listed(
        self, test: AuditedTest, census: Census, *, whole: bool = False
    ) -> list[object] | None:
        """The graph objects the test made that are alive (``Census.young``) and the old
        tensors near its roots whose graph it extended in place; None: not listed."""
        found = census.young(whole=whole)
        if found is not None:
            near = self.root_values(test, others=False)
            found.extend(census.grown_near(near))
            near.clear()
        return found

    def reaching(
        self,
        test: AuditedTest,
        census: Census,
        found: list[object] | None,
        targets: Targets,
        imported: Collection[str] = (),
    ) -> tuple[bool | None, list[Holder]] | None:
        """The roots to search for ``targets``, and whether one is known to reach them
        (None: not known); None when none does. A short walk down from every root first
        (``FIRST_WALK`` objects: where the roots reach little, it says "none" cheapest);
        else climbed to from the graphs (``outlive/climb``: the holder search starts from
        the roots it reached alone); where the climb cannot tell, walked down as far as the
        gate's limit."""
        reached = self._walked(test, targets, imported, census.backends, FIRST_WALK)
        if reached is False:
            return None
        listed = self.listed(test, census, whole=True) if found is None else found
        try:
            reach = self._climbed(test, census, listed, targets, imported)
        finally:
            if listed is not found and listed is not None:
                listed.clear()
        if reach:
            return True, self.holders(test, imported=imported, reach=reach)
        if reach is not None and reached is None:
            return None
        if reached is None:
            reached = self._walked(test, targets, imported, census.backends, GATE_LIMIT)
        return None if reached is False else (reached, self.holders(test, imported=imported))

    def _climbed(
        self,
        test: AuditedTest,
        census: Census,
        found: list[object] | None,
        targets: Targets,
        imported: Collection[str],
    ) -> Reach | None:
        """The roots that hold a graph the test left alive, climbed to from the graphs
        (``outlive/climb``): None when they are not listed or it cannot tell."""
        if found is None:
            return None
        listed = [obj for obj in found if targets.made_during(obj)]
        roots = self._roots(test, imported)
        try:
            return climb(
                self._gate,
                listed,
                roots,
                census.backends,
                census.since(),
                own=(id(found), id(listed)),
            )
        finally:
            listed.clear()
            roots.clear()

    def _walked(
        self,
        test: AuditedTest,
        targets: Targets,
        imported: Collection[str],
        backends: list[Backend],
        limit: int,
    ) -> bool | None:
        """The gate's walk down from every root (``outlive/gate``), as far as ``limit``."""
        values = self.root_values(test, imported=imported)
        kept = (
            [h.value for h in self.holders(test, imported=imported) if h.kept]
            if (self.keep)
            else []
        )
        try:
            return self._gate.may_reach(
                values, targets.made_during, backends, limit=limit, kept=kept
            )
        finally:
            values.clear()
            kept.clear()

    def _roots(self, test: AuditedTest, imported: Collection[str]) -> Roots:
        """Where the roots are (``climb.Roots``): each module's globals by its dict, so
        that no global is read unless a graph's holders lead to it."""
        roots = Roots()
        for module in (test.module, *self._other_modules(test.module, imported)):
            if module is not None:
                roots.modules[id(vars(module))] = module
        for holder in class_attributes(test.cls, self._set_by) if test.cls is not None else ():
            (roots.fixtures if holder.fixture else roots.values)[id(holder.value)] = holder.value
        roots.fixtures.update((id(h.value), h.value) for h in live_fixtures(test))
        if self.keep:
            roots.kept.update(
                (id(h.value), h.value) for h in self.holders(test, imported=imported) if h.kept
            )
        return roots

    # -- roots --------------------------------------------------------------------------
    def holders(
        self,
        test: AuditedTest,
        *,
        fixtures: bool = True,
        others: bool = True,
        imported: Collection[str] = (),
        reach: Reach | None = None,
    ) -> list[Holder]:
        """The roots; ``others``: the user's other modules' globals too, but those of
        the modules first ``imported`` during the test (what their import made is not
        the test's: a graph built at import is named for no test). ``reach``: only the
        roots a climb found holding a graph (``outlive/climb``)."""
        module = test.module
        holders: list[Holder] = []
        if module is not None:
            holders.extend(globals_of(module, _names(reach, module)))
        if test.cls is not None:
            holders.extend(
                h
                for h in class_attributes(test.cls, self._set_by)
                if reach is None or id(h.value) in reach.values
            )
        if fixtures:
            holders.extend(
                h for h in live_fixtures(test) if reach is None or id(h.value) in reach.values
            )
        for other in self._other_modules(module, imported) if others else ():
            names = _names(reach, other)
            if names is None or names:
                holders.extend(globals_of(other, names))
        if not self.keep:
            return holders
        # graphleak_outlive_keep names holder OBJECTS: whatever alias or path reaches one
        # (a class through its module global, `from mypkg.cache import CACHE` elsewhere),
        # it is no root and no search passes through it.
        kept = {id(obj): obj for pattern in self.keep for obj in resolve_name(pattern)}
        for holder in holders:
            if self._kept_on_purpose(holder.qualified):
                kept.setdefault(id(holder.value), holder.value)
        roots = [h for h in holders if id(h.value) not in kept]
        roots.extend(Holder(words.KEPT_ON_PURPOSE, "", obj, kept=True) for obj in kept.values())
        return roots

    def root_values(
        self, test: AuditedTest, *, others: bool = True, imported: Collection[str] = ()
    ) -> list[Any]:
        """The values of the roots ``holders`` names (the caller owns the list): read, not
        labelled, for the gate (``outlive/gate``), which walks what they reach."""
        values: list[Any] = []
        if test.module is not None:
            values.extend(global_values(test.module))
        if test.cls is not None:
            values.extend(h.value for h in class_attributes(test.cls, self._set_by))
        values.extend(h.value for h in live_fixtures(test))
        for other in self._other_modules(test.module, imported) if others else ():
            values.extend(global_values(other))
        return values

    def _other_modules(
        self, module: types.ModuleType | None, imported: Collection[str]
    ) -> Iterator[types.ModuleType]:
        """The user's modules but ``module`` and those first ``imported`` during the test.
        Which modules are the user's is decided once per module name; the list is read
        again only when ``sys.modules`` changed (its size or its newest name)."""
        modules = sys.modules
        key = (len(modules), next(reversed(modules), None))
        if key != self._modules_key:  # a module imported (or removed) since: new names only
            known = self._user_module
            names = []
            for name in list(modules):
                user = known.get(name)
                if user is None:
                    user = is_user_module(name)
                    if user is None:  # not imported after all: asked again next time
                        continue
                    known[name] = user
                if user:
                    names.append(name)
            self._user_names = names
            self._modules_key = key
        for name in self._user_names:
            other = modules.get(name)
            if other is module or name in imported or not isinstance(other, types.ModuleType):
                continue
            yield other

    def _kept_on_purpose(self, qualified: str) -> bool:
        return any(fnmatch.fnmatchcase(qualified, pattern) for pattern in self.keep)


def _names(reach: Reach | None, module: types.ModuleType) -> set[str] | None:
    """The globals of ``module`` the climb found holding a graph (None: all)."""
    if reach is None:
        return None
    return {name for owner, name in reach.globals if owner == module.__name__}

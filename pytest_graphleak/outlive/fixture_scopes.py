"""The outlive audit's side of wider-scope fixtures (module, class, session): a graph
that only such a fixture keeps is the fixture's while it lives, handed to it at the
teardown of the test that made it (``fixture_finalising`` for the test in whose teardown
it is torn down), and judged after the fixture's finalizers (``fixture_finalised``) or
at a later test's teardown (``judge_pending``): what of the user's still keeps it is then
named, keyed on the fixture instance, never on which test ran last. ``Audit`` (its
roots, its census, one test's audit) inherits it."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pytest_graphleak.outlive.census import Census
from pytest_graphleak.outlive.found import Deferred, Holder, Listed, Targets
from pytest_graphleak.outlive.roots import MISSING, fixture_label, owned_by, still_kept
from pytest_graphleak.outlive.subjects import AuditedTest, FixtureDef
from pytest_graphleak.probes.autograd import BUNDLES, active_backends
from pytest_graphleak.result import CheckResult, JudgedAt, Link
from pytest_graphleak.words import outlive as said

if TYPE_CHECKING:
    import weakref
    from collections.abc import Collection

    from pytest_graphleak.outlive.rerun import SiteRun


class FixtureScopes:
    """The fixture-scope state and hooks of ``Audit`` (see the module docstring)."""

    rerun: SiteRun | None
    keep: tuple[str, ...]
    _pending: list[tuple[Deferred, FixtureDef]]
    _set_by: dict[int, tuple[type, dict[str, FixtureDef]]]
    _judged: list[CheckResult]
    _torn_down: list[JudgedAt]
    _nodes: dict[int, FixtureInstance]
    _handed: list[weakref.ref[Any]]

    if TYPE_CHECKING:  # Audit's, used here

        def quiet(self, nodeid: str) -> contextlib.AbstractContextManager[None]: ...

        def holders(
            self,
            test: AuditedTest,
            *,
            fixtures: bool = True,
            others: bool = True,
            imported: Collection[str] = (),
        ) -> list[Holder]: ...

        def listed(self, test: AuditedTest, census: Census) -> list[object] | None: ...

        def reaching(
            self,
            test: AuditedTest,
            census: Census,
            found: list[object] | None,
            targets: Targets,
            imported: Collection[str] = (),
        ) -> tuple[bool | None, list[Holder]] | None: ...

        def _kept_on_purpose(self, qualified: str) -> bool: ...

    def judged(self) -> list[CheckResult]:
        """What was judged at the fixture teardowns of the running test (taken)."""
        judged, self._judged = self._judged, []
        return judged

    def torn_down(self) -> list[JudgedAt]:
        """The fixture instances judged at the teardowns of the running test (taken):
        where a finding keyed on one of them could have been seen."""
        torn, self._torn_down = self._torn_down, []
        return torn

    def _judged_at(self, fixturedef: FixtureDef) -> JudgedAt | None:
        """The instance of ``fixturedef`` last set up (None: its setup was not seen)."""
        found = self._nodes.get(id(fixturedef))
        if found is None or found.fixturedef is not fixturedef:
            return None
        return JudgedAt(
            fixturedef.argname,
            fixturedef.scope,
            found.node,
            label=fixture_label(fixturedef),
            requested_by=tuple(found.requested),
            file=found.where[0],
            line=found.where[1],
        )

    def requested(self, test: AuditedTest) -> None:
        """``test`` ran (its teardown is over): the live wider-scope fixture instances it
        requested note it (``JudgedAt.requested_by``)."""
        for fixturedef in test.fixtures.values():
            found = self._nodes.get(id(fixturedef))
            if (
                found is not None
                and found.fixturedef is fixturedef
                and fixturedef.cached_result is not None
            ):
                found.requested.append(test.nodeid)

    def judge_pending(self, test: AuditedTest) -> list[CheckResult]:
        """Graphs a wider-scope fixture kept: once it is torn down, what still keeps them?"""
        results: list[CheckResult] = []
        still: list[tuple[Deferred, FixtureDef]] = []
        for deferred, fixturedef in self._pending:
            if fixturedef.cached_result is not None:
                still.append((deferred, fixturedef))
                continue
            alive = deferred.alive()
            if not alive:
                continue
            at = self._judged_at(fixturedef)
            if at is not None:
                at = replace(at, made_during=(deferred.nodeid,))
            from pytest_graphleak.outlive.explain import explain  # only with graphs to name

            try:
                explained = explain(
                    Listed(alive),
                    self.holders(test, fixtures=False),
                    nodeid=test.nodeid,
                    made_by=deferred.nodeid,
                    fixture=deferred.fixture,
                    backends=active_backends(),
                )
            finally:
                alive.clear()
            for result in explained.results:
                result.judged_at = at
                if at is not None:
                    result.name = at.row
                if result.diagnosis is not None and not result.diagnosis.sites:
                    result.diagnosis.notes.append(said.MADE_BEFORE.format(sites_text(True)))
            results.extend(explained.results)
        self._pending = still
        return results

    # -- wider-scope fixtures ----------------------------------------------------------
    @staticmethod
    def class_attributes(cls: type | None) -> dict[str, Any]:
        """The attributes of ``cls`` before a class-scoped fixture's setup."""
        return dict(vars(cls)) if cls is not None else {}

    def fixture_set_up(
        self,
        fixturedef: FixtureDef,
        cls: type | None,
        before: dict[str, Any],
        node: str = "",
        where: tuple[str, int] = ("", 0),
    ) -> None:
        """Note the ``request.cls`` attributes a class-scoped fixture set (``before``: the
        class's attributes before its setup): what they keep is that fixture's while it
        lives, as its value is. Empties ``before``. ``node``: the node id of the scope
        this instance lives in (``request.node``; "" for the session); ``where``: the
        fixture's definition (file, line)."""
        if fixturedef.scope != "function":
            self._nodes[id(fixturedef)] = FixtureInstance(fixturedef, node, where)
        if cls is None:
            return
        changed = [
            name
            for name, value in list(vars(cls).items())
            if not name.startswith("__") and before.get(name, MISSING) is not value
        ]
        before.clear()
        if changed:
            names = self._set_by.setdefault(id(cls), (cls, {}))[1]
            names.update(dict.fromkeys(changed, fixturedef))

    def fixture_finalising(
        self, fixturedef: FixtureDef, test: AuditedTest | None, census: Census | None
    ) -> None:
        """A wider-scope fixture is about to be torn down in ``test``'s teardown, before
        its own teardown code runs: what the test handed it and nothing of the user's
        keeps is the fixture's now, as an earlier test's is (``Deferred``), whatever that
        code does with it next. So the finding and its key do not depend on which test of
        the fixture's scope ran last. ``census``: the test's own, while it runs."""
        if (
            self.rerun is not None
            or test is None
            or census is None
            or fixturedef.scope == "function"
        ):
            return
        owns = any(fd is fixturedef for fd in test.fixtures.values()) or any(
            fd is fixturedef for _, names in self._set_by.values() for fd in names.values()
        )
        if not owns:
            return  # nothing of this test reaches the fixture's own objects
        with self.quiet(test.nodeid):  # a failure is a note, never the teardown's error
            now = census.so_far()
            found = None if now is None else self.listed(test, now)
            if now is None or found == []:
                return
            targets: Targets = now if found is None else Listed(found, now.grown_in_place)
            reaching = self.reaching(test, now, found, targets)
            if found is not None:
                found.clear()
            if reaching is None:
                return
            roots = [h for h in reaching[1] if not h.fixture or h.owner is fixturedef]
            from pytest_graphleak.outlive.explain import explain  # only with graphs to name

            explained = explain(targets, roots, nodeid=test.nodeid, backends=now.backends)
            try:
                for deferred in explained.deferred:
                    if deferred.owner is fixturedef and deferred.tensors:
                        self._pending.append((deferred, fixturedef))
            finally:
                explained.release()

    def fixture_finalised(self, fixturedef: FixtureDef, test: AuditedTest | None) -> None:
        """A wider-scope fixture's finalizers ran during ``test``'s teardown and its value
        is still cached: what the graphs the tests handed it (``fixture_finalising``: the
        tearing-down test's too) are still kept by (its value, the ``request.cls``
        attributes it set, or a root of the user's) is named now, with the tests that made
        them (``judged``). A fixture that cleared them keeps nothing."""
        owned = self._release(fixturedef)
        if self.rerun is not None or test is None or fixturedef.scope == "function":
            return  # torn down after the last test: nothing is left to report on
        pending = [d for d, fd in self._pending if fd is fixturedef]
        self._pending = [(d, fd) for d, fd in self._pending if fd is not fixturedef]
        # the test's own audit, after this teardown, leaves these to the fixture's finding
        self._handed.extend(ref for d in pending if d.nodeid == test.nodeid for ref in d.tensors)
        alive = [obj for deferred in pending for obj in deferred.alive()]
        at = self._judged_at(fixturedef)
        if at is not None and any(fd is fixturedef for fd in test.fixtures.values()):
            # torn down after its last test that requested it: that test's finding
            at = replace(at, requested_by=(*at.requested_by, test.nodeid), charged_to=test.nodeid)
        if not alive:
            if at is not None:
                self._torn_down.append(at)
            return
        made = tuple(dict.fromkeys(d.nodeid for d in pending))  # the tests, in order
        if at is not None:
            at = replace(at, made_during=made)
        results: list[CheckResult] = []
        label = fixture_label(fixturedef)
        try:
            with self.quiet(test.nodeid):  # a failure is a note, never the teardown's error
                roots = self._teardown_roots(test, fixturedef, owned)
                from pytest_graphleak.outlive.explain import explain  # only with graphs to name

                earlier = explain(
                    Listed(alive),
                    roots,
                    nodeid=test.nodeid,
                    made_by=said.tests_text(made),
                    fixture=label,
                    backends=active_backends(),
                    judging=fixturedef,
                )
                for deferred in earlier.deferred:  # handed on to another live fixture
                    if deferred.owner is not None and deferred.tensors:
                        self._pending.append((deferred, deferred.owner))
                results.extend(earlier.results)
                if at is not None:  # judged to the end: what it kept was seen
                    self._torn_down.append(at)
        finally:
            alive.clear()
        for result in results:
            result.judged_at = at  # keyed on the instance, not the test that tore it down
            if at is not None:  # its row is named for the fixture
                result.name = at.row
            diagnosis = result.diagnosis
            if diagnosis is None:
                continue
            root = root_of(result, raw=True)
            if root == label or root.endswith(owned_by(fixturedef)):
                diagnosis.notes.append(still_kept(fixturedef))
            if not diagnosis.sites:
                diagnosis.notes.append(said.no_sites(sites_text(False), hint=False))
        self._judged.extend(results)

    def _release(self, fixturedef: FixtureDef) -> list[tuple[type, str]]:
        """Forget (and return) the ``request.cls`` attributes ``fixturedef`` set."""
        owned: list[tuple[type, str]] = []
        for key, (cls, names) in list(self._set_by.items()):
            mine = [name for name, fd in names.items() if fd is fixturedef]
            owned.extend((cls, name) for name in mine)
            for name in mine:
                del names[name]
            if not names:
                del self._set_by[key]
        return owned

    def _teardown_roots(
        self, test: AuditedTest, fixturedef: FixtureDef, owned: list[tuple[type, str]]
    ) -> list[Holder]:
        """The roots while ``fixturedef`` is torn down: the user's (other live wider-scope
        fixtures stay deferred), then its value and the class attributes it set (searched
        after the user's: a global it handed them to is the holder to name)."""
        holders = [h for h in self.holders(test) if h.owner is not fixturedef]
        mine: list[Holder] = []
        cached = fixturedef.cached_result
        if cached and cached[2] is None:
            mine.append(
                Holder(
                    fixture_label(fixturedef),
                    fixturedef.argname,
                    cached[0],
                    fixture=True,
                    owner=fixturedef,
                )
            )
        for cls, name in owned:
            value = vars(cls).get(name, MISSING)
            if value is not MISSING:
                label = said.CLASS_ATTRIBUTE.format(cls.__qualname__, name) + owned_by(fixturedef)
                mine.append(
                    Holder(
                        label,
                        f"{cls.__module__}.{cls.__qualname__}.{name}",
                        value,
                        fixture=True,
                        owner=fixturedef,
                        exclusive=True,
                    )
                )
        if self.keep:  # the keep list applies to these too
            kept = {id(h.value) for h in holders if h.kept}
            mine = [
                h
                for h in mine
                if id(h.value) not in kept and not self._kept_on_purpose(h.qualified)
            ]
        values = {id(h.value) for h in mine}
        return [*(h for h in holders if id(h.value) not in values), *mine]


@dataclass
class FixtureInstance:
    """A live wider-scope fixture instance: its definition, the node id of its scope,
    where the fixture is defined, and the tests that requested it so far."""

    fixturedef: FixtureDef
    node: str
    where: tuple[str, int]
    requested: list[str] = field(default_factory=list)


def sites_text(recorded: bool) -> str:
    """The libraries whose creation sites are (or are not) recorded while a test runs."""
    return " and ".join(f"{b.name}'s" for b in BUNDLES if (b.record_sites is None) != recorded)


def holder_key(root: Link) -> str:
    """``global 'losses'`` (a step check's root) and ``global 'tests.test_x.losses'`` (the
    audit's) name the same holder: the root's kind and the user's name for it, read from
    its typed link (``Link.name`` is the last dotted name); "" when it has no name."""
    return f"{root.type} {root.name}" if root.name else ""


def root_of(result: CheckResult, *, raw: bool = False) -> str:
    """The label of the chain's root (``raw``), or its holder key (an unnamed root: its
    label, as an opaque identity)."""
    diagnosis = result.diagnosis
    if diagnosis is None or not diagnosis.chain:
        return ""
    label = diagnosis.chain[0]
    if raw or not diagnosis.links:
        return label
    return holder_key(diagnosis.links[0]) or label

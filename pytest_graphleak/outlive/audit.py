"""The outlive audit of a run of tests, without pytest: ``Audit``.

The front end (the plugin's ``plugin/audit``, pytest's hooks) calls it: ``census()``
when a test's call phase begins, ``audit()`` after its teardown, ``judge_pending()``
then too, ``class_attributes()`` / ``fixture_set_up()`` around a class-scoped fixture's
setup, ``fixture_finalising()`` before a wider-scope fixture's own teardown code and
``fixture_finalised()`` after its finalizers. A test is an
``AuditedTest`` (its id, module, class and fixture definitions) and a fixture definition
a ``FixtureDef`` (``argname``, ``scope``, ``cached_result``), both in
``outlive/subjects``: the front end fills them from pytest; it runs a test once more for
its sites through a ``Rerun`` it hands in.

It picks the roots (the test module's globals, the test class's attributes, the user's
other modules, the wider-scope fixtures still alive), applies the keep list
(``graphleak_outlive_keep``) and explains what the census found (``outlive/explain``).
A graph that only a wider-scope fixture keeps is the fixture's while it lives; it is
judged again after the teardown that finalises that fixture, and named then (with the
tests that made it) if something of the user's still keeps it. The graphs of the test in
whose teardown it is torn down are handed to it just before its teardown code runs, as
an earlier test's are at that test's audit: which test ran last changes nothing.
"""

from __future__ import annotations

import contextlib
import fnmatch
import sys
import types
import warnings
import weakref
from collections.abc import Collection, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from pytest_graphleak.heap.usercode import is_user_module
from pytest_graphleak.outlive.census import Census, TypeKinds
from pytest_graphleak.outlive.climb import Reach, Roots, climb
from pytest_graphleak.outlive.fixture_scopes import (
    FixtureInstance,
    FixtureScopes,
    root_of,
    sites_text,
)
from pytest_graphleak.outlive.found import (
    MAX_VISITED,
    Deferred,
    Explained,
    Holder,
    Listed,
    Targets,
)
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
from pytest_graphleak.patterns import FIXES
from pytest_graphleak.probes.autograd import Backend
from pytest_graphleak.result import CheckResult, Fix, JudgedAt
from pytest_graphleak.words import outlive as words
from pytest_graphleak.words import verify as said

if TYPE_CHECKING:  # imported when a test is run again for its sites (it imports the diagnosis)
    from pytest_graphleak.outlive.rerun import SiteRun


class Rerun(Protocol):
    """The front end's one more run of a test (``--graphleak-outlive-sites=rerun``)."""

    def refusal(self) -> str: ...  # why the test is not run again ("" when it can be)
    def run(self) -> str: ...  # run it; the phase (setup, teardown) that failed, or ""
    # name -> the test's function, then its fixtures' (where a fix's line is looked for)
    def functions(self) -> dict[str, object]: ...


class Audit(FixtureScopes):
    """The audit's state across a run of tests (see the module docstring)."""

    def __init__(
        self, *, keep: Collection[str] = (), sites: str = "off", verify_fix: bool = True
    ) -> None:
        self.keep = tuple(keep)
        self.sites = sites
        #: The re-run mode tries each finding's fix (``outlive/rerun_fix``).
        self.verify_fix = verify_fix
        #: The re-run in progress (``sites="rerun"``): the front end's call hook records.
        self.rerun: SiteRun | None = None
        #: Graphs kept only by a wider-scope fixture, with that fixture's definition.
        self._pending: list[tuple[Deferred, FixtureDef]] = []
        #: Attributes a class-scoped fixture set on ``request.cls`` (the unittest
        #: ``setUpClass`` fixture too), while it lives: id(class) -> (class, name -> def).
        self._set_by: dict[int, tuple[type, dict[str, FixtureDef]]] = {}
        #: What was judged at fixture teardowns during the running test, reported at its
        #: teardown (``judged``), and the fixture instances judged then (``torn_down``).
        self._judged: list[CheckResult] = []
        self._torn_down: list[JudgedAt] = []
        #: id(definition) -> its live instance: what the findings judged at its teardown
        #: are keyed on (``JudgedAt``) and the tests that requested it.
        self._nodes: dict[int, FixtureInstance] = {}
        #: The running test's graphs judged at a fixture teardown in its own teardown
        #: (weakly): its audit, after that teardown, does not name them again.
        self._handed: list[weakref.ref[Any]] = []
        #: Why some tests could not be audited (shown once in the summary).
        self.notes: set[str] = set()
        self._kinds = TypeKinds()  # which types are graph types (censuses share it)
        self._gate = Gate()
        #: gate answer (True, None) -> (tests whose graphs were not named, the first).
        self._unseen: dict[bool | None, tuple[int, str]] = {}
        #: The user's module names in sys.modules, and the (size, newest name) of
        #: sys.modules they were read at (``_other_modules``).
        self._user_names: list[str] = []
        self._modules_key: tuple[int, str | None] = (-1, None)
        #: module name -> is it the user's (by its file), decided once per name.
        self._user_module: dict[str, bool] = {}

    # -- one test -----------------------------------------------------------------------
    def census(self) -> Census:
        """A census begun now (the test's call phase begins)."""
        census = Census(self._kinds)
        census.begin()
        return census

    @contextlib.contextmanager
    def quiet(self, nodeid: str) -> Iterator[None]:
        """No warning of the audit's making (its walks touch deprecated attributes)
        escapes; a failure of the audit is a note, never the test's error."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                yield
        except Exception as exc:  # the audit must never fail a test by itself
            self.notes.add(words.AUDIT_FAILED.format(nodeid, type(exc).__name__, exc))

    def audit(
        self, test: AuditedTest, census: Census, *, checked: Collection[str] = (),
        rerun: Rerun | None = None,
    ) -> list[CheckResult]:  # fmt: skip
        """What the finished test left alive, told from the roots; holders whose key is
        in ``checked`` (the roots of the test's own leaked step checks) are not repeated."""
        rerun = rerun if self.sites == "rerun" else None
        handed = [obj for ref in self._handed if (obj := ref()) is not None]
        self._handed = []
        explained = self._census_explained(test, census, keep_paths=rerun is not None,
                                           handed=handed)  # fmt: skip
        handed.clear()
        try:
            for deferred in explained.deferred:
                fixturedef = deferred.owner or test.fixtures.get(_fixture_name(deferred.fixture))
                if fixturedef is not None and deferred.tensors:
                    self._pending.append((deferred, fixturedef))
            paths: list[Any] = list(explained.paths) or [None] * len(explained.results)
            kept = [(r, p) for r, p in zip(explained.results, paths, strict=True)
                    if root_of(r) not in checked]  # fmt: skip
            paths.clear()
            results = [r for r, _ in kept]
            if rerun is not None and results:
                self._sites_from_rerun(test, rerun, results, kept[0][1], explained)
            kept.clear()
            for result in results:
                _note_unknownsites_text(result, rerun is not None)
            return results
        finally:
            explained.release()

    def _census_explained(
        self, test: AuditedTest, census: Census, *, keep_paths: bool = False,
        site_of: Any = None, handed: list[Any] | None = None,
    ) -> Explained:
        """What the census found, explained from the roots."""
        if not census.finish():
            return Explained()  # the test numbered no graph node
        targets: Targets = census  # a search of the roots for graphs the test numbered
        found = self.listed(test, census)
        try:
            if found is not None:  # what it made is listed: only those are looked for
                if not found:
                    return Explained()
                targets = Listed(found, census.grown_in_place)
            if handed:  # judged at a fixture's teardown just now: that fixture's finding
                targets = _Without(targets, handed)
            imported = census.modules_imported()
            reaching = self.reaching(test, census, found, targets, imported)
            if reaching is None:
                return Explained()
            reached, roots = reaching
            # imported now: a suite whose tests leave nothing of the user's alive never
            # imports the diagnosis (outlive/found)
            from pytest_graphleak.outlive.explain import explain

            explained = explain(targets, roots, nodeid=test.nodeid,
                                backends=census.backends, keep_paths=keep_paths,
                                site_of=site_of)  # fmt: skip
            if site_of is None and not explained.results and not explained.deferred:
                self._not_named(test.nodeid, reached)
            return explained
        finally:
            if found is not None:
                found.clear()

    def listed(self, test: AuditedTest, census: Census) -> list[object] | None:
        """The graph objects the test made that are alive (``Census.young``) and the old
        tensors near its roots whose graph it extended in place; None: not listed."""
        found = census.young()
        if found is not None:
            near = self.root_values(test, others=False)
            found.extend(census.grown_near(near))
            near.clear()
        return found

    def reaching(
        self, test: AuditedTest, census: Census, found: list[object] | None, targets: Targets,
        imported: Collection[str] = (),
    ) -> tuple[bool | None, list[Holder]] | None:  # fmt: skip
        """The roots to search for ``targets``, and whether one is known to reach them
        (None: not known); None when none does. Climbed to from the graphs where it can
        tell (``outlive/climb``: those roots alone), else walked down to from every
        root, as far as the gate's limit."""
        reach = self._climbed(test, census, found, targets, imported)
        if reach is None:  # not known upwards: the walk down from the roots, bounded
            reached = self._walked(test, targets, imported, census.backends)
            return None if reached is False else (reached, self.holders(test, imported=imported))
        if not reach:
            return None
        return True, self.holders(test, imported=imported, reach=reach)

    def _climbed(
        self, test: AuditedTest, census: Census, found: list[object] | None, targets: Targets,
        imported: Collection[str],
    ) -> Reach | None:  # fmt: skip
        """The roots that hold a graph the test left alive, climbed to from the graphs
        (``outlive/climb``): None when they are not listed or it cannot tell."""
        if found is None:
            return None
        listed = [obj for obj in found if targets.made_during(obj)]
        roots = self._roots(test, imported)
        try:
            return climb(self._gate, listed, roots, census.backends, census.since(),
                         own=(id(found), id(listed)))  # fmt: skip
        finally:
            listed.clear()
            roots.clear()

    def _walked(
        self, test: AuditedTest, targets: Targets, imported: Collection[str],
        backends: list[Backend],
    ) -> bool | None:  # fmt: skip
        """The gate's walk down from every root (``outlive/gate``), bounded."""
        values = self.root_values(test, imported=imported)
        kept = [h.value for h in self.holders(test, imported=imported) if h.kept] if (
            self.keep) else []  # fmt: skip
        try:
            return self._gate.may_reach(values, targets.made_during, backends, kept=kept)
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
        if test.cls is not None:
            roots.values.update((id(h.value), h.value)
                                for h in class_attributes(test.cls, self._set_by))  # fmt: skip
        roots.values.update((id(h.value), h.value) for h in live_fixtures(test))
        if self.keep:
            roots.kept.update((id(h.value), h.value)
                              for h in self.holders(test, imported=imported) if h.kept)  # fmt: skip
        return roots

    def _not_named(self, nodeid: str, reached: bool | None) -> None:
        """What the audit could not see, said once in the summary with a count: graphs
        the gate reached from the roots (``reached``) that the holder search did not
        name, or (None) roots that reach more than the gate's limit, so that only the
        holder search, within its budget, looked."""
        count, first = self._unseen.get(reached, (0, nodeid))
        self.notes.discard(_unseen_note(reached, count, first))
        self._unseen[reached] = (count + 1, first)
        self.notes.add(_unseen_note(reached, count + 1, first))

    def _sites_from_rerun(
        self, test: AuditedTest, rerun: Rerun, results: list[CheckResult], watched: Any,
        explained: Explained,
    ) -> None:  # fmt: skip
        """Run the test once more under the site recorders (``outlive/rerun``)."""
        why = rerun.refusal()
        if why:
            for result in results:
                if result.diagnosis is not None:
                    result.diagnosis.notes.append(words.NOT_RERUN.format(why))
                    _not_tried(result, said.not_rerun(why))
            return
        from pytest_graphleak.outlive.rerun import SiteRun, amend

        root = None
        if watched is not None:
            reader = {h.label: h.read for h in self.holders(test)}
            root = reader.get(watched.root_label)
        run = self.rerun = SiteRun(watched, explained.walker, root)
        try:  # the freeze and the trace function are given back whatever happens
            try:
                failed = rerun.run()
            finally:
                self.rerun = None
                run.call_ends()
            if not run.called or not run.counted or failed:
                why = (words.PHASE_FAILED.format(failed) if failed else words.CALL_NOT_RUN
                       if not run.called else words.NOT_COUNTED)  # fmt: skip
                for result in results:
                    if result.diagnosis is not None:
                        result.diagnosis.notes.append(words.RERUN_FAILED.format(why))
                        _not_tried(result, said.rerun_failed(why))
                return
            again = self._census_explained(test, run.census, site_of=run.site_of)
            run.counted = False  # the census is finished
            amend(results, again.results, watched=watched.root_label
                  if watched is not None else "", stored=run.stored, via=run.via,
                  call_error=run.call_error, trouble=run.trouble)  # fmt: skip
        finally:
            run.close()
        self._fixes_from_rerun(test, rerun, results)

    def _fixes_from_rerun(
        self, test: AuditedTest, rerun: Rerun, results: list[CheckResult]
    ) -> None:
        """Each finding's fix tried by running the test again with it (``rerun_fix``)."""
        if not self.verify_fix:
            for result in results:
                _not_tried(result, said.OFF)
            return
        from pytest_graphleak.outlive.rerun_fix import try_fixes

        starts = dict(rerun.functions())
        starts.update((h.label, h.value) for h in self.holders(test))
        try:
            try_fixes(results, starts=starts, run_once=lambda: self._run_with_change(test, rerun))
        finally:
            starts.clear()

    def _run_with_change(self, test: AuditedTest, rerun: Rerun) -> tuple[str, list[str]]:
        """The test once more, a change in place (``rerun_fix.RunOnce``): why it cannot be
        judged ("" when it can), and the labels of the holders that keep graphs it made
        after its teardown."""
        from pytest_graphleak.outlive.rerun import SiteRun

        run = self.rerun = SiteRun(None, None, None, record=False)
        try:
            try:
                failed = rerun.run()
            finally:
                self.rerun = None
                run.call_ends()
            if failed or run.call_error or not run.called or not run.counted:
                return (words.PHASE_FAILED.format(failed) if failed else run.call_error
                        or words.NOT_COUNTED), []  # fmt: skip
            # site_of given: the summary's note on graphs no search named is the first run's
            again = self._census_explained(test, run.census, site_of=_no_site)
            run.counted = False  # the census is finished
            try:
                kept = [root_of(result, raw=True) for result in again.results]
                return "", kept + [deferred.fixture for deferred in again.deferred]
            finally:
                again.release()
        finally:
            run.close()

    # -- roots --------------------------------------------------------------------------
    def holders(
        self, test: AuditedTest, *, fixtures: bool = True, others: bool = True,
        imported: Collection[str] = (), reach: Reach | None = None,
    ) -> list[Holder]:  # fmt: skip
        """The roots; ``others``: the user's other modules' globals too, but those of
        the modules first ``imported`` during the test (what their import made is not
        the test's: a graph built at import is named for no test). ``reach``: only the
        roots a climb found holding a graph (``outlive/climb``)."""
        module = test.module
        holders: list[Holder] = []
        if module is not None:
            holders.extend(globals_of(module, _names(reach, module)))
        if test.cls is not None:
            holders.extend(h for h in class_attributes(test.cls, self._set_by)
                           if reach is None or id(h.value) in reach.values)  # fmt: skip
        if fixtures:
            holders.extend(h for h in live_fixtures(test)
                           if reach is None or id(h.value) in reach.values)  # fmt: skip
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

    def end(self) -> None:
        """The run ended: fixtures torn down after the last test are not judged."""
        self._pending.clear()
        self._set_by.clear()
        self._judged.clear()
        self._torn_down.clear()
        self._nodes.clear()
        self._handed.clear()


class _Without:
    """Targets but some objects (alive while the search runs: their ids are unique)."""

    def __init__(self, targets: Targets, objects: list[Any]) -> None:
        self._targets = targets
        self._ids = {id(obj) for obj in objects}

    def made_during(self, obj: object) -> bool:
        return id(obj) not in self._ids and self._targets.made_during(obj)

    def grown_in_place(self, obj: object) -> bool:
        return id(obj) not in self._ids and self._targets.grown_in_place(obj)


def _names(reach: Reach | None, module: types.ModuleType) -> set[str] | None:
    """The globals of ``module`` the climb found holding a graph (None: all)."""
    if reach is None:
        return None
    return {name for owner, name in reach.globals if owner == module.__name__}


def _unseen_note(reached: bool | None, count: int, first: str) -> str:
    return words.unseen(reached, count, first, MAX_VISITED, GATE_LIMIT)


def _no_site(obj: object) -> None:
    return None


def _not_tried(result: CheckResult, clause: str) -> None:
    """The fix of a finding whose test was not run again with a change: why, in one
    ``clause`` (``words.verify``)."""
    diagnosis = result.diagnosis
    if diagnosis is not None:
        advice = diagnosis.fix or FIXES.get(diagnosis.pattern, "")
        diagnosis.fix_tried = Fix(text=advice, verified=False, why_not=clause)


def _note_unknownsites_text(result: CheckResult, rerun: bool) -> None:
    diagnosis = result.diagnosis
    if diagnosis is None or diagnosis.sites:
        return
    if not rerun:
        diagnosis.notes.append(words.no_sites(sites_text(False)))
    elif not any(words.RAN_AGAIN in n or words.NOT_RUN_AGAIN in n for n in diagnosis.notes):
        diagnosis.notes.append(words.NO_SITE_KEPT)


def _fixture_name(label: str) -> str:
    return label.split("'")[1] if label.count("'") >= 2 else label

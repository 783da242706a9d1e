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
import warnings
import weakref
from collections.abc import Collection, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from pytest_graphleak.outlive.audit_roots import AuditRoots
from pytest_graphleak.outlive.census import Census, TypeKinds
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
    Listed,
    Targets,
)
from pytest_graphleak.outlive.gate import LIMIT as GATE_LIMIT
from pytest_graphleak.outlive.gate import Gate
from pytest_graphleak.outlive.subjects import AuditedTest, FixtureDef
from pytest_graphleak.patterns import FIXES
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


class Audit(AuditRoots, FixtureScopes):
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
        self,
        test: AuditedTest,
        census: Census,
        *,
        checked: Collection[str] = (),
        rerun: Rerun | None = None,
    ) -> list[CheckResult]:
        """What the finished test left alive, told from the roots; holders whose key is
        in ``checked`` (the roots of the test's own leaked step checks) are not repeated."""
        rerun = rerun if self.sites == "rerun" else None
        handed = [obj for ref in self._handed if (obj := ref()) is not None]
        self._handed = []
        explained = self._census_explained(
            test, census, keep_paths=rerun is not None, handed=handed
        )
        handed.clear()
        try:
            for deferred in explained.deferred:
                fixturedef = deferred.owner or test.fixtures.get(_fixture_name(deferred.fixture))
                if fixturedef is not None and deferred.tensors:
                    self._pending.append((deferred, fixturedef))
            paths: list[Any] = list(explained.paths) or [None] * len(explained.results)
            kept = [
                (r, p)
                for r, p in zip(explained.results, paths, strict=True)
                if root_of(r) not in checked
            ]
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
        self,
        test: AuditedTest,
        census: Census,
        *,
        keep_paths: bool = False,
        site_of: Any = None,
        handed: list[Any] | None = None,
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

            explained = explain(
                targets,
                roots,
                nodeid=test.nodeid,
                backends=census.backends,
                keep_paths=keep_paths,
                site_of=site_of,
            )
            if site_of is None and not explained.results and not explained.deferred:
                self._not_named(test.nodeid, reached)
            return explained
        finally:
            if found is not None:
                found.clear()

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
        self,
        test: AuditedTest,
        rerun: Rerun,
        results: list[CheckResult],
        watched: Any,
        explained: Explained,
    ) -> None:
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
                why = (
                    words.PHASE_FAILED.format(failed)
                    if failed
                    else words.CALL_NOT_RUN
                    if not run.called
                    else words.NOT_COUNTED
                )
                for result in results:
                    if result.diagnosis is not None:
                        result.diagnosis.notes.append(words.RERUN_FAILED.format(why))
                        _not_tried(result, said.rerun_failed(why))
                return
            again = self._census_explained(test, run.census, site_of=run.site_of)
            run.counted = False  # the census is finished
            amend(
                results,
                again.results,
                watched=watched.root_label if watched is not None else "",
                stored=run.stored,
                via=run.via,
                call_error=run.call_error,
                trouble=run.trouble,
            )
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
                return (
                    words.PHASE_FAILED.format(failed)
                    if failed
                    else run.call_error or words.NOT_COUNTED
                ), []
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

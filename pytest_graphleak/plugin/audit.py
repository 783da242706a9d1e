"""The outlive audit: with ``--graphleak``, every test (marked or not) is checked after
its teardown for autograd graphs it made that are still alive (docs/getting-started.md,
"Checking a whole suite").

pytest wiring only: the census is ``engine/outlive``'s (each autograd library's node
counter read when the call phase begins and after the teardown: nothing frozen,
collected or patched), the search and the explanation ``diagnose/outlive``'s. This
module picks the roots (the test module's globals, the test class's attributes, the
user's other modules, the wider-scope fixtures still alive), applies the opt-outs
(``@pytest.mark.graphleak_outlive_ok``, the ``graphleak_outlive_keep`` list), and warns
(``GraphOutliveWarning``) or fails the test at its teardown (``GraphOutliveError``).
Results travel on the teardown report as ``report.graphleak`` (plain data, so they cross
pytest-xdist), where the session reporter adds them to the test's row.

A graph that only a wider-scope fixture keeps is the fixture's while it lives; it is
judged again after the teardown that finalises that fixture, and named then (with the
test that made it) if something of the user's still keeps it.

With ``--graphleak-outlive-sites=rerun`` a test with a finding runs once more, unreported,
to find where its graphs were made and stored (``plugin/outlive_rerun``).
"""

from __future__ import annotations

import contextlib
import fnmatch
import sys
import types
import warnings
from collections.abc import Collection, Generator, Iterator
from typing import Any

import pytest

from pytest_graphleak.diagnose.outlive import Deferred, Explained, Holder, Listed, Targets, explain
from pytest_graphleak.engine.outlive import Census
from pytest_graphleak.exceptions import GraphOutliveError, GraphOutliveWarning
from pytest_graphleak.heap.usercode import is_user_module
from pytest_graphleak.options import Settings
from pytest_graphleak.plugin import outlive_rerun
from pytest_graphleak.plugin.baseline import unknown
from pytest_graphleak.plugin.outlive_roots import (
    MISSING,
    class_attributes,
    fixture_label,
    fixturedefs,
    globals_of,
    live_fixtures,
    may_hold,
    owned_by,
    request_cls,
    resolve_name,
    still_kept,
    tests_text,
)
from pytest_graphleak.plugin.session_report import AUDITED
from pytest_graphleak.plugin.terminal import OPT_OUT
from pytest_graphleak.probes.autograd import BUNDLES, active_backends
from pytest_graphleak.report.text import render_text
from pytest_graphleak.result import CheckResult

_CENSUS_KEY = pytest.StashKey[Census]()
_FOUND_KEY = pytest.StashKey["list[dict[str, Any]]"]()
#: Roots of the chains of this test's leaked step checks: the audit does not repeat them.
_CHECKED_ROOTS_KEY = pytest.StashKey["set[str]"]()
#: The census ran to its end (the session report counts the tests audited).
_AUDITED_KEY = pytest.StashKey[bool]()


class OutliveAudit:
    """The plugin object, registered when ``--graphleak`` is on and the audit is not off."""

    def __init__(self, settings: Settings) -> None:
        self.mode = settings.outlive
        self.keep = settings.outlive_keep
        self.sites = settings.outlive_sites
        #: The re-run in progress (``--graphleak-outlive-sites=rerun``): its hooks record.
        self._rerun: outlive_rerun.SiteRun | None = None
        #: Graphs kept only by a wider-scope fixture, with that fixture's definition.
        self._pending: list[tuple[Deferred, Any]] = []
        #: Attributes a class-scoped fixture set on ``request.cls`` (the unittest
        #: ``setUpClass`` fixture too), while it lives: id(class) -> (class, name -> def).
        self._set_by: dict[int, tuple[type, dict[str, Any]]] = {}
        #: The test whose protocol runs (a fixture's teardown is judged during it), and
        #: what was judged at fixture teardowns during it, reported at its teardown.
        self._item: pytest.Item | None = None
        self._judged: list[CheckResult] = []
        #: Why some tests could not be audited (shown once in the summary).
        self.notes: set[str] = set()
        self._kinds: dict[type, bool] = {}  # type -> a graph type? (censuses share it)

    # -- the census -------------------------------------------------------------------
    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, None]:
        rerun = self._rerun
        if rerun is not None:  # the test's second run: record its sites
            rerun.call_begins()
            try:
                yield
            finally:
                rerun.call_ends()
            return
        census = None
        if item.get_closest_marker(OPT_OUT) is None:
            census = Census(self._kinds)
            census.begin()
            item.stash[_CENSUS_KEY] = census
        try:
            yield
        finally:
            if census is not None:
                census.stop_recording()

    # trylast: after pytest's own teardown has finalised the fixtures. A plain hook, not
    # a wrapper, so that a failure is the teardown's error; when the teardown itself
    # raised, this does not run and the census is abandoned in makereport.
    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        if self._rerun is not None:
            return  # the re-run's teardown: judged by the run that started it
        census = item.stash.get(_CENSUS_KEY, None)
        if census is not None:
            del item.stash[_CENSUS_KEY]
        results: list[CheckResult] = []
        with _quiet(self, item):
            if census is not None:
                results = self._audit(item, census, nextitem)
                item.stash[_AUDITED_KEY] = True
        results.extend(self._judged)  # judged at the fixture teardowns just done
        self._judged.clear()
        with _quiet(self, item):
            results.extend(self._judge_pending(item))
        if not results:
            return
        new = unknown(item, results)  # one listed in the baseline file is known: no error
        item.stash[_FOUND_KEY] = [result.to_dict() for result in results]
        if not new:
            return
        text = "\n".join(render_text(result) for result in new)
        if self.mode == "fail":
            raise GraphOutliveError(text, results)
        _warn(item, text)

    def _audit(
        self, item: pytest.Item, census: Census, nextitem: pytest.Item | None
    ) -> list[CheckResult]:
        rerun = self.sites == "rerun"
        explained = self._census_explained(item, census, keep_paths=rerun)
        try:
            for deferred in explained.deferred:
                fixturedef = deferred.owner or _fixturedefs(item).get(
                    _fixture_name(deferred.fixture))  # fmt: skip
                if fixturedef is not None and deferred.tensors:
                    self._pending.append((deferred, fixturedef))
            checked = item.stash.get(_CHECKED_ROOTS_KEY, set())
            paths: list[Any] = list(explained.paths) or [None] * len(explained.results)
            kept = [(r, p) for r, p in zip(explained.results, paths, strict=True)
                    if _root(r) not in checked]  # fmt: skip
            paths.clear()
            results = [r for r, _ in kept]
            if rerun and results:
                self._sites_from_rerun(item, nextitem, results, kept[0][1], explained)
            kept.clear()
            for result in results:
                _note_unknown_sites(result, rerun)
            return results
        finally:
            explained.release()

    def _census_explained(
        self, item: pytest.Item, census: Census, *, keep_paths: bool = False,
        site_of: Any = None,
    ) -> Explained:  # fmt: skip
        """What the census found, explained from the roots."""
        if not census.finish():
            return Explained()  # the test numbered no graph node
        targets: Targets = census  # a search of the roots for graphs the test numbered
        found = census.young()
        try:
            if found is not None:  # what it made is listed: only those are looked for
                near = [h.value for h in self._holders(item, others=False)]
                found.extend(census.grown_near(near))
                near.clear()
                if not found:
                    return Explained()
                targets = Listed(found, census.grown_in_place)
            roots = self._holders(item, imported=census.modules_imported())
            return explain(targets, roots, nodeid=item.nodeid,
                           backends=census.backends, keep_paths=keep_paths,
                           site_of=site_of)  # fmt: skip
        finally:
            if found is not None:
                found.clear()

    def _sites_from_rerun(
        self,
        item: pytest.Item,
        nextitem: pytest.Item | None,
        results: list[CheckResult],
        watched: Any,
        explained: Explained,
    ) -> None:
        """Run the test once more under the site recorders (``outlive_rerun``)."""
        why = outlive_rerun.refusal(item, _fixturedefs(item))
        if why:
            for result in results:
                if result.diagnosis is not None:
                    result.diagnosis.notes.append(f"the test is not run again to find its "
                                                  f"sites: {why}")  # fmt: skip
            return
        root = None
        if watched is not None:
            reader = {h.label: h.read for h in self._holders(item)}
            root = reader.get(watched.root_label)
        run = self._rerun = outlive_rerun.SiteRun(watched, explained.walker, root)
        try:  # the freeze and the trace function are given back whatever happens
            try:
                reports = outlive_rerun.run_again(item, nextitem)
            finally:
                self._rerun = None
                run.call_ends()
            failed = outlive_rerun.failed_phase(reports)
            if not run.called or not run.counted or failed:
                why = (f"its {failed} failed" if failed else "its call phase did not run"
                       if not run.called else "it could not be counted")
                for result in results:
                    if result.diagnosis is not None:
                        result.diagnosis.notes.append(
                            f"the test ran once more to find its sites, but {why}: "
                            "created at and stored at unknown"
                        )
                return
            again = self._census_explained(item, run.census, site_of=run.site_of)
            run.counted = False  # the census is finished
            outlive_rerun.amend(results, again.results, watched=watched.root_label
                                if watched is not None else "", stored=run.stored,
                                via=run.via)  # fmt: skip
        finally:
            run.close()

    def _judge_pending(self, item: pytest.Item) -> list[CheckResult]:
        """Graphs a wider-scope fixture kept: once it is torn down, what still keeps them?"""
        results: list[CheckResult] = []
        still: list[tuple[Deferred, Any]] = []
        for deferred, fixturedef in self._pending:
            if getattr(fixturedef, "cached_result", None) is not None:
                still.append((deferred, fixturedef))
                continue
            alive = deferred.alive()
            if not alive:
                continue
            try:
                explained = explain(Listed(alive), self._holders(item, fixtures=False),
                                    nodeid=item.nodeid, made_by=deferred.nodeid,
                                    fixture=deferred.fixture,
                                    backends=active_backends())  # fmt: skip
            finally:
                alive.clear()
            for result in explained.results:
                if result.diagnosis is not None and not result.diagnosis.sites:
                    result.diagnosis.notes.append(
                        f"created at: unknown (sites are recorded for {_sites(True)} graphs "
                        "only, and the test that made it ran before)"
                    )
            results.extend(explained.results)
        self._pending = still
        return results

    # -- wider-scope fixtures ----------------------------------------------------------
    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, Any, None]:
        self._item = item
        self._judged.clear()  # left by a teardown that raised before it was reported
        try:
            yield
        finally:
            self._item = None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef: Any, request: Any) -> Generator[None, Any, None]:
        """Note the ``request.cls`` attributes a class-scoped fixture sets: what they keep
        is that fixture's while it lives, as its value is."""
        cls = request_cls(request) if fixturedef.scope == "class" else None
        before = dict(vars(cls)) if cls is not None else {}
        yield
        if cls is None:
            return
        changed = [name for name, value in list(vars(cls).items())
                   if not name.startswith("__")
                   and before.get(name, MISSING) is not value]  # fmt: skip
        before.clear()
        if changed:
            names = self._set_by.setdefault(id(cls), (cls, {}))[1]
            names.update(dict.fromkeys(changed, fixturedef))

    def pytest_fixture_post_finalizer(self, fixturedef: Any, request: Any) -> None:
        """A wider-scope fixture's finalizers ran and its value is still cached: what the
        graphs the tests handed it are still kept by (its value, the ``request.cls``
        attributes it set, or a root of the user's) is named now, with the tests that
        made them. A fixture that cleared them at its teardown keeps nothing."""
        owned = self._release(fixturedef)
        item = self._item
        if self._rerun is not None or item is None or fixturedef.scope == "function":
            return  # torn down after the last test: nothing is left to report on
        pending = [d for d, fd in self._pending if fd is fixturedef]
        self._pending = [(d, fd) for d, fd in self._pending if fd is not fixturedef]
        # torn down in this test's own teardown, before its audit: what it stored there
        census = item.stash.get(_CENSUS_KEY, None)
        cached = getattr(fixturedef, "cached_result", None)
        value = cached[0] if cached and cached[2] is None else None
        now = census.so_far() if census is not None and may_hold(value) else None
        alive = [obj for deferred in pending for obj in deferred.alive()]
        if not alive and now is None:
            return
        results: list[CheckResult] = []
        label = fixture_label(fixturedef)
        try:
            with _quiet(self, item):  # a failure is a note, never the teardown's error
                roots = self._teardown_roots(item, fixturedef, owned)
                if alive:
                    earlier = explain(Listed(alive), roots, nodeid=item.nodeid,
                                      made_by=tests_text(pending), fixture=label,
                                      backends=active_backends(), judging=fixturedef)  # fmt: skip
                    for deferred in earlier.deferred:  # handed on to another live fixture
                        if deferred.owner is not None and deferred.tensors:
                            self._pending.append((deferred, deferred.owner))
                    results.extend(earlier.results)
                if now is not None:
                    # Only what the value keeps: pytest drops it next. The user's roots and
                    # the class attributes the fixture set outlive it: the test's audit,
                    # after the teardown, names what they keep.
                    value_only = [h for h in roots if h.label == label]
                    if explain(now, value_only, nodeid=item.nodeid, backends=now.backends,
                               judging=fixturedef).results:  # fmt: skip
                        # it keeps some: told from all roots, so that a graph a root of the
                        # user's keeps too is left to the test's audit (no second report)
                        own = explain(now, roots, nodeid=item.nodeid, made_by=item.nodeid,
                                      fixture=label, backends=now.backends,
                                      judging=fixturedef)  # fmt: skip
                        results.extend(r for r in own.results if _root(r, raw=True) == label)
        finally:
            alive.clear()
        for result in results:
            diagnosis = result.diagnosis
            if diagnosis is None:
                continue
            root = _root(result, raw=True)
            if root == label or root.endswith(owned_by(fixturedef)):
                diagnosis.notes.append(
                    f"{still_kept(fixturedef)} (one that clears it there keeps nothing)"
                )
            if not diagnosis.sites:
                diagnosis.notes.append(f"created at: unknown ({_sites(False)} creation sites "
                                       "are not recorded while a test runs)")  # fmt: skip
        self._judged.extend(results)

    def _release(self, fixturedef: Any) -> list[tuple[type, str]]:
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
        self, item: pytest.Item, fixturedef: Any, owned: list[tuple[type, str]]
    ) -> list[Holder]:
        """The roots while ``fixturedef`` is torn down: the user's (other live wider-scope
        fixtures stay deferred), then its value and the class attributes it set (searched
        after the user's: a global it handed them to is the holder to name)."""
        holders = [h for h in self._holders(item) if h.owner is not fixturedef]
        mine: list[Holder] = []
        cached = getattr(fixturedef, "cached_result", None)
        if cached and cached[2] is None:
            mine.append(Holder(fixture_label(fixturedef), fixturedef.argname, cached[0],
                               fixture=True, owner=fixturedef))  # fmt: skip
        for cls, name in owned:
            value = vars(cls).get(name, MISSING)
            if value is not MISSING:
                label = f"class attribute '{cls.__qualname__}.{name}'{owned_by(fixturedef)}"
                mine.append(Holder(label, f"{cls.__module__}.{cls.__qualname__}.{name}", value,
                                   fixture=True, owner=fixturedef, exclusive=True))  # fmt: skip
        if self.keep:  # the keep list applies to these too
            kept = {id(h.value) for h in holders if h.kept}
            mine = [h for h in mine if id(h.value) not in kept
                    and not self._kept_on_purpose(h.qualified)]  # fmt: skip
        values = {id(h.value) for h in mine}
        return [*(h for h in holders if id(h.value) not in values), *mine]

    # -- roots --------------------------------------------------------------------------
    def _holders(
        self, item: pytest.Item, *, fixtures: bool = True, others: bool = True,
        imported: Collection[str] = (),
    ) -> list[Holder]:  # fmt: skip
        """The roots; ``others``: the user's other modules' globals too, but those of
        the modules first ``imported`` during the test (what their import made is not
        the test's: a graph built at import is named for no test)."""
        module = getattr(item, "module", None)
        holders: list[Holder] = []
        if isinstance(module, types.ModuleType):
            holders.extend(globals_of(module))
        cls = getattr(item, "cls", None)
        if isinstance(cls, type):
            holders.extend(class_attributes(cls, self._set_by))
        if fixtures:
            holders.extend(live_fixtures(item))
        for name, other in list(sys.modules.items()) if others else ():
            if name in imported or other is module or not isinstance(other, types.ModuleType):
                continue
            if is_user_module(name):
                holders.extend(globals_of(other))
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
        roots.extend(Holder("kept on purpose", "", obj, kept=True) for obj in kept.values())
        return roots

    def _kept_on_purpose(self, qualified: str) -> bool:
        return any(fnmatch.fnmatchcase(qualified, pattern) for pattern in self.keep)

    # -- reports --------------------------------------------------------------------------
    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, Any, None]:
        outcome = yield
        if self._rerun is not None:
            return  # the re-run's reports are dropped
        report: pytest.TestReport = outcome.get_result()
        if call.when == "call":
            checks = getattr(report, "graphleak", None) or []
            roots = {_chain_root(c) for c in checks if isinstance(c, dict) and c.get("leaked")}
            item.stash[_CHECKED_ROOTS_KEY] = {root for root in roots if root}
            return
        if call.when != "teardown":
            return
        census = item.stash.get(_CENSUS_KEY, None)
        if census is not None:  # the teardown raised before the audit ran
            del item.stash[_CENSUS_KEY]
            census.abandon()
        if item.stash.get(_AUDITED_KEY, False):
            del item.stash[_AUDITED_KEY]
            setattr(report, AUDITED, True)
        found = item.stash.get(_FOUND_KEY, None)
        excinfo = call.excinfo
        # The findings failed the teardown (fail mode, or the warning raised as an error
        # by a filter: -W error::pytest_graphleak.GraphOutliveWarning, filterwarnings =
        # error), or they failed nothing and read as warnings whatever else failed the
        # test (an assert, a timeout, sys.exit) or skipped it.
        failed_by_them = excinfo is not None and isinstance(
            excinfo.value, (GraphOutliveError, GraphOutliveWarning)
        )
        if found:
            del item.stash[_FOUND_KEY]  # pop: nothing outlives the report
            if not failed_by_them:
                for check in found:
                    check["warned"] = True
            report.graphleak = found  # type: ignore[attr-defined]
        if failed_by_them:
            assert excinfo is not None
            # The story only, as the fail mode's: no frames of the plugin's own source.
            report.longrepr = excinfo.getrepr(style="value")
            crash = getattr(report.longrepr, "reprcrash", None)
            if crash is not None and found:  # pytest's short summary line reads this
                crash.message = _short(next((c for c in found if not c.get("known")), found[0]))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        # A run stopped between a test's call and its teardown (Ctrl-C) leaves its census
        # unfinished: the test's session let go of it when the test ended.
        self._pending.clear()
        self._set_by.clear()  # fixtures pytest tears down after the last test: not judged
        self._judged.clear()

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        for note in sorted(self.notes):
            terminalreporter.write_line(f"graphleak: {note}", yellow=True)


@contextlib.contextmanager
def _quiet(audit: OutliveAudit, item: pytest.Item) -> Iterator[None]:
    """No warning of the audit's making (its walks touch deprecated attributes) reaches
    the test's summary; a failure of the audit is a summary note, never the test's error."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    except Exception as exc:  # the audit must never fail a test by itself
        audit.notes.add(f"outlive audit failed in {item.nodeid}: {type(exc).__name__}: {exc}")


def _warn(item: pytest.Item, text: str) -> None:
    """The warning, attributed to the test's definition (not to the plugin)."""
    function = getattr(item, "function", None)
    code = getattr(function, "__code__", None)
    filename = code.co_filename if code is not None else str(getattr(item, "path", "?"))
    lineno = code.co_firstlineno if code is not None else 0
    module = getattr(getattr(item, "module", None), "__name__", "graphleak")
    warnings.warn_explicit(
        GraphOutliveWarning(text), GraphOutliveWarning, filename, lineno, module=module
    )


def _note_unknown_sites(result: CheckResult, rerun: bool) -> None:
    diagnosis = result.diagnosis
    if diagnosis is None or diagnosis.sites:
        return
    if rerun:
        if not any("ran once more" in n or "not run again" in n for n in diagnosis.notes):
            diagnosis.notes.append("created at: unknown (no site recorded for what it keeps)")
        return
    diagnosis.notes.append(
        f"created at: unknown ({_sites(False)} creation sites are not recorded while a test runs; "
        "--graphleak-outlive-sites=rerun runs a test with a finding once more to find "
        "them and the line that stored the graph)"
    )


_fixturedefs = fixturedefs


def _fixture_name(label: str) -> str:
    return label.split("'")[1] if label.count("'") >= 2 else label


def _short(check: dict[str, Any]) -> str:
    chain = (check.get("diagnosis") or {}).get("chain") or ["no root"]
    return f"graphleak: outlived the test: {check.get('pattern')}, held by {chain[0]}"


def _holder_key(label: str) -> str:
    """``global 'losses'`` (a step check's root) and ``global 'tests.test_x.losses'`` (the
    audit's) name the same holder: the kind of root and its last name."""
    kind, _, rest = label.partition(" '")
    return f"{kind} {rest.split(chr(39))[0].rsplit('.', 1)[-1]}" if rest else label


def _chain_root(check: dict[str, Any]) -> str:
    chain = (check.get("diagnosis") or {}).get("chain") or []
    return _holder_key(str(chain[0])) if chain else ""


def _root(result: CheckResult, *, raw: bool = False) -> str:
    """The label of the chain's root (``raw``), or its holder key."""
    chain = result.diagnosis.chain if result.diagnosis is not None else []
    if not chain:
        return ""
    return chain[0] if raw else _holder_key(chain[0])


def _sites(recorded: bool) -> str:
    """The libraries whose creation sites are (or are not) recorded while a test runs."""
    return " and ".join(f"{b.name}'s" for b in BUNDLES if (b.record_sites is None) != recorded)

"""``--graphleak-baseline=FILE``: the pytest side of the baseline file
(``pytest_graphleak.baseline`` holds the file, its keys and the update).

Two places match a finding against the file, with the one key rule:

- where the test runs (the only process, or a pytest-xdist worker), when a result is
  recorded (``mark_known``): a known leak is marked ``known`` there and fails nothing, so
  the marker, ``graphleak.check()``/``track()``, a framework callback and the outlive
  audit do not raise or warn for it;
- on the controller (``BaselineRun``, fed every call and teardown report by the session
  reporter, from every worker): it marks each finding of the run again, counts what was
  found, lists the entries that were checked and not found (fixed since the baseline) and,
  with ``--graphleak-baseline-update``, writes the file at the end.

An entry counts as checked only where this run could have found it: its test ran its
call phase (not skipped), with ``--graphleak`` for a marker's check, and the outlive
audit looked at the test for an ``outlive`` finding; one judged at a wider-scope
fixture's teardown (keyed on that fixture instance) where the audit judged that instance
when it was torn down (``FIXTURES_JUDGED``, from any worker) in a run of every test of
its scope (``runs_whole``: a run of some of them may not hand the instance the graphs,
and would read its entry as fixed). Entries of tests that did not run (``-k``, a test
renamed or removed) are neither known nor fixed, and an update keeps them.

An entry is stale when its test no longer exists: a run of the whole suite (``runs_whole``
for the entry's node, nothing deselected, no collection error) did not collect it (for a
fixture's entry: no test inside its scope). Stale entries are named (terminal, JSON), and
an update drops them (``baseline.updated``'s ``stale``).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from pytest_graphleak import baseline, baseline_keys
from pytest_graphleak.baseline import Baseline
from pytest_graphleak.baseline_keys import Key
from pytest_graphleak.exceptions import BaselineError
from pytest_graphleak.report.model import result_of
from pytest_graphleak.report.text import command_lines, wrap_line
from pytest_graphleak.result import CheckResult
from pytest_graphleak.settings import Settings
from pytest_graphleak.words import baseline as said
from pytest_graphleak.words.baseline import UPDATE_FLAG

#: The loaded file and whether this run writes it, for the process that runs the tests.
BASELINE_KEY = pytest.StashKey["tuple[Baseline, bool]"]()
#: The flag the outlive audit sets on a teardown report (``session_report.AUDITED``).
_AUDITED = "graphleak_audited"
#: On a teardown report: the wider-scope fixture instances the outlive audit judged when
#: they were torn down then, ``[fixture, scope, node]`` each (``CheckResult.judged_at``).
FIXTURES_JUDGED = "graphleak_fixtures_judged"
#: On a teardown report: outlive findings of wider-scope fixtures torn down then that
#: the test did not request (``CheckResult.to_dict()`` each): the session's, on no test's
#: row (``JudgedAt.charged_to`` is "").
FIXTURE_FINDINGS = "graphleak_fixture_findings"


def configured(config: pytest.Config, settings: Settings) -> Baseline | None:
    """The baseline of this run, loaded (also on a pytest-xdist worker, where tests run);
    None without ``--graphleak-baseline``. A bad file is a usage error now, before the
    suite runs, naming the file and the entry."""
    update = settings.baseline_update
    if not settings.baseline:
        if update:
            raise pytest.UsageError(
                f"graphleak: {UPDATE_FLAG} writes the file that --graphleak-baseline=FILE "
                "names: give that too"
            )
        return None
    path = _path(config, settings)
    try:
        if update and not path.parent.is_dir():
            raise BaselineError(
                f"{UPDATE_FLAG} cannot write {str(path)!r}: its directory does not exist"
            )
        if update and not path.exists():
            loaded = Baseline(path)  # the first run writes it
        elif update and not baseline.is_baseline(path):
            baseline.read_document(path)  # unreadable, or no JSON (a typo): that, and where
            raise BaselineError(
                f"{UPDATE_FLAG} will not replace {str(path)!r}: it is not a graphleak "
                "baseline file (choose another path, or remove the file)"
            )
        else:
            loaded = baseline.load(path, rewriting=update)
    except BaselineError as exc:
        source = settings.source("baseline")
        raise pytest.UsageError(f"graphleak: {exc} (from {source})") from None
    config.stash[BASELINE_KEY] = (loaded, update)
    return loaded


def _path(config: pytest.Config, settings: Settings) -> Path:
    """As a report's path: from the command line relative to the invocation directory,
    from an ini file relative to that file's directory."""
    value = Path(str(settings.baseline)).expanduser()
    if settings.source("baseline").startswith("command line"):
        base = config.invocation_params.dir
    else:
        base = config.inipath.parent if config.inipath else config.rootpath
    return Path(os.path.abspath(base / value))


def mark_known(item: pytest.Item, result: CheckResult) -> bool:
    """Mark a leaked result ``known`` when the run's baseline lists it (or this run writes
    the baseline); whether it is known."""
    found = item.config.stash.get(BASELINE_KEY, None)
    if found is None or not result.leaked:
        return False
    loaded, update = found
    result.known = update or loaded.match(key_for(item.nodeid, result)) is not None
    return result.known


def key_for(nodeid: str, result: CheckResult) -> Key:
    """The baseline key of a leaked result of the test ``nodeid`` (one judged at a
    wider-scope fixture's teardown: of that fixture instance, ``CheckResult.judged_at``)."""
    found = result.diagnosis
    links = [asdict(link) for link in found.links] if found else []
    cycle = [asdict(link) for link in found.cycle_links] if found else []
    judged = asdict(result.judged_at) if result.judged_at is not None else None
    return baseline_keys.key_of(
        nodeid, name=result.name, pattern=result.pattern, links=links, judged_at=judged, cycle=cycle
    )


def unknown(item: pytest.Item, results: Iterable[CheckResult]) -> list[CheckResult]:
    """The results that are not known findings (each marked by ``mark_known``)."""
    return [result for result in results if not mark_known(item, result)]


#: Options that run some of the collected tests (``-k``, ``-m``, ``--deselect``, ``--lf``,
#: ``--sw``), by their ``dest``.
_SELECTING = ("keyword", "markexpr", "deselect", "lf", "stepwise")


def runs_whole(config: pytest.Config, node: str) -> bool:
    """Whether this run runs every test of the scope ``node`` (a fixture instance's: a
    class's or a module's node id, a package's directory; "" for the session): no option
    selects among the collected tests, and the paths and node ids given (or the suite's
    own, ``testpaths`` or the directory pytest was run in) cover it whole."""
    option = config.option
    if any(getattr(option, name, None) for name in _SELECTING):
        return False
    source = getattr(config, "args_source", None)  # pytest 7.2+; before, the paths alone
    if source is not None and source != pytest.Config.ArgsSource.ARGS:
        return True  # no paths given: the suite's
    root = config.rootpath.resolve()
    for arg in config.args:
        path, _, inside = arg.partition("::")
        where = (config.invocation_params.dir / path).resolve()
        if root.is_relative_to(where):
            covered = ""  # the root directory or above it
        elif where.is_relative_to(root):
            covered = where.relative_to(root).as_posix()
        else:
            continue
        covered = f"{covered}::{inside}" if inside else covered
        if covered == "" or baseline_keys.inside(node, covered):
            return True
    return False


def stopped_early(session: pytest.Session) -> bool:
    """Whether the run ended before its last test: ``-x`` / ``--maxfail`` (pytest-xdist's
    controller interrupts the run for them), Ctrl-C."""
    interrupted = session.exitstatus == pytest.ExitCode.INTERRUPTED
    return bool(session.shouldstop or session.shouldfail or interrupted)


class BaselineRun:
    """The controller's side: every finding of the run matched, counted and, in an
    update, written (see the module docstring)."""

    def __init__(self, config: pytest.Config, loaded: Baseline, settings: Settings) -> None:
        self.config = config
        self.baseline = loaded
        self.update = settings.baseline_update
        self.checking = settings.enabled
        self.found: set[Key] = set()
        self.ran: set[str] = set()  # node ids whose call phase ran
        self.audited: set[str] = set()
        #: (test, check) of the wider-scope fixture instances the audit judged at their
        #: teardown (``FIXTURES_JUDGED`` on a teardown report), as their findings' keys.
        self.fixtures: set[tuple[str, str]] = set()
        #: The run stopped before its last test (``-x``, ``--maxfail``): a fixture
        #: instance torn down then was not handed every graph (set by ``write``).
        self.stopped_early = False
        #: Entries an earlier version wrote for findings of this run (``Baseline.match``).
        self.matched_before: set[Key] = set()
        self.written: baseline.Update | None = None
        self.error = ""
        #: Node ids of the tests this run collected (None: not known yet), whether pytest
        #: or a plugin deselected some, and whether a file or directory failed to collect:
        #: what tells a stale entry (``stale_entries``).
        self.collected: set[str] | None = None
        self.deselected = False
        self.collection_failed = False

    # -- what was collected: registered as a plugin of the run, on the controller --------
    def collection(self, nodeids: Iterable[str]) -> None:
        """The tests collected (in one process, or by one pytest-xdist worker)."""
        self.collected = {*(self.collected or ()), *nodeids}

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.collection(item.nodeid for item in session.items)

    @pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: the controller collects none
    def pytest_xdist_node_collection_finished(self, node: object, ids: list[str]) -> None:
        self.collection(ids)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected = self.deselected or bool(items)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self.collection_failed = self.collection_failed or report.failed

    def logreport(self, report: pytest.TestReport) -> None:
        """Match a report's findings (before the reporter keeps them)."""
        if report.when == "call" and report.outcome in ("passed", "failed"):
            self.ran.add(report.nodeid)
        if report.when == "teardown" and getattr(report, _AUDITED, False):
            self.audited.add(report.nodeid)
        for fixture, scope, node in getattr(report, FIXTURES_JUDGED, None) or ():
            check = baseline_keys.fixture_check(fixture, scope)
            self.fixtures.add((baseline_keys.scope_test(node), check))
        checks = getattr(report, "graphleak", None)
        if not isinstance(checks, list):
            checks = []
        theirs = getattr(report, FIXTURE_FINDINGS, None) if report.when == "teardown" else None
        for found in (checks, theirs if isinstance(theirs, list) else []):
            for index, check in enumerate(found):
                result = result_of(check)
                if result is None or not result.leaked:
                    continue
                key = key_for(report.nodeid, result)
                self.found.add(key)
                entry = self.baseline.match(key)
                if entry is not None and entry != key:
                    self.matched_before.add(entry)
                # set on the typed result; its data travels on (the session reporter)
                result.known = self.update or entry is not None
                result.known_reason = self.reason(entry)
                found[index] = result.to_dict()

    @property
    def file(self) -> str:
        """The baseline file's path, as the run was given it."""
        return str(self.baseline.path)

    def reason(self, entry: Key | None) -> str:
        """The reason the file gives for the entry ``entry`` ("" for none)."""
        found = self.baseline.entries.get(entry) if entry is not None else None
        return found.reason if found is not None else ""

    def checked(self, key: Key) -> bool:
        """Whether this run could have found the entry (the module docstring)."""
        if baseline_keys.is_fixture_check(key.check):
            node = "" if key.test == baseline_keys.SESSION else key.test
            return (
                (key.test, key.check) in self.fixtures
                and not self.stopped_early
                and runs_whole(self.config, node)
            )
        if key.test not in self.ran:
            return False
        if key.check == "outlive":
            return key.test in self.audited
        return self.checking or key.check != "marker"

    def fixed(self) -> list[Key]:
        """Entries checked and not found, sorted; none in an update (it removes them)."""
        if self.update:
            return []
        return sorted(key for key in self._not_found() if self.checked(key))

    def unchecked_entries(self) -> list[Key]:
        """Entries this run could not have found and did not (one found is known)."""
        return [key for key in self._not_found() if not self.checked(key)]

    def _not_found(self) -> list[Key]:
        """Entries no finding of this run matched (``Baseline.match``)."""
        return [
            key
            for key in self.baseline.entries
            if key not in self.found and key not in self.matched_before
        ]

    def unchecked(self) -> int:
        return len(self.unchecked_entries())

    def stale_entries(self) -> list[Key]:
        """Unchecked entries whose test this run of the whole suite did not collect (see
        the module docstring); none where the run cannot tell."""
        if self.collected is None or self.deselected or self.collection_failed:
            return []
        return [key for key in self.unchecked_entries() if self.gone(key)]

    def gone(self, key: Key) -> bool:
        """Does the entry's test (a fixture's entry: every test of its scope) no longer
        exist? Only where the run covered its node whole (``runs_whole``)."""
        collected = self.collected
        if collected is None or self.deselected or self.collection_failed:
            return False
        node = "" if key.test == baseline_keys.SESSION else key.test
        if not runs_whole(self.config, node):
            return False
        if baseline_keys.is_fixture_check(key.check):
            return not any(baseline_keys.inside(test, key.test) for test in collected)
        return key.test not in collected

    def section(self) -> dict[str, Any]:
        """The JSON report's ``baseline`` object."""
        written = self.written
        return {
            "file": str(self.baseline.path),
            "entries": len(self.baseline.entries),
            "fixed": [entry_dict(self.baseline, key) for key in self.fixed()],
            "unchecked": self.unchecked(),
            "stale": [entry_dict(self.baseline, key) for key in self.stale_entries()],
            "update_command": self.update_command(),
            "updated": None
            if written is None
            else {
                "findings": len(written.entries),
                "added": len(written.added),
                "removed": len(written.removed),
                "pruned": len(written.pruned),
            },
        }

    def update_command(self) -> str:
        """This run's command with the update flag: what refreshes the file."""
        args = [a for a in self.config.invocation_params.args if a != UPDATE_FLAG]
        return shlex.join(["pytest", *args, UPDATE_FLAG])

    def write(self, *, stopped_early: bool = False) -> None:
        """The run ended (``stopped_early``: before its last test, ``-x``); with the update,
        the file rewritten atomically from this run's findings."""
        from pytest_graphleak.report.json_doc import write_text_atomic

        self.stopped_early = stopped_early
        if not self.update:
            return
        update = baseline.updated(self.baseline, self.found, self.checked, stale=self.gone)
        path = self.baseline.path
        if path.exists() and not baseline.is_baseline(path):  # replaced meanwhile
            self.error = f"did not write the baseline: {str(path)!r} is not a baseline file"
            return
        try:
            write_text_atomic(path, baseline.render(update.entries))
        except OSError as exc:
            self.error = (
                f"could not write the baseline file {str(path)!r} "
                f"({type(exc).__name__}: {exc.strerror or exc})"
            )
            return
        self.written = update

    def lines(self, columns: int = 0) -> list[tuple[str, dict[str, bool]]]:
        """The terminal's lines after the session's sentence, in ``columns`` (broken at
        spaces), but the update command: whole on a line of its own, to be copied."""
        path = str(self.baseline.path)
        if self.error:
            return [(f"ERROR: {self.error}", {"red": True, "bold": True})]
        out: list[tuple[str, dict[str, bool]]] = []
        loaded, written = self.baseline, self.written is not None
        if self.written is not None:
            out.append((said.wrote(self.written, path), {}))
        if loaded.respelled:
            out.append((said.respelled(loaded.respelled, loaded.merged, path, written), {}))
        if loaded.renamed:
            out.append((said.renamed(loaded.renamed, path, written), {}))
        fixed = self.fixed()
        if fixed:
            out.append((baseline.fixed_heading(len(fixed), path), {"green": True}))
            out.extend((f"  {key.text()}", {"green": True}) for key in fixed)
            out.append((baseline.UPDATE_INTRO, {}))
        gone = self.stale_entries()
        stale = gone if self.written is None else []  # an update dropped them (its line says)
        if stale:
            heading = baseline.stale_heading(len(stale), len(self.baseline.entries))
            out.append((heading, {"yellow": True}))
            out.extend((f"  {key.text()}", {"yellow": True}) for key in stale)
            out.append((baseline.PRUNE_INTRO, {}))
        unchecked = [key for key in self.unchecked_entries() if key not in gone]
        if unchecked:
            scoped = any(baseline_keys.is_fixture_check(key.check) for key in unchecked)
            entries = len(self.baseline.entries)
            out.append((said.not_checked(len(unchecked), entries, scoped=scoped), {}))
        wrapped = [(part, markup) for line, markup in out for part in wrap_line(line, columns)]
        for intro in (baseline.UPDATE_INTRO, baseline.PRUNE_INTRO):  # the command, to copy
            at = next((i for i, (line, _) in enumerate(wrapped) if line == intro), None)
            if at is not None:
                command = command_lines(self.update_command(), columns)
                wrapped[at + 1 : at + 1] = [(line, {}) for line in command]
        return wrapped


def entry_dict(loaded: Baseline, key: Key) -> dict[str, str]:
    entry = loaded.entries.get(key) or baseline.Entry(key)
    return entry.to_dict()

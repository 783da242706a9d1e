"""One more run of a test that left graphs alive, under the diagnosis's own recorders, to
say where they were made and stored (``--graphleak-outlive-sites=rerun``); the run itself
is the front end's (the plugin's ``plugin/outlive_rerun``), this is what it records.

While its call phase runs, ``LoopRecorder`` (the bundles' site recording: torch's
``TorchSiteRecorder`` mode, minigrad's own) notes where each tensor and node is made
(``created at:``) and ``LiveWatch`` traces the user's lines and charges a change of the
first holder (a container's length, a rebound global, a new ``grad_fn``) to the line that
made it (``stored at:``). A fresh census after its teardown finds what the re-run kept;
the holders found again get its sites (``amend``). A holder the re-run kept nothing in
is said so, with no sites, and with the exception when the re-run's call raised. The
recorders run inside the test and never raise into it: what they could not do is a note
(``trouble``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from pytest_graphleak.diagnose.fix_verify import not_verified
from pytest_graphleak.diagnose.loop_recorder import LoopRecorder
from pytest_graphleak.diagnose.search import Path
from pytest_graphleak.diagnose.sites import per_step, recorder_trouble
from pytest_graphleak.diagnose.stored import LiveWatch, watch_failed
from pytest_graphleak.outlive.census import Census
from pytest_graphleak.probes.autograd.bundle import Site
from pytest_graphleak.result import CheckResult
from pytest_graphleak.words import outlive as said
from pytest_graphleak.words.fix import choose_fix


class SiteRun:
    """One re-run's recorders: ``call_begins()`` / ``call_ends()`` around its call phase
    (the audit's call hook), ``finish()`` after its teardown, ``close()`` always.
    ``record=False``: the census alone, no site recorder (a re-run that tries a fix:
    only what it leaves alive is looked at)."""

    def __init__(
        self,
        watched: Path | None,
        walker: Any,
        root: Callable[[], object] | None,
        *,
        record: bool = True,
    ) -> None:
        self.census = Census()
        self.record = record
        self.recorder: LoopRecorder | None = None
        self._watch = LiveWatch(watched, walker, root) if watched is not None else None
        self.stored: Counter[Site] = Counter()
        self.via: dict[Site, str] = {}
        self.called = False
        self.counted = False
        #: The re-run's call raised: "ValueError: boom" ("" when it did not).
        self.call_error = ""
        #: What the recorders could not do, as notes (they never raise into the test).
        self.trouble: list[str] = []

    def call_begins(self) -> None:
        self.called = True
        self.counted = self.census.begin()
        if not self.counted or not self.record:
            return
        self.recorder = LoopRecorder()
        self.recorder.start_step()
        if self._watch is not None:
            self._watch.start()

    def call_ends(self, error: str = "") -> None:
        """``error``: the call's exception, in its own words ("" when it did not raise)."""
        self.call_error = self.call_error or error
        if self._watch is not None:
            self.stored, self.via = self._watch.stop()
            if self._watch.failure:
                self.trouble.append(watch_failed(self._watch.failure))
            self._watch = None
        if self.recorder is not None:
            self.recorder.leave_modes()
            found = [*self.recorder.trouble, recorder_trouble(self.recorder.mode)]
            self.trouble.extend(note for note in found if note and note not in self.trouble)
        self.census.stop_recording()

    def site_of(self, obj: Any) -> Site | None:
        return self.recorder.site_of(obj) if self.recorder is not None else None

    def close(self) -> None:
        if self._watch is not None:  # the call phase never ended (it was not run)
            self._watch.stop()
            self._watch = None
        if self.recorder is not None:
            self.recorder.close()
            self.recorder = None
        if self.counted:
            self.census.abandon()
            self.counted = False


def amend(
    results: list[CheckResult],
    again: list[CheckResult],
    *,
    watched: str,
    stored: Counter[Site],
    via: dict[Site, str],
    call_error: str = "",
    trouble: list[str] | None = None,
) -> None:
    """Give each first-run result the re-run's sites for the same holder, and ``watched``
    (the holder the live watch followed) its ``stored at:`` lines. ``call_error``: the
    re-run's call raised (said where it left nothing); ``trouble``: what its recorders
    could not do (said on every result)."""
    by_root = {_root(result): result for result in again}
    for result in results:
        diagnosis = result.diagnosis
        if diagnosis is None:
            continue
        root = _root(result)
        found = by_root.get(root)
        diagnosis.notes.extend(trouble or ())
        if found is None or found.diagnosis is None:
            diagnosis.notes.append(said.rerun_left_none(call_error))
            continue
        if not diagnosis.sites:
            diagnosis.sites = list(found.diagnosis.sites)
        if root == watched:
            diagnosis.stored_at = per_step(stored, 1, via)
            if not stored and not any(note.startswith("stored at:") for note in trouble or ()):
                diagnosis.notes.append(said.NO_STORING_LINE)
            diagnosis.fix = choose_fix(diagnosis)  # worded for the storing line, as a step's is
        if diagnosis.fix_tried is not None:  # the advice, worded again; tried next
            diagnosis.fix_tried = not_verified(diagnosis.fix, diagnosis.fix_tried.why_not or "")
        diagnosis.notes.append(said.FOUND_BY)


def _root(result: CheckResult) -> str:
    chain = result.diagnosis.chain if result.diagnosis is not None else []
    return chain[0] if chain else ""

"""The outlive audit's re-run mode tries its fixes (``--graphleak-outlive-sites=rerun``):
once the re-run has found a finding's ``stored at:`` / ``created at:`` lines, each
candidate change (``diagnose.fix_verify``, the marker checks' own) is swapped into the
user's function in memory and the whole test runs once more with its fixtures; it is
judged as the audit judges a test: after its teardown, does a graph it made still
outlive it in that holder (or in a holder the first run did not name)? The first change
under which none does prints as ``fix (verified: one more run of the test ...)``; a
change whose run raised or failed in setup or teardown, or left the graph alive, is
dropped and never printed.

The runs themselves are the audit's (``Audit._run_with_change``, handed in as
``run_once``): this module only turns their outcome into a ``Trial`` per finding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pytest_graphleak.diagnose.fix_verify import Trial, not_verified, verify_fix
from pytest_graphleak.exceptions import Unjudged
from pytest_graphleak.outlive.fixture_scopes import root_of
from pytest_graphleak.patterns import FIXES
from pytest_graphleak.result import CheckResult
from pytest_graphleak.words import verify as why

#: One more run of the test with a change in place: why it cannot be judged ("" when it
#: can: its setup, call and teardown passed) and the labels of the holders that still
#: keep graphs it made after its teardown.
RunOnce = Callable[[], tuple[str, list[str]]]


def try_fixes(
    results: Sequence[CheckResult], *, starts: dict[str, object], run_once: RunOnce
) -> None:
    """Set each finding's ``fix_tried`` (and its advice, where no change held) from the
    changes tried by ``run_once``. ``starts``: where the user's function to change is
    looked for (the test's function first, then its fixtures' and the audit's roots)."""
    named = {root_of(result, raw=True) for result in results}
    functions = list(starts.values())
    step = functions[0] if functions else None
    for result in results:
        diagnosis = result.diagnosis
        if diagnosis is None:
            continue
        advice = diagnosis.fix or FIXES.get(diagnosis.pattern, "")
        if not callable(step):
            diagnosis.fix_tried = not_verified(advice, why.NOT_RUN)
            continue
        trial = _trial(root_of(result, raw=True), named, run_once)
        try:
            tried = verify_fix(diagnosis, step=step, roots=starts, trial=trial)
        except Exception as exc:  # a failing verification never hides the finding
            tried = not_verified(advice, why.failed(exc))
        diagnosis.fix_tried = tried
        if not tried.verified and tried.text:  # never a change tried that failed
            diagnosis.fix = tried.text
    functions.clear()


def _trial(root: str, named: set[str], run_once: RunOnce) -> Callable[[], Trial]:
    def trial() -> Trial:
        failed, kept = run_once()
        if failed:
            raise Unjudged(failed)
        # A change that moves the graph to a holder the first run did not name is no fix.
        grew = tuple(dict.fromkeys(label for label in kept if label == root or label not in named))
        return Trial(grew, 0, runs=1)

    return trial

"""Exit codes of the ``graphleak`` command and the errors that map onto them."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_graphleak.result import CheckResult

#: The step ran ``warmup + steps`` times and nothing grew.
EXIT_CLEAN = 0
#: A leak verdict (also: a saved report that contains a leak).
EXIT_LEAK = 1
#: The command line is wrong: missing file, no such function, bad number, unreadable report.
EXIT_USAGE = 2
#: The user's code raised: importing the target module, or the step at some call.
EXIT_USER_CODE = 3
#: No verdict: the check's probes measured nothing the step uses (torch imported inside
#: the step after its first call, ``--probes`` leaving out the library the step uses).
EXIT_UNMEASURED = 4
#: Ctrl-C, as shells report a SIGINT.
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A mistake on the command line; the message says what was wrong and where."""


class UserCodeError(Exception):
    """The user's code raised; ``__cause__`` carries the original exception."""


def exit_code(results: Sequence[CheckResult], *, errors: bool) -> int:
    """The worst of several results: 3 when a step raised (if ``errors`` counts), then 1
    for a leak, then 4 for a check without a verdict, else 0."""
    if errors and any(result.error for result in results):
        return EXIT_USER_CODE
    if any(result.leaked for result in results):
        return EXIT_LEAK
    return EXIT_UNMEASURED if any(result.unmeasured for result in results) else EXIT_CLEAN

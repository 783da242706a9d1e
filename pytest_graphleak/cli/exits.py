"""Exit codes of the ``graphleak`` command and the errors that map onto them."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_graphleak import status
from pytest_graphleak.exceptions import UsageError as UsageError  # where they were
from pytest_graphleak.exceptions import UserCodeError as UserCodeError
from pytest_graphleak.result import CheckResult

#: The step ran ``warmup + steps`` times and nothing grew.
EXIT_CLEAN = status.BY_WORD["clean"].exit_code
#: A leak verdict (also: a saved report that contains a leak).
EXIT_LEAK = status.BY_WORD["leaked"].exit_code
#: The command line is wrong: missing file, no such function, bad number, unreadable report.
EXIT_USAGE = 2
#: The user's code raised: importing the target module, or the step at some call.
EXIT_USER_CODE = status.BY_WORD["error"].exit_code
#: No verdict: the check's probes measured nothing the step uses (torch imported inside
#: the step after its first call, ``--probes`` leaving out the library the step uses).
EXIT_UNMEASURED = status.BY_WORD["unmeasured"].exit_code
#: Ctrl-C, as shells report a SIGINT.
EXIT_INTERRUPTED = 130


def exit_code(results: Sequence[CheckResult]) -> int:
    """The exit code of the worst result, by the one status rule (``status.py``): 1 for a
    leak, then 3 when a step raised, then 4 for a check without a verdict, else 0 (a leak
    listed in the baseline file, ``known``, too)."""
    return status.exit_code(
        status.read_in_test(r.status, warned=r.warned, known=r.known, outcome="failed")
        for r in results
    )

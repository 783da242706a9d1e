"""Every error and warning graphleak raises, under one base (as coverage.py's
``coverage/exceptions.py``): ``except GraphleakError`` catches any of them.

Each error carries the result it is about (``.result``: a ``CheckResult``, plain data that
keeps nothing measured alive), or None where there is none (a bad option, a bad path).
Each also keeps the built-in base it always had (``AssertionError`` for a failed check,
so that pytest shows a failure; ``ValueError`` for a bad value), so existing ``except``
clauses keep working. The modules that used to define them re-export them under the
same names (``pytest_graphleak.GraphLeakError``, ``options.OptionError``,
``distributed.RankError``, ``baseline.BaselineError``, ...).

Plain classes: this module is the bottom layer (0) and imports nothing of the package at
run time; the result an error carries is typed under ``TYPE_CHECKING`` only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_graphleak.result import CheckResult


class GraphleakError(Exception):
    """Base of every error graphleak raises."""

    def __init__(self, message: str = "", result: CheckResult | None = None) -> None:
        super().__init__(message)
        #: The check this error is about, when there is one (plain data only).
        self.result = result


class GraphleakWarning(UserWarning):
    """Base of every warning graphleak issues."""


# -- a check's verdict ----------------------------------------------------------------
class GraphLeakError(GraphleakError, AssertionError):
    """A checked step leaked; the message is the full report (``render_text``)."""


class UnmeasuredError(GraphleakError, AssertionError):
    """A check measured nothing its step uses (``result.unmeasured`` says why), so it
    has no verdict to give: "clean" would be a silent pass."""


class GraphLeakWarning(GraphleakWarning):
    """A leak reported without failing: warn-only mode, ``on_leak="warn"``."""


# -- the outlive audit ----------------------------------------------------------------
class GraphOutliveError(GraphleakError, AssertionError):
    """``--graphleak-outlive=fail``: a test left autograd graphs alive after its teardown
    (raised at teardown, so pytest reports an error at the teardown of that test).
    ``results``: one finding per holder; ``result`` is the first."""

    def __init__(self, message: str = "", results: Sequence[CheckResult] = ()) -> None:
        super().__init__(message, results[0] if results else None)
        self.results = list(results)


class GraphOutliveWarning(GraphleakWarning):
    """``--graphleak-outlive=warn``: a test left autograd graphs alive after its teardown.
    A category of its own, so ``filterwarnings`` can select it (``error::...`` fails the
    test at teardown, ``ignore::...`` silences it)."""


# -- distributed checks ---------------------------------------------------------------
class RankError(GraphleakError, AssertionError):
    """A rank raised, crashed or hung; the message holds each failed rank's traceback.

    An AssertionError so that pytest shows it as a test failure (not an internal error).
    ``result``: the first failed rank's result, when it reported one.
    """


# -- bad input --------------------------------------------------------------------------
class OptionError(GraphleakError, ValueError):
    """A setting with a bad value; the message says which, what and where from."""


class OutputPathError(GraphleakError, ValueError):
    """An output path that would destroy a file or collide; the message says which."""


class BaselineError(GraphleakError, ValueError):
    """A baseline file that cannot be used; the message names the file and the entry."""


class SchemaError(GraphleakError, ValueError):
    """A report document that breaks ``schema.json``; ``field`` says where
    (``tests[0].name``)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field or 'the document'}: {problem}")
        self.field = field


# -- the graphleak command ------------------------------------------------------------
class UsageError(GraphleakError):
    """A mistake on the command line; the message says what was wrong and where."""


class UserCodeError(GraphleakError):
    """The user's code raised; ``__cause__`` carries the original exception."""


# -- fixes ----------------------------------------------------------------------------
class NotSwappable(GraphleakError):
    """A candidate fix's changed function cannot be compiled or put in place: why, in
    words (the candidate is then counted as one that could not run)."""


class Unjudged(GraphleakError):
    """The audit's run of a test with a change in place did not pass (its call raised,
    its setup or teardown failed): the change is no fix (``fix_verify`` drops it)."""


class Refused(GraphleakError):
    """``graphleak fix --apply`` will not write a fix into a file: why, naming the file."""

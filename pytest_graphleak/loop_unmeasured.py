"""A loop check that ends without a verdict: its unmeasured result, and who hears of it.

A loop that ends with fewer measured steps than a loop is judged from
(``verdict.loop_fewest_steps``: 3, or fewer when ``window=`` asks for fewer), or a check
of ``steps=1`` or 2, gets no leak verdict but an unmeasured result (``LoopCheck`` decides
when): it fails a pytest test as an unmeasured check does, and warns in a real run, where
a callback never stops training for it.
"""

from __future__ import annotations

import os
import sys
import warnings

from pytest_graphleak import exceptions, pipeline, session
from pytest_graphleak.report.text import render_text
from pytest_graphleak.result import CheckResult, Verdict


def unmeasured_result(name: str, calls: int, warmup: int, why: str, fix: str) -> CheckResult:
    """The result of a loop check that saw ``calls`` steps and no verdict (``why``)."""
    return CheckResult(
        name=name,
        steps=max(0, calls - warmup),
        warmup=warmup,
        series={},
        units={},
        verdict=Verdict(leaked=False, reason=f"no verdict: {why}"),
        unmeasured=why,
        unmeasured_fix=fix,
    )


def fail_or_warn(result: CheckResult, *, on_leak: str) -> None:
    """Under pytest with ``on_leak="raise"``, fail the test as any unmeasured check does;
    in a real run, or with "warn" / "return", warn at the user's line and let the loop's
    caller go on (a callback never stops training for it)."""
    __tracebackhide__ = True
    text = render_text(result)
    if on_leak == "raise" and under_pytest():
        raise pipeline.failure(text, leaked=False, result=result)
    warnings.warn(exceptions.GraphLeakWarning(text), stacklevel=user_stacklevel())


def under_pytest() -> bool:
    """A pytest test is running in this process: its session's (the plugin's), or any
    test phase (pytest sets PYTEST_CURRENT_TEST; a script that a test starts inherits the
    variable but has not imported pytest's runner)."""
    if session.current().test is not None:
        return True
    return bool(os.environ.get("PYTEST_CURRENT_TEST")) and "_pytest.runner" in sys.modules


#: Packages whose frames a loop's warning skips: this one, and the frameworks that call
#: a callback, so that the warning points at the user's ``fit()`` / ``run()`` line.
_NOT_USER = frozenset(
    {
        "pytest_graphleak",
        "ignite",
        "lightning",
        "pytorch_lightning",
        "lightning_fabric",
        "transformers",
        "accelerate",
        "torch",
    }
)


def user_stacklevel() -> int:
    """``warnings.warn``'s stacklevel, for the function that calls this one, that points
    at the first frame of user code (else the outermost frame)."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if module.partition(".")[0] not in _NOT_USER:
            break
        frame = frame.f_back
        level += 1
    return level

"""What the framework callbacks share: their keywords, the LoopCheck, the pytest report.

A callback is built once with the user's keywords (validated right away, so a bad value
fails where the callback is made) and runs one ``LoopCheck`` per training run. Inside a
pytest test its results join the test's graphleak results (report, JSON, exit code),
with the session's settings (ini, command line) as defaults under the callback's own
keywords; ``--graphleak-warn-only`` turns ``on_leak="raise"`` into a warning there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pytest_graphleak import session
from pytest_graphleak.exceptions import OptionError
from pytest_graphleak.loop import LoopCheck
from pytest_graphleak.loop_windows import check_count, check_sample_every
from pytest_graphleak.options import CallbackOptions
from pytest_graphleak.result import CheckResult
from pytest_graphleak.settings import Settings

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: What a callback may do on a leak.
ON_LEAK = ("raise", "warn")


class FrameworkCheck:
    """Base of the three callbacks, made with the ``CallbackOptions`` keywords; framework
    hooks call ``_run_started``, ``_step_ended``, ``_run_ended`` and ``close``."""

    #: "lightning", "transformers" or "ignite": names results and error messages.
    framework = ""

    def __init__(self, **options: Unpack[CallbackOptions]) -> None:
        where = f"{type(self).__name__}() ({self.framework})"
        accepted = tuple(CallbackOptions.__annotations__)
        for key in options:
            if key not in accepted:
                raise TypeError(
                    f"{where}: unknown keyword argument {key!r}; expected one of "
                    f"{', '.join(accepted)}"
                )
        values: dict[str, Any] = dict(options)
        self.window: int | None = values.pop("window", None)
        self.sample_every: int | None = values.pop("sample_every", None)
        self.on_leak: str = values.pop("on_leak", "raise")
        self.steps: int | None = values.get("steps")
        try:
            Settings().override(values, where=where)  # fail here, not mid-run
            check_count("window", self.window, minimum=2)
            if self.steps is None or self.window is None:  # "not both" is said below
                check_sample_every(self.sample_every, self.window, where=where)
        except OptionError as exc:
            raise OptionError(str(exc) if where in str(exc) else f"{where}: {exc}") from None
        if self.on_leak not in ON_LEAK:
            raise OptionError(f"{where}: on_leak must be 'raise' or 'warn', got {self.on_leak!r}")
        if self.steps is not None and self.window is not None:
            raise OptionError(f"{where}: give steps= or window=, not both")
        self._values = values
        self._where = where
        self._check: LoopCheck | None = None

    # -- what users read ----------------------------------------------------------------
    @property
    def result(self) -> CheckResult | None:
        """The CheckResult of the last run (in window mode: of its latest window);
        None before a run has been judged."""
        return self._check.result if self._check is not None else None

    @property
    def results(self) -> list[CheckResult]:
        """Every result of the last run: one, or one per window in window mode."""
        return list(self._check.results) if self._check is not None else []

    def close(self) -> None:
        """End an unfinished check and restore the gc state (a run that raised where the
        framework has no exception hook; pytest does this after every test)."""
        if self._check is not None:
            self._check.close()

    # -- called by the framework hooks ----------------------------------------------------
    def _run_started(
        self,
        *,
        length: float | None,
        roots: Callable[[], Mapping[str, object]],
        label: str,
    ) -> None:
        test = session.current().test  # the pytest test running now (None: no test)
        base = test.settings if test is not None else Settings()
        settings = base.override(self._values, where=self._where)
        on_leak = self.on_leak
        if test is not None and test.settings.warn_only and on_leak == "raise":
            on_leak = "warn"
        node = test.nodeid if test is not None else None
        name = f"{node}::{self.framework}({label})" if node else f"{self.framework}({label})"
        self.close()
        record = test.record if test is not None else None  # the result joins the test's
        self._check = LoopCheck(
            settings,
            name=name,
            steps=self.steps,
            window=self.window,
            sample_every=self.sample_every,
            on_leak=on_leak,
            on_result=record,
        )
        self._check.start(length=length, roots=roots)

    def _step_ended(self) -> None:
        __tracebackhide__ = True
        if self._check is not None:
            self._check.after_step()

    def _epoch_ended(self) -> None:
        """An epoch of training ended: a point where the loop may reset what it holds (a
        list of the epoch's losses), which a check without steps= judges growth across."""
        if self._check is not None:
            self._check.epoch_ended()

    def _run_ended(self) -> None:
        __tracebackhide__ = True
        if self._check is not None:
            self._check.finish()  # nothing to do once judged


def remaining(total: Any, done: Any) -> float | None:
    """Steps left in a run of ``total`` steps of which ``done`` ran (None: unknown)."""
    try:
        left = float(total) - float(done or 0)
    except (TypeError, ValueError):
        return None
    return left if 0 < left < float("inf") else None

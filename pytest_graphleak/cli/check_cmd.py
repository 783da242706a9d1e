"""``graphleak check TARGET``: one step function, checked as the plugin checks a test."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from pytest_graphleak.api import check
from pytest_graphleak.cli.colour import terminal_text, wants_colour
from pytest_graphleak.cli.exits import EXIT_USER_CODE, exit_code
from pytest_graphleak.cli.outputs import checked_outputs, output_flags, write_output
from pytest_graphleak.cli.target import Target, resolve, running_as
from pytest_graphleak.cli.user_traceback import print_user_traceback
from pytest_graphleak.exceptions import GraphLeakError, UnmeasuredError, UsageError, UserCodeError
from pytest_graphleak.pipeline import error_result
from pytest_graphleak.report.environment import describe_run
from pytest_graphleak.report.json_doc import CheckedTest, build_report
from pytest_graphleak.report.text import render_result, verdict_line
from pytest_graphleak.report.writers import WRITERS, Run, Writer
from pytest_graphleak.result import CheckResult
from pytest_graphleak.settings import Settings, settings_from_command
from pytest_graphleak.status import outcome_of


def run_check(args: argparse.Namespace) -> int:
    # Everything the command line can get wrong fails before the first step runs.
    settings = settings_from_command(args)  # (an OptionError is a usage error)
    outputs = _file_outputs(settings)
    started = time.time()  # for the HTML page's environment block
    pending = [_load(spec, settings) for spec in args.targets][::-1]  # popped in order
    #: check name -> (file, line) of its step function: where a GitHub annotation goes
    locations = {t.name: _where(t.func) for t in pending if isinstance(t, Target)}

    results: list[CheckResult] = []
    colour = wants_colour(args.color, sys.stdout)
    try:
        while pending:
            target = pending.pop()  # hold no step once checked
            if isinstance(target, Target):
                progress = StepProgress(
                    target.name,
                    settings.warmup + settings.steps,
                    live=not args.quiet and _is_terminal(sys.stderr),
                )
                with running_as(target.script), progress:
                    result = _measure(
                        progress.counted(target.func),
                        target.name,
                        settings,
                        alone=len(args.targets) == 1,
                    )
                del progress
            else:
                result = target  # its module could not be imported
            del target
            if results and not args.quiet:
                print()
            told = verdict_line(result) if args.quiet else render_result(result)
            print(terminal_text(told, colour=colour, wrap=not args.quiet), flush=True)
            results.append(result)
    except KeyboardInterrupt:
        # Ctrl-C: what finished is kept (as pytest --graphleak-report keeps finished tests).
        missing = args.targets[len(results) :]
        note = (
            f"interrupted (Ctrl-C) while checking {missing[0]}: no result for {', '.join(missing)}"
        )
        _write_reports(args, settings, outputs, results, [note], started, locations)
        raise
    _write_reports(args, settings, outputs, results, [], started, locations)
    return exit_code(results)


class StepProgress:
    """``graphleak check: NAME: step 7/19`` on stderr, redrawn in place while a check runs
    (then ``diagnosing`` for the diagnosis' own steps) and erased when it ends. Only on a
    terminal and without ``-q``: in a pipe or a log nothing is written. Shown from
    ``after_s`` on, at most every ``every_s``, so a fast check prints nothing."""

    def __init__(
        self,
        name: str,
        total: int,
        *,
        live: bool,
        stream: TextIO | None = None,
        after_s: float = 0.5,
        every_s: float = 0.1,
    ) -> None:
        self.name, self.total, self.live = name, total, live
        self.stream = stream if stream is not None else sys.stderr
        self.after_s, self.every_s = after_s, every_s
        self.calls = 0
        self._start = self._last = 0.0
        self._shown = False

    def counted(self, step: Callable[[], object]) -> Callable[[], object]:
        """``step``, counting its calls; the step itself when not live."""
        if not self.live:
            return step

        def counted_step() -> object:
            self.tick()
            return step()

        return counted_step

    def tick(self) -> None:
        self.calls += 1
        now = time.perf_counter()
        if now - self._start < self.after_s or now - self._last < self.every_s:
            return
        self._last = now
        what = f"step {self.calls}/{self.total}" if self.calls <= self.total else "diagnosing"
        self.stream.write(f"\r\x1b[Kgraphleak check: {self.name}: {what}")
        self.stream.flush()
        self._shown = True

    def __enter__(self) -> StepProgress:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def _is_terminal(stream: TextIO) -> bool:
    """A terminal that redraws a line (``\r``, erase-line): not a pipe, not TERM=dumb (an
    editor's shell, a CI log viewer), as the demo decides."""
    if os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def _load(spec: str, settings: Settings) -> Target | CheckResult:
    """The target, or an error result when importing its module failed (the user's code:
    exit code 3, with a row in the reports); a bad spec is a UsageError."""
    try:
        return resolve(spec)
    except UserCodeError as exc:
        cause = exc.__cause__
        if cause is not None and not isinstance(cause, SystemExit):
            print_user_traceback(cause)
        print(f"graphleak check: {exc}", file=sys.stderr)
        result = error_result(spec, steps=settings.steps, warmup=settings.warmup, exc=exc)
        result.error = str(exc)
        return result


def _file_outputs(settings: Settings) -> list[tuple[Writer, str, Path | None]]:
    """Each file writer (``writers.WRITERS``) with its flag and checked path (None: off)."""
    files = output_flags()
    paths = checked_outputs(*((flag, getattr(settings, w.option), w.kind) for w, flag in files))
    return [(writer, flag, path) for (writer, flag), path in zip(files, paths, strict=True)]


def _where(func: Callable[[], object]) -> tuple[str, int]:
    code = getattr(func, "__code__", None)
    return (os.path.abspath(code.co_filename), code.co_firstlineno) if code else ("", 0)


def _write_reports(
    args: argparse.Namespace,
    settings: Settings,
    outputs: list[tuple[Writer, str, Path | None]],
    results: list[CheckResult],
    notes: list[str],
    started: float,
    locations: dict[str, tuple[str, int]],
) -> None:
    publishers = [
        w
        for w in WRITERS
        if w.wanted is not None and w.wanted(getattr(settings, w.option), os.environ)
    ]
    if not publishers and all(path is None for _, _, path in outputs):
        return
    # One test per checked step, as the session report writes them: failed or passed as
    # pytest would end it (a leak, a raising step and an unmeasured check fail).
    tests = [CheckedTest(r.name, outcome_of(r.status), [r.to_dict()]) for r in results]
    report = build_report(tests, generated_by="graphleak check", notes=notes, rootdir=os.getcwd())
    environment = describe_run(args.command_line, os.getcwd(), started, time.time())
    run = Run(environment=environment, locations=locations)
    for writer, flag, path in outputs:
        if path is not None and writer.render is not None:
            write_output(path, writer.render(report, run), flag)
            print(f"graphleak: {writer.label} report written to {path}", file=sys.stderr)
    for writer in publishers:
        assert writer.publish is not None
        for problem in writer.publish(report, run):
            print(f"graphleak check: {problem}", file=sys.stderr)


def _measure(
    step: Callable[[], object], name: str, settings: Settings, *, alone: bool
) -> CheckResult:
    """Run the check; a raising step gives an error result (its traceback on stderr).
    ``alone``: the only target, whose raising step makes the exit code 3 (with several,
    the worst status decides it: a leak elsewhere makes it 1).

    This frame's locals are what the diagnosis sees as "local" roots, so it holds
    nothing but the step.
    """
    try:
        return check(step, name=name, raise_on_leak=True, settings=settings)
    except (GraphLeakError, UnmeasuredError) as leak:
        assert leak.result is not None  # check() always attaches it
        return leak.result
    except (Exception, SystemExit) as exc:  # sys.exit() in a step is no clean exit
        at_step = getattr(exc, "graphleak_step", None)  # set by check() on the step's errors
        if at_step is None:
            # Not raised by the step: check() rejected an option before running it.
            if isinstance(exc, ValueError):
                raise UsageError(str(exc)) from None
            raise
        print_user_traceback(exc)
        what = "the step raised"
        if isinstance(exc, SystemExit):
            what = f"the step called sys.exit({exc.code!r}) at step {at_step}"
        code = f" (exit code {EXIT_USER_CODE})" if alone else ""
        print(f"graphleak check: {what}, so there is no leak verdict{code}", file=sys.stderr)
        return error_result(name, steps=settings.steps, warmup=settings.warmup, exc=exc)

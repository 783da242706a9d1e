"""``graphleak check TARGET``: one step function, checked as the plugin checks a test."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

from pytest_graphleak.cli.exits import (
    EXIT_CLEAN,
    EXIT_LEAK,
    EXIT_UNMEASURED,
    EXIT_USER_CODE,
    UsageError,
)
from pytest_graphleak.cli.outputs import (
    checked_outputs,
    document_for,
    write_html,
    write_json,
)
from pytest_graphleak.cli.summary import render_result, verdict_line
from pytest_graphleak.cli.target import resolve
from pytest_graphleak.options import OptionError, Settings, settings_from_command
from pytest_graphleak.report.environment import describe_run
from pytest_graphleak.result import CheckResult


def run_check(args: argparse.Namespace) -> int:
    # Everything the command line can get wrong fails before the first step runs.
    try:
        settings = settings_from_command(args)
    except OptionError as exc:
        raise UsageError(str(exc)) from None
    json_path, html_path = checked_outputs(
        ("--json", settings.report, "json"), ("--html", settings.html, "html")
    )
    started = time.time()  # for the HTML page's environment block
    targets = [resolve(spec) for spec in args.targets]

    results = []
    for number, target in enumerate(targets):
        result, raised = _measure(target.func, target.name, settings)
        del target
        if raised is not None:
            _print_step_error(raised)
            del raised
        if number and not args.quiet:
            print()
        print(verdict_line(result) if args.quiet else render_result(result), flush=True)
        results.append(result)
    del targets
    if json_path is not None or html_path is not None:
        document = document_for(results)
        if json_path is not None:
            write_json(document, json_path)
            print(f"graphleak: JSON report written to {json_path}", file=sys.stderr)
        if html_path is not None:
            command = getattr(args, "command_line", ["graphleak", "check", *args.targets])
            environment = describe_run(command, os.getcwd(), started, time.time())
            write_html(document, html_path, environment)
            print(f"graphleak: HTML report written to {html_path}", file=sys.stderr)
    if any(result.error for result in results):
        return EXIT_USER_CODE
    if any(result.leaked for result in results):
        return EXIT_LEAK
    return EXIT_UNMEASURED if any(result.unmeasured for result in results) else EXIT_CLEAN


def _measure(
    step: Callable[[], object], name: str, settings: Settings
) -> tuple[CheckResult, BaseException | None]:
    """Run the check; a raising step gives an error result and its exception.

    This frame's locals are what the diagnosis sees as "local" roots, so it holds
    nothing but the step.
    """
    from pytest_graphleak.api import GraphLeakError, UnmeasuredError, check, error_result
    try:
        return check(step, name=name, raise_on_leak=True, settings=settings), None
    except (GraphLeakError, UnmeasuredError) as leak:
        if leak.result is None:  # pragma: no cover - check() always attaches it
            raise
        return leak.result, None
    except Exception as exc:
        if getattr(exc, "graphleak_step", None) is None:
            # Not raised by the step: check() rejected an option before running it.
            if isinstance(exc, ValueError):
                raise UsageError(str(exc)) from None
            raise
        error = error_result(name, steps=settings.steps, warmup=settings.warmup, exc=exc)
        return error, exc


def _print_step_error(exc: BaseException) -> None:
    import traceback

    traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    print("graphleak check: the step raised, so there is no leak verdict (exit code 3)",
          file=sys.stderr)

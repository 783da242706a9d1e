"""``graphleak check TARGET``: one step function, checked as the plugin checks a test."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from pytest_graphleak.cli.exits import (
    EXIT_CLEAN,
    EXIT_LEAK,
    EXIT_USER_CODE,
    UsageError,
)
from pytest_graphleak.cli.outputs import (
    document_for,
    require_writable_parent,
    write_html,
    write_json,
)
from pytest_graphleak.cli.summary import render_result, verdict_line
from pytest_graphleak.cli.target import resolve
from pytest_graphleak.result import CheckResult


def run_check(args: argparse.Namespace) -> int:
    # Everything the command line can get wrong fails before the first step runs.
    json_path = require_writable_parent(args.json, "--json") if args.json else None
    html_path = require_writable_parent(args.html, "--html") if args.html else None
    targets = [resolve(spec) for spec in args.targets]
    options: dict[str, Any] = {
        key: value
        for key, value in (("steps", args.steps), ("warmup", args.warmup),
                           ("rss_tolerance", args.rss_tolerance),
                           ("start_scan", args.start_scan))
        if value is not None
    }  # fmt: skip

    results = []
    for number, target in enumerate(targets):
        result, raised = _measure(target.func, target.name, options)
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
            write_html(document, html_path)
            print(f"graphleak: HTML report written to {html_path}", file=sys.stderr)
    if any(result.error for result in results):
        return EXIT_USER_CODE
    return EXIT_LEAK if any(result.leaked for result in results) else EXIT_CLEAN


def _measure(
    step: Callable[[], object], name: str, options: dict[str, Any]
) -> tuple[CheckResult, BaseException | None]:
    """Run the check; a raising step gives an error result and its exception.

    This frame's locals are what the diagnosis sees as "local" roots, so it holds
    nothing but the step.
    """
    from pytest_graphleak.api import GraphLeakError, check, error_result
    from pytest_graphleak.options import DEFAULT_STEPS, DEFAULT_WARMUP

    try:
        return check(step, name=name, raise_on_leak=True, **options), None
    except GraphLeakError as leak:
        if leak.result is None:  # pragma: no cover - check() always attaches it
            raise
        return leak.result, None
    except Exception as exc:
        if getattr(exc, "graphleak_step", None) is None:
            # Not raised by the step: check() rejected an option before running it.
            if isinstance(exc, ValueError):
                raise UsageError(str(exc)) from None
            raise
        error = error_result(
            name,
            steps=int(options.get("steps", DEFAULT_STEPS)),
            warmup=int(options.get("warmup", DEFAULT_WARMUP)),
            exc=exc,
        )
        return error, exc


def _print_step_error(exc: BaseException) -> None:
    import traceback

    traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    print("graphleak check: the step raised, so there is no leak verdict (exit code 3)",
          file=sys.stderr)

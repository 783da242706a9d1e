"""``graphleak check TARGET``: one step function, checked as the plugin checks a test."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pytest_graphleak.cli.exits import EXIT_CLEAN, EXIT_LEAK, EXIT_USER_CODE
from pytest_graphleak.cli.outputs import (
    document_for,
    require_writable_parent,
    write_html,
    write_json,
)
from pytest_graphleak.cli.summary import render_result, verdict_line
from pytest_graphleak.cli.target import resolve


def run_check(args: argparse.Namespace) -> int:
    # Everything the command line can get wrong fails before the first step runs.
    json_path = require_writable_parent(args.json, "--json") if args.json else None
    html_path = require_writable_parent(args.html, "--html") if args.html else None
    target = resolve(args.target)

    from pytest_graphleak import check

    options: dict[str, Any] = {}
    if args.steps is not None:
        options["steps"] = args.steps
    if args.warmup is not None:
        options["warmup"] = args.warmup
    result = check(target.func, name=target.name, **options)

    print(verdict_line(result) if args.quiet else render_result(result))
    if json_path is not None or html_path is not None:
        document = document_for(result)
        if json_path is not None:
            write_json(document, json_path)
            print(f"graphleak: JSON report written to {json_path}", file=sys.stderr)
        if html_path is not None:
            write_html(document, html_path)
            print(f"graphleak: HTML report written to {html_path}", file=sys.stderr)
    if result.error:
        return EXIT_USER_CODE
    return EXIT_LEAK if result.leaked else EXIT_CLEAN

"""The ``graphleak`` command: ``demo`` tells the story, ``check`` checks a step outside
pytest, ``report`` shows a saved report, ``fix`` shows (or writes) its verified fixes
(usage and exit codes: the help texts below and ``cli.exits``).

Each command's module is imported only when that command runs, so ``--help`` is quick and
the demo never imports torch unless asked to.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import textwrap
from collections.abc import Sequence

from pytest_graphleak import __version__
from pytest_graphleak.cli.exits import EXIT_INTERRUPTED, EXIT_USAGE
from pytest_graphleak.cli.outputs import output_flags
from pytest_graphleak.exceptions import OptionError, UsageError
from pytest_graphleak.options import add_command_flags
from pytest_graphleak.report.ascii_text import degrade_to_ascii
from pytest_graphleak.values import int_at_least

__all__ = ["build_parser", "main"]

_EXIT_CODES = """\
exit codes:
  0  clean: nothing grew
  1  leak: a leak verdict (report: the saved report contains a leak)
  2  bad usage: missing file, no such function, a function that needs arguments,
     a bad number, an unreadable report
  3  your code raised: importing the target module, or the step at some call
  4  no verdict: the probes measured nothing the step uses (e.g. torch first
     imported inside the step after its first call); never read as clean
  130 interrupted (Ctrl-C)
"""

_MAIN_EPILOG = (
    """\
examples:
  graphleak demo                       watch a leaky training loop grow, then the fix
  graphleak check train.py::step       check a zero-argument training step
  graphleak report graphleak.json      show a saved JSON report
  graphleak fix graphleak.json         its verified fixes as a diff (--apply: write them)

"""
    + _EXIT_CODES
)

_DEMO_EPILOG = """\
examples:
  graphleak demo                       the story on minigrad (no torch needed)
  graphleak demo --verbose             with the log line of every step
  graphleak demo --steps 60 --plot demo.svg
  graphleak demo --torch               the same story on PyTorch
  graphleak demo | cat                 plain lines, no live progress display

Each run trains a tiny character transformer and is checked by the same
tracker, verdict and diagnosis as `pytest --graphleak`. Exit code 0 when the
leaky runs were caught and the fixed run was clean, 1 otherwise.
"""

_CHECK_EPILOG = (
    """\
examples:
  graphleak check examples/minigrad_ray_loss_sum.py::leaky_step
  graphleak check mypkg.train:step --steps 30 --warmup 5
  graphleak check train.py::step --json leak.json --html leak.html
  graphleak check train.py::step_a train.py::step_b -q

One step after the other; the exit code is the worst of them (1, then 3, then 4, then 0).
The step is called warmup + steps times with no arguments; build the model,
optimizer and data once at module level (or in a closure), as a training loop
would. The same probes, verdict and diagnosis as `pytest --graphleak` decide.

"""
    + _EXIT_CODES
)

_REPORT_EPILOG = (
    """\
examples:
  graphleak report graphleak.json                  print every result
  graphleak report graphleak.json --html out.html  render it as one HTML file
  graphleak report graphleak.json --json out.json  write it again (any report format)

Reads a report written by `pytest --graphleak-report=PATH` or `graphleak check --json PATH`.

"""
    + _EXIT_CODES
)


_FIX_EPILOG = """\
examples:
  graphleak fix graphleak.json                 print the verified fixes as a unified diff
  graphleak fix graphleak.json | git apply     the same, applied by git (from the rootdir)
  graphleak fix graphleak.json --apply         write them into your files

Reads a report written by `pytest --graphleak-report=PATH` or `graphleak check --json PATH`.
Only fixes that were verified (the step re-run with the change grew nothing) are shown.
--apply writes a file only when it is under the report's rootdir, outside site-packages
and virtual environments, and unchanged since the run (same SHA-256); otherwise it says
why, naming the file.

exit codes:
  0  nothing left unapplied: every verified fix was written, or there is none
  1  a verified fix is left unapplied: shown without --apply, or refused
  2  bad usage: missing file, an unreadable report
  130 interrupted (Ctrl-C)
"""


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (argparse names the flag)."""
    try:
        value: object = int(text, 10)
    except ValueError:
        value = text
    try:
        return int_at_least("", value, 1)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_FORMATTER = argparse.RawDescriptionHelpFormatter


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="graphleak",
        description="Catch autograd graph leaks in training loops.",
        epilog=_MAIN_EPILOG,
        formatter_class=_FORMATTER,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    _add_demo(commands)
    _add_check(commands)
    _add_report(commands)
    _add_fix(commands)
    return parser


def _add_demo(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``graphleak demo``: the story of a leaky loop, then fixed."""
    demo = commands.add_parser(
        "demo",
        help="train a tiny transformer with a leak, then fixed, and show the verdicts",
        description=textwrap.fill(
            "Train a tiny character transformer three times: keeping the losses in a "
            "list with their graphs, with backward(retain_graph=True) and a running "
            "loss kept as a tensor, and fixed. Print the per-step log (loss, RSS by "
            "phase, alive and created objects: the first and last step of each run, every "
            "step with --verbose) and each run's verdict with its diagnosis.",
            width=78,
        ),
        epilog=_DEMO_EPILOG,
        formatter_class=_FORMATTER,
    )
    demo.add_argument(
        "--steps",
        type=positive_int,
        default=24,
        metavar="N",
        help="measured steps per run (default: %(default)s)",
    )
    demo.add_argument(
        "--warmup",
        type=positive_int,
        default=3,
        metavar="N",
        help="warmup steps per run, not judged (default: %(default)s)",
    )
    demo.add_argument(
        "--torch",
        action="store_true",
        help="run the story on PyTorch instead of minigrad (needs torch)",
    )
    demo.add_argument(
        "--plot",
        metavar="PATH",
        default=None,
        help="write an SVG chart of alive counts and RSS per step, leaky vs fixed",
    )
    demo.add_argument(
        "--every",
        type=positive_int,
        default=None,
        metavar="K",
        help="print the per-step log every K steps (default: the first and last step of each run)",
    )
    demo.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="print the log line of every step, and each sample's value in "
        "the verdicts (as --every 1 and pytest -v)",
    )
    demo.set_defaults(run=("pytest_graphleak.demo", "run_demo"))


def _add_check(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``graphleak check``: a zero-argument step outside pytest."""
    check = commands.add_parser(
        "check",
        help="check a zero-argument training step function for graph leaks",
        description=textwrap.fill(
            "Run a zero-argument step function warmup + steps times with the same probes "
            "and verdict as `pytest --graphleak`, print the report, and exit 1 on a leak.",
            width=78,
        ),
        epilog=_CHECK_EPILOG,
        formatter_class=_FORMATTER,
    )
    check.add_argument(
        "targets",
        nargs="+",
        metavar="FILE.py::FUNCTION | MODULE:FUNCTION",
        help="the step function to check (several: each is checked, the exit code is the worst)",
    )
    # --steps, --warmup, ..., --json, --html: the options table's "command" flags.
    add_command_flags(check)
    check.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="print only the verdict line (the full report still goes to --json/--html)",
    )
    _color_flag(check)
    check.set_defaults(run=("pytest_graphleak.cli.check_cmd", "run_check"))


def _add_report(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``graphleak report``: a saved JSON report, shown or written again."""
    report = commands.add_parser(
        "report",
        help="render a saved JSON report in the terminal or as HTML",
        description="Render a saved graphleak JSON report in the terminal, or as HTML (or as "
        "any other report format).",
        epilog=_REPORT_EPILOG,
        formatter_class=_FORMATTER,
    )
    report.add_argument("path", metavar="PATH.json", help="the JSON report to read")
    for writer, flag in output_flags():  # every file writer (report.writers.WRITERS)
        report.add_argument(
            flag,
            metavar="OUT",
            default=None,
            dest=writer.kind,
            help=f"write it to OUT as {writer.what} instead of printing",
        )
    _color_flag(report)
    report.set_defaults(run=("pytest_graphleak.cli.report_cmd", "run_report"))


def _add_fix(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``graphleak fix``: a saved report's verified fixes, shown or written."""
    fix = commands.add_parser(
        "fix",
        help="show a saved report's verified fixes as a diff, or write them (--apply)",
        description="Print the verified fixes of a saved graphleak JSON report as a unified "
        "diff of your files, or write them with --apply.",
        epilog=_FIX_EPILOG,
        formatter_class=_FORMATTER,
    )
    fix.add_argument("path", metavar="PATH.json", help="the JSON report to read")
    fix.add_argument(
        "--apply",
        action="store_true",
        help="write the fixes into the files (only your files under the "
        "report's rootdir, unchanged since the run)",
    )
    fix.set_defaults(run=("pytest_graphleak.cli.fix_cmd", "run_fix"))


def _color_flag(parser: argparse.ArgumentParser) -> None:
    """``--color``, as pytest's (``cli.colour`` reads it)."""
    parser.add_argument(
        "--color",
        choices=("yes", "no", "auto"),
        default="auto",
        help="colour the output: yes, no, or auto (a terminal, unless "
        "NO_COLOR is set; default: %(default)s)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``graphleak`` command; return its exit code (see the module docstring)."""
    degrade_to_ascii()  # a non-UTF-8 stdout shows "_.-=+*%#", never a UnicodeEncodeError
    parser = build_parser()
    try:
        args = parser.parse_args(None if argv is None else list(argv))
    except SystemExit as exc:  # argparse: --help/--version (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    # As typed, for the HTML page's environment block.
    args.command_line = ["graphleak", *(sys.argv[1:] if argv is None else argv)]
    module, function = args.run  # imported only now: see the module docstring
    try:
        return int(getattr(importlib.import_module(module), function)(args))
    except (UsageError, OptionError) as exc:
        print(f"graphleak {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"\ngraphleak {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`graphleak demo | head`): stop quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141

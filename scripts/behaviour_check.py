#!/usr/bin/env python3
"""Capture what a user reads from ``pytest --graphleak`` over the leak catalogue, masked,
so that two checkouts (or one, before and after a refactor) can be compared.

    python scripts/behaviour_check.py capture /tmp/before       # from this checkout
    python scripts/behaviour_check.py capture /tmp/after
    python scripts/behaviour_check.py diff /tmp/before /tmp/after   # exit 1 if they differ

``capture`` runs the catalogue (``examples/torch_*.py`` and ``examples/minigrad_*.py``,
as ``tests/test_catalogue.py`` does) once with ``pytest --graphleak`` in a subprocess,
writing the terminal output (with GitHub Actions' workflow commands, ``--graphleak-github=on``),
the JSON report, the HTML report, the JUnit XML and the GitHub step summary, then reads the JSON
report back with ``graphleak report`` (its text and its HTML). Each file is masked
before it is saved: what changes from one run to the next on the same code (times,
dates, memory addresses, measured bytes, the checkout's path, the python and package
versions) becomes a placeholder, so only a change in behaviour shows in the diff.
The JSON report is saved with sorted keys, one value a line.

Issue 37's "Done when": the output must be identical before and after a refactor,
except for the changes its note names. Needs torch (the catalogue is mostly torch).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

# What differs between two runs of the same code. Order matters: longer patterns first.
_MASKS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"0x[0-9a-fA-F]{6,}"), "0x<ADDR>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d:\d\d|Z)?"), "<DATE>"),
    (re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d(:\d\d)?( UTC)?"), "<DATE>"),
    # pytest's " (0:01:02)" after a run of a minute or more: there or not by the load.
    (re.compile(r" \(\d+:\d\d:\d\d\)"), ""),
    (re.compile(r"\b\d+(\.\d+)?\s?(ms|µs|us|s|seconds?)\b"), "<TIME>"),
    (re.compile(r"\b\d+:\d\d(:\d\d)?\b"), "<TIME>"),  # 0:01:02 durations
    # Measured memory: bytes and KiB/MiB/GiB amounts, growth rates, and raw byte counts.
    (re.compile(r"[+-]?\d+(\.\d+)?\s?(B|bytes|KiB|MiB|GiB|kB|MB|GB)\b"), "<BYTES>"),
    (re.compile(r"python \d+\.\d+\.\d+\S*"), "python <VERSION>"),
    # A noisy metric's sparkline in a text report: its shape is the run's noise too.
    (re.compile(r"(\b(process|cuda)\.\w+ +<BYTES> -> <BYTES> +)\S+"), r"\1<SPARK>"),
]
# JSON fields whose values are measurements or the machine, not behaviour.
_MASKED_KEYS = re.compile(
    r"(time|duration|seconds|elapsed|date|started|generated_at|created|host|platform|"
    r"python|version|pid)",
    re.IGNORECASE,
)
# Metrics whose every number is noise from one run to the next: the process's memory and
# an allocator's cache. Every number under them (series, summary, growth) is masked.
_NOISY_METRIC = re.compile(r"^(process|cuda)\.")
#: The HTML chart of such a metric: its coordinates are noise too.
_NOISY_CHART = re.compile(r'<svg[^>]*aria-label="(process|cuda)\.[^"]*".*?</svg>', re.DOTALL)
#: Its grid lines and tick labels: how many there are follows the measured range.
_TICKS = re.compile(r'<line class="grid"[^>]*/>|<text class="tick"[^>]*>[^<]*</text>')
#: A JUnit property of such a metric (its growth per step).
_NOISY_PROPERTY = re.compile(r'(name="graphleak\.(process|cuda)\.[^"]*" value=)"[^"]*"')
_AMOUNT = re.compile(r"[+-]?\d+(\.\d+)?(\s?(B|KiB|MiB|GiB)\b)?")
#: The files ``capture`` writes, raw under ``raw/`` and masked beside it.
FILES = (
    "terminal.txt",
    "report.json",
    "report.html",
    "junit.xml",
    "github-summary.md",
    "cli-report.txt",
    "cli-report-html.txt",
    "cli-report.html",
)


def mask(text: str, paths: dict[str, str]) -> str:
    """``text`` with the run's own paths (longest first) and ``_MASKS`` replaced."""
    for path in sorted(paths, key=len, reverse=True):
        text = text.replace(path, paths[path])
    for pattern, placeholder in _MASKS:
        text = pattern.sub(placeholder, text)
    return text


def mask_json(value: Any, paths: dict[str, str], key: str = "", noisy: bool = False) -> Any:
    """A JSON value with the measured and machine-dependent leaves masked."""
    if isinstance(value, dict):
        noisy = noisy or bool(_NOISY_METRIC.match(str(value.get("metric", ""))))
        return {
            k: mask_json(v, paths, k, noisy or bool(_NOISY_METRIC.match(k)))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [mask_json(v, paths, key, noisy) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)) and (noisy or (key and _MASKED_KEYS.search(key))):
        return "<N>"
    if isinstance(value, str):
        return mask(value, paths)
    return value


def catalogue() -> list[Path]:
    return sorted(p for p in EXAMPLES.glob("*.py") if p.name.startswith(("torch_", "minigrad_")))


def _run(args: list[str], out: Path, name: str, **extra_env: str) -> int:
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "GITHUB_ACTIONS": "", **extra_env}
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    text = f"exit {proc.returncode}\n--- stdout\n{proc.stdout}--- stderr\n{proc.stderr}"
    (out / "raw" / name).write_text(text, encoding="utf-8")
    return proc.returncode


def capture(out: Path) -> None:
    """Run the catalogue once; its raw outputs under ``out/raw``, masked ones in ``out``."""
    raw = out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    report, html = raw / "report.json", raw / "report.html"
    summary = raw / "github-summary.md"
    summary.write_text("", encoding="utf-8")
    pytest_args = [
        sys.executable,
        "-m",
        "pytest",
        "--graphleak",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "-p",
        "no:xdist",
        "-q",
        "--graphleak-github=on",
        f"--graphleak-report={report}",
        f"--graphleak-html={html}",
        f"--junitxml={raw / 'junit.xml'}",
        "-o",
        "junit_family=xunit1",
        *[str(p.relative_to(ROOT)) for p in catalogue()],
    ]
    _run(
        pytest_args,
        out,
        "terminal.txt",
        GITHUB_STEP_SUMMARY=str(summary),
        GITHUB_WORKSPACE=str(ROOT),
    )
    cli = [sys.executable, "-m", "pytest_graphleak", "report", str(report)]
    _run(cli, out, "cli-report.txt")
    _run([*cli, "--html", str(raw / "cli-report.html")], out, "cli-report-html.txt")
    (raw / "root.txt").write_text(str(ROOT), encoding="utf-8")
    write_masked(out)
    print(f"captured into {out}")


def write_masked(out: Path) -> None:
    """The masked copy of each raw file (``diff`` makes them again: masks may improve)."""
    raw = out / "raw"
    paths = {
        str(raw): "<OUT>",
        str(out): "<OUT>",
        (raw / "root.txt").read_text(encoding="utf-8"): "<ROOT>",
    }
    for name in FILES:
        text = (raw / name).read_text(encoding="utf-8")
        if name.endswith(".json"):
            document = mask_json(json.loads(text), paths)
            text = json.dumps(document, indent=1, sort_keys=True) + "\n"
        elif name.endswith(".xml"):  # JUnit: its times and timestamp are the run's own
            text = re.sub(r'(time|timestamp|hostname)="[^"]*"', r'\1="<N>"', text)
            text = _NOISY_PROPERTY.sub(r'\1"<N>"', text)
            text = mask(re.sub(r">\s*<", ">\n<", text), paths) + "\n"
        elif name.endswith(".html"):  # one tag a line, so a diff points at what changed
            text = _NOISY_CHART.sub(lambda m: _AMOUNT.sub("N", _TICKS.sub("", m[0])), text)
            text = mask(re.sub(r">\s*<", ">\n<", text), paths) + "\n"
        else:
            text = mask(text, paths)
        (out / name).write_text(text, encoding="utf-8")


def diff(before: Path, after: Path) -> int:
    changed = 0
    for out in (before, after):
        write_masked(out)
    for name in FILES:
        a = (before / name).read_text(encoding="utf-8").splitlines(keepends=True)
        b = (after / name).read_text(encoding="utf-8").splitlines(keepends=True)
        lines = list(difflib.unified_diff(a, b, str(before / name), str(after / name)))
        if lines:
            changed += 1
            sys.stdout.writelines(lines)
        print(f"{name}: {'differs' if lines else 'identical'}", file=sys.stderr)
    return 1 if changed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("capture").add_argument("out", type=Path)
    compare = commands.add_parser("diff")
    compare.add_argument("before", type=Path)
    compare.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "capture":
        capture(args.out)
        return 0
    return diff(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())

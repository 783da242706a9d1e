#!/usr/bin/env python3
"""Regenerate the README's picture of the HTML report: one command, headless Chromium.

    python scripts/screenshot_report.py [--out docs/images/report.png] [--width 900 --height 1440]

Runs the README's example test and its fixed twin with
``pytest --graphleak --graphleak-html=...`` in a temporary directory (real results, not a
mock), opens the page in headless Chromium (Debian: ``apt-get install -y chromium``) with
the flags of ``scripts/check_html_chromium.py`` (no network, no GPU) and saves a
screenshot of the top of the page. Needs torch (the example is a torch loop).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from check_html_chromium import run_chromium  # noqa: E402
from update_readme_example import EXAMPLE  # noqa: E402

FIXED = EXAMPLE.replace("def test_train_step(", "def test_train_step_fixed(").replace(
    'state["losses"].append(loss)      # the leak: every step\'s graph stays alive',
    'state["losses"].append(loss.item())  # the fix: a plain number',
)


def write_report(directory: Path) -> Path:
    html = directory / "graphleak.html"
    (directory / "test_train.py").write_text(EXAMPLE, encoding="utf-8")
    (directory / "test_train_fixed.py").write_text(
        FIXED, encoding="utf-8"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--graphleak", "-q", "-p", "no:cacheprovider",
         "-p", "no:randomly", f"--graphleak-html={html}", "test_train.py", "test_train_fixed.py"],
        cwd=directory, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if proc.returncode != 1 or not html.exists():
        raise SystemExit(f"expected one leak and a report (exit {proc.returncode}):\n{proc.stdout}")
    return html


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "report.png")
    parser.add_argument("--width", type=int, default=900)
    parser.add_argument("--height", type=int, default=1440)  # down to the first charts
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("chromium not found (Debian: apt-get install -y chromium)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        html = write_report(Path(tmp))
        shot = Path(tmp) / "shot.png"
        run = run_chromium(chromium, Path(tmp) / "profile", f"--screenshot={shot}",
                           f"--window-size={args.width},{args.height}", html.as_uri())  # fmt: skip
        if not shot.exists():
            print(f"chromium wrote no screenshot:\n{run.stderr[-2000:]}", file=sys.stderr)
            return 1
        args.out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

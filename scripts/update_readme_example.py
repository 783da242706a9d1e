#!/usr/bin/env python3
"""Regenerate the README's 30-second example: its test file and its real output.

    python scripts/update_readme_example.py          # rewrite README.md in place
    python scripts/update_readme_example.py --check  # exit 1 if the test file in the README differs

The example test (``EXAMPLE`` below) is written to a temporary directory and run with
``pytest --graphleak`` from this checkout; the README gets the test between the
``<!-- example:test -->`` markers and pytest's failure section and summary between the
``<!-- example:output -->`` markers. The temporary directory is pytest's rootdir and is
shown as such (paths relative to it), so the output does not name this machine's paths.
It runs in an 80-column terminal (``COLUMNS=80``), as a CI log or a laptop's terminal
shows it, so that no line is cut in the README's pane or on a phone's screen; the times
in it are that run's.
Needs torch (the example is the torch loop a newcomer writes).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

EXAMPLE = """\
import pytest
import torch


@pytest.fixture
def state():
    model = torch.nn.Linear(8, 1)
    return {"model": model, "opt": torch.optim.SGD(model.parameters(), lr=0.1), "losses": []}


@pytest.mark.no_graph_growth          # the body is ONE training step
def test_train_step(state):
    loss = state["model"](torch.randn(4, 8)).pow(2).mean()
    state["opt"].zero_grad()
    loss.backward()
    state["opt"].step()
    state["losses"].append(loss)      # the leak: every step's graph stays alive
"""


def run_example() -> str:
    """pytest's output for the example, from the FAILURES banner to the end."""
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "test_train.py").write_text(EXAMPLE, encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80", "OMP_NUM_THREADS": "1"}
        env.pop("PYTEST_ADDOPTS", None)
        for name in ("CI", "GITHUB_ACTIONS"):  # a CI log's short summary is not cut to width
            env.pop(name, None)
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "--graphleak",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:randomly",
                "test_train.py",
            ],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        out = proc.stdout.replace(os.path.realpath(tmp) + os.sep, "").replace(tmp + os.sep, "")
    if proc.returncode != 1 or "FAILURES" not in out:
        raise SystemExit(f"the example did not fail as a leak (exit {proc.returncode}):\n{out}")
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if "FAILURES" in line)
    return "\n".join(lines[start:]).rstrip() + "\n"


def replace_block(text: str, name: str, language: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- example:{name} -->\n).*?(\n<!-- /example:{name} -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"README.md has no <!-- example:{name} --> block")
    block = f"```{language}\n{body.rstrip()}\n```"
    return pattern.sub(lambda m: m.group(1) + block + m.group(2), text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="only check that the README shows the example test"
    )
    args = parser.parse_args()
    text = README.read_text(encoding="utf-8")
    if args.check:
        ok = replace_block(text, "test", "python", EXAMPLE) == text
        print("README example is current" if ok else "README example test differs: regenerate")
        return 0 if ok else 1
    text = replace_block(text, "test", "python", EXAMPLE)
    text = replace_block(text, "output", "text", run_example())
    README.write_text(text, encoding="utf-8")
    print(f"updated {README.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

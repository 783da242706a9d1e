#!/usr/bin/env python3
"""The README's and the docs home's picture of the HTML report, made from a real run.

    python scripts/report_picture.py            # rewrite docs/images/report.png and its .sha256
    python scripts/report_picture.py --check    # exit 1 when the picture is stale

Runs ``SUITE`` (a mixed run: a leak, its fixed twin, a graph that outlives its test, an
unmeasured check and a step that raises; minigrad only, so the numbers are the same on
every machine) with ``pytest --graphleak --graphleak-report=... --graphleak-html=...`` in
a temporary directory, and screenshots the page in headless Chromium (Debian:
``apt-get install -y chromium``; the flags of ``scripts/check_html_chromium.py``).

Staleness: ``docs/images/report.sha256`` holds the fingerprint of the page the picture
was taken of: the HTML rendered again from the run's JSON document with what changes
from run to run (seconds, the version, the temporary path) written alike. A renderer,
stylesheet or wording change gives another fingerprint; ``--check`` and
``tests/test_report_picture.py`` then fail until this script is run again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PICTURE = ROOT / "docs" / "images" / "report.png"
FINGERPRINT = PICTURE.with_suffix(".sha256")
#: The window the picture is taken in: the header, the chips, the table, the first card
#: (narrow, so that the picture shown at its natural size, or halved on a phone, is legible).
WIDTH, HEIGHT = 600, 1000

SUITE = '''\
"""A mixed run: a leak, its fixed twin, a graph that outlives its test, an unmeasured
check and a step that raises."""

import minigrad as mg
import pytest

history = []


@pytest.fixture
def state():
    return {"w": mg.Tensor([[0.5, -0.25], [0.125, 1.0]], requires_grad=True), "losses": []}


def loss_of(state):
    x = mg.Tensor([[1.0, 2.0]])
    return (x @ state["w"]).tanh().sum()


@pytest.mark.no_graph_growth
def test_train_step(state):
    loss = loss_of(state)
    loss.backward()
    state["losses"].append(loss)  # the leak: every step's graph stays alive


@pytest.mark.no_graph_growth
def test_train_step_fixed(state):
    loss = loss_of(state)
    loss.backward()
    state["losses"].append(loss.item())  # the fix: a plain number


def test_keeps_a_graph_after_it_ends(state):
    history.append(loss_of(state))  # outlives the test: a warning


@pytest.mark.no_graph_growth(probes=["torch"])
def test_probes_miss_the_step(state):
    loss_of(state).backward()  # minigrad, but only torch is probed: unmeasured


calls = [0]


@pytest.mark.no_graph_growth
def test_bad_batch(state):
    calls[0] += 1
    if calls[0] == 5:
        raise ValueError(f"bad batch at step {calls[0]}")
    loss_of(state).backward()
'''


def run_suite(
    directory: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``SUITE`` as ``test_mixed.py`` in ``directory`` with the JSON and HTML reports
    (``r.json``, ``r.html``) and ``extra`` arguments."""
    (directory / "test_mixed.py").write_text(SUITE, encoding="utf-8")
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env or {})}
    environ.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [
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
            "--graphleak-probes=minigrad,gc",
            "--graphleak-report=r.json",
            "--graphleak-html=r.html",
            *extra,
            "test_mixed.py",
        ],
        cwd=directory,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def fingerprint(document: dict[str, Any], root: Path) -> str:
    """The page's fingerprint: rendered again from the document with the seconds, the
    version and the run's directory written alike."""
    sys.path.insert(0, str(ROOT))
    from pytest_graphleak.report.html import render_html
    from pytest_graphleak.report.model import Report

    page = render_html(Report.from_dict(document), draw=None, environment={"rootdir": str(root)})
    page = page.replace(str(root), "ROOT").replace(str(document.get("generated_by")), "VERSION")
    page = re.sub(r"(?:<|&lt;)?\d+\.\d+ s\b", "# s", page)  # "<0.01 s" too
    return hashlib.sha256(page.encode("utf-8")).hexdigest()


def fresh(directory: Path) -> tuple[Path, str]:
    """Run the suite in ``directory``: the HTML page and its fingerprint."""
    run = run_suite(directory)
    html, report = directory / "r.html", directory / "r.json"
    if run.returncode != 1 or not html.exists() or not report.exists():
        raise SystemExit(
            f"expected a failing run and two reports (exit {run.returncode}):\n"
            f"{run.stdout[-3000:]}\n{run.stderr[-2000:]}"
        )
    return html, fingerprint(json.loads(report.read_text(encoding="utf-8")), directory)


def committed() -> str:
    """The fingerprint the committed picture was taken of ("" when there is none)."""
    if not FINGERPRINT.exists():
        return ""
    return FINGERPRINT.read_text(encoding="utf-8").split()[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the picture is stale")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="graphleak-picture-") as tmp:
        html, print_ = fresh(Path(tmp).resolve())
        if args.check:
            if print_ != committed():
                print(f"{PICTURE.relative_to(ROOT)} is stale: run scripts/report_picture.py")
                return 1
            print(f"{PICTURE.relative_to(ROOT)} matches a fresh run")
            return 0
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        if chromium is None:
            print("chromium not found (Debian: apt-get install -y chromium)", file=sys.stderr)
            return 2
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from check_html_chromium import run_chromium

        shot = Path(tmp) / "shot.png"
        taken = run_chromium(
            chromium,
            Path(tmp) / "profile",
            f"--screenshot={shot}",
            f"--window-size={WIDTH},{HEIGHT}",
            html.as_uri(),
        )
        if not shot.exists():
            print(f"chromium wrote no screenshot:\n{taken.stderr[-2000:]}", file=sys.stderr)
            return 1
        shutil.copyfile(shot, PICTURE)
    FINGERPRINT.write_text(
        f"{print_}  the page docs/images/report.png shows (scripts/report_picture.py)\n",
        encoding="utf-8",
    )
    print(f"wrote {PICTURE.relative_to(ROOT)} ({PICTURE.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The ``graphleak`` command end to end, in subprocesses, as a user runs it.

The demo runs where torch cannot be imported (a meta-path blocker in a
``sitecustomize``), piped (plain lines) and on a pseudo-terminal (live status line).
"""

from __future__ import annotations

import os
import pty
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest

BLOCK_TORCH = """\
import sys

class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError("No module named 'torch' (blocked)", name=name)
        return None

sys.meta_path.insert(0, _NoTorch())
"""

STEPS = """\
import minigrad as mg

W = mg.Tensor([[1.0, 2.0]], requires_grad=True)
history = []

def leaky_step():
    loss = (W * W).sum()
    loss.backward()
    W.grad = None
    history.append(loss)

def fixed_step():
    loss = (W * W).sum()
    loss.backward()
    W.grad = None
    history.append(loss.item())
"""

DEMO = ["-m", "pytest_graphleak", "demo", "--steps", "6", "--warmup", "2"]
LOG_LINE = re.compile(
    r"^Step +\d+ \| Loss \d+\.\d{4} \| RSS MiB pre [\d.]+ fwd [\d.]+ bwd [\d.]+ opt [\d.]+ \| "
    r"alive TensorImpl=\d+ Node=\d+ AutogradMeta=\d+ \| created TensorImpl=\d+ Node=\d+"
)


@pytest.fixture
def env_without_torch(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "no_torch_site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCK_TORCH)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"
    env.pop("NO_COLOR", None)
    return env


def graphleak(*argv: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_graphleak", *argv],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_demo_without_torch_tells_the_story_in_plain_lines(
    tmp_path: Path, env_without_torch: dict[str, str]
) -> None:
    proc = subprocess.run(
        [sys.executable, *DEMO, "--plot", "demo.svg"],
        env=env_without_torch,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "\x1b" not in out and "\r" not in out  # piped: no escape codes, no redraws
    logs = [line for line in out.splitlines() if line.startswith("Step")]
    # short by default: each run's first and last step (--verbose: every step, below)
    assert len(logs) == 3 * 2 and all(LOG_LINE.match(line) for line in logs), logs[:3]
    assert "series (warmup | measured)" not in out

    runs = out.split("== Run ")[1:]
    assert len(runs) == 3
    keeps, retains, fixed = runs
    assert "-- verdict: LEAKED (list-accumulation) as expected" in keeps
    assert "held by: local 'trainer' -> Trainer.losses -> list" in keeps
    assert "train_script.py>:" in keeps
    assert "loss = self.loss_fn(self.model(x), y)" in " ".join(keeps.split())  # 80 columns
    assert "-- verdict: LEAKED (retained-grad-fn) as expected" in retains
    assert "Trainer.running_loss" in retains
    assert "-- verdict: CLEAN as expected" in fixed
    # The summary table says the status table's labels, as every other surface does.
    table = out.split("Summary (first -> last measured step)")[1].splitlines()
    assert [row.split("  ")[-1].strip() for row in table if row.startswith("  ")][1:] == [
        "LEAKED list-accumulation",
        "LEAKED retained-grad-fn",
        "CLEAN",
    ]
    # The log itself shows the leak: alive Node grows in the leaky runs, not in the fixed one.
    assert _alive_nodes(keeps)[-1] > _alive_nodes(keeps)[0]
    assert len(set(_alive_nodes(fixed))) == 1
    # Honest pictures: the fixed run's flat metrics draw flat, RSS noise included.
    rows = [line.split() for line in fixed.splitlines() if line.startswith("  process.")]
    assert rows and all(set(row[-1]) <= {"▁", "|"} for row in rows), rows

    svg = ElementTree.parse(tmp_path / "demo.svg").getroot()
    lines = svg.findall(".//{http://www.w3.org/2000/svg}polyline")
    assert len(lines) == 3 * 2 * 2  # 3 metrics x 2 leaky runs x (leaky, fixed)

    verbose = subprocess.run(
        [sys.executable, *DEMO, "--verbose"],
        env=env_without_torch,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert len([x for x in verbose.stdout.splitlines() if x.startswith("Step")]) == 3 * 8
    assert "series (warmup | measured)" in verbose.stdout

    proc = graphleak("demo", "--torch", env=env_without_torch, cwd=tmp_path)
    assert proc.returncode == 2
    assert "--torch needs PyTorch, which cannot be imported here" in proc.stderr
    assert "Traceback" not in proc.stderr


def _alive_nodes(run_text: str) -> list[int]:
    return [int(n) for n in re.findall(r"alive TensorImpl=\d+ Node=(\d+)", run_text)]


def test_demo_on_a_terminal_draws_a_live_status_line(
    tmp_path: Path, env_without_torch: dict[str, str]
) -> None:
    leader, follower = pty.openpty()
    env = {**env_without_torch, "TERM": "xterm", "COLUMNS": "120"}
    proc = subprocess.Popen(
        [sys.executable, *DEMO],
        env=env,
        cwd=tmp_path,
        stdout=follower,
        stderr=follower,
        stdin=subprocess.DEVNULL,
    )
    os.close(follower)
    chunks = []
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 1.0)
            if ready:
                try:
                    data = os.read(leader, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
    finally:
        os.close(leader)
        proc.wait(timeout=60)
    text = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0, text
    assert "\r\x1b[Kleaky: losses kept [" in text  # the status line, redrawn in place
    assert re.search(r"\d+/8 {2}loss \d\.\d{3} {2}TensorImpl=\d+", text)
    assert "\x1b[1m" in text  # headings in bold on a terminal


def test_check_then_report_as_a_user_runs_them(
    tmp_path: Path, env_without_torch: dict[str, str]
) -> None:
    (tmp_path / "train_e2e.py").write_text(STEPS)
    env = env_without_torch
    proc = graphleak(
        "check",
        "train_e2e.py::leaky_step",
        "train_e2e.py::fixed_step",
        "--steps",
        "6",
        "--json",
        "r.json",
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stderr
    assert "train_e2e.py::leaky_step leaks: list-accumulation" in proc.stdout
    assert "held by: global 'history' -> list" in proc.stdout
    assert "created at: " in proc.stdout and "train_e2e.py:7" in proc.stdout
    assert "CLEAN train_e2e.py::fixed_step" in proc.stdout

    proc = graphleak("report", "r.json", env=env, cwd=tmp_path)
    assert proc.returncode == 1
    assert "2 checked: 1 leaked, 1 clean" in proc.stdout
    assert "held by: global 'history' -> list" in proc.stdout

    proc = graphleak("check", "train_e2e.py::fixed_step", "--steps", "abc", env=env, cwd=tmp_path)
    assert proc.returncode == 2
    assert "invalid --steps abc: steps must be an integer >= 1, got 'abc'" in proc.stderr


def test_console_script_is_installed() -> None:
    script = shutil.which("graphleak", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("the graphleak entry point is not installed in this environment")
    proc = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    assert "graphleak demo" in proc.stdout and "exit codes:" in proc.stdout

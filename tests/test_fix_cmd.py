"""``graphleak fix REPORT.json`` (issue 44): the report's verified fixes as a unified diff
of the user's file; ``--apply`` writes them only into the user's files under the report's
rootdir, outside site-packages and virtual environments, unchanged since the run, and
says which it refused; the exit code says whether anything is left unapplied."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from suite_helpers import FAST

import minigrad  # noqa: F401  (imported once here: in-process runs must not load numpy again)
from pytest_graphleak.cli import main
from pytest_graphleak.cli.patches import apply
from pytest_graphleak.exceptions import Refused

pytest_plugins = ["pytester"]

LEAKY = """\
import minigrad as mg
import pytest

losses = []


@pytest.mark.no_graph_growth(steps=6, warmup=2)
def test_accumulates():
    x = mg.Tensor([1.0, 2.0], requires_grad=True)
    loss = (x * 2).sum()
    losses.append(loss)
"""

DIFF = """\
--- a/test_keep.py
+++ b/test_keep.py
@@ -8,4 +8,4 @@
 def test_accumulates():
     x = mg.Tensor([1.0, 2.0], requires_grad=True)
     loss = (x * 2).sum()
-    losses.append(loss)
+    losses.append(loss.item())
"""


@pytest.fixture
def leak_report(pytester: pytest.Pytester) -> Path:
    """A report of one leak whose fix was verified; the test file beside it."""
    pytester.makepyfile(test_keep=LEAKY)
    report = pytester.path / "graphleak.json"
    # In process (minigrad only, nothing the house rules forbid): a tenth of a subprocess.
    result = pytester.runpytest("--graphleak", f"--graphleak-report={report}", *FAST)
    result.assert_outcomes(failed=1)
    return report


def run_fix(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["fix", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_verified_fix_prints_as_a_diff_of_the_users_file(
    leak_report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = (leak_report.parent / "test_keep.py").read_text()
    code, out, err = run_fix(capsys, str(leak_report))
    assert (code, out) == (1, DIFF), err  # 1: a fix is left unapplied
    assert (leak_report.parent / "test_keep.py").read_text() == before


def test_apply_writes_it_and_the_test_then_passes(
    leak_report: Path, pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    path = pytester.path / "test_keep.py"
    before = path.read_text()
    code, out, err = run_fix(capsys, str(leak_report), "--apply")
    assert code == 0, err
    assert out == "graphleak fix: applied test_keep.py:11: losses.append(loss.item())\n"
    assert "1 applied, 0 refused" in err
    # That line changed, nothing else (pytester writes the file without a last newline).
    assert path.read_text() == before.replace("losses.append(loss)", "losses.append(loss.item())")
    pytester.runpytest("--graphleak", *FAST).assert_outcomes(passed=1)


def test_apply_refuses_a_file_changed_since_the_run(
    leak_report: Path, pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    path = pytester.path / "test_keep.py"
    changed = LEAKY + "# edited after the run\n"
    path.write_text(changed)
    code, out, err = run_fix(capsys, str(leak_report), "--apply")
    assert (code, out) == (1, "")
    assert "refused test_keep.py: changed since the fix was verified" in err, err
    assert path.read_text() == changed


def _moved(report: Path, filename: Path, **top: Any) -> None:
    """The report's fix pointed at ``filename`` (a copy of the file, so that its hash
    still matches), and top-level fields replaced."""
    document = json.loads(report.read_text())
    fix = document["tests"][0]["checks"][0]["diagnosis"]["fix"]
    filename.parent.mkdir(parents=True, exist_ok=True)
    if Path(fix["filename"]) != filename:
        shutil.copy(fix["filename"], filename)
    fix["filename"] = str(filename)
    document.update(top)
    report.write_text(json.dumps(document))


@pytest.mark.parametrize(
    ("where", "said"),
    [
        ("venv/lib/python3.12/site-packages/mod.py", "an installed package's file (site-packages)"),
        ("env/lib/mod.py", "inside the virtual environment"),
    ],
)
def test_apply_refuses_a_library_or_a_virtual_environment(
    leak_report: Path,
    pytester: pytest.Pytester,
    capsys: pytest.CaptureFixture[str],
    where: str,
    said: str,
) -> None:
    (pytester.path / "env").mkdir()
    (pytester.path / "env" / "pyvenv.cfg").write_text("home = /usr\n")
    target = pytester.path / where
    _moved(leak_report, target)
    before = target.read_text()
    code, _, err = run_fix(capsys, str(leak_report), "--apply")
    assert code == 1
    assert f"refused {where}: {said}" in err, err
    assert target.read_text() == before


def test_apply_refuses_a_file_outside_the_rootdir(
    leak_report: Path, pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    _moved(leak_report, pytester.path / "test_keep.py", rootdir=str(pytester.path / "sub"))
    code, _, err = run_fix(capsys, str(leak_report), "--apply")
    assert code == 1
    assert f"not under the report's rootdir {pytester.path / 'sub'}" in err, err


def test_a_report_without_verified_fixes_leaves_nothing_unapplied(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.makepyfile(test_keep=LEAKY)
    report = pytester.path / "graphleak.json"
    pytester.runpytest(
        "--graphleak", f"--graphleak-report={report}", "--graphleak-verify-fix=off", *FAST
    )
    code, out, err = run_fix(capsys, str(report), "--apply")
    assert (code, out) == (0, "")
    assert "no verified fix for test_keep.py::test_accumulates: fix verification is off" in err


def test_apply_keeps_line_endings_and_applies_two_fixes_to_one_file(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_bytes(b"a = 1\r\nb = 2\r\nc = 3\r\nd = 4\r\ne = 5\r\nf = 6\r\ng = 7\r\nh = 8")
    first = "--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n-a = 1\n+a = 10\n b = 2\n c = 3\n"
    last = "--- a/m.py\n+++ b/m.py\n@@ -6,3 +6,4 @@\n f = 6\n g = 7\n-h = 8\n+h = 80\n+i = 9\n"
    apply(str(path), [last, first])
    assert path.read_bytes() == (
        b"a = 10\r\nb = 2\r\nc = 3\r\nd = 4\r\ne = 5\r\nf = 6\r\ng = 7\r\nh = 80\r\ni = 9"
    )
    with pytest.raises(Refused, match="do not match the file at line 1"):
        apply(str(path), [first])
    overlapping = "--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,2 @@\n-a = 10\n+a = 11\n b = 2\n"
    same = "--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,2 @@\n-a = 10\n+a = 12\n b = 2\n"
    with pytest.raises(Refused, match="two fixes change the same lines"):
        apply(str(path), [overlapping, same])


SHAPES = """\
import functools
from unittest import mock

import numpy as np
import pytest

import minigrad as mg
from minigrad import nn, optim

rng = np.random.default_rng(0)
net = nn.Linear(4, 2, rng=rng)
opt = optim.SGD(net.parameters(), lr=0.01)
history = []
logger = mock.Mock()
step = [0]


def forward():
    out = net(mg.Tensor(rng.standard_normal((3, 4)).astype(np.float32)))
    loss = (out ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return out, loss


@pytest.mark.no_graph_growth
def test_list_of_tensors():
    out, loss = forward()
    history.append([loss, out])


@pytest.mark.no_graph_growth
def test_mock_call_args():
    out, loss = forward()
    logger.log("loss", loss)


@functools.lru_cache(maxsize=None)
def embed(k):
    return net(mg.Tensor(np.full((2, 4), float(k), dtype=np.float32)))


@pytest.mark.no_graph_growth
def test_cached():
    step[0] += 1
    loss = (embed(step[0]) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_shapes_the_old_rules_missed_get_verified_fixes_that_apply(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 44's shapes: a stored list of tensors (each item as numbers, never a method
    on the list), a value a test double keeps (``Mock.call_args_list``: the value passed
    as a number), a ``functools.lru_cache`` of graphs (cleared after the call)."""
    pytester.makepyfile(test_shapes=SHAPES)
    report = pytester.path / "graphleak.json"
    first = pytester.runpytest("--graphleak", f"--graphleak-report={report}", *FAST)
    first.assert_outcomes(failed=3)
    code, out, err = run_fix(capsys, str(report), "--apply")
    assert code == 0, err
    assert sorted(out.splitlines()) == [
        "graphleak fix: applied test_shapes.py:30: history.append([loss.tolist(), out.tolist()])",
        'graphleak fix: applied test_shapes.py:36: logger.log("loss", loss.item())',
        "graphleak fix: applied test_shapes.py:47: loss = (embed(step[0]) ** 2).mean(); "
        "then embed.cache_clear()",
    ], out
    pytester.runpytest("--graphleak", *FAST).assert_outcomes(passed=3)

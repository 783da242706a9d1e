"""A leak found by the user's own loop (``graphleak.track()``), ``graphleak.check()`` or
a framework callback raising inside ``fit()`` reads under pytest as the marker's does:
the user's line, then the report in 80 columns, coloured, the series only with ``-v``,
the fix last; no ``E`` wall, no fixture repr. The runs are in process (minigrad alone,
the terminal's width from COLUMNS, set for the run), but xdist's and Lightning's."""

from __future__ import annotations

import importlib.util
import re

import pytest
from suite_helpers import failure_section

pytest.importorskip("minigrad")  # at import: in-process runs must not load numpy again

_LOOPS = """
import minigrad as mg

w = mg.Tensor([[0.5, -0.2], [0.1, 0.3]], requires_grad=True)
x = mg.Tensor([[1.0, 2.0]])
losses = []


def step():
    losses.append((x @ w).sum())


def test_track(graphleak):
    kept = []
    with graphleak.track(warmup=2, steps=6) as t:
        for _ in range(12):
            kept.append((x @ w).sum())
            t.step()


def test_check(graphleak):
    graphleak.check(step, steps=6, warmup=2)


def test_short(graphleak):
    with graphleak.track(warmup=3) as t:
        for _ in range(2):
            (x @ w).sum()
            t.step()


def loop_of(t, kept):
    for _ in range(12):
        kept.append((x @ w).sum())
        t.step()


def test_helper(graphleak):
    with graphleak.track(warmup=2, steps=6) as t:
        loop_of(t, [])
"""

#: Where each test failed: its line in the test file, as pytest's short style shows it.
_WHERE = {
    "test_track": ("test_own.py:17: in test_track", "    t.step()"),
    "test_check": ("test_own.py:21: in test_check", "    graphleak.check(step, steps=6, warmup=2)"),
    "test_short": ("test_own.py:25: in test_short", "    with graphleak.track(warmup=3) as t:"),
    "test_helper": ("test_own.py:34: in loop_of", "    t.step()"),
}
_SERIES = "  series (warmup | measured):"


def _run(pytester: pytest.Pytester, *args: str, subprocess: bool = False) -> str:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COLUMNS", "80")
        run = pytester.runpytest_subprocess if subprocess else pytester.runpytest
        result = run("-p", "no:randomly", "-p", "no:cacheprovider", *args)
    return result.stdout.str()


def _story_ends_with_its_fix(lines: list[str]) -> None:
    """The last labelled line of the story is its fix (or the unmeasured check's "what to
    change"); only that line's own continuation lines follow it."""
    labelled = [i for i, line in enumerate(lines) if re.match(r"  \S", line)]
    assert labelled and lines[labelled[-1]].startswith(("  fix: ", "  fix (")), lines
    assert all(line.startswith("      ") for line in lines[labelled[-1] + 1 :]), lines


def _check_failure(out: str, name: str, *, verbose: bool) -> None:
    failure = failure_section(out, name).split("\n")
    failure = [line for line in failure if not line.startswith("[gw")]  # xdist's worker line
    assert tuple(failure[:2]) == _WHERE[name], failure
    story = failure[2:]
    assert story[0].startswith(f"graphleak: test_own.py::{name}::"), story
    assert all(len(line) <= 80 for line in failure), failure
    assert not any(line.startswith("E ") for line in failure), failure
    assert "GraphleakFixture object at" not in out
    if name != "test_short":  # a leak: the sparklines whole, the samples with -v only
        assert (_SERIES in story) == verbose, story
        assert any(
            re.fullmatch(r"    minigrad\.nodes +\S+ -> \S+ +\+\S+ +\S+", line) for line in story
        ), story
    _story_ends_with_its_fix(story)


def test_own_loop_failures_read_as_the_markers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_own=_LOOPS)
    out = _run(pytester)
    verbose = _run(pytester, "-v")
    for name in _WHERE:
        _check_failure(out, name, verbose=False)
        _check_failure(verbose, name, verbose=True)
    # the unmeasured loop's reason is a sentence broken at spaces, not one long line
    short = failure_section(out, "test_short").split("\n")
    assert short[2].startswith("graphleak: test_own.py::test_short::track(1): not measured")
    assert short[3].startswith("           ") and "track() saw 2 t.step() calls" in "".join(short)


_FIXTURES = """
import minigrad as mg
import pytest

w = mg.Tensor([[0.5, -0.2], [0.1, 0.3]], requires_grad=True)
x = mg.Tensor([[1.0, 2.0]])
losses = []


def step():
    losses.append((x @ w).sum())


@pytest.fixture
def warmed(graphleak):
    graphleak.check(step, steps=6, warmup=2)
    yield


@pytest.fixture
def after(graphleak):
    yield
    kept = []
    with graphleak.track(warmup=2, steps=6) as t:
        for _ in range(12):
            kept.append((x @ w).sum())
            t.step()


def test_setup(warmed):
    pass


def test_teardown(after):
    pass
"""


def test_a_fixtures_check_errors_with_the_same_text(pytester: pytest.Pytester) -> None:
    """A check run by a fixture, before or after the test, is pytest's ERROR (setup or
    teardown), and its text is the story of a check run by the test's body."""
    pytester.makepyfile(test_fx=_FIXTURES)
    out = _run(pytester)
    assert "GraphleakFixture object at" not in out
    assert re.search(r"\b1 passed, 2 errors\b", out), out
    where = {
        "setup of test_setup": ("test_fx.py:15: in warmed", "check(step)"),
        "teardown of test_teardown": ("test_fx.py:26: in after", "track(1)"),
    }
    for phase, (line, check) in where.items():
        match = re.search(r"_ ERROR at " + phase + r" _+\n(.*?)(?=\n_{3,} |\n={3,})", out, re.S)
        assert match, out
        failure = match.group(1).split("\n")
        assert failure[0] == line, failure
        story = failure[2:]
        test = phase.rpartition(" ")[2]
        assert story[0] == f"graphleak: test_fx.py::{test}::{check} leaks: list-accumulation"
        assert all(len(line) <= 80 for line in failure), failure
        assert not any(line.startswith("E ") for line in failure), failure
        assert _SERIES not in story, story
        _story_ends_with_its_fix(story)
        assert f"ERROR test_fx.py::{test} - list-accumulation: +1 tensor/step" in out
    # --tb=line: pytest prints an ERROR's repr (a failure's crash line it prints itself)
    lines = _run(pytester, "--tb=line").split("\n")
    for phase, (shown, _) in where.items():
        at = next(i for i, x in enumerate(lines) if f" ERROR at {phase} _" in x)
        number = shown.split(":")[1]
        # the holder follows where the line has room (CI's terminal is wider)
        assert f"test_fx.py:{number}: list-accumulation: +1 tensor/step" in lines[at + 1]


def test_colours_long_native_and_line_styles(pytester: pytest.Pytester) -> None:
    """Colours as the marker's (the headline red, the fix green); ``--tb=long`` shows every
    frame of the user's code on the way to the check, ``--tb=native`` Python's own
    traceback (every frame, the exception's whole message), ``--tb=line`` one line."""
    pytester.makepyfile(test_own=_LOOPS)
    coloured = _run(pytester, "--color=yes", "-k", "test_track")
    red, green = "\x1b[31m", "\x1b[32m"
    assert f"{red}\x1b[1mgraphleak: test_own.py::test_track::track(1) leaks: " in coloured
    assert f"{green}\x1b[1m  fix (not verified): " in coloured
    long = failure_section(_run(pytester, "--tb=long", "-k", "test_helper"), "test_helper")
    assert long.split("\n")[:4] == [
        "test_own.py:39: in test_helper",
        "    loop_of(t, [])",
        *_WHERE["test_helper"],
    ]
    native = _run(pytester, "--tb=native", "-k", "test_track")
    assert "Traceback (most recent call last):" in native
    assert "pytest_graphleak.GraphLeakError: graphleak: test_own.py::test_track::" in native
    line = _run(pytester, "--tb=line", "-k", "test_track or test_check")
    failures = line.split("= FAILURES =")[1].split("= graphleak report")[0].strip("= \n")
    assert [x.split(": ")[0].rsplit("/", 1)[-1] for x in failures.splitlines()] == [
        "test_own.py:17",
        "test_own.py:21",
    ]


def test_under_xdist_the_worker_breaks_the_lines(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(test_own=_LOOPS)
    out = _run(pytester, "-n", "2", "-k", "test_track or test_short", subprocess=True)
    for name in ("test_track", "test_short"):
        _check_failure(out, name, verbose=False)


_FIT = """
import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from pytest_graphleak.integrations.lightning import GraphLeakCallback


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
        self.losses = []

    def training_step(self, batch, batch_idx):
        (x,) = batch
        loss = self.net(x).pow(2).mean()
        self.losses.append(loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_fit(tmp_path):
    torch.set_num_threads(1)
    data = DataLoader(TensorDataset(torch.randn(32, 4)), batch_size=2)
    trainer = L.Trainer(max_steps=12, callbacks=[GraphLeakCallback(warmup=2, steps=6)],
                        default_root_dir=tmp_path, enable_progress_bar=False,
                        enable_model_summary=False, logger=False, enable_checkpointing=False)
    trainer.fit(Tiny(), data)
"""


def test_a_lightning_callbacks_leak_reads_as_the_markers(pytester: pytest.Pytester) -> None:
    # Looked up, not imported: torch imported here would change what later in-process
    # runs of this worker measure (its probes turn on).
    for name in ("torch", "lightning"):
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"{name} is not installed")
    pytester.makepyfile(test_fit=_FIT)
    out = _run(pytester, "-W", "ignore", "-p", "no:logging", "-s", subprocess=True)
    failure = failure_section(out, "test_fit").split("\n")
    assert failure[:2] == ["test_fit.py:30: in test_fit", "    trainer.fit(Tiny(), data)"]
    story = failure[2:]
    assert story[0] == "graphleak: test_fit.py::test_fit::lightning(Tiny) leaks: list-accumulation"
    assert all(len(line) <= 80 for line in failure), failure
    assert not any(line.startswith("E ") for line in failure), failure
    assert _SERIES not in story and "Trainer object at" not in out
    assert any(line.startswith("  held by: pl_module -> Tiny.losses") for line in story)
    _story_ends_with_its_fix(story)

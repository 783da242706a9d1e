"""No leaks of our own.

1. 500 checked tests in one session: alive tensors and graph nodes stay exactly flat;
   alive Python objects and RSS grow no faster than pytest's own per-test bookkeeping
   plus the result row the session reporter keeps (compact JSON text, off pytest's
   reports).
2. After a test, the plugin holds no measured tensor, no frame and no traceback: weak
   references to what a clean, a leaky and a raising step made are dead in the next test;
   what it keeps of each checked test (``report.graphleak``) is plain JSON data.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from suite_helpers import folded

pytest.importorskip("minigrad")
pytest.importorskip("pytest_graphleak.plugin")
pytest.importorskip("psutil")

CONTROL, CHECKED, EVERY = 250, 500, 50

SAMPLING_CONFTEST = f"""
import gc, json, sys
import psutil
import minigrad as mg

SAMPLES = []
COUNT = [0]

def pytest_runtest_logfinish(nodeid, location):
    COUNT[0] += 1
    if COUNT[0] % {EVERY} == 0:
        gc.collect()
        stats = mg.stats()
        SAMPLES.append({{
            "tests": COUNT[0],
            "objects": len(gc.get_objects()),
            "tensors": stats["TensorImpl"]["alive"],
            "nodes": stats["Node"]["alive"],
            "rss": psutil.Process().memory_info().rss,
        }})

def pytest_sessionfinish(session):
    with open("samples.json", "w") as fh:
        json.dump(SAMPLES, fh)
"""

# The first CONTROL tests are unmarked: they measure pytest's own per-test growth in the
# same process; the CHECKED marked tests after them are what the plugin adds.
MANY_TESTS = f"""
import pytest
import minigrad as mg

@pytest.fixture
def weights():
    return mg.Tensor([[0.5, -0.25], [1.0, 2.0]], requires_grad=True)

def step(weights):
    loss = (weights @ mg.Tensor([[1.0], [2.0]])).tanh().sum()
    loss.backward()
    weights.grad = None

@pytest.mark.parametrize("i", range({CONTROL}))
def test_control(i, weights):
    step(weights)

@pytest.mark.parametrize("i", range({CHECKED}))
@pytest.mark.no_graph_growth(steps=3, warmup=1)
def test_checked(i, weights):
    step(weights)
"""


@pytest.fixture(scope="module")
def many_tests(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One pytest session of CONTROL + CHECKED tiny tests, sampled every EVERY tests."""
    root = tmp_path_factory.mktemp("many")
    (root / "tox.ini").write_text("[pytest]\naddopts = -p no:cacheprovider -p no:randomly\n")
    (root / "conftest.py").write_text(SAMPLING_CONFTEST)
    (root / "test_many.py").write_text(MANY_TESTS)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "--graphleak",
            "--graphleak-report=r.json",
            "test_many.py",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    told = (
        f"{CHECKED} tests with results: {CHECKED} clean; {CONTROL + CHECKED} audited for "
        "graphs that outlive them"
    )
    assert told in folded(proc.stdout), proc.stdout[-2000:]
    samples = json.loads((root / "samples.json").read_text())
    # What the session reporter keeps of each checked test until the end: its row as
    # compact JSON text (the report's checks without the "metrics" it adds).
    tests = json.loads((root / "r.json").read_text())["tests"]
    row_bytes = sum(
        len(
            json.dumps(
                [
                    t["outcome"],
                    [{k: v for k, v in c.items() if k != "metrics"} for c in t["checks"]],
                ],
                separators=(",", ":"),
            )
        )
        for t in tests
    ) / len(tests)
    by_count: dict[int, dict[str, float]] = {s["tests"]: s for s in samples}

    def per_test(key: str, first: int, last: int) -> float:
        return (by_count[last][key] - by_count[first][key]) / (last - first)

    # skip the first sample of each phase: imports, caches and first-call set-up
    control = (EVERY, CONTROL)
    checked = (CONTROL + EVERY, CONTROL + CHECKED)
    return {
        "samples": samples,
        "row_bytes": row_bytes,
        "control_objects": per_test("objects", *control),
        "checked_objects": per_test("objects", *checked),
        "control_rss": per_test("rss", *control),
        "checked_rss": per_test("rss", *checked),
    }


def test_500_checked_tests_leave_no_tensor_or_node_alive(many_tests: dict[str, Any]) -> None:
    samples = many_tests["samples"]
    assert len(samples) == (CONTROL + CHECKED) // EVERY
    assert {s["tensors"] for s in samples} == {0}, samples
    assert {s["nodes"] for s in samples} == {0}, samples


def test_500_checked_tests_keep_objects_and_rss_flat(many_tests: dict[str, Any]) -> None:
    """A checked test leaves no more behind than an unchecked one, except its result row:
    compact JSON text in the session reporter (no gc-tracked object), not on pytest's
    kept reports. RSS may grow by that row plus 3 KiB of allocator effects: a kept block
    between freed temporaries leaves holes (measured +1.8 to +3.1 KiB besides a 0.7 KiB
    row at load 10 on 2 cores, with equal object counts; the spool file this replaced
    showed +0.1 to +1.2 KiB). A checked test that kept its check dicts would add 20
    gc-tracked objects, which the object count catches."""
    extra_objects = many_tests["checked_objects"] - many_tests["control_objects"]
    extra_rss = many_tests["checked_rss"] - many_tests["control_rss"]
    numbers = (
        f"objects/test: control {many_tests['control_objects']:.1f}, checked "
        f"{many_tests['checked_objects']:.1f}; RSS/test: control "
        f"{many_tests['control_rss'] / 1024:.1f} KiB, "
        f"checked {many_tests['checked_rss'] / 1024:.1f} KiB; row kept "
        f"{many_tests['row_bytes'] / 1024:.1f} KiB"
    )
    print(numbers)
    assert extra_objects <= 2, numbers
    assert extra_rss <= many_tests["row_bytes"] + 3072, numbers


# ------------------------------------------------------------ weak references

HOLD_CHECK = """
import gc, json, sys, weakref
import pytest
import minigrad as mg

REFS = {}
HISTORY = []

class Sentinel:
    \"\"\"Lives only in the step's frame: alive later only if a frame or traceback is.\"\"\"

def remember(name, obj):
    REFS.setdefault(name, []).append(weakref.ref(obj))

@pytest.fixture
def weights():
    w = mg.Tensor([[0.5, -0.25]], requires_grad=True)
    remember("fixture tensor", w)
    return w

@pytest.mark.no_graph_growth(steps=4, warmup=1)
def test_clean(weights):
    frame_only = Sentinel()
    remember("frame of a clean step", frame_only)
    loss = (weights * 2.0).sum()
    remember("loss of a clean step", loss)
    remember("node of a clean step", loss.grad_fn)
    loss.backward()

@pytest.mark.no_graph_growth(steps=4, warmup=1)
def test_leaky(weights):
    frame_only = Sentinel()
    remember("frame of a leaky step", frame_only)
    loss = (weights * 3.0).sum()
    remember("loss kept by a leaky step", loss)
    HISTORY.append(loss)

@pytest.mark.no_graph_growth(steps=4, warmup=1)
def test_raises(weights):
    frame_only = Sentinel()
    remember("frame of a raising step", frame_only)
    loss = (weights * 4.0).sum()
    remember("loss in the frame of a raising step", loss)
    raise ValueError("step failed")

@pytest.mark.no_graph_growth(steps=4, warmup=1)
def test_torch(request):
    torch = pytest.importorskip("torch")
    w = torch.ones(3, requires_grad=True)
    loss = (w * 2).sum()
    remember("torch tensor", loss)
    frame_only = Sentinel()
    remember("frame of a torch step", frame_only)
    loss.backward()

def test_nothing_is_held_afterwards():
    HISTORY.clear()  # the user's own leak: drop it, then nothing else may hold anything
    gc.collect()
    alive = sorted({name for name, refs in REFS.items() for r in refs if r() is not None})
    with open("alive.json", "w") as fh:
        json.dump({"alive": alive, "remembered": sorted(REFS)}, fh)
"""


# What the plugin keeps after a test (report.graphleak) must be plain JSON data.
PLAIN_DATA_CONFTEST = """
import json
KEPT = []
def pytest_runtest_logreport(report):
    data = getattr(report, "graphleak", None)
    if data is not None:
        json.dumps(data)  # raises on any live object: an internal error, exit code 3
        KEPT.append(report.nodeid)
def pytest_sessionfinish(session):
    with open("kept.json", "w") as fh:
        json.dump(KEPT, fh)
"""


def test_plugin_holds_no_tensor_frame_or_traceback_after_a_test(
    pytester: pytest.Pytester,
) -> None:
    """What the steps made is dead in the next test, unless pytest itself holds it, and
    what the plugin keeps of each checked test (report.graphleak) is plain JSON data.

    The same file runs once without --graphleak as the control: pytest keeps the frame of
    a failed test alive on some versions (Python 3.10 here), which is not ours to fix;
    with --graphleak nothing more may be alive than in the control.
    """
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider -p no:randomly\n")
    pytester.makeconftest(PLAIN_DATA_CONFTEST)
    pytester.makepyfile(test_hold=HOLD_CHECK)
    control = pytester.runpytest_subprocess("-rA")
    held_by_pytest = set(json.loads((pytester.path / "alive.json").read_text())["alive"])
    assert json.loads((pytester.path / "kept.json").read_text()) == []
    result = pytester.runpytest_subprocess("--graphleak", "-rA")
    out = result.stdout.str()
    assert result.ret == 1, out  # not 3: an internal error in a hook (json.dumps raised)
    assert "LEAKED test_hold.py::test_leaky" in out, out  # the leak status, not a plain failure
    # a step that raised fails with its exception: FAILED, as pytest counts it
    assert "FAILED test_hold.py::test_raises - ValueError: step failed" in out, out
    assert result.parseoutcomes().get("failed") == 2, out
    report = json.loads((pytester.path / "alive.json").read_text())
    assert len(report["remembered"]) >= 8, report  # every kind of object was made
    extra = set(report["alive"]) - held_by_pytest
    assert not extra, f"alive only with --graphleak: {sorted(extra)}; control: {control.outlines}"
    kept = json.loads((pytester.path / "kept.json").read_text())
    assert kept == [f"test_hold.py::test_{name}" for name in ("clean", "leaky", "raises", "torch")]

"""Bad input and odd tests: every one answered clearly, none crashes the plugin.

Each test is one ``pytester`` subprocess run that groups many cases (a run costs
about a second): bad marker arguments; steps that raise, skip, xfail or are
interrupted; yield fixtures, parametrization, classes, unittest; threads; gc state
set by the user; report paths that cannot be written; torch not installed; minigrad
not imported.
"""

from __future__ import annotations

import gc
import json
import os
import re
import sys
from pathlib import Path

import pytest
from suite_helpers import failure_section

pytest.importorskip("minigrad")
pytest.importorskip("pytest_graphleak.plugin")

INI = "[pytest]\naddopts = -p no:cacheprovider -p no:randomly\n"
# Runs that change process state (gc settings, a KeyboardInterrupt, a conftest that patches
# os.access or the report writer, hidden imports) are subprocesses; the others
# (usage errors, unittest methods) run in-process, where they read the same.


def only_line(text: str, needle: str) -> str:
    lines = [line for line in text.splitlines() if needle in line]
    assert len(lines) == 1, f"expected one line with {needle!r} in:\n{text}"
    return lines[0]


def unfolded(text: str) -> str:
    """``text`` with the plugin's folded lines joined: a path wider than the terminal
    folds after a ``/``, a sentence at a space, each continuation indented."""
    return re.sub(r"\n {2,}", " ", re.sub(r"/\n +", "/", text))


# ------------------------------------------------------------ marker arguments

BAD_MARKERS = """
import pytest

@pytest.mark.no_graph_growth(steps=0)
def test_zero_steps(): pass

@pytest.mark.no_graph_growth(warmup=-1)
def test_negative_warmup(): pass

@pytest.mark.no_graph_growth(steps="10")
def test_string_steps(): pass

@pytest.mark.no_graph_growth(steps=2.5)
def test_float_steps(): pass

@pytest.mark.no_graph_growth(warmup=True)
def test_bool_warmup(): pass

@pytest.mark.no_graph_growth(rss_tolerance="lots")
def test_bad_tolerance(): pass

@pytest.mark.no_graph_growth(probes="nvml")
def test_unknown_probe(): pass

@pytest.mark.no_graph_growth(stepz=10)
def test_unknown_keyword(): pass

@pytest.mark.no_graph_growth(10)
def test_positional(): pass

@pytest.mark.no_graph_growth(start_scan="quick")
def test_bad_start_scan(): pass

@pytest.mark.no_graph_growth(steps=-3)
class TestClassMarker:
    def test_method(self): pass

@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.no_graph_growth(steps=[n for n in range(3)])
def test_param(n): pass

@pytest.mark.no_graph_growth(steps=1, warmup=0)
def test_one_sample(): pass

@pytest.mark.no_graph_growth(steps=12, warmup=2)
def test_good_one(): pass
"""

# test id -> what its error line must name besides the test: the argument and the value
EXPECTED_ERRORS = {
    "test_bad.py::test_zero_steps": ("steps", "0", ">= 1"),
    "test_bad.py::test_negative_warmup": ("warmup", "-1", ">= 0"),
    "test_bad.py::test_string_steps": ("steps", "'10'", "integer"),
    "test_bad.py::test_float_steps": ("steps", "2.5", "integer"),
    "test_bad.py::test_bool_warmup": ("warmup", "True", "integer"),
    "test_bad.py::test_bad_tolerance": ("rss_tolerance", "'lots'", "size"),
    "test_bad.py::test_unknown_probe": ("probes", "nvml", "choose from"),
    "test_bad.py::test_unknown_keyword": ("stepz", "stepz", "unknown keyword"),
    "test_bad.py::test_positional": ("positional", "10", "keyword arguments only"),
    "test_bad.py::test_bad_start_scan": ("start_scan", "'quick'", "roots, heap"),
    "test_bad.py::TestClassMarker::test_method": ("steps", "-3", ">= 1"),
    "test_bad.py::test_param[1]": ("steps", "[0, 1, 2]", "integer"),
    "test_bad.py::test_param[2]": ("steps", "[0, 1, 2]", "integer"),
    "test_bad.py::test_one_sample": ("steps=1", "warmup=0", "can never flag a leak"),
}


def test_bad_marker_arguments_are_one_usage_error_naming_test_argument_and_source(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(test_bad=BAD_MARKERS)
    result = pytester.runpytest("--graphleak")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stderr.str() + result.stdout.str()
    for nodeid, (argument, value, why) in EXPECTED_ERRORS.items():
        line = only_line(text, nodeid + ":")
        assert "@pytest.mark.no_graph_growth" in line, line  # the source of the value
        assert argument in line and value in line and why in line, (nodeid, line)
    assert "test_good_one" not in text
    assert "passed" not in result.stdout.str()  # nothing ran
    # the exact wording: marker with its arguments, test id, then what is wrong
    on = "@pytest.mark.no_graph_growth"
    result.stderr.fnmatch_lines(
        [
            f"*graphleak: {on}(steps=0) on test_bad.py::test_zero_steps: "
            "steps must be an integer >= 1, got 0",
            f"graphleak: {on}(warmup=-1) on test_bad.py::test_negative_warmup: "
            "warmup must be an integer >= 0, got -1",
            f"graphleak: {on}(steps='10') on test_bad.py::test_string_steps: "
            "steps must be an integer >= 1, got '10'",
            f"graphleak: {on}(stepz=10) on test_bad.py::test_unknown_keyword: unknown keyword "
            "argument 'stepz'; expected one of steps, warmup, rss_tolerance, probes, start_scan, "
            "diagnose",
            f"graphleak: {on} on test_bad.py::test_positional: takes keyword arguments only*",
        ]
    )


# ------------------------------------------------------------ odd tests, one run

ODD_TESTS = '''
import gc, sys, threading
import pytest
import minigrad as mg

CALLS = {"raises": 0, "skip": 0, "clean_yield": 0}
LOG = []
SHARED = []

def forward():
    w = mg.Tensor([[0.5, -0.25]], requires_grad=True)
    return (w * 2.0).sum()

@pytest.mark.no_graph_growth(steps=12, warmup=2)
def test_raises_on_fifth_call():
    CALLS["raises"] += 1
    forward().backward()
    if CALLS["raises"] == 5:
        raise ValueError("boom on call 5")

@pytest.mark.no_graph_growth(steps=12, warmup=2)
def test_skip_inside_step():
    CALLS["skip"] += 1
    forward().backward()
    if CALLS["skip"] == 4:
        pytest.skip("skipped on call 4")

@pytest.mark.no_graph_growth(steps=12, warmup=2)
def test_xfail_inside_step():
    forward().backward()
    pytest.xfail("xfail inside a step")

@pytest.mark.xfail(strict=True, reason="known leak")
@pytest.mark.no_graph_growth(steps=12, warmup=2)
def test_xfail_marker_on_a_leak():
    SHARED.append(forward())

@pytest.fixture
def state():
    LOG.append("setup")
    yield {"losses": []}
    LOG.append("teardown")

@pytest.mark.no_graph_growth(steps=12, warmup=2)
def test_yield_fixture_clean(state):
    CALLS["clean_yield"] += 1
    state["losses"].append(forward().item())

def test_yield_fixture_set_up_and_torn_down_once():
    assert LOG == ["setup", "teardown"], LOG
    assert CALLS["clean_yield"] == 14

@pytest.mark.no_graph_growth(steps=12, warmup=2)
def test_yield_fixture_leaky(state):
    state["losses"].append(forward())

@pytest.mark.parametrize("keep", [True, False], ids=["leaky", "fixed"])
@pytest.mark.no_graph_growth(steps=12, warmup=2)
def test_parametrized(keep):
    loss = forward()
    SHARED.append(loss if keep else loss.item())

@pytest.mark.no_graph_growth(steps=12, warmup=2)
class TestMethods:
    def test_method_leaky(self):
        if not hasattr(self, "history"):
            self.history = []
        self.history.append(forward())

    def test_method_clean(self):
        forward().backward()

@pytest.mark.no_graph_growth(steps=12, warmup=2)
def test_thread_per_step_clean():
    out = []
    worker = threading.Thread(target=lambda: out.append(forward().item()))
    worker.start()
    worker.join()

@pytest.mark.no_graph_growth(steps=12, warmup=2)
def test_thread_per_step_leaky():
    worker = threading.Thread(target=lambda: SHARED.append(forward()))
    worker.start()
    worker.join()

@pytest.fixture
def user_gc(request):
    """A user who tuned gc before the test; the state must be theirs again after it."""
    kind = request.param
    old = (gc.isenabled(), gc.get_threshold(), gc.get_debug())
    if kind == "disabled":
        gc.disable()
    elif kind == "debug":
        gc.set_debug(gc.DEBUG_SAVEALL | gc.DEBUG_UNCOLLECTABLE)
    elif kind == "threshold":
        gc.set_threshold(5, 2, 2)
    elif kind == "frozen":
        gc.collect()
        gc.freeze()
    wanted = (gc.isenabled(), gc.get_threshold(), gc.get_debug())
    frozen = gc.get_freeze_count()
    yield kind
    got = (gc.isenabled(), gc.get_threshold(), gc.get_debug())
    after_frozen = gc.get_freeze_count()
    gc.unfreeze()
    gc.set_debug(old[2]); gc.set_threshold(*old[1]); (gc.enable if old[0] else gc.disable)()
    del gc.garbage[:]
    assert got == wanted, f"{kind}: gc state {got} after the test, user had {wanted}"
    # CPython 3.12 alone refills its permanent generation by itself under a low
    # threshold (0 -> 375 with no graphleak involved), so its freeze count says nothing.
    if sys.version_info[:2] != (3, 12):
        assert (after_frozen > 0) == (frozen > 0), f"{kind}: frozen {frozen} -> {after_frozen}"

@pytest.mark.parametrize("user_gc", ["disabled", "debug", "threshold", "frozen"], indirect=True)
@pytest.mark.no_graph_growth(steps=12, warmup=2)
# The outlive audit holds a freeze from the call's start to the end of the teardown, where
# this fixture reads gc.get_freeze_count(): a test that inspects the freeze opts out.
@pytest.mark.graphleak_outlive_ok(reason="reads gc.get_freeze_count() in its teardown")
def test_user_gc_state(user_gc):
    class Box: pass
    box = Box(); box.me = box  # cyclic garbage without tensors: not a leak
    forward().backward()
'''


def test_odd_tests_fail_pass_skip_and_xfail_as_they_should(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(test_odd=ODD_TESTS)
    result = pytester.runpytest_subprocess("--graphleak", "-rA", "--graphleak-report=r.json")
    out = result.stdout.str()
    result.assert_outcomes(passed=9, failed=5, skipped=1, xfailed=2)
    # which tests failed, and why: the raising step with its own exception, not a leak
    result.stdout.fnmatch_lines(
        [
            # a step that raised fails with its exception: FAILED, as pytest counts it
            "FAILED test_odd.py::test_raises_on_fifth_call - ValueError: boom on call 5",
            "*test_odd.py::test_yield_fixture_leaky*",
            "*test_odd.py::test_parametrized?leaky?*",
            "*test_odd.py::TestMethods::test_method_leaky*",
            "*test_odd.py::test_thread_per_step_leaky*",
        ],
        consecutive=False,
    )
    failed = {
        line.split()[1]
        for line in out.splitlines()
        if line.startswith(("FAILED", "LEAKED", "ERROR"))
    }
    assert failed == {
        "test_odd.py::test_raises_on_fifth_call",
        "test_odd.py::test_yield_fixture_leaky",
        "test_odd.py::test_parametrized[leaky]",
        "test_odd.py::TestMethods::test_method_leaky",
        "test_odd.py::test_thread_per_step_leaky",
    }, out
    # the raising step: its own traceback, and the report says at which step
    assert "list-accumulation" not in failure_section(out, "test_raises_on_fifth_call")
    if sys.version_info >= (3, 11):  # exception notes are shown from 3.11 on
        result.stdout.fnmatch_lines(["*graphleak: raised at step 5 of 14 (measured step*"])
    report = json.loads((pytester.path / "r.json").read_text())
    errors = {
        check["name"]: check["error"]
        for test in report["tests"]
        for check in test["checks"]
        if check.get("error")
    }
    assert errors == {"test_odd.py::test_raises_on_fifth_call": "ValueError: boom on call 5"}
    # every leak names its pattern and the root that holds it
    assert "fixture 'state'" in failure_section(out, "test_yield_fixture_leaky")
    assert "self" in failure_section(out, "TestMethods.test_method_leaky")
    assert "global 'SHARED'" in failure_section(out, "test_thread_per_step_leaky")
    for name in ("test_yield_fixture_leaky", "test_parametrized[leaky]", "test_method_leaky"):
        assert "list-accumulation" in failure_section(out, name), name
    result.stdout.fnmatch_lines(["SKIPPED*skipped on call 4*", "XFAIL*xfail inside a step*"])
    assert "test_user_gc_state" not in "".join(
        line for line in out.splitlines() if line.startswith(("FAILED", "ERROR"))
    )


UNITTEST_CASES = """
import unittest
import pytest
import minigrad as mg

CALLS = {"setUp": 0, "tearDown": 0, "clean": 0}

class TestLoop(unittest.TestCase):
    history = []

    def setUp(self):
        CALLS["setUp"] += 1
        self.w = mg.Tensor([0.5, -1.0], requires_grad=True)

    def tearDown(self):
        CALLS["tearDown"] += 1

    @pytest.mark.no_graph_growth(steps=6, warmup=2)
    def test_clean(self):
        CALLS["clean"] += 1
        (self.w * 2.0).tanh().sum().backward()

    @pytest.mark.no_graph_growth(steps=12, warmup=2)
    def test_leaky(self):
        self.history.append((mg.Tensor([1.0], requires_grad=True) * 2.0).sum())

    @unittest.skip("not today")
    @pytest.mark.no_graph_growth
    def test_skipped(self):
        raise AssertionError("a skipped method must not run")

    @unittest.expectedFailure
    @pytest.mark.no_graph_growth(steps=12, warmup=2)
    def test_xfail_leaky(self):
        self.history.append((mg.Tensor([1.0], requires_grad=True) * 2.0).sum())

    @pytest.mark.no_graph_growth(world_size=2)
    def test_world_size(self):
        pass

    def test_z_counts(self):
        # setUp/tearDown once per test (not per step); the clean method ran warmup + steps
        self.assertEqual(CALLS, {"setUp": 5, "tearDown": 4, "clean": 8})
"""


def test_marked_unittest_method_is_checked(pytester: pytest.Pytester) -> None:
    """unittest items never reach pytest_pyfunc_call; the marker still checks them."""
    pytester.makeini(INI)
    pytester.makepyfile(test_unit=UNITTEST_CASES)
    result = pytester.runpytest("--graphleak", "-rA")
    out = result.stdout.str()
    result.assert_outcomes(passed=2, failed=2, skipped=1, xfailed=1)
    result.stdout.fnmatch_lines_random(
        [
            "PASSED test_unit.py::TestLoop::test_clean",
            "PASSED test_unit.py::TestLoop::test_z_counts",
            "SKIPPED * not today",
            "XFAIL test_unit.py::TestLoop::test_xfail_leaky*",
            "* test_unit.py::TestLoop::test_leaky - *",  # the failure word is the reporter's
            "FAILED test_unit.py::TestLoop::test_world_size - *",
        ]
    )
    leaky = failure_section(out, "TestLoop.test_leaky")
    assert "leaks: list-accumulation" in leaky and "TestLoop.history" in leaky, leaky
    assert "Traceback" not in leaky and "plugin.py" not in leaky, leaky  # the report only
    assert "not supported on unittest.TestCase methods" in failure_section(out, "test_world_size")


# ------------------------------------------------------------ KeyboardInterrupt

INTERRUPT_CONFTEST = """
import gc, json

def pytest_configure(config):
    gc.disable()
    gc.set_threshold(3, 2, 1)
    gc.set_debug(gc.DEBUG_SAVEALL)
    config._user_gc = (gc.isenabled(), gc.get_threshold(), gc.get_debug())

def pytest_unconfigure(config):
    state = (gc.isenabled(), gc.get_threshold(), gc.get_debug())
    with open("gc_state.json", "w") as fh:
        json.dump({"user": config._user_gc, "after": state}, fh)
"""

INTERRUPT_TEST = """
import pytest
import minigrad as mg

CALLS = []

@pytest.mark.no_graph_growth(steps=12, warmup=2)
def test_interrupted():
    CALLS.append(1)
    (mg.Tensor([1.0], requires_grad=True) * 2.0).sum().backward()
    if len(CALLS) == 6:
        raise KeyboardInterrupt

def test_never_reached():
    pass
"""


def test_keyboard_interrupt_in_a_step_stops_the_run_and_restores_gc(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini(INI)
    pytester.makeconftest(INTERRUPT_CONFTEST)
    pytester.makepyfile(test_interrupt=INTERRUPT_TEST)
    result = pytester.runpytest_subprocess("--graphleak")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*KeyboardInterrupt*", "*test_interrupt.py:*"])
    assert "test_never_reached" not in result.stdout.str()
    state = json.loads((pytester.path / "gc_state.json").read_text())
    assert state["after"] == state["user"] == [False, [3, 2, 1], gc.DEBUG_SAVEALL]


# ------------------------------------------------------------ report paths


def test_report_path_in_a_missing_directory_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(test_ok="def test_ok(): pass")
    result = pytester.runpytest("--graphleak", "--graphleak-report=no/such/dir/r.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    line = only_line(result.stderr.str(), "--graphleak-report")
    assert "no/such/dir/r.json" in line and "does not exist" in line, line


#: conftest for the pytester run: ``os.access`` says no for the directory "read-only"
#: (root may write anywhere, so chmod alone cannot make one for every user).
READ_ONLY_CONFTEST = """
import os

_access = os.access


def _refuse_read_only(path, mode, *args, **kwargs):
    if os.path.basename(os.fspath(path)) == "read-only" and mode & os.W_OK:
        return False
    return _access(path, mode, *args, **kwargs)


os.access = _refuse_read_only
"""

#: conftest: the report directory passes the check, but writing the file fails (a full
#: disk, a directory made read-only during the run).
WRITE_FAILS_CONFTEST = """
import errno
from pytest_graphleak.plugin import report_files

_write = report_files.write_text_atomic


def _fail_in_out(path, text):
    if path.parent.name == "out":
        raise PermissionError(errno.EACCES, "Permission denied", str(path))
    return _write(path, text)


report_files.write_text_atomic = _fail_in_out
"""


def test_report_path_in_a_read_only_directory_is_a_usage_error(pytester: pytest.Pytester) -> None:
    directory = pytester.mkdir("read-only")
    if os.geteuid() != 0:
        directory.chmod(0o555)  # really read-only for this user
    else:
        pytester.makeconftest(READ_ONLY_CONFTEST)
    pytester.makeini(INI)
    pytester.makepyfile(test_ok="def test_ok(): pass")
    target = directory / "graphleak.json"
    try:
        result = pytester.runpytest_subprocess("--graphleak", f"--graphleak-report={target}")
    finally:
        directory.chmod(0o755)  # so pytest can clean it up
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    line = only_line(result.stderr.str(), str(target))
    assert "--graphleak-report" in line and "is not writable" in line, line
    assert "passed" not in result.stdout.str()  # refused before anything ran
    assert not target.exists()


def test_a_report_that_cannot_be_written_is_saved_elsewhere_and_said_where(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(WRITE_FAILS_CONFTEST)
    pytester.makeini(INI)
    pytester.makepyfile(
        test_ok="import pytest\n\n@pytest.mark.no_graph_growth(steps=4, warmup=1)\n"
        "def test_ok():\n    pass\n"
    )
    target = pytester.mkdir("out") / "graphleak.json"
    result = pytester.runpytest_subprocess("--graphleak", f"--graphleak-report={target}")
    text = unfolded(result.stdout.str() + result.stderr.str())
    line = only_line(text, str(target))
    assert "could not write the graphleak" in line and "Permission denied" in line, line
    saved = re.search(r"saved it to '([^']+)' instead", line)
    assert saved, line
    document = json.loads(Path(saved.group(1)).read_text(encoding="utf-8"))
    Path(saved.group(1)).unlink()
    assert [test["nodeid"] for test in document["tests"]] == ["test_ok.py::test_ok"]
    assert document["summary"]["checked"] == 1
    assert not target.exists()


# ------------------------------------------------------------ torch not installed

BLOCK_TORCH = """
import sys

class BlockTorch:
    \"\"\"Behave as if torch were not installed (never uninstall torch to test that).\"\"\"

    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, BlockTorch())
"""


def test_without_torch_and_without_minigrad(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch cannot be imported at all; one module uses minigrad, one only numpy."""
    blocker = pytester.mkdir("blocker")
    (blocker / "sitecustomize.py").write_text(BLOCK_TORCH)
    pytester.makeini(INI)
    pytester.makepyfile(
        test_minigrad="""
        import pytest, sys
        import minigrad as mg

        HISTORY = []

        def test_torch_really_is_missing():
            with pytest.raises(ModuleNotFoundError):
                import torch  # noqa: F401
            assert "torch" not in sys.modules

        def test_torch_only_is_skipped():
            pytest.importorskip("torch")

        @pytest.mark.no_graph_growth(steps=12, warmup=2)
        def test_minigrad_leaky():
            HISTORY.append((mg.Tensor([1.0], requires_grad=True) * 2.0).sum())

        @pytest.mark.no_graph_growth(steps=12, warmup=2)
        def test_minigrad_fixed():
            HISTORY.append((mg.Tensor([1.0], requires_grad=True) * 2.0).sum().item())
        """,
        test_numpy_only="""
        import sys
        import numpy as np
        import pytest

        CACHE = []

        @pytest.mark.no_graph_growth(steps=12, warmup=2)
        def test_numpy_clean():
            np.ones((256, 256)).sum()

        @pytest.mark.no_graph_growth(steps=12, warmup=2)
        def test_numpy_memory_growth():
            CACHE.append(np.ones(4 * 1024 * 1024 // 8))  # 4 MiB a step, touched

        def test_nothing_imported_minigrad_here():
            assert "torch" not in sys.modules
            # minigrad only when the other module (which imports it) is in this run
            assert "minigrad" not in sys.modules or "test_minigrad" in sys.modules
        """,
    )
    env_path = os.pathsep.join(filter(None, [str(blocker), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", env_path)
    # run the numpy-only module alone too: there minigrad is never imported
    alone = pytester.runpytest_subprocess("--graphleak", "-rA", "test_numpy_only.py")
    alone.assert_outcomes(passed=2, failed=1)
    alone.stdout.fnmatch_lines(["*test_numpy_memory_growth*memory-growth*"])
    both = pytester.runpytest_subprocess("--graphleak", "-rA")
    both.assert_outcomes(passed=4, failed=2, skipped=1)
    out = both.stdout.str()
    assert "list-accumulation" in failure_section(out, "test_minigrad_leaky")
    assert "memory-growth" in failure_section(out, "test_numpy_memory_growth")
    assert "Traceback" not in out.split("= FAILURES =")[0]  # no internal crash before tests

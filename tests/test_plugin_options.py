"""Options and marker arguments through a real pytest: precedence, validation with
"where it came from", --markers/--help, -p no:graphleak, and the minigrad-only path
where ``import torch`` fails."""

from __future__ import annotations

import pytest
from suite_helpers import FAST

# Runs are in-process (pytester.runpytest) where a fresh process adds nothing: options,
# ini files, validation and help read the same in-process.

COUNTING = """
import pytest
calls = []

@pytest.mark.no_graph_growth
def test_step():
    calls.append(1)

def test_zz_count():
    print(f"CALLS={len(calls)}")
"""


def test_ini_sets_options_and_command_line_wins(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_count=COUNTING)
    pytester.makeini("[pytest]\ngraphleak = true\ngraphleak_steps = 5\ngraphleak_warmup = 1\n")
    result = pytester.runpytest("-s", *FAST)
    result.stdout.fnmatch_lines(["*CALLS=6*"])  # ini: checking on, 1 + 5 calls
    result = pytester.runpytest("-s", "--graphleak-steps=7", *FAST)
    result.stdout.fnmatch_lines(["*CALLS=8*"])  # the command line beats the ini file
    # --graphleak off in the ini and absent on the command line: runs once
    pytester.makeini("[pytest]\ngraphleak = false\ngraphleak_steps = 5\n")
    result = pytester.runpytest("-s", *FAST)
    result.stdout.fnmatch_lines(["*CALLS=1*"])
    result = pytester.runpytest("-s", "--graphleak", "--graphleak-warmup=0", *FAST)
    result.stdout.fnmatch_lines(["*CALLS=5*"])


def test_bad_option_values_name_their_source(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_count=COUNTING)
    ini = pytester.makeini("[pytest]\ngraphleak_steps = many\n")
    result = pytester.runpytest(*FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"*graphleak: invalid graphleak_steps = many (from ini option graphleak_steps in {ini})"
            ": steps must be an integer >= 1, got 'many'"
        ]
    )
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest("--graphleak-rss-tolerance=-3", *FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*invalid --graphleak-rss-tolerance=-3 (from command line option "
            "--graphleak-rss-tolerance): rss_tolerance must be a size*"
        ]
    )


def test_markers_and_help_document_every_option(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers", *FAST)
    result.stdout.fnmatch_lines(
        [
            "@pytest.mark.no_graph_growth(steps=N, warmup=N, rss_tolerance=SIZE, probes=NAMES, "
            "start_scan=roots|heap, diagnose=BOOL, world_size=N): the test body is ONE "
            "training step.*--graphleak*"
        ]
    )
    result = pytester.runpytest("--help", *FAST)
    # one help text per option: the flag and its ini twin show the same words
    result.stdout.fnmatch_lines(
        [
            "autograd graph leaks (pytest-graphleak):",
            "*--graphleak *run @pytest.mark.no_graph_growth tests*",
            "*--graphleak-steps=N*measured steps per checked test*",
            "*--graphleak-warmup=N*unmeasured warmup steps*",
            "*--graphleak-rss-tolerance=SIZE*",
            "*--graphleak-warn-only*",
            "*graphleak (*bool*):*",
            "*run @pytest.mark.no_graph_growth tests*",
            "*graphleak_steps (*):*",
            "*measured steps per checked test*",
            "*graphleak_rss_tolerance (*):*",
            "*graphleak_probes (args):*",
            "*graphleak_warn_only (*bool*):*",
            "*graphleak_report (string):*",
        ]
    )


def test_plugin_can_be_disabled(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_count=COUNTING)
    # Subprocesses: in this process the marker stays known after the plugin registered it.
    result = pytester.runpytest_subprocess("-s", "-p", "no:graphleak", *FAST)
    result.stdout.fnmatch_lines(["*CALLS=1*"])
    result.assert_outcomes(passed=2, warnings=1)  # the marker is unknown without the plugin
    result = pytester.runpytest_subprocess("-p", "no:graphleak", "--graphleak", *FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unrecognized arguments: --graphleak*"])


BLOCK_TORCH = """
import sys

class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError("No module named 'torch' (blocked for this test)", name=name)
        return None

sys.meta_path.insert(0, _NoTorch())
"""


def test_minigrad_only_where_torch_cannot_be_imported(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("minigrad")
    pytester.makepyfile(sitecustomize=BLOCK_TORCH)
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    pytester.makepyfile(
        test_mg="""
        import sys
        import pytest
        import minigrad as mg

        kept = []

        def test_torch_is_unavailable():
            with pytest.raises(ModuleNotFoundError):
                import torch  # noqa: F401

        @pytest.mark.no_graph_growth(steps=12, warmup=2)
        def test_leaky():
            kept.append(mg.Tensor([1.0, 2.0], requires_grad=True).sum())

        @pytest.mark.no_graph_growth(steps=12, warmup=2)
        def test_fixed():
            kept[:] = [mg.Tensor([1.0, 2.0], requires_grad=True).sum().item()]

        def test_zz_no_torch_loaded():
            assert "torch" not in sys.modules
        """
    )
    result = pytester.runpytest_subprocess("--graphleak", "-rA", *FAST)
    result.stdout.fnmatch_lines(
        ["*graphleak: test_mg.py::test_leaky leaks: list-accumulation", "*minigrad.tensors*"]
    )
    result.assert_outcomes(passed=3, failed=1)

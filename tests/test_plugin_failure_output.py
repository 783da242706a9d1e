"""What pytest prints for a marked or fixture check: a failing subtest once, not once per
step; ``--tb=line`` one line per leak at the user's line; the fixture refuses a step whose
call would not run its body. In-process pytester runs (no exit code or encoding tested)."""

from __future__ import annotations

import pytest
from suite_helpers import folded

from pytest_graphleak.cli import main

pytest.importorskip("minigrad")

_LEAKY = """
import pytest
import minigrad as mg
w = mg.Tensor([1.0, 2.0], requires_grad=True)
kept = []

@pytest.mark.no_graph_growth(steps=4, warmup=1)
def test_marked():
    kept.append((w * w).sum())

def test_fixture(graphleak):
    graphleak.check(lambda: kept.append((w * w).sum()), steps=4, warmup=1)
"""


def test_tb_line_prints_one_line_per_leak_at_the_users_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_tb=_LEAKY)
    result = pytester.runpytest("--graphleak", "--tb=line", "-p", "no:randomly")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert "series (warmup | measured)" not in out and "pattern:" not in out
    failures = out.split("= FAILURES =")[1].split("= graphleak")[0].strip("= \n").splitlines()
    assert [line.split(": ")[0].rsplit("/", 1)[-1] for line in failures] == [
        "test_tb.py:6",
        "test_tb.py:11",  # the marker, the graphleak.check call
    ]
    assert all("list-accumulation" in line for line in failures)


def test_a_failing_subtest_is_reported_once(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_sub="""
        import pytest

        @pytest.mark.no_graph_growth(steps=4, warmup=1)
        def test_parts(subtests):
            with subtests.test(msg="wrong"):
                assert 1 == 2
            with subtests.test(msg="right"):
                pass
    """
    )
    if not hasattr(pytest, "Subtests"):
        pytest.skip("pytest < 9 has no subtests fixture")
    result = pytester.runpytest("--graphleak", "-p", "no:randomly")
    out = result.stdout.str()
    assert out.count("SUBFAILED[wrong]") == 1, out
    assert "contains 1 failed subtest" in out


def test_the_fixture_refuses_async_and_generator_steps(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_kinds="""
        async def run():
            pass

        def gen():
            yield

        def test_async(graphleak):
            graphleak.check(run)

        def test_generator(graphleak):
            graphleak.check(gen)
    """
    )
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*graphleak.check(step) in test_kinds.py::test_async: step is an async function*",
            "*graphleak.check(step) in test_kinds.py::test_generator: step is a generator "
            "function*",
        ]
    )


def test_the_failure_reads_in_80_columns_and_shows_each_sample_with_v(
    pytester: pytest.Pytester,
) -> None:
    """An 80-column CI log: long lines break at spaces under their label (the fix whole),
    the short summary drops the holder's links rather than cut a word; every sample's
    value only with -v; the failure's metrics in the order of the report section's."""
    pytester.makepyfile(
        test_cols="""
        import pytest
        import minigrad as mg
        w = mg.Tensor([1.0, 2.0], requires_grad=True)
        kept_losses_of_this_training_step = []

        @pytest.mark.no_graph_growth(steps=4, warmup=1)
        def test_marked_with_a_long_name():
            loss = (w * w).sum()
            kept_losses_of_this_training_step.append(loss)
    """
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COLUMNS", "80")
        patch.delenv("CI", raising=False)
        patch.delenv("BUILD_NUMBER", raising=False)
        result = pytester.runpytest("--graphleak", "-p", "no:randomly")
        verbose = pytester.runpytest("--graphleak", "-p", "no:randomly", "-v")
    lines = result.outlines
    failure = lines[lines.index(next(x for x in lines if "= FAILURES =" in x)) :]
    failure = failure[: failure.index(next(x for x in failure if "graphleak report" in x))]
    assert all(len(line) <= 80 for line in failure), failure
    assert "series (warmup | measured)" not in result.stdout.str()
    assert "series (warmup | measured):" in verbose.stdout.str()
    grew = [x.split()[0] for x in failure if x.startswith("    minigrad.")]
    assert grew == ["minigrad.tensors", "minigrad.autograd_meta", "minigrad.nodes"]
    fix = next(i for i, x in enumerate(failure) if x.startswith("  fix ("))  # verified or not
    assert failure[fix + 1].startswith("      ")  # the fix goes on under its label
    (short,) = [x for x in lines if x.startswith("LEAKED test_cols.py")]
    assert len(short) <= 80 and not short.endswith("..."), short
    assert short.endswith(" - list-accumulation"), short  # no room for the rate here


def test_a_long_test_id_folds_at_its_separators_and_an_unmeasured_headline_wraps(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """``graphleak: <id> leaks: <pattern>`` keeps ``leaks: <pattern>`` together; an id too
    long for the line folds after ``::`` and ``/`` and before ``[``, its continuation
    indented, in the failure text and the graphleak report alike: every line in 80
    columns. An unmeasured check's headline is a sentence: it breaks at spaces like the
    lines under it."""
    name = "test_training_step_does_not_leak_with_mixed_precision"
    param = "[resnet50-batch_size=64-optimizer=adamw-amp]"
    pytester.makepyfile(
        test_heads=f"""
        import pytest
        import minigrad as mg
        kept = []
        step = lambda: kept.append(mg.Tensor([1.0], requires_grad=True) * 2)

        @pytest.mark.no_graph_growth(steps=4, warmup=1)
        @pytest.mark.parametrize("arch", ["resnet50-batch_size=64-optimizer=adamw-amp"])
        def {name}(arch):
            kept.append((mg.Tensor([1.0], requires_grad=True) * 2).sum())

        @pytest.mark.parametrize("arch", ["resnet50-batch_size=64-optimizer=adamw-amp"])
        def test_check_step(graphleak, arch):
            graphleak.check(step, steps=4, warmup=1)

        @pytest.mark.no_graph_growth(steps=4, warmup=1, probes=["torch"])
        def test_unmeasured():
            (mg.Tensor([1.0], requires_grad=True) * 2).sum().backward()
    """
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COLUMNS", "80")
        result = pytester.runpytest("--graphleak", "-p", "no:randomly", "--graphleak-report=r.json")
        capsys.readouterr()
        main(["report", "r.json"])  # graphleak report, 80 columns too
        told = capsys.readouterr().out.splitlines()
    assert not [x for x in told if len(x) > 80], told
    assert f"           {param} leaks: list-accumulation" in told
    at = told.index(f"test_heads.py::test_check_step{param}")  # a check named otherwise:
    assert told[at + 1] == "    (failed):"  # its test's line, broken at its space
    lines = result.outlines
    ours = lines[lines.index(next(x for x in lines if "= FAILURES =" in x)) + 1 :]
    ours = ours[: ours.index(next(x for x in ours if x.startswith("JSON report: ")))]
    wide = [x for x in ours if len(x) > 80 and not x.startswith("_ ")]  # but pytest's own
    assert not wide, wide
    at = lines.index(f"graphleak: test_heads.py::{name}")
    assert lines[at + 1] == f"           {param} leaks: list-accumulation"
    at = lines.index(f"LEAKED  test_heads.py::{name}")
    assert lines[at + 1] == f"    {param}  list-accumulation"
    start = lines.index(next(x for x in lines if x.startswith("graphleak: test_heads.py::test_un")))
    unmeasured = lines[start : start + 3]
    assert all(len(x) <= 80 for x in unmeasured), unmeasured
    assert unmeasured[1].startswith("           ")  # on under its label


def test_warnings_and_notes_read_in_80_columns(pytester: pytest.Pytester) -> None:
    """pytest prints a warning's text as it is given: the outlive and warn-only warnings
    break their lines at spaces so that every line, pytest's ``file:line: Category:``
    headline included, fits the terminal's width, and so do the notes. The outlive
    warning is a pointer: its story is told once, in the graphleak report section."""
    pytester.makepyfile(
        test_warned="""
        import pytest
        import minigrad as mg
        KEPT = []

        def test_keeps():
            KEPT.append((mg.Tensor([1.0, 2.0], requires_grad=True) * 2).sum())

        @pytest.mark.no_graph_growth(steps=4, warmup=1)
        def test_leaks():
            KEPT.append((mg.Tensor([1.0], requires_grad=True) * 3).sum())
    """
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COLUMNS", "80")
        result = pytester.runpytest("--graphleak", "--graphleak-warn-only", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    summary = result.stdout.str().split("= warnings summary =")[1].split("-- Docs")[0]
    lines = [x for x in summary.splitlines()[1:] if x.strip()]
    heads = [x for x in lines if ": Graph" in x]  # pytest's file:line: Category: headline
    assert len(heads) == 2 and all("Warning: " in x for x in heads), lines
    assert all(len(x) <= 80 for x in lines), lines
    told = folded(summary)
    assert "held by global 'test_warned.KEPT'; the graphleak report section tells" in told
    assert "held by global 'KEPT'; see the graphleak report section" in told  # warn-only
    assert "held by: global 'test_warned.KEPT'" not in told  # the story: in the section


def test_session_notes_break_at_spaces_under_their_label() -> None:
    from pytest_graphleak.plugin.report_section import section_lines

    note = (
        "a pytest-xdist worker crashed while running tests/test_a_long_module_name.py::"
        "test_one, so it has no graphleak result (run it alone)"
    )
    lines = [line for line, _ in section_lines([], [note], False, columns=80, verbose=False)]
    assert len(lines) > 1 and all(len(x) <= 80 for x in lines), lines
    assert lines[0].startswith("note: a pytest-xdist") and lines[1].startswith("      ")


def test_an_unmeasured_short_summary_line_is_cut_at_a_word(pytester: pytest.Pytester) -> None:
    """pytest cuts a short summary line at the terminal's width, mid-word: an unmeasured
    check's reason is ended at a space with `` ...`` instead (whole in CI, as pytest
    shows it there)."""
    pytester.makepyfile(
        test_um="""
        import pytest
        import minigrad as mg

        @pytest.mark.no_graph_growth(steps=4, warmup=1, probes=["torch"])
        def test_probes_miss_the_step():
            (mg.Tensor([1.0], requires_grad=True) * 2).sum().backward()
    """
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COLUMNS", "80")
        patch.delenv("CI", raising=False)
        patch.delenv("BUILD_NUMBER", raising=False)
        cut = pytester.runpytest("--graphleak", "-p", "no:randomly")
        patch.setenv("CI", "true")
        whole = pytester.runpytest("--graphleak", "-p", "no:randomly")
    (short,) = [x for x in cut.outlines if x.startswith("UNMEASURED test_um.py") and " - " in x]
    assert len(short) <= 80 and short.endswith(" ...") and " - not measured: no " in short
    (told,) = [x for x in whole.outlines if x.startswith("UNMEASURED test_um.py") and " - " in x]
    reason = told.split(" - not measured, so no verdict: ")[1]  # whole: no " ..."
    assert reason.endswith("add minigrad to the probes"), told
    head = short.split(" - not measured: ")[1].removesuffix(" ...")
    assert reason.startswith(head) and reason[len(head)] == " ", (head, reason)


def test_an_outlive_short_summary_line_leaves_the_holder_out_rather_than_cut_a_word(
    pytester: pytest.Pytester,
) -> None:
    """pytest cuts the short summary line mid-word at the terminal's width: an outlive
    finding's message drops its holder to fit, then more (whole in CI)."""
    pytester.makepyfile(
        test_kept="""
        import minigrad as mg
        KEPT_LOSSES_OF_EVERY_TEST = []

        def test_keeps():
            KEPT_LOSSES_OF_EVERY_TEST.append((mg.Tensor([1.0], requires_grad=True) * 2).sum())
    """
    )
    args = ("--graphleak", "--graphleak-outlive=fail", "-p", "no:randomly")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COLUMNS", "80")
        patch.delenv("CI", raising=False)
        patch.delenv("BUILD_NUMBER", raising=False)
        cut = pytester.runpytest(*args)
        patch.setenv("CI", "true")
        whole = pytester.runpytest(*args)
    (short,) = [x for x in cut.outlines if x.startswith("ERROR test_kept.py")]
    assert short.endswith(" - graphleak: outlived the test: list-accumulation"), short
    assert len(short) <= 80, short
    (told,) = [x for x in whole.outlines if x.startswith("ERROR test_kept.py")]
    assert told.endswith(", held by global 'test_kept.KEPT_LOSSES_OF_EVERY_TEST'"), told

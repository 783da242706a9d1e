"""The GitHub Actions gate (``report/github.py``), a writer of the registry: workflow
commands on the line to change and a table in the step summary, from pytest (in one
process and under pytest-xdist) and from ``graphleak check``, with a fake GitHub
environment."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import minigrad  # noqa: F401  (loaded before pytester runs in-process: numpy loads once)
from pytest_graphleak.report import github, github_rows
from pytest_graphleak.report.github_rows import Row
from pytest_graphleak.report.writers import WRITER_OPTIONS, WRITERS

pytest_plugins = ["pytester"]

TESTS = """\
import minigrad as mg
import minigrad  # noqa: F401  (loaded before pytester runs in-process: numpy loads once)
import pytest

losses = []

@pytest.mark.no_graph_growth(steps=6, warmup=2)
def test_accumulates():
    x = mg.Tensor([1.0, 2.0], requires_grad=True)
    loss = (x * 2).sum()
    losses.append(loss)  # stored here

@pytest.mark.no_graph_growth(steps=6, warmup=2)
def test_clean():
    x = mg.Tensor([1.0, 2.0], requires_grad=True)
    (x * 2).sum().backward()

@pytest.mark.no_graph_growth(steps=6, warmup=2, probes="cuda")
def test_unmeasured():
    mg.Tensor([1.0], requires_grad=True) * 2
"""
STORED_LINE = TESTS.splitlines().index("    losses.append(loss)  # stored here") + 1
UNMEASURED_LINE = TESTS.splitlines().index("def test_unmeasured():")  # its decorator's line


@pytest.fixture
def github_env(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A GitHub Actions job: the workspace is the test directory; the step summary a
    file that already holds an earlier step's text (the gate appends)."""
    summary = pytester.path / "step_summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(pytester.path))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makepyfile(test_gate=TESTS)
    return summary


def _commands(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("::")]


def _message_lines(command: str) -> list[str]:
    """The lines of a workflow command's message, unescaped."""
    message = command.split("::", 2)[2]
    return [line.replace("%25", "%") for line in message.split("%0A")]


def test_annotation_on_the_storing_line_and_the_step_summary(
    pytester: pytest.Pytester, github_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    monkeypatch.setenv("GITHUB_REPOSITORY", "octo/repo")
    monkeypatch.setenv("GITHUB_SHA", "0123abc")
    result = pytester.runpytest("--graphleak", "-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=2)
    commands = _commands(result.outlines)
    assert len(commands) == 2, result.outlines
    leak = next(c for c in commands if "list-accumulation" in c)
    # The title names the line to change; the message opens with the fix.
    assert leak.startswith(
        f"::error file=test_gate.py,line={STORED_LINE},title=graphleak%3A list-accumulation "
        f"at test_gate.py%3A{STORED_LINE}::fix (verified: 8 more steps with this change grew "
        f"nothing): test_gate.py:{STORED_LINE}: losses.append(loss.item())%0A"
    ), leak  # says, as the failure text does, that the fix was verified
    lines = _message_lines(leak)
    assert lines[1].startswith("held by: global 'losses' -> list(")
    assert lines[2].startswith(
        "grows: minigrad.tensors +1/step, minigrad.autograd_meta +1/step, minigrad.nodes +"
    )
    # the stored-at code without the user's trailing comment; no markdown anywhere
    assert any(
        line.startswith("stored at: ") and line.endswith("losses.append(loss)  (once per step)")
        for line in lines
    ), lines
    assert "`" not in leak and "# stored here" not in leak
    assert lines[-1] == "test: test_gate.py::test_accumulates"
    unmeasured = next(c for c in commands if "unmeasured" in c)
    assert unmeasured.startswith(
        f"::error file=test_gate.py,line={UNMEASURED_LINE},title=graphleak%3A unmeasured at "
        f"test_gate.py%3A{UNMEASURED_LINE}::fix: add minigrad to the probes: "
    )  # the fix first, as a leak's (``CheckResult.unmeasured_fix``), then why
    assert "%0Anot measured, so no verdict: " in unmeasured
    summary = github_env.read_text()
    assert summary.startswith(
        "earlier step\n### graphleak: 1 leaked, 1 unmeasured\n\n3 tests with results: 1 leaked, "
        "1 unmeasured, 1 clean; 3 audited for graphs that outlive them.\n"
    ), summary
    assert "| Status |" not in summary  # a short block per finding, not a wide table
    link = f"https://github.com/octo/repo/blob/0123abc/test_gate.py#L{STORED_LINE}"
    assert (
        f"\U0001f534 **LEAKED** `test_gate.py::test_accumulates`<br>\nlist-accumulation at "
        f"[`test_gate.py:{STORED_LINE}`]({link})<br>\n**fix (verified: 8 more steps with "
        f"this change grew nothing):** test\\_gate.py:{STORED_LINE}: "
        "losses.append(loss.item())\n"
    ) in summary
    assert (
        "\U0001f535 **UNMEASURED** `test_gate.py::test_unmeasured`<br>\nunmeasured at " in summary
    )
    # In its details, the verified fix as a diff of the file (issue 44).
    block = summary.split(
        "The verified fix (the step re-run with it grew nothing; `graphleak "
        "fix REPORT.json --apply` writes it):\n\n```diff\n"
    )[1].split("\n```\n")[0]
    assert block.startswith("--- a/test_gate.py\n+++ b/test_gate.py\n@@ "), block
    assert "\n-    losses.append(loss)" in block and "\n+    losses.append(loss.item())" in block
    assert summary.count("The verified fix ") == 1  # the unmeasured check has none
    # clean rows are folded into a count, not listed one by one
    assert "<details><summary>\U0001f7e2 1 clean check (nothing grew)</summary>" in summary
    assert "- `test_gate.py::test_clean`: 6 steps after 2 warmup" in summary


def test_every_annotation_opens_with_its_fix(pytester: pytest.Pytester, github_env: Path) -> None:
    """A mixed suite (leaked, outlive-warned, unmeasured): the first three lines of every
    annotation hold the fix (GitHub's annotation box shows the first lines only)."""
    pytester.makepyfile(
        test_more="""
        import minigrad as mg

        kept = []

        def test_outlives():
            kept.append((mg.Tensor([1.0], requires_grad=True) * 2).sum())  # a note
        """
    )
    result = pytester.runpytest("--graphleak", "-p", "no:randomly")
    commands = _commands(result.outlines)
    assert len(commands) == 3, result.outlines
    for command in commands:
        head = _message_lines(command)[:3]
        assert head[0].startswith(("fix: ", "fix (verified: ", "fix (not verified): "))
        assert len(head[0]) > len("fix: ") + 10, command
        if "unmeasured" in command:  # no verdict: then why
            assert head[1].startswith("not measured, so no verdict: "), command
        assert "`" not in command and "# a note" not in command
    outlive = next(c for c in commands if "outlived" in c)
    assert outlive.startswith(
        "::warning file=test_more.py,line=6,title=graphleak%3A "
        "list-accumulation (outlived the test) at test_more.py%3A6::fix "
        "(not verified): "
    )


def test_code_only_drops_the_trailing_comment() -> None:
    assert github_rows.code_only("losses.append(loss)  # keep it") == "losses.append(loss)"
    assert github_rows.code_only("d['#'] = x  # a") == "d['#'] = x"
    assert github_rows.code_only("f(a,  # more follows") == "f(a,"
    assert github_rows.code_only("x = '#not a comment'") == "x = '#not a comment'"


def test_step_summary_escapes_markdown_and_links_only_with_github_facts(tmp_path: Path) -> None:
    rows = [
        Row(
            "t.py::test_a",
            "leaked",
            "cycle",
            str(tmp_path / "t.py"),
            7,
            "cycle: f.<locals>.hook closure 'x' -> x | y *z*",
            "error",
            "use __slots__",
        )
    ]
    plain = github.step_summary(rows, str(tmp_path), {"checked": 1, "leaked": 1})
    assert "cycle at `t.py:7`<br>\n**fix:** use \\_\\_slots\\_\\_\n" in plain, plain
    assert "- cycle: f.&lt;locals&gt;.hook closure 'x' -&gt; x \\| y \\*z\\*\n" in plain, plain
    linked = github.step_summary(
        rows,
        str(tmp_path),
        {"checked": 1, "leaked": 1},
        environ={
            "GITHUB_SERVER_URL": "https://ghe.example/",
            "GITHUB_REPOSITORY": "o/r",
            "GITHUB_SHA": "f00",
        },
    )
    assert "[`t.py:7`](https://ghe.example/o/r/blob/f00/t.py#L7)" in linked


@pytest.mark.parametrize(
    ("flag", "environ", "expected"),
    [(None, "true", True), ("off", "true", False), (None, "", False), ("on", "", True)],
)
def test_auto_on_off(
    pytester: pytest.Pytester,
    github_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    flag: str | None,
    environ: str,
    expected: bool,
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", environ)
    args = ["--graphleak", "-p", "no:randomly", "-k", "unmeasured"]  # no diagnosis: fast
    if flag == "off":
        pytester.makeini("[pytest]\ngraphleak_github = off\n")  # the ini twin
    elif flag:
        args.append(f"--graphleak-github={flag}")
    result = pytester.runpytest(*args)
    assert bool(_commands(result.outlines)) is expected
    assert ("### graphleak" in github_env.read_text()) is expected


def test_bad_mode_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--graphleak-github=yes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--graphleak-github=yes*must be one of auto, on, off*"])


def test_warn_only_leak_is_a_warning(pytester: pytest.Pytester, github_env: Path) -> None:
    result = pytester.runpytest("--graphleak", "--graphleak-warn-only", "-p", "no:randomly")
    commands = _commands(result.outlines)
    assert len(commands) == 2 and all(c.startswith("::warning file=") for c in commands)


def test_under_xdist_the_controller_annotates_once(
    pytester: pytest.Pytester, github_env: Path
) -> None:
    pytest.importorskip("xdist")
    result = pytester.runpytest("--graphleak", "-p", "no:randomly", "-n", "2")
    commands = _commands(result.outlines)
    assert len(commands) == 2, result.outlines
    assert any(f"file=test_gate.py,line={STORED_LINE}," in c for c in commands)
    assert github_env.read_text().count("### graphleak: 1 leaked, 1 unmeasured") == 1


def test_graphleak_check_annotates_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_graphleak.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)  # then: the current directory
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    (tmp_path / "gate_steps.py").write_text(
        "import minigrad as mg\nkept = []\n\ndef step():\n"
        "    kept.append(mg.Tensor([1.0], requires_grad=True) * 2)\n"
    )
    try:
        code = main(["check", "gate_steps.py::step", "--steps", "6", "--warmup", "2"])
    finally:
        __import__("sys").modules.pop("gate_steps", None)
    out = capsys.readouterr().out
    assert code == 1
    assert re.search(
        r"^::error file=gate_steps\.py,line=5,title=graphleak%3A "
        r"list-accumulation at gate_steps\.py%3A5::fix \(verified: .*%0Atest: "
        r"gate_steps\.py::step$",
        out,
        re.M,
    ), out


# -- the writer on its own: rows in, commands and a table out ------------------------
def test_escaping_as_github_specifies(tmp_path: Path) -> None:
    row = Row(
        "t.py::test[a,b:c]",
        "leaked",
        "cycle, 100%: x",
        str(tmp_path / "a,b.py"),
        3,
        "line one\nline two\r 50%",
        "error",
    )
    (command,) = github.commands([row], str(tmp_path))
    assert command == (
        "::error file=a%2Cb.py,line=3,title=graphleak%3A cycle%2C 100%25%3A x at a%2Cb.py%3A3::"
        "line one%0Aline two%0D 50%25%0Atest: t.py::test[a,b:c]"
    )


def test_generic_rows_from_another_part_of_the_run(tmp_path: Path) -> None:
    """Another audit adds its rows: they become commands and table rows like a check's;
    a file outside the workspace gets no file property, a clean row no command."""
    rows = [
        Row(
            "t.py::test_a",
            "leaked",
            "outlived its test",
            str(tmp_path / "t.py"),
            7,
            "a tensor made by this test is still alive after its teardown",
            "error",
        ),
        Row("t.py::test_b", "clean", "clean", "/elsewhere/t.py", 2, "16 steps"),
        Row("t.py::test_c", "warned", "cycle", "/elsewhere/t.py", 2, "kept", "warning"),
    ]
    assert github.commands(rows, str(tmp_path)) == [
        "::error file=t.py,line=7,title=graphleak%3A outlived its test at t.py%3A7::"
        "a tensor made by this test is still alive after its teardown%0Atest: t.py::test_a",
        "::warning title=graphleak%3A cycle::kept%0Atest: t.py::test_c",
    ]
    table = github.step_summary(rows, str(tmp_path), {}, others=len(rows))
    # The head counts tests by the session's summary; these rows are no test's checks.
    assert table.splitlines()[0] == "### graphleak: no test ran a graphleak check; 3 other findings"
    assert "\U0001f534 **LEAKED** `t.py::test_a`<br>\noutlived its test at `t.py:7`<br>\n" in table


def test_the_registry_names_every_writer_once() -> None:
    """A format is one module plus one entry: its option is in the options table, a file
    writer has a recogniser, a writer that is no file publishes itself or adds to another
    tool's file (JUnit: pytest's)."""
    from pytest_graphleak.options import OPTIONS_BY_KEY
    from pytest_graphleak.report.output_paths import _OWN

    assert len({writer.kind for writer in WRITERS}) == len(WRITERS)
    assert set(WRITER_OPTIONS) <= set(OPTIONS_BY_KEY)
    for writer in WRITERS:  # a file, a writer that delivers itself, or another tool's file's
        assert [writer.render, writer.publish, writer.properties].count(None) == 2
        if writer.to_file:
            assert _OWN[writer.kind][0] is writer.recognise


def test_another_part_of_the_run_adds_rows_through_the_session_report(
    pytester: pytest.Pytester, github_env: Path
) -> None:
    """An audit of its own (helper 27's after-teardown one, say) appends generic rows to
    ``extra_rows`` on the controller; they are annotated beside the checks'."""
    pytester.makeconftest(
        """
        from pytest_graphleak.report.github_rows import Row

        def pytest_sessionfinish(session):
            report = session.config.pluginmanager.get_plugin("graphleak-session-report")
            report.extra_rows.append(Row(
                "test_gate.py::test_clean", "leaked", "outlived its test",
                str(session.config.rootpath / "test_gate.py"), 3,
                "a tensor made by this test is still alive after its teardown", "error"))
        """
    )
    result = pytester.runpytest("--graphleak", "-p", "no:randomly", "-k", "clean")
    assert _commands(result.outlines) == [
        "::error file=test_gate.py,line=3,title=graphleak%3A outlived its test at "
        "test_gate.py%3A3::a tensor made by this test is still alive after its teardown%0A"
        "test: test_gate.py::test_clean"
    ]
    assert "**LEAKED** `test_gate.py::test_clean`<br>\noutlived its test" in github_env.read_text()


def test_a_cycle_is_annotated_on_its_hook_not_where_the_tensor_was_made(
    pytester: pytest.Pytester, github_env: Path
) -> None:
    """The line to change of a hook's cycle is the hook (its def line), not the line that
    made the tensor it holds (``diagnosis.change_at``)."""
    source = """\
import minigrad as mg
import pytest

w = mg.Tensor([1.0, 2.0], requires_grad=True)

@pytest.mark.no_graph_growth(steps=6, warmup=2)
def test_hook_cycle():
    t = (w * 3).relu()
    def keep(grad):  # its closure holds its own tensor
        return grad + t * 0
    t.register_hook(keep)
"""
    pytester.makepyfile(test_gate=source)
    result = pytester.runpytest("--graphleak", "-p", "no:randomly")
    (command,) = _commands(result.outlines)
    line = source.splitlines().index("    def keep(grad):  # its closure holds its own tensor") + 1
    assert command.startswith(
        f"::error file=test_gate.py,line={line},title="
        f"graphleak%3A cycle at test_gate.py%3A{line}::"
        "fix (verified: "
    ), command  # the closure's capture held weakly

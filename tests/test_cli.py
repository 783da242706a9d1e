"""The ``graphleak`` command in-process: usage errors, exit codes, check, report.

``main(argv)`` returns the exit code, so these run without a subprocess; the
end-to-end subprocess runs are in ``test_cli_e2e.py``.
"""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

from pytest_graphleak.cli import main
from pytest_graphleak.cli.exits import EXIT_CLEAN, EXIT_LEAK, EXIT_USAGE, EXIT_USER_CODE
from pytest_graphleak.demo.progress import Display, bar

STEPS_MODULE = """\
import minigrad as mg

W = mg.Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
kept = []
calls = 0

def leaky_step():
    loss = (W * 2.0).sum()
    loss.backward()
    W.grad = None
    kept.append(loss)  # the leak

def clean_step():
    loss = (W * 2.0).sum()
    loss.backward()
    W.grad = None
    kept.append(loss.item())

def raising_step():
    global calls
    calls += 1
    if calls == 4:
        raise ValueError("bad batch")

def needs_batch(batch):
    pass
"""

FAST = ["--steps", "6", "--warmup", "2"]


@pytest.fixture
def steps_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A step module with a unique name; cwd, sys.path and sys.modules restored after.
    The reports are printed unbroken (a name's length would move where an 80-column line
    breaks); the test of the 80-column layout sets COLUMNS itself."""
    monkeypatch.setenv("COLUMNS", "1000")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    name = f"cli_steps_{abs(hash(str(tmp_path)))}"
    path = tmp_path / f"{name}.py"
    path.write_text(STEPS_MODULE)
    yield path
    sys.modules.pop(name, None)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_leaky_step_exits_1_with_the_report_and_clean_exits_0(
    steps_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "check", f"{steps_file.name}::leaky_step", *FAST)
    assert code == EXIT_LEAK
    assert "leaks: list-accumulation" in out
    assert "minigrad.tensors" in out and "+1/step" in out
    assert "fix (verified: 8 more steps with this change grew nothing):" in out  # tried
    assert "kept.append(loss.item())" in out  # the stored line, changed

    code, out, _ = run(capsys, "check", f"{steps_file.name}::clean_step", *FAST)
    assert code == EXIT_CLEAN
    assert out.startswith(f"CLEAN {steps_file.name}::clean_step: nothing grew over 6 steps")
    assert "minigrad.tensors" in out  # the measured metrics are listed with sparklines


LIBRARY_HELD_MODULE = """\
import os
import sys
import sysconfig
import types

import torch

# A module that looks installed (its file is in site-packages): the start walk does not
# enter its globals, so without warmup (nothing recorded) only --start-scan heap knows
# `total` before the first step.
library = types.ModuleType("graphleak_cli_installed_metrics")
library.__file__ = os.path.join(sysconfig.get_paths()["purelib"], "graphleak_cli_metrics.py")
sys.modules[library.__name__] = library
library.total = torch.zeros(())
W = torch.ones(4, requires_grad=True)

def inplace_step():
    library.total += W.sum()  # the same tensor, a longer graph each step
"""


def test_start_scan_heap_finds_a_tensor_only_a_library_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "cli_library_held.py").write_text(LIBRARY_HELD_MODULE)
    try:
        target = "cli_library_held.py::inplace_step"
        code, out, _ = run(capsys, "check", target)  # the warmup recording sees `total`
        assert code == EXIT_LEAK and "retained-grad-fn" in out, out
        code, out, _ = run(capsys, "check", target, "--warmup", "0")
        assert code == EXIT_CLEAN, out  # the documented limit of the walk alone
        code, out, _ = run(capsys, "check", target, "--warmup", "0", "--start-scan", "heap")
        assert code == EXIT_LEAK, out
        assert "retained-grad-fn" in out and "torch.nodes" in out
    finally:
        sys.modules.pop("cli_library_held", None)
        sys.modules.pop("graphleak_cli_installed_metrics", None)


def test_several_targets_quiet_json_html_and_report_round_trip(
    steps_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    leaky, clean = f"{steps_file.name}::leaky_step", f"{steps_file.name}::clean_step"
    code, out, err = run(
        capsys, "check", clean, leaky, *FAST, "-q", "--json", "out.json", "--html", "out.html"
    )
    assert code == EXIT_LEAK  # the worst of the two
    lines = out.splitlines()  # -q: one verdict line per target, in the order given
    assert len(lines) == 2
    assert lines[0].startswith(
        f"CLEAN {clean}: nothing grew over 6 steps after 2 warmup; "
        "catches 1 object every 2 steps or faster ("
    )
    assert lines[1].startswith(f"LEAKED {leaky}: list-accumulation (")
    assert "JSON report written to out.json" in err

    document = json.loads(Path("out.json").read_text())
    assert document["generated_by"] == "graphleak check"
    statuses = {test["nodeid"]: test["status"] for test in document["tests"]}
    assert statuses == {clean: "clean", leaky: "leaked"}
    jsonschema = pytest.importorskip("jsonschema")
    from pytest_graphleak.report.json_doc import load_schema

    jsonschema.validate(document, load_schema())

    parser = _Tags()
    parser.feed(Path("out.html").read_text())
    # the page's one script is its own inline one (a filter, expand/collapse all)
    assert parser.tags["svg"] >= 2 and parser.tags.get("script") == 1

    code, out, _ = run(capsys, "report", "out.json")
    assert code == EXIT_LEAK
    assert out.splitlines()[0] == (
        "graphleak report out.json (generated by graphleak check): 2 checked: 1 leaked, 1 clean"
    )
    assert "leaks: list-accumulation" in out and f"CLEAN {clean}" in out
    # leaks first, the clean check last (the file keeps the order given)
    assert out.index("leaks: list-accumulation") < out.index(f"CLEAN {clean}")
    assert "\x1b[" not in out  # captured: no terminal, no colour

    # --color: yes colours the status words and labelled lines; NO_COLOR wins over auto
    code, out, _ = run(capsys, "report", "out.json", "--color=yes")
    assert "\x1b[32mCLEAN\x1b[0m " in out and "\x1b[32;1m  fix (" in out
    code, out, _ = run(capsys, "check", clean, *FAST, "-q", "--color=yes")
    assert out.startswith("\x1b[32mCLEAN\x1b[0m ")
    from pytest_graphleak.cli.colour import wants_colour

    class _Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert wants_colour("auto", _Tty(), {"TERM": "xterm"})
    assert not wants_colour("auto", _Tty(), {"TERM": "xterm", "NO_COLOR": "1"})
    assert not wants_colour("auto", io.StringIO(), {"TERM": "xterm"})
    assert not wants_colour("no", _Tty(), {})

    code, _, err = run(capsys, "report", "out.json", "--html", "again.html")
    assert code == EXIT_LEAK
    # The same page, but for the environment block: `check` knows the run (time, command,
    # versions); `report` re-renders a saved document and shows only its check durations.
    env = re.compile(r'<details class="env">.*?</details>')
    first, again = Path("out.html").read_text(), Path("again.html").read_text()
    assert "graphleak check " in env.search(first).group(0)  # type: ignore[union-attr]
    assert "graphleak check " not in env.search(again).group(0)  # type: ignore[union-attr]
    assert env.sub("", first) == env.sub("", again)

    # Every file writer is a flag of `report` too (writers.WRITERS): the JSON, written again.
    code, _, err = run(capsys, "report", "out.json", "--json", "again.json")
    assert code == EXIT_LEAK and "JSON report written to again.json" in err
    assert json.loads(Path("again.json").read_text()) == document


def test_clean_report_exits_0(steps_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        run(capsys, "check", f"{steps_file.name}::clean_step", *FAST, "-q", "--json", "clean.json")[
            0
        ]
        == EXIT_CLEAN
    )
    code, out, _ = run(capsys, "report", "clean.json")
    assert code == EXIT_CLEAN
    assert "1 checked: 1 clean" in out


def test_a_raising_step_exits_3_with_its_traceback(
    steps_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        capsys, "check", f"{steps_file.name}::raising_step", *FAST, "--json", "err.json"
    )
    assert code == EXIT_USER_CODE
    assert "Traceback" in err and 'raise ValueError("bad batch")' in err
    assert "graphleak: raised at step 4" in err
    assert "ERROR" in out and "ValueError: bad batch; raised at step 4 of" in out
    document = json.loads(Path("err.json").read_text())
    assert document["tests"][0]["status"] == "error"


def test_importing_a_broken_module_exits_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "broken_cli_mod.py").write_text("import json\njson.loads('{')\n")
    code, _, err = run(capsys, "check", "broken_cli_mod.py::step")
    assert code == EXIT_USER_CODE
    assert "Traceback" in err
    assert "graphleak check: importing broken_cli_mod.py raised JSONDecodeError" in err
    sys.modules.pop("broken_cli_mod", None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["check", "{f}::leaky_step", "--steps", "0"],
            "invalid --steps 0: steps must be an integer >= 1, got 0",
        ),
        (
            ["check", "{f}::leaky_step", "--steps", "ten"],
            "invalid --steps ten: steps must be an integer >= 1, got 'ten'",
        ),
        (
            ["check", "{f}::leaky_step", "--warmup", "-1"],
            "invalid --warmup -1: warmup must be an integer >= 0, got -1",
        ),
        (["check", "{f}::leaky_step", "--rss-tolerance", "lots"], "rss_tolerance"),
        (
            ["check", "{f}::leaky_step", "--start-scan", "fast"],
            "invalid --start-scan fast: start_scan must be one of roots, heap, got 'fast'",
        ),
        (["check", "{f}::leaky_step", "--probes", "nvml"], "unknown probe 'nvml'"),
        (
            ["check", "{f}::leaky_step", "--steps", "1", "--warmup", "0"],
            "steps=1 with warmup=0 can never flag a leak",
        ),
        (["check", "missing.py::step"], "error: no such file: missing.py"),
        (["check", "{f}::no_such"], "has no function 'no_such'"),
        (["check", "{f}::needs_batch"], "needs arguments (batch)"),
        (["check", "{f}"], "name the step function too"),
        (
            ["check", "{f}::clean_step", "--json", "nodir/out.json"],
            "--json 'nodir/out.json': directory 'nodir' does not exist",
        ),
        (["check", "{f}::clean_step", "--html", "."], "--html '.': is a directory"),
        (["check"], "the following arguments are required"),
        (["report", "missing.json"], "error: no such file: missing.json"),
        (["report", "bad.json"], "bad.json is not valid JSON (line 1, column 2"),
        (["report", "other.json"], "other.json is JSON but not a graphleak report"),
        (["report", "future.json"], "has report schema 99"),
        (
            ["report", "broken_check.json"],
            "broken_check.json is not a valid graphleak report: the document: the field",
        ),
        (["demo", "--steps", "0"], "argument --steps: must be an integer >= 1, got 0"),
        (["demo", "--plot", "nodir/plot.svg"], "--plot 'nodir/plot.svg': directory 'nodir'"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        ([], "usage: graphleak"),
    ],
)
def test_bad_usage_exits_2_with_a_clear_message(
    steps_file: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    Path("bad.json").write_text("{oops")
    Path("other.json").write_text('{"hello": 1}')
    Path("future.json").write_text('{"schema": 99, "tests": []}')
    Path("broken_check.json").write_text(
        '{"schema": 1, "tests": [{"nodeid": "t", "checks": [{"name": "t"}]}]}'
    )
    code, out, err = run(capsys, *(a.format(f=steps_file.name) for a in argv))
    assert code == EXIT_USAGE
    assert message in err, err
    assert not out.strip()  # nothing ran: no report was printed


def test_help_of_every_command_has_examples_and_exit_codes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for command in ([], ["demo"], ["check"], ["report"]):
        code, out, _ = run(capsys, *command, "--help")
        assert code == 0
        assert "examples:" in out, command
    code, out, _ = run(capsys, "check", "--help")
    assert "exit codes:" in out and "3  your code raised" in out


class _TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_display_redraws_a_status_line_on_a_terminal_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    tty = _TTY()
    display = Display(tty)
    display.status("run 1 [##..] 2/4")
    display.line("Step 2 | Loss 1.0000")
    display.clear_status()
    assert tty.getvalue() == (
        "\r\x1b[Krun 1 [##..] 2/4"  # status drawn
        "\r\x1b[KStep 2 | Loss 1.0000\n"  # erased, log line printed ...
        "run 1 [##..] 2/4"  # ... and the status redrawn under it
        "\r\x1b[K"
    )
    assert display.paint("LEAK", "red") == "\x1b[31mLEAK\x1b[0m"

    piped = io.StringIO()
    plain = Display(piped)
    plain.status("never shown")
    plain.line("Step 1")
    assert piped.getvalue() == "Step 1\n"
    assert plain.paint("LEAK", "red") == "LEAK"
    assert bar(5, 10, width=4) == "[##..]"


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[str, int] = {}

    def handle_starttag(self, tag: str, attrs: object) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1


def test_check_progress_is_drawn_on_a_terminal_only() -> None:
    """``graphleak check`` redraws ``step k/N`` on stderr on a TTY (then ``diagnosing``)
    and erases it; in a pipe or with -q the step is not even wrapped."""
    import io

    from pytest_graphleak.cli.check_cmd import StepProgress

    calls: list[int] = []

    def step() -> None:
        calls.append(1)

    stream = io.StringIO()
    with StepProgress("mod:step", 2, live=True, stream=stream, after_s=0, every_s=0) as progress:
        counted = progress.counted(step)
        for _ in range(3):
            counted()
    text = stream.getvalue()
    assert len(calls) == 3
    assert "graphleak check: mod:step: step 1/2" in text and "step 2/2" in text
    assert "mod:step: diagnosing" in text and text.endswith("\r\x1b[K")
    quiet = io.StringIO()
    with StepProgress("m", 2, live=False, stream=quiet, after_s=0, every_s=0) as progress:
        assert progress.counted(step) is step
    assert quiet.getvalue() == ""


def test_check_and_report_read_in_80_columns(
    steps_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An 80-column CI log: the commands break a report's lines at spaces under their
    labels, as pytest's failure text does (a headline that fits stays one line), and
    ``-q``'s one line per target is not broken."""
    monkeypatch.setenv("COLUMNS", "80")
    leaky = f"{steps_file.name}::leaky_step"
    code, out, _ = run(capsys, "check", leaky, *FAST, "--json", "out.json")
    assert code == EXIT_LEAK
    lines = out.splitlines()
    assert lines[0].startswith(f"graphleak: {leaky} leaks: ")
    assert all(len(line) <= 80 for line in lines[1:]), lines
    fix = next(i for i, line in enumerate(lines) if line.startswith("  fix ("))
    assert lines[fix + 1].startswith("      ")  # on under its label
    code, out, _ = run(capsys, "report", "out.json")
    report = out.splitlines()
    assert report[0].startswith("graphleak report out.json") and report[2] == lines[0]
    assert all(len(line) <= 80 for line in report[3:]), report
    code, out, _ = run(capsys, "check", leaky, *FAST, "-q")
    (line,) = out.splitlines()
    assert line.startswith(f"LEAKED {leaky}: list-accumulation") and len(line) > 80

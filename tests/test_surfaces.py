"""Issue 45 items 2, 4 and 5: a mixed suite with a baseline, as a new user adopts one, read
on every surface of one run: the terminal in 80 columns, the JSON and HTML reports, the
GitHub annotations and step summary, and ``graphleak report``.

One run of the suite (a subprocess: ``COLUMNS=80``, GitHub Actions' environment), shared by
every test of this module: each asserts on its real output."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from suite_helpers import FAST, REPO, JsonDoc, folded, report_section

from pytest_graphleak.baseline import load
from pytest_graphleak.baseline_keys import Key, holder_path, key_of, renamed, written_before

SUITE = """
import minigrad as mg
import pytest

history = []
kept = []
others = []


@pytest.fixture
def state():
    return {"w": mg.Tensor([[0.5, -0.25], [0.125, 1.0]], requires_grad=True), "losses": []}


def loss_of(state):
    return (mg.Tensor([[1.0, 2.0]]) @ state["w"]).tanh().sum()


@pytest.mark.no_graph_growth
def test_new_leak(state):
    loss = loss_of(state)
    loss.backward()
    state["losses"].append(loss)


@pytest.mark.no_graph_growth
def test_known_leak(state):
    history.append(loss_of(state))


@pytest.mark.no_graph_growth
def test_fixed_since(state):
    state["losses"].append(loss_of(state).item())


def test_known_outlive(state):
    kept.append(loss_of(state))


def test_new_outlive(state):
    others.append(loss_of(state))


@pytest.mark.no_graph_growth(probes=["torch"])
def test_unmeasured(state):
    loss_of(state).backward()


class Holder:
    pass


@pytest.mark.no_graph_growth
def test_known_cycle(state):
    h = Holder()
    h.me = h
    h.t = loss_of(state)
"""

REASON = "epoch losses kept for the plot until the trainer rewrite; ticket #123"
T = "test_surface.py::"
#: The file as a reviewer left it: reasons filled in, the cycle's entry as files written
#: before a cycle's key named its links spelled it (no holder), and an entry whose leak
#: was fixed since.
BASELINE = {
    "graphleak_baseline": 2,
    "findings": [
        {
            "test": f"{T}test_fixed_since",
            "check": "marker",
            "pattern": "list-accumulation",
            "holder": "fixture 'state' -> dict[*] -> list[*] -> Tensor",
            "reason": "old",
        },
        {
            "test": f"{T}test_known_cycle",
            "check": "marker",
            "pattern": "cycle",
            "holder": "",
            "reason": REASON,
        },
        {
            "test": f"{T}test_known_leak",
            "check": "marker",
            "pattern": "list-accumulation",
            "holder": "global 'history' -> list[*] -> Tensor",
            "reason": REASON,
        },
        {
            "test": f"{T}test_known_outlive",
            "check": "outlive",
            "pattern": "list-accumulation",
            "holder": "global 'kept' -> list[*] -> Tensor",
            "reason": "",
        },
    ],
}


@dataclass(frozen=True)
class Run:
    out: list[str]  # pytest's output lines
    document: JsonDoc
    html: str
    summary: str  # what was appended to $GITHUB_STEP_SUMMARY
    report: list[str]  # ``graphleak report r.json``'s output lines

    @property
    def annotations(self) -> list[str]:
        return [line for line in self.out if line.startswith("::")]

    @property
    def terminal(self) -> list[str]:
        """What a person reads: the lines but the workflow commands (which GitHub hides)."""
        return [line for line in self.out if not line.startswith("::")]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    where = tmp_path_factory.mktemp("surfaces")
    (where / "test_surface.py").write_text(SUITE, encoding="utf-8")
    (where / "bl.json").write_text(json.dumps(BASELINE, indent=2), encoding="utf-8")
    summary = where / "summary.md"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "COLUMNS": "80",
        "GITHUB_ACTIONS": "true",
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_WORKSPACE": str(where),
    }
    for name in ("PYTEST_ADDOPTS", "CI", "GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_SHA"):
        env.pop(name, None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--graphleak",
            *FAST,
            "--graphleak-probes=minigrad,gc",
            "--graphleak-baseline=bl.json",
            "--graphleak-report=r.json",
            "--graphleak-html=r.html",
            "test_surface.py",
        ],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    report = subprocess.run(
        [sys.executable, "-m", "pytest_graphleak", "report", "r.json"],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert report.returncode == 1, report.stdout + report.stderr
    return Run(
        done.stdout.splitlines(),
        json.loads((where / "r.json").read_text("utf-8")),
        (where / "r.html").read_text("utf-8"),
        summary.read_text("utf-8"),
        report.stdout.splitlines(),
    )


#: pytest's own lines about its environment, which it does not break.
_PYTESTS = ("platform ", "rootdir: ", "plugins: ", "cachedir: ", "configfile: ")


def test_every_terminal_line_fits_80_columns(run: Run) -> None:
    wide = [line for line in run.terminal if len(line) > 80 and not line.startswith(_PYTESTS)]
    assert not wide, "\n".join(wide)
    wide = [line for line in run.report if len(line) > 80]
    assert not wide, "\n".join(wide)
    # the header folds between its settings, never inside one
    at = next(i for i, line in enumerate(run.out) if line.startswith("graphleak: checking"))
    assert run.out[at + 1].startswith("    rss_tolerance=1.0 MiB/step probes=minigrad,gc")


def test_the_update_command_folds_with_shell_continuations(run: Run) -> None:
    at = run.out.index("update the baseline file with:")
    lines = run.out[
        at + 1 : at
        + 1
        + next(i for i, line in enumerate(run.out[at + 1 :], 1) if not line.endswith(" \\"))
    ]
    assert len(lines) > 1 and all(line.endswith(" \\") for line in lines[:-1]), lines
    joined = " ".join(line.removesuffix(" \\").strip() for line in lines)
    assert joined == run.document["baseline"]["update_command"]


def test_the_same_counts_on_every_surface(run: Run) -> None:
    told = run.document["summary"]
    sentence = (
        "7 tests with results: 1 leaked, 1 warned, 1 unmeasured, 3 known, 1 clean, "
        "1 fixed since the baseline; 7 audited for graphs that outlive them"
    )
    assert (told["leaked"], told["known"], told["fixed"], told["unmeasured"]) == (1, 3, 1, 1)
    assert f"graphleak: {sentence}" in folded("\n".join(run.terminal))
    assert f"{sentence[:1].upper()}{sentence[1:]}." in run.summary
    assert sentence in folded(" ".join(run.report[:4]))
    assert sentence in run.html
    assert run.summary.startswith("### graphleak: 1 leaked, 1 warned, 1 unmeasured, 3 known\n")


def test_the_reason_and_known_on_every_surface(run: Run) -> None:
    terminal = folded("\n".join(report_section(run.terminal)))
    checks = {check["name"]: check for test in run.document["tests"] for check in test["checks"]}
    for name in ("test_known_leak", "test_known_cycle"):
        assert checks[f"{T}{name}"]["known_reason"] == REASON  # the JSON
        assert f"KNOWN {T}{name}" in terminal
    assert f"known, in bl.json: {REASON}" in terminal
    assert "known, in bl.json: no reason written there yet" in terminal  # the outlive one
    assert terminal.count(f"known, in bl.json: {REASON}") == 2
    # the HTML card: first in its "what to change"
    assert html_text(run.html).count(f"known in bl.json: {REASON}") == 2
    # the step summary: folded like the clean checks, each with its reason
    known = run.summary.split("known findings (listed in bl.json")[1].split("</details>")[0]
    assert known.count("known, in bl.json: epoch losses kept") == 2
    # each annotation of a known finding says so in its title, and why first
    notices = [line for line in run.annotations if line.startswith("::notice ")]
    assert len(notices) == 3
    assert all(",title=graphleak (known%2C in bl.json)%3A " in line for line in notices)
    assert sum(f"::known, in bl.json: {REASON}%0Afix" in line for line in notices) == 2
    # ``graphleak report`` marks them, with the reason
    report = folded("\n".join(run.report))
    assert report.count(f"KNOWN, in bl.json: {REASON} (it fails nothing)") == 2


def test_known_rows_carry_their_fix(run: Run) -> None:
    rows = "\n".join(report_section(run.terminal)).split(f"KNOWN  {T}test_known_leak")[1]
    row = folded(rows.split("\nKNOWN")[0])
    assert "fix (verified: " in row and "history.append(loss_of(state).item())" in row


def test_a_cycle_written_with_no_holder_still_matches_and_its_key_names_the_links(
    run: Run,
) -> None:
    cycle = next(
        check
        for test in run.document["tests"]
        for check in test["checks"]
        if check["name"] == f"{T}test_known_cycle"
    )
    assert cycle["known"] is True
    links = cycle["diagnosis"]["cycle_links"]
    key = key_of(f"{T}test_known_cycle", name=cycle["name"], pattern="cycle", links=[], cycle=links)
    assert key.holder == "cycle: Holder.me -> Holder"
    old = Key(key.test, "marker", "cycle", "")
    assert written_before(key, [old]) == old
    other = holder_path([], [{**links[0], "type": "Other", "key": "loop"}, links[1]])
    assert other != key.holder  # another cycle in the same test is another finding


def test_each_outlive_finding_is_told_once(run: Run) -> None:
    text = "\n".join(run.terminal)
    # the warning is a pointer, under pytest's line for the test
    assert (
        "GraphOutliveWarning: graphleak: autograd graphs outlived the test: "
        "list-accumulation, held by global 'test_surface.others'; the graphleak report "
        "section tells where and the fix"
    ) in folded(text)
    for told in (
        "held by: global 'test_surface.others' -> list(len=1)",
        "kept on purpose? mark the test",
    ):
        assert folded(text).count(told) == 1, told
    assert (
        "held: Tensor(shape=(), grad_fn=SumBackward) (from global 'test_surface.others')"
        not in folded(text)
    )  # the warned row's chain once: its held by


def test_the_step_summary_opens_on_the_new_findings(run: Run) -> None:
    summary = run.summary
    order = [
        summary.index(text)
        for text in (
            f"\U0001f534 **LEAKED** `{T}test_new_leak`<br>\nlist-accumulation at `test_surface.py:",
            f"\U0001f7e1 **WARNING** `{T}test_new_outlive`",
            f"\U0001f535 **UNMEASURED** `{T}test_unmeasured`<br>\nunmeasured at ",
            "<details><summary>\u26aa 3 known findings (listed in bl.json: they fail nothing)",
            "<details><summary>\U0001f7e2 1 clean check (nothing grew)</summary>",
            "#### Fixed since the baseline (1)",
        )
    ]
    assert order == sorted(order), summary
    block = summary.split(f"**LEAKED** `{T}test_new_leak`")[1].split("\n\n")[0]
    assert "**fix (verified: " in block  # title, location, fix: the rest is folded
    details = summary.split(f"**LEAKED** `{T}test_new_leak`")[1].split("</details>")[0]
    assert "<details><summary>details</summary>" in details and "```diff" in details
    assert "|" not in summary.split("\n\n", 2)[2].split("#### Fixed")[0]  # no table


def test_graphleak_report_aligns_its_series(run: Run) -> None:
    at = run.report.index("  series (warmup | measured):")
    rows = [line for line in run.report[at + 1 : at + 4] if line.startswith("    minigrad.")]
    assert len(rows) == 3
    columns = {re.match(r"    \S+\s+", line).end() for line in rows}  # type: ignore[union-attr]
    assert len(columns) == 1, rows


def html_text(page: str) -> str:
    """The page's text: tags dropped, each run of whitespace one space."""
    return folded(re.sub(r"<[^>]+>", " ", page.replace("<wbr>", "")))


def test_the_html_lists_the_fixed_entries_with_the_update_command(run: Run) -> None:
    text = html_text(run.html)
    assert (
        f"fixed since the baseline (1, listed in {run.document['baseline']['file']}): "
        f"{T}test_fixed_since [marker] list-accumulation"
    ) in text
    assert (
        f"update the baseline file with: {run.document['baseline']['update_command']}"
        in text.replace("&#x27;", "'").replace("&quot;", '"')
    )


def test_the_baseline_parts_of_the_html_are_styled(run: Run) -> None:
    """The fixed entries' panel and a known card's "known" row have the page's own look
    (scripts/report_layout.py and Chromium screenshots checked it at 360 and 1280 px),
    and the update command is a block that scrolls sideways, not one that widens the page."""
    assert run.html.count('<dt>known</dt><dd class="known">in bl.json: ') == 3
    section = run.html.split('<section class="baseline">')[1].split("</section>")[0]
    assert f"<pre><code>{run.document['baseline']['update_command'][:20]}" in section
    css = run.html.split("<style>")[1].split("</style>")[0]
    assert re.search(r"\nsection\.baseline \{[^}]*border-left: 4px solid var\(--known\)", css)
    assert re.search(r"\.change dd\.known \{ color: var\(--known\)", css)
    assert re.search(r"\npre \{[^}]*overflow-x: auto", css)  # the command scrolls
    assert css.count("--known: ") == 2  # a colour in each theme


def test_a_nested_steps_check_is_named_by_the_step_and_old_entries_are_read_so(
    tmp_path: Path,
) -> None:
    """Item 1's leftover: ``check()`` of a step nested in the test names the step alone
    (``check(step)``, not ``check(test_x.<locals>.step)``, which made a 103-column
    headline); a file written before reads its entries so, and says how many."""
    assert renamed("check(test_x.<locals>.step)") == "check(step)"
    assert renamed("check(test_x.<locals>.<lambda>)") == "check(<lambda>)"
    assert renamed("check(helper)") == "check(helper)" and renamed("track(1)") == "track(1)"
    file = tmp_path / "bl.json"
    file.write_text(
        json.dumps(
            {
                "graphleak_baseline": 2,
                "findings": [
                    {
                        "test": "t.py::test_x",
                        "check": "check(test_x.<locals>.step)",
                        "pattern": "list-accumulation",
                        "holder": "",
                        "reason": "r",
                    }
                ],
            }
        )
    )
    loaded = load(file)
    assert loaded.renamed == 1
    assert Key("t.py::test_x", "check(step)", "list-accumulation", "") in loaded

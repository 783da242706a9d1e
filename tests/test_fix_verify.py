"""Fixes tried before they are printed (issue 44): a candidate change is compiled from
the user's source, swapped in where the step calls it, the step re-run and judged; the
first change under which nothing grows prints as verified, a change that failed never
prints, the user's function is always put back, and no file is written."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

import pytest_graphleak
from pytest_graphleak.diagnose import fix_verify
from pytest_graphleak.diagnose.fix_candidates import candidates
from pytest_graphleak.diagnose.fix_source import Edit, read_source
from pytest_graphleak.diagnose.fix_swap import compile_changed, swapped
from pytest_graphleak.result import CheckResult, CreationSite, Diagnosis, Link
from pytest_graphleak.words import verify as why

pytest_plugins = ["pytester"]
# find_spec, not importorskip: torch imported inside a pytester test is dropped from
# sys.modules after it, and a second import of torch in one process crashes.
NEEDS_TORCH = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")

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


def test_a_fix_that_holds_prints_as_verified_and_the_file_is_untouched(
    pytester: pytest.Pytester,
) -> None:
    path = pytester.makepyfile(test_keep=LEAKY)
    before = path.read_bytes(), path.stat().st_mtime_ns
    result = pytester.runpytest_subprocess("--graphleak", "-p", "no:randomly")
    result.assert_outcomes(failed=1)
    text = " ".join(result.stdout.str().split())
    assert "fix (verified: 8 more steps with this change grew nothing): " in text, text
    assert "test_keep.py:11: losses.append(loss.item())" in text, text
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before  # no file written
    assert sorted(p.name for p in pytester.path.iterdir() if p.suffix == ".py") == ["test_keep.py"]


def test_verification_off_says_not_verified_and_why(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_keep=LEAKY)
    result = pytester.runpytest_subprocess(
        "--graphleak", "--graphleak-verify-fix=off", "-p", "no:randomly"
    )
    text = " ".join(result.stdout.str().split())
    assert "fix (not verified): " in text and why.OFF in text, text
    assert "fix (verified" not in text


BUFFER = """\
import pytest
import torch


@pytest.fixture
def st():
    return {"m": torch.nn.Linear(4, 1), "buf": torch.zeros(0, 1)}


@pytest.mark.no_graph_growth
def test_cat_buffer(st):
    out = st["m"](torch.randn(3, 4))
    out.sum().backward()
    st["buf"] = torch.cat([st["buf"], out])
"""


@NEEDS_TORCH
def test_a_change_that_leaves_a_metric_growing_is_never_printed(pytester: pytest.Pytester) -> None:
    """shared/repros/round5/minor_text (c): detaching ``out`` stops the graph but the
    buffer still grows, so that change is dropped; the fix says to bound the buffer."""
    pytester.makepyfile(test_buf=BUFFER)
    result = pytester.runpytest_subprocess("--graphleak", "-p", "no:randomly")
    result.assert_outcomes(failed=1)
    text = " ".join(result.stdout.str().split())
    assert "fix (not verified): " in text, text
    assert "out.detach()" not in text and ".detach()])" not in text, text
    assert 'or bound st["buf"] (keep its last rows)' in text, text
    assert "left torch.storage_bytes growing" in text, text


SOURCE = """\
def helper(values):
    kept = []
    kept.append(sum(values))
    return kept
"""


def _helper(tmp_path: Path):  # type: ignore[no-untyped-def]
    path = tmp_path / "user_helper.py"
    path.write_text(SOURCE)
    namespace: dict[str, object] = {}
    exec(compile(SOURCE, str(path), "exec"), namespace)
    return path, namespace["helper"]


def test_the_changed_copy_runs_with_the_right_line_numbers_and_the_original_comes_back(
    tmp_path: Path,
) -> None:
    path, helper = _helper(tmp_path)
    source = read_source(str(path))
    assert source is not None
    original = helper.__code__
    edit = Edit(str(path), 3, 3, ("    kept.append(max(values))",), "kept.append(max(values))")
    code = compile_changed(helper, source, edit)
    assert code.co_filename == str(path)
    with swapped(helper, code):
        assert helper([1, 5]) == [5]
    assert helper.__code__ is original and helper([1, 5]) == [6]
    raising = Edit(str(path), 3, 3, ("    kept.append(values.nope)",), "kept.append(values.nope)")
    with (
        pytest.raises(AttributeError) as info,
        swapped(helper, compile_changed(helper, source, raising)),
    ):
        helper([1])
    assert info.traceback[-1].lineno + 1 == 3  # the changed line keeps its number
    assert helper.__code__ is original
    with pytest.raises(KeyboardInterrupt), swapped(helper, code):
        raise KeyboardInterrupt
    assert helper.__code__ is original
    assert path.read_text() == SOURCE


def test_a_candidate_that_raises_is_dropped_and_ctrl_c_propagates(tmp_path: Path) -> None:
    """``try_edit`` drops a change whose re-run raises; Ctrl-C during a re-run is not
    swallowed; either way the function is its own again."""
    path, helper = _helper(tmp_path)
    source = read_source(str(path))
    assert source is not None
    original = helper.__code__
    edit = Edit(str(path), 3, 3, ("    kept.append(values.nope)",), "kept.append(values.nope)")

    def trial() -> fix_verify.Trial:
        helper([1])
        return fix_verify.Trial((), 1)

    assert fix_verify.try_edit(edit, source, [helper], trial) == "raised AttributeError"
    assert helper.__code__ is original

    def interrupted() -> fix_verify.Trial:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fix_verify.try_edit(edit, source, [helper], interrupted)
    assert helper.__code__ is original
    assert path.read_text() == SOURCE


def _candidates_for(tmp_path: Path, body: str, links: list[Link]) -> list[Edit]:
    path = tmp_path / "user_step.py"
    path.write_text(f"def step(state, loss):\n    {body}\n")
    source = read_source(str(path))
    assert source is not None
    return candidates(source, 2, links, no_grad="torch.no_grad()")


ROOT = Link("root", "fixture", "state", edge="key", key="'total'")


def test_a_running_total_tries_its_new_value_detached_first(tmp_path: Path) -> None:
    """By the time a change is tried, the total carries the old steps' graph: ``total
    += loss.item()`` would still chain onto it, so the detached total comes first."""
    scalar = Link("tensor", "Tensor", shape=[], graph=True)
    edits = _candidates_for(tmp_path, 'state["total"] += loss', [ROOT, scalar])
    assert edits[0].shown == 'state["total"] = (state["total"] + loss).detach()'
    assert edits[0].kind == "total"
    assert [e.kind for e in edits[1:]] == ["numbers", "detach"], edits


def test_a_container_seen_to_grow_tries_plain_numbers_first(tmp_path: Path) -> None:
    """Detached tensors still pile up in a container that grows: numbers come first."""
    grown = Link("container", "list", edge="index", key="3", base="list", grows=True, grew=1)
    matrix = Link("tensor", "Tensor", shape=[4, 3], graph=True)
    edits = _candidates_for(tmp_path, "state.append(loss)", [ROOT, grown, matrix])
    assert [(e.shown, e.kind) for e in edits[:2]] == [
        ("state.append(loss.tolist())", "numbers"),
        ("state.append(loss.detach())", "detach"),
    ]
    bounded = Link("container", "deque", edge="index", key="3", base="deque", grows=True)
    edits = _candidates_for(tmp_path, "state.append(loss)", [ROOT, bounded, matrix])
    assert edits[0].shown == "state.append(loss.detach())"  # the usual order


def test_after_only_memory_grew_no_other_graph_cut_is_re_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change that cut the graph but left memory growing: another change that only
    cuts graphs cannot hold, so it is not re-run; one that empties the holder is."""
    path, helper = _helper(tmp_path)
    line = "    kept.append(sum(values))"

    def edit(new: str, kind: str) -> Edit:
        return Edit(str(path), 3, 3, (line, new) if kind == "reset" else (new,), new.strip(), kind)

    edits = [
        edit("    kept.append(max(values))", "detach"),
        edit("    kept.append(min(values))", "no_grad"),
        edit("    kept.clear()", "reset"),
    ]
    monkeypatch.setattr(fix_verify, "candidates", lambda *a, **k: edits)
    runs: list[object] = []

    def trial() -> fix_verify.Trial:
        runs.append(helper.__code__)
        held = len(runs) == 2
        return fix_verify.Trial(() if held else ("torch.storage_bytes",), 19, memory_only=True)

    site = CreationSite(str(path), 3, line.strip(), 1, "helper")
    diagnosis = Diagnosis("list-accumulation", stored_at=[site], fix="advice")
    fix = fix_verify.verify_fix(diagnosis, step=helper, roots={}, trial=trial)
    assert len(runs) == 2, "the no_grad change was skipped, the reset tried"
    assert fix.verified and fix.text.endswith(": kept.clear()"), fix


@NEEDS_TORCH
def test_a_list_a_later_backward_reads_is_cleared_after_that_backward(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """examples/torch_deferred_backward_list.py: the losses are needed with their graphs
    until every 4th step's backward, so ``.item()`` or ``.detach()`` on the storing line
    breaks it; the change verified clears the list right after that backward."""
    path = Path(__file__).resolve().parents[1] / "examples" / "torch_deferred_backward_list.py"
    spec = importlib.util.spec_from_file_location("_fix_verify_deferred", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # as an imported module is
    spec.loader.exec_module(module)
    result = pytest_graphleak.check(module.leaky_step)
    assert result.diagnosis is not None and result.diagnosis.fix_tried is not None
    tried = result.diagnosis.fix_tried
    assert tried.verified, tried
    assert tried.text.endswith(
        ":47: torch.stack(self.pending[-4:]).mean().backward(); then self.pending.clear()"
    ), tried.text
    assert "+            self.pending.clear()\n" in (tried.diff or ""), tried.diff


def _load_unregistered(path: Path, text: str) -> tuple[Path, Any]:
    """``text`` written to ``path`` and run as a module never put in ``sys.modules``."""
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"_fix_verify_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return path, module


UNREGISTERED = """\
import minigrad as mg


class Trainer:
    def __init__(self):
        self.w = mg.Tensor([1.0, 2.0], requires_grad=True)
        self.losses = []

    def step(self):
        loss = (self.w * 2).sum()
        loss.backward()
        self.losses.append(loss)


TRAINER = Trainer()


def leaky_step():
    TRAINER.step()
"""


def test_a_module_not_in_sys_modules_gets_its_fix_verified(tmp_path: Path) -> None:
    """A file loaded with ``module_from_spec`` and never put in ``sys.modules`` (as a
    script runner or a notebook tool may load one): its globals are still roots through
    its functions, its class is still the user's (by its methods' file), so the holder,
    the storing line and the fix are found and the fix is verified."""
    path, module = _load_unregistered(tmp_path / "unregistered_trainer.py", UNREGISTERED)
    assert module.__name__ not in sys.modules
    result = pytest_graphleak.check(module.leaky_step, steps=6, warmup=2)
    diagnosis = result.diagnosis
    assert diagnosis is not None and diagnosis.chain[0] == "global 'TRAINER'", diagnosis
    tried = diagnosis.fix_tried
    assert tried is not None and tried.verified, tried
    assert tried.text.endswith(":12: self.losses.append(loss.item())"), tried
    assert module.Trainer.step.__code__.co_filename == str(path)  # its own code is back
    assert "loss.item()" not in path.read_text()


TWO_HOLDERS = """\
import minigrad as mg

w = mg.Tensor([1.0, 2.0], requires_grad=True)
losses = []
outs = {}


def leaky_step():
    out = w * 2
    loss = out.sum()
    loss.backward()
    losses.append(loss)
    outs[len(outs)] = out
"""


def test_a_step_leaking_into_two_holders_gets_both_lines_changed(tmp_path: Path) -> None:
    """One change per holder would leave the other growing: the second holder's line
    (a note names it) is changed with the first, in one verified edit."""
    _, module = _load_unregistered(tmp_path / "two_holders.py", TWO_HOLDERS)
    diagnosis = pytest_graphleak.check(module.leaky_step, steps=6, warmup=2).diagnosis
    assert diagnosis is not None
    assert [s.lineno for s in diagnosis.second_stored_at] == [13], diagnosis
    tried = diagnosis.fix_tried
    assert tried is not None and tried.verified, tried
    assert tried.text.endswith(
        ":12: losses.append(loss.item()) (and line 13: outs[len(outs)] = out.tolist())"
    ), tried
    assert tried.diff is not None and tried.diff.count("\n+ ") == 2, tried.diff
    read = CheckResult.from_dict(
        json.loads(
            json.dumps(pytest_graphleak.check(module.leaky_step, steps=6, warmup=2).to_dict())
        )
    )
    assert read.diagnosis is not None and read.diagnosis.second_links, read.diagnosis

"""A fix tried before it is printed: each candidate change (``fix_candidates``) applied
in memory (``fix_swap``), the step re-run with the same fixtures and judged with the same
verdict on the same metrics (``trial``, given by the pipeline); the first change under
which the step neither raises nor grows anything is the verified fix.

``verify_fix(diagnosis, step=, roots=, trial=) -> Fix``. A change that raised or under
which a metric still grew is dropped and never printed: when none held, the fix is the
advice the diagnosis worded (``Diagnosis.fix``), marked not verified, unless that
advice is a change that failed (then the pattern's usual fix). ``not_verified`` words a
fix that could not be tried at all (a running loop, the audit, verification off).
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from pytest_graphleak.diagnose.fix_candidates import CUTS_GRAPHS, candidates
from pytest_graphleak.diagnose.fix_cycles import cycle_closures, weak_captures
from pytest_graphleak.diagnose.fix_hooks import hook_edits, pack_hooks
from pytest_graphleak.diagnose.fix_pairs import both_holders
from pytest_graphleak.diagnose.fix_source import Edit, Source, read_source, unified_diff
from pytest_graphleak.diagnose.fix_swap import compile_changed, find_function, swapped
from pytest_graphleak.exceptions import NotSwappable
from pytest_graphleak.heap.usercode import is_user_file
from pytest_graphleak.paths import display_path
from pytest_graphleak.patterns import CYCLE, FIXES
from pytest_graphleak.probes.autograd import loaded
from pytest_graphleak.result import CreationSite, Diagnosis, Fix
from pytest_graphleak.words import verify as why
from pytest_graphleak.words.lines import growth_fix


@dataclass(frozen=True)
class Trial:
    """One re-run of the step with a change in place: did a metric grow, which, and how
    many steps ran."""

    grew: tuple[str, ...]
    steps: int
    #: Every metric that grew measures memory (bytes), none counts tensors or nodes.
    memory_only: bool = False
    #: Something grew, but no metric that counts graph nodes: the change cut the graph
    #: and what the holder keeps still piles up.
    graph_cut: bool = False
    #: The outlive audit's trial: the whole test ran this many more times (``grew``
    #: then names the holders still keeping graphs after its teardown); 0 for a step's.
    runs: int = 0


def not_verified(text: str, why: str) -> Fix:
    return Fix(text=text, verified=False, why_not=why)


def verify_fix(
    diagnosis: Diagnosis,
    *,
    step: Callable[[], object],
    roots: Mapping[str, object],
    trial: Callable[[], Trial],
) -> Fix:
    """The fix of ``diagnosis`` as tried (see the module docstring)."""
    advice = diagnosis.fix or FIXES.get(diagnosis.pattern, "")
    starts = [step, *roots.values()]
    if diagnosis.pattern == CYCLE:
        return _cycle_fix(diagnosis, advice, starts, trial)
    site = _line_to_change(diagnosis)
    if site is None:
        library = any(
            not is_user_file(s.filename) for s in [*diagnosis.stored_at, *diagnosis.sites]
        )
        return not_verified(advice, why.LIBRARY if library else why.NO_LINE)
    source = read_source(site.filename)
    if source is None:
        return not_verified(advice, why.unreadable(display_path(site.filename)))
    made = next((s.lineno for s in diagnosis.sites if s.filename == site.filename), None)
    tried: list[tuple[Edit, Trial | str]] = []
    no_grad = _no_grad(site, starts)
    edits = candidates(source, site.lineno, diagnosis.links, no_grad=no_grad, made_at=made)
    second = next(
        (
            s
            for s in diagnosis.second_stored_at
            if s.filename == site.filename and s.lineno != site.lineno
        ),
        None,
    )
    if second is not None:  # a change of one holder's line leaves the other growing
        others = candidates(source, second.lineno, diagnosis.second_links, no_grad=no_grad)
        edits = both_holders(source, edits, others) or edits
    return _first_held(edits, source, starts, trial, tried) or _none_held(
        diagnosis, advice, tried, site
    )


def _cycle_fix(
    diagnosis: Diagnosis, advice: str, starts: list[object], trial: Callable[[], Trial]
) -> Fix:
    """A cycle through a hook or closure of the user's: a closure's captured variables
    held weakly (``fix_cycles``), a bound method registered as a hook reached through a
    ``WeakMethod``, a pack hook's return detached, a checkpoint made non-reentrant
    (``fix_hooks``), tried like any change; other cycles are not tried, and the clause
    says why."""
    places = [(s.filename, s.lineno) for s in diagnosis.change_at if is_user_file(s.filename)]
    places += [(f, line) for _, f, line in pack_hooks(diagnosis.cycle) if is_user_file(f)]
    tried: list[tuple[Edit, Trial | str]] = []
    done: set[str] = set()
    for filename, lineno in places:  # each file once, at its first place
        if filename in done:
            continue
        done.add(filename)
        source = read_source(filename)
        if source is None:
            continue
        at = CreationSite(filename, lineno, "", 1, "")
        weak = _module_name(at, starts, "weakref")
        edits = weak_captures(source, lineno, weak, cycle_closures(diagnosis.cycle))
        edits += hook_edits(source, diagnosis.cycle, weak, lineno)
        held = _first_held(edits, source, starts, trial, tried)
        if held is not None:
            return held
    if not tried:
        ctx = any("(ctx)." in link for link in diagnosis.cycle)
        return not_verified(advice, why.CTX_UNTRIED if ctx else why.CYCLE_UNTRIED)
    site = CreationSite(places[0][0], places[0][1], "", 1, "")
    return _none_held(diagnosis, advice, tried, site)


def _first_held(
    edits: list[Edit],
    source: Source,
    starts: list[object],
    trial: Callable[[], Trial],
    tried: list[tuple[Edit, Trial | str]],
) -> Fix | None:
    """The first of ``edits`` under which the re-run grew nothing, as the verified fix;
    None when none held (each tried one and its outcome added to ``tried``)."""
    memory_left = False
    for edit in edits:
        if memory_left and edit.kind in CUTS_GRAPHS:
            # A change left only memory growing: the graph is cut, what is kept still
            # grows; another change that only cuts graphs cannot hold either, so it is
            # not re-run (each costs the check's steps again).
            continue
        outcome = try_edit(edit, source, starts, trial)
        memory_left |= isinstance(outcome, Trial) and bool(outcome.grew) and outcome.memory_only
        if isinstance(outcome, Trial) and not outcome.grew:
            name = display_path(source.filename)
            return Fix(
                text=f"{name}:{edit.first}: {edit.shown}",
                verified=True,
                diff=unified_diff(source, edit, name),
                steps=outcome.steps,
                runs=outcome.runs,
                filename=os.path.abspath(source.filename),
                sha256=source.sha256,
            )
        tried.append((edit, outcome))
    return None


def _line_to_change(diagnosis: Diagnosis) -> CreationSite | None:
    """The ``stored at:`` line, else the first ``created at:`` line, in user code."""
    for site in [*diagnosis.stored_at, *diagnosis.sites]:
        if is_user_file(site.filename):
            return site
    return None


def try_edit(
    edit: Edit, source: Source, starts: list[object], trial: Callable[[], Trial]
) -> Trial | str:
    """The re-run with ``edit`` in place, or why it could not run or raised."""
    func = find_function(edit.filename, edit.first, starts)
    if func is None:
        return why.NOT_RUN
    try:
        code = compile_changed(func, source, edit)
    except NotSwappable as exc:
        return str(exc)
    with swapped(func, code):
        try:
            return trial()
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # a change that breaks the step is no fix
            return why.raised(exc)


def _none_held(
    diagnosis: Diagnosis, advice: str, tried: list[tuple[Edit, Trial | str]], site: CreationSite
) -> Fix:
    """No change held: the advice, unless it is one that failed; why in one clause."""
    if not tried:
        return not_verified(advice, why.NOTHING_BUILT)
    if any(edit.shown in advice for edit, _ in tried):
        advice = FIXES.get(diagnosis.pattern, advice)  # never the change that failed
    trials = [outcome for _, outcome in tried if isinstance(outcome, Trial)]
    rebuilt = growth_fix(site.line)
    if rebuilt and trials and all(t.memory_only for t in trials):
        advice = rebuilt  # the graph stopped growing, the rebuilt buffer still grows
    elif not diagnosis.kept_without_graph and any(t.graph_cut for t in trials):
        advice += why.PILED_UP  # the graph was cut, yet the holder still grows by one a step
    grown = sorted({name for t in trials for name in t.grew})
    runs = any(t.runs for t in trials)
    return not_verified(advice, why.none_held(len(tried), len(trials), grown, runs=runs))


def _no_grad(site: CreationSite, starts: Iterable[object]) -> str | None:
    """``torch.no_grad()`` (or ``mg.no_grad()`` where the code is minigrad's: the
    ``no_grad`` of an autograd library's bundle) spelled with the name the file imported
    it under; None when the file imports none."""
    for bundle, module in loaded():
        name = _module_name(site, starts, bundle.name) if hasattr(module, "no_grad") else None
        if name is not None:
            return f"{name}.no_grad()"
    return None


def _module_name(site: CreationSite, starts: Iterable[object], module: str) -> str | None:
    """The name the module of the function that runs ``site`` imported ``module`` under;
    None when it did not import it (or ``module`` is not imported at all)."""
    found = sys.modules.get(module)
    func = find_function(site.filename, site.lineno, starts)
    names = func.__globals__ if isinstance(func, types.FunctionType) else {}
    return next(
        (name for name, value in names.items() if found is not None and value is found), None
    )

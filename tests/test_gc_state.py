"""The garbage collector's state is the user's: a check must leave it exactly as found.

Users disable gc (latency-sensitive loops), raise thresholds, set debug flags
(``DEBUG_SAVEALL`` to hunt cycles) or ``gc.freeze()`` after start-up (forking servers).
The tracker changes all of these while it measures; afterwards enabled/threshold/debug/
freeze count and ``gc.garbage`` must be what they were, after a clean run, a leaky run, a
step that raises, and a KeyboardInterrupt.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from pytest_graphleak.heap.gcstate import user_frozen_count

mg = pytest.importorskip("minigrad")
tracker = pytest.importorskip("pytest_graphleak.engine.tracker")


@dataclass(frozen=True)
class Snapshot:
    enabled: bool
    threshold: tuple[int, ...]
    debug: int
    frozen: int
    garbage: int

    @classmethod
    def now(cls) -> Snapshot:
        return cls(
            gc.isenabled(),
            gc.get_threshold(),
            gc.get_debug(),
            user_frozen_count(),  # CPython 3.12 freezes objects of its own
            len(gc.garbage),
        )


def clean_step() -> None:
    w = mg.Tensor([[0.5, -0.25], [1.0, 2.0]], requires_grad=True)
    loss = (w @ mg.Tensor([[1.0], [2.0]])).tanh().sum()
    loss.backward()


_history: list[object] = []


def leaky_step() -> None:
    w = mg.Tensor([1.0, 2.0], requires_grad=True)
    _history.append((w * 3.0).sum())


def cyclic_step() -> None:
    """Clean, but makes cyclic garbage each step (a user object pointing at itself)."""

    class Box:
        pass

    box = Box()
    box.me = box  # type: ignore[attr-defined]
    box.t = mg.Tensor([1.0], requires_grad=True) * 2.0  # type: ignore[attr-defined]


def raises_at(k: int, exc: BaseException) -> Callable[[], None]:
    calls = 0

    def step() -> None:
        nonlocal calls
        calls += 1
        clean_step()
        if calls == k:
            raise exc

    return step


def _all_at_once() -> None:
    gc.disable()
    gc.set_threshold(1000, 20, 20)
    gc.set_debug(gc.DEBUG_SAVEALL)


USER_STATES: dict[str, Callable[[], None]] = {
    "default": lambda: None,
    "disabled": gc.disable,
    "threshold": lambda: gc.set_threshold(7, 3, 2),
    "debug-saveall": lambda: gc.set_debug(gc.DEBUG_SAVEALL | gc.DEBUG_UNCOLLECTABLE),
    "all-at-once": _all_at_once,
}

# name -> (a fresh step, the exception it ends with); fresh because the raisers count calls
RUNS: dict[str, Callable[[], tuple[Callable[[], object], type[BaseException] | None]]] = {
    "clean": lambda: (clean_step, None),
    "leaky": lambda: (leaky_step, None),
    "cyclic-garbage": lambda: (cyclic_step, None),
    "raises-at-step-4": lambda: (raises_at(4, ValueError("boom at 4")), ValueError),
    "raises-in-warmup": lambda: (raises_at(1, RuntimeError("boom at 1")), RuntimeError),
    "keyboard-interrupt": lambda: (raises_at(6, KeyboardInterrupt()), KeyboardInterrupt),
}


@pytest.mark.usefixtures("restore_gc")
@pytest.mark.parametrize("state", USER_STATES)
def test_gc_state_is_restored_exactly(state: str) -> None:
    USER_STATES[state]()
    gc.garbage.append("a user's saved object")  # gc.garbage is theirs too
    for name, make in RUNS.items():
        step, raised = make()
        before = Snapshot.now()
        if raised is None:
            tracker.run(step, steps=8, warmup=2)
        else:
            with pytest.raises(raised):
                tracker.run(step, steps=8, warmup=2)
        assert Snapshot.now() == before, f"{state} / {name}"
        assert gc.garbage[0] == "a user's saved object"
    _history.clear()


@pytest.mark.usefixtures("restore_gc")
def test_collection_during_the_check_does_not_obey_the_users_debug_saveall() -> None:
    """DEBUG_SAVEALL would keep every collected cycle alive: cyclic garbage would look
    like a leak. The check clears it while measuring and gives it back afterwards."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    result = tracker.run(cyclic_step, steps=12, warmup=3)
    assert gc.get_debug() == gc.DEBUG_SAVEALL
    assert gc.garbage == []
    tensors = result.series["minigrad.tensors"]
    assert max(tensors[3:]) == min(tensors[3:]), tensors


@pytest.mark.usefixtures("restore_gc")
def test_disabled_gc_still_measures_collected_heap() -> None:
    """gc disabled by the user: the check still collects before sampling, so a clean
    step with cyclic garbage is flat and the user's gc stays disabled afterwards."""
    gc.disable()
    result = tracker.run(cyclic_step, steps=12, warmup=3)
    assert not gc.isenabled()
    assert result.series["gc.cyclic_garbage"][-1] > 0  # the cycles were seen, and freed
    tensors = result.series["minigrad.tensors"]
    assert max(tensors[3:]) == min(tensors[3:]), tensors


class Cyclic:
    """A user object in a reference cycle: only the cyclic GC can free it."""

    def __init__(self) -> None:
        self.me = self


@pytest.mark.usefixtures("restore_gc")
def test_user_frozen_objects_are_restored_exactly() -> None:
    """The tracker freezes nothing when the user has: what the check left alive must not
    become permanent, and the freeze count is what it was."""
    made: list[Cyclic] = []
    gc.collect()
    gc.freeze()
    before = gc.get_freeze_count()

    def step() -> None:
        clean_step()
        if not made:
            made.append(Cyclic())  # alive when the check ends, garbage right after

    tracker.run(step, steps=8, warmup=2)
    probe = weakref.ref(made[0])
    made.clear()
    gc.collect()
    assert probe() is None, "an object made during the check was left frozen"
    assert gc.get_freeze_count() == before


@pytest.mark.usefixtures("restore_gc")
def test_user_frozen_objects_stay_frozen() -> None:
    """Frozen stays frozen: after every kind of run what the user froze is still frozen and
    nothing is frozen on top of it."""
    sentinel: list[object] = []  # gc.get_objects() skips it while it is frozen
    gc.collect()
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        for make in RUNS.values():
            step, raised = make()
            if raised is None:
                tracker.run(step, steps=6, warmup=2)
            else:
                with pytest.raises(raised):
                    tracker.run(step, steps=6, warmup=2)
            # Nothing was unfrozen, nothing frozen on top. (At most: another thread of the
            # process, e.g. an xdist worker's, may free frozen objects of its own meanwhile.)
            assert not any(obj is sentinel for obj in gc.get_objects())
            assert gc.get_freeze_count() <= before
    finally:
        _history.clear()
        gc.unfreeze()  # the rest of the session (an xdist worker's next tests) runs unfrozen


FROZEN_BEFORE_IMPORT = """
import gc
import subprocess
import sys
kept = [[i] for i in range(2000)]  # e.g. a forking server's start-up state
gc.collect()
gc.freeze()
from pytest_graphleak import check  # imported after the user's freeze
import minigrad as mg

history = []

def clean():
    (mg.Tensor([1.0, 2.0], requires_grad=True) * 3.0).sum().backward()

def leaky():
    history.append((mg.Tensor([1.0, 2.0], requires_grad=True) * 3.0).sum())

check(clean, steps=6, warmup=2)  # its first imports free a few frozen objects by refcount
frozen = gc.get_freeze_count()
clean_result = check(clean, steps=6, warmup=2, raise_on_leak=False)
after_clean = gc.get_freeze_count()
leak_result = check(leaky, steps=6, warmup=2, raise_on_leak=False)
unfrozen = {id(o) for o in gc.get_objects()}  # frozen objects are not listed
still_frozen = id(kept) not in unfrozen and not any(id(x) in unfrozen for x in kept)
print(frozen, after_clean, gc.get_freeze_count(), still_frozen, clean_result.leaked,
      leak_result.leaked, leak_result.pattern)
"""


def test_objects_frozen_before_the_plugin_is_imported_stay_frozen() -> None:
    """A freeze made before ``import pytest_graphleak`` is the user's too (13.9): the
    state is recorded when the check begins, not when the module is imported."""
    done = subprocess.run(
        [sys.executable, "-c", FROZEN_BEFORE_IMPORT],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    frozen, after_clean, after_leak, still_frozen, clean, leaked, pattern = done.stdout.split()
    assert int(frozen) > 2000
    assert after_clean == frozen and after_leak == frozen and still_frozen == "True", done.stdout
    assert (clean, leaked, pattern) == ("False", "True", "list-accumulation"), done.stdout


def test_only_gcstate_changes_the_gc_state() -> None:
    """One owner: every other module goes through ``heap.gcstate``."""
    import ast
    from pathlib import Path

    import pytest_graphleak

    changing = {"freeze", "unfreeze", "disable", "enable", "set_debug", "set_threshold"}
    package = Path(pytest_graphleak.__file__).parent
    offenders = []
    for path in sorted(package.rglob("*.py")):
        if path == package / "heap" / "gcstate.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in changing
                and isinstance(node.value, ast.Name)
                and node.value.id == "gc"
            ):
                offenders.append(f"{path.relative_to(package)}:{node.lineno} gc.{node.attr}")
    assert offenders == []

"""Did the check measure what the step uses? No silent clean verdict (the user's side:
``docs/limits.md``, "Probes that measure nothing the step uses").

A probe is chosen when the check starts, for the libraries imported by then, so a check
can end up measuring nothing the step uses (torch imported inside the step,
``probes=minigrad`` on a torch step, ``probes=cuda`` without a GPU). ``Coverage`` watches:

* an autograd library imported during the first step is measured from the end of that
  step on (its probe starts late, with a full series: nothing of the library existed
  before); imported during a later step, the samples before are missing, so the check
  is *unmeasured*;
* a loaded library without a probe is *used* by the step when the step makes its
  tensors (minigrad's ``created`` counter moves), reaches or keeps them (a torch tensor
  in the start set or among the objects the step leaves alive), or when the step's own
  module imports it;
* the check is *unmeasured* when no probe runs at all, or when the step uses an autograd
  library without a probe and no autograd probe measured anything the step uses (unless
  the probes asked for were memory only: ``probes=process`` is a choice, not a blind
  spot). A used library left unmeasured beside a measured one only adds a note.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

from pytest_graphleak.metrics import count_of
from pytest_graphleak.probes import ABSENT as _ABSENT
from pytest_graphleak.probes import BACKENDS
from pytest_graphleak.probes.base import ProbeBase


def minigrad_created() -> int | None:
    """Tensors minigrad has made so far (None when it is not imported)."""
    try:
        return int(sys.modules["minigrad"].stats()["TensorImpl"]["created"])
    except Exception:  # not imported, or a minigrad without these stats
        return None


class TorchUse(ProbeBase):
    """A metric-less probe: does the step reach or keep torch tensors although no torch
    probe runs? It looks at the start set and at the objects each step leaves alive,
    and stops looking once it has seen one."""

    name = "torch-use"
    needs_heap = True  # no metrics: it measures nothing the verdict judges

    def __init__(self) -> None:
        self.seen = ""

    def available(self) -> bool:
        return "torch" in sys.modules

    def _look(self, objects: Sequence[object], template: str) -> None:
        if self.seen or not objects:
            return
        from pytest_graphleak.probes.torch_probe import tensors_among

        found = tensors_among(objects)
        if found:
            self.seen = template.format(f"{len(found)} torch tensor(s)")
        found.clear()

    def start(self, heap: Sequence[object]) -> None:
        self._look(heap, "the step reaches {}")

    def absorb(self, fresh: Sequence[object]) -> None:
        self._look(fresh, "the step keeps {} alive")

    def sample(self, fresh: Sequence[object]) -> dict[str, float]:
        self.absorb(fresh)
        return {}


class Coverage:
    """What one check measured and what its step used; see the module docstring."""

    def __init__(self, wanted: Collection[str] | None, probes: Sequence[Any]) -> None:
        self._wanted = None if wanted is None else list(wanted)
        self._active = {probe.name for probe in probes}
        self._loaded = {lib for lib in BACKENDS if lib in sys.modules}
        self._created = minigrad_created()
        self._evidence: dict[str, list[str]] = {}
        self._appeared: dict[str, int] = {}
        self.watchers: list[TorchUse] = []
        if "torch" in self._loaded and "torch" not in self._active:
            self.watchers.append(TorchUse())

    def wants(self, name: str) -> bool:
        return self._wanted is None or name in self._wanted

    def look_at_roots(self, roots: Iterable[object]) -> None:
        """Note that the step's own module imports torch (minigrad's ``created`` counter
        tells exactly whether the step uses it)."""
        if "torch" in self._loaded and "torch" not in self._active and _imports(roots, "torch"):
            self._evidence.setdefault("torch", []).append("the step's module imports torch")

    def after_step(self, call: int) -> list[str]:
        """Libraries imported during step ``call``: those to measure from now on (the
        first step's, when asked for); a later step's are unmeasured."""
        late = []
        for lib in BACKENDS:
            if lib in self._loaded or lib in self._appeared or lib not in sys.modules:
                continue
            self._appeared[lib] = call
            if call == 1 and self.wants(lib):
                self._active.add(lib)
                late.append(lib)
            else:
                self._evidence.setdefault(lib, []).append(
                    f"{lib} was first imported inside the step, at step {call}"
                )
        return late

    def started(self, name: str) -> None:
        self._active.add(name)

    def conclude(self, series: Mapping[str, Sequence[float]]) -> tuple[str, list[str]]:
        """``(why the check is unmeasured or "", notes)`` once the check has ended."""
        used = self._used(series)
        measured = [name for name in self._active if name in _ABSENT]
        if not series:
            return self._nothing_measured(used), []
        late = [lib for lib, call in self._appeared.items() if call > 1 and self.wants(lib)]
        if late:
            lib = late[0]
            return (
                f"no probe measured {lib}: it was first imported inside the step, at step "
                f"{self._appeared[lib]}, after the check had started; import {lib} before "
                "the check (at the top of the test module, or in a fixture)"
            ), []
        unprobed = {lib: why for lib, why in used.items() if lib not in self._active}
        if not unprobed:
            return "", []
        measured_used = [lib for lib in used if lib in self._active]
        asked_backend = self._wanted is None or any(n in BACKENDS for n in self._wanted)
        texts = {lib: self._unprobed_text(lib, why) for lib, why in unprobed.items()}
        if asked_backend and not measured_used:
            lib, text = next(iter(texts.items()))
            return (
                f"no probe measured {lib}: {text}, and the probes that ran "
                f"({', '.join(sorted(measured)) or 'none'}) measured nothing the step uses; "
                f"add {lib} to the probes"
            ), []
        return "", [f"{lib} was not measured: {text}" for lib, text in texts.items()]

    def _unprobed_text(self, lib: str, why: list[str]) -> str:
        text = f"{'; '.join(why)}, but no {lib} probe ran"
        if self._wanted is not None and lib not in self._wanted:
            text += f" (probes={','.join(self._wanted)})"
        return text

    def _used(self, series: Mapping[str, Sequence[float]]) -> dict[str, list[str]]:
        used = {lib: list(why) for lib, why in self._evidence.items()}
        made = (minigrad_created() or 0) - (self._created or 0)
        if made > 0:
            made_text = f"the step made {count_of(made, 'minigrad tensor')}"
            used.setdefault("minigrad", []).append(made_text)
        for watcher in self.watchers:
            if watcher.seen:
                used.setdefault("torch", []).append(watcher.seen)
        # The torch probe counts only what the step reaches or makes: anything counted is
        # the step's. (minigrad's counts are process-wide: its ``created`` counter decides.)
        if "torch" in self._active and any(
            value > 0
            for metric, values in series.items()
            if metric.startswith("torch.")
            for value in values
        ):
            used.setdefault("torch", []).append("the torch probe counted the step's objects")
        return used

    def _nothing_measured(self, used: Mapping[str, list[str]]) -> str:
        absent = [
            f"{name}: {_ABSENT[name]}"
            for name in (self._wanted or [])
            if name in _ABSENT and name not in self._active
        ]
        text = "no probe measured anything"
        if absent:
            text += f" ({'; '.join(absent)})"
        if used:
            lib, why = next(iter(used.items()))
            text += f"; yet {'; '.join(why)}: add {lib} to the probes"
        return text


def _imports(roots: Iterable[object], lib: str) -> bool:
    return any(
        isinstance(value, types.ModuleType)
        and (value.__name__ == lib or value.__name__.startswith(lib + "."))
        for namespace in _namespaces(roots)
        for value in list(namespace.values())
    )


def _namespaces(roots: Iterable[object]) -> Iterator[dict[str, Any]]:
    """Module globals the step runs in: of the step function, of the functions its
    closure calls (the plugin wraps the test function), and globals dicts passed as roots
    (``track()`` passes its caller's)."""
    for root in roots:
        if type(root) is dict and "__name__" in root and "__builtins__" in root:
            yield root
            continue
        func = getattr(root, "__func__", root)
        if not isinstance(func, types.FunctionType):
            continue
        yield func.__globals__
        for cell in func.__closure__ or ():
            try:
                inner = getattr(cell.cell_contents, "__func__", cell.cell_contents)
            except ValueError:  # an empty cell
                continue
            if isinstance(inner, types.FunctionType):
                yield inner.__globals__

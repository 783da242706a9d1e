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
  tensors (its bundle's ``made`` counter moves: minigrad's), reaches or keeps them (its
  bundle's ``watcher`` sees one in the start set or among the objects the step leaves
  alive: torch's), or, for a library that cannot count what it made, when the step's
  own module imports it (the evidence comes from ``probes/autograd``'s bundles);
* the check is *unmeasured* when no probe runs at all, or when the step uses an autograd
  library without a probe and no autograd probe measured anything the step uses (unless
  the probes asked for were memory only: ``probes=process`` is a choice, not a blind
  spot). A used library left unmeasured beside a measured one only adds a note.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from pytest_graphleak.metrics import count_of
from pytest_graphleak.probes import ABSENT as _ABSENT
from pytest_graphleak.probes import BACKENDS
from pytest_graphleak.probes.autograd import BUNDLES, AutogradBundle


def made_so_far(bundle: AutogradBundle) -> int | None:
    """Tensors the library has made so far (None: not imported, or it cannot tell)."""
    module = sys.modules.get(bundle.name)
    if module is None or bundle.made is None:
        return None
    try:
        return bundle.made(module)
    except Exception:  # a version of the library without this counter
        return None


class Conclusion(NamedTuple):
    """What ``Coverage.conclude`` found: why the check is unmeasured ("" when it measured),
    what to change for it, with its syntax ("" when no change is known), and remarks on a
    library left unmeasured beside a measured one."""

    why: str = ""
    fix: str = ""
    notes: tuple[str, ...] = ()


def add_probe_fix(lib: str) -> str:
    """The change for a library the step uses that no probe measured."""
    return (
        f'add {lib} to the probes: probes=["{lib}", ...] on the marker, check() or '
        f"track(), or --graphleak-probes={lib},..."
    )


def import_first_fix(lib: str) -> str:
    """The change for a library first imported inside a later step."""
    return f"import {lib} before the check: at the top of the test module, or in a fixture"


class Coverage:
    """What one check measured and what its step used; see the module docstring."""

    def __init__(self, wanted: Collection[str] | None, probes: Sequence[Any]) -> None:
        self._wanted = None if wanted is None else list(wanted)
        self._active = {probe.name for probe in probes}
        self._loaded = {lib for lib in BACKENDS if lib in sys.modules}
        self._made = {bundle.name: made_so_far(bundle) for bundle in BUNDLES}
        self._evidence: dict[str, list[str]] = {}
        self._appeared: dict[str, int] = {}
        #: Metric-less probes, one per library loaded but not probed that has a watcher.
        self._watching: dict[str, Any] = {
            bundle.name: bundle.watcher() for bundle in self._unprobed() if bundle.watcher
        }
        self.watchers: list[Any] = list(self._watching.values())

    def wants(self, name: str) -> bool:
        return self._wanted is None or name in self._wanted

    def _unprobed(self) -> list[AutogradBundle]:
        """The libraries loaded when the check began that no probe measures."""
        return [
            bundle
            for bundle in BUNDLES
            if bundle.name in self._loaded and bundle.name not in self._active
        ]

    def look_at_roots(self, roots: Iterable[object]) -> None:
        """Note that the step's own module imports a library not probed (one that counts
        the tensors it made tells exactly whether the step uses it instead)."""
        for bundle in self._unprobed():
            if bundle.made is None and _imports(roots, bundle.name):
                self._evidence.setdefault(bundle.name, []).append(
                    f"the step's module imports {bundle.name}"
                )

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

    def conclude(self, series: Mapping[str, Sequence[float]]) -> Conclusion:
        """Why the check is unmeasured (or ""), what to change, and the notes, once the
        check has ended."""
        used = self._used(series)
        measured = [name for name in self._active if name in _ABSENT]
        if not series:
            return Conclusion(
                self._nothing_measured(used), add_probe_fix(next(iter(used))) if used else ""
            )
        late = [lib for lib, call in self._appeared.items() if call > 1 and self.wants(lib)]
        if late:
            lib = late[0]
            return Conclusion(
                f"no probe measured {lib}: it was first imported inside the step, at step "
                f"{self._appeared[lib]}, after the check had started; import {lib} before "
                "the check (at the top of the test module, or in a fixture)",
                import_first_fix(lib),
            )
        unprobed = {lib: why for lib, why in used.items() if lib not in self._active}
        if not unprobed:
            return Conclusion()
        measured_used = [lib for lib in used if lib in self._active]
        asked_backend = self._wanted is None or any(n in BACKENDS for n in self._wanted)
        texts = {lib: self._unprobed_text(lib, why) for lib, why in unprobed.items()}
        if asked_backend and not measured_used:
            lib, text = next(iter(texts.items()))
            return Conclusion(
                f"no probe measured {lib}: {text}, and the probes that ran "
                f"({', '.join(sorted(measured)) or 'none'}) measured nothing the step uses; "
                f"add {lib} to the probes",
                add_probe_fix(lib),
            )
        notes = tuple(f"{lib} was not measured: {text}" for lib, text in texts.items())
        return Conclusion(notes=notes)

    def _unprobed_text(self, lib: str, why: list[str]) -> str:
        text = f"{'; '.join(why)}, but no {lib} probe ran"
        if self._wanted is not None and lib not in self._wanted:
            text += f" (probes={','.join(self._wanted)})"
        return text

    def _used(self, series: Mapping[str, Sequence[float]]) -> dict[str, list[str]]:
        used = {lib: list(why) for lib, why in self._evidence.items()}
        for bundle in BUNDLES:
            lib = bundle.name
            made = (made_so_far(bundle) or 0) - (self._made.get(lib) or 0)
            if made > 0:
                used.setdefault(lib, []).append(f"the step made {count_of(made, f'{lib} tensor')}")
            watcher = self._watching.get(lib)
            if watcher is not None and watcher.seen:
                used.setdefault(lib, []).append(watcher.seen)
            # A probe that counts only what the step reaches or makes: anything counted is
            # the step's. (Process-wide counts can't tell: a ``made`` counter decides.)
            if bundle.counts_step_only and lib in self._active and _counted(bundle, series):
                used.setdefault(lib, []).append(f"the {lib} probe counted the step's objects")
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


def _counted(bundle: AutogradBundle, series: Mapping[str, Sequence[float]]) -> bool:
    """Did the bundle's probe count anything (a value above 0 in one of its metrics)?"""
    names = {metric.name for metric in bundle.probe.metrics}
    return any(value > 0 for name, values in series.items() if name in names for value in values)


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

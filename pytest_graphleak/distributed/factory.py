"""The step factory by reference: validated in the caller, loaded again in each rank."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Union

from pytest_graphleak.targets import parse_target, walk

#: ``(rank, world_size) -> step``: builds one rank's zero-argument training step.
StepFactory = Callable[[int, int], Callable[[], object]]
#: What the caller may pass: a module-level factory, a ``functools.partial`` of one,
#: or a reference string "package.module:function" / "path/to/file.py::function".
FactoryLike = Union[str, StepFactory, "functools.partial[Callable[[], object]]", "FactoryRef"]


@dataclass(frozen=True)
class FactoryRef:
    """A picklable way to find the step factory again inside a spawned rank."""

    module: str  # importable module name ("" when only the file is known)
    file: str  # absolute path of the module's file ("" when not a file)
    qualname: str  # attribute path inside the module: "make_step" or "Steps.make"
    args: tuple[Any, ...] = ()  # bound by functools.partial
    kwargs: tuple[tuple[str, Any], ...] = ()

    @property
    def label(self) -> str:
        return f"{self.module or self.file}:{self.qualname}"

    def load(self) -> Callable[..., Callable[[], object]]:
        module = _load_module(self.module, self.file)
        try:
            target: Any = walk(module, self.qualname)
        except AttributeError as missing:
            raise LookupError(
                f"step factory {self.label!r}: {module.__name__!r} has no attribute "
                f"{str(missing)!r}"
            ) from None
        if not callable(target):
            raise TypeError(f"step factory {self.label!r} is not callable: {type(target).__name__}")
        if self.args or self.kwargs:
            return functools.partial(target, *self.args, **dict(self.kwargs))
        step: Callable[..., Callable[[], object]] = target
        return step


def factory_ref(factory: FactoryLike) -> FactoryRef:
    """Validate ``factory`` in the calling process and turn it into a ``FactoryRef``.

    Raises TypeError/ValueError/LookupError naming what is wrong, before any process is
    spawned.
    """
    if isinstance(factory, FactoryRef):
        ref = factory
    elif isinstance(factory, str):
        ref = _ref_from_string(factory)
    elif isinstance(factory, functools.partial):
        inner = factory_ref(factory.func)
        ref = dataclasses.replace(
            inner,
            args=inner.args + tuple(factory.args),
            kwargs=inner.kwargs + tuple(factory.keywords.items()),
        )
    elif inspect.isfunction(factory) or inspect.isbuiltin(factory) or inspect.isclass(factory):
        ref = _ref_from_function(factory)
    else:
        raise TypeError(
            "step_factory must be a module-level function, a functools.partial of one, or a "
            f"reference string 'module:function' / 'FILE.py::function'; got {factory!r}"
        )
    ref.load()  # fail here, with a clear message, rather than in every rank
    return ref


def _ref_from_function(func: Any) -> FactoryRef:
    qualname: str = getattr(func, "__qualname__", "")
    if "<lambda>" in qualname or "<locals>" in qualname:
        raise TypeError(
            f"step factory {qualname!r} is a lambda or a nested function: spawned ranks cannot "
            "import it; define it at module level (it may build closures itself)"
        )
    module_name: str = getattr(func, "__module__", "") or ""
    file = getattr(sys.modules.get(module_name), "__file__", None) or ""
    if module_name == "__main__":
        if not file:
            raise TypeError(
                f"step factory {qualname!r} lives in an interactive __main__: spawned ranks "
                "cannot import it; put it in a module"
            )
        module_name = ""  # a spawned rank has its own __main__: load the file instead
    return FactoryRef(module_name, os.path.abspath(file) if file else "", qualname)


def _ref_from_string(spec: str) -> FactoryRef:
    parts = parse_target(spec)
    if parts is not None and parts.file:
        path = Path(parts.file)
        if path.suffix != ".py" or not path.is_file():
            raise ValueError(f"step factory {spec!r}: {parts.file!r} is not a Python file")
        return FactoryRef("", str(path.resolve()), parts.attr)
    if parts is None or not parts.module or not parts.attr:
        raise ValueError(
            f"step factory {spec!r}: write 'package.module:function' or 'FILE.py::function'"
        )
    return FactoryRef(parts.module, "", parts.attr)


def _load_module(module_name: str, file: str) -> ModuleType:
    if module_name:
        try:
            return importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            # Test modules imported by pytest (e.g. --import-mode=importlib) may not be
            # importable by name in a fresh process: fall back to their file.
            missing_is_ours = exc.name is not None and (module_name + ".").startswith(
                exc.name + "."
            )
            if not file or not missing_is_ours:
                raise
    if not file:
        raise LookupError("step factory: neither an importable module nor a file was given")
    name = "_graphleak_rank_" + Path(file).stem
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise LookupError(f"step factory: cannot load {file!r} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def factory_label(factory: FactoryLike) -> str:
    """A short name of a step factory for a check's name (a reference string as given)."""
    if isinstance(factory, str):
        return factory
    inner = getattr(factory, "func", factory)  # functools.partial
    return str(getattr(inner, "__qualname__", None) or repr(inner))

"""Turn ``FILE.py::function`` or ``module:function`` into a zero-argument step function.

Every way this can go wrong is a :class:`UsageError` naming what was wrong, except an
exception raised by the user's module while it is imported (``sys.exit()`` included):
that is the user's code failing, a :class:`UserCodeError` (its own exit code, traceback
shown).

The module is imported, and its step later run, as ``python FILE.py`` would run it:
``sys.argv`` holds only the script's name (a module-level ``argparse`` sees no graphleak
flags), and ``MODULE:FUNCTION`` finds modules in the current directory as
``python -m`` does (the ``graphleak`` console script does not put it on ``sys.path``).
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from pytest_graphleak.exceptions import UsageError, UserCodeError
from pytest_graphleak.targets import parse_target, walk


@dataclass(frozen=True)
class Target:
    name: str  # the spec as the user wrote it, used as the result's name
    func: Callable[[], object]
    script: str  # sys.argv[0] while it is imported and run: its file or module name


@contextlib.contextmanager
def running_as(script: str) -> Iterator[None]:
    """``sys.argv`` as ``python SCRIPT`` would set it, restored afterwards."""
    saved = sys.argv
    sys.argv = [script]
    try:
        yield
    finally:
        sys.argv = saved


def resolve(spec: str) -> Target:
    """Import the module named by ``spec`` and return its zero-argument step function."""
    spec = spec.strip()
    load: Callable[[str], ModuleType]
    parts = parse_target(spec)
    if parts is not None and parts.file:  # the script: its file, or its module's name
        script, attr = parts.file, parts.attr
        where, load = script, _import_file
    elif parts is not None:
        script, attr = parts.module, parts.attr
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # first, as ``python -m`` puts it
        where, load = f"module '{script}'", _import_module
    elif spec.endswith(".py") or "/" in spec or "\\" in spec:
        raise UsageError(f"name the step function too: '{spec}::FUNCTION'")
    else:
        raise UsageError(
            f"'{spec}' does not name a step function: write FILE.py::FUNCTION or MODULE:FUNCTION"
        )
    with running_as(script):
        module = load(script)
    if not attr or any(not part.isidentifier() for part in attr.split(".")):
        raise UsageError(f"'{attr}' in '{spec}' is not a function name")
    func = _require_plain_zero_arg(_lookup(module, attr, where), spec)
    return Target(name=spec, func=func, script=script)


def _a(noun: str) -> str:
    """``noun`` with its article: "an int", "a str"."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def _import_file(file_part: str) -> ModuleType:
    path = Path(file_part)
    if not path.exists():
        raise UsageError(f"no such file: {file_part}")
    if path.is_dir():
        raise UsageError(f"{file_part} is a directory: name a .py file")
    if path.suffix != ".py":
        raise UsageError(f"{file_part} is not a Python file (.py)")
    path = path.resolve()
    # Import it the way pytest's default mode does: the first directory above the file
    # that is not a package goes on sys.path, so the module's own imports work.
    parts = [] if path.stem == "__init__" else [path.stem]
    base = path.parent
    while (base / "__init__.py").exists():
        parts.insert(0, base.name)
        base = base.parent
    module_name = ".".join(parts)
    loaded = sys.modules.get(module_name)
    importable = all(part.isidentifier() for part in parts)  # "dir with space": not
    if module_name and importable and (loaded is None or _same_file(loaded, path)):
        if str(base) not in sys.path:
            sys.path.insert(0, str(base))
        return _import_module(module_name, shown=file_part)
    # The name is taken by another module (a file called json.py, say), or is no module
    # name (a package folder "my steps", a file "train-v2.py"): load it under a private
    # name instead.
    return _import_by_path(path, f"_graphleak_target_{path.stem}", shown=file_part)


def _same_file(module: ModuleType, path: Path) -> bool:
    file = getattr(module, "__file__", None)
    return file is not None and Path(file).resolve() == path


def _import_module(module_name: str, shown: str | None = None) -> ModuleType:
    shown = shown or f"module '{module_name}'"
    if not module_name or any(not p.isidentifier() for p in module_name.split(".")):
        raise UsageError(f"'{module_name}' is not a module name")
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise UsageError(f"no module named '{module_name}'") from None
        raise UserCodeError(_import_failure(shown, exc)) from exc
    except (Exception, SystemExit) as exc:
        raise UserCodeError(_import_failure(shown, exc)) from exc


def _import_by_path(path: Path, module_name: str, shown: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot import {shown}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        sys.modules.pop(module_name, None)
        raise UserCodeError(_import_failure(shown, exc)) from exc
    return module


def _import_failure(shown: str, exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        # A script's `if args...: sys.exit()` or argparse's own exit: not a clean check.
        return f"importing {shown} called sys.exit({exc.code!r}), so no step was checked"
    return f"importing {shown} raised {type(exc).__name__}: {exc}"


def _lookup(module: ModuleType, attr: str, where: str) -> object:
    try:
        return walk(module, attr)
    except AttributeError:
        hint = _suggest(module, attr)
        raise UsageError(f"{where} has no function '{attr}'{hint}") from None


def _suggest(module: ModuleType, attr: str) -> str:
    functions = {
        name: value
        for name, value in vars(module).items()
        if inspect.isfunction(value)
        and value.__module__ == module.__name__
        and not name.startswith("_")
    }
    close = difflib.get_close_matches(attr, sorted(functions), n=3)
    if close:
        return f" (did you mean {', '.join(close)}?)"
    steps = sorted(name for name, value in functions.items() if _is_plain_zero_arg(value))
    if steps:
        return f" (zero-argument functions there: {', '.join(steps[:8])})"
    return ""


def _is_plain_zero_arg(func: object) -> bool:
    try:
        _require_plain_zero_arg(func, "")
    except UsageError:
        return False
    return True


def _require_plain_zero_arg(func: object, spec: str) -> Callable[[], object]:
    """``func`` itself, once it is known to be a plain function callable without
    arguments."""
    if isinstance(func, type):
        raise UsageError(
            f"'{spec}' is a class, not a function: graphleak check would only check its "
            "constructor; name a zero-argument function that runs one training step"
        )
    if not callable(func):
        raise UsageError(f"'{spec}' is {_a(type(func).__name__)}, not a function")
    if inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func):
        raise UsageError(f"'{spec}' is async: graphleak check calls a plain function")
    if inspect.isgeneratorfunction(func):
        raise UsageError(f"'{spec}' is a generator function: calling it would not run its body")
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return func  # builtins without a signature: let the call itself decide
    required = [
        p.name
        for p in signature.parameters.values()
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if required:
        raise UsageError(
            f"'{spec}' needs arguments ({', '.join(required)}): graphleak check calls the "
            "step with none; wrap it in a zero-argument function or give defaults"
        )
    return func

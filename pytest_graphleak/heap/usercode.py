"""The one rule for "user code or library?".

A file is the user's code unless it belongs to the standard library, to an installed
package (anything under ``site-packages`` or ``dist-packages``), to pytest (``pytest``,
``_pytest``, ``pluggy``, ``xdist``, ``execnet``) or to this plugin and its bundled
engine (``pytest_graphleak``, ``minigrad``). Packages are matched by their directory
or their exact top-level name, never by a name prefix: a user's ``pytest_helpers.py``
is user code. Code compiled from a string (``<string>``, a notebook cell) is the
user's; frozen standard modules (``<frozen ...>``) are not.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from functools import cache, lru_cache

#: pytest's own packages: their objects are the test run's machinery, not the user's.
PYTEST_PACKAGES = frozenset({"_pytest", "pytest", "pluggy", "xdist", "execnet"})
#: Never shown to the user as a holder or a site: pytest's and this plugin's objects.
PRIVATE_PACKAGES = PYTEST_PACKAGES | {"pytest_graphleak"}
#: Library code as well, though neither installed nor in the standard library.
_INTERNAL_PACKAGES = PRIVATE_PACKAGES | {"minigrad"}

INSTALLED_MARKERS = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")


def top_package(module: object) -> str:
    """``"a"`` for a module named ``"a.b.c"`` ("" for anything that is not a name)."""
    return module.split(".", 1)[0] if isinstance(module, str) else ""


def is_pytest_module(module: object) -> bool:
    return top_package(module) in PYTEST_PACKAGES


def is_private_module(module: object) -> bool:
    """Module of pytest or of this plugin (``pytest_helpers`` is neither)."""
    return top_package(module) in PRIVATE_PACKAGES


def _as_dir(path: str) -> str:
    return os.path.join(path, "")


@cache
def _stdlib_dirs() -> tuple[str, ...]:
    """Where the standard library lives: the directory of ``os``, which every interpreter
    imports from it. (``sysconfig``'s ``stdlib`` path is the same directory, and its
    ``platstdlib`` is too outside a virtualenv, inside one holding ``site-packages`` only;
    loading and expanding sysconfig's paths cost ~2 ms of a process's first check.)"""
    return tuple(_as_dir(p) for p in _spellings(os.path.dirname(os.__file__)))


def _internal_dirs() -> tuple[tuple[str, str], ...]:
    """(package directory, the directory it sits in) for pytest, the plugin, minigrad,
    wherever they live (an editable install, a checkout): those imported so far. A
    package not imported has no code running, so none of its files can be asked about;
    looking one up on ``sys.path`` costs ~0.5 ms of the first check of a process."""
    return _dirs_of(frozenset(name for name in _INTERNAL_PACKAGES if name in sys.modules))


@cache
def _dirs_of(names: frozenset[str]) -> tuple[tuple[str, str], ...]:
    found = []
    for name in sorted(names):
        with contextlib.suppress(ImportError, ValueError, AttributeError):
            spec = importlib.util.find_spec(name)  # an imported module's own __spec__
            for location in (spec.submodule_search_locations or []) if spec else []:
                for spelled in _spellings(location):
                    found.append((_as_dir(spelled), _as_dir(os.path.dirname(spelled))))
    return tuple(found)


def _spellings(path: str) -> set[str]:
    """The absolute and the symlink-free spelling of ``path``."""
    return {os.path.abspath(path), os.path.realpath(path)}


@lru_cache(maxsize=8192)
def is_user_file(path: object) -> bool:
    """Is the code in this file the user's (see the module docstring)?"""
    if not isinstance(path, str) or not path:
        return False
    if path.startswith("<"):
        return not path.startswith("<frozen")
    # Either spelling in a library makes it a library's. The absolute one first: it
    # settles most files (site-packages) without realpath's system call per path part.
    absolute = os.path.abspath(path)
    if _library_spelling(absolute):
        return False
    real = os.path.realpath(path)
    return real == absolute or not _library_spelling(real)


def _library_spelling(spelled: str) -> bool:
    if any(marker in spelled for marker in INSTALLED_MARKERS):
        return True
    if spelled.startswith(_stdlib_dirs()):
        return True
    return any(spelled.startswith(package) for package, _ in _internal_dirs())


def is_user_module(name: object) -> bool | None:
    """Is this imported module the user's? None when it is not imported (no file known)."""
    if not isinstance(name, str):
        return False
    if name == "__main__":
        return True  # a script or ``python -c``: the user's code either way
    if top_package(name) in _INTERNAL_PACKAGES:
        return False
    module = sys.modules.get(name)
    if module is None:
        return None
    return is_user_file(getattr(module, "__file__", None))


def library_label(path: str) -> str:
    """A short name for a library file: relative to site-packages
    (``transformers/models/bert/modeling_bert.py``), to the standard library
    (``contextlib.py``) or to the directory holding pytest, the plugin or minigrad
    (``minigrad/ops.py``); else the file's own name."""
    if path.startswith("<"):
        return path
    absolute = os.path.abspath(path)
    for marker in INSTALLED_MARKERS:
        at = absolute.rfind(marker)
        if at >= 0:
            return absolute[at + len(marker) :].replace(os.sep, "/")
    parents = [parent for _, parent in _internal_dirs()] + list(_stdlib_dirs())
    for spelled in _spellings(absolute):
        for parent in sorted(parents, key=len, reverse=True):
            if spelled.startswith(parent):
                return spelled[len(parent) :].replace(os.sep, "/")
    return os.path.basename(absolute)

"""Set the thread count of the OpenBLAS that numpy uses (best effort, no extra package).

minigrad's matrices are small: on a busy machine, OpenBLAS threads that spin waiting for
a core can make a step ten times slower than one thread would. The demo and the
benchmark pin one thread (and torch to one thread) so that timings are stable and fair.
Environment variables (``OPENBLAS_NUM_THREADS``) only work before numpy is imported;
this works at any time by calling OpenBLAS's own setter through ctypes.
"""

from __future__ import annotations

import ctypes
import glob
import os

import numpy as np

_SETTERS = (
    "scipy_openblas_set_num_threads64_",
    "scipy_openblas_set_num_threads",
    "openblas_set_num_threads",
)
_GETTERS = (
    "scipy_openblas_get_num_threads64_",
    "scipy_openblas_get_num_threads",
    "openblas_get_num_threads",
)


def _libraries() -> list[ctypes.CDLL]:
    base = os.path.dirname(os.path.dirname(np.__file__))
    libs = []
    for path in glob.glob(os.path.join(base, "numpy.libs", "*openblas*")) + glob.glob(
        os.path.join(base, "numpy", ".dylibs", "*openblas*")
    ):
        try:
            libs.append(ctypes.CDLL(path))
        except OSError:
            continue
    return libs


def _find(names: tuple[str, ...]) -> ctypes._NamedFuncPointer | None:
    for lib in _libraries():
        for name in names:
            fn: ctypes._NamedFuncPointer | None = getattr(lib, name, None)
            if fn is not None:
                return fn
    return None


def set_blas_threads(n: int) -> bool:
    """Ask numpy's OpenBLAS to use ``n`` threads; False when it cannot be found."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"set_blas_threads: n must be an int >= 1, got {n!r}")
    setter = _find(_SETTERS)
    if setter is None:
        return False
    setter(ctypes.c_int(n))
    return True


def blas_threads() -> int | None:
    """The current OpenBLAS thread count, or None when unknown."""
    getter = _find(_GETTERS)
    if getter is None:
        return None
    getter.restype = ctypes.c_int
    return int(getter())

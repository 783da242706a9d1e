"""Walks over the user's objects run with warnings silenced.

A walk touches objects the user never touches in that way: an attribute read or a type
check on a deprecated object warns (``torch.distributed.reduce_op`` does). Such a
warning is of the plugin's making: it must not land in the user's warnings summary, nor
become an error under ``-W error`` / ``filterwarnings = error``.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import ParamSpec, TypeVar

_P = ParamSpec("_P")
_R = TypeVar("_R")


def silenced(walk: Callable[_P, _R]) -> Callable[_P, _R]:
    """``walk`` runs with every warning ignored, and the filters put back after."""

    @functools.wraps(walk)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return walk(*args, **kwargs)

    return run

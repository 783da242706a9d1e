"""The Python hooks torch keeps on a graph node in C++, read without changing them.

``grad_fn.register_hook(fn)`` and ``grad_fn.register_prehook(fn)`` put ``fn`` into a
Python dict that only the node's C++ hook object refers to: no Python attribute exposes
it, and the collector does not see the link while a tensor owns the node, so a hook that
refers back to its tensor (a bound method of the object holding the tensor) makes a
cycle nothing frees. torch builds that dict in Python, though: every registration on a
node calls ``torch.autograd.function._HookMixin._register_hook(dict, fn)`` with the
node's current dict (None before the first hook). ``NodeHooks.of(node)`` registers a
placeholder while a reader stands in for that function, which raises with the dict it
was given before anything is registered: the node is left exactly as it was.

The reader answers only inside ``NodeHooks.of`` on the thread that asked; every other
registration (the user's, another thread's) passes through to torch unchanged. It is
installed by ``reading()`` for one search and always put back.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any


class _Found(Exception):
    """Carries the hook dict torch passed to ``_register_hook``."""


def _placeholder(*args: object) -> None:  # never registered: the reader raises first
    return None


class NodeHooks:
    """Reads a node's hook dicts while installed (see the module docstring)."""

    def __init__(self, mixin: Any, original: Any) -> None:
        self._mixin = mixin
        self._original = original  # the staticmethod object found on the class
        self._asking = threading.local()

    def _reader(self, backward_hooks: Any, hook: Any) -> Any:
        if getattr(self._asking, "on", False):
            raise _Found(backward_hooks)
        return self._original.__func__(backward_hooks, hook)

    def of(self, node: Any) -> list[tuple[str, dict[Any, Any]]]:
        """``[("post_hooks", {...}), ("pre_hooks", {...})]``: the node's non-empty hook
        dicts (``register_hook`` / ``register_prehook``)."""
        found: list[tuple[str, dict[Any, Any]]] = []
        for name, register in (("post_hooks", "register_hook"), ("pre_hooks", "register_prehook")):
            method = getattr(node, register, None)
            if method is None:
                continue
            self._asking.on = True
            try:
                method(_placeholder)
            except _Found as exc:
                table = exc.args[0]
                if isinstance(table, dict) and table:
                    found.append((name, table))
            except Exception:  # a node that takes no hooks (released, foreign)
                continue
            finally:
                self._asking.on = False
        return found

    def install(self) -> None:
        self._mixin._register_hook = staticmethod(self._reader)

    def uninstall(self) -> None:
        self._mixin._register_hook = self._original


@contextlib.contextmanager
def reading(torch: Any) -> Iterator[NodeHooks | None]:
    """A ``NodeHooks`` for the duration of the block (None where this torch registers
    node hooks some other way); torch's own function is put back on exit."""
    mixin = getattr(getattr(torch.autograd, "function", None), "_HookMixin", None)
    original = vars(mixin).get("_register_hook") if mixin is not None else None
    if not isinstance(original, staticmethod):
        yield None
        return
    hooks = NodeHooks(mixin, original)
    hooks.install()
    try:
        yield hooks
    finally:
        hooks.uninstall()

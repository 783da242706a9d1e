"""One labelled reference: how one object refers to the next.

``Edge`` says how (a dict key, a list index, an attribute, a closure cell, ``grad_fn``,
``next_functions[i]``), so a path of references can be printed the way a user would
write it. It lives below the diagnosis because the autograd bundles
(``probes/autograd``) list the edges out of their tensors and graph nodes.
"""

from __future__ import annotations

import contextlib
import types
import weakref
from dataclasses import dataclass
from typing import Any

#: weakref.proxy types: they hold nothing, and touching a dead one raises ReferenceError.
PROXY_TYPES = (weakref.ProxyType, weakref.CallableProxyType)
#: Objects that pause with a frame of locals (read as ``local '<name>'`` edges).
SUSPENDED = (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)


def paused_frame(obj: object) -> types.FrameType | None:
    """The frame of a generator, coroutine or async generator (None once it finished)."""
    for name in ("gi_frame", "cr_frame", "ag_frame"):
        frame = getattr(obj, name, None)
        if isinstance(frame, types.FrameType):
            return frame
    return None


_MAX_REPR = 40
#: How each kind of edge reads in a chain, its key put in for {}.
_TEXTS = {
    "key": "[{}]",
    "index": "[{}]",
    "next": ".next_functions[{}]",
    "attr": ".{}",
    "closure": " closure '{}'",
    "local": " local '{}'",
    "grad_fn": ".grad_fn",
    "value": ".get()",
}


@dataclass(frozen=True)
class Edge:
    """How one object refers to the next: kind and key/index/name."""

    kind: str  # key | index | member | attr | closure | local | grad_fn | next | ref | value
    key: Any = None

    def text(self) -> str:
        key = short_repr(self.key) if self.kind == "key" else self.key
        return _TEXTS.get(self.kind, "").format(key)

    @property
    def named(self) -> bool:
        """True when the edge carries a name worth showing (a key, attribute, cell)."""
        return self.kind in ("key", "attr", "closure", "local", "value")


def short_repr(value: Any) -> str:
    text = f"<{type(value).__name__}>"
    if isinstance(value, (str, int, float, bool, bytes)):
        with contextlib.suppress(Exception):  # e.g. an int too long to print
            text = repr(value)
    return text if len(text) <= _MAX_REPR else text[: _MAX_REPR - 3] + "..."

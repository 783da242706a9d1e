"""The diagnosis' names for the autograd libraries' backends.

Each backend answers, per object: is it a tensor or a graph node, how to describe it in
one line, and which labelled references lead out of it (``grad_fn``, ``next_functions``,
hooks, user attributes). The backends live in the libraries' bundles
(``probes/autograd``); this module is where the diagnosis takes them from. A backend is
active only when its library is already imported: the diagnosis never imports torch
just to look.
"""

from __future__ import annotations

from pytest_graphleak.probes.autograd import NODE, TENSOR, Backend, active_backends

__all__ = ["NODE", "TENSOR", "Backend", "active_backends"]

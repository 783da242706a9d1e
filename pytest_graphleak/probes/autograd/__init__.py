"""The autograd libraries the plugin knows: one bundle each (``bundle.AutogradBundle``).

``BUNDLES`` is the registry: a new library is its bundle module plus one line there
(with its import). The probe roster (``probes.PROBES``), ``engine/coverage``'s usage
evidence, the outlive census, the tracker's start set, the diagnosis backends and the
creation-site recorder all loop over it; none of them names a library. Nothing here
imports a library: a bundle is active only while its module is in ``sys.modules``.
"""

from __future__ import annotations

import sys
from typing import Any

from pytest_graphleak.probes.autograd.bundle import NODE, TENSOR, AutogradBundle, Backend
from pytest_graphleak.probes.autograd.minigrad_bundle import BUNDLE as MINIGRAD
from pytest_graphleak.probes.autograd.torch_bundle import BUNDLE as TORCH

#: Every autograd library, one line each (and its import above), in sampling order.
BUNDLES: tuple[AutogradBundle, ...] = (
    MINIGRAD,
    TORCH,
)

__all__ = ["BUNDLES", "NODE", "TENSOR", "AutogradBundle", "Backend", "active_backends", "loaded"]


def loaded() -> list[tuple[AutogradBundle, Any]]:
    """(bundle, its module) for every library already imported (never imports one)."""
    return [
        (bundle, module)
        for bundle in BUNDLES
        if (module := sys.modules.get(bundle.name)) is not None
    ]


def active_backends() -> list[Backend]:
    """The diagnosis backends of the libraries already imported."""
    found: list[Backend] = []
    for bundle, module in loaded():
        backend = bundle.backend(module)
        if backend is not None:
            found.append(backend)
    return found

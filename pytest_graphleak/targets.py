"""``FILE.py::function`` and ``module:function``: the one reader of a reference to a step
(``graphleak check``) or a step factory (``check_distributed``, which sends it to ranks).

``parse_target`` splits the text (``FILE.py::Class::method`` as pytest writes node ids,
``package.module:function``) and ``walk`` follows the dotted attribute path. How the
module is then imported stays with each caller: ``graphleak check`` imports a file as
``python FILE.py`` would, a rank loads it by path under a private name.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TargetSpec:
    file: str  # "FILE.py" as written, for a file reference; "" for a module's
    module: str  # "package.module" for a module reference; "" for a file's
    attr: str  # dotted attribute path inside the module: "step" or "Steps.make"


def parse_target(spec: str) -> TargetSpec | None:
    """The parts of ``spec``, or None when it names neither a file nor a module with an
    attribute (the caller says how to write it)."""
    spec = spec.strip()
    if "::" in spec:
        file, attr = spec.split("::", 1)
        return TargetSpec(file, "", attr.replace("::", "."))
    if ":" in spec and not _looks_like_windows_path(spec):
        module, attr = spec.split(":", 1)
        return TargetSpec("", module, attr)
    return None


def _looks_like_windows_path(spec: str) -> bool:
    return len(spec) > 2 and spec[1] == ":" and spec[2] in "\\/"


def walk(obj: object, attr: str) -> object:
    """``obj.a.b`` for ``attr="a.b"``; AttributeError names the part that is missing."""
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AttributeError(part) from None
    return obj

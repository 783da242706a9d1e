"""What the audit is told about a test and a fixture: typed, so that ``Audit`` reads no
pytest object. The front end (``plugin/audit``) fills an ``AuditedTest`` from a pytest
item; a fixture definition is anything with a ``FixtureDef``'s three read-only fields
(pytest's own ``FixtureDef`` is one, passed as it is: the audit compares definitions by
identity and reads ``cached_result`` again when the fixture may have been torn down).
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


class FixtureDef(Protocol):
    """A fixture definition: its name, its scope ("function", "class", "module",
    "package", "session"), and while it is set up its cached result, ``(value, cache
    key, None)`` or ``(None, cache key, error)`` (None before its setup and after its
    teardown)."""

    @property
    def argname(self) -> str: ...

    @property
    def scope(self) -> str: ...

    @property
    def cached_result(self) -> tuple[Any, Any, Any] | None: ...


@dataclass(frozen=True)
class AuditedTest:
    """One test as the audit reads it: its id, the module and class it is defined in
    (their attributes are roots), and the fixture definitions it uses, name -> the
    closest one (the live wider-scope ones are roots). Made for one call: it holds the
    module and class, so it is not kept."""

    nodeid: str
    module: types.ModuleType | None = None
    cls: type | None = None
    fixtures: Mapping[str, FixtureDef] = field(default_factory=dict)

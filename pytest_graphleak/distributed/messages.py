"""What the caller and the ranks send each other.

The caller starts each rank with one ``Job``. A rank answers with named events, as
pytest-xdist's workers do: a name plus keyword fields (``send(queue, "result", rank=1,
index=0, result={...})``), each handled by the caller's ``on_<name>`` method. The fields
are plain data (a CheckResult as its ``to_dict()``), so nothing measured crosses over.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_graphleak.distributed.factory import FactoryRef
from pytest_graphleak.settings import Settings

#: Every event a rank sends, with its fields, in the order a rank sends them.
EVENTS: dict[str, tuple[str, ...]] = {
    "ready": ("rank",),  # joined the process group; the checks' deadline starts
    "result": ("rank", "index", "result"),  # factory ``index`` checked: its result dict
    "error": ("rank", "index", "traceback"),  # raised before reporting factory ``index``
    "done": ("rank",),  # will send nothing more
}


@dataclass(frozen=True)
class Job:
    """What every rank is sent: the factories and how to run them."""

    refs: list[FactoryRef]
    names: list[str]
    world_size: int
    backend: str
    #: seconds for spawning, importing torch and joining the process group
    start_timeout: float
    #: seconds for the checks themselves, counted once every rank is in the group
    timeout: float
    settings: Settings
    workdir: str


def send(channel: Any, name: str, **fields: Any) -> None:
    """Put one event on ``channel`` (a multiprocessing queue); a name or fields that the
    protocol does not declare are a TypeError in the rank, not a puzzle in the caller."""
    expected = EVENTS.get(name)
    if expected is None or set(fields) != set(expected):
        raise TypeError(f"event {name!r} with fields {sorted(fields)}: expected {expected}")
    channel.put((name, fields))

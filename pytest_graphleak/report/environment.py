"""The run's environment for the HTML report: time, versions, command, rootdir, duration.

Versions come from package metadata and from modules the run already imported: nothing
is imported to describe it (torch stays unimported in a minigrad-only run).
"""

from __future__ import annotations

import platform
import sys
import time
from collections.abc import Sequence
from importlib import metadata

#: Distributions named when installed -> the module the run must have loaded, if any.
_VERSIONS = {
    "pytest-graphleak": None,
    "pytest": None,
    "torch": "torch",
    "numpy": "numpy",
    "pytest-xdist": "xdist",
}


def describe_run(
    command: Sequence[str], rootdir: str, started: float, finished: float
) -> dict[str, str]:
    """Label -> text, in display order. ``started``/``finished`` are ``time.time()``."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started))
    versions = [f"Python {platform.python_version()}"]
    for dist, module in _VERSIONS.items():
        if module is not None and module not in sys.modules:
            continue
        try:
            versions.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            continue
    return {
        "time": stamp,
        "command": " ".join(command),
        "rootdir": rootdir,
        "versions": ", ".join(versions),
        "platform": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "session": f"{finished - started:.2f} s",
    }

"""The per-step log line of the seed engine, and the record behind it.

``Step 12 | Loss 3.1416 | RSS MB 85.1/86.0/86.4/86.4 | alive TensorImpl=69 Node=46
AutogradMeta=30 | created TensorImpl=2345 Node=1890`` -- RSS is read at four points of the
step: before the forward pass (pre), after it (fwd), after backward (bwd) and after the
optimizer step (opt), so a leak shows in which phase memory is taken and never given back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import psutil

PHASES = ("pre", "fwd", "bwd", "opt")

_PROCESS = psutil.Process()


def rss_mb() -> float:
    """Resident set size of this process, in MiB."""
    return float(_PROCESS.memory_info().rss) / 2**20


@dataclass
class StepRecord:
    step: int  # 1-based, counting warmup steps too
    warmup: bool  # a warmup step: shown, not judged
    loss: float
    rss: dict[str, float] = field(default_factory=dict)  # phase -> MiB
    alive: dict[str, int] = field(default_factory=dict)  # e.g. TensorImpl -> 69
    created: dict[str, int] = field(default_factory=dict)  # cumulative, where counted


def format_line(record: StepRecord, width: int = 3) -> str:
    rss = "/".join(f"{record.rss.get(phase, float('nan')):.1f}" for phase in PHASES)
    parts = [
        f"Step {record.step:>{width}}",
        f"Loss {record.loss:.4f}",
        f"RSS MB {rss}",
        "alive " + " ".join(f"{k}={v}" for k, v in record.alive.items()),
    ]
    if record.created:
        parts.append("created " + " ".join(f"{k}={v}" for k, v in record.created.items()))
    line = " | ".join(parts)
    return line + ("  (warmup)" if record.warmup else "")

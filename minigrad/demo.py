"""Train the tiny character transformer twice: with a graph leak, then fixed.

``python -m minigrad.demo [--steps N] [--every K] [--phase leaky|fixed|both]``

The leaky loop makes the classic mistake: it evaluates a validation batch with grad
mode on and keeps the losses (with their graphs) in a list. Every step then leaves one
more forward graph alive, and the log shows alive TensorImpl / Node / AutogradMeta and
RSS growing with the step. The fixed loop evaluates under ``no_grad()`` and keeps
``loss.item()``: alive counts stay flat while created counts keep rising.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable

import numpy as np
import psutil

import minigrad as mg
from minigrad.blas import set_blas_threads
from minigrad.data import TEXT, CharVocab, batches

BLOCK, BATCH, EVAL_BATCH = 32, 16, 4


def _log(step: int, loss: float) -> str:
    s = mg.stats()
    rss = psutil.Process().memory_info().rss / 2**20
    return (
        f"Step {step:4d} | Loss {loss:.4f} | RSS {rss:7.1f} MB"
        f" | alive TensorImpl={s['TensorImpl']['alive']} Node={s['Node']['alive']}"
        f" AutogradMeta={s['AutogradMeta']['alive']}"
        f" | created TensorImpl={s['TensorImpl']['created']} Node={s['Node']['created']}"
        f" AutogradMeta={s['AutogradMeta']['created']}"
    )


def _alive() -> dict[str, int]:
    return {kind: counts["alive"] for kind, counts in mg.stats().items()}


def run(
    phase: str, steps: int, every: int, seed: int = 0, out: Callable[[str], None] = print
) -> tuple[dict[str, int], dict[str, int]]:
    """Train ``steps`` steps; returns alive counts after the first step and at the end."""
    rng = np.random.default_rng(seed)
    vocab = CharVocab(TEXT)
    ids = vocab.encode(TEXT)
    model = mg.nn.TinyTransformer(
        vocab.size, d_model=32, n_heads=4, n_layers=2, block_size=BLOCK, rng=rng
    )
    opt = mg.optim.Adam(model.parameters(), lr=3e-3)
    history: list[object] = []
    out(
        f"--- {phase}: "
        + (
            "validation losses kept with their graphs"
            if phase == "leaky"
            else "no_grad() evaluation, loss.item() kept"
        )
    )
    for step in range(1, steps + 1):
        x, y = batches(ids, BLOCK, BATCH, rng)
        loss = mg.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        xv, yv = batches(ids, BLOCK, EVAL_BATCH, rng)
        if phase == "leaky":
            val_loss = mg.functional.cross_entropy(model(xv), yv)  # grad mode on: graph recorded
            history.append(val_loss)  # ... and kept alive by the list
        else:
            with mg.no_grad():
                val_loss = mg.functional.cross_entropy(model(xv), yv)
            history.append(val_loss.item())
        if step == 1:
            first = _alive()
        if step % every == 0 or step == 1:
            out(_log(step, loss.item()))
    return first, _alive()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m minigrad.demo", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--steps", type=int, default=150, help="training steps per phase (default 150)"
    )
    parser.add_argument("--every", type=int, default=25, help="log every K steps (default 25)")
    parser.add_argument("--phase", choices=("leaky", "fixed", "both"), default="both")
    parser.add_argument(
        "--threads", type=int, default=1, help="OpenBLAS threads (default 1: small matrices)"
    )
    args = parser.parse_args(argv)
    if args.steps < 1 or args.every < 1:
        parser.error("--steps and --every must be >= 1")
    if args.threads < 1:
        parser.error("--threads must be >= 1")
    set_blas_threads(args.threads)
    start = time.perf_counter()
    phases = ("leaky", "fixed") if args.phase == "both" else (args.phase,)
    for phase in phases:
        first, last = run(phase, args.steps, args.every)
        verdict = "LEAK: grows every step" if last != first else "flat"
        change = ", ".join(f"{kind} {first[kind]} -> {last[kind]}" for kind in last)
        print(f"=== {phase}: alive after step 1 vs step {args.steps}: {change} ({verdict})")
        gc.collect()
    print(f"done in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

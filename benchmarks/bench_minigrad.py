"""minigrad vs torch CPU: one training step, side by side in one run; and what the counters cost.

Workloads (the same model, data shapes, loss and optimizer on both engines):

- MLP: batch 64, 784-256-10, ReLU, cross-entropy, SGD with momentum;
- tiny transformer: the char-level ``mg.nn.TinyTransformer`` (2 layers, d_model 32, 4 heads,
  block 32, batch 16) and an identical torch module, Adam.

Both engines run on ONE thread (``torch.set_num_threads(1)`` and numpy's OpenBLAS pinned
to one thread): the matrices are small and the benchmark machine is shared, where extra
threads mostly add noise. Steps of the variants are interleaved in rounds, so a burst of
load hits all of them alike; the table reports per-step medians (IQR) and ratios.

Counter cost: the same minigrad steps with the TensorImpl / Node / AutogradMeta counting
(``__init__`` increments and ``__del__``) patched out, against the normal build.

``.venv/bin/python benchmarks/bench_minigrad.py [--quick] [--out PATH]``
"""

from __future__ import annotations

import contextlib
import gc
import math
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import Stats, fmt_num, markdown_table, parse_args, ratio, verdict_cell, write_results

import minigrad as mg
from minigrad.autograd import Node
from minigrad.blas import blas_threads, set_blas_threads
from minigrad.data import TEXT, CharVocab, batches
from minigrad.tensor import AutogradMeta, TensorImpl

Step = Callable[[], float]

MLP_TARGET, TRANSFORMER_TARGET, COUNTER_TARGET = 1.5, 3.0, 0.05
D_MODEL, HEADS, LAYERS, BLOCK, BATCH = 32, 4, 2, 32, 16


# --------------------------------------------------------------------------- minigrad steps
def minigrad_mlp() -> Step:
    rng = np.random.default_rng(0)
    model = mg.nn.Sequential(
        mg.nn.Linear(784, 256, rng=rng), mg.nn.ReLU(), mg.nn.Linear(256, 10, rng=rng)
    )
    opt = mg.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = mg.Tensor(rng.standard_normal((64, 784)).astype(np.float32))
    y = rng.integers(0, 10, 64)

    def step() -> float:
        loss = mg.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    return step


def _text_batches() -> tuple[int, Callable[[], tuple[np.ndarray, np.ndarray]]]:
    vocab = CharVocab(TEXT)
    ids = vocab.encode(TEXT)
    rng = np.random.default_rng(1)
    fixed = [batches(ids, BLOCK, BATCH, rng) for _ in range(8)]
    counter = [0]

    def next_batch() -> tuple[np.ndarray, np.ndarray]:
        counter[0] += 1
        return fixed[counter[0] % len(fixed)]

    return vocab.size, next_batch


def minigrad_transformer() -> Step:
    vocab, next_batch = _text_batches()
    model = mg.nn.TinyTransformer(
        vocab, D_MODEL, HEADS, LAYERS, BLOCK, rng=np.random.default_rng(0)
    )
    opt = mg.optim.Adam(model.parameters(), lr=3e-3)

    def step() -> float:
        x, y = next_batch()
        loss = mg.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    return step


# --------------------------------------------------------------------------- torch twins
def torch_mlp() -> Step:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(64, 784)
    y = torch.randint(0, 10, (64,))

    def step() -> float:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    return step


def torch_transformer() -> Step:
    import torch
    from torch import nn

    class Attention(nn.Module):
        mask: torch.Tensor  # a registered buffer

        def __init__(self) -> None:
            super().__init__()
            self.query, self.key = nn.Linear(D_MODEL, D_MODEL), nn.Linear(D_MODEL, D_MODEL)
            self.value, self.proj = nn.Linear(D_MODEL, D_MODEL), nn.Linear(D_MODEL, D_MODEL)
            above = torch.triu(torch.ones(BLOCK, BLOCK, dtype=torch.bool), diagonal=1)
            self.register_buffer("mask", torch.where(above, -1e9, 0.0))

        def heads(self, x: torch.Tensor, b: int, t: int) -> torch.Tensor:
            return x.reshape(b, t, HEADS, D_MODEL // HEADS).transpose(1, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, d = x.shape
            q, k, v = (self.heads(m(x), b, t) for m in (self.query, self.key, self.value))
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D_MODEL // HEADS))
            att = torch.softmax(scores + self.mask[:t, :t], dim=-1)
            out: torch.Tensor = self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
            return out

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.attn, self.ln2 = (
                nn.LayerNorm(D_MODEL),
                Attention(),
                nn.LayerNorm(D_MODEL),
            )
            self.mlp = nn.Sequential(
                nn.Linear(D_MODEL, 4 * D_MODEL), nn.ReLU(), nn.Linear(4 * D_MODEL, D_MODEL)
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + self.attn(self.ln1(x))
            mixed: torch.Tensor = self.mlp(self.ln2(x))
            return x + mixed

    vocab, next_batch = _text_batches()

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, D_MODEL), nn.Embedding(BLOCK, D_MODEL)
            self.blocks = nn.Sequential(*[Block() for _ in range(LAYERS)])
            self.ln_f, self.head = nn.LayerNorm(D_MODEL), nn.Linear(D_MODEL, vocab)

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
            logits: torch.Tensor = self.head(self.ln_f(self.blocks(x)))
            return logits

    torch.manual_seed(0)
    model = Model()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)

    def step() -> float:
        x, y = next_batch()
        logits = model(torch.from_numpy(x))
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, vocab), torch.from_numpy(y).reshape(-1)
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    return step


# --------------------------------------------------------------------------- counters off
@contextlib.contextmanager
def counters_patched_out() -> Iterator[None]:
    """minigrad with the counting code removed: the baseline for the counters' cost."""

    def impl_init(self: TensorImpl, data: np.ndarray) -> None:
        self.data = data
        self.version = 0

    def meta_init(self: AutogradMeta, grad_fn: object, requires_grad: bool = True) -> None:
        self.grad_fn = grad_fn  # type: ignore[assignment]
        self.requires_grad = requires_grad
        self.grad = None
        self.hooks = None
        self.grad_accumulator = None
        self.retains_grad = False

    def node_init(self: Node, next_nodes: tuple[object, ...]) -> None:
        self.next_nodes = next_nodes  # type: ignore[assignment]
        self.saved = None
        self.pre_hooks = None

    patched: dict[type, Callable[..., None]] = {
        TensorImpl: impl_init,
        AutogradMeta: meta_init,
        Node: node_init,
    }
    originals = {cls: (vars(cls)["__init__"], vars(cls)["__del__"]) for cls in patched}
    try:  # setattr: mypy refuses __init__ assigned on a class
        for cls, init in patched.items():
            setattr(cls, "__init__", init)  # noqa: B010
            delattr(cls, "__del__")
        yield
    finally:
        for cls, (init, fin) in originals.items():
            setattr(cls, "__init__", init)  # noqa: B010
            setattr(cls, "__del__", fin)  # noqa: B010


# --------------------------------------------------------------------------- timing
Variant = tuple[str, Step, Callable[[], contextlib.AbstractContextManager[None]]]


def interleaved(
    variants: list[Variant], rounds: int, per_round: int, warmup: int
) -> tuple[dict[str, Stats], dict[str, Stats]]:
    """Per-step (thread CPU, wall) times of each variant; the variants take turns,
    ``per_round`` steps each."""
    cpu: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    wall: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    for _name, step, ctx in variants:
        with ctx():
            for _ in range(warmup):
                step()
    gc_was = gc.isenabled()
    gc.disable()  # collections would land on whichever variant is unlucky; minigrad needs none
    try:
        for r in range(rounds):
            order = variants if r % 2 == 0 else variants[::-1]
            for name, step, ctx in order:
                with ctx():
                    for _ in range(per_round):
                        w0, c0 = time.perf_counter(), time.thread_time()
                        step()
                        cpu[name].append(time.thread_time() - c0)
                        wall[name].append(time.perf_counter() - w0)
    finally:
        if gc_was:
            gc.enable()
        gc.collect()
    return (
        {name: Stats.of(s) for name, s in cpu.items()},
        {name: Stats.of(s) for name, s in wall.items()},
    )


def objects_per_step(step: Step) -> int:
    """TensorImpl + Node + AutogradMeta objects one step creates (each is counted twice)."""
    before = mg.stats()
    step()
    after = mg.stats()
    return sum(after[k]["created"] - before[k]["created"] for k in after)


def counting_cost_per_object(n: int) -> float:
    """Seconds that counting adds to one object's life (create + free), thread CPU time."""
    data = np.zeros(1)

    def churn() -> float:
        start = time.thread_time()
        for _ in range(n):
            TensorImpl(data)  # made and freed at once
        return time.thread_time() - start

    with_counting, without = [], []
    for _ in range(7):
        with_counting.append(churn())
        with counters_patched_out():
            without.append(churn())
    return (Stats.of(with_counting).median - Stats.of(without).median) / n


def main(argv: list[str] | None = None) -> int:
    args = parse_args(__doc__.splitlines()[0], argv)
    import torch

    torch.set_num_threads(1)
    previous_blas = blas_threads()
    pinned = set_blas_threads(1)
    rounds, mlp_n, tr_n, warmup = (1, 3, 1, 1) if args.quick else (20, 25, 6, 10)
    plain = contextlib.nullcontext
    counted = "minigrad, counting patched out"
    try:
        mlp_steps = (minigrad_mlp(), minigrad_mlp(), torch_mlp())
        tr_steps = (minigrad_transformer(), minigrad_transformer(), torch_transformer())
        mlp, mlp_wall = interleaved(
            [
                ("minigrad", mlp_steps[0], plain),
                (counted, mlp_steps[1], counters_patched_out),
                ("torch", mlp_steps[2], plain),
            ],
            rounds,
            mlp_n,
            warmup,
        )
        tr, tr_wall = interleaved(
            [
                ("minigrad", tr_steps[0], plain),
                (counted, tr_steps[1], counters_patched_out),
                ("torch", tr_steps[2], plain),
            ],
            rounds,
            tr_n,
            warmup,
        )
        per_object = counting_cost_per_object(500 if args.quick else 50_000)
        objects = {
            "MLP": objects_per_step(mlp_steps[0]),
            "tiny transformer": objects_per_step(tr_steps[0]),
        }
    finally:
        if previous_blas:
            set_blas_threads(previous_blas)

    rows = []
    for name, stats, walls, target in (
        ("MLP 784-256-10, batch 64, SGD momentum", mlp, mlp_wall, MLP_TARGET),
        ("tiny transformer (2x32, 4 heads, T=32, B=16), Adam", tr, tr_wall, TRANSFORMER_TARGET),
    ):
        r = ratio(stats["minigrad"].median, stats["torch"].median)
        wall_r = ratio(walls["minigrad"].median, walls["torch"].median)
        rows.append(
            [
                name,
                stats["minigrad"].fmt("ms"),
                stats["torch"].fmt("ms"),
                f"{fmt_num(r)}x",
                f"{fmt_num(wall_r)}x",
                f"<= {target}x",
                verdict_cell(r <= target),
            ]
        )
    speed = markdown_table(
        [
            "one training step",
            "minigrad",
            "torch CPU",
            "minigrad / torch",
            "(wall-clock ratio)",
            "target",
            "verdict",
        ],
        rows,
    )
    crow = []
    for name, stats in (("MLP", mlp), ("tiny transformer", tr)):
        on, off = stats["minigrad"].median, stats[counted].median
        share = (on - off) / on
        estimate = objects[name] * per_object / on
        crow.append(
            [
                name,
                stats["minigrad"].fmt("ms"),
                stats[counted].fmt("ms"),
                f"{share * 100:+.1f}%",
                str(objects[name]),
                f"{estimate * 100:.2f}%",
                f"< {COUNTER_TARGET * 100:.0f}%",
                verdict_cell(estimate < COUNTER_TARGET and share < COUNTER_TARGET),
            ]
        )
    counters = markdown_table(
        [
            "workload",
            "minigrad (counting)",
            "counting patched out",
            "A/B share of a step",
            "counted objects / step",
            "objects x cost / step",
            "target",
            "verdict",
        ],
        crow,
    )
    body = (
        "Times are per-step medians (IQR) of the calling thread's CPU time (`time.thread_time`): "
        "on this shared machine wall-clock time mostly measures other processes; both engines "
        f"run on one thread (torch.set_num_threads(1); numpy OpenBLAS pinned: {pinned}), so "
        "thread CPU time is the whole cost of a step. The wall-clock ratio is shown beside it. "
        f"{mlp['torch'].n} MLP and {tr['torch'].n} transformer steps per variant, variants "
        f"interleaved in {rounds} rounds after {warmup} warm-up steps, cyclic GC off.\n\n"
        f"### Speed\n\n{speed}\n\n### Cost of the exact counters\n\n"
        "Two measurements: an A/B of whole steps with the counting code patched out (noisy: the "
        "difference is near the step-to-step jitter), and the number of counted objects a step "
        f"creates times the measured counting cost per object ({per_object * 1e9:.0f} ns for "
        f"one create + free, over a tight loop).\n\n{counters}"
    )
    write_results(
        "minigrad",
        "minigrad vs torch CPU, and the cost of minigrad's counters",
        body,
        out=args.out,
        quick=args.quick,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

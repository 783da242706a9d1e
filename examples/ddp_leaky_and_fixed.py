"""A leaky DistributedDataParallel training step and its fixed twin, on 2 gloo ranks (CPU).

The leak is the classic "log on rank 0" mistake: only the logging rank keeps each step's
loss for a running average, graph and all, so only rank 0 grows
(``list-accumulation``); the other ranks stay flat. The fixed twin logs ``loss.item()``.

Each ``make_*_step(rank, world_size)`` is a *step factory*: it runs inside a spawned rank
after the process group is up, builds that rank's model, optimizer and data, and returns
the zero-argument step that the tracker calls again and again.

Run both on 2 ranks (one process group, about 6 s on a laptop CPU)::

    python examples/ddp_leaky_and_fixed.py

or as tests (``test_leaky`` fails with a leak report naming rank 0, ``test_fixed`` passes)::

    pytest examples/ddp_leaky_and_fixed.py
"""

from __future__ import annotations

from collections.abc import Callable

EXPECTED_PATTERN = "list-accumulation"
LEAKY_RANK = 0  # the rank that logs
WORLD_SIZE = 2


def _build(rank: int) -> tuple[object, object, object, object]:
    import torch
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)  # same initial weights on every rank (DDP also broadcasts them)
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard
    inputs = torch.randn(32, 8, generator=generator)
    targets = torch.randn(32, 1, generator=generator)
    return model, optimizer, inputs, targets


def make_leaky_step(rank: int, world_size: int) -> Callable[[], None]:
    import torch

    model, optimizer, inputs, targets = _build(rank)
    running_losses: list[torch.Tensor] = []

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()  # DDP all-reduces the gradients across the ranks here
        optimizer.step()
        if rank == LEAKY_RANK:
            running_losses.append(loss)  # LEAK: keeps the loss AND its autograd graph

    return step


def make_fixed_step(rank: int, world_size: int) -> Callable[[], None]:
    import torch

    model, optimizer, inputs, targets = _build(rank)
    running_losses: list[float] = []

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        if rank == LEAKY_RANK:
            running_losses.append(loss.item())  # a plain float: the graph is freed

    return step


def test_leaky() -> None:
    from pytest_graphleak.distributed import check_distributed

    check_distributed(make_leaky_step, world_size=WORLD_SIZE)


def test_fixed() -> None:
    from pytest_graphleak.distributed import check_distributed

    check_distributed(make_fixed_step, world_size=WORLD_SIZE)


if __name__ == "__main__":
    from pytest_graphleak.distributed import check_distributed_many

    leaky, fixed = check_distributed_many(
        [make_leaky_step, make_fixed_step], world_size=WORLD_SIZE, raise_on_leak=False
    )
    for result in (leaky, fixed):
        print(f"{result.name}: leaking ranks {result.leaking_ranks or 'none'}")
        for rank in result.ranks:
            verdict = rank.result.verdict.reason if rank.result else rank.error
            print(f"  rank {rank.rank}: {verdict}")

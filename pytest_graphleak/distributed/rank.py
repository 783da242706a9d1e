"""The rank's side: what runs in one spawned rank. It imports nothing of the caller's
side (``caller``); it reports through the named events of ``messages``."""

from __future__ import annotations

import faulthandler
import inspect
import os
import signal
import sys
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from pytest_graphleak.api import check
from pytest_graphleak.distributed.factory import FactoryRef
from pytest_graphleak.distributed.messages import Job, send

#: The caller asks a silent rank for its stacks with this signal (not on Windows).
STACKS_SIGNAL = getattr(signal, "SIGUSR1", None)


def rank_main(job: Job, rank: int, messages: Any) -> None:
    """Entry point of one spawned rank. Reports through ``messages``; never raises."""
    stacks = open(Path(job.workdir, f"rank{rank}.stacks"), "w")  # noqa: SIM115 - lives until exit
    if STACKS_SIGNAL is not None:  # the caller asks a silent rank for its stacks
        faulthandler.register(STACKS_SIGNAL, file=stacks, all_threads=True)
    index = 0
    try:
        size = str(job.world_size)
        os.environ.update(
            RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=size, LOCAL_WORLD_SIZE=size
        )
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        import torch
        import torch.distributed as dist

        # The ranks share this machine's cores: oversubscribed threads make steps slow.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // job.world_size))
        if "nccl" in job.backend and torch.cuda.is_available():
            torch.cuda.set_device(rank % torch.cuda.device_count())
        dist.init_process_group(
            job.backend,
            init_method=Path(job.workdir, "store").as_uri(),
            rank=rank,
            world_size=job.world_size,
            timeout=timedelta(seconds=job.start_timeout + job.timeout),
        )
        try:
            control = Lockstep(dist, torch)
            send(messages, "ready", rank=rank)
            for index, ref in enumerate(job.refs):
                step = build_step(ref, rank, job.world_size)
                name = f"{job.names[index]} [rank {rank}/{job.world_size}]"
                result = check(
                    control.wrap(step), name=name, raise_on_leak=False, settings=job.settings
                )
                if result.error is not None and control.step_traceback:
                    result.error = f"{result.error}\n{control.step_traceback}"
                send(messages, "result", rank=rank, index=index, result=result.to_dict())
                if result.error is not None:
                    # Its peers are blocked in this step's collectives: do not serve them;
                    # the caller stops the group after a short grace.
                    return
                control.serve(step)
            index = len(job.refs)
        finally:
            dist.destroy_process_group()
    except BaseException:
        if index < len(job.refs):
            send(
                messages,
                "error",
                rank=rank,
                index=index,
                traceback=f"rank {rank}:\n{traceback.format_exc()}",
            )
    finally:
        if STACKS_SIGNAL is not None:
            faulthandler.unregister(STACKS_SIGNAL)
        stacks.close()
        send(messages, "done", rank=rank)
        messages.close()
        messages.join_thread()  # everything reported has reached the caller
        sys.stdout.flush()
        sys.stderr.flush()
    # Skip interpreter teardown (torch and gloo threads take seconds to wind down).
    os._exit(0)


def build_step(ref: FactoryRef, rank: int, world_size: int) -> Callable[[], object]:
    factory = ref.load()
    step = factory(rank, world_size) if takes_rank(factory) else factory()
    if not callable(step):
        raise TypeError(
            f"step factory {ref.label!r} returned {type(step).__name__}, not a step function"
        )
    return step


def takes_rank(factory: Callable[..., object]) -> bool:
    """Factories take ``(rank, world_size)``; a zero-argument one reads them from
    ``torch.distributed`` itself (a marked test function is such a factory)."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in parameters
    )


class Lockstep:
    """Keep the ranks' step calls paired, however many times each rank's tracker calls it.

    Before each step a rank all-reduces "I want a step" (1) with MAX on a private gloo
    group; a rank whose check is over all-reduces 0 and runs a step too whenever the
    result is 1, so that its peers' collectives complete. All ranks leave together when
    every rank says 0.
    """

    def __init__(self, dist: Any, torch: Any) -> None:
        self._dist = dist
        self._group = dist.new_group(backend="gloo")
        self._flag = torch.zeros(1, dtype=torch.int32)  # reused: no allocation per step
        self.step_traceback = ""

    def _vote(self, want: int) -> bool:
        self._flag.fill_(want)
        self._dist.all_reduce(self._flag, op=self._dist.ReduceOp.MAX, group=self._group)
        return bool(self._flag.item())

    def wrap(self, step: Callable[[], object]) -> Callable[[], object]:
        def lockstep_step() -> object:
            self._vote(1)
            try:
                return step()
            except BaseException:
                # check() keeps only "ValueError: boom at step 3"; the caller wants the
                # rank's whole traceback.
                self.step_traceback = traceback.format_exc()
                raise

        return lockstep_step

    def serve(self, step: Callable[[], object]) -> None:
        while self._vote(0):
            step()

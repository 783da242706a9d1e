"""The caller's side: the public calls, and the caller's view of the spawned group
(what each rank reported, deadlines, stacks of a silent rank, stopping every process)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import queue
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_graphleak.distributed.factory import FactoryLike, factory_ref
from pytest_graphleak.distributed.messages import Job
from pytest_graphleak.distributed.rank import STACKS_SIGNAL, rank_main
from pytest_graphleak.distributed.results import DistributedResult, RankResult, ranks_text
from pytest_graphleak.exceptions import OptionError
from pytest_graphleak.options import CheckOptions
from pytest_graphleak.result import CheckResult
from pytest_graphleak.settings import Settings, call_settings
from pytest_graphleak.values import int_at_least, seconds

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: Seconds for the checks once every rank has joined the process group.
DEFAULT_TIMEOUT_S = 120.0
#: Seconds to spawn the ranks, import torch and join the process group.
DEFAULT_START_TIMEOUT_S = 120.0
#: How long the other ranks get to finish once one rank failed (they are usually
#: blocked in a collective the failed rank will never join).
FAILURE_GRACE_S = 3.0
_EXIT_GRACE_S = 5.0


def check_distributed(
    step_factory: FactoryLike,
    *,
    world_size: int = 2,
    backend: str = "gloo",
    timeout: float = DEFAULT_TIMEOUT_S,
    start_timeout: float = DEFAULT_START_TIMEOUT_S,
    name: str | None = None,
    raise_on_leak: bool = True,
    on_result: Callable[[CheckResult], object] | None = None,
    settings: Settings | None = None,
    **options: Unpack[CheckOptions],
) -> DistributedResult:
    """Run ``step_factory(rank, world_size)()`` as a tracked step on ``world_size`` ranks.

    ``settings`` with the check options applied (``pytest_graphleak.options``, place
    "check") go to ``pytest_graphleak.check`` in every rank. With ``raise_on_leak`` (the
    default) a leak on any rank raises GraphLeakError naming the rank, and a rank whose
    probes measured nothing the step uses raises UnmeasuredError; a rank that raised,
    crashed or hung always raises RankError with that rank's traceback.
    ``on_result`` is called with each rank's CheckResult (the pytest fixture uses it to
    attach the results to the test report).
    """
    (result,) = check_distributed_many(
        [step_factory],
        world_size=world_size,
        backend=backend,
        timeout=timeout,
        start_timeout=start_timeout,
        names=None if name is None else [name],
        raise_on_leak=raise_on_leak,
        on_result=on_result,
        settings=settings,
        **options,
    )
    return result


def check_distributed_many(
    step_factories: Sequence[FactoryLike],
    *,
    world_size: int = 2,
    backend: str = "gloo",
    timeout: float = DEFAULT_TIMEOUT_S,
    start_timeout: float = DEFAULT_START_TIMEOUT_S,
    names: Sequence[str] | None = None,
    raise_on_leak: bool = True,
    on_result: Callable[[CheckResult], object] | None = None,
    settings: Settings | None = None,
    **options: Unpack[CheckOptions],
) -> list[DistributedResult]:
    """Like ``check_distributed`` for several factories, checked one after the other in ONE
    process group: the ranks pay process start-up and the torch import once.

    ``timeout`` bounds the checks, counted once every rank has joined the process group;
    ``start_timeout`` bounds spawning, importing torch and joining. With ``raise_on_leak``,
    every factory is checked before the first failure is raised.
    """
    int_at_least("world_size", world_size, 1)
    if not isinstance(backend, str) or not backend:
        raise OptionError(f"backend: expected a torch.distributed backend name, got {backend!r}")
    # validated here, once, so that a bad keyword never spawns a rank
    resolved = call_settings(settings, options, where="check_distributed()")
    start_timeout = seconds("start_timeout", start_timeout)
    timeout = seconds("timeout", timeout)
    refs = [factory_ref(f) for f in step_factories]
    if not refs:
        raise OptionError("check_distributed_many: give at least one step factory")
    if names is None:
        names = [ref.label for ref in refs]
    elif len(names) != len(refs):
        raise OptionError(f"names: {len(names)} names for {len(refs)} step factories")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="graphleak-dist-", ignore_cleanup_errors=True) as tmp:
        job = Job(refs, list(names), world_size, backend, start_timeout, timeout, resolved, tmp)
        collected = Group(job).run()
    elapsed = time.perf_counter() - started
    results = [
        DistributedResult(name, world_size, ranks, elapsed)
        for name, ranks in zip(names, collected, strict=True)
    ]
    for check_result in (r for result in results for r in result.results()):
        if on_result is not None:
            on_result(check_result)
    for result in results:
        if result.failed_ranks or raise_on_leak:
            result.raise_for_failure()
    return results


class Group:
    """The caller's view of the spawned ranks: what each reported, and when to stop waiting."""

    def __init__(self, job: Job) -> None:
        try:
            pickle.dumps(job)
        except Exception as exc:
            raise TypeError(
                "the step factory's bound arguments or the check options cannot be sent to "
                f"the spawned ranks: {type(exc).__name__}: {exc}"
            ) from exc
        ctx = multiprocessing.get_context("spawn")
        self.job = job
        self.messages: Any = ctx.Queue()
        self.procs = [
            ctx.Process(
                target=rank_main, args=(job, rank, self.messages), name=f"graphleak-rank-{rank}"
            )
            for rank in range(job.world_size)
        ]
        self.table = [[RankResult(rank) for rank in range(job.world_size)] for _ in job.refs]
        self.ready: set[int] = set()
        self.done: set[int] = set()
        self.failures = 0
        self._deadline = 0.0  # monotonic seconds: when to stop waiting for the ranks

    def run(self) -> list[list[RankResult]]:
        """Spawn the ranks, gather their messages until done, failed or past the deadline."""
        try:
            for proc in self.procs:
                proc.start()
            self._gather()
            self._explain_missing()
        finally:
            self._stop()
            self.messages.close()
            self.messages.join_thread()
        return self.table

    def _gather(self) -> None:
        self._deadline = time.monotonic() + self.job.start_timeout
        while len(self.done) < len(self.procs):
            now = time.monotonic()
            if now >= self._deadline:
                return
            try:
                name, fields = self.messages.get(timeout=min(0.2, self._deadline - now))
            except queue.Empty:
                if all(p.exitcode is not None for p in self.procs):
                    # Every rank exited: drain what is still in flight, then stop waiting.
                    self._deadline = min(self._deadline, time.monotonic() + 0.5)
                continue
            getattr(self, f"on_{name}")(**fields)

    # -- the events a rank sends (``messages.EVENTS``) ----------------------------------
    def on_ready(self, rank: int) -> None:
        self.ready.add(rank)
        if len(self.ready) == len(self.procs):
            self._deadline = time.monotonic() + self.job.timeout

    def on_result(self, rank: int, index: int, result: dict[str, Any]) -> None:
        entry = self.table[index][rank]
        entry.result = CheckResult.from_dict(result)
        self._count_failure(entry)

    def on_error(self, rank: int, index: int, traceback: str) -> None:
        entry = self.table[index][rank]
        entry.error = traceback
        self._count_failure(entry)

    def on_done(self, rank: int) -> None:
        self.done.add(rank)

    def _count_failure(self, entry: RankResult) -> None:
        if entry.failed:
            entry.failed_order = self.failures
            self.failures += 1
            # Its peers are likely blocked in a collective it will never join.
            self._deadline = min(self._deadline, time.monotonic() + FAILURE_GRACE_S)

    def _explain_missing(self) -> None:
        """Give every rank that did not report a reason: exit code, stacks, a failed peer."""
        failed = sorted({r.rank for row in self.table for r in row if r.failed})
        silent = [rank for rank in range(len(self.procs)) if rank not in self.done]
        asked = False  # for the stacks of live ranks (their faulthandler listens on SIGUSR1)
        for rank in silent:
            proc = self.procs[rank]
            if STACKS_SIGNAL and rank in self.ready and proc.pid is not None and proc.is_alive():
                with contextlib.suppress(OSError):
                    os.kill(proc.pid, STACKS_SIGNAL)
                    asked = True
        if asked:
            time.sleep(0.3)  # faulthandler writes from its signal handler: almost at once
        for rank in silent:
            why = self._why_silent(rank, self.procs[rank], failed)
            with contextlib.suppress(OSError):
                stacks = Path(self.job.workdir, f"rank{rank}.stacks").read_text(errors="replace")
                if stacks.strip():
                    why += f"\nits Python stacks when it was stopped:\n{stacks.strip()}"
            for row in self.table:
                if row[rank].result is None and row[rank].error is None:
                    row[rank].error = why
                    break  # later factories never started on that rank: nothing to report

    def _why_silent(self, rank: int, proc: Any, failed: list[int]) -> str:
        if proc.exitcode is not None and proc.exitcode != 0:
            hint = ""
            if rank not in self.ready:
                hint = (
                    " (its traceback is on stderr; a script that calls check_distributed "
                    "must do so under `if __name__ == '__main__':`)"
                )
            return f"rank {rank} exited with code {proc.exitcode} before reporting{hint}"
        if failed and rank not in failed:
            return (
                f"rank {rank} stopped: rank(s) {ranks_text(failed)} failed, so its collectives "
                "could not complete"
            )
        if len(self.ready) < len(self.procs):
            return (
                f"rank {rank} did not join the process group within {self.job.start_timeout:g}"
                " s (start_timeout)"
            )
        return f"rank {rank} did not finish within the {self.job.timeout:g} s timeout (hung?)"

    def _stop(self) -> None:
        """No rank outlives the call: ranks that finished get a moment to exit on their
        own; the others (hung, or blocked on a failed peer) are terminated, then killed."""
        deadline = time.monotonic() + _EXIT_GRACE_S
        for rank in self.done:  # each sent "done", so it was started
            self.procs[rank].join(max(0.0, deadline - time.monotonic()))
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()
        for proc in self.procs:
            if proc.pid is None:
                continue  # never started
            proc.join(2.0)
            if proc.is_alive():
                proc.kill()
                proc.join(2.0)
            if not proc.is_alive():
                proc.close()

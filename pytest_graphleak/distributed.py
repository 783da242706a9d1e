"""Check a training step that runs on several processes (``torch.distributed`` ranks).

``check_distributed(step_factory, world_size=2)`` spawns the ranks; each builds its step
with ``step_factory(rank, world_size)`` and runs ``pytest_graphleak.check`` on it, and the
caller gets one result per rank (the user's guide: ``docs/distributed.md``).

Why the design looks the way it does:

- Ranks are *spawned*, never forked (a forked child would inherit the test process's
  threads, CUDA context and tracked objects), so a rank imports the step factory by
  reference (``FactoryRef``): closures and lambdas are refused up front.
- The tracker may call the step a few more times on one rank only (diagnosis after a
  leak verdict): ``_Lockstep`` keeps the ranks' collectives paired.
- Rendezvous goes through a file store in a private temporary directory, so parallel test
  workers (pytest-xdist) never race for a TCP port.
- A hung rank never hangs the test suite: the group runs under deadlines (start-up, then
  the checks), a silent rank is asked for its Python stacks (faulthandler on SIGUSR1),
  and every child process is terminated, then killed, in ``finally``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import functools
import importlib
import importlib.util
import inspect
import multiprocessing
import os
import pickle
import queue
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Union

from pytest_graphleak.api import check
from pytest_graphleak.options import CheckOptions, OptionError, Settings
from pytest_graphleak.pipeline import GraphLeakError, UnmeasuredError
from pytest_graphleak.report.text import render_text
from pytest_graphleak.result import CheckResult

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: ``(rank, world_size) -> step``: builds one rank's zero-argument training step.
StepFactory = Callable[[int, int], Callable[[], object]]
#: What the caller may pass: a module-level factory, a ``functools.partial`` of one,
#: or a reference string "package.module:function" / "path/to/file.py::function".
FactoryLike = Union[str, StepFactory, "functools.partial[Callable[[], object]]", "FactoryRef"]

#: Seconds for the checks once every rank has joined the process group.
DEFAULT_TIMEOUT_S = 120.0
#: Seconds to spawn the ranks, import torch and join the process group.
DEFAULT_START_TIMEOUT_S = 120.0
#: How long the other ranks get to finish once one rank failed (they are usually
#: blocked in a collective the failed rank will never join).
FAILURE_GRACE_S = 3.0
_EXIT_GRACE_S = 5.0
#: The caller asks a silent rank for its stacks with this signal (not on Windows).
_STACKS_SIGNAL = getattr(signal, "SIGUSR1", None)


class RankError(AssertionError):
    """A rank raised, crashed or hung; the message holds each failed rank's traceback.

    An AssertionError so that pytest shows it as a test failure (not an internal error).
    """


# --------------------------------------------------------------------------- references


@dataclass(frozen=True)
class FactoryRef:
    """A picklable way to find the step factory again inside a spawned rank."""

    module: str  # importable module name ("" when only the file is known)
    file: str  # absolute path of the module's file ("" when not a file)
    qualname: str  # attribute path inside the module: "make_step" or "Steps.make"
    args: tuple[Any, ...] = ()  # bound by functools.partial
    kwargs: tuple[tuple[str, Any], ...] = ()

    @property
    def label(self) -> str:
        return f"{self.module or self.file}:{self.qualname}"

    def load(self) -> Callable[..., Callable[[], object]]:
        module = _load_module(self.module, self.file)
        target: Any = module
        for part in self.qualname.split("."):
            try:
                target = getattr(target, part)
            except AttributeError:
                raise LookupError(
                    f"step factory {self.label!r}: {module.__name__!r} has no attribute {part!r}"
                ) from None
        if not callable(target):
            raise TypeError(f"step factory {self.label!r} is not callable: {type(target).__name__}")
        if self.args or self.kwargs:
            return functools.partial(target, *self.args, **dict(self.kwargs))
        return target


def factory_ref(factory: FactoryLike) -> FactoryRef:
    """Validate ``factory`` in the calling process and turn it into a ``FactoryRef``.

    Raises TypeError/ValueError/LookupError naming what is wrong, before any process is
    spawned.
    """
    if isinstance(factory, FactoryRef):
        ref = factory
    elif isinstance(factory, str):
        ref = _ref_from_string(factory)
    elif isinstance(factory, functools.partial):
        inner = factory_ref(factory.func)
        ref = dataclasses.replace(
            inner,
            args=inner.args + tuple(factory.args),
            kwargs=inner.kwargs + tuple(factory.keywords.items()),
        )
    elif inspect.isfunction(factory) or inspect.isbuiltin(factory) or inspect.isclass(factory):
        ref = _ref_from_function(factory)
    else:
        raise TypeError(
            "step_factory must be a module-level function, a functools.partial of one, or a "
            f"reference string 'module:function' / 'FILE.py::function'; got {factory!r}"
        )
    ref.load()  # fail here, with a clear message, rather than in every rank
    return ref


def _ref_from_function(func: Any) -> FactoryRef:
    qualname: str = getattr(func, "__qualname__", "")
    if "<lambda>" in qualname or "<locals>" in qualname:
        raise TypeError(
            f"step factory {qualname!r} is a lambda or a nested function: spawned ranks cannot "
            "import it; define it at module level (it may build closures itself)"
        )
    module_name: str = getattr(func, "__module__", "") or ""
    file = getattr(sys.modules.get(module_name), "__file__", None) or ""
    if module_name == "__main__":
        if not file:
            raise TypeError(
                f"step factory {qualname!r} lives in an interactive __main__: spawned ranks "
                "cannot import it; put it in a module"
            )
        module_name = ""  # a spawned rank has its own __main__: load the file instead
    return FactoryRef(module_name, os.path.abspath(file) if file else "", qualname)


def _ref_from_string(spec: str) -> FactoryRef:
    if "::" in spec:
        file_part, _, attr = spec.partition("::")
        path = Path(file_part)
        if path.suffix != ".py" or not path.is_file():
            raise ValueError(f"step factory {spec!r}: {file_part!r} is not a Python file")
        return FactoryRef("", str(path.resolve()), attr.replace("::", "."))
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(
            f"step factory {spec!r}: write 'package.module:function' or 'FILE.py::function'"
        )
    return FactoryRef(module_name, "", attr)


def _load_module(module_name: str, file: str) -> ModuleType:
    if module_name:
        try:
            return importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            # Test modules imported by pytest (e.g. --import-mode=importlib) may not be
            # importable by name in a fresh process: fall back to their file.
            missing_is_ours = exc.name is not None and (module_name + ".").startswith(
                exc.name + "."
            )
            if not file or not missing_is_ours:
                raise
    if not file:
        raise LookupError("step factory: neither an importable module nor a file was given")
    name = "_graphleak_rank_" + Path(file).stem
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise LookupError(f"step factory: cannot load {file!r} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def factory_label(factory: FactoryLike) -> str:
    """A short name of a step factory for a check's name (a reference string as given)."""
    if isinstance(factory, str):
        return factory
    inner = getattr(factory, "func", factory)  # functools.partial
    return str(getattr(inner, "__qualname__", None) or repr(inner))


# --------------------------------------------------------------------------- results


@dataclass
class RankResult:
    """What one rank reported for one step factory."""

    rank: int
    result: CheckResult | None = None
    #: The rank's traceback, or why it never reported (crash, timeout, aborted).
    error: str | None = None
    #: Order in which failures reached the caller (0 = first); None if not failed or silent.
    failed_order: int | None = None

    @property
    def leaked(self) -> bool:
        return self.result is not None and self.result.leaked

    @property
    def failed(self) -> bool:
        return self.error is not None or (self.result is not None and self.result.error is not None)

    @property
    def unmeasured(self) -> bool:
        return self.result is not None and bool(self.result.unmeasured)


@dataclass
class DistributedResult:
    """One step factory checked on every rank of a process group."""

    name: str
    world_size: int
    ranks: list[RankResult] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def leaked(self) -> bool:
        return any(r.leaked for r in self.ranks)

    @property
    def leaking_ranks(self) -> list[int]:
        return [r.rank for r in self.ranks if r.leaked]

    @property
    def failed_ranks(self) -> list[int]:
        return [r.rank for r in self.ranks if r.failed]

    @property
    def unmeasured_ranks(self) -> list[int]:
        """Ranks whose probes measured nothing the step uses: no clean verdict there."""
        return [r.rank for r in self.ranks if r.unmeasured]

    def results(self) -> list[CheckResult]:
        """The per-rank CheckResults that came back (named '<name> [rank r/N]')."""
        return [r.result for r in self.ranks if r.result is not None]

    def to_dicts(self) -> list[dict[str, Any]]:
        return [result.to_dict() for result in self.results()]

    def raise_for_failure(self) -> None:
        """RankError if a rank raised/crashed/hung, else GraphLeakError if a rank leaked,
        else UnmeasuredError if a rank measured nothing."""
        if self.failed_ranks:
            raise RankError(self.failure_text())
        if self.leaked:
            raise GraphLeakError(self.leak_text())
        if self.unmeasured_ranks:
            raise UnmeasuredError(self.unmeasured_text())

    def failure_text(self) -> str:
        """Each failed rank's traceback, the first failure first: the later ones are
        usually its consequence (a peer's connection closed, a collective timed out)."""
        failed = sorted(
            (r for r in self.ranks if r.failed),
            key=lambda r: (r.failed_order is None, r.failed_order or 0, r.rank),
        )
        first = failed[0].rank if failed else None
        lines = [
            f"distributed step {self.name!r} failed on rank(s) "
            f"{_ranks(sorted(r.rank for r in failed))} of {self.world_size}"
            + (f"; rank {first} failed first:" if len(failed) > 1 else ":")
        ]
        for rank in failed:
            text = rank.error or (rank.result.error if rank.result else "") or ""
            after = f" (after rank {first} failed)" if rank.rank != first else ""
            lines += [f"--- rank {rank.rank}{after} ---", text.rstrip()]
        return "\n".join(lines)

    def leak_text(self) -> str:
        return self._ranks_text("graph leak", self.leaking_ranks)

    def unmeasured_text(self) -> str:
        return self._ranks_text("not measured", self.unmeasured_ranks)

    def _ranks_text(self, what: str, ranks: list[int]) -> str:
        """``what`` on the named ranks, then each of those ranks' full report."""
        lines = [f"{what} on rank(s) {_ranks(ranks)} of {self.world_size} "
                 f"in distributed step {self.name!r}"]  # fmt: skip
        for rank in self.ranks:
            if rank.rank in ranks and rank.result is not None:
                lines += [f"--- rank {rank.rank} ---", render_text(rank.result).rstrip()]
        return "\n".join(lines)


def _ranks(ranks: Sequence[int]) -> str:
    return ", ".join(str(r) for r in ranks) or "none"


# --------------------------------------------------------------------------- public API


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
        [step_factory], world_size=world_size, backend=backend, timeout=timeout,
        start_timeout=start_timeout, names=None if name is None else [name],
        raise_on_leak=raise_on_leak, on_result=on_result, settings=settings, **options,
    )  # fmt: skip
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
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size: expected an int >= 1, got {world_size!r}")
    if not isinstance(backend, str) or not backend:
        raise ValueError(f"backend: expected a torch.distributed backend name, got {backend!r}")
    try:  # validated here, once, so that a bad keyword never spawns a rank
        resolved = (settings or Settings()).override(
            options, where="check_distributed()", place="check"
        )
    except OptionError as exc:
        raise ValueError(str(exc)) from None
    start_timeout = _seconds("start_timeout", start_timeout)
    timeout = _seconds("timeout", timeout)
    refs = [factory_ref(f) for f in step_factories]
    if not refs:
        raise ValueError("check_distributed_many: give at least one step factory")
    if names is None:
        names = [ref.label for ref in refs]
    elif len(names) != len(refs):
        raise ValueError(f"names: {len(names)} names for {len(refs)} step factories")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="graphleak-dist-", ignore_cleanup_errors=True) as tmp:
        job = _Job(refs, list(names), world_size, backend, start_timeout, timeout, resolved, tmp)
        collected = _Group(job).run()
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


def _seconds(label: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{label}: expected seconds > 0, got {value!r}")
    return float(value)


# --------------------------------------------------------------------------- the caller side


@dataclass(frozen=True)
class _Job:
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


class _Group:
    """The caller's view of the spawned ranks: what each reported, and when to stop waiting."""

    def __init__(self, job: _Job) -> None:
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
            ctx.Process(target=_rank_main, args=(job, rank, self.messages),
                        name=f"graphleak-rank-{rank}")
            for rank in range(job.world_size)
        ]  # fmt: skip
        self.table = [[RankResult(rank) for rank in range(job.world_size)] for _ in job.refs]
        self.ready: set[int] = set()
        self.done: set[int] = set()
        self.failures = 0

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
        deadline = time.monotonic() + self.job.start_timeout
        while len(self.done) < len(self.procs):
            now = time.monotonic()
            if now >= deadline:
                return
            try:
                kind, rank, index, payload = self.messages.get(timeout=min(0.2, deadline - now))
            except queue.Empty:
                if all(p.exitcode is not None for p in self.procs):
                    # Every rank exited: drain what is still in flight, then stop waiting.
                    deadline = min(deadline, time.monotonic() + 0.5)
                continue
            if kind == "ready":
                self.ready.add(rank)
                if len(self.ready) == len(self.procs):
                    deadline = time.monotonic() + self.job.timeout
            elif kind == "done":
                self.done.add(rank)
            else:  # "result" (a dict) or "error" (a traceback)
                entry = self.table[index][rank]
                if kind == "result":
                    entry.result = CheckResult.from_dict(payload)
                else:
                    entry.error = payload
                if entry.failed:
                    entry.failed_order = self.failures
                    self.failures += 1
                    # Its peers are likely blocked in a collective it will never join.
                    deadline = min(deadline, time.monotonic() + FAILURE_GRACE_S)

    def _explain_missing(self) -> None:
        """Give every rank that did not report a reason: exit code, stacks, a failed peer."""
        failed = sorted({r.rank for row in self.table for r in row if r.failed})
        silent = [rank for rank in range(len(self.procs)) if rank not in self.done]
        asked = False  # for the stacks of live ranks (their faulthandler listens on SIGUSR1)
        for rank in silent:
            proc = self.procs[rank]
            if _STACKS_SIGNAL and rank in self.ready and proc.pid is not None and proc.is_alive():
                with contextlib.suppress(OSError):
                    os.kill(proc.pid, _STACKS_SIGNAL)
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
                f"rank {rank} stopped: rank(s) {_ranks(failed)} failed, so its collectives "
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


# --------------------------------------------------------------------------- the rank side


def _rank_main(job: _Job, rank: int, messages: Any) -> None:
    """Entry point of one spawned rank. Reports through ``messages``; never raises."""
    stacks = open(Path(job.workdir, f"rank{rank}.stacks"), "w")  # noqa: SIM115 - lives until exit
    if _STACKS_SIGNAL is not None:  # the caller asks a silent rank for its stacks
        faulthandler.register(_STACKS_SIGNAL, file=stacks, all_threads=True)
    index = 0
    try:
        size = str(job.world_size)
        os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=size,
                          LOCAL_WORLD_SIZE=size)  # fmt: skip
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
            control = _Lockstep(dist, torch)
            messages.put(("ready", rank, -1, None))
            for index, ref in enumerate(job.refs):
                step = _build_step(ref, rank, job.world_size)
                name = f"{job.names[index]} [rank {rank}/{job.world_size}]"
                result = check(control.wrap(step), name=name, raise_on_leak=False,
                               settings=job.settings)  # fmt: skip
                if result.error is not None and control.step_traceback:
                    result.error = f"{result.error}\n{control.step_traceback}"
                messages.put(("result", rank, index, result.to_dict()))
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
            messages.put(("error", rank, index, f"rank {rank}:\n{traceback.format_exc()}"))
    finally:
        if _STACKS_SIGNAL is not None:
            faulthandler.unregister(_STACKS_SIGNAL)
        stacks.close()
        messages.put(("done", rank, -1, None))
        messages.close()
        messages.join_thread()  # everything reported has reached the caller
        sys.stdout.flush()
        sys.stderr.flush()
    # Skip interpreter teardown (torch and gloo threads take seconds to wind down).
    os._exit(0)


def _build_step(ref: FactoryRef, rank: int, world_size: int) -> Callable[[], object]:
    factory = ref.load()
    step = factory(rank, world_size) if _takes_rank(factory) else factory()
    if not callable(step):
        raise TypeError(
            f"step factory {ref.label!r} returned {type(step).__name__}, not a step function"
        )
    return step


def _takes_rank(factory: Callable[..., object]) -> bool:
    """Factories take ``(rank, world_size)``; a zero-argument one reads them from
    ``torch.distributed`` itself (a marked test function is such a factory)."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        for p in parameters
    )


class _Lockstep:
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

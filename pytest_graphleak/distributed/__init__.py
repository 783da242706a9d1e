"""Check a training step that runs on several processes (``torch.distributed`` ranks).

``check_distributed(step_factory, world_size=2)`` spawns the ranks; each builds its step
with ``step_factory(rank, world_size)`` and runs ``pytest_graphleak.check`` on it, and the
caller gets one result per rank (the user's guide: ``docs/distributed.md``).

Why the design looks the way it does:

- Ranks are *spawned*, never forked (a forked child would inherit the test process's
  threads, CUDA context and tracked objects), so a rank imports the step factory by
  reference (``FactoryRef``): closures and lambdas are refused up front.
- The tracker may call the step a few more times on one rank only (diagnosis after a
  leak verdict): ``rank.Lockstep`` keeps the ranks' collectives paired.
- Rendezvous goes through a file store in a private temporary directory, so parallel test
  workers (pytest-xdist) never race for a TCP port.
- A hung rank never hangs the test suite: the group runs under deadlines (start-up, then
  the checks), a silent rank is asked for its Python stacks (faulthandler on SIGUSR1),
  and every child process is terminated, then killed, in ``finally``.

The modules: ``caller`` (the public calls and the caller's view of the group), ``rank``
(what runs in a spawned rank; it imports nothing of the caller side), ``messages`` (what
the two send each other: the job, and named events with keyword fields), ``factory``
(finding the step factory again in a rank) and ``results``.
"""

from pytest_graphleak.distributed.caller import (
    DEFAULT_START_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    check_distributed,
    check_distributed_many,
)
from pytest_graphleak.distributed.factory import (
    FactoryLike,
    FactoryRef,
    StepFactory,
    factory_label,
    factory_ref,
)
from pytest_graphleak.distributed.results import DistributedResult, RankResult
from pytest_graphleak.exceptions import RankError

__all__ = [
    "DEFAULT_START_TIMEOUT_S",
    "DEFAULT_TIMEOUT_S",
    "DistributedResult",
    "FactoryLike",
    "FactoryRef",
    "RankError",
    "RankResult",
    "StepFactory",
    "check_distributed",
    "check_distributed_many",
    "factory_label",
    "factory_ref",
]

"""Leak checks across the ranks of a torch.distributed step (gloo on CPU).

Each spawned group costs a torch import per rank, so the tests are grouped: one group
checks the DDP example's leaky and fixed steps together, one shows a failing rank, one
a hung rank. The factories below are module-level: spawned ranks import them.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from suite_helpers import said_in_order, unchecked

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from pytest_graphleak import GraphLeakError  # noqa: E402
from pytest_graphleak.distributed import (  # noqa: E402
    DistributedResult,
    RankError,
    RankResult,
    check_distributed,
    check_distributed_many,
    factory_ref,
)
from pytest_graphleak.result import CheckResult  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "ddp_leaky_and_fixed.py"


# --------------------------------------------------------------------------- factories


def make_failing_step(rank: int, world_size: int) -> Callable[[], None]:
    """Rank 1 raises at its 3rd call, while rank 0 hangs at its 3rd call."""
    calls = [0]
    flag = torch.ones(1)

    def step() -> None:
        calls[0] += 1
        if calls[0] == 3:
            if rank == 1:
                raise ValueError("boom on rank 1")
            hang_here_forever()
        dist.all_reduce(flag)

    return step


def make_hanging_step(rank: int, world_size: int) -> Callable[[], None]:
    calls = [0]

    def step() -> None:
        calls[0] += 1
        if calls[0] == 2:
            hang_here_forever()

    return step


def hang_here_forever() -> None:
    time.sleep(3600)


def make_plain_step(rank: int, world_size: int, scale: float = 1.0) -> Callable[[], None]:
    return lambda: None


# --------------------------------------------------------------------------- spawned groups


def test_ddp_leak_is_caught_on_its_rank_and_the_fixed_twin_passes() -> None:
    seen: list[CheckResult] = []
    leaky, fixed = check_distributed_many(
        [f"{EXAMPLE}::make_leaky_step", f"{EXAMPLE}::make_fixed_step"],
        world_size=2,
        names=["ddp leaky", "ddp fixed"],
        raise_on_leak=False,
        on_result=seen.append,
    )
    assert leaky.leaked and leaky.leaking_ranks == [0]  # only the logging rank keeps losses
    assert not fixed.leaked and fixed.failed_ranks == [] and fixed.leaking_ranks == []
    rank0 = leaky.ranks[0].result
    assert rank0 is not None and rank0.pattern == "list-accumulation"
    assert {g.metric for g in rank0.verdict.growths} >= {"torch.tensors", "torch.nodes"}
    assert rank0.name == "ddp leaky [rank 0/2]"
    # Diagnosis ran extra steps on rank 0 only; the lockstep control kept rank 1 serving
    # its collectives, so the group finished instead of deadlocking.
    assert rank0.diagnosis is not None

    with pytest.raises(GraphLeakError) as caught:
        leaky.raise_for_failure()
    text = str(caught.value)
    assert "graph leak on rank(s) 0 of 2" in text and "--- rank 0 ---" in text
    assert "--- rank 1 ---" not in text and "list-accumulation" in text
    fixed.raise_for_failure()  # clean on every rank: no exception

    assert sorted(r.name for r in seen) == [
        "ddp fixed [rank 0/2]",
        "ddp fixed [rank 1/2]",
        "ddp leaky [rank 0/2]",
        "ddp leaky [rank 1/2]",
    ]
    for result in leaky.results() + fixed.results():  # plain data: JSON and back
        data = result.to_dict()
        assert CheckResult.from_dict(json.loads(json.dumps(data))).name == data["name"]


def test_a_failing_rank_is_named_with_its_traceback_and_its_peer_is_stopped() -> None:
    with pytest.raises(RankError) as caught:
        check_distributed(make_failing_step, world_size=2, steps=4, warmup=1, timeout=60)
    text = str(caught.value)
    assert "failed on rank(s) 0, 1 of 2; rank 1 failed first:" in text
    # the first failure first, then its consequence
    rank1 = text[text.index("--- rank 1 ---") : text.index("--- rank 0 (after rank 1 failed) ---")]
    assert "ValueError: boom on rank 1" in rank1 and "at step 3" in rank1
    assert 'raise ValueError("boom on rank 1")' in rank1  # its traceback, source line included
    rank0 = text[text.index("--- rank 0 (after rank 1 failed) ---") :]
    assert "rank 0 stopped: rank(s) 1 failed" in rank0
    assert "hang_here_forever" in rank0  # its stacks, asked for before it was stopped
    # The hung peer was stopped because its peer failed ("rank 0 stopped" above), not
    # waited for until the 60 s timeout: the words say so, no clock is asserted.
    assert "did not finish within" not in rank0


def test_failures_are_listed_first_failure_first() -> None:
    result = DistributedResult(
        "step",
        3,
        [
            RankResult(0, error="RuntimeError: Connection closed by peer", failed_order=1),
            RankResult(1),
            RankResult(2, error="ValueError: the real cause", failed_order=0),
        ],
    )
    text = result.failure_text()
    assert text.startswith("distributed step 'step' failed on rank(s) 0, 2 of 3; rank 2")
    assert text.index("the real cause") < text.index("--- rank 0 (after rank 2 failed) ---")
    assert "--- rank 1" not in text
    with pytest.raises(RankError):
        result.raise_for_failure()


def test_a_hung_rank_times_out_with_its_stack() -> None:
    with pytest.raises(RankError) as caught:
        check_distributed(make_hanging_step, world_size=1, steps=3, warmup=0, timeout=3)
    text = str(caught.value)
    assert "did not finish within the 3 s timeout" in text
    assert "hang_here_forever" in text  # faulthandler's dump of the hung rank


# --------------------------------------------------------------------------- no spawn


def test_factory_references_are_checked_before_spawning(tmp_path: Path) -> None:
    def nested(rank: int, world_size: int) -> Callable[[], None]:
        return lambda: None

    with pytest.raises(TypeError, match="nested function"):
        factory_ref(nested)
    with pytest.raises(TypeError, match="lambda"):
        unchecked(factory_ref)(lambda rank, world_size: None)
    with pytest.raises(TypeError, match="module-level function"):
        unchecked(factory_ref)(42)
    with pytest.raises(ValueError, match=r"write .package\.module:function."):
        factory_ref("no_colon_here")
    with pytest.raises(ValueError, match="is not a Python file"):
        factory_ref(f"{tmp_path / 'missing.py'}::make")
    with pytest.raises(LookupError, match="has no attribute 'nope'"):
        factory_ref(f"{EXAMPLE}::nope")
    with pytest.raises(ModuleNotFoundError):
        factory_ref("no_such_module_graphleak:make")

    ref = factory_ref(functools.partial(make_plain_step, scale=2.0))
    assert ref.qualname == "make_plain_step" and dict(ref.kwargs) == {"scale": 2.0}
    assert callable(ref.load()(0, 1))  # the partial is re-bound after loading
    assert factory_ref(f"{EXAMPLE}::make_fixed_step").file == str(EXAMPLE)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"world_size": 0}, "world_size must be an integer >= 1, got 0"),
        ({"world_size": True}, "world_size must be an integer >= 1, got True"),
        ({"timeout": -1}, "timeout must be a number of seconds > 0, got -1"),
        ({"start_timeout": "soon"}, "start_timeout must be a number of seconds > 0, got 'soon'"),
        ({"steps": 0}, "check_distributed(): steps must be an integer >= 1, got 0"),
        ({"warmup": -2}, "check_distributed(): warmup must be an integer >= 0, got -2"),
        ({"warmup": 0, "steps": 1}, "steps=1 with warmup=0 can never flag a leak"),
        ({"stepz": 3}, "unknown keyword argument 'stepz'"),
        ({"backend": ""}, "backend: expected a torch.distributed backend name"),
    ],
)
def test_bad_arguments_name_what_is_wrong(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as caught:
        unchecked(check_distributed)(make_plain_step, **kwargs)
    assert message in str(caught.value)


def test_unpicklable_bound_arguments_fail_before_spawning() -> None:
    with pytest.raises(TypeError, match="cannot be sent to the spawned ranks"):
        bound = functools.partial(unchecked(make_plain_step), scale=lambda: 1.0)
        unchecked(check_distributed)(bound)


# --------------------------------------------------------------------------- the fixture


def test_fixture_and_marker_fail_naming_the_rank(pytester: pytest.Pytester) -> None:
    """Through pytest: ``graphleak.check_distributed`` fails on a rank-1 leak, and every
    rank's result reaches the test report (``report.graphleak``); a test marked
    ``no_graph_growth(world_size=2)`` is the step factory of each rank; a marked test
    whose ranks measured nothing (probes="cuda" on CPU) fails, naming the ranks. One
    pytest subprocess runs the three: each spawns its own group of ranks."""
    pytester.makeconftest(
        """
        import json

        RECORDED = []

        def pytest_runtest_logreport(report):
            if report.when == "call":
                RECORDED.extend(r["name"] for r in getattr(report, "graphleak", []))
                with open("recorded.json", "w") as f:
                    json.dump(RECORDED, f)
        """
    )
    pytester.makepyfile(
        test_ranks="""
        import pytest
        import torch

        def make_step(rank, world_size):
            weight = torch.ones(3, requires_grad=True)
            kept = []

            def step():
                loss = (weight * 2).sum()
                if rank == 1:
                    kept.append(loss)

            return step

        def test_ranks(graphleak):
            graphleak.check_distributed(make_step, world_size=2, steps=8, warmup=2)

        @pytest.mark.no_graph_growth(world_size=2, steps=8, warmup=2)
        def test_marked():
            import torch.distributed as dist
            return make_step(dist.get_rank(), dist.get_world_size())
        """,
        test_cuda_on_cpu="""
        import pytest

        @pytest.mark.no_graph_growth(world_size=2, steps=3, warmup=1, probes="cuda")
        def test_marked():
            return lambda: None
        """,
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-q", "--graphleak", "--graphleak-steps=8"
    )
    result.assert_outcomes(failed=3)
    said_in_order(  # read folded: the failure text breaks at 80 columns
        result.stdout.str(),
        [
            "*graph leak on rank(s) 1 of 2 in distributed step*check_distributed(make_step)*",
            "*--- rank 1 ---*",
            "*list-accumulation*",
            "*graph leak on rank(s) 1 of 2 in distributed step 'test_ranks.py::test_marked'*",
        ],
    )
    result.stdout.fnmatch_lines(["*not measured on rank(s) 0, 1 of 2*"])
    recorded = json.loads((pytester.path / "recorded.json").read_text())
    assert sorted(recorded) == [  # the unmeasured ranks' results reach the report too
        "test_cuda_on_cpu.py::test_marked [rank 0/2]",
        "test_cuda_on_cpu.py::test_marked [rank 1/2]",
        "test_ranks.py::test_marked [rank 0/2]",
        "test_ranks.py::test_marked [rank 1/2]",
        "test_ranks.py::test_ranks::check_distributed(make_step) [rank 0/2]",
        "test_ranks.py::test_ranks::check_distributed(make_step) [rank 1/2]",
    ]


def test_a_rank_that_measured_nothing_is_no_clean_verdict() -> None:
    """probes="cuda" on a CPU group measures nothing the step uses: as in a
    single-process check, that is no clean verdict (UnmeasuredError), and the result
    names the rank."""
    from pytest_graphleak import UnmeasuredError

    result = check_distributed(
        make_plain_step, world_size=1, steps=3, warmup=1, probes="cuda", raise_on_leak=False
    )
    assert not result.leaked and result.unmeasured_ranks == [0]
    assert result.unmeasured_text().startswith("not measured on rank(s) 0 of 1")
    with pytest.raises(UnmeasuredError, match=r"not measured on rank\(s\) 0 of 1"):
        result.raise_for_failure()


def test_ranks_send_named_events_the_caller_handles_by_name() -> None:
    """xdist-style events: a name plus keyword fields, each handled by ``Group.on_<name>``
    with exactly those fields; the rank side imports nothing of the caller side."""
    import ast
    import inspect
    import queue

    from pytest_graphleak.distributed import caller, messages, rank

    channel: queue.Queue[object] = queue.Queue()
    messages.send(channel, "result", rank=1, index=0, result={"name": "x"})
    assert channel.get_nowait() == ("result", {"rank": 1, "index": 0, "result": {"name": "x"}})
    with pytest.raises(TypeError, match="expected \\('rank', 'index', 'result'\\)"):
        messages.send(channel, "result", rank=1)
    with pytest.raises(TypeError):
        messages.send(channel, "finished", rank=1)
    for name, fields in messages.EVENTS.items():
        handler = getattr(caller.Group, f"on_{name}")
        assert tuple(inspect.signature(handler).parameters)[1:] == fields
    tree = ast.parse(Path(rank.__file__).read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "pytest_graphleak.distributed.caller" not in imported

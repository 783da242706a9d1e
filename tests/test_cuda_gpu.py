"""The CUDA probe on a real GPU. Skipped without one (the faked twins are in
``test_cuda_probe.py``). On a GPU machine run::

    python -m pytest tests/test_cuda_gpu.py -v -p no:cacheprovider
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import torch
else:
    torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"
)

from pytest_graphleak import check  # noqa: E402

STEPS, WARMUP = 12, 3


@pytest.fixture
def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)
    ).cuda()


def test_leaky_cuda_step_is_caught_and_its_fixed_twin_passes(model: torch.nn.Module) -> None:
    optimizer = torch.optim.Adam(model.parameters())  # its state appears during warmup
    inputs = torch.randn(128, 64, device="cuda")
    losses: list[torch.Tensor] = []

    def train() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss: torch.Tensor = model(inputs).pow(2).mean()
        loss.backward()
        optimizer.step()
        return loss

    def leaky_step() -> None:
        losses.append(train())  # keeps each loss and its graph alive on the GPU

    def fixed_step() -> None:
        losses.append(train().item())  # type: ignore[arg-type]

    leak = check(leaky_step, steps=STEPS, warmup=WARMUP, diagnose=False)
    grown = {g.metric for g in leak.verdict.growths}
    assert leak.leaked, leak.verdict.reason
    assert {"cuda.tensors", "cuda.allocated_bytes"} <= grown, grown
    losses.clear()
    clean = check(fixed_step, steps=STEPS, warmup=WARMUP, diagnose=False)
    assert not clean.leaked, clean.verdict.reason
    assert "cuda.allocated_bytes" in clean.series


def test_a_growing_allocator_cache_is_not_a_leak() -> None:
    calls = [0]

    def step() -> None:
        calls[0] += 1
        scratch = torch.empty(calls[0] * (8 << 20), dtype=torch.uint8, device="cuda")
        scratch.fill_(1)  # a bigger temporary every step: reserved (the cache) grows
        del scratch

    result = check(step, steps=STEPS, warmup=WARMUP, diagnose=False)
    reserved = result.series["cuda.reserved_bytes"]
    assert reserved[-1] > reserved[WARMUP], reserved
    assert not result.leaked, result.verdict.reason


def test_probing_never_initialises_cuda() -> None:
    code = textwrap.dedent(
        """
        import torch
        from pytest_graphleak import check
        from pytest_graphleak.probes import make_probes
        names = [p.name for p in make_probes()]
        check(lambda: torch.ones(3).sum(), steps=3, warmup=1)
        assert "cuda" not in names, names
        assert not torch.cuda.is_initialized()
        print("cuda untouched")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "cuda untouched" in done.stdout

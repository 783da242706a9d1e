"""``created at:`` for memory-growth names what makes the growing object."""

from __future__ import annotations

import pytest

import pytest_graphleak
from pytest_graphleak.diagnose.sites import memory_sites
from pytest_graphleak.report.text import render_text

torch = pytest.importorskip("torch")


def test_memory_growth_names_the_line_that_makes_what_grows() -> None:
    """Not the lines every step runs (backward, optimizer.step(), zero_grad), which also
    allocate: the torch.cat that rebuilds the kept buffer."""
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.Adam(model.parameters())
    kept = {"buf": torch.zeros(0, 8)}

    def step() -> None:
        x = torch.randn(16, 8)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        kept["buf"] = torch.cat([kept["buf"], x[:2]])

    result = pytest_graphleak.check(step, steps=10)
    d = result.diagnosis
    assert d is not None and d.pattern == "memory-growth", render_text(result)
    assert [s.line for s in d.sites] == ['kept["buf"] = torch.cat([kept["buf"], x[:2]])'], d.sites
    assert d.chain[:2] == ["local 'kept'", "dict['buf']"], d.chain


_EVERY_STEP = ("backward()", "opt.step()", "zero_grad()")


def test_a_numpy_array_rebuilt_in_a_step_check_is_held_by_and_made_at_its_line() -> None:
    """The torch site recorder does not see numpy: one more step under tracemalloc reads
    where the array now in the grown slot was allocated (issue 34 item 5)."""
    np = pytest.importorskip("numpy")
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    class Trainer:
        def __init__(self) -> None:
            self.history = np.zeros((0, 256))

        def step(self) -> None:
            loss = model(torch.randn(16, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            self.history = np.concatenate([self.history, np.random.rand(1024, 256)])

    trainer = Trainer()
    result = pytest_graphleak.check(trainer.step, steps=10)
    d = result.diagnosis
    text = render_text(result)
    assert d is not None and d.pattern == "memory-growth", text
    assert d.chain[-2:] == ["Trainer.history", "ndarray"], d.chain
    assert "  held by: " in text
    assert d.sites and "self.history = np.concatenate(" in d.sites[0].line, text
    assert not any(word in site.line for site in d.sites for word in _EVERY_STEP), text
    assert "grows by 2.0 MiB per step" in text


def test_bytes_appended_in_a_step_check_are_held_by_and_made_at_their_line() -> None:
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    logs: list[bytes] = []

    def step() -> None:
        loss = model(torch.randn(16, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        logs.append(bytes(2_000_000))

    result = pytest_graphleak.check(step, steps=10)
    d = result.diagnosis
    text = render_text(result)
    assert d is not None and d.pattern == "memory-growth", text
    assert d.chain[0] == "local 'logs'" and d.chain[-1].startswith("list(len="), d.chain
    assert [s.line for s in d.sites] == ["logs.append(bytes(2_000_000))"], text


def test_memory_sites_leave_out_lines_far_below_the_largest() -> None:
    """The tracemalloc fallback: a line that keeps a little each step (as an optimizer's
    step may) is not named beside the one that keeps megabytes."""
    big: list[bytes] = []
    small: list[bytes] = []

    def step() -> None:
        small.append(bytes(1_000))
        big.append(bytes(1_000_000))

    sites = memory_sites(step)
    assert [s.line for s in sites] == ["big.append(bytes(1_000_000))"], sites

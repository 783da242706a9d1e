"""One container rule (``heap.containers``): a container on the chain that grows with the
steps makes ``list-accumulation``, with its ``stored at:`` line and a fix worded for it,
whatever its type: a ``collections.deque`` gets what a list gets (it got
``retained-grad-fn``, no ``stored at:`` and the generic fix, issue 34)."""

from __future__ import annotations

import collections
from typing import Any

import pytest

import minigrad as mg
from pytest_graphleak import check
from pytest_graphleak.heap.containers import GROWABLE, SIZED, growable, length
from pytest_graphleak.report.text import render_text


class _History:  # the user's own class: its __len__ is read
    def __init__(self) -> None:
        self._rows: dict[int, object] = {}

    def __len__(self) -> int:
        return len(self._rows)


def test_the_rule_names_every_container_that_can_grow() -> None:
    for made in (list, collections.deque, dict, set, collections.OrderedDict, collections.Counter):
        assert growable(made()), made
        assert length(made()) == 0
    assert collections.defaultdict in GROWABLE or growable(collections.defaultdict(list))
    assert not growable(()) and not growable(frozenset())  # sized, but not grown in place
    assert {tuple, frozenset} <= set(SIZED)
    history = _History()
    history._rows[0] = 1
    assert length(history) == 1  # a user's object whose length can grow
    assert length(object()) is None
    assert length(mg.Tensor([1.0, 2.0])) is None  # a library object: its length is a shape


def _step(holder: Any, backend: str) -> Any:
    if backend == "torch":
        torch = pytest.importorskip("torch")
        w = torch.ones(4, requires_grad=True)
    else:
        w = mg.Tensor([1.0, 1.0, 1.0, 1.0], requires_grad=True)
    state = {"recent": holder}

    def step() -> None:
        loss = (w * 2.0).sum()
        state["recent"].append(loss)

    return step


@pytest.mark.parametrize("backend", ["torch", "minigrad"])
def test_a_deque_gets_what_a_list_gets(backend: str) -> None:
    texts = []
    holders: tuple[list[object], collections.deque[object]] = ([], collections.deque())
    for holder in holders:
        result = check(_step(holder, backend), steps=8, warmup=2)
        assert result.diagnosis is not None
        diagnosis = result.diagnosis
        assert diagnosis.pattern == "list-accumulation", diagnosis.notes
        kind = type(holder).__name__
        # The caller's local is the nearest root: ``local 'holder' -> deque(len=15) -> ...``
        assert diagnosis.chain[0] == "local 'holder'"
        assert diagnosis.chain[1].startswith(f"{kind}(len="), diagnosis.chain
        assert diagnosis.chain[2].startswith("Tensor(shape=(), grad_fn=Sum")
        assert [site.line for site in diagnosis.stored_at] == ['state["recent"].append(loss)']
        assert diagnosis.fix == (
            'store loss.item() (a plain number) instead of loss, so that state["recent"] '
            'keeps no graph: state["recent"].append(loss.item())'
        )
        texts.append(render_text(result))
    assert f"{kind} on the chain grows by 1 per step" in texts[1]


class _Rows:  # the user's own container: its length is what grows
    def __init__(self) -> None:
        self._by_step: dict[int, object] = {}

    def __len__(self) -> int:
        return len(self._by_step)

    def add(self, value: object) -> None:
        self._by_step[len(self._by_step)] = value


def test_a_user_object_whose_length_grows_is_a_growing_container() -> None:
    w = mg.Tensor([1.0, 1.0], requires_grad=True)
    rows = _Rows()

    def step() -> None:
        loss = (w * 2.0).sum()
        rows.add(loss)

    result = check(step, steps=8, warmup=2)
    assert result.diagnosis is not None and result.diagnosis.pattern == "list-accumulation"
    assert "_Rows on the chain grows by 1 per step" in render_text(result)


class _RowList(list):  # type: ignore[type-arg]
    pass


class _Store(dict):  # type: ignore[type-arg]
    pass


@pytest.mark.parametrize(
    ("holder", "line", "fix"),
    [
        (
            _RowList(),
            "rows.append(loss)",
            "store loss.item() (a plain number) instead of loss, so that rows keeps no graph: "
            "rows.append(loss.item())",
        ),
        (
            _Store(),
            "rows[len(rows)] = loss",
            "store loss.item() (a plain number) instead of loss, so that rows keeps no graph: "
            "rows[len(rows)] = loss.item()",
        ),
    ],
)
def test_a_subclass_of_a_container_gets_the_words_its_base_gets(
    holder: Any, line: str, fix: str
) -> None:
    w = mg.Tensor([1.0, 1.0], requires_grad=True)
    rows = holder

    def step() -> None:
        loss = (w * 2.0).sum()
        if isinstance(rows, list):
            rows.append(loss)
        else:
            rows[len(rows)] = loss

    result = check(step, steps=8, warmup=2)
    assert result.diagnosis is not None and result.diagnosis.pattern == "list-accumulation"
    assert [site.line for site in result.diagnosis.stored_at] == [line]
    assert result.diagnosis.fix == fix


def test_a_namedtuple_record_in_a_list_is_not_taken_for_the_list() -> None:
    from pytest_graphleak.result import Link
    from pytest_graphleak.words.lines import stored_fix

    scalar = Link("tensor", "Tensor", shape=[])
    batch = Link("container", "Batch", edge="index", base="tuple", length=2)
    kept = [
        Link("root", "local", name="kept"),
        Link("container", "list", edge="index", base="list", length=24),
        batch,
        scalar,
    ]
    assert stored_fix("list-accumulation", "kept.append(Batch(x, y))", kept) == (
        ""  # a record: which field to detach is not known from this line
    )
    state = [
        Link("root", "fixture", name="state"),
        Link("container", "dict", edge="key", key="'batch'", base="dict"),
        batch,
        scalar,
    ]
    assert stored_fix("list-accumulation", 'state["batch"] = Batch(x, y)', state) == ""


class _TensorDictLike:
    """Shaped like a TensorDict (``detach``, ``batch_size``, ``keys``): the library is
    optional, so the rule tells one by its shape."""

    batch_size: tuple[int, ...] = ()

    def __init__(self, **items: Any) -> None:
        self._items = dict(items)

    def keys(self) -> Any:
        return self._items.keys()

    def detach(self) -> _TensorDictLike:
        return _TensorDictLike(**{k: v.detach() for k, v in self._items.items()})


def test_a_tensordict_kept_in_a_list_is_detached_whole() -> None:
    torch = pytest.importorskip("torch")
    lin = torch.nn.Linear(4, 2)
    rollouts: list[Any] = []

    def step() -> None:
        td = _TensorDictLike(loss=lin(torch.randn(3, 4)).sum())
        rollouts.append(td)

    result = check(step, steps=8, warmup=2)
    diagnosis = result.diagnosis
    assert diagnosis is not None and diagnosis.pattern == "list-accumulation", result
    assert [link.kind for link in diagnosis.links[1:3]] == ["container", "tensordict"]
    # rollouts.append(td.detach()) (the container's own detach, detaching every tensor it
    # holds) was tried: it cut the graph, but the unbounded list still grew, so that change
    # is never printed alone; what is printed says to bound the list too
    tried = diagnosis.fix_tried
    assert tried is not None and not tried.verified, tried
    assert "rollouts.append(td.detach())" not in diagnosis.fix, diagnosis.fix
    assert "also bound or clear it (collections.deque(maxlen=N)" in diagnosis.fix
    assert length(_TensorDictLike(a=1, b=2)) == 2  # its entries, not its batch size


def test_a_user_object_that_gains_an_attribute_each_step_grows() -> None:
    torch = pytest.importorskip("torch")
    lin = torch.nn.Linear(4, 1)

    class Log:
        pass

    log = Log()
    count = [0]

    def step() -> None:
        count[0] += 1
        setattr(log, f"loss_{count[0]}", lin(torch.randn(2, 4)).sum())

    result = check(step, steps=8, warmup=2)
    diagnosis = result.diagnosis
    assert diagnosis is not None and diagnosis.pattern == "list-accumulation", result
    assert any("Log on the chain gains 1 attribute per step" in n for n in diagnosis.notes)

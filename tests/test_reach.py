"""The start walk (``pytest_graphleak.engine.reach``): what it enters, what it leaves, its limit."""

from __future__ import annotations

import gc
import json
import sys
import weakref

import pytest
from suite_helpers import MakeModule

from pytest_graphleak.engine.reach import Reach, reachable


class Marker:
    """A tracked object to look for."""


class Holder:
    def __init__(self, value: object) -> None:
        self.value = value


def ids(objects: list[object] | None) -> set[int]:
    assert objects is not None
    try:
        return {id(obj) for obj in objects}
    finally:
        objects.clear()


def test_containers_instances_and_closure_cells_are_entered() -> None:
    deep = Marker()
    in_cell = Marker()
    root = {"a": [1, "x", (Holder({"k": deep}),)]}

    def step() -> object:
        return in_cell

    found = ids(reachable([root, step]))
    assert id(deep) in found and id(in_cell) in found


def test_user_module_globals_are_entered_library_ones_are_not(fake_module: MakeModule) -> None:
    user = fake_module("graphleak_fake_user_mod", installed=False)
    library = fake_module("graphleak_fake_installed_mod", installed=True)
    user.held = Marker()
    library.held = Marker()
    found = ids(reachable([user, library]))
    assert id(user.held) in found
    assert id(library.held) not in found
    # a function's globals follow the same rule (the stdlib's json here)
    assert id(vars(json)["_default_encoder"]) not in ids(reachable([json.dumps]))


def test_user_classes_are_entered_library_classes_and_code_are_not(fake_module: MakeModule) -> None:
    user = fake_module("graphleak_fake_user_cls", installed=False)
    cls = type("Trainer", (), {"total": Marker(), "__module__": user.__name__})
    found = ids(reachable([cls()]))
    assert id(cls.__dict__["total"]) in found
    frame_local = Marker()
    frame = sys._getframe()
    assert id(frame_local) not in ids(reachable([frame, test_reach_holds_nothing.__code__]))


def test_pytest_and_plugin_objects_are_not_entered() -> None:
    hidden = Marker()
    private = type("Request", (), {"__module__": "_pytest.fixtures"})()
    private.value = hidden
    assert id(hidden) not in ids(reachable([private]))


def test_past_the_limit_the_walk_gives_up() -> None:
    many = [[i] for i in range(50)]
    assert reachable([many], limit=20) is None
    assert reachable([many], limit=200) is not None
    # one huge container gives up before looking at its items
    huge = [[i] for i in range(1000)]
    assert reachable([huge], limit=100) is None


def test_a_container_bigger_than_the_limit_is_never_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sizes are read before listing (C ``__len__``, also for subclasses), so a huge
    dataset costs nothing to give up on, even when its items hold nothing tracked."""

    class Samples(list[object]):  # a user subclass: its own __len__ is never called
        def __len__(self) -> int:
            raise AssertionError("the walk called user code")

    listed: list[int] = []
    real = gc.get_referents

    def counting(*objects: object) -> list[object]:
        listed.append(len(objects))
        return real(*objects)

    monkeypatch.setattr(gc, "get_referents", counting)
    numbers = list(range(1000))  # untracked items: listing them would find nothing
    assert reachable([{"data": numbers}], limit=100) is None
    assert reachable([Samples(range(1000))], limit=100) is None
    assert listed == [1]  # the dict's items only, never the lists'
    assert reachable([numbers], limit=2000) is not None


def test_reach_holds_nothing(fake_module: MakeModule) -> None:
    user = fake_module("graphleak_fake_user_held", installed=False)
    cls = type("Model", (), {"__module__": user.__name__})
    instance = cls()
    instance.weights = [Marker()]
    walker = Reach()
    found = walker.walk([instance, cls])
    assert found is not None
    found.clear()
    refs = [weakref.ref(instance), weakref.ref(cls), weakref.ref(instance.weights[0])]
    del instance, cls, found
    gc.collect()
    assert [ref() for ref in refs] == [None, None, None]
    # the caches key on module names only
    assert all(isinstance(key, str) for key in walker._user_module)


def test_loggers_are_reached_not_entered_but_a_users_handler_is() -> None:
    # The logging manager lists every logger of the process (~1,500 objects under
    # transformers, 60% of a Trainer's start walk); a user's subclass is entered.
    import logging

    kept = Marker()

    class Keeper(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.kept = [kept]

        def emit(self, record: logging.LogRecord) -> None:
            pass

    logger = logging.getLogger("graphleak.test_reach")
    handler = Keeper()
    logger.addHandler(handler)
    try:
        found = ids(reachable([Holder(logger), Holder(handler)]))
    finally:
        logger.removeHandler(handler)
    assert id(logger) in found and id(kept) in found
    assert id(logger.manager) not in found and id(logger.handlers) not in found

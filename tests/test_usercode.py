"""The one rule for "user code or library?" (pytest_graphleak.heap.usercode)."""

from __future__ import annotations

import contextlib
import os
import sys
import sysconfig
import types

import pytest

import minigrad
import pytest_graphleak.engine.tracker
from pytest_graphleak.diagnose.edges import is_private
from pytest_graphleak.heap.usercode import (
    is_private_module,
    is_pytest_module,
    is_user_file,
    is_user_module,
    library_label,
)

SITE = sysconfig.get_paths()["purelib"]


@pytest.mark.parametrize(
    "path",
    [
        os.path.join(SITE, "transformers", "models", "bert", "modeling_bert.py"),
        "/usr/lib/python3/dist-packages/numpy/core/numeric.py",
        contextlib.__file__,
        pytest.__file__,
        minigrad.__file__,
        pytest_graphleak.engine.tracker.__file__,
        "<frozen importlib._bootstrap>",
        "",
        None,
    ],
)
def test_library_files(path: object) -> None:
    assert is_user_file(path) is False


@pytest.mark.parametrize(
    "path",
    [
        __file__,
        "/home/me/project/pytest_helpers.py",  # named like pytest, still the user's
        "/home/me/project/minigrad_experiments/train.py",
        "<string>",
        "<ipython-input-3-abc>",
    ],
)
def test_user_files(path: str) -> None:
    assert is_user_file(path) is True


def test_library_label_is_relative_to_the_install_root() -> None:
    path = os.path.join(SITE, "transformers", "models", "bert", "modeling_bert.py")
    assert library_label(path) == "transformers/models/bert/modeling_bert.py"
    assert library_label(contextlib.__file__) == "contextlib.py"
    assert library_label(minigrad.__file__) == "minigrad/__init__.py"
    tracker_file = pytest_graphleak.engine.tracker.__file__
    assert library_label(tracker_file) == "pytest_graphleak/engine/tracker.py"


def test_modules_by_exact_package_name(monkeypatch: pytest.MonkeyPatch) -> None:
    helpers = types.ModuleType("pytest_helpers")
    helpers.__file__ = os.path.join(os.path.dirname(__file__), "pytest_helpers.py")
    monkeypatch.setitem(sys.modules, "pytest_helpers", helpers)
    assert is_user_module("pytest_helpers") is True
    assert not is_pytest_module("pytest_helpers")
    assert not is_private_module("pytest_helpers")
    assert is_pytest_module("_pytest.logging") and is_pytest_module("pluggy")
    assert is_private_module("pytest_graphleak.diagnose")
    assert is_user_module("contextlib") is False
    assert is_user_module("minigrad.ops") is False
    assert is_user_module("builtins") is False  # no file
    assert is_user_module("__main__") is True
    assert is_user_module("not_imported_anywhere_xyz") is None


def test_objects_of_a_user_module_named_like_pytest_are_walked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    helpers = types.ModuleType("pytest_helpers")
    helpers.__file__ = "/home/me/project/pytest_helpers.py"
    monkeypatch.setitem(sys.modules, "pytest_helpers", helpers)
    holder = type("Holder", (), {"__module__": "pytest_helpers"})()
    assert not is_private(holder)
    assert is_private(pytest.MonkeyPatch())


def test_either_spelling_in_a_library_makes_a_library_file(tmp_path: object) -> None:
    # A user's path that is a symlink into site-packages is the library's; a symlink
    # from site-packages' spelling is settled by the absolute spelling alone.
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    library_dir = Path(SITE)
    target = next(library_dir.glob("*.py"), None) or next(library_dir.rglob("*.py"))
    link = tmp_path / "linked.py"
    link.symlink_to(target)
    is_user_file.cache_clear()
    assert not is_user_file(str(link))
    assert is_user_file(str(tmp_path / "plain.py"))

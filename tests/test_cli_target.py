"""How ``graphleak check`` finds the step function: every mistake is a clear usage error."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_graphleak.cli.exits import UsageError, UserCodeError
from pytest_graphleak.cli.target import resolve


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A scratch directory as cwd; sys.path and sys.modules restored afterwards."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_file_function_is_loaded_with_its_directory_on_sys_path(tree: Path) -> None:
    write(tree / "lib" / "helper_mod_a.py", "VALUE = 41\n")
    write(
        tree / "lib" / "train_a.py",
        "import helper_mod_a\n\ndef step():\n    return helper_mod_a.VALUE + 1\n",
    )
    target = resolve("lib/train_a.py::step")
    assert target.name == "lib/train_a.py::step"
    assert target.func() == 42


def test_file_inside_a_package_imports_with_its_dotted_name(tree: Path) -> None:
    write(tree / "pkg_b" / "__init__.py", "")
    write(tree / "pkg_b" / "util.py", "X = 7\n")
    write(tree / "pkg_b" / "train.py", "from .util import X\n\ndef step():\n    return X\n")
    target = resolve("pkg_b/train.py::step")
    assert target.func() == 7
    assert "pkg_b.train" in sys.modules


def test_module_colon_function_and_class_attribute(tree: Path) -> None:
    write(
        tree / "mod_c.py", "class Loop:\n    @staticmethod\n    def step():\n        return 'ok'\n"
    )
    sys.path.insert(0, str(tree))
    assert resolve("mod_c:Loop.step").func() == "ok"
    assert resolve("mod_c.py::Loop::step").func() == "ok"  # pytest node-id spelling


def test_a_file_shadowing_a_stdlib_module_does_not_replace_it(tree: Path) -> None:
    import json

    write(tree / "json.py", "def step():\n    return 'mine'\n")
    assert resolve("json.py::step").func() == "mine"
    assert sys.modules["json"] is json


def test_default_arguments_are_fine(tree: Path) -> None:
    write(tree / "mod_d.py", "def step(n=2, *args, **kwargs):\n    return n\n")
    assert resolve("mod_d.py::step").func() == 2


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("missing.py::step", "no such file: missing.py"),
        ("sub::step", "sub is a directory"),
        ("notes.txt::step", "not a Python file"),
        ("train_e.py", "name the step function too: 'train_e.py::FUNCTION'"),
        ("train_e", "does not name a step function"),
        ("train_e.py::stpe", "has no function 'stpe' (did you mean step?)"),
        ("train_e.py::nothing_like_it", "zero-argument functions there: step)"),
        ("train_e.py::needs_args", "needs arguments (model, batch)"),
        ("train_e.py::CONSTANT", "is an int, not a function"),
        ("train_e.py::agen", "is async"),
        ("train_e.py::coro", "is async"),
        ("train_e.py::gen", "is a generator function"),
        ("train_e.py::1bad", "is not a function name"),
        ("no_such_module_xyz:step", "no module named 'no_such_module_xyz'"),
        ("train_e:", "is not a function name"),
    ],
)
def test_bad_targets_are_usage_errors(tree: Path, spec: str, message: str) -> None:
    (tree / "sub").mkdir()
    write(tree / "notes.txt", "")
    write(
        tree / "train_e.py",
        "CONSTANT = 3\n"
        "def step():\n    pass\n"
        "def needs_args(model, batch, lr=0.1):\n    pass\n"
        "async def coro():\n    pass\n"
        "async def agen():\n    yield 1\n"
        "def gen():\n    yield 1\n",
    )
    sys.path.insert(0, str(tree))
    with pytest.raises(UsageError) as excinfo:
        resolve(spec)
    assert message in str(excinfo.value)


def test_module_that_raises_on_import_is_user_code(tree: Path) -> None:
    write(tree / "broken_f.py", "raise RuntimeError('no data file')\n")
    write(tree / "needs_dep_f.py", "import not_installed_dep_xyz\n")
    with pytest.raises(UserCodeError, match=r"importing broken_f\.py raised RuntimeError"):
        resolve("broken_f.py::step")
    # A missing dependency of the target is the user's code failing, not a bad target.
    with pytest.raises(UserCodeError, match="not_installed_dep_xyz"):
        resolve("needs_dep_f.py::step")


def test_a_class_is_refused_not_checked_as_its_constructor(tree: Path) -> None:
    write(
        tree / "model_cls.py",
        "class Trainer:\n    def __init__(self):\n        pass\n\nLIMIT = 3\n",
    )
    with pytest.raises(UsageError, match=r"'model_cls.py::Trainer' is a class, not a function"):
        resolve("model_cls.py::Trainer")
    with pytest.raises(UsageError, match=r"'model_cls.py::LIMIT' is an int, not a function"):
        resolve("model_cls.py::LIMIT")


@pytest.mark.parametrize(
    "file", ["dir with space/step_sp.py", "pkg with space/step_sp2.py", "train-v2.py"]
)
def test_a_path_that_is_no_module_name_is_loaded_by_path(tree: Path, file: str) -> None:
    write(tree / file, "def step():\n    return 7\n")
    if file.startswith("pkg"):
        write(tree / "pkg with space" / "__init__.py", "")
    assert resolve(f"{file}::step").func() == 7


def test_one_reader_of_a_reference_for_the_command_and_the_ranks(tmp_path: Path) -> None:
    """``graphleak check`` and ``check_distributed`` read ``FILE.py::Class::method`` and
    ``module:function`` the same way (``targets.parse_target``)."""
    from pytest_graphleak.distributed import factory_ref
    from pytest_graphleak.targets import TargetSpec, parse_target

    assert parse_target(" steps.py::Steps::make ") == TargetSpec("steps.py", "", "Steps.make")
    assert parse_target("pkg.mod:make") == TargetSpec("", "pkg.mod", "make")
    assert parse_target("C:\\\\work\\\\steps.py") is None and parse_target("steps.py") is None
    file = tmp_path / "factories.py"
    file.write_text(
        "class Steps:\n    @staticmethod\n    def make(rank, size):\n        return lambda: None\n"
    )
    ref = factory_ref(f"{file}::Steps::make")
    assert (ref.file, ref.qualname) == (str(file.resolve()), "Steps.make")

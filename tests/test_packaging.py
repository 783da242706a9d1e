"""The sdist carries every tracked file its tests need; the wheel carries only the packages.

Both are built with setuptools' PEP 517 backend from a copy of the tracked files (the
checkout itself stays untouched), so the test needs git and a checkout: it skips in an
unpacked sdist, which has neither.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from suite_helpers import REPO

#: Tracked files that are deliberately left out of the sdist.
#: git's own files: an sdist has no history for them to act on.
NOT_IN_SDIST = {".gitignore", ".git-blame-ignore-revs"}


def _tracked_files() -> list[str]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout (the sdist is built from its tracked files)")
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    return [name for name in out.split("\0") if name and (REPO / name).is_file()]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path, Path]:
    tracked = _tracked_files()
    source = tmp_path_factory.mktemp("source")
    for name in tracked:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    dist = tmp_path_factory.mktemp("dist")
    names = []
    for kind in ("sdist", "wheel"):  # one process each: setuptools keeps state between them
        code = (
            "import sys; from setuptools import build_meta as b; "
            f"print('BUILT', b.build_{kind}(sys.argv[1]))"
        )
        run = subprocess.run(
            [sys.executable, "-c", code, str(dist)], cwd=source, capture_output=True, text=True
        )
        assert run.returncode == 0, run.stderr[-3000:]
        built_line = [line for line in run.stdout.splitlines() if line.startswith("BUILT ")]
        names.append(built_line[-1].removeprefix("BUILT "))
    sdist_name, wheel_name = names
    return tracked, dist / sdist_name, dist / wheel_name


def test_sdist_has_every_tracked_file(built: tuple[list[str], Path, Path]) -> None:
    tracked, sdist, _ = built
    with tarfile.open(sdist) as archive:
        top = archive.getnames()[0].split("/")[0]
        names = {name.removeprefix(f"{top}/") for name in archive.getnames()}
    missing = sorted(set(tracked) - NOT_IN_SDIST - names)
    assert not missing, f"tracked files missing from the sdist: {missing}"
    for needed in (
        "tests/conftest.py",
        "tests/minigrad/conftest.py",
        "examples/README.md",
        "LICENSE",
        "CHANGELOG.md",
        "mkdocs.yml",
        "docs/hooks/generate.py",
    ):
        assert needed in names


def test_wheel_has_the_packages_and_no_tests(built: tuple[list[str], Path, Path]) -> None:
    _, _, wheel = built
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
    tops = {name.split("/")[0] for name in names}
    assert {"pytest_graphleak", "minigrad"} <= tops
    assert not tops & {"tests", "examples", "benchmarks", "docs", "scripts"}, sorted(tops)
    assert "pytest_graphleak/py.typed" in names and "minigrad/py.typed" in names
    assert "pytest_graphleak/report/schema.json" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    assert metadata["License-Expression"] == "MIT"
    classifiers = metadata.get_all("Classifier") or []
    for needed in (
        "Typing :: Typed",
        "Framework :: Pytest",
        *(f"Programming Language :: Python :: 3.{minor}" for minor in (10, 11, 12, 13)),
    ):
        assert needed in classifiers
    assert any(c.startswith("Development Status ::") for c in classifiers)
    # The README is the long description: its links must work on PyPI too (absolute).
    prose = re.sub(r"```.*?```|`[^`\n]*`", "", str(metadata.get_payload()), flags=re.S)
    targets = re.findall(r"\]\(([^)\s]+)", prose)
    assert targets
    relative = [t for t in targets if not t.startswith(("https://", "http://", "#"))]
    assert not relative, f"relative links in the README: {relative}"


@pytest.mark.parametrize("command", ["check", "report", "demo"])
def test_cli_help_examples_exist(command: str) -> None:
    """Every example file the help text names exists and defines the named function."""
    run = subprocess.run(
        [sys.executable, "-m", "pytest_graphleak", command, "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    for path, function in re.findall(r"(examples/\w+\.py)(?:::(\w+))?", run.stdout):
        assert (REPO / path).is_file(), f"`graphleak {command} --help` names missing {path}"
        if function:
            assert f"def {function}(" in (REPO / path).read_text(encoding="utf-8")


def test_readme_is_a_front_page() -> None:
    """At most 16 KB, and the Quick start keeps the commands that CI's .ci/run runs."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode()) <= 16 * 1024
    assert "pip install pytest-graphleak" in readme
    setup = "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && .venv/bin/graphleak demo"
    assert setup in readme
    test_block = re.search(r"Run the test suite:\n\n```bash\n(.+)\n```", readme)
    assert test_block is not None, "README: no 'Run the test suite:' command"
    command = test_block.group(1)
    assert command.startswith(".venv/bin/python -m pytest"), command
    ci_lines = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert any(line.split(" || ")[0] == command for line in ci_lines), command
    run = subprocess.run(
        [sys.executable, "scripts/update_readme_example.py", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr

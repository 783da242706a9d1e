"""The options table (``options.OPTIONS``) as pytest's command-line flags and ini keys:
each option that applies to pytest gets its flag and its ini twin with one help text
(``add_options``), typed as the running pytest reads TOML (``ini_type``), and a run's
settings are resolved from them (``settings_from_config``: command line beats ini beats
default, ``settings.settings_from``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pytest_graphleak.exceptions import OptionError
from pytest_graphleak.options import OPTIONS, Option, add_flag
from pytest_graphleak.settings import Settings, settings_from


def _pytest_version() -> tuple[int, int]:
    import pytest

    major, minor = [*re.findall(r"\d+", pytest.__version__), "0", "0"][:2]
    return int(major), int(minor)


def ini_type(option: Option, version: tuple[int, int] | None = None) -> Any:
    """The ``addini`` type that lets users write values as TOML does (pytest 9's
    ``[tool.pytest]`` checks types strictly: ``graphleak = true``, ``graphleak_steps = 5``,
    ``graphleak_probes = ["torch", "gc"]``).

    From pytest 9.2 a union with ``str``, so that a bad value in an ini file reaches our
    own check (which names the setting and where it came from) instead of pytest's
    parser; 9.0 and 9.1: the plain type; older pytest (no native TOML table): "bool" and
    "args", which every supported pytest has, and "string".
    """
    version = version or _pytest_version()
    if option.type == "names":
        return "args"
    native = {"bool": bool, "int": int, "size": int | float}.get(option.type)
    if native is None:
        return "string"
    if version >= (9, 2):
        return native | str
    if option.type == "bool":
        return "bool"
    if option.type == "int" and version >= (9, 0):
        return "int"
    return "string"


def pytest_options(keys: Sequence[str] | None) -> list[Option]:
    """The options that apply to pytest (or ``keys`` only)."""
    return [o for o in OPTIONS if o.applies_to("pytest") and (keys is None or o.key in keys)]


def add_options(parser: Any, keys: Sequence[str] | None = None) -> None:
    """Register the CLI flag and ini twin, with one help text, of every option that
    applies to pytest (or of ``keys`` only)."""
    group = parser.getgroup("graphleak", "autograd graph leaks (pytest-graphleak)")
    for option in pytest_options(keys):
        # The ini key doubles as the argparse dest: config.getoption("graphleak_warn_only").
        add_flag(group.addoption, option.flag, option.ini, option)
        # default None: an unset key reads as None (or "" / [] on older pytest), never
        # as a value that would hide the option's own default.
        parser.addini(option.ini, option.help, type=ini_type(option), default=None)


def settings_from_config(config: Any, keys: Sequence[str] | None = None) -> Settings:
    """Resolve the settings of a pytest run (of the options ``keys`` only, when given:
    those ``add_options`` registered); raises OptionError on a bad value."""
    inipath = getattr(config, "inipath", None)
    cli: dict[str, object | None] = {}
    ini: dict[str, object] = {}
    for option in pytest_options(keys):
        cli[option.key] = config.getoption(option.ini, None)
        try:
            ini[option.ini] = config.getini(option.ini)
        except Exception as exc:  # pytest's own type check: UsageError, ValueError, TypeError
            raise OptionError(
                f"invalid {option.ini} (from ini option {option.ini}"
                f"{f' in {inipath}' if inipath else ''}): {exc}"
            ) from None
    return settings_from(cli, ini, ini_file=str(inipath) if inipath else None)

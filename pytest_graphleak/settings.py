"""Settings: every graphleak option resolved, with where each value came from.

Precedence: marker / call keyword > command line > ini file > default. Every bad
value fails with a message that names the setting, the value and where it came from
("command line option --graphleak-steps", "ini option graphleak_steps in tox.ini",
"@pytest.mark.no_graph_growth on tests/test_x.py::test_step", ...). What each option is,
where it can be given and how its value is checked is declared in ``options.OPTIONS``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_graphleak.exceptions import OptionError
from pytest_graphleak.options import (
    DEFAULT_RSS_TOLERANCE,
    DEFAULT_STEPS,
    DEFAULT_WARMUP,
    OPTIONS,
    OPTIONS_BY_KEY,
    keywords,
)
from pytest_graphleak.verdict import FEWEST_STEPS, fewest_steps


def _can_flag_a_leak(settings: Settings, where: str) -> None:
    """One sample (steps=1 after no warmup) has nothing to be compared with."""
    if settings.steps < fewest_steps(settings.warmup):
        raise OptionError(
            f"{where}: steps=1 with warmup=0 can never flag a leak (a single sample has "
            "nothing to be compared with; steps from "
            f"{settings.source('steps')}, warmup from {settings.source('warmup')}): "
            f"use steps >= {FEWEST_STEPS} (fewer measured steps get no verdict)"
        )


@dataclass(frozen=True)
class Settings:
    enabled: bool = False
    steps: int = DEFAULT_STEPS
    warmup: int = DEFAULT_WARMUP
    rss_tolerance: float = float(DEFAULT_RSS_TOLERANCE)
    probes: tuple[str, ...] | None = None
    start_scan: str = "roots"
    diagnose: bool = True
    verify_fix: str = "on"
    warn_only: bool = False
    outlive: str = "warn"
    outlive_keep: tuple[str, ...] = ()
    outlive_sites: str = "off"
    report: str | None = None
    sarif: str | None = None
    html: str | None = None
    github: str = "auto"
    baseline: str | None = None
    baseline_update: bool = False
    #: key -> where the value came from, for error messages ("default" when absent).
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def source(self, key: str) -> str:
        return self.sources.get(key, "default")

    def override(
        self, values: Mapping[str, object], *, where: str, place: str = "marker"
    ) -> Settings:
        """Settings with ``values`` (keywords given at ``place``) applied, validated.

        ``where`` names the origin in errors, e.g. "@pytest.mark.no_graph_growth on
        tests/test_x.py::test_step".
        """
        accepted = keywords(place)
        changes: dict[str, Any] = {}
        for key, value in values.items():
            if key not in accepted:
                raise OptionError(
                    f"{where}: unknown keyword argument {key!r}; "
                    f"expected one of {', '.join(accepted)}"
                )
            if value is None:
                continue  # "use the configured value"
            try:
                changes[key] = OPTIONS_BY_KEY[key].check(key, value)
            except OptionError as exc:
                raise OptionError(f"{where}: {exc}") from None
        if not changes:
            return self
        sources = {**self.sources, **dict.fromkeys(changes, where)}
        resolved = dataclasses.replace(self, **changes, sources=sources)
        # track() without steps= is judged at the block's end: its steps are not used.
        if "steps" in changes or (place != "track" and "warmup" in changes):
            _can_flag_a_leak(resolved, where)
        return resolved


def call_settings(
    base: Settings | None, values: Mapping[str, object], *, where: str, place: str = "check"
) -> Settings:
    """``base`` (default: the defaults) with a call's keywords applied (``check()``,
    ``track()``, ``check_distributed()``). A bad keyword is the caller's own mistake: an
    OptionError (a GraphleakError and a ValueError) naming ``where``, raised before
    anything runs."""
    return (base or Settings()).override(values, where=where, place=place)


# -- resolution: command line, ini, defaults ----------------------------------------
def _is_unset(value: object) -> bool:
    return value is None or value == [] or (isinstance(value, str) and not value.strip())


def _resolved(values: dict[str, Any], sources: dict[str, str], where: str) -> Settings:
    settings = Settings(**values, sources=sources)
    _can_flag_a_leak(settings, where)
    return settings


def settings_from(
    cli: Mapping[str, object | None], ini: Mapping[str, object], *, ini_file: str | None = None
) -> Settings:
    """Resolve every option: command line beats ini beats default. Pure, for testing.

    ``cli`` maps option keys to parsed argparse values (None: not given), ``ini`` maps
    ini keys to what pytest's ini reader gave (text, or a bool/int/list when typed;
    None, "" or missing: not set).
    """
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    in_file = f" in {ini_file}" if ini_file else ""
    for option in OPTIONS:
        if (raw := cli.get(option.key)) is not None:
            where = f"command line option {option.flag}"
            label = option.flag if option.metavar is None else f"{option.flag}={raw}"
            raw = raw if option.metavar is None else str(raw)
        elif not _is_unset(raw := ini.get(option.ini)):
            where = f"ini option {option.ini}{in_file}"
            label = f"{option.ini} = {raw}" if isinstance(raw, str) else f"{option.ini} = {raw!r}"
        else:
            continue
        values[option.key] = option.parse(raw, f"{label} (from {where})")
        sources[option.key] = where
    return _resolved(values, sources, "graphleak settings")


def settings_from_command(args: Any) -> Settings:
    """Settings of ``graphleak check``: its flags over the defaults (no ini file)."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for option in OPTIONS:
        flag = option.command_flag
        if flag is None or (raw := getattr(args, option.key, None)) is None:
            continue
        if option.metavar is None:
            values[option.key] = option.parse(raw, flag)
        else:
            values[option.key] = option.parse(str(raw), f"{flag} {raw}")
        sources[option.key] = f"command line option {flag}"
    return _resolved(values, sources, "graphleak check")

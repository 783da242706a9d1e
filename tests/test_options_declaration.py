"""The one declaration of the options (``pytest_graphleak.options.OPTIONS``): every place
that takes option keywords takes them from it, and settings are accepted as users write
them (pytest 9's native ``[tool.pytest]`` table, TOML lists in ini mode)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from suite_helpers import FAST

from pytest_graphleak import api, distributed, options, plugin
from pytest_graphleak.exceptions import OptionError
from pytest_graphleak.options import OPTIONS, CheckOptions, TrackOptions, keywords
from pytest_graphleak.plugin import flags
from pytest_graphleak.settings import Settings, settings_from

COUNTING = """
import pytest
import minigrad as mg
calls = []

@pytest.mark.no_graph_growth
def test_step():
    calls.append(1)
    (mg.Tensor([1.0], requires_grad=True) * 2).sum().backward()  # something to measure

def test_zz_count():
    print(f"CALLS={len(calls)}")
"""


def test_every_option_is_declared_once_with_type_default_help_and_places() -> None:
    defaults = Settings()
    assert len({o.key for o in OPTIONS}) == len(OPTIONS)
    for option in OPTIONS:
        assert option.help and option.type and option.applies <= set(options.PLACES)
        assert getattr(defaults, option.key) == option.default, option.key
    assert {f.name for f in dataclasses.fields(Settings)} == {o.key for o in OPTIONS} | {"sources"}
    assert set(CheckOptions.__annotations__) == set(keywords("check"))
    assert set(TrackOptions.__annotations__) == set(keywords("track"))
    assert set(keywords("marker")) == set(keywords("check"))


KEYWORD_TAKERS = [
    api.check,
    api.track,
    plugin.GraphleakFixture.check,
    plugin.GraphleakFixture.track,
    plugin.GraphleakFixture.check_distributed,
    distributed.check_distributed,
    distributed.check_distributed_many,
]


@pytest.mark.parametrize("function", KEYWORD_TAKERS, ids=lambda f: f.__qualname__)
def test_no_signature_retypes_an_option(function: object) -> None:
    parameters = inspect.signature(function).parameters  # type: ignore[arg-type]
    retyped = set(parameters) & {o.key for o in OPTIONS}
    assert not retyped, f"{function}: declares {retyped} itself"
    variadic = [p for p in parameters.values() if p.kind is p.VAR_KEYWORD]
    assert len(variadic) == 1 and variadic[0].annotation in (
        "Unpack[CheckOptions]",
        "Unpack[TrackOptions]",
    )


def test_each_place_accepts_exactly_its_keywords() -> None:
    with pytest.raises(ValueError, match=r"keyword argument 'stepz'.*expected one of steps"):
        api.track(stepz=3)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="unknown keyword argument 'warn_only'"):
        api.check(lambda: None, warn_only=True)  # type: ignore[call-arg]
    settings = Settings().override({"diagnose": False, "probes": ["gc"]}, where="x", place="check")
    assert settings.diagnose is False and settings.probes == ("gc",)
    assert settings.source("diagnose") == "x"


def test_one_sample_can_never_flag_a_leak_so_it_is_refused_naming_sources() -> None:
    with pytest.raises(ValueError, match=r"check\(f\): steps=1 with warmup=0 can never flag"):
        api.check(lambda: None, steps=1, warmup=0, name="f")
    base = settings_from({"steps": "1"}, {}, ini_file=None)  # one measured step after warmup
    assert base.steps == 1 and base.warmup == 3
    with pytest.raises(OptionError) as caught:
        base.override({"warmup": 0}, where="@mark on t")
    message = str(caught.value)
    assert "steps from command line option --graphleak-steps" in message
    assert "warmup from @mark on t" in message
    # with a warmup one measured step could be compared with the baseline, but one or two
    # cannot tell a one-off from a leak: unmeasured, never judged (tests/test_few_steps.py)
    few = api.check(lambda: None, steps=1, warmup=1)
    assert few.status == "unmeasured" and few.unmeasured_fix.startswith("steps=3 or more")


def test_typed_ini_values_resolve_like_their_text() -> None:
    typed = settings_from(
        {},
        {
            "graphleak": True,
            "graphleak_steps": 5,
            "graphleak_probes": ["torch", "gc"],
            "graphleak_rss_tolerance": 2048,
        },
    )
    text = settings_from(
        {},
        {
            "graphleak": "true",
            "graphleak_steps": "5",
            "graphleak_probes": ["torch,gc"],
            "graphleak_rss_tolerance": "2KiB",
        },
    )
    assert typed == text
    assert (typed.enabled, typed.steps, typed.probes, typed.rss_tolerance) == (
        True,
        5,
        ("torch", "gc"),
        2048.0,
    )
    assert settings_from({}, {"graphleak_steps": None, "graphleak_probes": []}) == Settings()
    with pytest.raises(OptionError, match=r"invalid graphleak_steps = True .*integer"):
        settings_from({}, {"graphleak_steps": True}, ini_file="pyproject.toml")


def test_ini_types_follow_what_the_running_pytest_supports() -> None:
    by_key = options.OPTIONS_BY_KEY
    assert flags.ini_type(by_key["enabled"], (7, 0)) == "bool"
    assert flags.ini_type(by_key["steps"], (7, 0)) == "string"
    assert flags.ini_type(by_key["steps"], (9, 0)) == "int"
    assert flags.ini_type(by_key["steps"], (9, 2)) == int | str
    assert flags.ini_type(by_key["probes"], (7, 0)) == "args"
    assert flags.ini_type(by_key["rss_tolerance"], (9, 1)) == "string"


def _pytest_major() -> int:
    return int(pytest.__version__.split(".")[0])


@pytest.mark.skipif(_pytest_major() < 9, reason="[tool.pytest] native TOML needs pytest 9")
def test_native_toml_table_with_bool_int_and_list(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_count=COUNTING)
    pytester.makefile(
        ".toml",
        pyproject="[tool.pytest]\ngraphleak = true\ngraphleak_steps = 5\ngraphleak_warmup = 1\n"
        'graphleak_probes = ["minigrad", "gc"]\n',
    )
    result = pytester.runpytest_subprocess("-s", *FAST)
    assert result.ret == 0, result.stderr.str()
    result.stdout.fnmatch_lines(["*CALLS=6*"])  # checking on: 1 warmup + 5 steps


def test_ini_options_table_with_a_probe_list_and_quoted_bool(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_count=COUNTING)
    pytester.makefile(
        ".toml",
        pyproject='[tool.pytest.ini_options]\ngraphleak = "true"\ngraphleak_steps = "4"\n'
        'graphleak_warmup = "0"\ngraphleak_probes = ["minigrad", "gc"]\n',
    )
    result = pytester.runpytest_subprocess("-s", *FAST)
    assert result.ret == 0, result.stderr.str()
    result.stdout.fnmatch_lines(["*CALLS=4*"])


def test_bad_ini_values_still_name_the_key_and_file(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_count=COUNTING)
    ini = pytester.makeini("[pytest]\ngraphleak = maybe\n")
    result = pytester.runpytest_subprocess(*FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*: invalid graphleak*(from ini option graphleak in {ini}*"])
    pytester.makeini("[pytest]\ngraphleak_steps = 1\ngraphleak_warmup = 0\n")
    result = pytester.runpytest_subprocess(*FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*steps=1 with warmup=0 can never flag a leak*"])


def test_every_place_checks_a_count_with_the_same_words() -> None:
    """One value check per type (``values``): the options table, the loops,
    check_distributed(), the verdict and the command's --steps said it five ways. The
    tracker checks none: what reaches it was checked once, by the options table."""
    import argparse

    from pytest_graphleak.cli import positive_int
    from pytest_graphleak.loop_windows import check_count
    from pytest_graphleak.values import seconds
    from pytest_graphleak.verdict import judge

    expect = "warmup must be an integer >= 0, got -1"
    with pytest.raises(ValueError, match=expect):
        judge({}, {}, warmup=-1)
    with pytest.raises(ValueError, match=r"window must be an integer >= 2 \(or None\), got 1"):
        check_count("window", 1, minimum=2)
    with pytest.raises(argparse.ArgumentTypeError, match=r"^must be an integer >= 1, got 0$"):
        positive_int("0")
    with pytest.raises(argparse.ArgumentTypeError, match=r"^must be an integer >= 1, got 'ten'$"):
        positive_int("ten")
    with pytest.raises(ValueError, match="timeout must be a number of seconds > 0, got True"):
        seconds("timeout", True)

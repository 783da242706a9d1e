"""A tiny pytest plugin: shuffle the collected tests with a seed (``-p soak_shuffle``).

The soak uses it instead of depending on pytest-randomly. Every pytest-xdist worker
gets the same ``--soak-seed`` on its command line, so all workers see the same order
(xdist refuses to run when workers collect different lists).
"""

from __future__ import annotations

import random

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak-seed",
        type=int,
        default=None,
        help="shuffle the collected tests with this seed (soak runs)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seed = config.getoption("soak_seed")
    if seed is not None:
        random.Random(seed).shuffle(items)


def pytest_report_header(config: pytest.Config) -> str | None:
    seed = config.getoption("soak_seed")
    return None if seed is None else f"soak order seed: {seed}"

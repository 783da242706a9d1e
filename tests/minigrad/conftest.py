"""minigrad tests: one OpenBLAS thread (small matrices; stable timing on a busy machine)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from minigrad.blas import blas_threads, set_blas_threads


@pytest.fixture(scope="session", autouse=True)
def _one_blas_thread() -> Iterator[None]:
    previous = blas_threads()
    set_blas_threads(1)
    yield
    if previous:
        set_blas_threads(previous)

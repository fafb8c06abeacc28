"""Tests here run in ember's default dtype mode: ``jax_enable_x64`` off (the rest of the suite
turns it on). JAX, the reference, runs in its own default mode, which is the same."""

import pytest

from ember._src import flags


@pytest.fixture(autouse=True, scope="module")
def _x32_mode():
    with flags.override("jax_enable_x64", False):
        yield

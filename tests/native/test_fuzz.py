"""Fuzz: random programs (see randprog.py) agree between the native and reference backends, and
their memory plans satisfy the planner's invariants. Each run draws fresh seeds (thousands of cases
accumulate across runs); set EMBER_FUZZ_SEED to replay one, EMBER_FUZZ_CASES to change the count."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.native import randprog
from tests.native.conftest import requires_cc
from tests.native.plan.test_planner import independent_overlap_check
from tests.native.util import check

N_CASES = 1 if "EMBER_FUZZ_SEED" in os.environ else int(os.environ.get("EMBER_FUZZ_CASES", "10"))


def _base_seed() -> int:
    """EMBER_FUZZ_SEED, else fresh per run: under pytest-xdist derived from the run's id, which
    every worker shares (test ids must not depend on the seed: workers collect separately)."""
    if "EMBER_FUZZ_SEED" in os.environ:
        return int(os.environ["EMBER_FUZZ_SEED"])
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run:
        return int(run[:8], 16) % (1 << 31)
    return np.random.SeedSequence().entropy % (1 << 31)


_BASE = _base_seed()


@requires_cc
@pytest.mark.parametrize("case", range(N_CASES), ids=[f"case{i}" for i in range(N_CASES)])
def test_random_program(case):
    seed = _BASE + case
    f, inputs, desc = randprog.make(seed)
    try:
        exe = check(f, *inputs, rtol=1e-4, atol=1e-4)
    except AssertionError as e:
        raise AssertionError(f"{desc}\nreplay with EMBER_FUZZ_SEED={seed}\n{e}") from None
    if exe.plan is not None:
        exe.plan.check()
        independent_overlap_check(exe)


@requires_cc
@pytest.mark.parametrize("case", range(N_CASES), ids=[f"case{i}" for i in range(N_CASES)])
def test_random_program_every_loop_parallel(case):
    """The same random programs with every loop above one element parallel on three threads: the
    thread pool's chunk functions (rows, maps, blocked reductions, head groups) and the OpenMP
    regions that remain agree with the reference backend."""
    from ember._src.native.runtime import threadpool

    threadpool.load(wait=True)
    seed = _BASE if "EMBER_FUZZ_SEED" in os.environ else _BASE + 7919 * (case + 1)  # other programs
    f, inputs, desc = randprog.make(seed)
    try:
        exe = check(f, *inputs, rtol=1e-4, atol=1e-4, num_threads=3, parallel_threshold=1)
    except AssertionError as e:
        replay = f"replay with EMBER_FUZZ_SEED={seed} (test_random_program_every_loop_parallel)"
        raise AssertionError(f"{desc}\n{replay}\n{e}") from None
    if exe.plan is not None:
        exe.plan.check()

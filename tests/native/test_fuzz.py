"""Fuzz: random programs (see randprog.py) agree between the native and reference backends, and
their memory plans satisfy the planner's invariants. Each run draws fresh seeds (thousands of cases
accumulate across runs); set EMBER_FUZZ_SEED to replay one, EMBER_FUZZ_CASES to change the count."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.native import randprog
from tests.native.conftest import requires_cc
from tests.native.test_planner import independent_overlap_check
from tests.native.util import check

N_CASES = int(os.environ.get("EMBER_FUZZ_CASES", "10"))
# under pytest-xdist every worker collects the tests: derive the fresh seed from the run's shared id
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID")
_FRESH = int(_RUN, 16) if _RUN else np.random.SeedSequence().entropy
_BASE = int(os.environ.get("EMBER_FUZZ_SEED", _FRESH % (1 << 31)))
SEEDS = [_BASE] if "EMBER_FUZZ_SEED" in os.environ else [_BASE + i for i in range(N_CASES)]


@requires_cc
@pytest.mark.parametrize("seed", SEEDS, ids=[f"seed{s}" for s in SEEDS])
def test_random_program(seed):
    f, inputs, desc = randprog.make(seed)
    try:
        exe = check(f, *inputs, rtol=1e-4, atol=1e-4)
    except AssertionError as e:
        raise AssertionError(f"{desc}\nreplay with EMBER_FUZZ_SEED={seed}\n{e}") from None
    if exe.plan is not None:
        exe.plan.check()
        independent_overlap_check(exe)

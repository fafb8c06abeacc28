"""Whole-array reductions over a named dynamic axis run in fixed blocks as static ones do
(:mod:`ember._src.native.scheduling.blockreduce`): a symbolic-size sum used to be one running ``simd``
accumulator per vector lane, 0.6% off on 10^7 float32 values of 0.1."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src.native import specialize
from ember._src.native.runtime import threadpool
from ember._src.native.scheduling import blockreduce
from tests.native.conftest import requires_cc

pytestmark = requires_cc
RNG = np.random.default_rng(5)


def _dyn(f, threads=None):
    opts = {} if threads is None else {"num_threads": threads, "parallel_threshold": 1000}
    return ember.jit(f, backend="native", dynamic_axes=[("n",)], **opts)


def test_symbolic_sum_of_ten_million_float32_as_accurate_as_static():
    x = np.full(10**7, 0.1, np.float32)
    exact = math.fsum(x.astype(np.float64))  # 1000000.0149...
    dyn = _dyn(lambda a: jnp.sum(a))
    got = float(dyn(x))
    static = float(ember.jit(lambda a: jnp.sum(a), backend="native")(x))
    assert abs(got - exact) <= abs(static - exact) + 1e-9 * exact
    assert abs(got - exact) <= 1e-5 * exact  # a running float32 sum is off by 6e-3 here
    sym = specialize.symbolic_executable(dyn.lower(x).program)
    assert sym is not None and sym.fallback_reason is None and "_part(" in sym.source


@pytest.mark.parametrize("threads", [1, 2])
def test_symbolic_block_reductions_at_every_block_count(threads):
    """0, 1, part of a block, exactly one, one plus one, many blocks: values of the float64
    references, one compile for every size, the same bits on one and two threads."""
    threadpool.load(wait=True)
    fns = {"sum": (lambda a: jnp.sum(a), np.sum),
           "mean": (lambda a: jnp.mean(a * 2.0), lambda a: np.mean(a * 2)),
           "max": (lambda a: jnp.max(a), np.max), "any": (lambda a: jnp.any(a > 0.999), np.any)}
    g = blockreduce.BLOCK
    for name, (f, ref) in fns.items():
        jf = _dyn(f, threads)
        for n in [1, 5, g - 1, g, g + 1, 7 * g + 3, 300_001]:
            x = RNG.random(n, dtype=np.float32)
            want = ref(x > 0.999) if name == "any" else ref(x.astype(np.float64))
            got = np.asarray(jf(x))
            np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=f"{name} n={n}")
            if threads == 2:
                np.testing.assert_array_equal(got, np.asarray(_dyn(f, 1)(x)))
        assert jf.cache_info()["compiles"] == 1


def test_symbolic_sum_of_empty_and_nan():
    jf = _dyn(lambda a: (jnp.sum(a), jnp.max(a)))
    x = RNG.random(5 * blockreduce.BLOCK, dtype=np.float32)
    x[3 * blockreduce.BLOCK + 9] = np.nan
    s, m = jf(x)
    assert np.isnan(s) and np.isnan(m)
    two = ember.jit(lambda a: jnp.sum(a * a), backend="native", dynamic_axes=[("r", "c")])
    for r, c in [(3, 5000), (1000, 7), (0, 3)]:
        y = RNG.random((r, c), dtype=np.float32)
        np.testing.assert_allclose(np.asarray(two(y)), (y.astype(np.float64) ** 2).sum(), rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_sum_over_a_static_zero_axis_is_zero(dtype):
    """A symbolic size times a static 0 is a block count of the constant 0: no partial is written,
    so the sum is 0, not the partial a reduction before it left in the same arena bytes (found by
    the fuzzer, seed 21 case 556: 7.5e28 instead of 0)."""
    g = ember.jit(lambda y, x: (jnp.sum(y), jnp.sum(x)), dynamic_axes=["n, ...", "n, ..."])
    for n in (3, 5):
        y = np.full((n, 5000), 1, dtype)
        x = np.ones((n, 0), dtype)
        full, empty = g(y, x)
        assert complex(full) == 5000 * n and complex(empty) == 0

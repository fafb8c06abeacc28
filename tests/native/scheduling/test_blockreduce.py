"""Whole-array reductions in fixed blocks (:mod:`ember._src.native.scheduling.blockreduce`): the same bits on
1, 2 and 3 threads, NumPy's values (float64 references), NaN propagation, integer and boolean
reductions, element outputs computed in the same loop, and the serial path inside a loop body."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.native.runtime import threadpool
from ember._src.native.scheduling import blockreduce
from tests.native.conftest import requires_cc

pytestmark = requires_cc
RNG = np.random.default_rng(11)


def _run(f, *args, threads):
    jf = ember.jit(f, backend="native", num_threads=threads, parallel_threshold=1000)
    out = jf(*args)
    return jf, [np.asarray(o) for o in (out if isinstance(out, (tuple, list)) else [out])]


def _same_on_every_thread_count(f, *args):
    threadpool.load(wait=True)
    jf, ref = _run(f, *args, threads=1)
    assert "_part(" in jf.lower(*args).executable.source  # the kernel runs in blocks
    for t in (2, 3):
        _, got = _run(f, *args, threads=t)
        for g, r in zip(got, ref):
            np.testing.assert_array_equal(g, r)
    return ref


@pytest.mark.parametrize("n", [2 * blockreduce.BLOCK + 7, 100_003])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sum_mean_max_min_prod_independent_of_threads(n, dtype):
    x = RNG.standard_normal(n).astype(dtype)
    y = (1 + RNG.standard_normal(n) * 1e-4).astype(dtype)  # a product that stays finite
    outs = [
        _same_on_every_thread_count(lambda a: jnp.sum(a), x),
        _same_on_every_thread_count(lambda a: jnp.mean((a - 1) ** 2), x),
        _same_on_every_thread_count(lambda a: jnp.max(a), x),
        _same_on_every_thread_count(lambda a: jnp.min(a * 3), x),
        _same_on_every_thread_count(lambda a: jnp.prod(a), y),
    ]
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    want = [x64.sum(), ((x64 - 1) ** 2).mean(), x64.max(), (x64 * 3).min(), y64.prod()]
    rtol = 2e-5 if dtype == np.float32 else 1e-12
    for got, w in zip(outs, want):
        np.testing.assert_allclose(got[0], w, rtol=rtol, atol=rtol * np.sqrt(n))


def test_nan_in_one_block_propagates_to_max_and_min():
    x = RNG.standard_normal(5 * blockreduce.BLOCK).astype(np.float32)
    x[3 * blockreduce.BLOCK + 17] = np.nan
    got = _same_on_every_thread_count(lambda a: (jnp.max(a), jnp.min(a), jnp.sum(a)), x)
    assert all(np.isnan(g) for g in got)


def test_integer_and_boolean_reductions_are_exact():
    x = RNG.integers(-1000, 1000, 3 * blockreduce.BLOCK + 5).astype(np.int32)
    got = _same_on_every_thread_count(
        lambda a: (jnp.sum(a), jnp.max(a), jnp.any(a > 998), jnp.all(a > -1001)), x)
    assert int(got[0]) == int(x.astype(np.int64).sum()) and int(got[1]) == int(x.max())
    assert bool(got[2]) == bool((x > 998).any()) and bool(got[3])


def test_complex_sum():
    z = (RNG.standard_normal(3 * blockreduce.BLOCK) + 1j * RNG.standard_normal(3 * blockreduce.BLOCK))
    z = z.astype(np.complex64)
    got = _same_on_every_thread_count(lambda a: jnp.sum(a * a), z)
    zw = z.astype(np.complex128)
    np.testing.assert_allclose(got[0], np.sum(zw * zw), rtol=2e-5, atol=2e-3)


def test_element_outputs_of_the_same_loop():
    """``y = tanh(x)`` and ``sum(y)`` fuse into one loop: the part function writes y for its block."""
    x = RNG.standard_normal(4 * blockreduce.BLOCK + 3).astype(np.float32)
    y, s = _same_on_every_thread_count(lambda a: (jnp.tanh(a), jnp.sum(jnp.tanh(a))), x)
    np.testing.assert_allclose(y, np.tanh(x.astype(np.float64)), rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(s, np.tanh(x.astype(np.float64)).sum(), rtol=1e-5, atol=1e-3)


def test_inside_a_loop_body_blocks_run_in_order():
    x = RNG.standard_normal(3 * blockreduce.BLOCK + 1).astype(np.float32)

    def f(a):
        return lax.fori_loop(0, 3, lambda i, c: c + jnp.sum(a * (c + 1)), jnp.float32(0.0))

    _, (one,) = _run(f, x, threads=1)
    _, (two,) = _run(f, x, threads=2)
    np.testing.assert_array_equal(one, two)
    c, x64 = 0.0, x.astype(np.float64)
    for _ in range(3):
        c = c + (x64 * (c + 1)).sum()
    np.testing.assert_allclose(one, c, rtol=1e-4)


def test_small_reductions_keep_one_loop():
    x = RNG.standard_normal(blockreduce.BLOCK).astype(np.float32)  # one block: not split
    jf = ember.jit(lambda a: jnp.sum(a), backend="native")
    assert "_part(" not in jf.lower(x).executable.source
    np.testing.assert_allclose(np.asarray(jf(x)), x.astype(np.float64).sum(), rtol=1e-5, atol=1e-4)

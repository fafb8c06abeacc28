"""One answer per input, whatever runs it: eager mode, the NumPy reference backend and the native
backend agree with each other and with JAX (or NumPy's formula where JAX follows NumPy) on
singular systems, NaN least squares, floor division by infinities and +inf softmax rows; large
float32 sums combine their blocks pairwise, independently of the thread count."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import ember
import ember.nn as nn
import ember.numpy as jnp

SINGULAR = np.array([[1.0, 2.0], [2.0, 4.0]], np.float32)
RHS = np.array([1.0, 2.0], np.float32)


def _everywhere(f, *args):
    """``f`` eagerly, under jit on the NumPy backend and on the native backend."""
    return [np.asarray(f(*[jnp.asarray(a) for a in args])),
            np.asarray(ember.jit(f, backend="numpy")(*args)),
            np.asarray(ember.jit(f, backend="native")(*args))]


def test_singular_inv_and_solve_give_inf_nan_everywhere():
    # LU of [[1, 2], [2, 4]] pivots on 2: U = [[2, 4], [0, 0]], so back substitution divides by 0
    for got in _everywhere(jnp.linalg.inv, SINGULAR):
        np.testing.assert_array_equal(got, [[-np.inf, np.inf], [np.inf, -np.inf]])
    for got in _everywhere(lambda a, b: jnp.linalg.solve(a, b), SINGULAR, RHS):
        assert np.isnan(got).all()
    jax = pytest.importorskip("jax", reason="comparison with JAX's results needs jax")
    np.testing.assert_array_equal(np.asarray(jax.numpy.linalg.inv(SINGULAR)),
                                  _everywhere(jnp.linalg.inv, SINGULAR)[0])


def test_lstsq_with_nan_is_quiet():
    code = """
import numpy as np, ember, ember.numpy as jnp
a = np.random.default_rng(0).standard_normal((40, 30)).astype(np.float32); a[0, 0] = np.nan
b = np.ones(40, np.float32)
x = jnp.linalg.lstsq(jnp.asarray(a), jnp.asarray(b))[0]
y = ember.jit(lambda a, b: jnp.linalg.lstsq(a, b)[0])(a, b)
print(bool(np.isnan(np.asarray(x)).all()), bool(np.isnan(np.asarray(y)).all()))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]
    assert "LAPACK" not in out.stderr and "illegal value" not in out.stderr, out.stderr


SPECIALS = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1.0, -1.0, 2.5, -7.0, 1e-30, 3e38], np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_floor_divide_matches_numpy_on_specials(dtype):
    x, y = (a.ravel() for a in np.meshgrid(SPECIALS.astype(dtype), SPECIALS.astype(dtype)))
    rng = np.random.default_rng(1)
    x = np.concatenate([x, (rng.standard_normal(500) * 100).astype(dtype)])
    y = np.concatenate([y, rng.standard_normal(500).astype(dtype)])
    with np.errstate(all="ignore"):
        want = np.floor_divide(x, y)
    for got in _everywhere(jnp.floor_divide, x, y):
        same = (got == want) & (np.signbit(got) == np.signbit(want)) | np.isnan(got) & np.isnan(want)
        assert same.all(), list(zip(x[~same], y[~same], got[~same], want[~same]))[:5]
    assert np.isnan(np.asarray(jnp.floor_divide(jnp.asarray(np.float32(np.inf)), 1.0)))


def _softmax_formula(x):
    with np.errstate(all="ignore"):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)


def test_softmax_rows_with_infinities():
    rows = np.array([[np.inf, 1.0, 2.0], [1.0, 2.0, 3.0], [np.nan, 1.0, 2.0], [-np.inf, 0.0, 1.0],
                     [np.inf, np.inf, 1.0]], np.float32)
    want = _softmax_formula(rows.astype(np.float64))
    for got in _everywhere(nn.softmax, rows):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)  # NaN positions must match too
    assert np.isnan(_everywhere(nn.log_softmax, rows)[2][0]).all()
    with np.errstate(all="ignore"):
        want_log = np.log(want)
    for got in _everywhere(nn.log_softmax, rows):
        np.testing.assert_allclose(got, want_log, rtol=1e-6, atol=1e-6)


def test_large_float32_sum_combines_blocks_pairwise():
    # 4096 blocks: the first sums to 2^32, every other to 1.0. A running total of the block sums
    # drops every 1.0 (half an ulp of 2^32 is 256); pairwise combination keeps all but the first
    # 511, as NumPy's pairwise sum does.
    n = 4096 * 4096
    x = np.full(n, 2.0**-12, np.float32)
    x[:4096] = 2.0**20
    exact = x.astype(np.float64).sum()
    results = [float(ember.jit(lambda v: v.sum(), num_threads=t)(x)) for t in (1, 2, 3)]
    assert results[0] == results[1] == results[2]  # the same bits for every thread count
    assert abs(results[0] - exact) <= 512
    assert abs(results[0] - exact) <= abs(float(np.sum(x)) - exact)

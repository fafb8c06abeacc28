"""digamma, erf_inv, polygamma and bitcast_convert_type as C ops (c_special.py): the error bounds
stated in its docstring against SciPy, special values, and fusion into kernels (no fallback)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
import scipy.special as sps

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.native.emit import c_ops
from ember._src.native.runtime import compiler
from ember._src.prims.elementwise import polygamma_p
from ember._src.prims.random_bits import bitcast_convert_type
from tests.native.conftest import requires_cc
from tests.native.util import check

pytestmark = requires_cc
RNG = np.random.default_rng(3)


@pytest.fixture(scope="module")
def lib():
    body = """
void run_digamma(const double *x, double *o, int64_t m) {
    for (int64_t i = 0; i < m; ++i) o[i] = em_digamma(x[i]);
}
void run_erfinv(const double *x, double *o, int64_t m) {
    for (int64_t i = 0; i < m; ++i) o[i] = em_erfinv(x[i]);
}
void run_polygamma(int n, const double *x, double *o, int64_t m) {
    for (int64_t i = 0; i < m; ++i) o[i] = em_polygamma(n, x[i]);
}
"""
    lib = compiler.load_library(c_ops.prelude_for(body) + body, name_hint="special_test")
    for n in ("run_digamma", "run_erfinv"):
        getattr(lib, n).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    lib.run_polygamma.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    return lib


def _run(fn, x: np.ndarray, *lead) -> np.ndarray:
    x = np.ascontiguousarray(x, np.float64)
    o = np.empty_like(x)
    fn(*lead, x.ctypes.data, o.ctypes.data, x.size)
    return o


def _rel_err(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return np.abs(got - want) / np.maximum(np.abs(want), 1e-300)


def test_digamma_error_bound(lib):
    x = np.concatenate([RNG.uniform(0, 1, 20000) * 10.0 ** RNG.integers(-8, 8, 20000),
                        -RNG.uniform(0, 50, 20000), RNG.uniform(1.3, 1.6, 5000)])
    got, want = _run(lib.run_digamma, x), sps.psi(x)
    pos, root = x > 0, np.abs(x - 1.4616321449683622) < 0.2
    assert _rel_err(got, want)[pos & ~root].max() <= 1e-13
    assert np.abs(got - want)[root].max() <= 2e-15
    assert (np.abs(got - want)[~pos] <= 1e-12 * np.maximum(1, np.abs(want[~pos]))).all()
    special = np.array([0.0, -0.0, -1.0, -7.0, np.inf, -np.inf, np.nan, 1e-300, -1e-300, 1e300, -2.5])
    np.testing.assert_array_equal(_run(lib.run_digamma, special), sps.psi(special))


def test_erf_inv_error_bound(lib):
    x = np.concatenate([RNG.uniform(-1, 1, 50000), 1 - 10.0 ** -RNG.uniform(1, 15, 5000),
                        RNG.uniform(-1e-10, 1e-10, 1000)])
    got, want = _run(lib.run_erfinv, x), sps.erfinv(x)
    assert _rel_err(got, want).max() <= 4e-15
    special = np.array([1.0, -1.0, 1.5, -2.0, 0.0, -0.0, np.nan])
    got = _run(lib.run_erfinv, special)
    np.testing.assert_array_equal(got, sps.erfinv(special))
    assert np.signbit(got[5])
    # subnormals: erf_inv(x) ~ x sqrt(pi) / 2, so the smallest one maps to itself (it once halved
    # to -0.0 first, and a following sqrt gave -0.0 where the reference gives NaN)
    tiny = np.array([5e-324, -5e-324, 1e-323, -3e-320, 1e-310, 2.2250738585072014e-308])
    got, want = _run(lib.run_erfinv, tiny), sps.erfinv(tiny)
    np.testing.assert_array_equal(got[:2], [5e-324, -5e-324])
    assert _rel_err(got, want).max() <= 4e-15


@pytest.mark.parametrize("n", [1, 2, 3, 4, 6])
def test_polygamma_error_bound(lib, n):
    x = np.concatenate([RNG.uniform(0, 1, 5000) * 10.0 ** RNG.integers(-3, 4, 5000),
                        -RNG.uniform(0, 20, 5000)])
    x = x[np.abs(x - np.round(x)) > 1e-3]  # away from the poles at the non-positive integers
    got, want = _run(lib.run_polygamma, x, n), sps.polygamma(n, x)
    assert _rel_err(got, want).max() <= 1e-12
    special = np.array([0.0, -1.0, -3.0, np.inf, -np.inf, np.nan])
    np.testing.assert_array_equal(_run(lib.run_polygamma, special, n), sps.polygamma(n, special))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_special_ops_fuse_and_match_reference(dtype):
    x = np.abs(RNG.standard_normal(200)).astype(dtype) * 3 + 0.1
    y = np.tanh(RNG.standard_normal(200)).astype(dtype)
    exe = check(lambda x, y: (lax.digamma(x) * 2.0, lax.erf_inv(y) + 1.0, polygamma_p.bind(x, n=2) - x,
                              jnp.exp(polygamma_p.bind(x, n=1))), x, y,
                rtol=1e-6 if dtype == np.float32 else 1e-12, atol=1e-6 if dtype == np.float32 else 1e-12)
    assert exe.schedule.count("fallback") == 0 and exe.schedule.count("kernel") >= 1


def test_bitcast_is_a_fused_reinterpretation():
    x = RNG.standard_normal(64).astype(np.float32)
    exe = check(lambda x: (bitcast_convert_type(x, np.uint32) >> 3, bitcast_convert_type(
        bitcast_convert_type(x * 2, np.int32) + 1, np.float32)), x, rtol=0, atol=0)
    assert exe.schedule.count("fallback") == 0 and exe.schedule.count("call") == 0
    got = ember.jit(lambda x: bitcast_convert_type(x, np.uint32), backend="native")(x)
    np.testing.assert_array_equal(np.asarray(got), x.view(np.uint32))
    d = RNG.standard_normal(8)
    check(lambda d: bitcast_convert_type(d, np.int64) ^ 5, d, rtol=0, atol=0)

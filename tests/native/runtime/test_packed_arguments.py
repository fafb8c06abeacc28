"""Weights passed as arguments, packed once: when the same ember Array comes back as the ``B`` of
a float32 product, the C dispatcher keeps a packed copy for it and the program calls the GEMM
kernel's prepacked entry on it (``gemm._argument_packed_b``, ``dispatch_src.py``). These tests
check the values against float64 NumPy and against programs that never pack, and that only an
immutable ember Array is ever cached: a NumPy argument changed in place is always read afresh."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src.native.emit import gemm_kernel
from ember._src.native.runtime import dispatch
from tests.native.conftest import requires_cc


@pytest.fixture(scope="module", autouse=True)
def libraries():
    """The dispatcher and the kernel library built and loaded (else the feature is not in play)."""
    if dispatch.module(wait=True) is None or not gemm_kernel.load(wait=True) or gemm_kernel.BLAS_ONLY:
        pytest.skip("needs the C dispatcher and the AVX2/FMA kernel library on this machine")


def _layer(x, w, b):
    return jnp.maximum(x @ w + b, 0.0)


def _ref(x, w, b):
    return np.maximum(np.asarray(x, np.float64) @ np.asarray(w, np.float64) + np.asarray(b), 0.0)


def _data(rng, m=32, k=96, n=200):
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    return x, w, b


@requires_cc
def test_same_array_is_packed_once_and_gives_the_same_values():
    rng = np.random.default_rng(0)
    x, w, b = (jnp.asarray(a) for a in _data(rng))
    f = ember.jit(lambda *a: _layer(*a), backend="native")  # a fresh cache per test
    plain = ember.jit(_layer, backend="native", prepack=False)
    want = np.asarray(plain(x, w, b))
    np.testing.assert_allclose(want, _ref(x, w, b), rtol=1e-5, atol=1e-5)
    outs = [np.asarray(f(x, w, b)) for _ in range(4)]
    exe = f.lower(x, w, b).executable
    assert exe._packed_args and exe._packed_cache[0] is not None
    assert exe._packed_cache[0][0] is np.asarray(w)  # keyed by the Array's own buffer
    for o in outs:  # k <= 512: the prepacked entry sums exactly as the packing one
        np.testing.assert_array_equal(o, want)
    assert "em_skp_fn()" not in plain.lower(x, w, b).executable.source


@requires_cc
def test_alternating_arrays_each_give_their_own_product():
    rng = np.random.default_rng(1)
    x, w1, b = (jnp.asarray(a) for a in _data(rng))
    w2 = jnp.asarray(_data(rng)[1])
    f = ember.jit(lambda *a: _layer(*a), backend="native")  # a fresh cache per test
    for w in (w1, w1, w2, w2, w1, w2, w2, w1):
        np.testing.assert_allclose(np.asarray(f(x, w, b)), _ref(x, w, b), rtol=1e-5, atol=1e-5)


@requires_cc
def test_numpy_arguments_are_never_cached_and_changes_are_seen():
    rng = np.random.default_rng(2)
    x, w, b = _data(rng)
    f = ember.jit(lambda *a: _layer(*a), backend="native")  # a fresh cache per test
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(f(x, w, b)), _ref(x, w, b), rtol=1e-5, atol=1e-5)
    w *= -1.5  # in place: same buffer, new values
    np.testing.assert_allclose(np.asarray(f(x, w, b)), _ref(x, w, b), rtol=1e-5, atol=1e-5)
    assert f.lower(x, w, b).executable._packed_cache == [None]


@requires_cc
def test_python_path_checks_the_packed_copy_against_its_argument():
    """After the dispatcher cached a copy for one Array, a direct executable call with another
    buffer computes with that buffer; with the cached Array's own buffer, the copy is right too."""
    rng = np.random.default_rng(3)
    x, w, b = (jnp.asarray(a) for a in _data(rng))
    f = ember.jit(lambda *a: _layer(*a), backend="native")  # a fresh cache per test
    for _ in range(3):
        f(x, w, b)
    exe = f.lower(x, w, b).executable
    assert exe._packed_cache[0] is not None
    other = _data(rng)[1]
    (got,) = exe([np.asarray(x), other, np.asarray(b)])
    np.testing.assert_allclose(got, _ref(x, other, b), rtol=1e-5, atol=1e-5)
    (same,) = exe([np.asarray(x), np.asarray(w), np.asarray(b)])
    np.testing.assert_allclose(same, _ref(x, w, b), rtol=1e-5, atol=1e-5)


@requires_cc
def test_large_argument_product_takes_the_prepacked_entry():
    """A product beyond the packing entry's rule (A larger than L2: BLAS on the first calls) runs on
    the prepacked entry once its B is cached."""
    rng = np.random.default_rng(4)
    x, w, b = (jnp.asarray(a) for a in _data(rng, m=512, k=256, n=1000))
    wide = gemm_kernel.isa() is gemm_kernel.AVX512  # AVX-512: the packing entry takes it too
    assert gemm_kernel.use_small_sgemm(512, 1000, 256) == wide and gemm_kernel.use_prepacked(512, 1000, 256)
    f = ember.jit(lambda *a: _layer(*a), backend="native")  # a fresh cache per test
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(f(x, w, b)), _ref(x, w, b), rtol=1e-4, atol=1e-4)
    assert f.lower(x, w, b).executable._packed_cache[0] is not None


def test_asarray_copies_a_read_only_view_of_writable_memory():
    """An Array never changes: a read-only view the caller can still write through its base is
    copied (what makes caching an Array's packed copy sound)."""
    base = np.ones(64, np.float32)
    view = base.view()
    view.flags.writeable = False
    a = jnp.asarray(view)
    base[0] = 5.0
    assert np.asarray(a)[0] == 1.0


@requires_cc
@pytest.mark.parametrize("trans_a,trans_b", [(True, False), (False, True), (True, True)])
def test_transposed_operands(trans_a, trans_b):
    """A read through its strides and B packed through its strides (a transposed argument)."""
    rng = np.random.default_rng(5)
    m, k, n = 40, 70, 50
    a_st = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
    b_st = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    a, b = jnp.asarray(a_st), jnp.asarray(b_st)

    def f(a, b):
        return (a.T if trans_a else a) @ (b.T if trans_b else b)

    jf = ember.jit(f, backend="native")
    want = (a_st.T if trans_a else a_st).astype(np.float64) @ (b_st.T if trans_b else b_st)
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(jf(a, b)), want, rtol=1e-5, atol=1e-4)
    assert jf.lower(a, b).executable._packed_cache[0] is not None

"""Eager float32 matrix products (no jit) on the native GEMM kernel (``gemm_kernel.eager_dot_general``,
``dot_general_p.eager_impl``): the same values, bit for bit, as the jitted product (the same kernel
entry), within the float32 rounding bound of a float64 reference; what the kernel does not take
(small, batched, other dtypes) and the reference interpreter keep NumPy's ``matmul``."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src.native.emit import gemm_kernel
from ember._src.prims import dot as dot_prims
from tests.native.conftest import requires_cc

pytestmark = [requires_cc, pytest.mark.skipif(gemm_kernel.kernel_symbol() is None or gemm_kernel.BLAS_ONLY,
                                              reason="no GEMM kernel on this machine")]
EPS = float(np.finfo(np.float32).eps)


@pytest.fixture(scope="module", autouse=True)
def _kernel_loaded():
    assert gemm_kernel.load(wait=True)


def _bound_check(got: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """|got - a @ b| within the rounding bound of length-k float32 dot products (float64 reference)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64 @ b64
    bound = 2 * a.shape[1] * EPS * (np.abs(a64) @ np.abs(b64)) + 1e-30
    assert np.all(np.abs(got - want) <= bound)


@pytest.mark.parametrize(("m", "n", "k"),
                         [(1000, 1000, 1000), (130, 257, 300), (1024, 48, 2048), (2, 2049, 512)])
def test_eager_matmul_equals_jit_and_reference(m, n, k):
    rng = np.random.default_rng(m + n + k)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    ea, eb = jnp.asarray(a), jnp.asarray(b)
    # the kernel takes what a jitted product gives it (on AVX2 its size rule leaves some to BLAS)
    on_kernel = gemm_kernel.use_small_sgemm(m, n, k)
    assert (gemm_kernel.eager_sgemm(a, b) is not None) == on_kernel
    jitted = np.asarray(ember.jit(lambda x, y: x @ y, backend="native")(ea, eb))
    for got in (ea @ eb, jnp.matmul(ea, eb), jnp.dot(ea, eb)):
        got = np.asarray(got)
        assert got.dtype == np.float32 and got.shape == (m, n)
        if on_kernel:
            np.testing.assert_array_equal(got, jitted)
        _bound_check(got, a, b)


@pytest.mark.parametrize(("ta", "tb"), [(True, False), (False, True), (True, True)])
def test_eager_transposed_operands(ta, tb):
    """Contractions over the first axis of ``x`` / the last of ``y`` (transposed operands, read in
    place with their strides) and non-contiguous views."""
    rng = np.random.default_rng(7)
    m, n, k = 300, 200, 160
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    dn = (((0,) if ta else (1,), (1,) if tb else (0,)), ((), ()))
    got = gemm_kernel.eager_dot_general(a, b, dimension_numbers=dn)
    want = ember.jit(lambda x, y: ember.lax.dot_general(x, y, dn))(jnp.asarray(a), jnp.asarray(b))
    assert gemm_kernel.use_small_sgemm(m, n, k)
    np.testing.assert_array_equal(got, np.asarray(want))
    _bound_check(got, a.T if ta else a, b.T if tb else b)
    # a strided view (every other row of a larger buffer) as A
    big = rng.standard_normal((2 * m, k)).astype(np.float32)
    view = big[::2]
    got = gemm_kernel.eager_sgemm(view, b.T if tb else b)
    assert got is not None
    _bound_check(got, view, b.T if tb else b)


def test_nan_and_inf_propagate():
    rng = np.random.default_rng(9)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((200, 150), (150, 120)))
    a[3, 10] = np.nan
    b[20, 4] = np.inf
    got = np.asarray(jnp.asarray(a) @ jnp.asarray(b))
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    assert np.all(np.isnan(got[3]))


@pytest.mark.parametrize("case", ["small", "batched", "float64", "int32", "vector"])
def test_declined_products_keep_numpy(case):
    """What the kernel does not take runs NumPy's matmul: the same values, bit for bit."""
    rng = np.random.default_rng(11)
    shapes = {"small": ((8, 16), (16, 8)), "batched": ((3, 100, 120), (3, 120, 90)),
              "vector": ((300, 400), (400,))}.get(case, ((200, 150), (150, 120)))
    dtype = {"float64": np.float64, "int32": np.int32}.get(case, np.float32)
    a, b = (rng.standard_normal(s).astype(dtype) for s in shapes)
    if case in ("small", "float64", "int32"):
        assert gemm_kernel.eager_sgemm(a.reshape(shapes[0]), b.reshape(shapes[1])) is None
    got = np.asarray(jnp.matmul(jnp.asarray(a), jnp.asarray(b)))  # the suite runs with 64-bit dtypes on
    assert got.dtype == np.matmul(a, b).dtype
    np.testing.assert_array_equal(got, np.matmul(a, b))


def test_reference_interpreter_keeps_numpy():
    """The reference interpreter (``backend="numpy"``) runs ``impl`` (NumPy), not the eager kernel."""
    assert dot_prims.dot_general_p.eager_impl is gemm_kernel.eager_dot_general
    rng = np.random.default_rng(13)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((200, 300), (300, 250)))
    got = np.asarray(ember.jit(lambda x, y: x @ y, backend="numpy")(a, b))
    np.testing.assert_array_equal(got, np.matmul(a, b))


def test_results_from_the_pool_are_not_overwritten():
    """Eager results come from the native output pool: a live result keeps its values while later
    products run (a block is reused only once no Array holds it) and cannot be written."""
    rng = np.random.default_rng(17)
    a, b, c = (rng.standard_normal((160, 160)).astype(np.float32) for _ in range(3))
    ea, eb, ec = (jnp.asarray(x) for x in (a, b, c))
    first = ea @ eb
    kept = np.array(first)
    for _ in range(3):
        other = ea @ ec
        del other
    np.testing.assert_array_equal(np.asarray(first), kept)
    np.testing.assert_array_equal(np.asarray(ea @ ec), np.asarray(ember.jit(lambda x, y: x @ y)(ea, ec)))
    with pytest.raises(ValueError):
        np.asarray(first)[0, 0] = 1.0

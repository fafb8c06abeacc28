"""Shared test data for the ember.numpy tests."""

import numpy as np


def make(shape, dtype=np.float32, seed=0, high=50):
    """Deterministic random data of ``dtype``: normals (complex: normal real and imaginary parts),
    integers in [-high, high), or random bools."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) > 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-high, high, size=shape).astype(dtype)
    if np.dtype(dtype).kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def assert_same(got, want, check_dtype=True):
    """``got`` equals ``want`` exactly: shape, dtype (unless ``check_dtype`` is false) and values;
    lists and tuples entry by entry."""
    if isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            assert_same(g, w, check_dtype)
        return
    got_np = np.asarray(got)
    want = np.asarray(want)
    assert got_np.shape == want.shape, (got_np.shape, want.shape)
    if check_dtype:
        assert got_np.dtype == want.dtype, (got_np.dtype, want.dtype)
    np.testing.assert_array_equal(got_np, want)


# Tolerance for comparing a jitted result (native backend: fused C, another summation order,
# inline math with a few ulp of error) with the eager one (NumPy): about 100 ulp of the dtype.
JIT_RTOL = {"float16": 4e-3, "bfloat16": 3e-2, "float32": 2e-5, "float64": 1e-12,
            "complex64": 2e-5, "complex128": 1e-12}


def jit_tolerance(dtype, rtol=None):
    """The jit-vs-eager tolerance of ``dtype``: 0 (exact) for integer and bool dtypes."""
    name = np.dtype(dtype).name
    if name not in JIT_RTOL:
        return 0.0
    return JIT_RTOL[name] if rtol is None else rtol


def assert_jit_close(got, want, rtol=None, atol=None, err_msg=""):
    """A jitted result equals the eager one: same dtype and shape; integers and bools exactly;
    floats within :data:`JIT_RTOL` (relative, and the same value as an absolute floor unless
    ``atol`` is given); NaN and +-Inf must appear at the same places."""
    g, w = np.asarray(got), np.asarray(want)
    assert g.dtype == w.dtype, f"{err_msg} dtype {g.dtype} vs {w.dtype}"
    assert g.shape == w.shape, f"{err_msg} shape {g.shape} vs {w.shape}"
    tol = jit_tolerance(w.dtype, rtol)
    if tol == 0.0:
        np.testing.assert_array_equal(g, w, err_msg=err_msg)
        return
    wide = np.complex128 if g.dtype.kind == "c" else np.float64
    np.testing.assert_allclose(g.astype(wide), w.astype(wide), rtol=tol, atol=tol if atol is None else atol,
                               equal_nan=True, err_msg=err_msg)

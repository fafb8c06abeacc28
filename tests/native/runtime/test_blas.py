"""Tests for the SciPy BLAS/LAPACK pointers and the ctypes gemm wrapper."""

from __future__ import annotations

import ctypes
import itertools

import numpy as np
import pytest

from ember._src.native.runtime import blas

SHAPES = [(1, 1, 1), (3, 4, 5), (17, 9, 33), (64, 64, 64), (5, 1, 7), (1, 8, 1), (128, 3, 2)]
TOL = {np.float32: 1e-4, np.float64: 1e-12, np.complex64: 1e-4, np.complex128: 1e-12}


def _random(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def test_all_pointers_resolve():
    names = blas.BLAS_NAMES + blas.LAPACK_NAMES
    pointers = [blas.blas_pointer(n) for n in names]
    assert all(isinstance(p, int) and p != 0 for p in pointers)
    assert len(set(pointers)) == len(names)
    assert blas.blas_signature("dgemm").startswith("void (char *, char *, int *, int *, int *,")


def test_unknown_name():
    with pytest.raises(KeyError, match="not exported"):
        blas.blas_pointer("xgemm")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("trans_a,trans_b", list(itertools.product([False, True], repeat=2)))
def test_gemm_matches_numpy(dtype, trans_a, trans_b):
    rng = np.random.default_rng(0)
    for m, k, n in SHAPES:
        a = _random(rng, (k, m) if trans_a else (m, k), dtype)
        b = _random(rng, (n, k) if trans_b else (k, n), dtype)
        expected = (a.T if trans_a else a) @ (b.T if trans_b else b)
        got = blas.gemm(a, b, trans_a=trans_a, trans_b=trans_b)
        assert got.dtype == dtype and got.shape == (m, n)
        np.testing.assert_allclose(got, expected, rtol=TOL[dtype], atol=TOL[dtype] * k)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_alpha_beta_in_place(dtype):
    rng = np.random.default_rng(1)
    a, b, c = _random(rng, (6, 4), dtype), _random(rng, (4, 5), dtype), _random(rng, (6, 5), dtype)
    expected = 0.5 * (a @ b) + 2.0 * c
    out = blas.gemm(a, b, alpha=0.5, beta=2.0, c=c)
    assert out is c
    np.testing.assert_allclose(c, expected, rtol=TOL[dtype], atol=TOL[dtype])


def test_gemm_non_contiguous_inputs_and_empty():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((8, 6))[:, ::2]
    b = rng.standard_normal((3, 5))
    np.testing.assert_allclose(blas.gemm(a, b), a @ b, rtol=1e-12)
    assert blas.gemm(np.zeros((0, 3)), np.zeros((3, 4))).shape == (0, 4)
    np.testing.assert_array_equal(blas.gemm(np.zeros((2, 0)), np.zeros((0, 4))), np.zeros((2, 4)))


def test_gemm_errors():
    with pytest.raises(ValueError, match="contraction"):
        blas.gemm(np.zeros((2, 3)), np.zeros((4, 5)))
    with pytest.raises(TypeError, match="dtype"):
        blas.gemm(np.zeros((2, 3), np.float32), np.zeros((3, 2)))
    with pytest.raises(TypeError, match="dtype"):
        blas.gemm(np.zeros((2, 3), np.int64), np.zeros((3, 2), np.int64))
    with pytest.raises(ValueError, match="C-contiguous"):
        blas.gemm(np.zeros((2, 3)), np.zeros((3, 2)), c=np.zeros((2, 2)).T)


def test_dpotrf_pointer_convention():
    """LAPACK through the same convention: dpotrf(uplo, n, a, lda, info), all by pointer."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 5))
    spd = np.ascontiguousarray(x @ x.T + 5 * np.eye(5))
    a = spd.copy()
    potrf = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * 5))(blas.blas_pointer("dpotrf"))
    uplo, n, lda, info = ctypes.c_char(b"U"), ctypes.c_int(5), ctypes.c_int(5), ctypes.c_int(-1)
    # Row-major buffer read as column-major is A^T = A; "U" in column-major is lower in row-major.
    potrf(*(ctypes.addressof(v) for v in (uplo, n)), a.ctypes.data, ctypes.addressof(lda),
          ctypes.addressof(info))
    assert info.value == 0
    lower = np.tril(a)
    np.testing.assert_allclose(lower @ lower.T, spd, rtol=1e-12)

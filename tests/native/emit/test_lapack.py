"""LAPACK-backed call steps (lapack.py) against the reference backend and NumPy/SciPy: batched
shapes, float32/float64, every flag combination, failures and non-finite inputs (NaN factors)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla

import ember
from ember._src.prims import linalg as L
from tests.native.conftest import requires_cc
from tests.native.util import check

pytestmark = requires_cc
RNG = np.random.default_rng(11)


def native(f, *args):
    jf = ember.jit(f, backend="native")
    out = jf(*args)
    exe = jf.lower(*args).executable
    assert exe.schedule.count("fallback") == 0 and exe.schedule.count("call") >= 1, str(exe.schedule)
    return [np.asarray(o) for o in (out if isinstance(out, (list, tuple)) else [out])]


def spd(batch: tuple, n: int, dtype) -> np.ndarray:
    a = RNG.standard_normal((*batch, n, n))
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n)).astype(dtype)


def tols(dtype) -> dict:
    return {"rtol": 2e-4, "atol": 2e-4} if dtype == np.float32 else {"rtol": 1e-10, "atol": 1e-10}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cholesky_batched_and_not_positive_definite(dtype):
    a = spd((2, 3), 6, dtype)
    a[1, 2] = -a[1, 2]  # not positive definite: NaN factor for that matrix only
    a[0, 0, 0, 5] = 1e3  # the upper triangle is never read
    check(lambda x: L.cholesky_p.bind(x), a, **tols(dtype))
    (got,) = native(lambda x: L.cholesky_p.bind(x), a)
    assert np.isnan(got[1, 2]).all() and not np.isnan(got[0]).any()
    low = np.tril(a[0, 1]) + np.tril(a[0, 1], -1).T
    np.testing.assert_allclose(got[0, 1], np.linalg.cholesky(low), **tols(dtype))


@pytest.mark.parametrize("left_side", [True, False])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("transpose_a", [True, False])
@pytest.mark.parametrize("unit_diagonal", [True, False])
def test_triangular_solve_all_flags(left_side, lower, transpose_a, unit_diagonal):
    a = spd((3,), 5, np.float64)
    b = RNG.standard_normal((3, 5, 4) if left_side else (3, 4, 5))
    kw = dict(left_side=left_side, lower=lower, transpose_a=transpose_a, unit_diagonal=unit_diagonal)
    check(lambda a, b: L.triangular_solve(a, b, **kw), a, b)
    (x,) = native(lambda a, b: L.triangular_solve(a, b, **kw), a, b)
    t = np.tril(a[1]) if lower else np.triu(a[1])
    if unit_diagonal:
        np.fill_diagonal(t, 1.0)
    op = t.T if transpose_a else t
    np.testing.assert_allclose(op @ x[1] if left_side else x[1] @ op, b[1], rtol=1e-10, atol=1e-10)


def test_triangular_solve_float32_and_empty_batch():
    a = spd((2,), 8, np.float32)
    b = RNG.standard_normal((2, 8, 3)).astype(np.float32)
    check(lambda a, b: L.triangular_solve(a, b, left_side=True, lower=True), a, b, rtol=1e-4, atol=1e-4)
    check(lambda a, b: L.triangular_solve(a, b, left_side=True, lower=True),
          np.zeros((0, 3, 3), np.float32), np.zeros((0, 3, 2), np.float32))


@pytest.mark.parametrize("shape", [(4, 4), (2, 6, 4), (3, 4, 6), (2, 1, 5, 5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lu_pivots_and_permutation(shape, dtype):
    x = RNG.standard_normal(shape).astype(dtype)
    check(lambda x: L.lu_p.bind(x), x, **tols(dtype))
    lu, piv, perm = native(lambda x: L.lu_p.bind(x), x)
    assert piv.dtype == np.int32 and perm.dtype == np.int32
    m, n = shape[-2:]
    k = min(m, n)
    flat, lf, pf = x.reshape(-1, m, n), lu.reshape(-1, m, n), perm.reshape(-1, m)
    for i in range(flat.shape[0]):
        lo = np.tril(lf[i], -1)[:, :k] + np.eye(m, k)
        up = np.triu(lf[i])[:k]
        np.testing.assert_allclose(lo @ up, flat[i][pf[i]], **tols(dtype))
        np.testing.assert_array_equal(piv.reshape(-1, k)[i], sla.lu_factor(flat[i].astype(np.float64))[1][:k])


def test_lu_singular_and_non_finite():
    x = np.stack([np.ones((4, 4)), RNG.standard_normal((4, 4)), RNG.standard_normal((4, 4))])
    x[2, 1, 1] = np.nan
    check(lambda x: L.lu_p.bind(x), x)
    lu, piv, perm = native(lambda x: L.lu_p.bind(x), x)
    assert np.isnan(lu[2]).all() and (piv[2] == np.arange(4)).all() and (perm[2] == np.arange(4)).all()


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4), (2, 6, 2)])
@pytest.mark.parametrize("full", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_qr_full_and_reduced(shape, full, dtype):
    x = RNG.standard_normal(shape).astype(dtype)
    check(lambda x: L.qr_p.bind(x, full_matrices=full), x, **tols(dtype))
    q, r = native(lambda x: L.qr_p.bind(x, full_matrices=full), x)
    k = r.shape[-2]
    np.testing.assert_allclose(q[..., :, :k] @ r, x, **tols(dtype))
    np.testing.assert_allclose(np.swapaxes(q, -1, -2) @ q, np.broadcast_to(np.eye(q.shape[-1]), q.shape[:-2] +
                               (q.shape[-1],) * 2), **tols(dtype))
    assert np.allclose(np.tril(r, -1), 0)


def test_qr_and_svd_of_empty_matrices():
    x = np.zeros((2, 3, 0))
    check(lambda x: L.qr_p.bind(x, full_matrices=True), x)
    check(lambda x: L.svd_p.bind(x, full_matrices=True, compute_uv=True), x)


def _sign_fix(v: np.ndarray) -> np.ndarray:
    """Eigen/singular vectors up to sign: make each column's largest entry positive."""
    idx = np.argmax(np.abs(v), axis=-2)[..., None, :]
    return v * np.sign(np.take_along_axis(v, idx, axis=-2))


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_eigh_ascending_with_vectors(lower, dtype):
    a = RNG.standard_normal((3, 6, 6)).astype(dtype)
    sym = np.tril(a) + np.swapaxes(np.tril(a, -1), -1, -2) if lower else \
        np.triu(a) + np.swapaxes(np.triu(a, 1), -1, -2)
    v, w = native(lambda x: L.eigh_p.bind(x, lower=lower), a)
    wv, ww = ember.jit(lambda x: L.eigh_p.bind(x, lower=lower), backend="numpy")(a)
    np.testing.assert_allclose(w, np.asarray(ww), **tols(dtype))
    assert (np.diff(w, axis=-1) >= 0).all()
    np.testing.assert_allclose(_sign_fix(v), _sign_fix(np.asarray(wv)), rtol=1e-3 if dtype == np.float32
                               else 1e-8, atol=1e-3 if dtype == np.float32 else 1e-8)
    np.testing.assert_allclose((v * w[..., None, :]) @ np.swapaxes(v, -1, -2), sym, **tols(dtype))


def test_eigh_non_finite_matrix_is_nan():
    a = spd((3,), 4, np.float64)
    a[1, 0, 0] = np.inf
    v, w = native(lambda x: L.eigh_p.bind(x, lower=True), a)
    assert np.isnan(v[1]).all() and np.isnan(w[1]).all() and np.isfinite(w[[0, 2]]).all()


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
@pytest.mark.parametrize("full", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_svd_reconstructs_and_matches_numpy(shape, full, dtype):
    x = RNG.standard_normal(shape).astype(dtype)
    s, u, vh = native(lambda x: L.svd_p.bind(x, full_matrices=full, compute_uv=True), x)
    ws = np.linalg.svd(x.astype(np.float64), compute_uv=False)
    np.testing.assert_allclose(s, ws, **tols(dtype))
    k = s.shape[-1]
    np.testing.assert_allclose((u[..., :k] * s[..., None, :]) @ vh[..., :k, :], x, **tols(dtype))
    np.testing.assert_allclose(np.swapaxes(u, -1, -2) @ u, np.broadcast_to(np.eye(u.shape[-1]), u.shape[:-2] +
                               (u.shape[-1],) * 2), **tols(dtype))
    (s_only,) = native(lambda x: L.svd_p.bind(x, full_matrices=full, compute_uv=False), x)
    np.testing.assert_allclose(s_only, ws, **tols(dtype))


def test_svd_non_finite_is_nan_per_matrix():
    x = RNG.standard_normal((3, 4, 3))
    x[0, 1, 1] = np.nan
    check(lambda x: L.svd_p.bind(x, full_matrices=False, compute_uv=False), x)
    s, u, vh = native(lambda x: L.svd_p.bind(x, full_matrices=False, compute_uv=True), x)
    assert np.isnan(s[0]).all() and np.isnan(u[0]).all() and np.isfinite(s[1:]).all()


def test_linalg_api_solve_and_cholesky_batch_native():
    a = spd((16,), 8, np.float32)
    b = RNG.standard_normal((16, 8, 2)).astype(np.float32)
    jf = ember.jit(lambda a, b: (ember.numpy.linalg.cholesky(a), ember.numpy.linalg.solve(a, b)),
                   backend="native")
    c, x = jf(a, b)
    assert jf.lower(a, b).executable.schedule.count("fallback") == 0
    np.testing.assert_allclose(np.asarray(c), np.linalg.cholesky(a), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(x), np.linalg.solve(a, b), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("vectors", [True, False])
def test_eig_real_input_pairs_and_nonfinite(dtype, vectors):
    """geev's eigenvalues and conjugate-pair vectors, against NumPy (float64) and the definition
    A v = w v; a non-finite matrix gives NaN for that matrix only."""
    a = np.random.default_rng(3).standard_normal((3, 7, 7)).astype(dtype)
    a[1] = np.diag([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]).astype(dtype)  # all real
    a[2, 3, 4] = np.inf
    outs = native(lambda x: L.eig(x, compute_eigenvectors=vectors), a)
    w = outs[0]
    assert w.dtype == (np.complex64 if dtype == np.float32 else np.complex128)
    assert np.isnan(w[2].real).all() and not np.isnan(w[:2]).any()
    want_w = np.linalg.eigvals(a[:2].astype(np.float64))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for b in range(2):  # same eigenvalues (as sets: geev's order is the reference's too)
        np.testing.assert_allclose(np.sort_complex(w[b]), np.sort_complex(want_w[b]), rtol=tol, atol=tol)
    assert np.iscomplex(w[0]).any()  # a random 7x7 real matrix has a complex pair here
    if vectors:
        v = outs[1]
        _check_eigenvectors(a, v, w, tol)
        ref = L.eig_p.impl(a, compute_eigenvectors=True)
        np.testing.assert_allclose(v, ref[1], rtol=tol, atol=tol, equal_nan=True)


def _check_eigenvectors(a, v, w, tol, matrices=2):
    """A v = w v and unit columns for the first ``matrices`` matrices."""
    for b in range(matrices):
        lhs = a[b].astype(np.complex128) @ v[b]
        np.testing.assert_allclose(lhs, v[b] * w[b][None, :], rtol=tol * 10, atol=tol * 10)
        np.testing.assert_allclose(np.linalg.norm(v[b], axis=0), 1.0, rtol=tol)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("vectors", [True, False])
def test_eig_complex_input_zgeev(dtype, vectors):
    """zgeev (in double precision, as NumPy's eig) for complex matrices: eigenvalues against
    NumPy's, vectors against the definition A v = w v with unit columns and against the reference
    backend; a non-finite matrix gives NaN + 0j for that matrix only."""
    rng = np.random.default_rng(5)
    a = (rng.standard_normal((3, 6, 6)) + 1j * rng.standard_normal((3, 6, 6))).astype(dtype)
    a[2, 0, 5] = complex(0, np.nan)
    outs = native(lambda x: L.eig(x, compute_eigenvectors=vectors), a)
    w = outs[0]
    assert w.dtype == dtype
    assert np.isnan(w[2].real).all() and (w[2].imag == 0).all() and not np.isnan(w[:2]).any()
    want_w = np.linalg.eigvals(a[:2].astype(np.complex128))
    tol = 1e-5 if dtype == np.complex64 else 1e-12
    np.testing.assert_allclose(w[:2], want_w, rtol=tol, atol=tol)  # zgeev's order, as NumPy's
    if vectors:
        v = outs[1]
        _check_eigenvectors(a, v, w, tol)
        assert np.isnan(v[2].real).all()
        ref = L.eig_p.impl(a, compute_eigenvectors=True)
        np.testing.assert_allclose(v[:2], ref[1][:2], rtol=tol * 10, atol=tol * 10)

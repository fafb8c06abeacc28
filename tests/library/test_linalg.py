"""ember.linalg / ember.numpy.linalg / ember.scipy.linalg / ember.lax.linalg against NumPy and SciPy:
batched shapes, real and complex dtypes, equality under ``jit``, ``vmap``, and derivatives of the
decompositions checked with finite differences."""

import numpy as np
import pytest
import scipy.linalg as sla

import ember
import ember.numpy as jnp
from ember import linalg as la
from ember.errors import ShapeError
from ember.lax import linalg as lax_linalg
from ember.scipy import linalg as esla
from ember.test_util import check_grads
from tests.numpy.helpers import assert_jit_close

rng = np.random.default_rng(7)
DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
SHAPES = [(3, 3), (1, 1), (2, 4, 4), (2, 1, 3, 3)]


def _rand(shape, dtype):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def _spd(shape, dtype):
    a = _rand(shape, dtype)
    n = shape[-1]
    return (a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)).astype(dtype)


def _tol(dtype):
    return 2e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-10


def _close(got, want, dtype, scale=1.0):
    got = np.asarray(got)
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    np.testing.assert_allclose(got, want, rtol=_tol(dtype) * scale, atol=_tol(dtype) * scale)


def _jit_equal(f, *args, up_to_sign=False):
    """``f`` jitted agrees with ``f`` eager. ``up_to_sign``: compare magnitudes only (singular
    vectors are defined up to a sign per pair; the native program factorizes the column-major view
    and NumPy the row-major one, so they may pick opposite signs)."""
    eager = f(*args)
    jitted = ember.jit(f)(*args)
    for e, j in zip(
        np.atleast_1d(eager) if not isinstance(eager, tuple) else eager,
        np.atleast_1d(jitted) if not isinstance(jitted, tuple) else jitted,
    ):
        # LAPACK in the native program and through NumPy may round differently: the jitted result
        # must agree with the eager one to the decomposition's accuracy (signs and order included)
        e, j = np.asarray(e), np.asarray(j)
        if up_to_sign:
            e, j = np.abs(e), np.abs(j)
        assert_jit_close(j, e, rtol=_tol(e.dtype) if e.dtype.kind in "fc" else None)
    return eager


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_decompositions(shape, dtype):
    a, s = _rand(shape, dtype), _spd(shape, dtype)
    L = _jit_equal(la.cholesky, s)
    _close(L, np.linalg.cholesky(s), dtype)
    _close(la.cholesky(s, upper=True), np.conj(np.swapaxes(np.linalg.cholesky(s), -1, -2)), dtype)
    w, v = _jit_equal(la.eigh, s, up_to_sign=True)
    _close(w, np.linalg.eigvalsh(s), dtype, 10)
    _close(
        np.asarray(v) @ (np.asarray(w)[..., None] * np.conj(np.swapaxes(np.asarray(v), -1, -2))), s, dtype, 10
    )
    _close(la.eigvalsh(s), np.linalg.eigvalsh(s), dtype, 10)
    q, r = _jit_equal(la.qr, a)
    _close(np.asarray(q) @ np.asarray(r), a, dtype, 10)
    _close(np.abs(np.asarray(r)), np.abs(np.linalg.qr(a)[1]), dtype, 10)
    u, sv, vh = _jit_equal(la.svd, a, up_to_sign=True)
    _close(sv, np.linalg.svd(a, compute_uv=False), dtype, 10)
    _close(np.asarray(u) @ (np.asarray(sv)[..., None] * np.asarray(vh)), a, dtype, 10)
    _close(la.svdvals(a), np.linalg.svd(a, compute_uv=False), dtype, 10)
    assert u.dtype == dtype and sv.dtype == np.zeros((), dtype).real.dtype


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (5, 2), (2, 5), (2, 3, 6, 4)])
def test_rectangular(shape, dtype):
    a = _rand(shape, dtype)
    for mode in ("reduced", "complete"):
        q, r = la.qr(a, mode=mode)
        wq, wr = np.linalg.qr(a, mode=mode)
        assert q.shape == wq.shape and r.shape == wr.shape
        _close(np.asarray(q) @ np.asarray(r), a, dtype, 10)
    assert la.qr(a, mode="r").shape == np.linalg.qr(a, mode="r").shape
    for full in (True, False):
        u, s, vh = la.svd(a, full_matrices=full)
        wu, _, wvh = np.linalg.svd(a, full_matrices=full)
        assert u.shape == wu.shape and vh.shape == wvh.shape
    _close(la.pinv(a), np.linalg.pinv(a), dtype, 20)
    np.testing.assert_array_equal(la.matrix_rank(a), np.linalg.matrix_rank(a))
    p, l, u = esla.lu(a)
    _close(np.asarray(p) @ np.asarray(l) @ np.asarray(u), a, dtype, 10)
    if a.ndim == 2:
        wp, wl, wu = sla.lu(a)
        _close(p, wp, dtype)
        _close(l, wl, dtype, 10)
        _close(u, wu, dtype, 10)


@pytest.mark.parametrize("dtype", DTYPES)
def test_solve_inv_det(dtype):
    a = _rand((2, 3, 4, 4), dtype) + 2 * np.eye(4, dtype=dtype)
    b = _rand((2, 3, 4, 2), dtype)
    _close(_jit_equal(la.solve, a, b), np.linalg.solve(a, b), dtype, 10)
    _close(la.solve(a[0, 0], b[0, 0, :, 0]), np.linalg.solve(a[0, 0], b[0, 0, :, 0]), dtype, 10)
    _close(la.solve(a, b[0, 0]), np.linalg.solve(a, b[0, 0]), dtype, 10)  # broadcast b's batch
    _close(_jit_equal(la.inv, a), np.linalg.inv(a), dtype, 10)
    _close(_jit_equal(la.det, a), np.linalg.det(a), dtype, 10)
    sign, logdet = la.slogdet(a)
    wsign, wlog = np.linalg.slogdet(a)
    _close(sign, wsign, dtype, 10)
    _close(logdet, wlog, dtype, 10)
    assert la.det(np.zeros((0, 0), dtype)) == 1
    sing = np.array([[1.0, 2.0], [2.0, 4.0]], dtype)
    assert float(np.abs(np.asarray(la.det(sing)))) == 0
    s, ld = la.slogdet(sing)
    assert float(np.abs(np.asarray(s))) == 0 and np.asarray(ld) == -np.inf


def test_not_positive_definite_gives_nan():
    assert np.isnan(np.asarray(la.cholesky(np.array([[1.0, 2.0], [2.0, 1.0]])))).all()
    ok = la.cholesky(np.stack([np.eye(2), -np.eye(2)]))
    assert np.isfinite(np.asarray(ok[0])).all() and np.isnan(np.asarray(ok[1])).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_lstsq(dtype):
    a, b = _rand((6, 3), dtype), _rand((6, 2), dtype)
    x, resid, rank, s = la.lstsq(a, b)
    wx, wres, wrank, ws = np.linalg.lstsq(a, b, rcond=None)
    _close(x, wx, dtype, 10)
    _close(resid, wres, dtype, 100)
    assert int(rank) == wrank
    _close(s, ws, dtype, 10)
    x1 = la.lstsq(a, b[:, 0]).x
    _close(x1, np.linalg.lstsq(a, b[:, 0], rcond=None)[0], dtype, 10)
    under = la.lstsq(a.T, b[:3]).x  # minimum-norm solution of an underdetermined system
    _close(under, np.linalg.lstsq(a.T, b[:3], rcond=None)[0], dtype, 10)


@pytest.mark.parametrize("ord", [None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf])
def test_matrix_norms(ord):
    a = _rand((2, 3, 4), np.float64)
    _close(la.norm(a, ord, axis=(1, 2)), np.linalg.norm(a, ord, axis=(1, 2)), np.float64)
    _close(
        la.norm(a, ord, axis=(2, 0), keepdims=True),
        np.linalg.norm(a, ord, axis=(2, 0), keepdims=True),
        np.float64,
    )
    if ord is not None:
        _close(la.matrix_norm(a, ord=ord), np.linalg.norm(a, ord, axis=(-2, -1)), np.float64)


@pytest.mark.parametrize("ord", [None, 0, 1, 2, 3.5, np.inf, -np.inf, -1])
def test_vector_norms(ord):
    a = _rand((3, 5), np.float32)
    _close(la.norm(a, ord, axis=1), np.linalg.norm(a, ord, axis=1), np.float32)
    _close(
        la.norm(a, ord, axis=-2, keepdims=True), np.linalg.norm(a, ord, axis=-2, keepdims=True), np.float32
    )
    o = 2 if ord is None else ord
    _close(la.vector_norm(a, ord=o), np.linalg.norm(a.ravel(), o), np.float32)
    _close(
        la.vector_norm(a, ord=o, axis=(0, 1), keepdims=True),
        np.linalg.norm(a.ravel(), o).reshape(1, 1),
        np.float32,
    )
    z = _rand((4,), np.complex64)
    _close(la.norm(z, ord), np.linalg.norm(z, ord), np.float32)
    assert la.norm(np.zeros((0,), np.float32)) == 0


def test_products_and_misc():
    a, b = _rand((2, 3, 3), np.float64), _rand((2, 3, 3), np.float64)
    _close(la.cross(a, b), np.cross(a, b), np.float64)
    _close(la.cross(a, b, axis=1), np.cross(a, b, axis=1), np.float64)
    v, w = _rand((4,), np.float32), _rand((5,), np.float32)
    _close(la.outer(v, w), np.outer(v, w), np.float32)
    mats = [
        _rand((3, 10), np.float64),
        _rand((10, 2), np.float64),
        _rand((2, 8), np.float64),
        _rand((8, 4), np.float64),
    ]
    _close(la.multi_dot(mats), np.linalg.multi_dot(mats), np.float64)
    _close(
        la.multi_dot([mats[0][0], mats[1], mats[2][:, 0]]),
        np.linalg.multi_dot([mats[0][0], mats[1], mats[2][:, 0]]),
        np.float64,
    )
    for n in (0, 1, 2, 5, -1, -3):
        _close(
            la.matrix_power(a + 3 * np.eye(3), n), np.linalg.matrix_power(a + 3 * np.eye(3), n), np.float64
        )
    _close(la.matmul(a, b[0]), a @ b[0], np.float64)
    _close(la.trace(a, offset=1), np.trace(a, offset=1, axis1=-2, axis2=-1), np.float64)
    _close(la.diagonal(a, offset=-1), np.diagonal(a, offset=-1, axis1=-2, axis2=-1), np.float64)
    _close(la.matrix_transpose(a), np.swapaxes(a, -1, -2), np.float64)
    _close(la.vecdot(a, b), np.sum(a * b, -1), np.float64)
    _close(la.tensordot(a, b, axes=([1, 2], [2, 1])), np.tensordot(a, b, axes=([1, 2], [2, 1])), np.float64)
    t = _rand((2, 3, 6), np.float64)
    _close(
        la.tensorsolve(t, _rand((2, 3), np.float64) * 0 + 1),
        np.linalg.tensorsolve(t, np.ones((2, 3))),
        np.float64,
        100,
    )
    _close(la.cond(a[0]), np.linalg.cond(a[0]), np.float64, 100)
    w, vr = la.eig(a[0])
    np.testing.assert_allclose(a[0] @ np.asarray(vr), np.asarray(vr) * np.asarray(w), atol=1e-10)
    np.testing.assert_allclose(
        np.sort_complex(np.asarray(la.eigvals(a[0]))), np.sort_complex(np.linalg.eigvals(a[0]))
    )
    assert la.eigvals(a).dtype == np.complex128 and la.eigvals(a.astype(np.float32)).dtype == np.complex64


def test_integer_inputs_promote():
    a = np.array([[2, 1], [1, 3]])
    assert la.det(a).dtype == np.float32
    assert la.inv(a).dtype == np.float32
    np.testing.assert_allclose(la.solve(a, np.array([1, 2])), np.linalg.solve(a, [1, 2]), rtol=1e-6)


def test_scipy_linalg():
    a = _rand((4, 4), np.float64) + 3 * np.eye(4)
    b = _rand((4, 2), np.float64)
    lu, piv = esla.lu_factor(a)
    wlu, wpiv = sla.lu_factor(a)
    _close(lu, wlu, np.float64)
    np.testing.assert_array_equal(piv, wpiv)
    for trans in (0, 1, 2):
        _close(
            esla.lu_solve((lu, piv), b, trans=trans), sla.lu_solve((wlu, wpiv), b, trans=trans), np.float64
        )
    for trans in (0, 1, "T", "C"):
        for lower in (True, False):
            for unit in (True, False):
                _close(
                    esla.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit),
                    sla.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit),
                    np.float64,
                )
    s = _spd((4, 4), np.float64)
    for lower in (True, False):
        _close(esla.cholesky(s, lower=lower), sla.cholesky(s, lower=lower), np.float64)
        _close(
            esla.cho_solve(esla.cho_factor(s, lower=lower), b),
            sla.cho_solve(sla.cho_factor(s, lower=lower), b),
            np.float64,
        )
    _close(esla.solve(s, b, assume_a="pos"), np.linalg.solve(s, b), np.float64)
    w, v = esla.eigh(s)
    _close(w, sla.eigh(s)[0], np.float64)
    pl_, u = esla.lu(a, permute_l=True)
    _close(np.asarray(pl_) @ np.asarray(u), a, np.float64)


@pytest.mark.parametrize("left_side", [True, False])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize(
    "transpose_a,conjugate_a", [(False, False), (True, False), (True, True), (False, True)]
)
def test_lax_triangular_solve(left_side, lower, transpose_a, conjugate_a):
    a = _rand((2, 3, 3), np.complex128) + 3 * np.eye(3)
    b = _rand((2, 3, 4) if left_side else (2, 4, 3), np.complex128)
    x = lax_linalg.triangular_solve(
        a, b, left_side=left_side, lower=lower, transpose_a=transpose_a, conjugate_a=conjugate_a
    )
    t = np.tril(a) if lower else np.triu(a)
    t = np.swapaxes(t, -1, -2) if transpose_a else t
    t = np.conj(t) if conjugate_a else t
    got = t @ np.asarray(x) if left_side else np.asarray(x) @ t
    np.testing.assert_allclose(got, b, atol=1e-10)


def test_lax_lu_conventions():
    a = _rand((2, 5, 3), np.float64)
    lu, piv, perm = lax_linalg.lu(a)
    assert piv.dtype == np.int32 and piv.shape == (2, 3) and perm.shape == (2, 5)
    l = np.tril(np.asarray(lu), -1)[..., :3] + np.eye(5, 3)
    u = np.triu(np.asarray(lu))[..., :3, :]
    np.testing.assert_allclose(l @ u, np.take_along_axis(a, np.asarray(perm)[..., None], 1), atol=1e-12)
    np.testing.assert_array_equal(lax_linalg.lu_pivots_to_permutation(piv, 5), perm)
    v, w = lax_linalg.eigh(_spd((3, 3), np.float64))
    assert v.shape == (3, 3) and w.shape == (3,)
    s, u_, vh = lax_linalg.svd(a[0], full_matrices=False)
    assert s.shape == (3,) and u_.shape == (5, 3) and vh.shape == (3, 3)


def test_vmap_matches_batched():
    a = _rand((4, 3, 3), np.float64) + 2 * np.eye(3)
    b = _rand((3,), np.float64)
    np.testing.assert_allclose(ember.vmap(la.det)(a), np.linalg.det(a), rtol=1e-12)
    np.testing.assert_allclose(
        ember.vmap(la.solve, in_axes=(0, None))(a, b), np.linalg.solve(a, b), rtol=1e-10
    )
    np.testing.assert_allclose(
        ember.vmap(la.inv, in_axes=1, out_axes=1)(np.swapaxes(a, 0, 1)),
        np.swapaxes(np.linalg.inv(a), 0, 1),
        rtol=1e-10,
    )
    np.testing.assert_allclose(
        ember.vmap(lambda m: la.svd(m)[1])(a), np.linalg.svd(a, compute_uv=False), rtol=1e-10
    )
    np.testing.assert_allclose(
        ember.vmap(lambda m: la.eigh(m @ m.T)[0])(a), np.linalg.eigvalsh(a @ np.swapaxes(a, 1, 2)), rtol=1e-10
    )
    tri = ember.vmap(
        lambda m, v: lax_linalg.triangular_solve(m, v, left_side=True, lower=True), in_axes=(None, 0)
    )
    np.testing.assert_allclose(tri(a[0], _rand((4, 3, 2), np.float64)).shape, (4, 3, 2))


def test_errors():
    with pytest.raises(ShapeError):
        la.inv(np.ones((2, 3)))
    with pytest.raises(ShapeError):
        la.cholesky(np.ones(3))
    with pytest.raises(ShapeError):
        la.solve(np.eye(3), np.ones(4))
    with pytest.raises(ValueError, match="mode"):
        la.qr(np.eye(2), mode="bogus")
    with pytest.raises(ValueError, match="norm order"):
        la.norm(np.ones(3), "fro")


# ---------------------------------------------------------------------------------------------
# derivatives (finite differences in float64)
# ---------------------------------------------------------------------------------------------

A4 = rng.standard_normal((4, 4))
B43 = rng.standard_normal((4, 3))
SPD = A4 @ A4.T + 4 * np.eye(4)
AC = A4 + 1j * rng.standard_normal((4, 4))
GRAD_CASES = {
    "cholesky": (la.cholesky, (SPD,)),
    "cholesky_complex": (la.cholesky, (AC @ AC.conj().T + 4 * np.eye(4),)),
    "solve": (la.solve, (A4, B43)),
    "inv": (la.inv, (A4,)),
    "det": (la.det, (A4,)),
    "slogdet": (lambda a: la.slogdet(a)[1], (A4,)),
    "eigh": (la.eigh, (SPD,)),
    "eigvalsh_complex": (la.eigvalsh, (AC + AC.conj().T,)),
    "qr": (la.qr, (B43,)),
    "qr_complex": (la.qr, (AC,)),
    "svd": (lambda a: la.svd(a, full_matrices=False), (B43,)),
    "svd_wide": (lambda a: la.svd(a, full_matrices=False), (B43.T,)),
    "svdvals": (la.svdvals, (B43,)),
    "pinv": (la.pinv, (B43,)),
    "lu": (lambda a: lax_linalg.lu(a)[0], (A4,)),
    "lu_tall": (lambda a: lax_linalg.lu(a)[0], (B43,)),
    "lu_wide": (lambda a: lax_linalg.lu(a)[0], (B43.T,)),
    "triangular_left": (
        lambda a, b: lax_linalg.triangular_solve(a, b, left_side=True, lower=True),
        (A4 + 4 * np.eye(4), B43),
    ),
    "triangular_right_t": (
        lambda a, b: lax_linalg.triangular_solve(a, b, left_side=False, transpose_a=True, unit_diagonal=True),
        (A4, B43.T),
    ),
    "eigvals": (la.eigvals, (A4,)),
    "norm_nuc": (lambda a: la.norm(a, "nuc"), (B43,)),
    "lstsq": (lambda a, b: la.lstsq(a, b).x, (B43, A4[:, :2])),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradients(name):
    f, args = GRAD_CASES[name]
    check_grads(f, args, order=1, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["cholesky", "solve", "det", "eigh", "triangular_left"])
def test_second_order(name):
    f, args = GRAD_CASES[name]
    check_grads(f, args, order=2, modes=("fwd",), atol=1e-4, rtol=1e-4)


def test_grad_under_jit_and_float32():
    a = (A4 + 3 * np.eye(4)).astype(np.float32)
    g = ember.jit(ember.grad(lambda m: jnp.sum(la.inv(m))))(a)
    inv = np.linalg.inv(a.astype(np.float64))
    want = -(inv.T @ np.ones((4, 4)) @ inv.T)
    np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5)


def test_empty_shapes_match_numpy():
    z = np.zeros((0, 0))
    assert la.inv(z).shape == (0, 0) and la.solve(z, np.zeros((0, 2))).shape == (0, 2)
    np.testing.assert_array_equal(la.det(np.zeros((2, 0, 0))), [1.0, 1.0])
    for shape in [(0, 3), (3, 0), (0, 3, 2), (0, 2, 2)]:
        x = np.zeros(shape)
        for got, want in zip(la.svd(x), np.linalg.svd(x)):
            assert got.shape == want.shape, (shape, got.shape, want.shape)
        for got, want in zip(la.qr(x), np.linalg.qr(x)):
            assert got.shape == want.shape
        assert la.pinv(x).shape == np.linalg.pinv(x).shape
    assert la.det(np.zeros((0, 3, 3))).shape == (0,)
    assert la.cholesky(np.zeros((0, 2, 2))).shape == (0, 2, 2)
    assert la.eigh(np.zeros((0, 2, 2)))[0].shape == (0, 2)

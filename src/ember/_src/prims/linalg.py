"""Matrix decompositions and triangular solves, batched over leading dimensions.

Primitives: ``cholesky``, ``triangular_solve``, ``lu``, ``qr``, ``eigh``, ``svd``, ``eig``. Every
implementation takes arrays of shape ``(..., m, n)`` and loops LAPACK (via NumPy/SciPy) over the
leading dims, so the batch rule only moves the vmapped axis to the front. JVP rules follow the
literature (Murray 2016 for Cholesky; De Hoog et al. for LU; Townsend for QR; the standard
perturbation formulas for eigh/svd/eig), as JAX's ``lax.linalg`` does.

Conventions as JAX's ``lax.linalg``: ``eigh`` returns ``(v, w)`` with ascending eigenvalues,
``svd`` returns ``(s, u, vh)``, ``lu`` returns ``(lu, pivots, permutation)`` with int32 pivots.
A factorization that fails (not positive definite, singular) gives NaNs, never an exception.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.linalg as sla

from ember._src import ad_util as ad
from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.core import Primitive, ShapedArray
from ember._src.core import get_aval as _aval
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember._src.prims.dot import dot_general
from ember._src.prims.indexing import take_along_axis
from ember._src.prims.reductions import argmax, reduce_sum
from ember.errors import DTypeError, ShapeError

# ---------------------------------------------------------------------------------------------
# lax-level helpers on (..., m, n) arrays
# ---------------------------------------------------------------------------------------------


def T(x: Any) -> Any:
    """Swap the last two axes."""
    nd = _aval(x).ndim
    return mv.transpose(x, (*range(nd - 2), nd - 1, nd - 2))


def conj(x: Any) -> Any:
    return ew.conj(x) if dt.is_complex(_aval(x).dtype) else x


def H(x: Any) -> Any:
    """Conjugate transpose of the last two axes."""
    return conj(T(x))


def matmul(a: Any, b: Any) -> Any:
    """``a @ b`` for ``(..., m, k) @ (..., k, n)`` with equal batch shapes (no broadcasting)."""
    aa, ba = _aval(a), _aval(b)
    nb = aa.ndim - 2
    if ba.ndim != aa.ndim:
        raise ShapeError(f"matmul: ranks {aa.ndim} and {ba.ndim} differ")
    batch = tuple(range(nb))
    return dot_general(a, b, (((nb + 1,), (nb,)), (batch, batch)))


def eye_like(x: Any, n: int | None = None) -> Any:
    """An identity ``(..., n, n)`` matching the batch shape and dtype of ``x``."""
    a = _aval(x)
    n = a.shape[-1] if n is None else n
    shape = (*a.shape[:-2], n, n)
    i = mv.broadcasted_iota(dt.int32, shape, len(shape) - 2)
    j = mv.broadcasted_iota(dt.int32, shape, len(shape) - 1)
    return ew.convert_element_type(ew.eq(i, j), a.dtype)


def tri_mask(shape: tuple, k: int, lower: bool) -> Any:
    """True on and below diagonal ``k`` (``lower``) or on and above it."""
    i = mv.broadcasted_iota(dt.int32, shape, len(shape) - 2)
    j = mv.broadcasted_iota(dt.int32, shape, len(shape) - 1)
    d = ew.sub(j, i)
    kk = mv.full(shape, k, dt.int32)
    return ew.le(d, kk) if lower else ew.ge(d, kk)


def tril(x: Any, k: int = 0) -> Any:
    a = _aval(x)
    return ew.select(tri_mask(a.shape, k, True), x, mv.full_like(x, 0))


def triu(x: Any, k: int = 0) -> Any:
    a = _aval(x)
    return ew.select(tri_mask(a.shape, k, False), x, mv.full_like(x, 0))


def diagonal(x: Any) -> Any:
    """The main diagonal of the last two axes: ``(..., min(m, n))``."""
    a = _aval(x)
    m, n = a.shape[-2:]
    k = min(m, n)
    x = mv.slice(x, (0,) * a.ndim, (*a.shape[:-2], k, k))
    masked = ew.select(tri_mask((*a.shape[:-2], k, k), 0, True),
                       ew.select(tri_mask((*a.shape[:-2], k, k), 0, False), x, mv.full_like(x, 0)),
                       mv.full_like(x, 0))
    return reduce_sum(masked, (a.ndim - 1,))


def _real(x: Any) -> Any:
    return ew.real(x) if dt.is_complex(_aval(x).dtype) else x


def _check_matrix(name: str, x: ShapedArray, square: bool = False, kind: str = "inexact") -> None:
    if x.ndim < 2:
        raise ShapeError(f"{name}: expected an array of rank >= 2, got shape {sh.shape_str(x.shape)}")
    if square and x.shape[-1] != x.shape[-2]:
        raise ShapeError(f"{name}: expected square matrices, got shape {sh.shape_str(x.shape)}")
    if not dt.is_inexact(x.dtype) or dt.is_low_precision(x.dtype):
        raise DTypeError(f"{name} requires float32/float64/complex64/complex128 input, got {x.dtype}")


def _batched(fn: Callable, x: np.ndarray, out_shapes: list[tuple], out_dtypes: list) -> list[np.ndarray]:
    """Apply ``fn`` (one matrix -> tuple of arrays) over the leading dims of ``x``."""
    batch = x.shape[:-2]
    outs = [np.empty((*batch, *s), d) for s, d in zip(out_shapes, out_dtypes)]
    nb = int(np.prod(batch, dtype=np.int64))
    flat = x.reshape(nb, *x.shape[-2:])
    flat_outs = [o.reshape(nb, *o.shape[len(batch):]) for o in outs]
    for i in range(flat.shape[0]):
        res = fn(flat[i])
        for o, r in zip(flat_outs, res):
            o[i] = r
    return outs


def _batch_rule(p: Primitive) -> Callable:
    def batch(vals: list, dims: list, **params: Any) -> tuple[list, list]:
        vals = ew.bring_to_front(vals, dims)
        out = p.bind(*vals, **params)
        outs = list(out) if p.multiple_results else [out]
        return outs, [0] * len(outs)

    return batch


# ---------------------------------------------------------------------------------------------
# cholesky: lower factor L with A = L L^H (only the lower triangle of A is read)
# ---------------------------------------------------------------------------------------------

cholesky_p = Primitive("cholesky")


def _cholesky_one(a: np.ndarray) -> tuple[np.ndarray]:
    try:
        return (np.linalg.cholesky(np.tril(a) + np.conj(np.tril(a, -1)).T),)
    except np.linalg.LinAlgError:
        return (np.full(a.shape, np.nan, a.dtype),)


def _cholesky_impl(x: np.ndarray) -> np.ndarray:
    return _batched(_cholesky_one, x, [x.shape[-2:]], [x.dtype])[0]


def _cholesky_abstract(x: ShapedArray) -> ShapedArray:
    _check_matrix("cholesky", x, square=True)
    return x.strip_weak()


def _cholesky_jvp(primals: list, tangents: list) -> tuple[list, list]:
    (x,), (sigma_dot,) = primals, tangents
    L = cholesky_p.bind(x)
    if ad.is_zero(sigma_dot):
        return [L], [ad.Zero.from_value(L)]
    # Murray (2016), arXiv:1602.07527: L_dot = L phi(L^-1 sigma_dot L^-H)
    tmp = triangular_solve(L, sigma_dot, left_side=False, lower=True, transpose_a=True, conjugate_a=True)
    inner = triangular_solve(L, tmp, left_side=True, lower=True)
    phi = ew.div(tril(inner), ew.add(mv.full_like(inner, 1), eye_like(inner)))
    return [L], [matmul(L, phi)]


cholesky_p.impl = _cholesky_impl
cholesky_p.abstract_eval = _cholesky_abstract
cholesky_p.jvp = _cholesky_jvp
cholesky_p.batch = _batch_rule(cholesky_p)
cholesky_p.na("transpose", "cholesky is not linear")


def cholesky(x: Any) -> Any:
    """Lower Cholesky factor of Hermitian positive-definite ``x`` (reads the lower triangle)."""
    return cholesky_p.bind(x)


# ---------------------------------------------------------------------------------------------
# triangular_solve: op(a) x = b (left_side) or x op(a) = b; op = transpose/conjugate as flagged
# ---------------------------------------------------------------------------------------------

triangular_solve_p = Primitive("triangular_solve")


def _tsolve_one(a: np.ndarray, b: np.ndarray, left_side: bool, lower: bool, transpose_a: bool,
                conjugate_a: bool, unit_diagonal: bool) -> np.ndarray:
    """BLAS ``trsm``: no singularity check, so a zero on the diagonal gives inf/NaN as LAPACK (and
    XLA, and the native backend) do, on every backend and in eager mode."""
    dtype = np.result_type(a.dtype, b.dtype)
    if b.size == 0 or a.size == 0:
        return np.zeros(b.shape, dtype)
    if conjugate_a and not transpose_a:
        a, conjugate_a = np.conj(a), False
    trans = 0 if not transpose_a else (2 if conjugate_a else 1)
    a, b = np.asarray(a, dtype), np.asarray(b, dtype)
    trsm = sla.blas.get_blas_funcs("trsm", (a, b))
    with np.errstate(all="ignore"):
        return trsm(1.0, a, b, side=0 if left_side else 1, lower=int(lower), trans_a=trans,
                    diag=int(unit_diagonal))


def _tsolve_impl(a: np.ndarray, b: np.ndarray, **params: Any) -> np.ndarray:
    batch = a.shape[:-2]
    out = np.empty(b.shape, np.result_type(a.dtype, b.dtype))
    nb = int(np.prod(batch, dtype=np.int64))
    fa, fb, fo = (v.reshape(nb, *v.shape[len(batch):]) for v in (a, b, out))
    with np.errstate(all="ignore"):
        for i in range(fa.shape[0]):
            if fb[i].size:
                fo[i] = _tsolve_one(fa[i], fb[i], **params)
    return out


def _tsolve_abstract(a: ShapedArray, b: ShapedArray, *, left_side: bool, lower: bool, transpose_a: bool,
                     conjugate_a: bool, unit_diagonal: bool) -> ShapedArray:
    _check_matrix("triangular_solve", a, square=True)
    if b.ndim != a.ndim or b.shape[:-2] != a.shape[:-2]:
        raise ShapeError(f"triangular_solve: a {sh.shape_str(a.shape)} and b {sh.shape_str(b.shape)} must "
                         "have the same rank and batch dimensions")
    core.check_same_dtypes("triangular_solve", [a, b])
    k = b.shape[-2] if left_side else b.shape[-1]
    if k != a.shape[-1]:
        raise ShapeError(f"triangular_solve: a {sh.shape_str(a.shape)} does not match b "
                         f"{sh.shape_str(b.shape)} on the {'left' if left_side else 'right'} side")
    return b.strip_weak()


def _tsolve_jvp(primals: list, tangents: list, **params: Any) -> tuple[list, list]:
    (a, b), (ta, tb) = primals, tangents
    ans = triangular_solve_p.bind(a, b, **params)
    t = ad.Zero.from_value(ans)
    if not ad.is_zero(tb):
        t = triangular_solve_p.bind(a, tb, **params)
    if not ad.is_zero(ta):
        t = ad.add_tangents(t, _tsolve_jvp_a(ta, ans, a, **params))
    return [ans], [t]


def _tsolve_jvp_a(g_a: Any, ans: Any, a: Any, *, left_side: bool, lower: bool, transpose_a: bool,
                  conjugate_a: bool, unit_diagonal: bool) -> Any:
    k = 1 if unit_diagonal else 0
    g_a = tril(g_a, -k) if lower else triu(g_a, k)
    g_a = ew.neg(g_a)
    g_a = T(g_a) if transpose_a else g_a
    g_a = conj(g_a) if conjugate_a else g_a
    params = dict(left_side=left_side, lower=lower, transpose_a=transpose_a, conjugate_a=conjugate_a,
                  unit_diagonal=unit_diagonal)

    def a_inverse(rhs: Any) -> Any:
        return triangular_solve_p.bind(a, rhs, **params)

    m, n = _aval(ans).shape[-2:]
    if left_side:
        return a_inverse(matmul(g_a, ans)) if m > n else matmul(a_inverse(g_a), ans)
    return a_inverse(matmul(ans, g_a)) if m < n else matmul(ans, a_inverse(g_a))


def _tsolve_transpose(ct: Any, a: Any, b: Any, *, left_side: bool, lower: bool, transpose_a: bool,
                      conjugate_a: bool, unit_diagonal: bool) -> list:
    if isinstance(a, ad.UndefPrimal):
        raise TypeError("triangular_solve is not linear in its matrix operand")
    if ad.is_zero(ct):
        return [None, ad.Zero(b.aval)]
    return [None, triangular_solve_p.bind(a, ct, left_side=left_side, lower=lower,
                                          transpose_a=not transpose_a, conjugate_a=conjugate_a,
                                          unit_diagonal=unit_diagonal)]


triangular_solve_p.impl = _tsolve_impl
triangular_solve_p.abstract_eval = _tsolve_abstract
triangular_solve_p.jvp = _tsolve_jvp
triangular_solve_p.transpose = _tsolve_transpose
triangular_solve_p.batch = _batch_rule(triangular_solve_p)


def triangular_solve(a: Any, b: Any, *, left_side: bool = False, lower: bool = False,
                     transpose_a: bool = False, conjugate_a: bool = False,
                     unit_diagonal: bool = False) -> Any:
    """Solve ``op(a) @ x = b`` (``left_side``) or ``x @ op(a) = b`` for triangular ``a``.

    ``op`` transposes when ``transpose_a`` and conjugates when ``conjugate_a``; only the
    ``lower`` (or upper) triangle of ``a`` is read. Defaults match ``jax.lax.linalg``.
    """
    a, b = _same_dtype(a, b)
    return triangular_solve_p.bind(a, b, left_side=bool(left_side), lower=bool(lower),
                                   transpose_a=bool(transpose_a), conjugate_a=bool(conjugate_a),
                                   unit_diagonal=bool(unit_diagonal))


def _same_dtype(a: Any, b: Any) -> tuple[Any, Any]:
    da, db = _aval(a).dtype, _aval(b).dtype
    if da != db:
        d = dt.promote_types(da, db)
        a, b = ew.convert_element_type(a, d), ew.convert_element_type(b, d)
    return a, b


# ---------------------------------------------------------------------------------------------
# lu: PA = LU with partial pivoting; returns (lu, pivots, permutation)
# ---------------------------------------------------------------------------------------------

lu_p = Primitive("lu", multiple_results=True)


def _lu_one(a: np.ndarray) -> tuple:
    m, n = a.shape
    k = min(m, n)
    if a.size == 0:
        return a, np.zeros(k, np.int32), np.arange(m, dtype=np.int32)
    with np.errstate(all="ignore"):
        lu, piv = sla.lu_factor(a, check_finite=False) if np.isfinite(a).all() else \
            (np.full(a.shape, np.nan, a.dtype), np.arange(k))
    perm = np.arange(m)
    for i, p in enumerate(piv[:k]):
        perm[i], perm[p] = perm[p], perm[i]
    return lu, piv[:k].astype(np.int32), perm.astype(np.int32)


def _lu_impl(x: np.ndarray) -> list[np.ndarray]:
    m, n = x.shape[-2:]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # exactly singular matrices are fine: U has a zero pivot
        return _batched(_lu_one, x, [(m, n), (min(m, n),), (m,)], [x.dtype, np.int32, np.int32])


def _lu_abstract(x: ShapedArray) -> list[ShapedArray]:
    _check_matrix("lu", x)
    *b, m, n = x.shape
    return [x.strip_weak(), ShapedArray((*b, min(m, n)), dt.int32), ShapedArray((*b, m), dt.int32)]


def _lu_jvp(primals: list, tangents: list) -> tuple[list, list]:
    (a,), (a_dot,) = primals, tangents
    lu, pivots, perm = lu_p.bind(a)
    zeros = [ad.Zero.from_value(pivots), ad.Zero.from_value(perm)]
    if ad.is_zero(a_dot):
        return [lu, pivots, perm], [ad.Zero.from_value(lu), *zeros]
    aa = _aval(a)
    *batch, m, n = aa.shape
    k = min(m, n)
    nd = aa.ndim
    idx = mv.broadcast_in_dim(perm, aa.shape, tuple(range(nd - 1)))
    x = take_along_axis(a_dot, idx, nd - 2)  # rows permuted: P a_dot
    # De Hoog, Anderssen & Lukas: L' = L tril(L^-1 A' U^-1, -1), U' = triu(L^-1 A' U^-1) U
    zero = mv.full((), 0, aa.dtype)
    l_cfg = [(0, 0, 0)] * nd
    l_cfg[-1] = (0, m - k, 0)
    lk = mv.slice(lu, (0,) * nd, (*batch, m, k))
    ll = ew.add(mv.pad(tril(lk, -1), zero, l_cfg), eye_like(lu, m))
    u_cfg = [(0, 0, 0)] * nd
    u_cfg[-2] = (0, n - k, 0)
    uk = mv.slice(lu, (0,) * nd, (*batch, k, n))
    uu = mv.pad(triu(uk), zero, u_cfg)
    if n > k:  # wide matrices: complete U with an identity block so it is invertible
        u_eye = mv.pad(_eye(n - k, aa.dtype), zero, ((k, 0, 0), (k, 0, 0)))
        uu = ew.add(uu, mv.broadcast_to_rank_shape(u_eye, (*batch, n, n)))
    la = triangular_solve(ll, x, left_side=True, lower=True, unit_diagonal=True)
    lau = triangular_solve(uu, la, left_side=False, lower=False)
    l_dot = matmul(ll, tril(lau, -1))
    u_dot = matmul(triu(lau), uu)
    lu_dot = ew.add(_crop(l_dot, (m, n)), _crop(u_dot, (m, n)))
    return [lu, pivots, perm], [lu_dot, *zeros]


def _eye(n: int, dtype: Any) -> Any:
    i = mv.broadcasted_iota(dt.int32, (n, n), 0)
    j = mv.broadcasted_iota(dt.int32, (n, n), 1)
    return ew.convert_element_type(ew.eq(i, j), dtype)


def _crop(x: Any, mn: tuple) -> Any:
    a = _aval(x)
    if a.shape[-2:] == mn:
        return x
    return mv.slice(x, (0,) * a.ndim, (*a.shape[:-2], *mn))


lu_p.impl = _lu_impl
lu_p.abstract_eval = _lu_abstract
lu_p.jvp = _lu_jvp
lu_p.batch = _batch_rule(lu_p)
lu_p.na("transpose", "lu is not linear")


def lu(x: Any) -> tuple[Any, Any, Any]:
    """LU with partial pivoting: ``(lu, pivots, permutation)``; ``x[perm] = L @ U``."""
    return tuple(lu_p.bind(x))


# ---------------------------------------------------------------------------------------------
# qr
# ---------------------------------------------------------------------------------------------

qr_p = Primitive("qr", multiple_results=True)


def lu_solve(lu: Any, perm: Any, b: Any) -> Any:
    """Solve ``A x = b`` given ``A[perm] = L U`` (``b``: ``(..., n, k)`` with A's batch shape)."""
    ba = _aval(b)
    nd = ba.ndim
    idx = mv.broadcast_in_dim(perm, ba.shape, tuple(range(nd - 1)))
    pb = take_along_axis(b, idx, nd - 2)
    y = triangular_solve(lu, pb, left_side=True, lower=True, unit_diagonal=True)
    return triangular_solve(lu, y, left_side=True, lower=False)


def _qr_impl(x: np.ndarray, *, full_matrices: bool) -> list[np.ndarray]:
    if x.size == 0:
        *b, m, n = x.shape
        k = m if full_matrices else min(m, n)
        return [np.broadcast_to(np.eye(m, k, dtype=x.dtype), (*b, m, k)).copy(),
                np.zeros((*b, k, n), x.dtype)]
    q, r = np.linalg.qr(x, mode="complete" if full_matrices else "reduced")
    return [q, r]


def _qr_abstract(x: ShapedArray, *, full_matrices: bool) -> list[ShapedArray]:
    _check_matrix("qr", x)
    *b, m, n = x.shape
    k = m if full_matrices else min(m, n)
    return [ShapedArray((*b, m, k), x.dtype), ShapedArray((*b, k, n), x.dtype)]


def _qr_jvp(primals: list, tangents: list, *, full_matrices: bool) -> tuple[list, list]:
    (x,), (dx,) = primals, tangents
    outs = qr_p.bind(x, full_matrices=full_matrices)
    if ad.is_zero(dx):
        return list(outs), [ad.Zero.from_value(o) for o in outs]
    m, n = _aval(x).shape[-2:]
    if m < n or (full_matrices and m != n):
        raise NotImplementedError("qr JVP is implemented for m >= n with reduced matrices only")
    q, r = outs
    # Townsend, "Differentiating the QR decomposition"
    dx_rinv = triangular_solve(r, dx)
    qt_dx_rinv = matmul(H(q), dx_rinv)
    low = tril(qt_dx_rinv, -1)
    do = ew.sub(low, H(low))
    if dt.is_complex(_aval(x).dtype):
        im = ew.sub(qt_dx_rinv, ew.convert_element_type(ew.real(qt_dx_rinv), _aval(x).dtype))
        do = ew.add(do, ew.mul(eye_like(do), im))
    dq = ew.add(matmul(q, ew.sub(do, qt_dx_rinv)), dx_rinv)
    dr = matmul(ew.sub(qt_dx_rinv, do), r)
    return [q, r], [dq, dr]


qr_p.impl = _qr_impl
qr_p.abstract_eval = _qr_abstract
qr_p.jvp = _qr_jvp
qr_p.batch = _batch_rule(qr_p)
qr_p.na("transpose", "qr is not linear")


def qr(x: Any, full_matrices: bool = True) -> tuple[Any, Any]:
    """QR decomposition ``(q, r)`` (``jax.lax.linalg.qr`` defaults to full matrices)."""
    return tuple(qr_p.bind(x, full_matrices=bool(full_matrices)))


# ---------------------------------------------------------------------------------------------
# eigh: Hermitian eigendecomposition (v, w) with ascending real eigenvalues
# ---------------------------------------------------------------------------------------------

eigh_p = Primitive("eigh", multiple_results=True)


def _eigh_impl(x: np.ndarray, *, lower: bool) -> list[np.ndarray]:
    if x.size == 0:
        return [x.copy(), np.zeros(x.shape[:-1], dt.real_dtype(x.dtype))]
    if not np.isfinite(x).all():
        bad = ~np.isfinite(x).all(axis=(-2, -1))
        x = np.where(bad[..., None, None], 0, x)
        w, v = np.linalg.eigh(x, UPLO="L" if lower else "U")
        return [np.where(bad[..., None, None], np.nan, v), np.where(bad[..., None], np.nan, w)]
    w, v = np.linalg.eigh(x, UPLO="L" if lower else "U")
    return [v, w]


def _eigh_abstract(x: ShapedArray, *, lower: bool) -> list[ShapedArray]:
    _check_matrix("eigh", x, square=True)
    return [x.strip_weak(), ShapedArray(x.shape[:-1], dt.real_dtype(x.dtype))]


def _symmetrize(x: Any) -> Any:
    return ew.div(ew.add(x, H(x)), mv.full_like(x, 2))


def _eigh_jvp(primals: list, tangents: list, *, lower: bool) -> tuple[list, list]:
    (a,), (a_dot,) = primals, tangents
    v, w_real = eigh_p.bind(a, lower=lower)
    if ad.is_zero(a_dot):
        return [v, w_real], [ad.Zero.from_value(v), ad.Zero.from_value(w_real)]
    d = _aval(a).dtype
    w = ew.convert_element_type(w_real, d)
    shape = _aval(a).shape
    nd = len(shape)
    eye = eye_like(a)
    wi = mv.broadcast_in_dim(w, shape, (*range(nd - 2), nd - 1))  # w[..., None, :]
    wj = mv.broadcast_in_dim(w, shape, tuple(range(nd - 1)))  # w[..., :, None]
    fmat = ew.sub(ew.div(mv.full_like(eye, 1), ew.add(eye, ew.sub(wi, wj))), eye)
    vdag_adot_v = matmul(matmul(H(v), _symmetrize(a_dot)), v)
    dv = matmul(v, ew.mul(fmat, vdag_adot_v))
    dw = _real(diagonal(vdag_adot_v))
    return [v, w_real], [dv, dw]


eigh_p.impl = _eigh_impl
eigh_p.abstract_eval = _eigh_abstract
eigh_p.jvp = _eigh_jvp
eigh_p.batch = _batch_rule(eigh_p)
eigh_p.na("transpose", "eigh is not linear")


def eigh(x: Any, lower: bool = True, symmetrize_input: bool = True) -> tuple[Any, Any]:
    """Eigenvectors and ascending eigenvalues ``(v, w)`` of Hermitian ``x`` (as ``lax.linalg.eigh``)."""
    if symmetrize_input:
        x = _symmetrize(x)
    return tuple(eigh_p.bind(x, lower=bool(lower)))


# ---------------------------------------------------------------------------------------------
# svd: (s, u, vh) with descending singular values; (s,) when not compute_uv
# ---------------------------------------------------------------------------------------------

svd_p = Primitive("svd", multiple_results=True)


def _svd_impl(x: np.ndarray, *, full_matrices: bool, compute_uv: bool) -> list[np.ndarray]:
    *b, m, n = x.shape
    k = min(m, n)
    rd = dt.real_dtype(x.dtype)
    if x.size == 0:
        s = np.zeros((*b, k), rd)
        if not compute_uv:
            return [s]
        um, vn = (m, n) if full_matrices else (k, k)
        return [s, np.broadcast_to(np.eye(m, um, dtype=x.dtype), (*b, m, um)).copy(),
                np.broadcast_to(np.eye(vn, n, dtype=x.dtype), (*b, vn, n)).copy()]
    bad = ~np.isfinite(x).all(axis=(-2, -1))
    xs = np.where(bad[..., None, None], 0, x) if bad.any() else x
    if not compute_uv:
        s = np.linalg.svd(xs, compute_uv=False)
        return [np.where(bad[..., None], np.nan, s)]
    u, s, vh = np.linalg.svd(xs, full_matrices=full_matrices)
    if bad.any():
        u, s, vh = (np.where(bad[..., None, None], np.nan, u), np.where(bad[..., None], np.nan, s),
                    np.where(bad[..., None, None], np.nan, vh))
    return [s, u, vh]


def _svd_abstract(x: ShapedArray, *, full_matrices: bool, compute_uv: bool) -> list[ShapedArray]:
    _check_matrix("svd", x)
    *b, m, n = x.shape
    k = min(m, n)
    s = ShapedArray((*b, k), dt.real_dtype(x.dtype))
    if not compute_uv:
        return [s]
    um, vn = (m, n) if full_matrices else (k, k)
    return [s, ShapedArray((*b, m, um), x.dtype), ShapedArray((*b, vn, n), x.dtype)]


def _svd_jvp(primals: list, tangents: list, *, full_matrices: bool, compute_uv: bool) -> tuple[list, list]:
    (A,), (dA,) = primals, tangents
    outs = svd_p.bind(A, full_matrices=full_matrices, compute_uv=compute_uv)
    if ad.is_zero(dA):
        return list(outs), [ad.Zero.from_value(o) for o in outs]
    if compute_uv and full_matrices:
        raise NotImplementedError("svd JVP is not implemented for full_matrices=True")
    s, U, Vt = svd_p.bind(A, full_matrices=False, compute_uv=True)
    d = _aval(A).dtype
    Ut, V = H(U), H(Vt)
    dS = matmul(matmul(Ut, dA), V)
    ds = _real(diagonal(dS))
    if not compute_uv:
        return [s], [ds]
    *b, k = _aval(s).shape
    nd = len(b) + 2
    sq = (*b, k, k)
    s_row = mv.broadcast_in_dim(s, sq, (*range(nd - 2), nd - 1))  # s[..., None, :]
    s_col = mv.broadcast_in_dim(s, sq, tuple(range(nd - 1)))  # s[..., :, None]
    s_diffs = ew.mul(ew.add(s_row, s_col), ew.sub(s_row, s_col))
    eye_r = eye_like(s_diffs)
    F = ew.sub(ew.div(mv.full_like(eye_r, 1), ew.add(s_diffs, eye_r)), eye_r)
    s_row_c, s_col_c = ew.convert_element_type(s_row, d), ew.convert_element_type(s_col, d)
    dSS = ew.mul(s_row_c, dS)
    SdS = ew.mul(s_col_c, dS)
    s_zero = ew.convert_element_type(ew.eq(s, mv.full_like(s, 0)), _aval(s).dtype)
    s_inv = ew.sub(ew.div(mv.full_like(s, 1), ew.add(s, s_zero)), s_zero)
    s_inv_mat = ew.mul(eye_r, mv.broadcast_in_dim(s_inv, sq, tuple(range(nd - 1))))
    dUdV_diag = ew.mul(ew.mul(mv.full_like(dS, 0.5), ew.sub(dS, H(dS))),
                       ew.convert_element_type(s_inv_mat, d))
    Fc = ew.convert_element_type(F, d)
    dU = matmul(U, ew.add(ew.mul(Fc, ew.add(dSS, H(dSS))), dUdV_diag))
    dV = matmul(V, ew.mul(Fc, ew.add(SdS, H(SdS))))
    m, n = _aval(A).shape[-2:]
    if m > n:
        dAV = matmul(dA, V)
        corr = ew.sub(dAV, matmul(U, matmul(Ut, dAV)))
        dU = ew.add(dU, ew.div(corr, mv.broadcast_in_dim(ew.convert_element_type(s, d), (*b, m, k),
                                                         (*range(nd - 2), nd - 1))))
    if n > m:
        dAHU = matmul(H(dA), U)
        corr = ew.sub(dAHU, matmul(V, matmul(Vt, dAHU)))
        dV = ew.add(dV, ew.div(corr, mv.broadcast_in_dim(ew.convert_element_type(s, d), (*b, n, k),
                                                         (*range(nd - 2), nd - 1))))
    return [s, U, Vt], [ds, dU, H(dV)]


svd_p.impl = _svd_impl
svd_p.abstract_eval = _svd_abstract
svd_p.jvp = _svd_jvp
svd_p.batch = _batch_rule(svd_p)
svd_p.na("transpose", "svd is not linear")


def svd(x: Any, full_matrices: bool = True, compute_uv: bool = True) -> Any:
    """Singular value decomposition: ``(s, u, vh)``, or ``s`` alone when not ``compute_uv``."""
    outs = svd_p.bind(x, full_matrices=bool(full_matrices), compute_uv=bool(compute_uv))
    return tuple(outs) if compute_uv else outs[0]


# ---------------------------------------------------------------------------------------------
# eig: general (non-symmetric) eigendecomposition, complex results
# ---------------------------------------------------------------------------------------------

eig_p = Primitive("eig", multiple_results=True)


def _eig_impl(x: np.ndarray, *, compute_eigenvectors: bool) -> list[np.ndarray]:
    cd = dt.complex_dtype(x.dtype)
    if x.size == 0:
        w = np.zeros(x.shape[:-1], cd)
        return [w, np.zeros(x.shape, cd)] if compute_eigenvectors else [w]
    bad = ~np.isfinite(x).all(axis=(-2, -1))
    xs = np.where(bad[..., None, None], 0, x) if bad.any() else x
    w, v = np.linalg.eig(xs)
    w = np.where(bad[..., None], np.nan, w).astype(cd)
    v = np.where(bad[..., None, None], np.nan, v).astype(cd)
    return [w, v] if compute_eigenvectors else [w]


def _eig_abstract(x: ShapedArray, *, compute_eigenvectors: bool) -> list[ShapedArray]:
    _check_matrix("eig", x, square=True)
    cd = dt.complex_dtype(x.dtype)
    w = ShapedArray(x.shape[:-1], cd)
    return [w, ShapedArray(x.shape, cd)] if compute_eigenvectors else [w]


def _eig_jvp(primals: list, tangents: list, *, compute_eigenvectors: bool) -> tuple[list, list]:
    (a,), (da,) = primals, tangents
    outs = eig_p.bind(a, compute_eigenvectors=compute_eigenvectors)
    if ad.is_zero(da):
        return list(outs), [ad.Zero.from_value(o) for o in outs]
    w, v = eig_p.bind(a, compute_eigenvectors=True)
    # dw = diag(V^-1 dA V)
    cd = _aval(v).dtype
    lu_, _, perm = lu(v)
    vinv_da_v = matmul(lu_solve(lu_, perm, ew.convert_element_type(da, cd)), v)
    dw = diagonal(vinv_da_v)
    if not compute_eigenvectors:
        return [w], [dw]
    return [w, v], [dw, _eig_vectors_tangent(w, v, vinv_da_v)]


def _eig_vectors_tangent(w: Any, v: Any, vinv_da_v: Any) -> Any:
    """Tangent of LAPACK's eigenvectors (distinct eigenvalues): ``V (F * V^-1 dA V)`` with
    ``F_ij = 1 / (w_j - w_i)`` off the diagonal, plus the multiple of each column that keeps LAPACK's
    normalization: unit 2-norm (``Re(v^H dv) = 0``) and a real largest-modulus component."""
    shape = _aval(v).shape
    nd = len(shape)
    eye = eye_like(v)
    wi = mv.broadcast_in_dim(w, shape, (*range(nd - 2), nd - 1))  # w[..., None, :]
    wj = mv.broadcast_in_dim(w, shape, tuple(range(nd - 1)))  # w[..., :, None]
    fmat = ew.sub(ew.div(mv.full_like(eye, 1), ew.add(eye, ew.sub(wi, wj))), eye)
    dv = matmul(v, ew.mul(fmat, vinv_da_v))
    # norm: subtract Re(v^H dv) * v per column
    re_inner = reduce_sum(ew.real(ew.mul(ew.conj(v), dv)), (nd - 2,))  # (..., n)
    # phase: the largest-modulus entry k of each column stays real: subtract i Im(dv_k) / v_k * v
    mod = ew.real(ew.mul(ew.conj(v), v))
    k = argmax(mod, nd - 2)  # (..., n)
    kk = mv.broadcast_in_dim(k, (*shape[:-2], 1, shape[-1]), (*range(nd - 2), nd - 1))
    vk = mv.reshape(take_along_axis(v, kk, nd - 2), shape[:-2] + shape[-1:])
    dvk = mv.reshape(take_along_axis(dv, kk, nd - 2), shape[:-2] + shape[-1:])
    im_fix = ew.div(ew.imag(dvk), ew.real(vk))
    coef_b = mv.broadcast_in_dim(ew.complex(re_inner, im_fix), shape, (*range(nd - 2), nd - 1))
    return ew.sub(dv, ew.mul(v, coef_b))


eig_p.impl = _eig_impl
eig_p.abstract_eval = _eig_abstract
eig_p.jvp = _eig_jvp
eig_p.batch = _batch_rule(eig_p)
eig_p.na("transpose", "eig is not linear")


def eig(x: Any, compute_eigenvectors: bool = True) -> Any:
    """Eigenvalues ``w`` and right eigenvectors ``v`` (complex) of a general square matrix."""
    outs = eig_p.bind(x, compute_eigenvectors=bool(compute_eigenvectors))
    return tuple(outs) if compute_eigenvectors else outs[0]


def lu_pivots_to_permutation(pivots: Any, permutation_size: int) -> Any:
    """The row permutation ``perm`` (``a[perm] = L @ U``) from 0-based LAPACK ``pivots (..., k)``."""
    pa = _aval(pivots)
    *batch, k = pa.shape
    shape = (*batch, permutation_size)
    nd = len(shape)
    idx = mv.broadcasted_iota(dt.int32, shape, nd - 1)
    perm = idx
    pivots = ew.convert_element_type(pivots, dt.int32)
    for i in range(k):
        p = mv.slice_in_dim(pivots, i, i + 1, 1, nd - 1)  # (..., 1)
        at_i = mv.broadcast_in_dim(mv.reshape(mv.slice_in_dim(perm, i, i + 1, 1, nd - 1), tuple(batch)),
                                   shape, tuple(range(nd - 1)))
        at_p = mv.broadcast_in_dim(mv.reshape(take_along_axis(perm, p, nd - 1), tuple(batch)), shape,
                                   tuple(range(nd - 1)))
        pb = mv.broadcast_in_dim(mv.reshape(p, tuple(batch)), shape, tuple(range(nd - 1)))
        perm = ew.select(ew.eq(idx, mv.full(shape, i, dt.int32)), at_p, ew.select(ew.eq(idx, pb), at_i, perm))
    return perm

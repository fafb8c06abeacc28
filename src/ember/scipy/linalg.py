"""``ember.scipy.linalg``: SciPy's LU/Cholesky/triangular routines and decompositions."""

from __future__ import annotations

from typing import Any

from ember._src import core
from ember._src import dtypes as dt
from ember._src.numpy import linalg_functions as la
from ember._src.prims import elementwise as ew
from ember._src.prims import linalg as pl
from ember._src.prims import movement as mv

ArrayLike = Any


def _perm_matrix(perm: Any, dtype: Any) -> Any:
    """``P`` with ``P[perm[j], j] = 1``, so that ``a = P @ L @ U`` when ``a[perm] = L @ U``."""
    pa = core.get_aval(perm)
    *batch, m = pa.shape
    shape = (*batch, m, m)
    rows = mv.broadcasted_iota(dt.int32, shape, len(shape) - 2)
    pb = mv.broadcast_in_dim(perm, shape, (*range(len(batch)), len(shape) - 1))
    return ew.convert_element_type(ew.eq(rows, pb), dtype)


def lu(a: ArrayLike, permute_l: bool = False) -> Any:
    """``(p, l, u)`` with ``a = p @ l @ u`` (or ``(p @ l, u)`` when ``permute_l``)."""
    (a,) = la._inexact(a)
    la._matrix("lu", a)
    lu_, _, perm = pl.lu(a)
    *batch, m, n = core.get_aval(a).shape
    k = min(m, n)
    nd = len(batch) + 2
    l_ = ew.add(pl.tril(mv.slice(lu_, (0,) * nd, (*batch, m, k)), -1),
                _rect_eye((*batch, m, k), core.get_aval(a).dtype))
    u_ = pl.triu(mv.slice(lu_, (0,) * nd, (*batch, k, n)))
    p = _perm_matrix(perm, core.get_aval(a).dtype)
    if permute_l:
        return pl.matmul(p, l_), u_
    return p, l_, u_


def _rect_eye(shape: tuple, dtype: Any) -> Any:
    i = mv.broadcasted_iota(dt.int32, shape, len(shape) - 2)
    j = mv.broadcasted_iota(dt.int32, shape, len(shape) - 1)
    return ew.convert_element_type(ew.eq(i, j), dtype)


def lu_factor(a: ArrayLike) -> tuple[Any, Any]:
    """``(lu, piv)``: the packed LU factors and 0-based LAPACK pivot indices."""
    (a,) = la._inexact(a)
    la._matrix("lu_factor", a, square=True)
    lu_, piv, _ = pl.lu(a)
    return lu_, piv


def lu_solve(lu_and_piv: tuple[Any, Any], b: ArrayLike, trans: int = 0) -> Any:
    """Solve ``a x = b`` (``trans=1``: ``a^T x = b``; ``2``: ``a^H x = b``) from ``lu_factor``."""
    lu_, piv = lu_and_piv
    lu_, b = la._inexact(lu_, b)
    n = core.get_aval(lu_).shape[-1]
    vec = core.get_aval(b).ndim == core.get_aval(lu_).ndim - 1
    if vec:
        b = mv.reshape(b, (*core.get_aval(b).shape, 1))
    perm = pl.lu_pivots_to_permutation(piv, n)
    if trans == 0:
        x = pl.lu_solve(lu_, perm, b)
    elif trans in (1, 2):
        conj = trans == 2
        y = pl.triangular_solve(lu_, b, left_side=True, lower=False, transpose_a=True, conjugate_a=conj)
        z = pl.triangular_solve(lu_, y, left_side=True, lower=True, transpose_a=True, conjugate_a=conj,
                                unit_diagonal=True)
        inv_perm = pl.lu_pivots_to_permutation(piv, n)  # x[perm] = z  =>  x = P z
        p = _perm_matrix(inv_perm, core.get_aval(z).dtype)
        x = pl.matmul(p, z)
    else:
        raise ValueError(f"lu_solve: trans must be 0, 1 or 2, got {trans!r}")
    if vec:
        x = mv.reshape(x, core.get_aval(x).shape[:-1])
    return x


def solve_triangular(a: ArrayLike, b: ArrayLike, trans: int | str = 0, lower: bool = False,
                     unit_diagonal: bool = False) -> Any:
    """Solve ``op(a) x = b`` for triangular ``a`` (``trans``: 0/'N', 1/'T', 2/'C')."""
    a, b = la._inexact(a, b)
    t = {"N": 0, "T": 1, "C": 2}.get(trans, trans) if isinstance(trans, str) else trans
    if t not in (0, 1, 2):
        raise ValueError(f"solve_triangular: invalid trans {trans!r}")
    vec = core.get_aval(b).ndim == core.get_aval(a).ndim - 1
    if vec:
        b = mv.reshape(b, (*core.get_aval(b).shape, 1))
    a, b = la._broadcast_batch(a, b, 2, 2)
    x = pl.triangular_solve(a, b, left_side=True, lower=lower, transpose_a=t != 0, conjugate_a=t == 2,
                            unit_diagonal=unit_diagonal)
    if vec:
        x = mv.reshape(x, core.get_aval(x).shape[:-1])
    return x


def cholesky(a: ArrayLike, lower: bool = False) -> Any:
    """Cholesky factor (upper by default, as SciPy)."""
    return la.cholesky(a, upper=not lower)


def cho_factor(a: ArrayLike, lower: bool = False) -> tuple[Any, bool]:
    """``(c, lower)`` for ``cho_solve`` (the other triangle of ``c`` is zero)."""
    return cholesky(a, lower=lower), lower


def cho_solve(c_and_lower: tuple[Any, bool], b: ArrayLike) -> Any:
    """Solve ``a x = b`` given ``cho_factor(a)``."""
    c, lower = c_and_lower
    c, b = la._inexact(c, b)
    vec = core.get_aval(b).ndim == core.get_aval(c).ndim - 1
    if vec:
        b = mv.reshape(b, (*core.get_aval(b).shape, 1))
    L = c if lower else pl.H(c)
    y = pl.triangular_solve(L, b, left_side=True, lower=True)
    x = pl.triangular_solve(L, y, left_side=True, lower=True, transpose_a=True, conjugate_a=True)
    if vec:
        x = mv.reshape(x, core.get_aval(x).shape[:-1])
    return x


def solve(a: ArrayLike, b: ArrayLike, lower: bool = False, assume_a: str = "gen") -> Any:
    """Solve ``a x = b``; ``assume_a='pos'`` uses a Cholesky factorization."""
    if assume_a in ("pos", "positive definite"):
        return cho_solve(cho_factor(a, lower=lower), b)
    return la.solve(a, b)


def qr(a: ArrayLike, mode: str = "full") -> Any:
    """QR decomposition (``mode``: 'full', 'economic' or 'r')."""
    if mode == "full":
        return tuple(la.qr(a, mode="complete"))
    if mode == "economic":
        return tuple(la.qr(a, mode="reduced"))
    if mode == "r":
        return (la.qr(a, mode="complete").R,)
    raise ValueError(f"qr: unsupported mode {mode!r}")


def svd(a: ArrayLike, full_matrices: bool = True, compute_uv: bool = True) -> Any:
    """Singular value decomposition ``(u, s, vh)`` (``s`` alone when not ``compute_uv``)."""
    r = la.svd(a, full_matrices=full_matrices, compute_uv=compute_uv)
    return tuple(r) if compute_uv else r


def eigh(a: ArrayLike, lower: bool = True, eigvals_only: bool = False) -> Any:
    """Eigenvalues ``w`` (and eigenvectors ``v``) of Hermitian ``a``: ``(w, v)`` as SciPy."""
    w, v = la.eigh(a, UPLO="L" if lower else "U")
    return w if eigvals_only else (w, v)


det, inv, pinv = la.det, la.inv, la.pinv

__all__ = ["cho_factor", "cho_solve", "cholesky", "det", "eigh", "inv", "lu", "lu_factor", "lu_solve", "pinv",
           "qr", "solve", "solve_triangular", "svd"]

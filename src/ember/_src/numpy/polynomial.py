"""NumPy-level polynomial helpers (``numpy.polyval`` & co.): coefficients are 1-D arrays, highest
power first.

Everything is written over lax-level primitives; loops run over the (static) number of
coefficients. ``polyfit`` solves the column-scaled Vandermonde least-squares problem with a
Householder QR written in ember ops, so it traces and differentiates; ``full=True`` (which needs the
singular values) and ``roots`` use ``ember.numpy.linalg`` when it is available.
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.core import get_aval as _aval
from ember._src.numpy import linalg_functions as la
from ember._src.numpy.operands import _arr, _bcast, _convert, _full, _promote, _slice1, _static_int
from ember._src.numpy.statistics import _matmul, convolve
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember._src.prims import reductions as red
from ember.errors import ShapeError

ArrayLike = Any


def _c(x: Any, v: Any) -> Any:
    return mv.full_like(x, v)


def _vec(name: str, p: Any) -> Any:
    """``p`` as a 1-D array (0-d becomes length 1)."""
    p = _arr(p)
    nd = _aval(p).ndim
    if nd == 0:
        return mv.reshape(p, (1,))
    if nd != 1:
        raise ShapeError(f"{name}: expected a 1-D array of coefficients, got shape "
                         f"{sh.shape_str(_aval(p).shape)}")
    return p


def _trim_leading_zeros(name: str, p: Any) -> Any:
    v = core.concrete_or_error(p, f"{name} with trim_leading_zeros=True: the coefficients")
    nz = np.flatnonzero(v)
    start = int(nz[0]) if nz.size else builtins.max(v.shape[0] - 1, 0)
    return _slice1(p, start, v.shape[0])


def _pad_front(p: Any, n: int) -> Any:
    k = _aval(p).shape[0]
    if k == n:
        return p
    return mv.pad(p, _full((), 0, _aval(p).dtype), [(n - k, 0, 0)])


# ---------------------------------------------------------------------------------------------
# Evaluation and arithmetic
# ---------------------------------------------------------------------------------------------


def polyval(p: ArrayLike, x: ArrayLike, *, unroll: int = 16) -> Any:
    """Evaluate the polynomial with coefficients ``p`` (highest power first) at ``x`` (Horner)."""
    p, x = _promote("polyval", p, x)
    p = _vec("polyval", p)
    xs = _aval(x).shape
    y = _full(xs, 0, _aval(x).dtype)
    for i in range(_aval(p).shape[0]):
        c = mv.broadcast_in_dim(mv.reshape(_slice1(p, i, i + 1), ()), xs, ())
        y = ew.add(ew.mul(y, x), c)
    return y


def polyadd(a1: ArrayLike, a2: ArrayLike) -> Any:
    """Sum of two polynomials, as ``numpy.polyadd``."""
    a, b = _promote("polyadd", a1, a2)
    a, b = _vec("polyadd", a), _vec("polyadd", b)
    n = builtins.max(_aval(a).shape[0], _aval(b).shape[0])
    return ew.add(_pad_front(a, n), _pad_front(b, n))


def polysub(a1: ArrayLike, a2: ArrayLike) -> Any:
    """Difference of two polynomials, as ``numpy.polysub``."""
    a, b = _promote("polysub", a1, a2)
    a, b = _vec("polysub", a), _vec("polysub", b)
    if _aval(a).dtype == dt.bool_:
        a, b = _convert(a, dt.int32), _convert(b, dt.int32)
    n = builtins.max(_aval(a).shape[0], _aval(b).shape[0])
    return ew.sub(_pad_front(a, n), _pad_front(b, n))


def polymul(a1: ArrayLike, a2: ArrayLike, *, trim_leading_zeros: bool = False) -> Any:
    """Product of two polynomials (the convolution of their coefficients), as ``numpy.polymul``.

    As in JAX, leading zero coefficients are kept unless ``trim_leading_zeros=True`` (concrete
    inputs only); NumPy always strips them.
    """
    a, b = _promote("polymul", a1, a2)
    a, b = _vec("polymul", a), _vec("polymul", b)
    if trim_leading_zeros:
        a, b = _trim_leading_zeros("polymul", a), _trim_leading_zeros("polymul", b)
    return convolve(a, b)


def polydiv(u: ArrayLike, v: ArrayLike, *, trim_leading_zeros: bool = False) -> tuple[Any, Any]:
    """Quotient and remainder of polynomial division, as ``numpy.polydiv``.

    The remainder has ``len(v) - 1`` coefficients (NumPy further strips its leading zeros; pass
    ``trim_leading_zeros=True`` with concrete inputs for that).
    """
    u, v = _promote("polydiv", u, v, to="inexact")
    u, v = _vec("polydiv", u), _vec("polydiv", v)
    m, n = _aval(u).shape[0] - 1, _aval(v).shape[0] - 1
    d = _aval(u).dtype
    lead = mv.reshape(_slice1(v, 0, 1), ())
    scale = ew.div(_full((), 1, d), lead)
    r = u
    qs = []
    for k in range(builtins.max(m - n + 1, 0)):
        coef = ew.mul(scale, mv.reshape(_slice1(r, k, k + 1), ()))
        qs.append(mv.reshape(coef, (1,)))
        shifted = mv.pad(v, _full((), 0, d), [(k, m - n - k, 0)])
        r = ew.sub(r, ew.mul(mv.broadcast_in_dim(coef, (m + 1,), ()), shifted))
    q = mv.concatenate(qs, 0) if qs else _full((1,), 0, d)
    if m >= n:
        r = _slice1(r, m - n + 1, m + 1) if n > 0 else _full((1,), 0, d)
    if trim_leading_zeros:
        rv = core.concrete_or_error(r, "polydiv with trim_leading_zeros=True: the remainder")
        start = 0
        while start < rv.shape[0] - 1 and np.allclose(rv[start], 0, rtol=1e-14):
            start += 1
        r = _slice1(r, start, rv.shape[0])
    return q, r


def polyder(p: ArrayLike, m: int = 1) -> Any:
    """The ``m``-th derivative of a polynomial, as ``numpy.polyder``."""
    m = _static_int(m, "polyder: m")
    if m < 0:
        raise ValueError("polyder: order of derivative must be positive (see polyint)")
    (p,) = _promote("polyder", p)
    p = _vec("polyder", p)
    for _ in range(m):
        n = builtins.max(_aval(p).shape[0] - 1, 0)
        powers = _convert(ew.sub(_full((n,), n, dt.int32), mv.iota(dt.int32, n)), _aval(p).dtype)
        p = ew.mul(_slice1(p, 0, n), powers)
    return p


def polyint(p: ArrayLike, m: int = 1, k: ArrayLike = None) -> Any:
    """The ``m``-th antiderivative of a polynomial with integration constants ``k``, as
    ``numpy.polyint`` (``k`` is a scalar or ``m`` values, the first used first)."""
    m = _static_int(m, "polyint: m")
    if m < 0:
        raise ValueError("polyint: order of integral must be positive (see polyder)")
    (p,) = _promote("polyint", p, to="inexact")
    p = _vec("polyint", p)
    d = _aval(p).dtype
    if k is None:
        ks = [0.0] * m
    elif isinstance(k, (bool, int, float, complex)) or _aval(_arr(k)).ndim == 0:
        ks = [k] * m
    else:
        karr = _convert(_arr(k), d)
        if _aval(karr).shape[0] != m:
            raise ValueError(f"polyint: k must be a scalar or a sequence of {m} constants")
        ks = [mv.reshape(_slice1(karr, i, i + 1), ()) for i in range(m)]
    for i in range(m):
        n = _aval(p).shape[0]
        div = _convert(ew.sub(_full((n,), n, dt.int32), mv.iota(dt.int32, n)), d)
        kc = ks[i]
        kv = _full((1,), kc, d) if isinstance(kc, (bool, int, float, complex)) else \
            mv.reshape(_convert(kc, d), (1,))
        p = mv.concatenate([ew.div(p, div), kv], 0)
    return p


def vander(x: ArrayLike, N: int | None = None, increasing: bool = False) -> Any:  # noqa: N803
    """The Vandermonde matrix of the 1-D ``x`` (columns are powers, decreasing by default)."""
    x = _arr(x)
    if _aval(x).ndim != 1:
        raise ShapeError(f"vander: x must be a one-dimensional array, got shape "
                         f"{sh.shape_str(_aval(x).shape)}")
    if _aval(x).dtype == dt.bool_:
        x = _convert(x, dt.int32)
    n = _aval(x).shape[0]
    N = n if N is None else _static_int(N, "vander: N")  # noqa: N806
    if N < 0:
        raise ValueError("vander: N must be non-negative")
    d = _aval(x).dtype
    if N == 0:
        return _full((n, 0), 0, d)
    cols = [_full((n, 1), 1, d)]
    if N > 1:
        rep = mv.broadcast_in_dim(x, (n, N - 1), (0,))
        cols.append(red.cumprod(rep, 1))
    v = mv.concatenate(cols, 1)
    return v if increasing else mv.rev(v, (1,))


# ---------------------------------------------------------------------------------------------
# Fitting
# ---------------------------------------------------------------------------------------------


def _householder_lstsq(a: Any, b: Any) -> tuple[Any, Any, Any]:
    """Least squares ``min ||a c - b||`` for ``a`` (m, n), m >= n, ``b`` (m, k), by Householder QR.

    Returns ``(c, residual sums of squares (k,), R)``.
    """
    m, n = _aval(a).shape
    k = _aval(b).shape[1]
    d = _aval(a).dtype
    rows = mv.iota(dt.int32, m)
    r, qb = a, b
    for j in range(n):
        col = mv.reshape(_slice1(r, j, j + 1, 1), (m,))
        below = ew.ge(rows, _full((m,), j, dt.int32))
        xv = ew.select(below, col, _full((m,), 0, d))
        norm = ew.sqrt(red.reduce_sum(ew.mul(xv, xv)))
        x0 = mv.reshape(_slice1(col, j, j + 1), ())
        sgn = ew.select(ew.lt(x0, _c(x0, 0)), _c(x0, -1), _c(x0, 1))
        alpha = ew.neg(ew.mul(sgn, norm))
        ej = ew.eq(rows, _full((m,), j, dt.int32))
        v = ew.sub(xv, ew.select(ej, mv.broadcast_in_dim(alpha, (m,), ()), _full((m,), 0, d)))
        vv = red.reduce_sum(ew.mul(v, v))
        safe = ew.select(ew.gt(vv, _c(vv, 0)), vv, _c(vv, 1))
        tau = ew.div(_c(vv, 2), safe)
        tau = ew.select(ew.gt(vv, _c(vv, 0)), tau, _c(vv, 0))
        vrow = mv.reshape(v, (1, m))
        vcol = mv.reshape(v, (m, 1))
        for name in ("r", "qb"):
            mat = r if name == "r" else qb
            cols = n if name == "r" else k
            proj = _matmul(vrow, mat)  # (1, cols)
            upd = ew.mul(_matmul(vcol, proj), mv.broadcast_in_dim(tau, (m, cols), ()))
            if name == "r":
                r = ew.sub(r, upd)
            else:
                qb = ew.sub(qb, upd)
    # back substitution on the top n x n block
    c = _back_substitute(r, _slice1(qb, 0, n)) if n else _full((0, k), 0, d)
    tail = _slice1(qb, n, m)
    resid = red.reduce_sum(ew.mul(tail, tail), (0,))
    return c, resid, _slice1(r, 0, n)


def _back_substitute(r: Any, b: Any) -> Any:
    """``X`` with ``R @ X = B`` for an upper-triangular (n, n) ``r`` and (n, k) ``b``, row by row
    from the last (n >= 1)."""
    n, k = _aval(b).shape
    rows: list[Any] = [None] * n
    for i in reversed(range(n)):
        acc = mv.reshape(_slice1(b, i, i + 1), (k,))
        r_row = _slice1(r, i, i + 1)
        for j in range(i + 1, n):
            rij = mv.reshape(_slice1(r_row, j, j + 1, 1), ())
            acc = ew.sub(acc, ew.mul(mv.broadcast_in_dim(rij, (k,), ()), rows[j]))
        rii = mv.reshape(_slice1(r_row, i, i + 1, 1), ())
        rows[i] = ew.div(acc, mv.broadcast_in_dim(rii, (k,), ()))
    return mv.concatenate([mv.reshape(v, (1, k)) for v in rows], 0)


def _upper_inverse(r: Any) -> Any:
    """Inverse of an upper-triangular (n, n) matrix by back substitution on the identity."""
    n = _aval(r).shape[0]
    d = _aval(r).dtype
    eye = ew.convert_element_type(ew.eq(mv.broadcasted_iota(dt.int32, (n, n), 0),
                                        mv.broadcasted_iota(dt.int32, (n, n), 1)), d)
    return _back_substitute(r, eye)


def polyfit(x: ArrayLike, y: ArrayLike, deg: int, rcond: float | None = None, full: bool = False,
            w: ArrayLike = None, cov: bool | str = False) -> Any:
    """Least-squares polynomial fit of degree ``deg`` (highest power first), as ``numpy.polyfit``.

    ``y`` may be 2-D (one fit per column). ``cov=True`` also returns the covariance of the
    coefficients (``"unscaled"``: without the residual scaling). ``full=True`` returns
    ``(coef, residuals, rank, singular_values, rcond)`` and needs ``ember.numpy.linalg.lstsq``.
    """
    deg = _static_int(deg, "polyfit: deg")
    order = deg + 1
    if deg < 0:
        raise ValueError("polyfit: expected deg >= 0")
    xa, ya = _promote("polyfit", x, y, to="inexact")
    if _aval(xa).ndim != 1:
        raise TypeError("polyfit: expected 1-D vector for x")
    if _aval(xa).shape[0] == 0:
        raise TypeError("polyfit: expected non-empty vector for x")
    if _aval(ya).ndim not in (1, 2):
        raise TypeError("polyfit: expected 1-D or 2-D array for y")
    npts = _aval(xa).shape[0]
    if _aval(ya).shape[0] != npts:
        raise TypeError("polyfit: expected x and y to have the same length")
    d = _aval(xa).dtype
    if rcond is None:
        rcond = npts * float(np.finfo(d).eps)
    lhs = vander(xa, order)
    rhs = ya if _aval(ya).ndim == 2 else mv.reshape(ya, (npts, 1))
    k = _aval(rhs).shape[1]
    if w is not None:
        (wa,) = _promote("polyfit", w)
        wa = _convert(wa, d)
        if _aval(wa).ndim != 1:
            raise TypeError("polyfit: expected a 1-D array for weights")
        if _aval(wa).shape[0] != npts:
            raise TypeError("polyfit: expected w and y to have the same length")
        lhs = ew.mul(lhs, mv.broadcast_in_dim(wa, (npts, order), (0,)))
        rhs = ew.mul(rhs, mv.broadcast_in_dim(wa, (npts, k), (0,)))
    scale = ew.sqrt(red.reduce_sum(ew.mul(lhs, lhs), (0,)))
    scale = ew.select(ew.eq(scale, _c(scale, 0)), _c(scale, 1), scale)
    lhs = ew.div(lhs, mv.broadcast_in_dim(scale, (npts, order), (1,)))
    if full:
        c, resids, rank, s = la.lstsq(lhs, rhs, rcond=rcond)
        c = ew.div(c, mv.broadcast_in_dim(scale, (order, k), (0,)))
        if _aval(ya).ndim == 1:
            c = mv.reshape(c, (order,))
        return c, resids, rank, s, rcond
    if npts < order:
        raise ValueError(f"polyfit: deg={deg} needs at least {order} points for ember's QR solver, "
                         f"got {npts}")
    c, resids, r = _householder_lstsq(lhs, rhs)
    c = ew.div(c, mv.broadcast_in_dim(scale, (order, k), (0,)))
    if not cov:
        return mv.reshape(c, (order,)) if _aval(ya).ndim == 1 else c
    rinv = _upper_inverse(r)
    vbase = _matmul(rinv, mv.transpose(rinv, (1, 0)))  # inv(R^T R)
    outer = ew.mul(mv.broadcast_in_dim(scale, (order, order), (0,)),
                   mv.broadcast_in_dim(scale, (order, order), (1,)))
    vbase = ew.div(vbase, outer)
    if cov == "unscaled":
        fac = _full((k if _aval(ya).ndim == 1 else 1,), 1, d)  # NumPy: shape (order, order, 1) for 2-D y
    else:
        if npts <= order:
            raise ValueError("polyfit: the number of data points must exceed order to scale the "
                             "covariance matrix")
        fac = ew.div(resids, _full((k,), npts - order, d))
    if _aval(ya).ndim == 1:
        return mv.reshape(c, (order,)), ew.mul(vbase, _bcast(mv.reshape(fac, ()), (order, order)))
    kf = _aval(fac).shape[0]
    return c, ew.mul(mv.broadcast_in_dim(vbase, (order, order, kf), (0, 1)),
                     mv.broadcast_in_dim(fac, (order, order, kf), (2,)))


# ---------------------------------------------------------------------------------------------
# Roots
# ---------------------------------------------------------------------------------------------


def poly(seq_of_zeros: ArrayLike) -> Any:
    """Coefficients of the monic polynomial with the given roots, as ``numpy.poly`` (1-D input;
    a square matrix uses its eigenvalues and needs ``ember.numpy.linalg.eigvals``)."""
    z = _arr(seq_of_zeros)
    nd = _aval(z).ndim
    if nd == 2 and _aval(z).shape[0] == _aval(z).shape[1] and _aval(z).shape[0] != 0:
        z = la.eigvals(z)
    elif nd == 0:
        z = mv.reshape(z, (1,))
    elif nd != 1:
        raise ValueError("poly: input must be 1-D or a square 2-D array")
    (z,) = _promote("poly", z, to="inexact")
    d = _aval(z).dtype
    a = _full((1,), 1, d)
    for i in range(_aval(z).shape[0]):
        ri = mv.reshape(_slice1(z, i, i + 1), (1,))
        a = convolve(a, mv.concatenate([_full((1,), 1, d), ew.neg(ri)], 0))
    return a


def roots(p: ArrayLike, *, strip_zeros: bool = True) -> Any:
    """Roots of a polynomial (eigenvalues of its companion matrix), as ``numpy.roots``.

    Needs ``ember.numpy.linalg.eigvals``. ``strip_zeros`` removes leading and trailing zero
    coefficients, which needs concrete input; under ``jit`` pass ``strip_zeros=False`` (leading
    zeros then give NaN roots).
    """
    (p,) = _promote("roots", p, to="inexact")
    p = _vec("roots", p)
    ntrail = 0
    if strip_zeros:
        pv = core.concrete_or_error(p, "roots with strip_zeros=True: the coefficients (pass "
                                       "strip_zeros=False under jit)")
        nz = np.flatnonzero(pv)
        if nz.size == 0:
            return _full((0,), 0, dt.complex_dtype(_aval(p).dtype))
        ntrail = pv.shape[0] - int(nz[-1]) - 1
        p = _slice1(p, int(nz[0]), int(nz[-1]) + 1)
    n = _aval(p).shape[0]
    if n < 2:
        out = _full((ntrail,), 0, _aval(p).dtype)
        return out
    d = _aval(p).dtype
    lead = mv.broadcast_in_dim(mv.reshape(_slice1(p, 0, 1), ()), (n - 1,), ())
    first_row = ew.neg(ew.div(_slice1(p, 1, n), lead))
    sub = ew.convert_element_type(ew.eq(mv.broadcasted_iota(dt.int32, (n - 2, n - 1), 0),
                                        mv.broadcasted_iota(dt.int32, (n - 2, n - 1), 1)), d)
    comp = mv.concatenate([mv.reshape(first_row, (1, n - 1)), sub], 0)
    r = la.eigvals(comp)
    if ntrail:
        r = mv.concatenate([r, _full((ntrail,), 0, _aval(r).dtype)], 0)
    return r


__all__ = [
    "poly", "polyadd", "polyder", "polydiv", "polyfit", "polyint", "polymul", "polysub", "polyval",
    "roots", "vander",
]

"""NumPy-level order statistics, covariance, differences, convolution and interpolation.

Written over lax-level primitives (sort, take, scatter, reductions, dot_general), so everything
traces under ``jit`` and differentiates where that makes sense. Dtype rules follow JAX: integer
and bool inputs of floating results promote to the default float (float64 for 64-bit ints).

* ``quantile``/``percentile``/``median`` (and the ``nan*`` versions) sort along the reduced axes and
  gather; every NumPy ``method`` is supported. A NaN in a slice gives NaN (``nan*`` skip NaNs; an
  all-NaN or empty slice gives NaN).

The histograms and counting (``histogram``, ``bincount``, ``digitize``) are in :mod:`.histograms`.
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.array import Array
from ember._src.core import get_aval as _aval
from ember._src.numpy.operands import (
    INDEX_DTYPE,
    _arr,
    _axis,
    _bcast,
    _convert,
    _count,
    _full,
    _inexact,
    _iota,
    _is_scalar,
    _isnan,
    _promote,
    _ravel,
    _scalar,
    _slice1,
    _static_int,
)
from ember._src.numpy.reductions import _check_out
from ember._src.numpy.searching import _sort_with, searchsorted
from ember._src.prims import dot as dotp
from ember._src.prims import elementwise as ew
from ember._src.prims import indexing as ix
from ember._src.prims import movement as mv
from ember._src.prims import reductions as red
from ember.errors import DTypeError, ShapeError

ArrayLike = Any

# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def _c(x: Any, v: Any) -> Any:
    """A constant shaped and typed like ``x``."""
    return mv.full_like(x, v)


def _axes(name: str, axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    try:
        return tuple(sorted(sh.normalize_axes(axis, ndim, "axis")))
    except ShapeError as e:
        raise type(e)(f"{name}: {e}") from None


def _ndim(x: Any) -> int:
    return 0 if _is_scalar(x) else _aval(_arr(x)).ndim


def _matmul(a: Any, b: Any) -> Any:
    return dotp.dot_general(a, b, (((1,), (0,)), ((), ())))


def _real_inexact(name: str, x: ArrayLike) -> Any:
    x = _inexact(name, x)
    if dt.is_complex(_aval(x).dtype):
        raise DTypeError(f"{name} does not support complex input")
    return x


# ---------------------------------------------------------------------------------------------
# Quantiles
# ---------------------------------------------------------------------------------------------

# continuous methods: (alpha, beta) of Hyndman & Fan
_HF = {"interpolated_inverted_cdf": (0.0, 1.0), "hazen": (0.5, 0.5), "weibull": (0.0, 0.0),
       "median_unbiased": (1 / 3, 1 / 3), "normal_unbiased": (3 / 8, 3 / 8)}
_DISCRETE = ("lower", "higher", "nearest", "inverted_cdf", "closest_observation")
METHODS = ("linear", "midpoint", "averaged_inverted_cdf", *_HF, *_DISCRETE)


def _positions(method: str, q: Any, n: Any) -> tuple[Any, Any | None, Any | None]:
    """Index (or prev index, next index, weight) into the sorted data of ``n`` valid values.

    Floats throughout; indices are clipped to ``[0, n-1]`` by the caller.
    """
    one = _c(q, 1)
    if method in _DISCRETE:
        if method == "lower":
            i = ew.floor(ew.mul(ew.sub(n, one), q))
        elif method == "higher":
            i = ew.ceil(ew.mul(ew.sub(n, one), q))
        elif method == "nearest":
            i = ew.round(ew.mul(ew.sub(n, one), q), 1)  # half to even, as np.around
        else:
            shift = 1.0 if method == "inverted_cdf" else 1.5
            v = ew.sub(ew.mul(n, q), _c(q, shift))
            lo = ew.floor(v)
            g0 = ew.eq(ew.sub(v, lo), _c(q, 0))
            if method == "closest_observation":
                g0 = ew.bitwise_and(g0, ew.eq(ew.rem(lo, _c(q, 2)), _c(q, 1)))
            i = ew.select(g0, lo, ew.add(lo, one))
        return i, None, None
    nm1 = ew.mul(ew.sub(n, one), q)
    if method == "linear":
        v = nm1
    elif method == "midpoint":
        v = ew.mul(_c(q, 0.5), ew.add(ew.floor(nm1), ew.ceil(nm1)))
    elif method == "averaged_inverted_cdf":
        v = ew.sub(ew.mul(n, q), one)
    else:
        alpha, beta = _HF[method]
        v = ew.sub(ew.add(ew.mul(n, q), ew.add(_c(q, alpha), ew.mul(q, _c(q, 1 - alpha - beta)))), one)
    prev = ew.floor(v)
    nxt = ew.add(prev, one)
    above = ew.ge(v, ew.sub(n, one))
    below = ew.lt(v, _c(q, 0))
    last = ew.sub(n, one)
    prev = ew.select(above, last, ew.select(below, _c(q, 0), prev))
    nxt = ew.select(above, last, ew.select(below, _c(q, 0), nxt))
    g = ew.sub(v, ew.floor(v))
    if method == "midpoint":
        g = ew.select(ew.eq(g, _c(g, 0)), g, _c(g, 0.5))
    elif method == "averaged_inverted_cdf":
        g = ew.select(ew.eq(g, _c(g, 0)), _c(g, 0.5), _c(g, 1))
    return prev, nxt, g


def _lerp(a: Any, b: Any, t: Any) -> Any:
    d = ew.sub(b, a)
    return ew.select(ew.ge(t, _c(t, 0.5)), ew.sub(b, ew.mul(d, ew.sub(_c(t, 1), t))), ew.add(a, ew.mul(d, t)))


def _check_q(name: str, q: Any, hi: float) -> None:
    if isinstance(q, core.Tracer):
        return
    qv = np.asarray(core.concrete_or_error(q, "q"))
    if qv.size and not np.all((qv >= 0) & (qv <= hi)):
        what = "Quantiles" if hi == 1 else "Percentiles"
        raise ValueError(f"{name}: {what} must be in the range [0, {hi:g}]")


def _quantile(name: str, a: ArrayLike, q: ArrayLike, axis: Any, out: Any, method: str, keepdims: bool,
              ignore_nan: bool, interpolation: Any = None, scale: float = 1.0) -> Any:
    _check_out(name, out)
    if interpolation is not None:
        method = interpolation
    if method not in METHODS:
        raise ValueError(f"{name}: {method!r} is not a valid method; use one of {METHODS}")
    x = _real_inexact(name, a)
    d = _aval(x).dtype
    # Python scalars and lists of q take the data's dtype exactly (they are weakly typed)
    qa = q if isinstance(q, (Array, core.Tracer)) else np.asarray(q)
    _check_q(name, qa, 100.0 if scale != 1 else 1.0)
    qa = _convert(qa, d) if isinstance(qa, (Array, core.Tracer)) else _arr(qa.astype(d))
    if scale != 1:
        qa = ew.div(qa, _c(qa, scale))
    shape = _aval(x).shape
    axes = _axes(name, axis, len(shape))
    kept = [i for i in range(len(shape)) if i not in axes]
    kshape = tuple(shape[i] for i in kept)
    qshape = _aval(qa).shape
    out_shape = (*qshape, *kshape)
    n = sh.size([shape[i] for i in axes])
    b = sh.size(kshape)
    nq = sh.size(qshape)
    if n == 0:
        res = _full(out_shape, np.nan, d)
    else:
        x2 = mv.reshape(mv.transpose(x, (*kept, *axes)), (b, n))
        xs = _sort_with(x2, 1)[0]
        if ignore_nan:
            cnt = _convert(_count(ew.bitwise_not(_isnan(x2)), 1), d)
        else:
            cnt = _full((b,), n, d)
        qb = mv.broadcast_in_dim(mv.reshape(qa, (nq,)), (nq, b), (0,))
        cb = mv.broadcast_in_dim(cnt, (nq, b), (1,))
        prev, nxt, g = _positions(method, qb, cb)
        flat = mv.reshape(xs, (b * n,))
        base = ew.mul(mv.broadcasted_iota(INDEX_DTYPE, (nq, b), 1), _full((nq, b), n, INDEX_DTYPE))
        hi = ew.max(ew.sub(cb, _c(cb, 1)), _c(cb, 0))

        def gather(i: Any) -> Any:
            i = ew.max(ew.min(i, hi), _c(i, 0))
            return ix.take(flat, ew.add(base, _convert(i, INDEX_DTYPE)), 0, "clip")

        res = gather(prev)
        if nxt is not None:
            res = _lerp(res, gather(nxt), g)
        if ignore_nan:
            res = ew.select(ew.eq(cb, _c(cb, 0)), _c(res, np.nan), res)
        else:
            lastv = mv.broadcast_in_dim(mv.reshape(_slice1(xs, n - 1, n, 1), (b,)), (nq, b), (1,))
            res = ew.select(_isnan(lastv), lastv, res)
        res = mv.reshape(res, out_shape)
    if keepdims:
        res = mv.reshape(res, (*qshape, *(1 if i in axes else shape[i] for i in range(len(shape)))))
    return res


def quantile(a: ArrayLike, q: ArrayLike, axis: Any = None, out: Any = None, overwrite_input: bool = False,
             method: str = "linear", keepdims: bool = False, *, interpolation: Any = None) -> Any:
    """The ``q``-th quantiles of ``a`` along ``axis`` (``q`` in [0, 1]), as ``numpy.quantile``.

    The dimensions of ``q`` come first in the result. ``method`` is one of NumPy's methods
    (``linear``, ``lower``, ``higher``, ``nearest``, ``midpoint``, and the Hyndman-Fan ones).
    """
    return _quantile("quantile", a, q, axis, out, method, keepdims, False, interpolation)


def percentile(a: ArrayLike, q: ArrayLike, axis: Any = None, out: Any = None, overwrite_input: bool = False,
               method: str = "linear", keepdims: bool = False, *, interpolation: Any = None) -> Any:
    """The ``q``-th percentiles of ``a`` along ``axis`` (``q`` in [0, 100]), as ``numpy.percentile``."""
    return _quantile("percentile", a, q, axis, out, method, keepdims, False, interpolation, 100.0)


def median(a: ArrayLike, axis: Any = None, out: Any = None, overwrite_input: bool = False,
           keepdims: bool = False) -> Any:
    """The median along ``axis``, as ``numpy.median`` (NaN if a slice holds a NaN)."""
    return _quantile("median", a, 0.5, axis, out, "linear", keepdims, False)


def nanquantile(a: ArrayLike, q: ArrayLike, axis: Any = None, out: Any = None, overwrite_input: bool = False,
                method: str = "linear", keepdims: bool = False, *, interpolation: Any = None) -> Any:
    """``quantile`` ignoring NaNs (an all-NaN slice gives NaN), as ``numpy.nanquantile``."""
    return _quantile("nanquantile", a, q, axis, out, method, keepdims, True, interpolation)


def nanpercentile(a: ArrayLike, q: ArrayLike, axis: Any = None, out: Any = None,
                  overwrite_input: bool = False, method: str = "linear", keepdims: bool = False, *,
                  interpolation: Any = None) -> Any:
    """``percentile`` ignoring NaNs, as ``numpy.nanpercentile``."""
    return _quantile("nanpercentile", a, q, axis, out, method, keepdims, True, interpolation, 100.0)


def nanmedian(a: ArrayLike, axis: Any = None, out: Any = None, overwrite_input: bool = False,
              keepdims: bool = False) -> Any:
    """The median ignoring NaNs, as ``numpy.nanmedian``."""
    return _quantile("nanmedian", a, 0.5, axis, out, "linear", keepdims, True)


# ---------------------------------------------------------------------------------------------
# Covariance
# ---------------------------------------------------------------------------------------------


def _atleast_2d_rows(name: str, v: ArrayLike, rowvar: bool, dtype: Any) -> Any:
    x = _arr(v)
    if _aval(x).ndim > 2:
        raise ShapeError(f"{name}: input has more than 2 dimensions")
    if _aval(x).ndim < 2:
        x = mv.reshape(x, (1, -1) if _aval(x).ndim else (1, 1))
    if not rowvar and _aval(x).shape[0] != 1:
        x = mv.transpose(x, (1, 0))
    return x


def cov(m: ArrayLike, y: ArrayLike = None, rowvar: bool = True, bias: bool = False, ddof: int | None = None,
        fweights: ArrayLike = None, aweights: ArrayLike = None, *, dtype: Any = None) -> Any:
    """Covariance matrix of the variables in the rows (``rowvar``) of ``m`` (and ``y``), as ``numpy.cov``."""
    x = _atleast_2d_rows("cov", m, rowvar, dtype)
    if y is not None:
        yy = _atleast_2d_rows("cov", y, rowvar, dtype)
        x, yy = _promote("cov", x, yy)
        x = mv.concatenate([x, yy], 0)
    x = _inexact("cov", x)
    if dtype is not None:
        x = _convert(x, dtype)
    d = _aval(x).dtype
    nv, nobs = _aval(x).shape
    if ddof is None:
        ddof = 0 if bias else 1
    w = None
    if fweights is not None:
        fw = _arr(fweights)
        if _aval(fw).ndim != 1 or _aval(fw).shape[0] != nobs:
            raise ShapeError("cov: fweights must be 1-D with one entry per observation")
        if not (dt.is_integer(_aval(fw).dtype) or _aval(fw).dtype == dt.bool_):
            raise DTypeError("cov: fweights must be integer")
        w = _convert(fw, d)
    aw = None
    if aweights is not None:
        aw = _arr(aweights)
        if _aval(aw).ndim != 1 or _aval(aw).shape[0] != nobs:
            raise ShapeError("cov: aweights must be 1-D with one entry per observation")
        aw = _convert(aw, d)
        w = aw if w is None else ew.mul(w, aw)
    if w is None:
        avg = ew.div(red.reduce_sum(x, (1,)), _full((nv,), nobs, d))
        fact: Any = _full((), nobs - ddof, d)
    else:
        wb = mv.broadcast_in_dim(w, (nv, nobs), (1,))
        w_sum = red.reduce_sum(w)
        avg = ew.div(red.reduce_sum(ew.mul(x, wb), (1,)), mv.broadcast_in_dim(w_sum, (nv,), ()))
        if ddof == 0:
            fact = w_sum
        elif aw is None:
            fact = ew.sub(w_sum, _c(w_sum, ddof))
        else:
            fact = ew.sub(w_sum, ew.div(ew.mul(_c(w_sum, ddof), red.reduce_sum(ew.mul(w, aw))), w_sum))
    fact = ew.max(fact, _c(fact, 0)) if not dt.is_complex(d) else fact
    xc = ew.sub(x, mv.broadcast_in_dim(avg, (nv, nobs), (0,)))
    xw = xc if w is None else ew.mul(xc, mv.broadcast_in_dim(w, (nv, nobs), (1,)))
    xt = mv.transpose(xw, (1, 0))
    if dt.is_complex(d):
        xt = ew.conj(xt)
    c = _matmul(xc, xt)
    c = ew.div(c, mv.broadcast_in_dim(fact, (nv, nv), ()))
    return mv.reshape(c, ()) if nv == 1 else c


def corrcoef(x: ArrayLike, y: ArrayLike = None, rowvar: bool = True, *, dtype: Any = None) -> Any:
    """Pearson correlation coefficients, as ``numpy.corrcoef`` (values clipped to [-1, 1])."""
    c = cov(x, y, rowvar, dtype=dtype)
    if _aval(c).ndim == 0:
        return ew.div(c, c)
    k = _aval(c).shape[0]
    diag = ix.take(mv.reshape(c, (k * k,)), ew.mul(_iota(k), _full((k,), k + 1, INDEX_DTYPE)), 0, "clip")
    std = ew.sqrt(ew.real(diag) if dt.is_complex(_aval(c).dtype) else diag)
    std = _convert(std, _aval(c).dtype)
    c = ew.div(c, mv.broadcast_in_dim(std, (k, k), (0,)))
    c = ew.div(c, mv.broadcast_in_dim(std, (k, k), (1,)))
    if dt.is_complex(_aval(c).dtype):
        re = ew.max(ew.min(ew.real(c), _c(ew.real(c), 1)), _c(ew.real(c), -1))
        im = ew.max(ew.min(ew.imag(c), _c(ew.imag(c), 1)), _c(ew.imag(c), -1))
        return ew.complex(re, im)
    return ew.max(ew.min(c, _c(c, 1)), _c(c, -1))


# ---------------------------------------------------------------------------------------------
# Differences and integration
# ---------------------------------------------------------------------------------------------


def _diff1(x: Any, axis: int) -> Any:
    n = _aval(x).shape[axis]
    hi, lo = _slice1(x, builtins.min(1, n), n, axis), _slice1(x, 0, builtins.max(n - 1, 0), axis)
    if _aval(x).dtype == dt.bool_:
        return ew.ne(hi, lo)
    return ew.sub(hi, lo)


def diff(a: ArrayLike, n: int = 1, axis: int = -1, prepend: ArrayLike = None,
         append: ArrayLike = None) -> Any:
    """The ``n``-th discrete difference along ``axis``, as ``numpy.diff`` (bool: ``!=``)."""
    x = _arr(a)
    n = _static_int(n, "diff: n")
    if n < 0:
        raise ValueError(f"diff: order must be non-negative but got {n}")
    nd = _aval(x).ndim
    if nd == 0:
        raise ValueError("diff requires input that is at least one dimensional")
    axis = _axis("diff", axis, nd)
    if n == 0:
        return x
    if prepend is not None or append is not None:
        shape = list(_aval(x).shape)
        ops = [v for v in (prepend, x, append) if v is not None]
        promoted = _promote("diff", *ops)
        parts = []
        for v in promoted:
            if _aval(v).ndim == 0:
                s = list(shape)
                s[axis] = 1
                v = mv.broadcast_in_dim(v, tuple(s), ())
            parts.append(v)
        x = mv.concatenate(parts, axis)
    for _ in range(n):
        x = _diff1(x, axis)
    return x


def ediff1d(ary: ArrayLike, to_end: ArrayLike = None, to_begin: ArrayLike = None) -> Any:
    """Differences between consecutive elements of the flattened array, as ``numpy.ediff1d``."""
    x = _ravel(_arr(ary))
    d = _aval(x).dtype
    out = _diff1(x, 0)
    parts = []
    if to_begin is not None:
        parts.append(_convert(_ravel(_arr(to_begin)), d))
    parts.append(out)
    if to_end is not None:
        parts.append(_convert(_ravel(_arr(to_end)), d))
    return mv.concatenate(parts, 0) if len(parts) > 1 else out


def trapezoid(y: ArrayLike, x: ArrayLike = None, dx: float = 1.0, axis: int = -1) -> Any:
    """Integral of ``y`` along ``axis`` by the trapezoidal rule, as ``numpy.trapezoid``."""
    if x is None:
        (ya,) = _promote("trapezoid", y, to="inexact")
        nd = _aval(ya).ndim
        axis = _axis("trapezoid", axis, nd)
        n = _aval(ya).shape[axis]
        s = ew.add(_slice1(ya, 1, n, axis), _slice1(ya, 0, builtins.max(n - 1, 0), axis))
        dxa = dx if _is_scalar(dx) else _arr(dx)
        (dxa, s) = _promote("trapezoid", dxa, s)
        prod = ew.mul(_bcast(dxa, _aval(s).shape), s)
    else:
        ya, xa = _promote("trapezoid", y, x, to="inexact")
        nd = _aval(ya).ndim
        axis = _axis("trapezoid", axis, nd)
        n = _aval(ya).shape[axis]
        if _aval(xa).ndim == 1:
            d = _diff1(xa, 0)
            shape = [1] * nd
            shape[axis] = _aval(d).shape[0]
            d = mv.reshape(d, shape)
        else:
            d = _diff1(xa, axis)
        s = ew.add(_slice1(ya, 1, n, axis), _slice1(ya, 0, builtins.max(n - 1, 0), axis))
        oshape = sh.broadcast_shapes(_aval(d).shape, _aval(s).shape, op="trapezoid")
        prod = ew.mul(_bcast(d, oshape), _bcast(s, oshape))
    half = ew.div(prod, _c(prod, 2.0))
    return red.reduce_sum(half, (axis,))


def gradient(f: ArrayLike, *varargs: Any, axis: Any = None, edge_order: int = 1) -> Any:
    """The gradient by second-order central differences inside and one-sided differences of order
    ``edge_order`` (1 or 2) at the boundaries, as ``numpy.gradient``.

    ``varargs`` are one spacing for all axes, one per axis, scalars or coordinate arrays. Returns
    one array per axis (a single array for a single axis).
    """
    (y,) = _promote("gradient", f, to="inexact")
    nd = _aval(y).ndim
    axes = tuple(range(nd)) if axis is None else tuple(
        sh.normalize_axis(a, nd) for a in (axis if isinstance(axis, (tuple, list)) else (axis,)))
    if len(varargs) == 0:
        spacing: list[Any] = [1.0] * len(axes)
    elif len(varargs) == 1 and _ndim(varargs[0]) == 0:
        spacing = [varargs[0]] * len(axes)
    elif len(varargs) == len(axes):
        spacing = list(varargs)
    else:
        raise TypeError(f"gradient: invalid number of spacing arguments ({len(varargs)}) for "
                        f"{len(axes)} axes")
    if edge_order not in (1, 2):
        raise ValueError("gradient: edge_order must be 1 or 2")
    outs = []
    for ax, h in zip(axes, spacing):
        outs.append(_gradient_axis(y, ax, h, edge_order))
    return outs[0] if len(outs) == 1 else tuple(outs)


def _gradient_axis(y: Any, ax: int, h: Any, edge_order: int) -> Any:
    shape = _aval(y).shape
    n = shape[ax]
    d = _aval(y).dtype
    if n < edge_order + 1:
        raise ValueError("gradient: shape of the array along each differentiated axis must be at least "
                         "edge_order + 1")

    def sl(lo: int, hi: int) -> Any:
        return _slice1(y, lo, hi, ax)

    f0, f1, f2 = sl(0, 1), sl(1, 2), sl(2, 3) if n > 2 else None
    fl, fl1, fl2 = sl(n - 1, n), sl(n - 2, n - 1), sl(n - 3, n - 2) if n > 2 else None

    def bshape(v: Any) -> Any:  # a 1-D vector along ax, broadcastable against slices of y
        s = [1] * len(shape)
        s[ax] = _aval(v).shape[0]
        return mv.reshape(v, s)

    def mul(c: Any, v: Any) -> Any:
        c = _bcast(c, _aval(v).shape)
        return ew.mul(c, v)

    if _ndim(h) == 0:
        hs = _convert(_scalar(h, d), d)
        inner = ew.div(ew.sub(sl(2, n), sl(0, n - 2)), _bcast(ew.mul(hs, _c(hs, 2.0)), _aval(sl(2, n)).shape))
        if edge_order == 1:
            first, lastv = ew.sub(f1, f0), ew.sub(fl, fl1)
        else:
            first = ew.add(ew.add(mul(_c(hs, -1.5), f0), mul(_c(hs, 2.0), f1)), mul(_c(hs, -0.5), f2))
            lastv = ew.add(ew.add(mul(_c(hs, 0.5), fl2), mul(_c(hs, -2.0), fl1)), mul(_c(hs, 1.5), fl))
        first = ew.div(first, _bcast(hs, _aval(first).shape))
        lastv = ew.div(lastv, _bcast(hs, _aval(lastv).shape))
        return mv.concatenate([first, inner, lastv], ax)
    xc = _convert(_arr(h), d)
    if _aval(xc).ndim != 1 or _aval(xc).shape[0] != n:
        raise ShapeError("gradient: when spacing is an array, it must be 1-D with the length of the axis")
    dx = _diff1(xc, 0)
    dx1, dx2 = _slice1(dx, 0, n - 2), _slice1(dx, 1, n - 1)
    a = ew.div(ew.neg(dx2), ew.mul(dx1, ew.add(dx1, dx2)))
    b = ew.div(ew.sub(dx2, dx1), ew.mul(dx1, dx2))
    c = ew.div(dx1, ew.mul(dx2, ew.add(dx1, dx2)))
    inner = ew.add(ew.add(mul(bshape(a), sl(0, n - 2)), mul(bshape(b), sl(1, n - 1))),
                   mul(bshape(c), sl(2, n)))

    def at(i: int) -> Any:
        return mv.reshape(_slice1(dx, i % (n - 1), i % (n - 1) + 1), ())

    if edge_order == 1:
        first = ew.div(ew.sub(f1, f0), _bcast(at(0), _aval(f0).shape))
        lastv = ew.div(ew.sub(fl, fl1), _bcast(at(-1), _aval(fl).shape))
    else:
        d1, d2 = at(0), at(1)
        s12 = ew.add(d1, d2)
        ca = ew.div(ew.neg(ew.add(ew.add(d1, d1), d2)), ew.mul(d1, s12))
        cb = ew.div(s12, ew.mul(d1, d2))
        cc = ew.div(ew.neg(d1), ew.mul(d2, s12))
        first = ew.add(ew.add(mul(ca, f0), mul(cb, f1)), mul(cc, f2))
        d1, d2 = at(-2), at(-1)
        s12 = ew.add(d1, d2)
        ca = ew.div(d2, ew.mul(d1, s12))
        cb = ew.div(ew.neg(s12), ew.mul(d1, d2))
        cc = ew.div(ew.add(ew.add(d2, d2), d1), ew.mul(d2, s12))
        lastv = ew.add(ew.add(mul(ca, fl2), mul(cb, fl1)), mul(cc, fl))
    return mv.concatenate([first, inner, lastv], ax)


# ---------------------------------------------------------------------------------------------
# Convolution and interpolation
# ---------------------------------------------------------------------------------------------


def _conv(name: str, a: ArrayLike, v: ArrayLike, mode: str, op: str) -> Any:
    x, y = _promote(name, a, v)
    for nm, z in (("a", x), ("v", y)):
        if _aval(z).ndim > 1:
            raise ShapeError(f"{name}: {nm} must be 1-D, got shape {sh.shape_str(_aval(z).shape)}")
    x = mv.reshape(x, (1,)) if _aval(x).ndim == 0 else x
    y = mv.reshape(y, (1,)) if _aval(y).ndim == 0 else y
    if _aval(x).shape[0] == 0 or _aval(y).shape[0] == 0:
        raise ValueError(f"{name}: inputs cannot be empty")
    if mode not in ("full", "same", "valid"):
        raise ValueError(f"{name}: mode must be one of 'full', 'same', 'valid', got {mode!r}")
    is_bool = _aval(x).dtype == dt.bool_
    if is_bool:
        x, y = _convert(x, INDEX_DTYPE), _convert(y, INDEX_DTYPE)
    reverse = False
    if op == "correlate":
        if dt.is_complex(_aval(y).dtype):
            y = ew.conj(y)
        if _aval(x).shape[0] < _aval(y).shape[0]:
            x, y, reverse = y, x, True
    else:
        if _aval(x).shape[0] < _aval(y).shape[0]:
            x, y = y, x
        y = mv.rev(y, (0,))
    m = _aval(y).shape[0]
    lo, hi = {"valid": (0, 0), "same": (m // 2, m - m // 2 - 1), "full": (m - 1, m - 1)}[mode]
    xp = mv.pad(x, _full((), 0, _aval(x).dtype), [(lo, hi, 0)])
    L = _aval(xp).shape[0] - m + 1
    idx = ew.add(mv.broadcasted_iota(INDEX_DTYPE, (L, m), 0), mv.broadcasted_iota(INDEX_DTYPE, (L, m), 1))
    windows = ix.take(xp, idx, 0, "clip")
    out = dotp.dot_general(windows, y, (((1,), (0,)), ((), ())))
    if reverse:
        out = mv.rev(out, (0,))
    if is_bool:
        out = ew.ne(out, _c(out, 0))
    return out


def convolve(a: ArrayLike, v: ArrayLike, mode: str = "full", *, precision: Any = None,
             preferred_element_type: Any = None) -> Any:
    """Discrete linear convolution of two 1-D sequences, as ``numpy.convolve``."""
    return _conv("convolve", a, v, mode, "convolve")


def correlate(a: ArrayLike, v: ArrayLike, mode: str = "valid", *, precision: Any = None,
              preferred_element_type: Any = None) -> Any:
    """Cross-correlation of two 1-D sequences (``v`` conjugated), as ``numpy.correlate``."""
    return _conv("correlate", a, v, mode, "correlate")


def interp(x: ArrayLike, xp: ArrayLike, fp: ArrayLike, left: ArrayLike = None, right: ArrayLike = None,
           period: ArrayLike = None) -> Any:
    """Piecewise-linear interpolation of the points ``(xp, fp)`` at ``x``, as ``numpy.interp``.

    ``xp`` must be increasing (unless ``period`` is given); outside it the result is ``left`` /
    ``right`` (default ``fp[0]`` / ``fp[-1]``).
    """
    xa, xpa = _promote("interp", x, xp, to="inexact")
    (fpa,) = _promote("interp", fp, to="inexact")
    if dt.is_complex(_aval(xa).dtype):
        raise DTypeError("interp: x and xp must be real")
    if _aval(xpa).ndim != 1 or _aval(fpa).ndim != 1:
        raise ShapeError("interp: xp and fp must be 1-D sequences")
    if _aval(xpa).shape[0] != _aval(fpa).shape[0]:
        raise ShapeError(f"interp: fp and xp are not of the same length ({_aval(fpa).shape[0]} and "
                         f"{_aval(xpa).shape[0]})")
    if _aval(xpa).shape[0] == 0:
        raise ValueError("interp: array of sample points is empty")
    fd = _aval(fpa).dtype
    if period is not None:
        if _is_scalar(period) and period == 0:
            raise ValueError("interp: period must be a non-zero value")
        p = _convert(_scalar(period, _aval(xa).dtype), _aval(xa).dtype)
        p = ew.abs(p)
        xa = _mod(xa, p)
        xpa = _mod(xpa, p)
        xpa, fpa = _sort_with(xpa, 0, payload=(fpa,))
        n0 = _aval(xpa).shape[0]
        pp = mv.reshape(p, (1,))
        xpa = mv.concatenate([ew.sub(_slice1(xpa, n0 - 1, n0), pp), xpa, ew.add(_slice1(xpa, 0, 1), pp)], 0)
        fpa = mv.concatenate([_slice1(fpa, n0 - 1, n0), fpa, _slice1(fpa, 0, 1)], 0)
        left = right = None
    n = _aval(xpa).shape[0]
    xs = _aval(xa).shape
    j = ew.sub(searchsorted(xpa, xa, "right"), _full(xs, 1, INDEX_DTYPE))
    jc = ew.max(ew.min(j, _full(xs, n - 2 if n > 1 else 0, INDEX_DTYPE)), _full(xs, 0, INDEX_DTYPE))
    j1 = ew.min(ew.add(jc, _full(xs, 1, INDEX_DTYPE)), _full(xs, n - 1, INDEX_DTYPE))
    x0, x1 = ix.take(xpa, jc, 0, "clip"), ix.take(xpa, j1, 0, "clip")
    y0, y1 = ix.take(fpa, jc, 0, "clip"), ix.take(fpa, j1, 0, "clip")
    slope = ew.div(ew.sub(y1, y0), _convert(ew.sub(x1, x0), fd))
    res = ew.add(ew.mul(slope, _convert(ew.sub(xa, x0), fd)), y0)
    res2 = ew.add(ew.mul(slope, _convert(ew.sub(xa, x1), fd)), y1)
    res = ew.select(_isnan(res), res2, res)
    res = ew.select(ew.bitwise_and(_isnan(res), ew.eq(y0, y1)), y0, res)
    res = ew.select(ew.eq(x0, xa), y0, res)
    first_x = mv.broadcast_in_dim(mv.reshape(_slice1(xpa, 0, 1), ()), xs, ())
    last_x = mv.broadcast_in_dim(mv.reshape(_slice1(xpa, n - 1, n), ()), xs, ())
    lastf = mv.broadcast_in_dim(mv.reshape(_slice1(fpa, n - 1, n), ()), xs, ())
    res = ew.select(ew.eq(xa, last_x), lastf, res)
    lv = _slice1(fpa, 0, 1) if left is None else _convert(_scalar(left, fd), fd)
    rv = _slice1(fpa, n - 1, n) if right is None else _convert(_scalar(right, fd), fd)
    res = ew.select(ew.lt(xa, first_x), mv.broadcast_in_dim(mv.reshape(lv, ()), xs, ()), res)
    res = ew.select(ew.gt(xa, last_x), mv.broadcast_in_dim(mv.reshape(rv, ()), xs, ()), res)
    return ew.select(_isnan(xa), _convert(xa, fd), res)


def _mod(x: Any, p: Any) -> Any:
    pb = _bcast(p, _aval(x).shape)
    r = ew.rem(x, pb)
    fix = ew.bitwise_and(ew.ne(r, _c(r, 0)), ew.ne(ew.lt(r, _c(r, 0)), ew.lt(pb, _c(pb, 0))))
    return ew.select(fix, ew.add(r, pb), r)


__all__ = [
    "convolve", "corrcoef", "correlate", "cov", "diff", "ediff1d", "gradient", "interp", "median",
    "nanmedian", "nanpercentile", "nanquantile", "percentile", "quantile", "trapezoid",
]


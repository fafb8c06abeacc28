"""Histograms and counting, as NumPy: ``histogram``, ``histogram_bin_edges``, ``bincount``,
``digitize``, and the multidimensional ``histogramdd`` and ``histogram2d``.

``histogram`` with an integer ``bins`` works under ``jit`` (the edges come from the data's min/max,
or ``range``); string ``bins`` ("auto", ...) need concrete data. ``bincount`` needs ``length=`` under
``jit``; out-of-range values are dropped there.


Each axis gets its edges like :func:`ember.numpy.histogram` (an int number of equal bins over the data
range or ``range``, or an explicit 1-D array of edges), each sample its bin per axis by a binary
search, and the per-axis bins are combined into one linear index that is scatter-added into the
flattened histogram. Samples outside any axis' edges are dropped; the last bin of every axis includes
its right edge. With integer ``bins`` everything traces under ``jit``. Counts are int32 (as in JAX),
the weights' dtype with ``weights``, floating with ``density=True``.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.core import get_aval as _aval
from ember._src.numpy.operands import (
    INDEX_DTYPE,
    _arr,
    _convert,
    _data_dependent,
    _full,
    _iota,
    _promote,
    _ravel,
    _scalar,
    _select,
    _slice1,
    _static_int,
)
from ember._src.numpy.searching import searchsorted
from ember._src.numpy.statistics import _c, _ndim, _real_inexact
from ember._src.prims import elementwise as ew
from ember._src.prims import indexing as ix
from ember._src.prims import movement as mv
from ember._src.prims import reductions as red
from ember.errors import DTypeError, ShapeError, TracerError

ArrayLike = Any


def _bin_edges(name: str, x: Any, bins: Any, range: Any, weights: Any) -> Any:  # noqa: A002
    d = _aval(x).dtype
    if isinstance(bins, str):
        xv = _data_dependent(f"{name} with bins={bins!r}", x)
        wv = None if weights is None else core.concrete_or_error(weights, f"{name} weights")
        rv = None if range is None else tuple(float(core.concrete_or_error(r, "range")) for r in range)
        edges = np.histogram_bin_edges(xv, bins, rv, wv)  # only the number of bins is data-dependent
        return _convert(_arr(edges), d)
    if _ndim(bins) != 0:
        edges = _convert(_arr(bins), d)
        if _aval(edges).ndim != 1:
            raise ShapeError(f"{name}: bins must be an int, a string or a 1-D array of edges")
        if not isinstance(edges, core.Tracer):
            ev = core.concrete_or_error(edges, "bins")
            if np.any(ev[1:] < ev[:-1]):
                raise ValueError(f"{name}: bins must increase monotonically")
        return edges
    nb = _static_int(bins, f"{name}: bins")
    if nb < 1:
        raise ValueError(f"{name}: bins must be a positive integer, got {nb}")
    wide = dt.float64 if d != dt.float64 else d
    if range is not None:
        lo, hi = range
        if not isinstance(lo, core.Tracer) and not isinstance(hi, core.Tracer):
            lv, hv = float(np.asarray(lo)), float(np.asarray(hi))
            if lv > hv:
                raise ValueError(f"{name}: max must be larger than min in range parameter")
            if not (np.isfinite(lv) and np.isfinite(hv)):
                raise ValueError(f"{name}: supplied range of [{lv}, {hv}] is not finite")
        first, last = _scalar(lo, wide), _scalar(hi, wide)
    elif _aval(x).shape[0] == 0:
        first, last = _full((), 0.0, wide), _full((), 1.0, wide)
    else:
        first, last = _convert(red.reduce_min(x), wide), _convert(red.reduce_max(x), wide)
    same = ew.eq(first, last)
    first = ew.select(same, ew.sub(first, _c(first, 0.5)), first)
    last = ew.select(same, ew.add(last, _c(last, 0.5)), last)
    step = ew.div(ew.sub(last, first), _c(last, nb))
    it = _convert(_iota(nb + 1), wide)
    edges = ew.add(ew.mul(it, mv.broadcast_in_dim(step, (nb + 1,), ())),
                   mv.broadcast_in_dim(first, (nb + 1,), ()))
    edges = mv.concatenate([_slice1(edges, 0, nb), mv.reshape(last, (1,))], 0)
    return _convert(edges, d)


def histogram_bin_edges(a: ArrayLike, bins: Any = 10, range: Any = None,  # noqa: A002
                        weights: ArrayLike = None) -> Any:
    """The bin edges ``histogram`` would use, as ``numpy.histogram_bin_edges``."""
    x = _ravel(_real_inexact("histogram_bin_edges", a))
    return _bin_edges("histogram_bin_edges", x, bins, range, weights)


def histogram(a: ArrayLike, bins: Any = 10, range: Any = None, density: bool | None = None,  # noqa: A002
              weights: ArrayLike = None) -> tuple[Any, Any]:
    """``(counts, bin_edges)`` of ``a`` (flattened), as ``numpy.histogram``.

    Bins are half-open ``[e_i, e_i+1)`` except the last, which includes its right edge; values
    outside the range are ignored. Counts are int32, or the weights' dtype with ``weights``, or
    float with ``density=True``.
    """
    x = _ravel(_real_inexact("histogram", a))
    edges = _bin_edges("histogram", x, bins, range, weights)
    nb = _aval(edges).shape[0] - 1
    n = _aval(x).shape[0]
    first = mv.broadcast_in_dim(mv.reshape(_slice1(edges, 0, 1), ()), (n,), ())
    last = mv.broadcast_in_dim(mv.reshape(_slice1(edges, nb, nb + 1), ()), (n,), ())
    keep = ew.bitwise_and(ew.ge(x, first), ew.le(x, last))
    idx = ew.sub(searchsorted(edges, x, "right"), _full((n,), 1, INDEX_DTYPE))
    idx = ew.select(ew.eq(x, last), _full((n,), nb - 1, INDEX_DTYPE), idx)
    idx = ew.select(keep, idx, _full((n,), nb, INDEX_DTYPE))  # out of range: dropped by scatter
    if weights is None:
        upd = _full((n,), 1, INDEX_DTYPE)
    else:
        w = _arr(weights)
        if _aval(w).shape != _aval(_arr(a)).shape:
            raise ShapeError(f"histogram: weights have shape {sh.shape_str(_aval(w).shape)}, "
                             f"a has {sh.shape_str(_aval(_arr(a)).shape)}")
        upd = _ravel(w)
    counts = ix.scatter(_full((nb,), 0, _aval(upd).dtype), idx, upd, 0, "add")
    if density:
        (cf,) = _promote("histogram", counts, to="inexact")
        widths = _convert(ew.sub(_slice1(edges, 1, nb + 1), _slice1(edges, 0, nb)), _aval(cf).dtype)
        total = mv.broadcast_in_dim(red.reduce_sum(cf), (nb,), ())
        counts = ew.div(ew.div(cf, widths), total)
    return counts, edges


def bincount(x: ArrayLike, weights: ArrayLike = None, minlength: int = 0, *,
             length: int | None = None) -> Any:
    """Number of occurrences of each value in the non-negative int array ``x``, as ``numpy.bincount``.

    ``length`` fixes the output size (required under ``jit``); values ``>= length`` are dropped.
    """
    xa = _arr(x)
    d = _aval(xa).dtype
    if not (dt.is_integer(d) or d == dt.bool_):
        raise DTypeError(f"bincount: x must be an integer array, got {d}")
    if _aval(xa).ndim != 1:
        raise ShapeError(f"bincount: x must be 1-D, got shape {sh.shape_str(_aval(xa).shape)}")
    minlength = _static_int(minlength, "bincount: minlength")
    if minlength < 0:
        raise ValueError("bincount: minlength must be non-negative")
    if not isinstance(xa, core.Tracer):
        xv = core.concrete_or_error(xa, "x")
        if xv.size and xv.min() < 0:
            raise ValueError("bincount: x must be non-negative")
    if length is None:
        try:
            xv = core.concrete_or_error(xa, "x")
        except TracerError:
            raise TracerError("bincount: the output length depends on max(x), which is not known under "
                              "jit/tracing; pass a static `length=`") from None
        length = builtins.max(minlength, int(xv.max()) + 1 if xv.size else 0)
    length = _static_int(length, "bincount: length")
    n = _aval(xa).shape[0]
    idx = _convert(xa, INDEX_DTYPE)
    if weights is None:
        upd = _full((n,), 1, INDEX_DTYPE)
    else:
        (upd,) = _promote("bincount", weights)
        if _aval(upd).shape != (n,):
            raise ShapeError(f"bincount: weights have shape {sh.shape_str(_aval(upd).shape)}, x has ({n},)")
        if _aval(upd).dtype == dt.bool_:
            upd = _convert(upd, INDEX_DTYPE)
    return ix.scatter(_full((length,), 0, _aval(upd).dtype), idx, upd, 0, "add")


def digitize(x: ArrayLike, bins: ArrayLike, right: bool = False, *, method: str = "scan") -> Any:
    """Indices of the bins to which each value belongs (int32), as ``numpy.digitize``.

    ``bins`` is monotonically increasing or decreasing.
    """
    xa, b = _promote("digitize", x, bins)
    if _aval(b).ndim != 1:
        raise ShapeError(f"digitize: bins must be 1-D, got shape {sh.shape_str(_aval(b).shape)}")
    if dt.is_complex(_aval(b).dtype):
        raise DTypeError("digitize does not support complex input")
    m = _aval(b).shape[0]
    side = "left" if right else "right"
    inc = searchsorted(b, xa, side, method=method)
    if m < 2:
        return inc
    if not isinstance(b, core.Tracer):
        bv = core.concrete_or_error(b, "bins")
        df = np.diff(bv)
        if not (np.all(df >= 0) or np.all(df <= 0)):
            raise ValueError("digitize: bins must be monotonically increasing or decreasing")
    dec = ew.sub(_c(inc, m), searchsorted(mv.rev(b, (0,)), xa, side, method=method))
    is_dec = ew.lt(mv.reshape(_slice1(b, m - 1, m), ()), mv.reshape(_slice1(b, 0, 1), ()))
    return _select(is_dec, dec, inc)



def _sample_columns(name: str, sample: ArrayLike) -> list[Any]:
    """The D coordinate columns (each of length N) of an ``(N, D)`` array, a 1-D array (D = 1) or a
    sequence of D 1-D arrays."""
    if isinstance(sample, (list, tuple)):
        cols = [_real_inexact(name, s) for s in sample]
        n = None
        for c in cols:
            if _aval(c).ndim != 1:
                raise ShapeError(f"{name}: each coordinate array must be 1-D, got "
                                 f"{sh.shape_str(_aval(c).shape)}")
            if n is not None and _aval(c).shape[0] != n:
                raise ShapeError(f"{name}: coordinate arrays have different lengths")
            n = _aval(c).shape[0]
        cols = _promote(name, *cols) if cols else cols
        return cols
    x = _real_inexact(name, sample)
    if _aval(x).ndim == 1:
        return [x]
    if _aval(x).ndim != 2:
        raise ShapeError(f"{name}: sample must be an (N, D) array, got {sh.shape_str(_aval(x).shape)}")
    d = _aval(x).shape[1]
    return [mv.reshape(_slice1(x, i, i + 1, 1), (_aval(x).shape[0],)) for i in range(d)]


def _per_axis(name: str, value: Any, d: int, what: str) -> list[Any]:
    if value is None:
        return [None] * d
    if len(value) != d:
        raise ValueError(f"{name}: {what} must have one entry per dimension ({d}), got {len(value)}")
    return list(value)


def _axis_bins(bins: Any, d: int, name: str) -> list[Any]:
    if isinstance(bins, (int, np.integer)):
        return [int(bins)] * d
    if len(bins) != d:
        raise ValueError(f"{name}: the dimension of bins ({len(bins)}) must equal the dimension of the "
                         f"sample ({d})")
    return list(bins)


def _bin_index(x: Any, edges: Any) -> tuple[Any, Any]:
    """Per-sample bin along one axis (the last bin includes its right edge) and whether it is in range."""
    nb = _aval(edges).shape[0] - 1
    n = _aval(x).shape[0]
    ex = _convert(edges, _aval(x).dtype) if _aval(edges).dtype != _aval(x).dtype else edges
    first = mv.broadcast_in_dim(mv.reshape(_slice1(ex, 0, 1), ()), (n,), ())
    last = mv.broadcast_in_dim(mv.reshape(_slice1(ex, nb, nb + 1), ()), (n,), ())
    keep = ew.bitwise_and(ew.ge(x, first), ew.le(x, last))
    idx = ew.sub(searchsorted(ex, x, "right"), _full((n,), 1, INDEX_DTYPE))
    idx = ew.select(ew.eq(x, last), _full((n,), nb - 1, INDEX_DTYPE), idx)
    return idx, keep


def histogramdd(sample: ArrayLike, bins: Any = 10, range: Sequence | None = None,  # noqa: A002
                density: bool | None = None, weights: ArrayLike = None) -> tuple[Any, list[Any]]:
    """``(H, edges)``: the D-dimensional histogram of ``sample`` (``(N, D)``, or D 1-D arrays), as
    ``numpy.histogramdd``.

    ``bins``: an int for every axis, or one entry per axis (an int or a 1-D array of edges).
    ``range``: one ``(low, high)`` pair (or ``None``) per axis. ``density=True`` divides by the total
    and by each bin's volume.
    """
    name = "histogramdd"
    cols = _sample_columns(name, sample)
    d = len(cols)
    if d == 0:
        raise ValueError(f"{name}: sample has no dimensions")
    bins_l = _axis_bins(bins, d, name)
    ranges = _per_axis(name, range, d, "range")
    n = _aval(cols[0]).shape[0]
    w = None
    if weights is not None:
        w = _arr(weights)
        if _aval(w).shape != (n,):
            raise ShapeError(f"{name}: weights have shape {sh.shape_str(_aval(w).shape)}, expected ({n},)")
    edges = [_bin_edges(name, c, b, r, None) for c, b, r in zip(cols, bins_l, ranges)]
    nbins = [_aval(e).shape[0] - 1 for e in edges]
    total = int(np.prod(nbins))
    flat = _full((n,), 0, INDEX_DTYPE)
    ok = None
    stride = 1
    for c, e, nb in reversed(list(zip(cols, edges, nbins))):
        idx, keep = _bin_index(c, e)
        flat = ew.add(flat, ew.mul(idx, _full((n,), stride, INDEX_DTYPE)))
        ok = keep if ok is None else ew.bitwise_and(ok, keep)
        stride *= nb
    flat = ew.select(ok, flat, _full((n,), total, INDEX_DTYPE))  # out of range: dropped by scatter
    upd = _full((n,), 1, INDEX_DTYPE) if w is None else w
    hist = ix.scatter(_full((total,), 0, _aval(upd).dtype), flat, upd, 0, "add")
    hist = mv.reshape(hist, tuple(nbins))
    if density:
        hist = _promote(name, hist, edges[0], to="inexact")[0]  # the sample's precision at least
        hd = _aval(hist).dtype
        s = red.reduce_sum(hist)
        for i, (e, nb) in enumerate(zip(edges, nbins)):
            width = _convert(ew.sub(_slice1(e, 1, nb + 1), _slice1(e, 0, nb)), hd)
            hist = ew.div(hist, mv.broadcast_in_dim(width, tuple(nbins), (i,)))
        hist = ew.div(hist, mv.broadcast_in_dim(s, tuple(nbins), ()))
    return hist, edges


def histogram2d(x: ArrayLike, y: ArrayLike, bins: Any = 10, range: Sequence | None = None,  # noqa: A002
                density: bool | None = None, weights: ArrayLike = None) -> tuple[Any, Any, Any]:
    """``(H, xedges, yedges)``: the 2-D histogram of the points ``(x[i], y[i])``, as
    ``numpy.histogram2d``; ``bins`` is an int, ``[nx, ny]``, one array of edges for both axes, or
    ``[xedges, yedges]``."""
    xa, ya = _arr(x), _arr(y)
    if _aval(xa).shape != _aval(ya).shape or _aval(xa).ndim != 1:
        raise ShapeError(f"histogram2d: x and y must be 1-D arrays of the same length, got "
                         f"{sh.shape_str(_aval(xa).shape)} and {sh.shape_str(_aval(ya).shape)}")
    try:
        count = len(bins)
    except TypeError:
        count = 1
    if count not in (1, 2):  # one array of edges for both axes (NumPy's rule)
        bins = [bins, bins]
    h, edges = histogramdd([xa, ya], bins, range, density, weights)
    return h, edges[0], edges[1]


__all__ = ["bincount", "digitize", "histogram", "histogram2d", "histogram_bin_edges", "histogramdd"]

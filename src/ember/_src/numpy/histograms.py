"""Multidimensional histograms: ``histogramdd`` and ``histogram2d``, as NumPy.

Each axis gets its edges like :func:`ember.numpy.histogram` (an int number of equal bins over the data
range or ``range``, or an explicit 1-D array of edges), each sample its bin per axis by a binary
search, and the per-axis bins are combined into one linear index that is scatter-added into the
flattened histogram. Samples outside any axis' edges are dropped; the last bin of every axis includes
its right edge. With integer ``bins`` everything traces under ``jit``. Counts are int32 (as in JAX),
the weights' dtype with ``weights``, floating with ``density=True``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ember._src import shapes as sh
from ember._src.core import get_aval as _aval
from ember._src.numpy.operands import INDEX_DTYPE, _arr, _convert, _full, _promote, _slice1
from ember._src.numpy.searching import searchsorted
from ember._src.numpy.statistics import _bin_edges, _real_inexact
from ember._src.prims import elementwise as ew
from ember._src.prims import indexing as ix
from ember._src.prims import movement as mv
from ember._src.prims import reductions as red
from ember.errors import ShapeError

ArrayLike = Any


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


__all__ = ["histogram2d", "histogramdd"]

"""NumPy-level sorting, searching and set functions.

Everything here is written over lax-level primitives (``sort``, ``take``, ``scatter``, ``cumsum``,
comparisons), so it traces, differentiates where meaningful and batches:

* ``sort``/``argsort`` are stable; ``descending=True`` keeps equal elements in their original
  order (as JAX). NaNs sort last (first when descending); complex values sort lexicographically.
* ``partition``/``argpartition`` return a full sort, which satisfies NumPy's contract.
* ``searchsorted`` is a binary search with a fixed number of steps (``method="scan"``) or a
  compare-and-count (``method="compare_all"``); NaNs order last, as in NumPy.
* Functions whose result size depends on the data (``nonzero``, ``argwhere``, ``unique``, the
  set functions, ``compress``, ``extract``) take ``size=`` (and ``fill_value=``) as in JAX. Without
  ``size`` the input must be concrete; under ``jit`` they raise :class:`TracerError` saying so.
  With ``size``, results are truncated or padded (by default with the first result entry, which
  for sorted results is the smallest, or with 0 for indices).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

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
    _data_dependent,
    _full,
    _iota,
    _is_scalar,
    _isnan,
    _promote,
    _ravel,
    _scalar,
    _slice1,
    _static_int,
    _to_bool,
)
from ember._src.prims import elementwise as ew
from ember._src.prims import indexing as ix
from ember._src.prims import misc
from ember._src.prims import movement as mv
from ember._src.prims import reductions as red
from ember.errors import DTypeError, ShapeError

ArrayLike = Any

def _nan_last_lt(x: Any, y: Any) -> Any:
    """``x < y`` in the total order that sort uses (NaNs last; complex lexicographic)."""
    d = _aval(x).dtype
    if dt.is_complex(d):
        xr, xi, yr, yi = ew.real(x), ew.imag(x), ew.real(y), ew.imag(y)
        return ew.bitwise_or(ew.lt(xr, yr), ew.bitwise_and(ew.eq(xr, yr), ew.lt(xi, yi)))
    if d == dt.bool_:
        return ew.bitwise_and(ew.bitwise_not(x), y)
    lt = ew.lt(x, y)
    if dt.is_inexact(d):
        lt = ew.bitwise_or(lt, ew.bitwise_and(_isnan(y), ew.bitwise_not(_isnan(x))))
    return lt


def _sort_keys(x: Any) -> list[Any]:
    if dt.is_complex(_aval(x).dtype):
        return [ew.real(x), ew.imag(x)]
    return [x]


def _sort_with(x: Any, axis: int, descending: bool = False, payload: Sequence[Any] = ()) -> tuple:
    """Stable sort of ``x`` along ``axis``; returns (sorted x, sorted payloads...)."""
    if descending:
        x = mv.rev(x, (axis,))
        payload = [mv.rev(p, (axis,)) for p in payload]
    keys = _sort_keys(x)
    ops = [*keys, x, *payload] if len(keys) > 1 else [x, *payload]
    if len(ops) == 1:
        outs = (misc.sort(x, axis),)
    else:
        outs = misc.sort(ops, axis, True, len(keys))[len(keys) if len(keys) > 1 else 0:]
    if descending:
        outs = tuple(mv.rev(o, (axis,)) for o in outs)
    return tuple(outs)


def _argsort_along(x: Any, axis: int, descending: bool = False) -> tuple[Any, Any]:
    """(sorted values, int32 permutation) along ``axis`` (stable)."""
    idx = mv.broadcasted_iota(INDEX_DTYPE, _aval(x).shape, axis)
    # descending: _sort_with reverses the payload with x, so equal keys keep their original order
    return _sort_with(x, axis, descending, (idx,))


def _take(x: Any, idx: Any, axis: int = 0) -> Any:
    """Gather along ``axis`` with clamped indices; an empty axis gives the fill value."""
    mode = "fill" if _aval(x).shape[axis] == 0 else "clip"
    return ix.take(x, idx, axis, mode)


def _compact(mask: Any, size: int) -> tuple[Any, Any]:
    """Positions of the True entries of a 1-D ``mask``, compacted into ``size`` slots (padding 0),
    and their count (int32 scalar, not clipped to ``size``)."""
    n = _aval(mask).shape[0]
    m = _convert(mask, INDEX_DTYPE)
    pos = ew.sub(red.cumsum(m, 0), mv.full_like(m, 1)) if n else m
    tgt = ew.select(mask, pos, mv.full_like(pos, size))  # size is out of range: dropped
    out = ix.scatter(_full((size,), 0, INDEX_DTYPE), tgt, _iota(n), 0, "set")
    return out, red.reduce_sum(m)


def _size_of(name: str, mask: Any, size: Any) -> int:
    if size is not None:
        size = _static_int(size, "size")
        if size < 0:
            raise ValueError(f"{name}: size must be non-negative, got {size}")
        return size
    return int(np.count_nonzero(_data_dependent(name, mask)))


def _valid(count: Any, size: int) -> Any:
    """``arange(size) < count`` for an int32 0-d ``count``."""
    return ew.lt(_iota(size), mv.broadcast_in_dim(count, (size,), ()))


def _fill(values: Any, count: Any, size: int | None, fill_value: Any, default_first: bool = True) -> Any:
    """Replace the entries at and after ``count`` with ``fill_value`` (default: the first entry)."""
    if size is None:
        return values
    a = _aval(values)
    if fill_value is None:
        if not default_first:
            return values
        if a.shape[0] == 0:
            return values
        fill = mv.reshape(_slice1(values, 0, 1), ())
    else:
        fill = _scalar(fill_value, a.dtype)
    valid = _valid(count, size)
    valid = mv.broadcast_in_dim(valid, a.shape, (0,))
    return ew.select(valid, values, mv.broadcast_in_dim(fill, a.shape, ()))


# ---------------------------------------------------------------------------------------------
# Sorting
# ---------------------------------------------------------------------------------------------


def _check_sort_args(name: str, kind: Any, order: Any) -> None:
    if order is not None:
        raise NotImplementedError(f"{name}: `order` (structured arrays) is not supported")
    del kind  # every sort is a stable sort


def _sort_operand(name: str, a: ArrayLike, axis: int | None, kind: Any, order: Any) -> tuple[Any, int]:
    """The operand and normalized axis of a sorting function (``axis=None``: the flattened array)."""
    _check_sort_args(name, kind, order)
    x = _arr(a)
    if axis is None:
        x, axis = _ravel(x), 0
    return x, _axis(name, axis, _aval(x).ndim)


def sort(a: ArrayLike, axis: int | None = -1, kind: str | None = None, order: Any = None, *,
         stable: bool = True, descending: bool = False) -> Any:
    """Sorted copy of ``a`` along ``axis`` (``None``: flattened), as ``numpy.sort``.

    The sort is always stable; ``descending=True`` sorts from largest to smallest. NaNs sort
    last (first when descending); complex values sort by real part, then imaginary part.
    """
    x, axis = _sort_operand("sort", a, axis, kind, order)
    return _sort_with(x, axis, descending)[0]


def argsort(a: ArrayLike, axis: int | None = -1, kind: str | None = None, order: Any = None, *,
            stable: bool = True, descending: bool = False) -> Any:
    """Indices that sort ``a`` along ``axis`` (stable; int32), as ``numpy.argsort``."""
    x, axis = _sort_operand("argsort", a, axis, kind, order)
    return _argsort_along(x, axis, descending)[1]


def lexsort(keys: Any, axis: int = -1) -> Any:
    """Indirect stable sort by several keys; the last key is the primary one, as ``numpy.lexsort``."""
    if isinstance(keys, (Array, core.Tracer, np.ndarray)):
        k = _arr(keys)
        if _aval(k).ndim == 0:
            raise ShapeError("lexsort: keys must be a sequence of arrays or an array of rank >= 1")
        keys = [mv.squeeze(_slice1(k, i, i + 1), (0,)) for i in range(_aval(k).shape[0])]
    else:
        keys = [_arr(k) for k in keys]
    if not keys:
        raise TypeError("lexsort: need a sequence of keys with len > 0")
    shape = sh.broadcast_shapes(*[_aval(k).shape for k in keys], op="lexsort")
    keys = [_bcast(k, shape) for k in keys]
    if not shape:
        return _full((), 0, INDEX_DTYPE)
    axis = _axis("lexsort", axis, len(shape))
    ops = []
    for k in reversed(keys):
        ops.extend(_sort_keys(k))
    idx = mv.broadcasted_iota(INDEX_DTYPE, shape, axis)
    return misc.sort([*ops, idx], axis, True, len(ops))[-1]


def _check_kth(name: str, kth: Any, n: Any) -> None:
    ks = np.atleast_1d(np.asarray(kth))
    if ks.dtype.kind not in "iu":
        raise TypeError(f"{name}: kth must be an integer or a sequence of integers, got {kth!r}")
    if isinstance(n, int):
        for k in ks.tolist():
            if not -n <= k < n:
                raise ValueError(f"{name}: kth(={k}) out of bounds for an axis of size {n}")


def _partition_operand(name: str, a: ArrayLike, kth: Any, axis: int | None, kind: str,
                       order: Any) -> tuple[Any, int]:
    """The checked operand and axis of ``partition``/``argpartition`` (``axis=None``: flattened)."""
    x, axis = _sort_operand(name, a, axis, kind, order)
    _check_kth(name, kth, _aval(x).shape[axis])
    return x, axis


def partition(a: ArrayLike, kth: Any, axis: int | None = -1, kind: str = "introselect",
              order: Any = None) -> Any:
    """A copy of ``a`` where the ``kth`` element is in its sorted place, smaller ones before it
    and larger ones after it (ember returns the fully sorted array, which satisfies this)."""
    x, axis = _partition_operand("partition", a, kth, axis, kind, order)
    return _sort_with(x, axis)[0]


def argpartition(a: ArrayLike, kth: Any, axis: int | None = -1, kind: str = "introselect",
                 order: Any = None) -> Any:
    """Indices that partition ``a`` around ``kth`` (ember returns the stable argsort)."""
    x, axis = _partition_operand("argpartition", a, kth, axis, kind, order)
    return _argsort_along(x, axis)[1]


# ---------------------------------------------------------------------------------------------
# Searching
# ---------------------------------------------------------------------------------------------


def searchsorted(a: ArrayLike, v: ArrayLike, side: str = "left", sorter: ArrayLike = None, *,
                 method: str = "scan") -> Any:
    """Indices where ``v`` would be inserted into the sorted 1-D ``a`` to keep it sorted (int32).

    ``side="left"`` gives the first such index, ``"right"`` the last. ``sorter`` is an argsort of
    ``a``. ``method="scan"`` is a binary search with ``ceil(log2(len(a)+1))`` vectorized steps;
    ``"compare_all"`` compares every pair (faster for tiny ``a``). NaNs order last, as in NumPy.
    """
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    if method not in ("scan", "scan_unrolled", "compare_all", "sort"):
        raise ValueError(f"searchsorted: unknown method {method!r}")
    a, v = _promote("searchsorted", a, v)
    if _aval(a).ndim != 1:
        raise ShapeError(f"searchsorted: a must be 1-D, got shape {sh.shape_str(_aval(a).shape)}")
    if sorter is not None:
        s = _arr(sorter)
        if not dt.is_integer(_aval(s).dtype):
            raise DTypeError(f"searchsorted: sorter must be integer, got {_aval(s).dtype}")
        a = ix.take(a, s, 0, "clip")
    n = _aval(a).shape[0]
    vs = _aval(v).shape
    if method == "compare_all" or not isinstance(n, int):
        ab = mv.broadcast_in_dim(a, (*vs, n), (len(vs),))
        vb = mv.broadcast_in_dim(v, (*vs, n), tuple(range(len(vs))))
        hit = _nan_last_lt(ab, vb) if side == "left" else ew.bitwise_not(_nan_last_lt(vb, ab))
        return _count(hit, -1)
    lo = _full(vs, 0, INDEX_DTYPE)
    hi = _full(vs, n, INDEX_DTYPE)
    one = _full(vs, 1, INDEX_DTYPE)
    for _ in range(n.bit_length()):
        active = ew.lt(lo, hi)
        mid = ew.shift_right_logical(ew.add(lo, hi), one)
        am = ix.take(a, ew.min(mid, _full(vs, n - 1, INDEX_DTYPE)), 0, "clip")
        right = _nan_last_lt(am, v) if side == "left" else ew.bitwise_not(_nan_last_lt(v, am))
        lo = ew.select(ew.bitwise_and(active, right), ew.add(mid, one), lo)
        hi = ew.select(ew.bitwise_and(active, ew.bitwise_not(right)), mid, hi)
    return lo


def nonzero(a: ArrayLike, *, size: int | None = None, fill_value: Any = None) -> tuple[Any, ...]:
    """Indices of the non-zero elements, one int32 array per dimension, as ``numpy.nonzero``.

    Under ``jit`` pass ``size=``: the result is truncated or padded to ``size`` entries, padded
    with ``fill_value`` (default 0; a tuple gives one value per dimension).
    """
    x = _arr(a)
    shape = _aval(x).shape
    if not shape:
        raise ValueError("nonzero: calling nonzero on 0-d arrays is not allowed; use "
                         "atleast_1d(a).nonzero() instead")
    mask = _ravel(_to_bool(x))
    k = _size_of("nonzero", mask, size)
    flat, count = _compact(mask, k)
    fills = fill_value if isinstance(fill_value, (tuple, list)) else (fill_value,) * len(shape)
    if len(fills) != len(shape):
        raise ValueError(f"nonzero: fill_value has {len(fills)} entries for an array of rank {len(shape)}")
    out = []
    stride = 1
    for d in reversed(range(len(shape))):
        i = flat
        if stride != 1:
            i = ew.div(i, _full((k,), stride, INDEX_DTYPE))
        if d > 0:
            i = ew.rem(i, _full((k,), shape[d], INDEX_DTYPE))
        if size is not None and fills[d] is not None:
            i = _fill(i, count, k, fills[d])
        out.append(i)
        stride = stride * shape[d]
    return tuple(reversed(out))


def flatnonzero(a: ArrayLike, *, size: int | None = None, fill_value: Any = None) -> Any:
    """Indices of the non-zero elements of the flattened ``a`` (int32), as ``numpy.flatnonzero``."""
    return nonzero(_ravel(_arr(a)), size=size, fill_value=fill_value)[0]


def argwhere(a: ArrayLike, *, size: int | None = None, fill_value: Any = None) -> Any:
    """Indices of the non-zero elements as an ``(N, a.ndim)`` int32 array, as ``numpy.argwhere``."""
    x = _arr(a)
    if _aval(x).ndim == 0:
        cols = nonzero(mv.reshape(x, (1,)), size=size, fill_value=fill_value)
        return mv.slice_in_dim(mv.reshape(cols[0], (-1, 1)), 0, 0, 1, 1)
    cols = nonzero(x, size=size, fill_value=fill_value)
    k = _aval(cols[0]).shape[0]
    return mv.concatenate([mv.reshape(c, (k, 1)) for c in cols], 1)


def extract(condition: ArrayLike, arr: ArrayLike, *, size: int | None = None, fill_value: Any = 0) -> Any:
    """The elements of ``arr`` (flattened) where ``condition`` (flattened) is non-zero."""
    c = _ravel(_to_bool(_arr(condition)))
    return compress(c, _ravel(_arr(arr)), size=size, fill_value=fill_value)


def compress(condition: ArrayLike, a: ArrayLike, axis: int | None = None, *, size: int | None = None,
             fill_value: Any = 0, out: Any = None) -> Any:
    """The slices of ``a`` along ``axis`` where the 1-D ``condition`` is true, as ``numpy.compress``.

    A ``condition`` shorter than the axis selects among the leading entries only.
    """
    if out is not None:
        raise NotImplementedError("compress: `out` is not supported (ember arrays are immutable)")
    c = _arr(condition)
    if _aval(c).ndim != 1:
        raise ShapeError(f"compress: condition must be 1-D, got shape {sh.shape_str(_aval(c).shape)}")
    c = _to_bool(c)
    x = _arr(a)
    if axis is None:
        x, axis = _ravel(x), 0
    axis = _axis("compress", axis, _aval(x).ndim)
    n, m = _aval(x).shape[axis], _aval(c).shape[0]
    if m > n:
        extra = _slice1(c, n, m)
        if not isinstance(extra, core.Tracer) and core.concrete_or_error(extra, "condition").any():
            raise IndexError(f"compress: condition has a true entry at an index >= {n}, the size of "
                             f"axis {axis}")
        c = _slice1(c, 0, n)
    k = _size_of("compress", c, size)
    idx, count = _compact(c, k)
    res = _take(x, idx, axis)
    if size is not None and fill_value is not None:
        res = mv.moveaxis(_fill(mv.moveaxis(res, axis, 0), count, k, fill_value), 0, axis)
    return res


def select(condlist: Sequence[ArrayLike], choicelist: Sequence[ArrayLike], default: ArrayLike = 0) -> Any:
    """For each element, the choice of the first true condition, else ``default``, as ``numpy.select``."""
    condlist, choicelist = list(condlist), list(choicelist)
    if len(condlist) != len(choicelist):
        raise ValueError(f"select: condlist has {len(condlist)} entries, choicelist {len(choicelist)}")
    if not condlist:
        raise ValueError("select: an empty condition list is not possible")
    conds = []
    for i, c in enumerate(condlist):
        c = _full((), c, dt.bool_) if isinstance(c, (bool, np.bool_)) else _arr(c)
        if _aval(c).dtype != dt.bool_:
            raise DTypeError(f"select: invalid entry {i} in condlist: should be a boolean array, "
                             f"got {_aval(c).dtype}")
        conds.append(c)
    *choices, dflt = _promote("select", *choicelist, default)
    shape = sh.broadcast_shapes(*[_aval(v).shape for v in (*conds, *choices, dflt)], op="select")
    out = _bcast(dflt, shape)
    for c, v in zip(reversed(conds), reversed(choices)):
        out = ew.select(_bcast(c, shape), _bcast(v, shape), out)
    return out


def piecewise(x: ArrayLike, condlist: Any, funclist: Sequence[Any], *args: Any, **kw: Any) -> Any:
    """Evaluate a piecewise function, as ``numpy.piecewise``.

    Every function is evaluated on all of ``x`` and the results are selected elementwise (later
    conditions take precedence); a ``funclist`` one longer than ``condlist`` gives the value where
    no condition holds (otherwise 0). Entries of ``funclist`` may be scalars.
    """
    x = _arr(x)
    xs = _aval(x).shape
    if isinstance(condlist, (list, tuple)):
        first = condlist[0] if condlist else None
        if first is not None and len(xs) and not isinstance(first, (list, tuple, np.ndarray, Array,
                                                                    core.Tracer)):
            condlist = [condlist]
    else:  # a scalar or an array: NumPy splits it along its first axis unless it is one condition
        cl = _arr(condlist)
        if _aval(cl).ndim == 0 or (_aval(cl).ndim == 1 and len(xs)):
            condlist = [cl]
        else:
            condlist = [mv.squeeze(_slice1(cl, i, i + 1), (0,)) for i in range(_aval(cl).shape[0])]
    conds = [_bcast(_to_bool(_arr(c)), xs) for c in condlist]
    n = len(conds)
    if len(funclist) not in (n, n + 1):
        raise ValueError(f"piecewise: with {n} condition(s), funclist must have {n} or {n + 1} entries, "
                         f"got {len(funclist)}")

    def value(f: Any) -> Any:
        y = f(x, *args, **kw) if callable(f) else f
        (y,) = _promote("piecewise", y)
        return y

    if len(funclist) == n + 1:
        otherwise = value(funclist[-1])
    else:
        otherwise = 0
    vals = [value(f) for f in funclist[:n]]
    out_dtype = _aval(x).dtype
    out = _bcast(_convert(_arr(otherwise) if not _is_scalar(otherwise) else
                          _full((), otherwise, out_dtype), out_dtype), xs)
    for c, v in zip(conds, vals):
        out = ew.select(c, _bcast(_convert(v, out_dtype), xs), out)
    return out


# ---------------------------------------------------------------------------------------------
# unique and set functions
# ---------------------------------------------------------------------------------------------


def _first_of_runs(s: Any, equal_nan: bool) -> Any:
    """For sorted 1-D ``s``: True where an entry differs from its predecessor (and at 0)."""
    n = _aval(s).shape[0]
    if n == 0:
        return _full((0,), True, dt.bool_)
    cur, prev = _slice1(s, 1, n), _slice1(s, 0, n - 1)
    neq = ew.ne(cur, prev)
    if equal_nan and dt.is_inexact(_aval(s).dtype):
        neq = ew.bitwise_and(neq, ew.bitwise_not(ew.bitwise_and(_isnan(cur), _isnan(prev))))
    return mv.concatenate([_full((1,), True, dt.bool_), neq], 0)


def _first_of_row_runs(s: Any) -> Any:
    """For lexicographically sorted rows ``s`` (n, m): True where a row differs from the previous."""
    n, m = _aval(s).shape
    if n == 0:
        return _full((0,), True, dt.bool_)
    neq = ew.ne(_slice1(s, 1, n), _slice1(s, 0, n - 1))
    neq = red.reduce_or(neq, (1,)) if m else _full((n - 1,), False, dt.bool_)
    return mv.concatenate([_full((1,), True, dt.bool_), neq], 0)


def _counts(mask: Any, size: int, count: Any) -> Any:
    """Lengths of the runs that start where ``mask`` is True, padded with zeros to ``size``."""
    n = _aval(mask).shape[0]
    starts, _ = _compact(mask, size + 1)
    starts = ew.select(_valid(count, size + 1), starts, _full((size + 1,), n, INDEX_DTYPE))
    return ew.sub(_slice1(starts, 1, size + 1), _slice1(starts, 0, size))


def unique(ar: ArrayLike, return_index: bool = False, return_inverse: bool = False,
           return_counts: bool = False, axis: int | None = None, *, equal_nan: bool = True,
           size: int | None = None, fill_value: Any = None, sorted: bool = True) -> Any:  # noqa: A002
    """Sorted unique elements of ``ar`` (or unique slices along ``axis``), as ``numpy.unique``.

    Optionally also the indices of first occurrences, the inverse indices (shaped like ``ar``
    when ``axis`` is None) and the counts. ``equal_nan`` collapses NaNs into one entry. With
    ``size=`` (needed under ``jit``) the results are padded with ``fill_value`` (default: the
    smallest unique value), counts with 0.
    """
    x = _arr(ar)
    if axis is not None:
        return _unique_axis(x, axis, return_index, return_inverse, return_counts, size, fill_value)
    shape = _aval(x).shape
    flat = _ravel(x)
    n = _aval(flat).shape[0]
    s, perm = _argsort_along(flat, 0)
    mask = _first_of_runs(s, equal_nan)
    k = _size_of("unique", mask, size)
    ind, count = _compact(mask, k)
    if n == 0:
        fv = 0 if fill_value is None else fill_value
        values = _full((k,), fv, _aval(x).dtype)
    else:
        values = _fill(ix.take(s, ind, 0, "clip"), count, size, fill_value)
    return _unique_results(values, perm, mask, ind, count, k, return_index, return_inverse, return_counts,
                           shape)


def _unique_axis(x: Any, axis: int, return_index: bool, return_inverse: bool, return_counts: bool,
                 size: int | None, fill_value: Any) -> Any:
    a = _aval(x)
    axis = _axis("unique", axis, a.ndim)
    xm = mv.moveaxis(x, axis, 0)
    rest = _aval(xm).shape[1:]
    n, m = a.shape[axis], sh.size(rest)
    rows = mv.reshape(xm, (n, m))
    cols = [mv.squeeze(_slice1(rows, j, j + 1, 1), (1,)) for j in range(m)]
    keys: list[Any] = []
    for c in cols:
        keys.extend(_sort_keys(c))
    iota = _iota(n)
    perm = misc.sort([*keys, iota], 0, True, len(keys))[-1] if keys else iota
    srows = ix.take(rows, perm, 0, "clip") if n else rows
    mask = _first_of_row_runs(srows)
    k = _size_of("unique", mask, size)
    ind, count = _compact(mask, k)
    if n == 0:
        vals = _full((k, m), 0 if fill_value is None else fill_value, a.dtype)
    else:
        vals = _fill(ix.take(srows, ind, 0, "clip"), count, size, fill_value)
    values = mv.moveaxis(mv.reshape(vals, (k, *rest)), 0, axis)
    return _unique_results(values, perm, mask, ind, count, k, return_index, return_inverse, return_counts,
                           (n,))


def _unique_results(values: Any, perm: Any, mask: Any, ind: Any, count: Any, k: int, return_index: bool,
                    return_inverse: bool, return_counts: bool, inverse_shape: tuple) -> Any:
    """``unique``'s result: ``values`` and the requested index, inverse and count arrays, from the
    sorting permutation ``perm`` of the ``n`` entries (or rows), the mask of first entries of equal
    runs and the compacted positions ``ind`` (``count`` of them) of the ``k`` results."""
    n = _aval(mask).shape[0]
    res: list[Any] = [values]
    if return_index:
        res.append(_take(perm, ind) if n else _full((k,), 0, INDEX_DTYPE))
    if return_inverse:
        gid = ew.sub(red.cumsum(_convert(mask, INDEX_DTYPE), 0), _full((n,), 1, INDEX_DTYPE)) if n \
            else _full((0,), 0, INDEX_DTYPE)
        inv = ix.scatter(_full((n,), 0, INDEX_DTYPE), perm, gid, 0, "set")
        res.append(mv.reshape(inv, inverse_shape))
    if return_counts:
        res.append(_counts(mask, k, count) if n else _full((k,), 0, INDEX_DTYPE))
    return res[0] if len(res) == 1 else tuple(res)


class UniqueAllResult(NamedTuple):
    values: Any
    indices: Any
    inverse_indices: Any
    counts: Any


class UniqueCountsResult(NamedTuple):
    values: Any
    counts: Any


class UniqueInverseResult(NamedTuple):
    values: Any
    inverse_indices: Any


def unique_values(x: ArrayLike, /, *, size: int | None = None, fill_value: Any = None) -> Any:
    """Sorted unique values of ``x`` (NaNs are distinct), as the Array API ``unique_values``."""
    return unique(x, equal_nan=False, size=size, fill_value=fill_value)


def unique_counts(x: ArrayLike, /, *, size: int | None = None, fill_value: Any = None) -> UniqueCountsResult:
    """Unique values and their counts, as the Array API ``unique_counts``."""
    return UniqueCountsResult(*unique(x, return_counts=True, equal_nan=False, size=size,
                                      fill_value=fill_value))


def unique_inverse(x: ArrayLike, /, *, size: int | None = None,
                   fill_value: Any = None) -> UniqueInverseResult:
    """Unique values and the inverse indices (shaped like ``x``), as the Array API ``unique_inverse``."""
    return UniqueInverseResult(*unique(x, return_inverse=True, equal_nan=False, size=size,
                                       fill_value=fill_value))


def unique_all(x: ArrayLike, /, *, size: int | None = None, fill_value: Any = None) -> UniqueAllResult:
    """Unique values, first indices, inverse indices and counts, as the Array API ``unique_all``."""
    return UniqueAllResult(*unique(x, return_index=True, return_inverse=True, return_counts=True,
                                   equal_nan=False, size=size, fill_value=fill_value))


def isin(element: ArrayLike, test_elements: ArrayLike, assume_unique: bool = False, invert: bool = False,
         *, method: str = "auto", kind: str | None = None) -> Any:
    """Whether each element of ``element`` is in ``test_elements`` (bool, shaped like ``element``).

    ``method="compare_all"`` compares every pair; ``"sort"`` sorts ``test_elements`` and binary
    searches; ``"auto"`` picks by size. NaN is never found (NaN != NaN), as in NumPy.
    """
    if method not in ("auto", "compare_all", "sort", "binary_search"):
        raise ValueError(f"isin: unknown method {method!r}")
    e, t = _promote("isin", element, test_elements)
    t = _ravel(t)
    m = _aval(t).shape[0]
    es = _aval(e).shape
    if method == "auto":
        method = "compare_all" if (isinstance(m, int) and m <= 64) or dt.is_complex(_aval(e).dtype) \
            else "sort"
    if m == 0:
        found = _full(es, False, dt.bool_)
    elif method == "compare_all":
        eb = mv.broadcast_in_dim(e, (*es, m), tuple(range(len(es))))
        tb = mv.broadcast_in_dim(t, (*es, m), (len(es),))
        found = red.reduce_or(ew.eq(eb, tb), (len(es),))
    else:
        st = _sort_with(t, 0)[0]
        i = searchsorted(st, e)
        found = ew.eq(ix.take(st, ew.min(i, _full(es, m - 1, INDEX_DTYPE)), 0, "clip"), e)
    return ew.bitwise_not(found) if invert else found


def in1d(ar1: ArrayLike, ar2: ArrayLike, assume_unique: bool = False, invert: bool = False) -> Any:
    """``isin`` of the flattened ``ar1`` (deprecated in NumPy 2; kept for compatibility)."""
    return isin(_ravel(_arr(ar1)), ar2, assume_unique, invert)


def _sorted_unique_mask(x: Any, equal_nan: bool = True) -> tuple[Any, Any, Any]:
    """(sorted flat x, permutation, first-occurrence mask) of an array."""
    s, perm = _argsort_along(_ravel(x), 0)
    return s, perm, _first_of_runs(s, equal_nan)


def _masked_result(name: str, s: Any, keep: Any, size: int | None, fill_value: Any) -> tuple[Any, Any, Any]:
    k = _size_of(name, keep, size)
    ind, count = _compact(keep, k)
    if _aval(s).shape[0] == 0:
        return _full((k,), 0 if fill_value is None else fill_value, _aval(s).dtype), ind, count
    return _fill(ix.take(s, ind, 0, "clip"), count, size, fill_value), ind, count


def intersect1d(ar1: ArrayLike, ar2: ArrayLike, assume_unique: bool = False, return_indices: bool = False,
                *, size: int | None = None, fill_value: Any = None) -> Any:
    """Sorted unique values present in both arrays, as ``numpy.intersect1d``.

    With ``return_indices`` also the indices of the first occurrences in each (flattened) input.
    """
    a1, a2 = _promote("intersect1d", ar1, ar2)
    s1, p1, m1 = _sorted_unique_mask(a1)
    keep = ew.bitwise_and(m1, isin(s1, a2))
    vals, ind, _ = _masked_result("intersect1d", s1, keep, size, fill_value)
    if not return_indices:
        return vals
    k = _aval(vals).shape[0]
    i1 = _take(p1, ind) if _aval(s1).shape[0] else _full((k,), 0, INDEX_DTYPE)
    s2, p2 = _argsort_along(_ravel(a2), 0)
    n2 = _aval(s2).shape[0]
    if n2:
        j = searchsorted(s2, vals)
        i2 = ix.take(p2, ew.min(j, _full((k,), n2 - 1, INDEX_DTYPE)), 0, "clip")
    else:
        i2 = _full((k,), 0, INDEX_DTYPE)
    return vals, i1, i2


def union1d(ar1: ArrayLike, ar2: ArrayLike, *, size: int | None = None, fill_value: Any = None) -> Any:
    """Sorted unique values present in either array, as ``numpy.union1d``."""
    a1, a2 = _promote("union1d", ar1, ar2)
    return unique(mv.concatenate([_ravel(a1), _ravel(a2)], 0), size=size, fill_value=fill_value)


def setdiff1d(ar1: ArrayLike, ar2: ArrayLike, assume_unique: bool = False, *, size: int | None = None,
              fill_value: Any = None) -> Any:
    """Unique values of ``ar1`` not in ``ar2`` (sorted unless ``assume_unique``), as ``numpy.setdiff1d``."""
    a1, a2 = _promote("setdiff1d", ar1, ar2)
    if assume_unique:
        f1 = _ravel(a1)
        keep = isin(f1, a2, invert=True)
        return _masked_result("setdiff1d", f1, keep, size, fill_value)[0]
    s1, _, m1 = _sorted_unique_mask(a1)
    keep = ew.bitwise_and(m1, isin(s1, a2, invert=True))
    return _masked_result("setdiff1d", s1, keep, size, fill_value)[0]


def setxor1d(ar1: ArrayLike, ar2: ArrayLike, assume_unique: bool = False, *, size: int | None = None,
             fill_value: Any = None) -> Any:
    """Sorted unique values that are in exactly one of the arrays, as ``numpy.setxor1d``."""
    a1, a2 = _promote("setxor1d", ar1, ar2)
    s1, _, m1 = _sorted_unique_mask(a1)
    s2, _, m2 = _sorted_unique_mask(a2)
    k1 = ew.bitwise_and(m1, isin(s1, a2, invert=True))
    k2 = ew.bitwise_and(m2, isin(s2, a1, invert=True))
    both = mv.concatenate([s1, s2], 0)
    keep = mv.concatenate([k1, k2], 0)
    if _aval(both).shape[0]:
        both, keep = _sort_with(both, 0, payload=(keep,))
    return _masked_result("setxor1d", both, keep, size, fill_value)[0]


__all__ = [
    "argpartition", "argsort",
    "argwhere", "compress", "extract", "flatnonzero", "in1d", "intersect1d", "isin", "lexsort",
    "nonzero", "partition", "piecewise", "searchsorted", "select", "setdiff1d", "setxor1d", "sort",
    "union1d", "unique", "unique_all", "unique_counts", "unique_inverse", "unique_values",
]

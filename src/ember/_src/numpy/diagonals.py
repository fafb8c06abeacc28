"""NumPy triangles and diagonals: ``tri``, ``tril``, ``triu``, ``diagonal``, ``diag`` and ``trace``,
written over the movement primitives (masks from ``broadcasted_iota``); offsets and axes are static.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.numpy.manipulation import _arr, _ndim, _shape
from ember._src.numpy.operands import _concrete_int
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember._src.prims import reductions as red
from ember.errors import ShapeError

ArrayLike = Any


def _tri_mask(n: Any, m: Any, k: int, lower: bool) -> Any:
    rows = mv.broadcasted_iota(dt.int32, (n, m), 0)
    cols = mv.broadcasted_iota(dt.int32, (n, m), 1)
    shifted = ew.add(rows, mv.full_like(rows, k))
    return ew.le(cols, shifted) if lower else ew.ge(cols, shifted)


def _triangle(name: str, m: ArrayLike, k: int, lower: bool) -> Any:
    x = _arr(m)
    shape = _shape(x)
    if len(shape) < 2:
        raise ShapeError(f"{name}: input must be at least 2-d, got shape {sh.shape_str(shape)}")
    k = _concrete_int(k, f"{name}: k")
    mask = _tri_mask(shape[-2], shape[-1], k, lower)
    nd = len(shape)
    mask = mv.broadcast_in_dim(mask, shape, (nd - 2, nd - 1))
    return ew.select(mask, x, mv.full_like(x, 0))


def tril(m: ArrayLike, k: int = 0) -> Any:
    """The lower triangle of the last two axes (elements above the ``k``-th diagonal zeroed)."""
    return _triangle("tril", m, k, lower=True)


def triu(m: ArrayLike, k: int = 0) -> Any:
    """The upper triangle of the last two axes (elements below the ``k``-th diagonal zeroed)."""
    return _triangle("triu", m, k, lower=False)


def tri(N: int, M: int | None = None, k: int = 0, dtype: Any = None) -> Any:
    """An ``N x M`` array with ones at and below the ``k``-th diagonal (float32 by default)."""
    n = _concrete_int(N, "tri: N")
    m = n if M is None else _concrete_int(M, "tri: M")
    if n < 0 or m < 0:
        raise ShapeError(f"tri: negative dimensions are not allowed, got N={n}, M={m}")
    mask = _tri_mask(n, m, _concrete_int(k, "tri: k"), lower=True)
    return ew.convert_element_type(mask, dt.float32 if dtype is None else dt.user_dtype(dtype, "tri"))


def diagonal(a: ArrayLike, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Any:
    """The ``offset`` diagonal of the ``(axis1, axis2)`` planes, appended as the last axis."""
    x = _arr(a)
    shape = _shape(x)
    nd = len(shape)
    if nd < 2:
        raise ShapeError(f"diagonal: input must be at least 2-d, got shape {sh.shape_str(shape)}")
    a1 = sh.normalize_axis(axis1, nd, "diagonal axis1")
    a2 = sh.normalize_axis(axis2, nd, "diagonal axis2")
    if a1 == a2:
        raise ShapeError(f"diagonal: axis1 and axis2 cannot be the same (both are axis {a1})")
    offset = _concrete_int(offset, "diagonal: offset")
    rest = [i for i in range(nd) if i not in (a1, a2)]
    x = mv.transpose(x, (*rest, a1, a2))
    n1, n2 = _concrete_int(shape[a1], "diagonal: axis size"), _concrete_int(shape[a2], "diagonal: axis size")
    length = max(0, min(n1, n2 - offset)) if offset >= 0 else max(0, min(n1 + offset, n2))
    flat = mv.reshape(x, (*(shape[i] for i in rest), n1 * n2))
    if length == 0:
        return mv.slice_in_dim(flat, 0, 0, 1, -1)
    start = offset if offset >= 0 else -offset * n2
    stride = n2 + 1
    return mv.slice_in_dim(flat, start, start + (length - 1) * stride + 1, stride, -1)


def diag(v: ArrayLike, k: int = 0) -> Any:
    """The ``k``-th diagonal of a 2-d array, or a 2-d array with a 1-d ``v`` on its ``k``-th diagonal."""
    x = _arr(v)
    nd = _ndim(x)
    k = _concrete_int(k, "diag: k")
    if nd == 2:
        return diagonal(x, k)
    if nd != 1:
        raise ShapeError(f"diag: input must be 1-d or 2-d, got shape {sh.shape_str(_shape(x))}")
    n = _concrete_int(_shape(x)[0], "diag: size")
    size = n + abs(k)
    w = mv.pad(x, mv.full((), 0, core.get_aval(x).dtype), [(0, abs(k), 0)])
    w = mv.broadcast_in_dim(w, (size, size), (0,) if k >= 0 else (1,))
    rows = mv.broadcasted_iota(dt.int32, (size, size), 0)
    cols = mv.broadcasted_iota(dt.int32, (size, size), 1)
    on = ew.eq(ew.sub(cols, rows), mv.full_like(rows, k))
    return ew.select(on, w, mv.full_like(w, 0))


def _sum_dtype(d: np.dtype) -> np.dtype:
    if d == dt.bool_ or (d.kind == "i" and d.itemsize < 4):
        return dt.int32
    if d.kind == "u" and d.itemsize < 4:
        return dt.uint32
    return d


def trace(a: ArrayLike, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None,
          out: None = None) -> Any:
    """Sum of the ``offset`` diagonal (booleans and small integers accumulate in 32 bits)."""
    if out is not None:
        raise NotImplementedError("trace: the 'out' argument is not supported")
    d = diagonal(a, offset, axis1, axis2)
    aval = core.get_aval(d)
    target = _sum_dtype(aval.dtype) if dtype is None else dt.user_dtype(dtype, "trace")
    d = ew.convert_element_type(d, target, weak_type=aval.weak_type and dtype is None)
    return red.reduce_sum(d, (aval.ndim - 1,))


__all__ = ["diag", "diagonal", "trace", "tri", "tril", "triu"]

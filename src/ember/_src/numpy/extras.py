"""The remaining NumPy functions: comparisons (``isclose``, ``array_equal``), products (``kron``,
``cross``, ``vecdot``, ``matvec``), index helpers (``tril_indices``, ``ix_``, ...), functional
updates (``insert``, ``delete``, ``put_along_axis``, ``choose``), ``block``, window functions and a
few dtype utilities.

Everything is written over ember operations, so it traces, differentiates and batches. Functions whose
output shape depends on data (``trim_zeros``, ``real_if_close``, ``delete``/``insert`` index
arguments, ``choose(mode='raise')``) need concrete values and raise :class:`~ember.errors.TracerError`
under tracing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.array import Array, asarray_eager
from ember._src.core import get_aval as _aval
from ember._src.numpy import contractions as cn
from ember._src.numpy import diagonals as dg
from ember._src.numpy import linalg_functions as la
from ember._src.numpy import manipulation as mn
from ember._src.numpy import more_ufuncs as mu
from ember._src.numpy import reductions as rd
from ember._src.numpy import statistics as stats
from ember._src.numpy import ufuncs as uf
from ember._src.numpy.operands import _concrete_int
from ember._src.prims import elementwise as ew
from ember._src.prims import indexing as ix
from ember._src.prims import misc
from ember._src.prims import movement as mv
from ember.errors import DTypeError, ShapeError

ArrayLike = Any


def _arr(x: ArrayLike, dtype: Any = None) -> Any:
    if isinstance(x, (Array, core.Tracer)):
        return x if dtype is None else ew.convert_element_type(x, dt.user_dtype(dtype, "asarray"))
    return uf.asarray(x, dtype)


def _concrete(x: Any, what: str) -> np.ndarray:
    """A NumPy value for ``x``; raises TracerError for tracers."""
    if isinstance(x, core.Tracer):
        return np.asarray(core.concrete_or_error(x, what))
    if isinstance(x, Array):
        return np.asarray(x)
    return np.asarray(x)


def _idx_array(a: np.ndarray) -> Array:
    return asarray_eager(np.asarray(a, dtype=np.int32))


# ---------------------------------------------------------------------------------------------
# comparisons
# ---------------------------------------------------------------------------------------------


def isclose(a: ArrayLike, b: ArrayLike, rtol: ArrayLike = 1e-05, atol: ArrayLike = 1e-08,
            equal_nan: bool = False) -> Any:
    """Elementwise ``|a - b| <= atol + rtol * |b|``, as ``numpy.isclose``.

    Infinities are close only to an infinity of the same sign; NaNs are close to each other only with
    ``equal_nan=True``. Integer and bool inputs compare exactly after promotion to a float dtype.
    """
    x, y = uf.promote_args("isclose", a, b, to="inexact")
    rtol_ = uf.real(uf.asarray(rtol)) if not isinstance(rtol, (int, float)) else rtol
    atol_ = uf.real(uf.asarray(atol)) if not isinstance(atol, (int, float)) else atol
    diff = uf.absolute(uf.subtract(x, y))
    tol = uf.add(atol_, uf.multiply(rtol_, uf.absolute(y)))
    close = uf.less_equal(diff, tol)
    finite = uf.logical_and(uf.isfinite(x), uf.isfinite(y))
    out = uf.where(finite, close, uf.equal(x, y))
    if equal_nan:
        out = uf.logical_or(out, uf.logical_and(uf.isnan(x), uf.isnan(y)))
    return out


def allclose(a: ArrayLike, b: ArrayLike, rtol: ArrayLike = 1e-05, atol: ArrayLike = 1e-08,
             equal_nan: bool = False) -> Any:
    """Whether all elements are :func:`isclose` (a 0-d bool array, as JAX)."""
    return rd.all(isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan))


def array_equal(a1: ArrayLike, a2: ArrayLike, equal_nan: bool = False) -> Any:
    """Whether two arrays have the same shape and elements (a 0-d bool array)."""
    x, y = _arr(a1), _arr(a2)
    if _aval(x).shape != _aval(y).shape:
        return uf.asarray(False)
    eq = uf.equal(x, y)
    if equal_nan and (dt.is_inexact(_aval(x).dtype) or dt.is_inexact(_aval(y).dtype)):
        eq = uf.logical_or(eq, uf.logical_and(uf.isnan(x), uf.isnan(y)))
    return rd.all(eq)


def array_equiv(a1: ArrayLike, a2: ArrayLike) -> Any:
    """Whether two arrays are broadcast-compatible and equal elementwise (a 0-d bool array)."""
    x, y = _arr(a1), _arr(a2)
    try:
        sh.broadcast_shapes(_aval(x).shape, _aval(y).shape, op="array_equiv")
    except ValueError:
        return uf.asarray(False)
    return rd.all(uf.equal(x, y))


# ---------------------------------------------------------------------------------------------
# products
# ---------------------------------------------------------------------------------------------


def kron(a: ArrayLike, b: ArrayLike) -> Any:
    """Kronecker product, as ``numpy.kron``."""
    x, y = _arr(a), _arr(b)
    d, weak = dt.promote(dt.dtype_and_weak(x), dt.dtype_and_weak(y))
    x = ew.convert_element_type(x, d, weak_type=weak)
    y = ew.convert_element_type(y, d, weak_type=weak)
    nd = max(_aval(x).ndim, _aval(y).ndim)
    xs = (1,) * (nd - _aval(x).ndim) + tuple(_aval(x).shape)
    ys = (1,) * (nd - _aval(y).ndim) + tuple(_aval(y).shape)
    xr = mv.reshape(x, tuple(s for p in zip(xs, (1,) * nd) for s in p))
    yr = mv.reshape(y, tuple(s for p in zip((1,) * nd, ys) for s in p))
    prod = uf.multiply(xr, yr)
    return mv.reshape(prod, tuple(p * q for p, q in zip(xs, ys)))


def cross(a: ArrayLike, b: ArrayLike, axisa: int = -1, axisb: int = -1, axisc: int = -1,
          axis: int | None = None) -> Any:
    """Cross product of 2- or 3-element vectors, as ``numpy.cross`` (2-vectors give the z component)."""
    if axis is not None:
        axisa = axisb = axisc = axis
    x, y = _arr(a), _arr(b)
    x = mn.moveaxis(x, sh.normalize_axis(axisa, _aval(x).ndim, "cross axisa"), -1)
    y = mn.moveaxis(y, sh.normalize_axis(axisb, _aval(y).ndim, "cross axisb"), -1)
    na, nb = _aval(x).shape[-1], _aval(y).shape[-1]
    if na not in (2, 3) or nb not in (2, 3):
        raise ShapeError(f"cross: incompatible dimensions for cross product (dimension must be 2 or 3), "
                         f"got {na} and {nb}")
    x, y = uf.promote_args("cross", x, y) if na == nb else (x, y)
    if na != nb:
        d, weak = dt.promote(dt.dtype_and_weak(x), dt.dtype_and_weak(y))
        x, y = ew.convert_element_type(x, d, weak_type=weak), ew.convert_element_type(y, d, weak_type=weak)
    a0, a1 = x[..., 0], x[..., 1]
    b0, b1 = y[..., 0], y[..., 1]
    if na == 2 and nb == 2:
        return uf.subtract(uf.multiply(a0, b1), uf.multiply(a1, b0))
    a2 = x[..., 2] if na == 3 else None
    b2 = y[..., 2] if nb == 3 else None
    if a2 is None:
        c0 = uf.multiply(a1, b2)
        c1 = uf.negative(uf.multiply(a0, b2))
    elif b2 is None:
        c0 = uf.negative(uf.multiply(a2, b1))
        c1 = uf.multiply(a2, b0)
    else:
        c0 = uf.subtract(uf.multiply(a1, b2), uf.multiply(a2, b1))
        c1 = uf.subtract(uf.multiply(a2, b0), uf.multiply(a0, b2))
    c2 = uf.subtract(uf.multiply(a0, b1), uf.multiply(a1, b0))
    c0, c1, c2 = mn.broadcast_arrays(c0, c1, c2)
    out = mn.stack([c0, c1, c2], axis=-1)
    return mn.moveaxis(out, -1, sh.normalize_axis(axisc, _aval(out).ndim, "cross axisc"))


def vecdot(x1: ArrayLike, x2: ArrayLike, /, *, axis: int = -1) -> Any:
    """Vector dot product ``sum(conj(x1) * x2, axis)`` with broadcasting (Array API / NumPy 2)."""
    a, b = _arr(x1), _arr(x2)
    n1, n2 = _aval(a).shape, _aval(b).shape
    if not n1 or not n2:
        raise ShapeError("vecdot: inputs must be at least 1-dimensional")
    if n1[sh.normalize_axis(axis, len(n1), "vecdot axis")] != n2[sh.normalize_axis(axis, len(n2),
                                                                                   "vecdot axis")]:
        raise ShapeError(f"vecdot: sizes along axis {axis} differ: {sh.shape_str(n1)} and {sh.shape_str(n2)}")
    return la.vecdot(a, b, axis=axis)


def matvec(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    """Matrix-vector product ``(..., m, n) x (..., n) -> (..., m)`` with batch broadcasting."""
    a, b = _arr(x1), _arr(x2)
    if _aval(a).ndim < 2 or _aval(b).ndim < 1:
        raise ShapeError("matvec: x1 must be at least 2-d and x2 at least 1-d")
    return cn.matmul(a, mn.expand_dims(b, -1))[..., 0]


def vecmat(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    """Vector-matrix product ``conj(x1) (..., n) x (..., n, m) -> (..., m)``."""
    a, b = _arr(x1), _arr(x2)
    if _aval(a).ndim < 1 or _aval(b).ndim < 2:
        raise ShapeError("vecmat: x1 must be at least 1-d and x2 at least 2-d")
    return cn.matmul(mn.expand_dims(uf.conjugate(a), -2), b)[..., 0, :]


# ---------------------------------------------------------------------------------------------
# index helpers
# ---------------------------------------------------------------------------------------------


def ix_(*args: ArrayLike) -> tuple:
    """Open-mesh index arrays from 1-d sequences (booleans select their nonzero positions)."""
    out = []
    n = len(args)
    for i, a in enumerate(args):
        x = _arr(a)
        if _aval(x).ndim != 1:
            raise ShapeError(f"ix_: cross index must be 1-dimensional, argument {i} has shape "
                             f"{sh.shape_str(_aval(x).shape)}")
        if _aval(x).dtype == dt.bool_:
            x = _idx_array(np.nonzero(_concrete(x, "ix_ with a boolean argument"))[0])
        elif _aval(x).size == 0 and not dt.is_integer(_aval(x).dtype):
            x = ew.convert_element_type(x, dt.int32)
        shape = [1] * n
        shape[i] = _aval(x).shape[0]
        out.append(mv.reshape(x, tuple(shape)))
    return tuple(out)


def _tri_idx(n: int, k: int, m: int | None, lower: bool) -> tuple:
    n = _concrete_int(n, "n")
    m = n if m is None else _concrete_int(m, "m")
    k = _concrete_int(k, "k")
    rows, cols = np.nonzero(np.tri(n, m, k, dtype=bool) if lower else ~np.tri(n, m, k - 1, dtype=bool))
    return _idx_array(rows), _idx_array(cols)


def tril_indices(n: int, k: int = 0, m: int | None = None) -> tuple:
    """Row and column indices of the lower triangle of an ``(n, m)`` array (int32)."""
    return _tri_idx(n, k, m, lower=True)


def triu_indices(n: int, k: int = 0, m: int | None = None) -> tuple:
    """Row and column indices of the upper triangle of an ``(n, m)`` array (int32)."""
    return _tri_idx(n, k, m, lower=False)


def _shape2(arr: ArrayLike, name: str) -> tuple:
    s = tuple(np.shape(arr)) if not isinstance(arr, (Array, core.Tracer)) else tuple(_aval(arr).shape)
    if len(s) != 2:
        raise ShapeError(f"{name}: input array must be 2-d, got shape {sh.shape_str(s)}")
    return s


def tril_indices_from(arr: ArrayLike, k: int = 0) -> tuple:
    """:func:`tril_indices` for the shape of the 2-d ``arr``."""
    n, m = _shape2(arr, "tril_indices_from")
    return _tri_idx(n, k, m, lower=True)


def triu_indices_from(arr: ArrayLike, k: int = 0) -> tuple:
    """:func:`triu_indices` for the shape of the 2-d ``arr``."""
    n, m = _shape2(arr, "triu_indices_from")
    return _tri_idx(n, k, m, lower=False)


def diag_indices(n: int, ndim: int = 2) -> tuple:
    """Indices of the main diagonal of an ``n``-by-...-by-``n`` array of rank ``ndim``."""
    idx = _idx_array(np.arange(_concrete_int(n, "n")))
    return (idx,) * _concrete_int(ndim, "ndim")


def diag_indices_from(arr: ArrayLike) -> tuple:
    """:func:`diag_indices` for ``arr`` (rank >= 2, all dimensions equal)."""
    s = tuple(_aval(arr).shape) if isinstance(arr, (Array, core.Tracer)) else tuple(np.shape(arr))
    if len(s) < 2:
        raise ShapeError("diag_indices_from: input array must be at least 2-d")
    if len(set(s)) != 1:
        raise ShapeError(f"diag_indices_from: all dimensions must be equal, got {sh.shape_str(s)}")
    return diag_indices(s[0], len(s))


def mask_indices(n: int, mask_func: Callable, k: int = 0) -> tuple:
    """Indices where ``mask_func(ones((n, n)), k)`` is nonzero (e.g. ``mask_indices(3, triu)``)."""
    n = _concrete_int(n, "n")
    m = mask_func(uf.asarray(np.ones((n, n), dtype=np.int32)), k)
    rows, cols = np.nonzero(_concrete(m, "mask_indices"))
    return _idx_array(rows), _idx_array(cols)


def diagflat(v: ArrayLike, k: int = 0) -> Any:
    """A 2-d array with the flattened ``v`` on diagonal ``k``."""
    return dg.diag(mn.ravel(_arr(v)), k)


# ---------------------------------------------------------------------------------------------
# functional updates
# ---------------------------------------------------------------------------------------------


def append(arr: ArrayLike, values: ArrayLike, axis: int | None = None) -> Any:
    """``arr`` with ``values`` appended (flattened both when ``axis`` is None)."""
    a, v = _arr(arr), _arr(values)
    if axis is None:
        return mn.concatenate([mn.ravel(a), mn.ravel(v)], axis=0)
    return mn.concatenate([a, v], axis=axis)


def _flat_axis(a: Any, axis: int | None, name: str) -> tuple[Any, int]:
    if axis is None:
        return mn.ravel(a), 0
    return a, sh.normalize_axis(_concrete_int(axis, f"{name} axis"), _aval(a).ndim, f"{name} axis")


def _index_positions(obj: Any, n: int, name: str) -> np.ndarray:
    if isinstance(obj, slice):
        return np.arange(*obj.indices(n))
    return _concrete(obj, f"{name}: the index argument")


def delete(arr: ArrayLike, obj: Any, axis: int | None = None, *, assume_unique_indices: bool = False) -> Any:
    """``arr`` without the entries ``obj`` (int, slice, int array or boolean mask; concrete) along
    ``axis`` (the flattened array when None)."""
    a, ax = _flat_axis(_arr(arr), axis, "delete")
    n = _aval(a).shape[ax]
    keep = np.ones(n, dtype=bool)
    idx = _index_positions(obj, n, "delete")
    if idx.dtype == np.bool_:
        if idx.shape != (n,):
            raise ShapeError(f"delete: boolean mask has shape {idx.shape}, expected ({n},)")
        keep = ~idx
    else:
        if idx.size and not np.issubdtype(idx.dtype, np.integer):
            raise TypeError(f"delete: indices must be integers, got {idx.dtype}")
        idx = idx.astype(np.int64).reshape(-1)
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise IndexError(f"delete: index out of bounds for axis {ax} with size {n}")
        keep[idx] = False
    return ix.take(a, _idx_array(np.nonzero(keep)[0]), axis=ax, mode="clip")


def insert(arr: ArrayLike, obj: Any, values: ArrayLike, axis: int | None = None) -> Any:
    """``arr`` with ``values`` inserted before the indices ``obj`` (concrete) along ``axis``, as
    ``numpy.insert`` (values are cast to ``arr``'s dtype)."""
    a, ax = _flat_axis(_arr(arr), axis, "insert")
    shape = tuple(_aval(a).shape)
    n = shape[ax]
    d = _aval(a).dtype
    v = _arr(values)
    v = ew.convert_element_type(v, d, weak_type=_aval(a).weak_type)
    idx = _index_positions(obj, n, "insert")
    if idx.dtype == np.bool_:
        raise TypeError("insert: boolean index arrays are not supported; use nonzero() first")
    if idx.size and not np.issubdtype(idx.dtype, np.integer):
        raise TypeError(f"insert: indices must be integers, got {idx.dtype}")
    idx = idx.astype(np.int64)
    if idx.size == 1:  # as NumPy: one index inserts a whole block of values
        i = int(idx.reshape(()))
        if not -n <= i <= n:
            raise IndexError(f"insert: index {i} is out of bounds for axis {ax} with size {n}")
        i = i + n if i < 0 else i
        vnd = _aval(v).ndim
        if vnd < len(shape):
            v = mv.reshape(v, (1,) * (len(shape) - vnd) + tuple(_aval(v).shape))
        if idx.ndim == 0:
            v = mn.moveaxis(v, 0, ax)
        numnew = _aval(v).shape[ax]
        positions = np.full(numnew, i, dtype=np.int64)
    else:
        positions = idx.reshape(-1)
        if positions.size and (positions.min() < -n or positions.max() > n):
            raise IndexError(f"insert: index out of bounds for axis {ax} with size {n}")
        positions = np.where(positions < 0, positions + n, positions)
        numnew = positions.size
    target = shape[:ax] + (numnew,) + shape[ax + 1:]
    v = mn.broadcast_to(v, target)
    order = np.argsort(positions, kind="stable")
    final = np.empty(numnew, dtype=np.int64)
    final[order] = positions[order] + np.arange(numnew)
    src = np.empty(n + numnew, dtype=np.int64)
    is_new = np.zeros(n + numnew, dtype=bool)
    is_new[final] = True
    src[final] = n + np.arange(numnew)
    src[~is_new] = np.arange(n)
    both = mv.concatenate([a, v], ax)
    return ix.take(both, _idx_array(src), axis=ax, mode="clip")


def put_along_axis(arr: ArrayLike, indices: ArrayLike, values: ArrayLike, axis: int | None,
                   inplace: bool = True, *, mode: str | None = None) -> Any:
    """A copy of ``arr`` with ``values`` written at ``indices`` along ``axis`` (functional; pass
    ``inplace=False`` as in JAX). Negative indices wrap; out-of-bounds ones are dropped."""
    if inplace:
        raise ValueError("ember arrays are immutable: call put_along_axis(..., inplace=False)")
    a = _arr(arr)
    idx = _arr(indices)
    if not dt.is_integer(_aval(idx).dtype):
        raise DTypeError(f"put_along_axis: indices must be integers, got {_aval(idx).dtype}")
    if axis is None:
        a_shape = tuple(_aval(a).shape)
        flat = put_along_axis(mn.ravel(a), mn.ravel(idx), mn.ravel(_arr(values)), 0, inplace=False)
        return mv.reshape(flat, a_shape)
    nd = _aval(a).ndim
    if _aval(idx).ndim != nd:
        raise ShapeError(f"put_along_axis: indices have rank {_aval(idx).ndim}, arr has rank {nd}")
    ax = sh.normalize_axis(axis, nd, "put_along_axis axis")
    shape = tuple(_aval(a).shape)
    ishape = tuple(shape[d] if d != ax else _aval(idx).shape[ax] for d in range(nd))
    idx = mn.broadcast_to(idx, ishape)
    idx = ew.convert_element_type(idx, dt.int32) if _aval(idx).dtype != dt.int64 else idx
    idt = _aval(idx).dtype
    n = shape[ax]
    idx = uf.where(uf.less(idx, 0), uf.add(idx, n), idx)
    valid = uf.logical_and(uf.greater_equal(idx, 0), uf.less(idx, n))
    total = sh.size(shape)
    flat = mv.full(ishape, 0, idt)
    stride = 1
    for d in reversed(range(nd)):
        comp = idx if d == ax else mv.broadcasted_iota(idt, ishape, d)
        flat = ew.add(flat, ew.mul(comp, mv.full_like(comp, stride)))
        stride *= shape[d]
    flat = ew.select(valid, flat, mv.full_like(flat, total))
    v = ew.convert_element_type(_arr(values), _aval(a).dtype, weak_type=_aval(a).weak_type)
    v = mn.broadcast_to(v, ishape)
    m = sh.size(ishape)
    out = ix.scatter(mv.reshape(a, (total,)), mv.reshape(flat, (m,)), mv.reshape(v, (m,)), axis=0,
                     mode="set")
    return mv.reshape(out, shape)


def choose(a: ArrayLike, choices: Sequence[ArrayLike], out: None = None, mode: str = "raise") -> Any:
    """``choices[a[i]][i]`` with broadcasting, as ``numpy.choose`` (modes raise, wrap, clip;
    ``raise`` needs a concrete ``a``)."""
    if out is not None:
        raise NotImplementedError("choose: out= is not supported (ember arrays are immutable)")
    if mode not in ("raise", "wrap", "clip"):
        raise ValueError(f"choose: mode must be 'raise', 'wrap' or 'clip', got {mode!r}")
    idx = _arr(a)
    if not dt.is_integer(_aval(idx).dtype):
        raise DTypeError(f"choose: a must be an integer array, got {_aval(idx).dtype}")
    ch = [_arr(c) for c in (choices if not isinstance(choices, (Array, core.Tracer))
                            else [choices[i] for i in range(_aval(choices).shape[0])])]
    n = len(ch)
    if n == 0:
        raise ValueError("choose: choices must not be empty")
    if mode == "raise":
        v = _concrete(idx, "choose(mode='raise') index array (use mode='wrap' or 'clip' under jit)")
        if v.size and (v.min() < 0 or v.max() >= n):
            raise ValueError("choose: invalid entry in choice array")
    elif mode == "wrap":
        idx = uf.remainder(idx, n)
    else:
        idx = uf.clip(idx, 0, n - 1)
    d, weak = dt.promote(*(dt.dtype_and_weak(c) for c in ch))
    ch = [ew.convert_element_type(c, d, weak_type=weak) for c in ch]
    parts = mn.broadcast_arrays(idx, *ch)
    stacked = mn.stack(parts[1:], axis=0)
    sel = ew.convert_element_type(mn.expand_dims(parts[0], 0), dt.int32)
    return ix.take_along_axis(stacked, sel, 0)[0]


def resize(a: ArrayLike, new_shape: int | Sequence[int]) -> Any:
    """A new array of ``new_shape`` filled by repeating ``a`` (row-major), as ``numpy.resize``."""
    x = mn.ravel(_arr(a))
    shape = (new_shape,) if isinstance(new_shape, int) else tuple(_concrete_int(s, "resize: new_shape")
                                                                   for s in new_shape)
    if any(s < 0 for s in shape):
        raise ValueError("resize: all elements of new_shape must be non-negative")
    total = math.prod(shape)
    n = _aval(x).shape[0]
    if n == 0 or total == 0:
        return mv.full(shape, 0, _aval(x).dtype)
    reps = -(-total // n)
    y = mv.concatenate([x] * reps, 0) if reps > 1 else x
    return mv.reshape(mv.slice_in_dim(y, 0, total, 1, 0), shape)


def block(arrays: Any) -> Any:
    """Assemble an array from nested lists of blocks, as ``numpy.block``."""
    def depth(x: Any, path: str) -> int:
        if isinstance(x, tuple):
            raise TypeError(f"block: arrays is a tuple at {path or 'the top level'}; only lists may be "
                            "used to arrange blocks")
        if isinstance(x, list):
            if not x:
                raise ValueError(f"block: list at {path or 'the top level'} is empty")
            ds = {depth(e, f"{path}[{i}]") for i, e in enumerate(x)}
            if len(ds) != 1:
                raise ValueError(f"block: list depths are mismatched at {path or 'the top level'}")
            return 1 + ds.pop()
        return 0

    def leaves(x: Any) -> list:
        return [leaf for e in x for leaf in leaves(e)] if isinstance(x, list) else [x]

    dep = depth(arrays, "")
    arrs = [_arr(leaf) for leaf in leaves(arrays)]
    nd = max([dep] + [_aval(x).ndim for x in arrs])
    it = iter(arrs)

    def rec(x: Any, level: int) -> Any:
        if isinstance(x, list):
            parts = [rec(e, level + 1) for e in x]
            return mn.concatenate(parts, axis=-(dep - level)) if len(parts) > 1 else parts[0]
        y = next(it)
        s = tuple(_aval(y).shape)
        return mv.reshape(y, (1,) * (nd - len(s)) + s) if len(s) < nd else y

    return rec(arrays, 0)


def rollaxis(a: ArrayLike, axis: int, start: int = 0) -> Any:
    """Roll ``axis`` backwards until it lies before ``start``, as ``numpy.rollaxis``."""
    x = _arr(a)
    n = _aval(x).ndim
    axis = sh.normalize_axis(axis, n, "rollaxis axis")
    if start < 0:
        start += n
    if not 0 <= start < n + 1:
        raise ShapeError(f"rollaxis: start {start} out of range for an array of rank {n}")
    if axis < start:
        start -= 1
    if axis == start:
        return x
    axes = list(range(n))
    axes.remove(axis)
    axes.insert(start, axis)
    return mv.transpose(x, tuple(axes))


row_stack = mn.vstack


# ---------------------------------------------------------------------------------------------
# elementwise and dtype helpers
# ---------------------------------------------------------------------------------------------


pow = uf.power  # noqa: A001


def bitwise_count(x: ArrayLike, /) -> Any:
    """The number of 1 bits in ``|x|`` (uint8), as ``numpy.bitwise_count``."""
    (y,) = uf.promote_args("bitwise_count", x)
    d = _aval(y).dtype
    if not dt.is_integer(d):
        raise DTypeError(f"bitwise_count requires an integer dtype, got {d}")
    if d.kind == "i":
        y = uf.absolute(y)
    return ew.convert_element_type(ew.population_count(y), dt.uint8)


def sort_complex(a: ArrayLike) -> Any:
    """Sort along the last axis by real part, then imaginary part; the result is complex."""
    x = _arr(a)
    d = _aval(x).dtype
    cd = d if dt.is_complex(d) else (dt.complex128 if d in (dt.float64, dt.int64, dt.uint64)
                                     else dt.complex64)
    x = ew.convert_element_type(x, cd)
    if _aval(x).ndim == 0:
        return x
    re, im = ew.real(x), ew.imag(x)
    return misc.sort([re, im, x], dimension=-1, num_keys=2)[2]


def trim_zeros(filt: ArrayLike, trim: str = "fb") -> Any:
    """``filt`` (1-d, concrete) without leading (``'f'``) and/or trailing (``'b'``) zeros."""
    x = _arr(filt)
    if _aval(x).ndim != 1:
        raise ShapeError("trim_zeros: input must be 1-d")
    v = _concrete(x, "trim_zeros (the result length depends on the data)")
    nz = np.flatnonzero(v)
    n = v.shape[0]
    if nz.size == 0:
        return mv.slice_in_dim(x, 0, 0, 1, 0)
    t = trim.lower()
    start = int(nz[0]) if "f" in t else 0
    stop = int(nz[-1]) + 1 if "b" in t else n
    return mv.slice_in_dim(x, start, stop, 1, 0)


def real_if_close(a: ArrayLike, tol: float = 100) -> Any:
    """The real part of ``a`` if all imaginary parts are within ``tol`` machine epsilons of zero
    (``tol <= 1``: an absolute tolerance); otherwise ``a`` (concrete)."""
    x = _arr(a)
    d = _aval(x).dtype
    if not dt.is_complex(d):
        return x
    t = tol * float(np.finfo(dt.real_dtype(d)).eps) if tol > 1 else tol
    im = _concrete(ew.imag(x), "real_if_close (the result dtype depends on the data)")
    if np.all(np.abs(im) < t):
        return ew.real(x)
    return x


def fromfunction(function: Callable, shape: Sequence[int], *, dtype: Any = float, **kwargs: Any) -> Any:
    """``function(*index_grids, **kwargs)`` with one grid per dimension of ``shape``."""
    d = dt.user_dtype(dtype, "fromfunction")
    shape = tuple(_concrete_int(s, "fromfunction: shape") for s in shape)
    grids = [mv.broadcasted_iota(d, shape, i) for i in range(len(shape))]
    return function(*grids, **kwargs)


def _window_n(M: Any, name: str) -> int:
    return _concrete_int(M, f"{name}: M")


def _window(name: str, M: Any, f: Callable[[Any, int], Any]) -> Any:
    m = _window_n(M, name)
    d = dt.default_float
    if m < 1:
        return mv.full((0,), 0, d)
    if m == 1:
        return mv.full((1,), 1, d)
    n = mv.iota(d, m)
    return f(n, m)


def bartlett(M: int) -> Any:
    """The Bartlett (triangular) window of length ``M``."""
    return _window("bartlett", M, lambda n, m: uf.subtract(
        1, uf.absolute(uf.divide(uf.subtract(uf.multiply(n, 2), m - 1), m - 1))))


def blackman(M: int) -> Any:
    """The Blackman window of length ``M``."""
    def f(n: Any, m: int) -> Any:
        t = uf.divide(uf.multiply(n, 2 * math.pi), m - 1)
        return uf.add(uf.subtract(0.42, uf.multiply(0.5, uf.cos(t))),
                      uf.multiply(0.08, uf.cos(uf.multiply(t, 2))))
    return _window("blackman", M, f)


def hamming(M: int) -> Any:
    """The Hamming window of length ``M``."""
    return _window("hamming", M, lambda n, m: uf.subtract(
        0.54, uf.multiply(0.46, uf.cos(uf.divide(uf.multiply(n, 2 * math.pi), m - 1)))))


def hanning(M: int) -> Any:
    """The Hann window of length ``M``."""
    return _window("hanning", M, lambda n, m: uf.subtract(
        0.5, uf.multiply(0.5, uf.cos(uf.divide(uf.multiply(n, 2 * math.pi), m - 1)))))


def kaiser(M: int, beta: ArrayLike) -> Any:
    """The Kaiser window of length ``M`` and shape ``beta``."""
    def f(n: Any, m: int) -> Any:
        alpha = (m - 1) / 2.0
        r = uf.divide(uf.subtract(n, alpha), alpha)
        arg = uf.multiply(beta, uf.sqrt(uf.clip(uf.subtract(1, uf.square(r)), 0, None)))
        return uf.divide(mu.i0(arg), mu.i0(uf.asarray(beta, dt.default_float)))
    return _window("kaiser", M, f)


def common_type(*arrays: ArrayLike) -> type:
    """The inexact scalar type common to ``arrays`` (integers count as the default float, as JAX)."""
    if not arrays:
        return dt.float16.type
    kinds = []
    for a in arrays:
        d = _aval(a).dtype if isinstance(a, (Array, core.Tracer)) else dt.canonicalize(np.asarray(a).dtype)
        if dt.is_inexact(d):
            kinds.append(d)
        elif dt.is_integer(d):
            kinds.append(dt.to_float(d))
        else:
            raise TypeError(f"common_type: can't get common type for non-numeric array of dtype {d}")
    out = kinds[0]
    for k in kinds[1:]:
        out = dt.promote_types(out, k)
    return out.type


def unwrap(p: ArrayLike, discont: ArrayLike | None = None, axis: int = -1, *,
           period: ArrayLike = 2 * math.pi) -> Any:
    """Unwrap phases by replacing jumps larger than ``discont`` with their ``period`` complement."""
    (x,) = uf.promote_args("unwrap", p, to="inexact")
    nd = _aval(x).ndim
    ax = sh.normalize_axis(axis, nd, "unwrap axis")
    if _aval(x).shape[ax] < 2:
        return x
    dd = stats.diff(x, axis=ax)
    if discont is None:
        discont = uf.divide(period, 2) if not isinstance(period, (int, float)) else period / 2
    high = uf.divide(period, 2) if not isinstance(period, (int, float)) else period / 2
    low = uf.negative(high) if not isinstance(high, float) else -high
    ddmod = uf.add(uf.remainder(uf.subtract(dd, low), period), low)
    ddmod = uf.where(uf.logical_and(uf.equal(ddmod, low), uf.greater(dd, 0)), high, ddmod)
    correct = uf.subtract(ddmod, dd)
    correct = uf.where(uf.less(uf.absolute(dd), discont), 0, correct)
    n = _aval(x).shape[ax]
    head = mv.slice_in_dim(x, 0, 1, 1, ax)
    tail = uf.add(mv.slice_in_dim(x, 1, n, 1, ax), rd.cumsum(correct, axis=ax))
    return mv.concatenate([head, ew.convert_element_type(tail, _aval(head).dtype,
                                                         weak_type=_aval(head).weak_type)], ax)


def asanyarray(a: ArrayLike, dtype: Any = None) -> Any:
    """Same as :func:`asarray` (ember has no array subclasses)."""
    return uf.asarray(a, dtype)


def min_scalar_type(a: ArrayLike, /) -> np.dtype:
    """The smallest dtype that holds the (concrete) value ``a``, as ``numpy.min_scalar_type``."""
    return np.min_scalar_type(_concrete(a, "min_scalar_type"))


__all__ = [
    "allclose", "append", "array_equal", "array_equiv", "asanyarray", "bartlett", "bitwise_count",
    "blackman", "block", "choose", "common_type", "cross", "delete", "diag_indices", "diag_indices_from",
    "diagflat", "fromfunction", "hamming", "hanning", "insert", "isclose", "ix_", "kaiser", "kron",
    "mask_indices", "matvec", "min_scalar_type", "pow", "put_along_axis", "real_if_close", "resize",
    "rollaxis", "row_stack", "sort_complex", "tril_indices", "tril_indices_from", "trim_zeros",
    "triu_indices", "triu_indices_from", "unwrap", "vecdot", "vecmat",
]

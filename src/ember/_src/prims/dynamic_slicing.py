"""Dynamic slices: ``dynamic_slice`` and ``dynamic_update_slice``, whose start indices are scalar
operands clamped so the slice stays in bounds. Both are linear in their array operands; batched
start indices become a gather (``take``) or a scatter along each batched axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ember._src import ad_util as ad
from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.array import asarray_eager
from ember._src.core import Primitive, ShapedArray
from ember._src.prims import elementwise as ew
from ember._src.prims.indexing import scatter_p, take_p
from ember._src.prims.movement import (
    _linear_jvp,
    broadcast_in_dim,
    broadcasted_iota,
    full,
    full_like,
    moveaxis,
    reshape,
)
from ember.errors import DTypeError, ShapeError

dynamic_slice_p = Primitive("dynamic_slice")


def _clamp_starts(starts: Sequence[np.ndarray], shape: Sequence[int], sizes: Sequence[int]) -> list[int]:
    return [int(np.clip(int(s), 0, d - n)) for s, d, n in zip(starts, shape, sizes)]


def _ds_impl(x: np.ndarray, *starts: np.ndarray, slice_sizes: tuple) -> np.ndarray:
    st = _clamp_starts(starts, x.shape, slice_sizes)
    return x[tuple(np.s_[s:s + n] for s, n in zip(st, slice_sizes))]


def _check_starts(name: str, x: ShapedArray, starts: Sequence[ShapedArray]) -> None:
    if len(starts) != x.ndim:
        raise ShapeError(f"{name}: {len(starts)} start indices for an operand of rank {x.ndim}")
    for i, s in enumerate(starts):
        if s.shape != () or not dt.is_integer(s.dtype):
            raise DTypeError(f"{name}: start index {i} must be an integer scalar, got {s.str_short()}")


def _ds_abstract(x: ShapedArray, *starts: ShapedArray, slice_sizes: tuple) -> ShapedArray:
    _check_starts("dynamic_slice", x, starts)
    for i, (n, d) in enumerate(zip(slice_sizes, x.shape)):
        if isinstance(n, int) and isinstance(d, int) and not 0 <= n <= d:
            raise ShapeError(f"dynamic_slice: slice size {n} on axis {i} exceeds the size {d}")
    return ShapedArray(slice_sizes, x.dtype, x.weak_type)


def _ds_transpose(ct: Any, x: Any, *starts: Any, slice_sizes: tuple) -> list:
    if ad.is_zero(ct):
        return [ad.Zero(x.aval)] + [None] * len(starts)
    zeros = full(x.aval.shape, 0, x.aval.dtype)
    return [dynamic_update_slice(zeros, ct, starts)] + [None] * len(starts)


dynamic_slice_p.impl = _ds_impl
dynamic_slice_p.abstract_eval = _ds_abstract
dynamic_slice_p.transpose = _ds_transpose
_linear_jvp(dynamic_slice_p, 1)


def _clamped_start(s: Any, dim: Any, n: Any) -> Any:
    """``clip(s, 0, dim - n)`` elementwise in the start index' dtype (as the implementation does)."""
    return ew.max(ew.min(s, full_like(s, dim - n)), full_like(s, 0))


def _ds_batch(vals: list, dims: list, *, slice_sizes: tuple) -> tuple[list, list]:
    x, *starts = vals
    dx, *dss = dims
    zero = _index_scalar(0)
    if all(d is None for d in dss):
        x = moveaxis(x, dx, 0)
        size = core.get_aval(x).shape[0]
        return [dynamic_slice_p.bind(x, zero, *starts, slice_sizes=(size, *slice_sizes))], [0]
    # batched starts: slice the axes with unbatched starts, then gather each other axis at
    # per-example offsets (take with batched indices)
    size = next(core.get_aval(s).shape[d] for s, d in zip(starts, dss) if d is not None)
    xa = core.get_aval(x)
    if dx is not None:
        x = moveaxis(x, dx, 0)
        shape = xa.shape[:dx] + xa.shape[dx + 1:]
    else:
        shape = xa.shape
    st = [zero if d is not None else s for s, d in zip(starts, dss)]
    sz = [shape[i] if d is not None else n for i, (n, d) in enumerate(zip(slice_sizes, dss))]
    if tuple(sz) != tuple(shape):
        lead = [zero] if dx is not None else []
        lead_n = [core.get_aval(x).shape[0]] if dx is not None else []
        x = dynamic_slice_p.bind(x, *lead, *st, slice_sizes=(*lead_n, *sz))
    bx = 0 if dx is not None else None
    for i, (s, d) in enumerate(zip(starts, dss)):
        if d is None:
            continue
        n = slice_sizes[i]
        s = _clamped_start(moveaxis(s, d, 0), shape[i], n)
        sa = core.get_aval(s)
        idx = ew.add(broadcast_in_dim(s, (size, n), (0,)), broadcasted_iota(sa.dtype, (size, n), 1))
        outs, (bx,) = take_p.batch([x, idx], [bx, 0], axis=i, mode="clip")
        x = outs[0]
    return [x], [bx]


dynamic_slice_p.batch = _ds_batch


def dynamic_slice(x: Any, start_indices: Sequence[Any], slice_sizes: Sequence) -> Any:
    """``x[s0:s0+n0, ...]`` with traced starts, clamped so the slice stays in bounds."""
    starts = [_index_scalar(s) for s in start_indices]
    return dynamic_slice_p.bind(x, *starts, slice_sizes=sh.canonical_shape(slice_sizes))


def _index_scalar(s: Any) -> Any:
    if isinstance(s, (int, np.integer)):
        return asarray_eager(np.int32(s) if -(2**31) <= s < 2**31 else np.int64(s))
    a = core.get_aval(s)
    if a.shape != ():
        raise ShapeError(f"start index must be a scalar, got shape {sh.shape_str(a.shape)}")
    return s


dynamic_update_slice_p = Primitive("dynamic_update_slice")


def _dus_impl(x: np.ndarray, u: np.ndarray, *starts: np.ndarray) -> np.ndarray:
    st = _clamp_starts(starts, x.shape, u.shape)
    out = np.array(x)
    out[tuple(np.s_[s:s + n] for s, n in zip(st, u.shape))] = u
    return out


def _dus_abstract(x: ShapedArray, u: ShapedArray, *starts: ShapedArray) -> ShapedArray:
    _check_starts("dynamic_update_slice", x, starts)
    if u.ndim != x.ndim:
        raise ShapeError(f"dynamic_update_slice: update rank {u.ndim} differs from operand rank {x.ndim}")
    if u.dtype != x.dtype:
        raise DTypeError(f"dynamic_update_slice: update dtype {u.dtype} differs from operand {x.dtype}")
    for i, (n, d) in enumerate(zip(u.shape, x.shape)):
        if isinstance(n, int) and isinstance(d, int) and n > d:
            raise ShapeError(f"dynamic_update_slice: update size {n} on axis {i} exceeds size {d}")
    return ShapedArray(x.shape, x.dtype, x.weak_type)


def _dus_transpose(ct: Any, x: Any, u: Any, *starts: Any) -> list:
    ua = u.aval if isinstance(u, ad.UndefPrimal) else core.get_aval(u)
    if ad.is_zero(ct):
        res_x = ad.Zero(x.aval) if isinstance(x, ad.UndefPrimal) else None
        res_u = ad.Zero(ua) if isinstance(u, ad.UndefPrimal) else None
        return [res_x, res_u] + [None] * len(starts)
    res_x = dynamic_update_slice(ct, full(ua.shape, 0, ua.dtype), starts) \
        if isinstance(x, ad.UndefPrimal) else None
    res_u = dynamic_slice(ct, starts, ua.shape) if isinstance(u, ad.UndefPrimal) else None
    return [res_x, res_u] + [None] * len(starts)


dynamic_update_slice_p.impl = _dus_impl
dynamic_update_slice_p.abstract_eval = _dus_abstract
dynamic_update_slice_p.transpose = _dus_transpose
_linear_jvp(dynamic_update_slice_p, 2)


def _dus_batch(vals: list, dims: list) -> tuple[list, list]:
    x, u, *starts = vals
    dx, du, *dss = dims
    zero = _index_scalar(0)
    if all(d is None for d in dss):
        x, u = ew.bring_to_front([x, u], [dx, du])
        return [dynamic_update_slice_p.bind(x, u, zero, *starts)], [0]
    # batched starts: scatter (mode "set") at per-example flat offsets of every update element
    x, u, *_ = ew.bring_to_front([x, u, *starts], [dx, du, *dss])
    xa, ua = core.get_aval(x), core.get_aval(u)
    size, xs, us = xa.shape[0], xa.shape[1:], ua.shape[1:]
    n_x, n_u = sh.size(xs), sh.size(us)
    idt = dt.int64 if isinstance(n_x, int) and n_x >= 2**31 else dt.int32
    full_shape = (size, *us)
    flat: Any = None
    stride: Any = 1
    for i in reversed(range(len(xs))):
        s, d = starts[i], dss[i]
        s = _clamped_start(s, xs[i], us[i])
        if core.get_aval(s).dtype != idt:
            s = ew.convert_element_type(s, idt)
        sb = broadcast_in_dim(s, full_shape, (0,) if d is not None else ())  # a batched start is 1-d
        comp = ew.add(sb, broadcasted_iota(idt, full_shape, i + 1))
        if not (isinstance(stride, int) and stride == 1):
            comp = ew.mul(comp, full_like(comp, stride))
        flat = comp if flat is None else ew.add(flat, comp)
        stride = stride * xs[i]
    xf = reshape(x, (size, n_x))
    uf = reshape(u, (size, n_u))
    fi = reshape(flat, (size, n_u))
    outs, (bo,) = scatter_p.batch([xf, fi, uf], [0, 0, 0], axis=0, mode="set")
    return [reshape(moveaxis(outs[0], bo, 0), (size, *xs))], [0]


dynamic_update_slice_p.batch = _dus_batch


def dynamic_update_slice(x: Any, update: Any, start_indices: Sequence[Any]) -> Any:
    """``x`` with ``update`` written at ``start_indices`` (clamped in bounds)."""
    starts = [_index_scalar(s) for s in start_indices]
    return dynamic_update_slice_p.bind(x, update, *starts)

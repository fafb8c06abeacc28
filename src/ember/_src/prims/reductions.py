"""Reductions (sum, prod, max, min, and, or, argmax, argmin) and cumulative scans along an axis."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember._src import ad_util as ad
from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.core import Primitive, ShapedArray
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember._src.prims._rules import check_kind, upcast_lowp
from ember._src.prims.indexing import take_along_axis
from ember.errors import ShapeError


def _check_axes(name: str, x: ShapedArray, axes: tuple) -> None:
    for a in axes:
        if not 0 <= a < x.ndim:
            raise ShapeError(f"{name}: axis {a} is out of bounds for an array of rank {x.ndim}")
    if len(set(axes)) != len(axes):
        raise ShapeError(f"{name}: repeated axis in {axes}")


def _reduce_abstract(name: str, kind: str) -> Callable:
    def abstract_eval(x: ShapedArray, *, axes: tuple) -> ShapedArray:
        _check_axes(name, x, axes)
        check_kind(name, x.dtype, kind)
        if name in ("reduce_max", "reduce_min"):
            for a in axes:
                if isinstance(x.shape[a], int) and x.shape[a] == 0:
                    raise ShapeError(f"{name}: zero-size array along axis {a} has no identity "
                                     "(pass `initial=` or `where=` in ember.numpy)")
        return ShapedArray(tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype, x.weak_type)

    return abstract_eval


def _reduce_batch(p: Primitive) -> Callable:
    def batch(vals: list, dims: list, *, axes: tuple) -> tuple[list, list]:
        x = mv.moveaxis(vals[0], dims[0], 0)
        return [p.bind(x, axes=tuple(a + 1 for a in axes))], [0]

    return batch


def _declare(name: str, np_fn: Callable, kind: str) -> Primitive:
    p = Primitive(name, linear=name == "reduce_sum")

    def impl(x: np.ndarray, *, axes: tuple) -> np.ndarray:
        return np_fn(x, axis=axes) if axes else np.array(x)

    p.impl = upcast_lowp(impl) if kind != "intbool" else impl
    p.abstract_eval = _reduce_abstract(name, kind)
    p.batch = _reduce_batch(p)
    return p


_SUM_BLOCK = 128  # rows summed one after another before the block sums are added up in turn


def _sum_impl(x: np.ndarray, axis: tuple) -> np.ndarray:
    """``np.sum`` with a bounded rounding error for floats reduced over leading axes.

    NumPy sums pairwise only along the contiguous inner loop; a reduction over a leading axis
    (``sum(x, axis=0)`` of a C-contiguous matrix) adds the rows one at a time, so a float32
    column sum of 10^4 rows is good to about 1e-6 only. Each such axis is summed here in blocks
    of :data:`_SUM_BLOCK` rows, block sums in blocks again, until one block is left: the error
    grows with the block length times the (logarithmic) number of levels, as in the native
    backend's column sums (``native/scheduling/blockreduce.py``)."""
    axes = sorted(axis)
    k = 0  # the reduced axes that end the shape form a contiguous block NumPy sums pairwise
    while k < len(axes) and axes[-1 - k] == x.ndim - 1 - k:
        k += 1
    lead = axes[:len(axes) - k]
    if x.dtype.kind not in "fc" or not lead:
        return np.sum(x, axis=axis)
    y = np.sum(x, axis=tuple(axes[len(lead):])) if k else x
    for a in reversed(lead):  # the axes before the trailing ones keep their numbers
        y = _blocked_axis_sum(y, a)
    return y


def _blocked_axis_sum(x: np.ndarray, axis: int) -> np.ndarray:
    at = (slice(None),) * axis
    while x.shape[axis] > _SUM_BLOCK:
        n = x.shape[axis]
        full = n // _SUM_BLOCK * _SUM_BLOCK
        shape = x.shape[:axis] + (n // _SUM_BLOCK, _SUM_BLOCK) + x.shape[axis + 1:]
        sums = np.sum(x[at + (slice(0, full),)].reshape(shape), axis=axis + 1)
        if full < n:
            rest = np.sum(x[at + (slice(full, n),)], axis=axis, keepdims=True)
            sums = np.concatenate([sums, rest], axis=axis)
        x = sums
    return np.sum(x, axis=axis)


reduce_sum_p = _declare("reduce_sum", _sum_impl, "any")
reduce_prod_p = _declare("reduce_prod", np.prod, "any")
reduce_max_p = _declare("reduce_max", np.max, "any")
reduce_min_p = _declare("reduce_min", np.min, "any")
reduce_and_p = _declare("reduce_and", np.all, "intbool")
reduce_or_p = _declare("reduce_or", np.any, "intbool")
reduce_and_p.impl = lambda x, *, axes: np.all(x, axis=axes) if x.dtype == np.bool_ else \
    np.bitwise_and.reduce(x, axis=axes) if axes else np.array(x)
reduce_or_p.impl = lambda x, *, axes: np.any(x, axis=axes) if x.dtype == np.bool_ else \
    np.bitwise_or.reduce(x, axis=axes) if axes else np.array(x)


def _axes(x: Any, axes: Any) -> tuple:
    nd = core.get_aval(x).ndim
    if axes is None:
        return tuple(range(nd))
    return tuple(sorted(sh.normalize_axes(axes, nd)))


def reduce_sum(x: Any, axes: Sequence[int] | None = None) -> Any:
    """Sum over ``axes`` (all axes when ``None``)."""
    return reduce_sum_p.bind(x, axes=_axes(x, axes))


def reduce_prod(x: Any, axes: Sequence[int] | None = None) -> Any:
    return reduce_prod_p.bind(x, axes=_axes(x, axes))


def reduce_max(x: Any, axes: Sequence[int] | None = None) -> Any:
    return reduce_max_p.bind(x, axes=_axes(x, axes))


def reduce_min(x: Any, axes: Sequence[int] | None = None) -> Any:
    return reduce_min_p.bind(x, axes=_axes(x, axes))


def reduce_and(x: Any, axes: Sequence[int] | None = None) -> Any:
    return reduce_and_p.bind(x, axes=_axes(x, axes))


def reduce_or(x: Any, axes: Sequence[int] | None = None) -> Any:
    return reduce_or_p.bind(x, axes=_axes(x, axes))


def _expand_back(y: Any, shape: tuple, axes: tuple) -> Any:
    """Broadcast a reduced value back to the operand's shape."""
    kept = tuple(i for i in range(len(shape)) if i not in axes)
    return mv.broadcast_in_dim(y, shape, kept)


# -- rules ------------------------------------------------------------------------------------


def _sum_jvp(primals: list, tangents: list, *, axes: tuple) -> tuple[list, list]:
    out = reduce_sum_p.bind(primals[0], axes=axes)
    if ad.is_zero(tangents[0]):
        return [out], [ad.Zero.from_value(out)]
    return [out], [reduce_sum_p.bind(tangents[0], axes=axes)]


def _sum_transpose(ct: Any, x: Any, *, axes: tuple) -> list:
    if ad.is_zero(ct):
        return [ad.Zero(x.aval)]
    return [_expand_back(ct, x.aval.shape, axes)]


def _minmax_jvp(p: Primitive) -> Callable:
    def jvp(primals: list, tangents: list, *, axes: tuple) -> tuple[list, list]:
        (x,), (t,) = primals, tangents
        out = p.bind(x, axes=axes)
        if ad.is_zero(t) or not dt.is_inexact(core.get_aval(x).dtype):
            return [out], [ad.Zero.from_value(out)]
        shape = core.get_aval(x).shape
        mask = ew.convert_element_type(ew.eq(x, _expand_back(out, shape, axes)), core.get_aval(t).dtype)
        count = reduce_sum_p.bind(mask, axes=axes)  # ties share the tangent equally, as in JAX
        return [out], [ew.div(reduce_sum_p.bind(ew.mul(t, mask), axes=axes), count)]

    return jvp


def _prod_jvp(primals: list, tangents: list, *, axes: tuple) -> tuple[list, list]:
    (x,), (t,) = primals, tangents
    out = reduce_prod_p.bind(x, axes=axes)
    if ad.is_zero(t) or not dt.is_inexact(core.get_aval(x).dtype):
        return [out], [ad.Zero.from_value(out)]
    others = _prod_of_others(x, axes)
    return [out], [reduce_sum_p.bind(ew.mul(t, others), axes=axes)]


def _prod_of_others(x: Any, axes: tuple) -> Any:
    """For each element, the product of the other elements in its reduction group (zero-safe)."""
    a = core.get_aval(x)
    kept = [i for i in range(a.ndim) if i not in axes]
    xt = mv.transpose(x, (*kept, *axes))
    kshape = [a.shape[i] for i in kept]
    n = sh.size([a.shape[i] for i in axes])
    flat = mv.reshape(xt, (*kshape, n))
    ax = len(kshape)
    if isinstance(n, int) and n == 0:  # an empty group: nothing to multiply (and no first element)
        others = flat
    else:
        one = mv.full_like(mv.slice_in_dim(flat, 0, 1, 1, ax), 1)
        before = mv.concatenate([one, mv.slice_in_dim(cumprod(flat, ax), 0, n - 1, 1, ax)], ax)
        after = mv.concatenate([mv.slice_in_dim(cumprod(flat, ax, reverse=True), 1, n, 1, ax), one], ax)
        others = ew.mul(before, after)
    others = mv.reshape(others, [a.shape[i] for i in (*kept, *axes)])
    return mv.transpose(others, tuple(np.argsort((*kept, *axes))))


reduce_sum_p.jvp, reduce_sum_p.transpose = _sum_jvp, _sum_transpose
reduce_max_p.jvp, reduce_min_p.jvp = _minmax_jvp(reduce_max_p), _minmax_jvp(reduce_min_p)
reduce_prod_p.jvp = _prod_jvp
for _p in (reduce_and_p, reduce_or_p):
    _p.jvp = (lambda p: lambda primals, tangents, *, axes: (
        [o := p.bind(primals[0], axes=axes)], [ad.Zero.from_value(o)]))(_p)
for _p in (reduce_prod_p, reduce_max_p, reduce_min_p, reduce_and_p, reduce_or_p):
    _p.na("transpose", f"{_p.name} is not linear")

# ---------------------------------------------------------------------------------------------
# argmax / argmin
# ---------------------------------------------------------------------------------------------


def _arg_declare(name: str, np_fn: Callable) -> Primitive:
    p = Primitive(name)

    def impl(x: np.ndarray, *, axis: int, index_dtype: np.dtype) -> np.ndarray:
        if dt.is_inexact(x.dtype) and not dt.is_complex(x.dtype):
            # NaN wins, as in NumPy
            nan = np.isnan(x)
            if nan.any():
                return np.where(nan.any(axis=axis), np.argmax(nan, axis=axis),
                                np_fn(np.where(nan, 0, x), axis=axis)).astype(index_dtype)
        return np_fn(x, axis=axis).astype(index_dtype)

    def abstract_eval(x: ShapedArray, *, axis: int, index_dtype: np.dtype) -> ShapedArray:
        _check_axes(name, x, (axis,))
        if isinstance(x.shape[axis], int) and x.shape[axis] == 0:
            raise ShapeError(f"{name}: attempt to get {name} of an empty sequence (axis {axis})")
        return ShapedArray(tuple(d for i, d in enumerate(x.shape) if i != axis), index_dtype, False)

    def jvp(primals: list, tangents: list, **params: Any) -> tuple[list, list]:
        out = p.bind(primals[0], **params)
        return [out], [ad.Zero.from_value(out)]

    def batch(vals: list, dims: list, *, axis: int, index_dtype: np.dtype) -> tuple[list, list]:
        x = mv.moveaxis(vals[0], dims[0], 0)
        return [p.bind(x, axis=axis + 1, index_dtype=index_dtype)], [0]

    p.impl = upcast_lowp(impl)
    p.abstract_eval, p.jvp, p.batch = abstract_eval, jvp, batch
    p.na("transpose", f"{name} is not linear (integer output)")
    return p


argmax_p = _arg_declare("argmax", np.argmax)
argmin_p = _arg_declare("argmin", np.argmin)


def argmax(x: Any, axis: int, index_dtype: Any = dt.int32) -> Any:
    return argmax_p.bind(x, axis=sh.normalize_axis(axis, core.get_aval(x).ndim),
                         index_dtype=dt.canonicalize(index_dtype))


def argmin(x: Any, axis: int, index_dtype: Any = dt.int32) -> Any:
    return argmin_p.bind(x, axis=sh.normalize_axis(axis, core.get_aval(x).ndim),
                         index_dtype=dt.canonicalize(index_dtype))


# ---------------------------------------------------------------------------------------------
# Cumulative reductions
# ---------------------------------------------------------------------------------------------


def _cum_declare(name: str, np_fn: Callable, *, linear: bool = False) -> Primitive:
    p = Primitive(name, linear=linear)

    def impl(x: np.ndarray, *, axis: int, reverse: bool) -> np.ndarray:
        if reverse:
            x = np.flip(x, axis)
        y = np_fn(x, axis=axis).astype(x.dtype) if x.ndim else np.array(x)
        return np.flip(y, axis) if reverse else y

    def abstract_eval(x: ShapedArray, *, axis: int, reverse: bool) -> ShapedArray:
        _check_axes(name, x, (axis,))
        if name in ("cummax", "cummin"):
            check_kind(name, x.dtype, "real")
        return x

    def batch(vals: list, dims: list, *, axis: int, reverse: bool) -> tuple[list, list]:
        x = mv.moveaxis(vals[0], dims[0], 0)
        return [p.bind(x, axis=axis + 1, reverse=reverse)], [0]

    p.impl = upcast_lowp(impl)
    p.abstract_eval, p.batch = abstract_eval, batch
    return p


cumsum_p = _cum_declare("cumsum", np.cumsum, linear=True)
cumprod_p = _cum_declare("cumprod", np.cumprod)
cummax_p = _cum_declare("cummax", np.maximum.accumulate)
cummin_p = _cum_declare("cummin", np.minimum.accumulate)


def _cum(p: Primitive) -> Callable:
    def f(x: Any, axis: int = 0, reverse: bool = False) -> Any:
        return p.bind(x, axis=sh.normalize_axis(axis, core.get_aval(x).ndim), reverse=bool(reverse))

    f.__name__ = p.name
    f.__doc__ = f"Cumulative ``{p.name[3:]}`` along ``axis`` (from the end when ``reverse``)."
    return f


cumsum, cumprod, cummax, cummin = map(_cum, (cumsum_p, cumprod_p, cummax_p, cummin_p))


def _cumsum_jvp(primals: list, tangents: list, **params: Any) -> tuple[list, list]:
    out = cumsum_p.bind(primals[0], **params)
    if ad.is_zero(tangents[0]):
        return [out], [ad.Zero.from_value(out)]
    return [out], [cumsum_p.bind(tangents[0], **params)]


def _cumsum_transpose(ct: Any, x: Any, *, axis: int, reverse: bool) -> list:
    if ad.is_zero(ct):
        return [ad.Zero(x.aval)]
    return [cumsum_p.bind(ct, axis=axis, reverse=not reverse)]


def _cumprod_jvp(primals: list, tangents: list, *, axis: int, reverse: bool) -> tuple[list, list]:
    (x,), (t,) = primals, tangents
    out = cumprod_p.bind(x, axis=axis, reverse=reverse)
    if ad.is_zero(t) or not dt.is_inexact(core.get_aval(x).dtype):
        return [out], [ad.Zero.from_value(out)]
    # d out_i = sum_{j<=i} t_j prod_{k<=i, k!=j} x_k: an O(n^2) masked form that is exact at zeros
    a = core.get_aval(x)
    n = a.shape[axis]
    xm = mv.moveaxis(x, axis, -1)
    tm = mv.moveaxis(t, axis, -1)
    lead = xm_shape = core.get_aval(xm).shape
    del xm_shape
    i = mv.broadcasted_iota(dt.int32, (n, n), 0)
    j = mv.broadcasted_iota(dt.int32, (n, n), 1)
    tri = ew.ge(j, i) if reverse else ew.le(j, i)  # [i, j]: j contributes to out_i
    full_shape = (*lead[:-1], n, n)
    xb = mv.broadcast_in_dim(xm, full_shape, (*range(len(lead) - 1), len(lead)))  # x_k at [.., i, k]
    trib = mv.broadcast_in_dim(tri, full_shape, (len(lead) - 1, len(lead)))
    one = mv.full_like(xb, 1)
    inc = ew.select(trib, xb, one)  # factors of out_i
    tb = mv.broadcast_in_dim(tm, full_shape, (*range(len(lead) - 1), len(lead)))
    excl = _prod_of_others(inc, (len(lead),))  # prod over k != j of factors of out_i
    dt_out = reduce_sum_p.bind(ew.mul(ew.select(trib, tb, mv.full_like(tb, 0)), excl), axes=(len(lead),))
    return [out], [mv.moveaxis(dt_out, -1, axis)]


def _cumext_jvp(p: Primitive) -> Callable:
    def jvp(primals: list, tangents: list, *, axis: int, reverse: bool) -> tuple[list, list]:
        (x,), (t,) = primals, tangents
        out = p.bind(x, axis=axis, reverse=reverse)
        if ad.is_zero(t) or not dt.is_inexact(core.get_aval(x).dtype):
            return [out], [ad.Zero.from_value(out)]
        # the tangent follows the position where the running extreme was attained
        a = core.get_aval(x)
        n = a.shape[axis]
        idx = mv.broadcasted_iota(dt.int32, a.shape, axis)
        hit = ew.eq(x, out)
        pos = ew.select(hit, idx, mv.full_like(idx, -1 if not reverse else n))
        src = cummax(pos, axis, reverse) if not reverse else cummin(pos, axis, reverse)
        return [out], [take_along_axis(t, src, axis)]

    return jvp


cumsum_p.jvp, cumsum_p.transpose = _cumsum_jvp, _cumsum_transpose
cumprod_p.jvp = _cumprod_jvp
cummax_p.jvp, cummin_p.jvp = _cumext_jvp(cummax_p), _cumext_jvp(cummin_p)
for _p in (cumprod_p, cummax_p, cummin_p):
    _p.na("transpose", f"{_p.name} is not linear")


# What a cost model counts (``aot.estimate_cost``): input elements minus output elements.
for _p in (argmax_p, argmin_p, cummax_p, cummin_p, cumprod_p, cumsum_p, reduce_and_p, reduce_max_p,
           reduce_min_p, reduce_or_p, reduce_prod_p, reduce_sum_p):
    _p.cost_class = "reduction"


"""Gather and scatter along one axis: ``take`` and ``scatter``.

Every NumPy indexing form reduces to these two: basic indexing uses ``slice``/``reshape``, and
advanced (integer-array) indexing moves the indexed axes together, flattens them into one axis
with a combined index, and takes along it. ``x.at[idx].set/add/...`` scatters into a flattened
view the same way. Indices must already be non-negative here (``ember.numpy`` wraps negatives).

``take(x, idx, axis)`` has shape ``x.shape[:axis] + idx.shape + x.shape[axis+1:]``;
``scatter(x, idx, updates, axis, mode)`` takes updates of exactly that shape.
Out-of-range indices are clamped (``mode="clip"``) or produce a fill value (``mode="fill"``:
NaN for inexact dtypes, the minimum for signed, the maximum for unsigned, True for bool) when
gathering, and are dropped when scattering, as in JAX.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember._src import ad_util as ad
from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.core import Primitive, ShapedArray
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember.errors import DTypeError, ShapeError

GATHER_MODES = ("clip", "fill")
SCATTER_MODES = ("set", "add", "mul", "min", "max")


def fill_value(dtype: np.dtype) -> Any:
    if dt.is_inexact(dtype):
        return np.nan
    if dtype == dt.bool_:
        return True
    if np.dtype(dtype).kind == "u":
        return np.iinfo(dtype).max
    return np.iinfo(dtype).min


def _check_indices(name: str, idx: ShapedArray) -> None:
    if not dt.is_integer(idx.dtype):
        raise DTypeError(f"{name}: indices must be integers, got {idx.dtype}")


# ---------------------------------------------------------------------------------------------
# take (gather along one axis)
# ---------------------------------------------------------------------------------------------

take_p = Primitive("take")


def _take_out_shape(x: ShapedArray, idx: ShapedArray, axis: int) -> tuple:
    return (*x.shape[:axis], *idx.shape, *x.shape[axis + 1:])


def _take_abstract(x: ShapedArray, idx: ShapedArray, *, axis: int, mode: str) -> ShapedArray:
    _check_indices("take", idx)
    if not 0 <= axis < x.ndim:
        raise ShapeError(f"take: axis {axis} out of range for an operand of rank {x.ndim}")
    if mode not in GATHER_MODES:
        raise ValueError(f"take: mode must be one of {GATHER_MODES}, got {mode!r}")
    return ShapedArray(_take_out_shape(x, idx, axis), x.dtype, x.weak_type)


def _take_impl(x: np.ndarray, idx: np.ndarray, *, axis: int, mode: str) -> np.ndarray:
    n = x.shape[axis]
    if n == 0:
        if idx.size and mode == "clip":
            raise IndexError("take: cannot index into a zero-size axis")
        out_shape = (*x.shape[:axis], *idx.shape, *x.shape[axis + 1:])
        return np.full(out_shape, fill_value(x.dtype), dtype=x.dtype)
    safe = np.clip(idx, 0, n - 1)
    out = np.take(x, safe, axis=axis)
    if mode == "fill":
        bad = (idx < 0) | (idx >= n)
        if bad.any():
            bshape = [1] * axis + list(idx.shape) + [1] * (x.ndim - axis - 1)
            out = np.where(bad.reshape(bshape), np.asarray(fill_value(x.dtype), dtype=x.dtype), out)
    return out


def _take_jvp(primals: list, tangents: list, *, axis: int, mode: str) -> tuple[list, list]:
    x, idx = primals
    out = take_p.bind(x, idx, axis=axis, mode=mode)
    if ad.is_zero(tangents[0]):
        return [out], [ad.Zero.from_value(out)]
    t = take_p.bind(tangents[0], idx, axis=axis, mode=mode)
    if mode == "fill":  # the fill value is a constant: its tangent is zero
        t = _zero_oob(t, idx, core.get_aval(x).shape[axis], axis, core.get_aval(x).ndim)
    return [out], [t]


def _zero_oob(t: Any, idx: Any, n: Any, axis: int, xnd: int) -> Any:
    ia = core.get_aval(idx)
    ok = ew.bitwise_and(ew.ge(idx, mv.full_like(idx, 0)), ew.lt(idx, mv.full_like(idx, n)))
    ta = core.get_aval(t)
    okb = mv.broadcast_in_dim(ok, ta.shape, tuple(range(axis, axis + ia.ndim)))
    return ew.select(okb, t, mv.full_like(t, 0))


def _take_transpose(ct: Any, x: Any, idx: Any, *, axis: int, mode: str) -> list:
    if isinstance(idx, ad.UndefPrimal):
        raise TypeError("take is not linear in its indices")
    if ad.is_zero(ct):
        return [ad.Zero(x.aval), None]
    zeros = mv.full(x.aval.shape, 0, x.aval.dtype)
    if mode == "clip":  # clamped reads send their cotangent to the clamped position
        idx = _clip_indices(idx, x.aval.shape[axis])
    return [scatter_p.bind(zeros, idx, ct, axis=axis, mode="add"), None]


def _flatten_batch(x: Any, bdim: int, axis: int) -> tuple[Any, Any]:
    """Merge a leading batch dim of ``x`` into ``axis`` (which is shifted by one)."""
    x = mv.moveaxis(x, bdim, 0)
    a = core.get_aval(x)
    b = a.shape[0]
    # bring the indexed axis right after the batch axis, then merge them
    x = mv.moveaxis(x, axis + 1, 1)
    a2 = core.get_aval(x)
    return mv.reshape(x, (b * a2.shape[1], *a2.shape[2:])), a2.shape[1]


def _offset_indices(idx: Any, b: Any, n: Any) -> Any:
    """Add ``batch_index * n`` to batched indices (batch at dim 0)."""
    ia = core.get_aval(idx)
    base = mv.broadcasted_iota(ia.dtype, ia.shape, 0)
    return ew.add(idx, ew.mul(base, mv.full_like(base, n)))


def _clip_indices(idx: Any, n: Any) -> Any:
    return ew.max(ew.min(idx, mv.full_like(idx, n - 1)), mv.full_like(idx, 0))


def _take_batch(vals: list, dims: list, *, axis: int, mode: str) -> tuple[list, list]:
    x, idx = vals
    dx, di = dims
    if di is None:  # only the operand is batched: gather along the shifted axis
        x = mv.moveaxis(x, dx, 0)
        return [take_p.bind(x, idx, axis=axis + 1, mode=mode)], [0]
    idx = mv.moveaxis(idx, di, 0)
    if dx is None:  # only indices are batched: the batch dims of idx land at position `axis`
        return [take_p.bind(x, idx, axis=axis, mode=mode)], [axis]
    xa = core.get_aval(x)
    n = xa.shape[axis + (1 if dx <= axis else 0)] if dx is not None else None
    b = core.get_aval(idx).shape[0]
    flat, n = _flatten_batch(x, dx, axis)
    ok = None
    if mode == "fill":
        ok = ew.bitwise_and(ew.ge(idx, mv.full_like(idx, 0)), ew.lt(idx, mv.full_like(idx, n)))
    gi = _offset_indices(_clip_indices(idx, n), b, n)
    out = take_p.bind(flat, gi, axis=0, mode="clip")  # shape: idx.shape + rest
    ia = core.get_aval(idx)
    rest = core.get_aval(flat).shape[1:]
    # rest = x.shape without batch and axis; restore the layout [pre..., idx..., post...]
    pre = len(core.get_aval(mv.moveaxis(x, dx, 0)).shape[1:axis + 1])
    out = mv.transpose(out, (0, *range(ia.ndim, ia.ndim + pre), *range(1, ia.ndim),
                             *range(ia.ndim + pre, ia.ndim + len(rest))))
    if ok is not None:
        oa = core.get_aval(out)
        okb = mv.broadcast_in_dim(ok, oa.shape, (0, *range(1 + pre, pre + ia.ndim)))
        out = ew.select(okb, out, mv.full_like(out, fill_value(oa.dtype)))
    return [out], [0]


take_p.impl = _take_impl
take_p.abstract_eval = _take_abstract
take_p.jvp = _take_jvp
take_p.transpose = _take_transpose
take_p.batch = _take_batch


def take(x: Any, indices: Any, axis: int = 0, mode: str = "clip") -> Any:
    """Gather ``x`` along ``axis`` at non-negative ``indices`` (lax level)."""
    nd = core.get_aval(x).ndim
    return take_p.bind(x, indices, axis=sh.normalize_axis(axis, nd), mode=mode)


def take_along_axis(x: Any, indices: Any, axis: int) -> Any:
    """``out[..., i, ...] = x[..., indices[..., i, ...], ...]`` for ``indices`` shaped like ``x``
    except along ``axis`` (lax level: shapes must already match)."""
    xa, ia = core.get_aval(x), core.get_aval(indices)
    axis = sh.normalize_axis(axis, xa.ndim)
    if ia.ndim != xa.ndim:
        raise ShapeError(f"take_along_axis: indices have rank {ia.ndim}, operand has rank {xa.ndim}")
    for d in range(xa.ndim):
        if d != axis and ia.shape[d] != xa.shape[d]:
            raise ShapeError(f"take_along_axis: indices have size {sh.dim_str(ia.shape[d])} on axis {d}, "
                             f"operand has {sh.dim_str(xa.shape[d])}")
    flat_idx = _flat_along_axis_index(xa.shape, indices, axis)
    out = take_p.bind(mv.reshape(x, (sh.size(xa.shape),)), flat_idx, axis=0, mode="clip")
    return out


def _flat_along_axis_index(shape: tuple, indices: Any, axis: int) -> Any:
    ia = core.get_aval(indices)
    n = shape[axis]
    idx = _clip_indices(indices, n)
    flat = mv.full(ia.shape, 0, ia.dtype)
    stride: Any = 1
    for d in reversed(range(len(shape))):
        comp = idx if d == axis else mv.broadcasted_iota(ia.dtype, ia.shape, d)
        flat = ew.add(flat, ew.mul(comp, mv.full_like(comp, stride)))
        stride = stride * shape[d]
    return flat


# ---------------------------------------------------------------------------------------------
# scatter (along one axis)
# ---------------------------------------------------------------------------------------------

scatter_p = Primitive("scatter")

_UFUNC = {"add": np.add, "mul": np.multiply, "min": np.minimum, "max": np.maximum}


def _scatter_abstract(x: ShapedArray, idx: ShapedArray, upd: ShapedArray, *, axis: int,
                      mode: str) -> ShapedArray:
    _check_indices("scatter", idx)
    if mode not in SCATTER_MODES:
        raise ValueError(f"scatter: mode must be one of {SCATTER_MODES}, got {mode!r}")
    if not 0 <= axis < x.ndim:
        raise ShapeError(f"scatter: axis {axis} out of range for an operand of rank {x.ndim}")
    want = _take_out_shape(x, idx, axis)
    if upd.shape != want:
        raise ShapeError(f"scatter: updates have shape {sh.shape_str(upd.shape)}, expected "
                         f"{sh.shape_str(want)}")
    if upd.dtype != x.dtype:
        raise DTypeError(f"scatter: updates dtype {upd.dtype} differs from operand dtype {x.dtype}")
    return ShapedArray(x.shape, x.dtype, x.weak_type)


def _scatter_impl(x: np.ndarray, idx: np.ndarray, upd: np.ndarray, *, axis: int, mode: str) -> np.ndarray:
    out = np.array(x)
    n = x.shape[axis]
    flat = idx.reshape(-1)
    u = upd.reshape((*x.shape[:axis], flat.size, *x.shape[axis + 1:]))
    keep = (flat >= 0) & (flat < n)
    if not keep.all():
        flat = flat[keep]
        u = np.compress(keep, u, axis=axis)
    key = (np.s_[:],) * axis + (flat,)
    if mode == "set":
        out[key] = u
    else:
        _UFUNC[mode].at(out, key, u)
    return out


def _scatter_jvp(primals: list, tangents: list, *, axis: int, mode: str) -> tuple[list, list]:
    x, idx, u = primals
    tx, _, tu = tangents
    out = scatter_p.bind(x, idx, u, axis=axis, mode=mode)
    if ad.is_zero(tx) and ad.is_zero(tu):
        return [out], [ad.Zero.from_value(out)]
    if mode in ("add", "set"):
        return [out], [scatter_p.bind(ad.instantiate(tx), idx, ad.instantiate(tu), axis=axis, mode=mode)]
    zeros = mv.zeros_like(x)
    if mode == "mul":  # exact for unique indices
        t = ad.add_tangents(
            ad.Zero.from_value(out) if ad.is_zero(tx) else scatter_p.bind(tx, idx, u, axis=axis, mode="mul"),
            ad.Zero.from_value(out) if ad.is_zero(tu) else
            ew.mul(x, scatter_p.bind(zeros, idx, tu, axis=axis, mode="add")))
        return [out], [ad.instantiate(t)]
    # min / max: the tangent follows whichever value won (the operand on ties); unique indices
    from_upd = scatter_p.bind(ad.instantiate(tx), idx, ad.instantiate(tu), axis=axis, mode="set")
    return [out], [ew.select(ew.eq(out, x), ad.instantiate(tx), from_upd)]


def _scatter_transpose(ct: Any, x: Any, idx: Any, u: Any, *, axis: int, mode: str) -> list:
    if mode == "mul" and isinstance(x, ad.UndefPrimal) and not isinstance(u, ad.UndefPrimal):
        # linear in the operand for fixed updates: a diagonal scaling, its own transpose
        return [ad.Zero(x.aval) if ad.is_zero(ct) else scatter_p.bind(ct, idx, u, axis=axis, mode="mul"),
                None, None]
    if mode not in ("add", "set") or isinstance(idx, ad.UndefPrimal):
        raise TypeError(f"scatter with mode={mode!r} is not linear")
    ua = u.aval if isinstance(u, ad.UndefPrimal) else core.get_aval(u)
    if ad.is_zero(ct):
        return [ad.Zero(x.aval) if isinstance(x, ad.UndefPrimal) else None, None,
                ad.Zero(ua) if isinstance(u, ad.UndefPrimal) else None]
    res_x = res_u = None
    if isinstance(x, ad.UndefPrimal):
        res_x = ct if mode == "add" else scatter_p.bind(ct, idx, mv.full(ua.shape, 0, ua.dtype),
                                                        axis=axis, mode="set")
    if isinstance(u, ad.UndefPrimal):
        n = x.aval.shape[axis] if isinstance(x, ad.UndefPrimal) else core.get_aval(x).shape[axis]
        g = take_p.bind(ct, idx, axis=axis, mode="fill")
        res_u = _zero_oob(g, idx, n, axis, core.get_aval(ct).ndim)
    return [res_x, None, res_u]


def _scatter_batch(vals: list, dims: list, *, axis: int, mode: str) -> tuple[list, list]:
    x, idx, u = vals
    dx, di, du = dims
    size = next(core.get_aval(v).shape[d] for v, d in zip(vals, dims) if d is not None)
    if dx is None:
        xa = core.get_aval(x)
        x, dx = mv.broadcast_in_dim(x, (size, *xa.shape), tuple(range(1, xa.ndim + 1))), 0
    x = mv.moveaxis(x, dx, 0)
    if di is None and du is None:
        pass
    if di is None:
        # unbatched indices: scatter along the shifted axis with batched updates
        ia = core.get_aval(idx)
        if du is None:
            ua = core.get_aval(u)
            u = mv.broadcast_in_dim(u, (size, *ua.shape), tuple(range(1, ua.ndim + 1)))
        else:
            u = mv.moveaxis(u, du, 0)
        del ia
        return [scatter_p.bind(x, idx, u, axis=axis + 1, mode=mode)], [0]
    idx = mv.moveaxis(idx, di, 0)
    ia = core.get_aval(idx)
    if du is None:
        ua = core.get_aval(u)
        # updates are laid out [pre..., idx..., post...]; the batch dim goes at the front
        u = mv.broadcast_in_dim(u, (size, *ua.shape), tuple(range(1, ua.ndim + 1)))
    else:
        u = mv.moveaxis(u, du, 0)
    xa = core.get_aval(x)
    n = xa.shape[axis + 1]
    # flatten: operand -> [B*n, pre..., post...]; updates -> [B, idx..., pre..., post...]
    flat, _ = _flatten_batch(x, 0, axis)
    pre = axis
    ua = core.get_aval(u)
    k = ia.ndim - 1  # index dims after the batch dim
    u = mv.transpose(u, (0, *range(1 + pre, 1 + pre + k), *range(1, 1 + pre),
                         *range(1 + pre + k, ua.ndim)))
    gi = _offset_indices(idx, size, n)
    # drop out-of-range indices by sending them past the end of the flattened axis
    bad = ew.bitwise_or(ew.lt(idx, mv.full_like(idx, 0)), ew.ge(idx, mv.full_like(idx, n)))
    gi = ew.select(bad, mv.full_like(gi, size * n), gi)
    res = scatter_p.bind(flat, gi, u, axis=0, mode=mode)
    fa = core.get_aval(res)
    res = mv.reshape(res, (size, n, *fa.shape[1:]))
    res = mv.moveaxis(res, 1, axis + 1)
    return [res], [0]


scatter_p.impl = _scatter_impl
scatter_p.abstract_eval = _scatter_abstract
scatter_p.jvp = _scatter_jvp
scatter_p.transpose = _scatter_transpose
scatter_p.batch = _scatter_batch


def scatter(x: Any, indices: Any, updates: Any, axis: int = 0, mode: str = "set") -> Any:
    """Write ``updates`` into ``x`` along ``axis`` at ``indices`` (``mode``: set/add/mul/min/max)."""
    nd = core.get_aval(x).ndim
    return scatter_p.bind(x, indices, updates, axis=sh.normalize_axis(axis, nd), mode=mode)


# ---------------------------------------------------------------------------------------------
# check_index (a bounds check that raises, for importers with raising semantics)
# ---------------------------------------------------------------------------------------------

check_index_p = Primitive("check_index")


def _check_index_abstract(idx: ShapedArray, *, bound: Any, negative: bool, what: str) -> ShapedArray:
    _check_indices("check_index", idx)
    return ShapedArray(idx.shape, idx.dtype, idx.weak_type)


def check_index_message(idx: np.ndarray, bound: int, negative: bool, what: str) -> str | None:
    """The error text for the first index of ``idx`` outside ``[0, bound)`` (``[-bound, bound)``
    when ``negative``), or None when every index is in range."""
    flat = np.asarray(idx).reshape(-1)
    lo = -bound if negative else 0
    bad = (flat < lo) | (flat >= bound)
    if not bad.any():
        return None
    k = int(np.argmax(bad))
    pos = tuple(int(p) for p in np.unravel_index(k, np.shape(idx)))
    where = f" (at {list(pos)} of the index)" if flat.size > 1 else ""
    return (f"{what}: index {int(flat[k])}{where} is out of range for size {bound} "
            f"(valid: {lo} <= index < {bound})")


def _check_index_impl(idx: np.ndarray, *, bound: Any, negative: bool, what: str) -> np.ndarray:
    msg = check_index_message(idx, int(bound), negative, what)
    if msg is not None:
        raise IndexError(msg)
    return idx


def _check_index_jvp(primals: list, tangents: list, **params: Any) -> tuple[list, list]:
    out = check_index_p.bind(primals[0], **params)
    return [out], [ad.Zero.from_value(out)]


check_index_p.impl = _check_index_impl
check_index_p.abstract_eval = _check_index_abstract
check_index_p.jvp = _check_index_jvp
check_index_p.batch = lambda vals, dims, **params: ([check_index_p.bind(vals[0], **params)], [dims[0]])
check_index_p.na("transpose", "check_index acts on integer indices, which have no cotangent")


def check_index(indices: Any, bound: Any, what: str, negative: bool = False) -> Any:
    """``indices`` unchanged, after checking each lies in ``[0, bound)`` (``[-bound, bound)`` when
    ``negative``); otherwise the call raises ``IndexError`` starting with ``what`` and naming the
    first offending index and the bound. Compiled natively, the check is one pass over the indices
    inside the program (no copy back to Python unless it fails)."""
    return check_index_p.bind(indices, bound=bound, negative=bool(negative), what=str(what))

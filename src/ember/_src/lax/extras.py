"""More ``ember.lax`` functions written over the primitives: ``clamp``, ``square``, the ``*_in_dim``
dynamic slicing helpers, ``top_k``, ``sort_key_val``, ``scatter_add``, ``cumlogsumexp`` and
``reduce_precision``.

As the rest of ``ember.lax`` they do not broadcast or promote, except that ``clamp`` accepts scalar
bounds (as JAX does).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.array import Array, asarray_eager
from ember._src.core import get_aval as _aval
from ember._src.custom_derivatives import custom_jvp
from ember._src.numpy.more_ufuncs import logaddexp
from ember._src.prims import dynamic_slicing as dsl
from ember._src.prims import elementwise as ew
from ember._src.prims import indexing as ix
from ember._src.prims import misc
from ember._src.prims import movement as mv
from ember._src.prims.random_bits import bitcast_convert_type
from ember.errors import DTypeError, ShapeError

ArrayLike = Any


def _as_operand(x: ArrayLike) -> Any:
    return x if isinstance(x, (Array, core.Tracer)) else asarray_eager(x)


def _like(v: ArrayLike, x: Any, name: str) -> Any:
    """``v`` with the shape and dtype of ``x``: a scalar is broadcast, an array must match."""
    xa = _aval(x)
    if not isinstance(v, (Array, core.Tracer)):
        arr = np.asarray(v)
        if arr.ndim == 0:
            return mv.full(xa.shape, arr.item(), xa.dtype)
        v = asarray_eager(arr.astype(xa.dtype))
    va = _aval(v)
    if va.dtype != xa.dtype:
        raise DTypeError(f"{name}: operand dtypes differ: {va.dtype} and {xa.dtype}")
    if va.shape == ():
        return mv.broadcast_in_dim(v, xa.shape, ())
    if va.shape != xa.shape:
        raise ShapeError(f"{name}: bound has shape {sh.shape_str(va.shape)}, operand has "
                         f"{sh.shape_str(xa.shape)} (bounds must be scalars or match)")
    return v


def clamp(min: ArrayLike, x: ArrayLike, max: ArrayLike) -> Any:  # noqa: A002
    """``min(max(x, min), max)`` elementwise; ``min``/``max`` are scalars or shaped like ``x``."""
    x = _as_operand(x)
    lo, hi = _like(min, x, "clamp"), _like(max, x, "clamp")
    t = ew.select(ew.lt(x, lo), lo, x)
    return ew.select(ew.gt(t, hi), hi, t)


def square(x: ArrayLike) -> Any:
    """``x * x`` elementwise."""
    return ew.integer_pow(_as_operand(x), 2)


def _starts(x: Any, start_index: Any, axis: int) -> list:
    nd = _aval(x).ndim
    s = start_index if isinstance(start_index, (Array, core.Tracer)) else asarray_eager(
        np.asarray(start_index, dtype=np.int32))
    zero = mv.full((), 0, _aval(s).dtype)
    return [s if d == axis else zero for d in range(nd)]


def dynamic_slice_in_dim(operand: ArrayLike, start_index: ArrayLike, slice_size: int, axis: int = 0) -> Any:
    """``dynamic_slice`` along one ``axis`` (full extent on the others)."""
    x = _as_operand(operand)
    nd = _aval(x).ndim
    axis = sh.normalize_axis(axis, nd, "dynamic_slice_in_dim axis")
    sizes = list(_aval(x).shape)
    sizes[axis] = int(slice_size)
    return dsl.dynamic_slice(x, _starts(x, start_index, axis), sizes)


def dynamic_index_in_dim(operand: ArrayLike, index: ArrayLike, axis: int = 0, keepdims: bool = True) -> Any:
    """The slice of size 1 at ``index`` along ``axis`` (the axis dropped unless ``keepdims``)."""
    x = _as_operand(operand)
    axis = sh.normalize_axis(axis, _aval(x).ndim, "dynamic_index_in_dim axis")
    out = dynamic_slice_in_dim(x, index, 1, axis)
    return out if keepdims else mv.squeeze(out, (axis,))


def dynamic_update_slice_in_dim(operand: ArrayLike, update: ArrayLike, start_index: ArrayLike,
                                axis: int) -> Any:
    """``dynamic_update_slice`` at ``start_index`` along ``axis`` (0 on the others)."""
    x = _as_operand(operand)
    axis = sh.normalize_axis(axis, _aval(x).ndim, "dynamic_update_slice_in_dim axis")
    return dsl.dynamic_update_slice(x, _as_operand(update), _starts(x, start_index, axis))


def top_k(operand: ArrayLike, k: int) -> tuple[Any, Any]:
    """The ``k`` largest entries along the last axis, descending, and their int32 indices (ties go to
    the lower index; NaN counts as the largest value)."""
    x = _as_operand(operand)
    xa = _aval(x)
    if xa.ndim == 0:
        raise ShapeError("top_k: operand must have rank >= 1")
    k = int(k)
    n = xa.shape[-1]
    if not 0 <= k <= n:
        raise ValueError(f"top_k: k={k} must be between 0 and the size of the last axis ({n})")
    last = xa.ndim - 1
    iota = mv.broadcasted_iota(dt.int32, xa.shape, last)
    _, _, vals, idx = misc.sort([x, ew.neg(iota), x, iota], dimension=last, num_keys=2)
    vals, idx = mv.rev(vals, (last,)), mv.rev(idx, (last,))
    return mv.slice_in_dim(vals, 0, k, 1, last), mv.slice_in_dim(idx, 0, k, 1, last)


def sort_key_val(keys: ArrayLike, values: ArrayLike, dimension: int = -1, is_stable: bool = True) -> tuple:
    """Sort ``keys`` along ``dimension`` and permute ``values`` the same way."""
    k, v = _as_operand(keys), _as_operand(values)
    return misc.sort([k, v], dimension=dimension, is_stable=is_stable, num_keys=1)


def scatter_add(operand: ArrayLike, indices: ArrayLike, updates: ArrayLike, axis: int = 0) -> Any:
    """``operand`` with ``updates`` added at ``indices`` along ``axis`` (duplicates accumulate,
    out-of-bounds indices are dropped).

    Unlike JAX's ``lax.scatter_add`` (general ``ScatterDimensionNumbers``), ember's scatter works along
    one axis: ``updates`` has ``operand``'s shape with ``axis`` replaced by ``indices.shape``.
    """
    return ix.scatter(_as_operand(operand), _as_operand(indices), _as_operand(updates), axis=axis, mode="add")


def cumlogsumexp(operand: ArrayLike, axis: int = 0, reverse: bool = False) -> Any:
    """``log(cumsum(exp(x)))`` along ``axis`` computed stably (a log-depth prefix scan of
    ``logaddexp``, so no entry overflows or underflows through a common shift)."""
    x = _as_operand(operand)
    xa = _aval(x)
    if not dt.is_float(xa.dtype):
        raise DTypeError(f"cumlogsumexp requires a real floating dtype, got {xa.dtype}")
    axis = sh.normalize_axis(axis, xa.ndim, "cumlogsumexp axis")
    n = xa.shape[axis]
    y = mv.rev(x, (axis,)) if reverse else x
    neg_inf = mv.full((), -np.inf, xa.dtype)
    shift = 1
    while shift < n:
        cfg = [(0, 0, 0)] * xa.ndim
        cfg[axis] = (shift, 0, 0)
        shifted = mv.slice_in_dim(mv.pad(y, neg_inf, cfg), 0, n, 1, axis)
        y = logaddexp(y, shifted)
        shift *= 2
    return mv.rev(y, (axis,)) if reverse else y


_FLOAT_LAYOUT = {  # dtype: (total bits, exponent bits, mantissa bits)
    np.dtype(np.float16): (16, 5, 10), dt.bfloat16: (16, 8, 7),
    np.dtype(np.float32): (32, 8, 23), np.dtype(np.float64): (64, 11, 52),
}


def _reduce_precision_bits(x: Any, exponent_bits: int, mantissa_bits: int) -> Any:
    d = _aval(x).dtype
    nbits, nexp, nmant = _FLOAT_LAYOUT[d]
    ud = np.dtype(f"uint{nbits}")
    bits = bitcast_convert_type(x, ud)

    def c(v: int) -> Any:
        return mv.full_like(bits, v)

    if mantissa_bits < nmant:
        drop = nmant - mantissa_bits
        last_bit_mask = 1 << drop
        base_bias = (last_bit_mask >> 1) - 1
        last_bit = ew.shift_right_logical(ew.bitwise_and(bits, c(last_bit_mask)), c(drop))
        bias = ew.add(last_bit, c(base_bias))
        trunc_mask = ((1 << nbits) - 1) & ~(last_bit_mask - 1)
        bits = ew.bitwise_and(ew.add(bits, bias), c(trunc_mask))
    if exponent_bits < nexp:
        sign_mask = 1 << (nbits - 1)
        exp_mask = ((1 << nexp) - 1) << nmant
        bias = (1 << (nexp - 1)) - 1
        reduced_bias = (1 << (exponent_bits - 1)) - 1
        max_exp = bias + reduced_bias
        min_exp = bias - reduced_bias
        x_exp = ew.bitwise_and(bits, c(exp_mask))
        overflow = ew.gt(x_exp, c(max_exp << nmant))
        underflow = ew.le(x_exp, c(min_exp << nmant))
        signed_zero = ew.bitwise_and(bits, c(sign_mask))
        signed_inf = ew.bitwise_or(signed_zero, c(exp_mask))
        bits = ew.select(overflow, signed_inf, ew.select(underflow, signed_zero, bits))
    out = bitcast_convert_type(bits, d)
    if mantissa_bits > 0:
        out = ew.select(ew.ne(x, x), x, out)  # NaN stays NaN (its payload may not survive rounding)
    return out


def reduce_precision(operand: ArrayLike, exponent_bits: int, mantissa_bits: int) -> Any:
    """Round ``operand`` to a float format with ``exponent_bits``/``mantissa_bits`` (XLA's emulation:
    round-to-nearest-even on the mantissa, overflow to infinity, values below the smallest normal of
    the reduced format flushed to (signed) zero); the result keeps ``operand``'s dtype.

    The derivative passes the tangent through unchanged (straight-through; JAX additionally rounds
    the tangent, which would not be linear-transposable here).
    """
    x = _as_operand(operand)
    d = _aval(x).dtype
    if d not in _FLOAT_LAYOUT:
        raise DTypeError(f"reduce_precision requires a real floating dtype, got {d}")
    exponent_bits, mantissa_bits = int(exponent_bits), int(mantissa_bits)
    if exponent_bits < 1 or mantissa_bits < 0:
        raise ValueError("reduce_precision: exponent_bits must be >= 1 and mantissa_bits >= 0")
    return _reduce_precision_fn(exponent_bits, mantissa_bits)(x)


_RP_CACHE: dict = {}


def _reduce_precision_fn(exponent_bits: int, mantissa_bits: int) -> Any:
    key = (exponent_bits, mantissa_bits)
    if key not in _RP_CACHE:

        @custom_jvp
        def rp(x: Any) -> Any:
            return _reduce_precision_bits(x, exponent_bits, mantissa_bits)

        @rp.defjvp
        def _rp_jvp(primals: Sequence[Any], tangents: Sequence[Any]) -> tuple[Any, Any]:
            (x,), (t,) = primals, tangents
            return rp(x), t

        _RP_CACHE[key] = rp
    return _RP_CACHE[key]


__all__ = [
    "bitcast_convert_type", "clamp", "cumlogsumexp", "dynamic_index_in_dim", "dynamic_slice_in_dim",
    "dynamic_update_slice_in_dim", "reduce_precision", "scatter_add", "sort_key_val", "square", "top_k",
]

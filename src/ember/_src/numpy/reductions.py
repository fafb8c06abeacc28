"""NumPy-level reductions: sums, products, extrema, statistics, logical and cumulative reductions.

Everything is written over the lax-level reduction primitives (``reduce_*``, ``argmax``,
``cumsum``, ...), so it traces, differentiates and batches. Dtype rules follow JAX:

* ``sum``/``prod``/``cumsum``/``cumprod`` of bool and of integers narrower than 32 bits accumulate
  in ``int32`` (``uint32`` for unsigned);
* ``mean``/``var``/``std`` of integers and bools give the default float (float64 for 64-bit ints);
* float16/bfloat16 accumulate in float32 and are cast back at the end.

Axes may be ``None`` (all), an int or a tuple of ints, negative or not; ``keepdims`` keeps the
reduced axes as size 1. An empty reduction has the identity of its operation (0 for ``sum``, 1 for
``prod``); ``max``/``min`` of an empty axis without ``initial`` raise ``ValueError`` naming the axis.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

import numpy as np

from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.core import get_aval as _aval
from ember._src.numpy import ufuncs
from ember._src.numpy.operands import _isnan
from ember._src.numpy.ufuncs import _convert, _to_bool
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember._src.prims import reductions as red
from ember.errors import DTypeError, ShapeError

ArrayLike = Any
Axis = Any  # None | int | tuple[int, ...]

# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def _check_out(name: str, out: Any) -> None:
    if out is not None:
        raise NotImplementedError(f"{name}: the `out` argument is not supported (ember arrays are "
                                  "immutable); use the returned value")


def _reduce_axes(name: str, ndim: int, axis: Axis) -> tuple[int, ...]:
    """Normalized, sorted reduction axes; errors name the function and the axis."""
    if axis is None:
        return tuple(range(ndim))
    if ndim == 0:  # a 0-d operand accepts an integer axis 0 / -1 (or an empty tuple), as np.sum
        if isinstance(axis, (tuple, list)):
            if axis:
                raise ShapeError(f"{name}: axis {axis[0]} is out of bounds for an array of dimension 0")
        elif sh.normalize_axis(axis, 1, "axis") != 0:
            raise ShapeError(f"{name}: axis {axis} is out of bounds for an array of dimension 0")
        return ()
    try:
        return tuple(sorted(sh.normalize_axes(axis, ndim, "axis")))
    except ShapeError as e:
        raise type(e)(f"{name}: {e}") from None


def _keep(y: Any, shape: tuple, axes: tuple[int, ...], keepdims: bool) -> Any:
    """Re-insert the reduced ``axes`` of an operand of ``shape`` as size-1 dims when ``keepdims``."""
    if not keepdims:
        return y
    return mv.reshape(y, tuple(1 if i in axes else d for i, d in enumerate(shape)))


def _full(x: Any, value: Any) -> Any:
    return mv.full_like(x, value)


def _sum_dtype(d: np.dtype) -> np.dtype:
    """The accumulation dtype of ``sum``/``prod``/``cumsum`` for an input of dtype ``d`` (as JAX)."""
    if d == dt.bool_:
        return dt.default_int
    if d.kind == "i" and d.itemsize < 4:
        return dt.int32
    if d.kind == "u" and d.itemsize < 4:
        return dt.uint32
    return d


def _acc_dtype(d: np.dtype) -> np.dtype:
    """float16/bfloat16 accumulate in float32."""
    return dt.float32 if dt.is_low_precision(d) else d


def _mask(name: str, where: ArrayLike, shape: tuple) -> Any:
    """``where`` as a bool array broadcast to ``shape``."""
    m = ufuncs.asarray(where)
    if _aval(m).dtype != dt.bool_:
        m = ew.ne(m, _full(m, 0))
    ms = _aval(m).shape
    if ms != shape:
        if sh.broadcast_shapes(shape, ms, op=f"{name}: where") != tuple(shape):
            raise ShapeError(f"{name}: where mask of shape {sh.shape_str(ms)} does not broadcast to "
                             f"the operand shape {sh.shape_str(shape)}")
        m = mv.broadcast_to_rank_shape(m, shape)
    return m


def _reduced_shape(shape: tuple, axes: tuple[int, ...]) -> tuple:
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _count(shape: tuple, axes: tuple[int, ...], mask: Any, dtype: np.dtype, keepdims: bool) -> Any:
    """The number of elements each reduction sees: a Python int when static, else an array."""
    if mask is not None:
        return _keep(red.reduce_sum(_convert(mask, dtype), axes), shape, axes, keepdims)
    n = sh.size([shape[i] for i in axes])
    if isinstance(n, int):
        return n
    # a symbolic count: the sum of ones over the reduced dims (folds to a constant per binding)
    ones = mv.full(tuple(shape[i] for i in axes), 1, dtype)
    return red.reduce_sum(ones, tuple(range(len(axes))))


def _as_operand(x: Any, like: Any) -> Any:
    """``x`` (a Python number or an array) as an array broadcast to the shape and dtype of ``like``."""
    la = _aval(like)
    if isinstance(x, (int, float, complex, bool, np.generic)):
        return mv.full(la.shape, x, la.dtype)
    x = _convert(ufuncs.asarray(x), la.dtype)
    if _aval(x).shape != la.shape:
        x = mv.broadcast_to_rank_shape(x, la.shape)
    return x


# ---------------------------------------------------------------------------------------------
# sum / prod / max / min
# ---------------------------------------------------------------------------------------------


def _extreme_identity(name: str, d: np.dtype) -> Any:
    """The value that never wins a ``max`` (``name == 'max'``) or ``min``."""
    if dt.is_float(d):
        return -np.inf if name == "max" else np.inf
    if d == dt.bool_:
        return name != "max"
    if dt.is_integer(d):
        info = np.iinfo(d)
        return info.min if name == "max" else info.max
    raise DTypeError(f"{name} does not support {d}")


def _check_arraylike(name: str, a: Any) -> None:
    """JAX's refusal of a list or tuple where an array is expected (``jnp.sum([1, 2])`` is a
    ``TypeError``: convert with ``jnp.asarray`` first, so the conversion is explicit)."""
    if isinstance(a, (list, tuple)):
        raise TypeError(f"{name} requires ndarray or scalar arguments, got {type(a)} at position 0.")


def _reduction(name: str, a: ArrayLike, axis: Axis, dtype: Any, out: Any, keepdims: bool,
               initial: Any, where: Any) -> Any:
    _check_out(name, out)
    _check_arraylike(name, a)
    x = ufuncs.asarray(a)
    aval = _aval(x)
    axes = _reduce_axes(name, aval.ndim, axis)
    weak = aval.weak_type and dtype is None
    if dtype is not None:
        out_dtype = dt.user_dtype(dtype, name)
    elif name in ("sum", "prod"):
        out_dtype = _sum_dtype(aval.dtype)
    else:
        out_dtype = aval.dtype
    acc = _acc_dtype(out_dtype) if name in ("sum", "prod") else out_dtype
    x = _convert(x, acc, weak)
    mask = None if where is None else _mask(name, where, aval.shape)
    out_shape = _reduced_shape(aval.shape, axes)

    if name in ("sum", "prod"):
        if mask is not None:
            x = ew.select(mask, x, _full(x, 0 if name == "sum" else 1))
        y = (red.reduce_sum if name == "sum" else red.reduce_prod)(x, axes)
        if initial is not None:
            y = (ew.add if name == "sum" else ew.mul)(y, _as_operand(initial, y))
    else:
        if dt.is_complex(acc):
            raise DTypeError(f"{name} does not support complex dtypes (they have no order)")
        if mask is not None and initial is None:
            raise ValueError(f"{name}: reduction operation {name!r} has no identity, so a `where` "
                             "mask needs `initial`")
        empty = [i for i in axes if isinstance(aval.shape[i], int) and aval.shape[i] == 0]
        if empty and initial is None:
            raise ValueError(f"{name}: zero-size array to reduction operation {name} which has no "
                             f"identity (axis {empty[0]} of shape {sh.shape_str(aval.shape)} has size "
                             "0); pass `initial=`")
        if empty:
            y = mv.full(out_shape, 0, acc)
            y = _as_operand(initial, y)
        else:
            if mask is not None:
                x = ew.select(mask, x, _as_operand(initial, x))
            y = (red.reduce_max if name == "max" else red.reduce_min)(x, axes)
            if initial is not None:
                y = (ew.max if name == "max" else ew.min)(y, _as_operand(initial, y))
    y = _convert(y, out_dtype, weak)
    return _keep(y, aval.shape, axes, keepdims)


def sum(a: ArrayLike, axis: Axis = None, dtype: Any = None, out: Any = None,  # noqa: A001
        keepdims: bool = False, initial: Any = None, where: Any = None) -> Any:
    """Sum of elements over ``axis``, as ``numpy.sum`` (bool/small ints accumulate in int32)."""
    return _reduction("sum", a, axis, dtype, out, keepdims, initial, where)


def prod(a: ArrayLike, axis: Axis = None, dtype: Any = None, out: Any = None,
         keepdims: bool = False, initial: Any = None, where: Any = None) -> Any:
    """Product of elements over ``axis``, as ``numpy.prod``."""
    return _reduction("prod", a, axis, dtype, out, keepdims, initial, where)


def max(a: ArrayLike, axis: Axis = None, out: Any = None, keepdims: bool = False,  # noqa: A001
        initial: Any = None, where: Any = None) -> Any:
    """Maximum over ``axis`` (NaN propagates), as ``numpy.max``."""
    return _reduction("max", a, axis, None, out, keepdims, initial, where)


def min(a: ArrayLike, axis: Axis = None, out: Any = None, keepdims: bool = False,  # noqa: A001
        initial: Any = None, where: Any = None) -> Any:
    """Minimum over ``axis`` (NaN propagates), as ``numpy.min``."""
    return _reduction("min", a, axis, None, out, keepdims, initial, where)


amax, amin = max, min


def ptp(a: ArrayLike, axis: Axis = None, out: Any = None, keepdims: bool = False) -> Any:
    """Range (max - min) over ``axis``, as ``numpy.ptp``."""
    _check_out("ptp", out)
    _check_arraylike("ptp", a)
    x = ufuncs.asarray(a)
    if _aval(x).dtype == dt.bool_:
        raise DTypeError("ptp does not support bool (the difference of booleans is undefined)")
    return ufuncs.subtract(max(x, axis, keepdims=keepdims), min(x, axis, keepdims=keepdims))


# ---------------------------------------------------------------------------------------------
# mean / var / std
# ---------------------------------------------------------------------------------------------


def _inexact_dtype(d: np.dtype, dtype: Any) -> np.dtype:
    return dt.user_dtype(dtype, "mean") if dtype is not None else dt.to_float(d)


def mean(a: ArrayLike, axis: Axis = None, dtype: Any = None, out: Any = None, keepdims: bool = False,
         *, where: Any = None) -> Any:
    """Arithmetic mean over ``axis``; integers and bools give floats, as ``numpy.mean``."""
    _check_out("mean", out)
    _check_arraylike("mean", a)
    x = ufuncs.asarray(a)
    aval = _aval(x)
    axes = _reduce_axes("mean", aval.ndim, axis)
    out_dtype = _inexact_dtype(aval.dtype, dtype)
    weak = aval.weak_type and dtype is None
    acc = _acc_dtype(out_dtype)
    mask = None if where is None else _mask("mean", where, aval.shape)
    x = _convert(x, acc)
    if mask is not None:
        x = ew.select(mask, x, _full(x, 0))
    s = _keep(red.reduce_sum(x, axes), aval.shape, axes, keepdims)
    n = _count(aval.shape, axes, mask, acc, keepdims)
    y = ew.div(s, _full(s, n) if isinstance(n, int) else mv.broadcast_to_rank_shape(n, _aval(s).shape))
    return _convert(y, out_dtype, weak)


def _var(name: str, a: ArrayLike, axis: Axis, dtype: Any, out: Any, ddof: Any, keepdims: bool,
         where: Any, correction: Any) -> Any:
    _check_out(name, out)
    if correction is not None:
        if ddof not in (0, None):
            raise ValueError(f"{name}: pass either ddof or correction, not both")
        ddof = correction
    _check_arraylike(name, a)
    x = ufuncs.asarray(a)
    aval = _aval(x)
    axes = _reduce_axes(name, aval.ndim, axis)
    cdt = _inexact_dtype(aval.dtype, dtype)
    acc = _acc_dtype(cdt)
    mask = None if where is None else _mask(name, where, aval.shape)
    x = _convert(x, acc)
    m = mean(x, axes, keepdims=True, where=mask)
    c = ew.sub(x, mv.broadcast_to_rank_shape(m, aval.shape))
    if dt.is_complex(acc):
        sq = ew.add(ew.integer_pow(ew.real(c), 2), ew.integer_pow(ew.imag(c), 2))
    else:
        sq = ew.integer_pow(c, 2)
    if mask is not None:
        sq = ew.select(mask, sq, _full(sq, 0))
    s = _keep(red.reduce_sum(sq, axes), aval.shape, axes, keepdims)
    rdt = _aval(s).dtype
    n = _count(aval.shape, axes, mask, rdt, keepdims)
    if isinstance(n, int) and isinstance(ddof, (int, float, np.integer, np.floating)):
        denom = _full(s, builtins.max(n - ddof, 0))
    else:
        n = _full(s, n) if isinstance(n, int) else mv.broadcast_to_rank_shape(n, _aval(s).shape)
        denom = ew.max(ew.sub(n, _as_operand(ddof, n)), _full(n, 0))
    y = ew.div(s, denom)
    return _convert(y, dt.real_dtype(cdt), aval.weak_type and dtype is None)


def var(a: ArrayLike, axis: Axis = None, dtype: Any = None, out: Any = None, ddof: int = 0,
        keepdims: bool = False, *, where: Any = None, correction: Any = None) -> Any:
    """Variance over ``axis`` with ``ddof`` delta degrees of freedom, as ``numpy.var``."""
    return _var("var", a, axis, dtype, out, ddof, keepdims, where, correction)


def std(a: ArrayLike, axis: Axis = None, dtype: Any = None, out: Any = None, ddof: int = 0,
        keepdims: bool = False, *, where: Any = None, correction: Any = None) -> Any:
    """Standard deviation over ``axis`` (square root of :func:`var`), as ``numpy.std``."""
    v = _var("std", a, axis, dtype, out, ddof, keepdims, where, correction)
    return ew.sqrt(v)


def average(a: ArrayLike, axis: Axis = None, weights: ArrayLike = None, returned: bool = False,
            keepdims: bool = False) -> Any:
    """Weighted average over ``axis``; ``returned=True`` also gives the sum of the weights."""
    x = ufuncs.asarray(a)
    aval = _aval(x)
    axes = _reduce_axes("average", aval.ndim, axis)
    if weights is None:
        avg = mean(x, axis, keepdims=keepdims)
        wsum = _count(aval.shape, axes, None, _aval(avg).dtype, keepdims)
        wsum = _full(avg, wsum) if isinstance(wsum, int) else mv.broadcast_to_rank_shape(
            wsum, _aval(avg).shape)
    else:
        w = ufuncs.asarray(weights)
        x, w = _promote_inexact(x, w)
        wa = _aval(w)
        if wa.shape != aval.shape:
            if axis is None:
                raise ShapeError("average: axis must be specified when the shapes of a "
                                 f"{sh.shape_str(aval.shape)} and weights {sh.shape_str(wa.shape)} differ")
            given = tuple(sh.normalize_axis(ax, aval.ndim, "axis")
                          for ax in (axis if isinstance(axis, (tuple, list)) else (axis,)))
            want = tuple(aval.shape[i] for i in given)
            if wa.shape != want:
                raise ShapeError(f"average: weights of shape {sh.shape_str(wa.shape)} do not match "
                                 f"the sizes {sh.shape_str(want)} of axes {given} of a "
                                 f"{sh.shape_str(aval.shape)}")
            order = sorted(range(len(given)), key=lambda i: given[i])
            w = mv.transpose(w, order)
            w = mv.broadcast_in_dim(w, aval.shape, tuple(sorted(given)))
        wsum = sum(w, axis, keepdims=keepdims)
        avg = ew.div(sum(ew.mul(x, w), axis, keepdims=keepdims), wsum)
    if returned:
        if _aval(wsum).shape != _aval(avg).shape:
            wsum = mv.broadcast_to_rank_shape(wsum, _aval(avg).shape)
        return avg, wsum
    return avg


def _promote_inexact(*xs: Any) -> list[Any]:
    """Promote dtypes (not shapes) of ``xs`` to a common inexact dtype."""
    d, weak = dt.promote(*(dt.dtype_and_weak(x) for x in xs))
    if not dt.is_inexact(d):
        d = dt.float32 if weak else dt.to_float(d)
    return [_convert(x, d) for x in xs]


# ---------------------------------------------------------------------------------------------
# argmax / argmin
# ---------------------------------------------------------------------------------------------


def _arg(name: str, prim_fn: Callable, a: ArrayLike, axis: Any, out: Any, keepdims: bool) -> Any:
    _check_out(name, out)
    x = ufuncs.asarray(a)
    aval = _aval(x)
    if dt.is_complex(aval.dtype):
        raise DTypeError(f"{name} does not support complex dtypes")
    if isinstance(axis, (tuple, list)):
        raise TypeError(f"{name}: axis must be an integer or None, got {axis!r}")
    if axis is not None:
        _reduce_axes(name, aval.ndim, axis)  # validates
    if axis is None or aval.ndim == 0:
        ax, shape = 0, (sh.size(aval.shape),)
        x = mv.reshape(x, shape)
    else:
        ax, shape = sh.normalize_axis(axis, aval.ndim), aval.shape
    n = shape[ax]
    if isinstance(n, int) and n == 0:
        raise ValueError(f"{name}: attempt to get {name} of an empty sequence (axis {ax} has size 0)")
    y = prim_fn(x, ax, dt.default_int)
    if keepdims:
        y = mv.reshape(y, (1,) * aval.ndim if axis is None or aval.ndim == 0 else
                       tuple(1 if i == ax else d for i, d in enumerate(aval.shape)))
    return y


def argmax(a: ArrayLike, axis: int | None = None, out: Any = None, keepdims: bool = False) -> Any:
    """Index of the maximum along ``axis`` (of the flattened array when ``None``); NaN wins."""
    return _arg("argmax", red.argmax, a, axis, out, keepdims)


def argmin(a: ArrayLike, axis: int | None = None, out: Any = None, keepdims: bool = False) -> Any:
    """Index of the minimum along ``axis`` (of the flattened array when ``None``); NaN wins."""
    return _arg("argmin", red.argmin, a, axis, out, keepdims)


# ---------------------------------------------------------------------------------------------
# all / any / count_nonzero
# ---------------------------------------------------------------------------------------------


def _logical(name: str, a: ArrayLike, axis: Axis, out: Any, keepdims: bool, where: Any) -> Any:
    _check_out(name, out)
    x = ufuncs.asarray(a)
    aval = _aval(x)
    axes = _reduce_axes(name, aval.ndim, axis)
    x = _to_bool(x)
    if where is not None:
        x = ew.select(_mask(name, where, aval.shape), x, _full(x, name == "all"))
    y = (red.reduce_and if name == "all" else red.reduce_or)(x, axes)
    return _keep(y, aval.shape, axes, keepdims)


def all(a: ArrayLike, axis: Axis = None, out: Any = None, keepdims: bool = False,  # noqa: A001
        *, where: Any = None) -> Any:
    """Whether all elements along ``axis`` are true (nonzero)."""
    return _logical("all", a, axis, out, keepdims, where)


def any(a: ArrayLike, axis: Axis = None, out: Any = None, keepdims: bool = False,  # noqa: A001
        *, where: Any = None) -> Any:
    """Whether any element along ``axis`` is true (nonzero)."""
    return _logical("any", a, axis, out, keepdims, where)


def count_nonzero(a: ArrayLike, axis: Axis = None, keepdims: bool = False) -> Any:
    """Number of nonzero elements along ``axis`` (int32)."""
    x = ufuncs.asarray(a)
    return sum(_to_bool(x), axis, dtype=dt.default_int, keepdims=keepdims)


# ---------------------------------------------------------------------------------------------
# Cumulative reductions
# ---------------------------------------------------------------------------------------------


def _cumulative(name: str, prim_fn: Callable, a: ArrayLike, axis: Any, dtype: Any,
                flatten_none: bool = True) -> tuple[Any, int]:
    x = ufuncs.asarray(a)
    aval = _aval(x)
    if isinstance(axis, (tuple, list)):
        raise TypeError(f"{name}: axis must be an integer or None, got {axis!r}")
    if axis is None and flatten_none:
        x = mv.reshape(x, (sh.size(aval.shape),))
        ax = 0
    elif aval.ndim == 0:
        _reduce_axes(name, 0, axis)
        x, ax = mv.reshape(x, (1,)), 0
    else:
        ax = _reduce_axes(name, aval.ndim, axis)[0]
    out_dtype = dt.user_dtype(dtype, name) if dtype is not None else _sum_dtype(aval.dtype)
    acc = _acc_dtype(out_dtype)
    y = prim_fn(_convert(x, acc), ax)
    return _convert(y, out_dtype, aval.weak_type and dtype is None), ax


def cumsum(a: ArrayLike, axis: int | None = None, dtype: Any = None, out: Any = None) -> Any:
    """Cumulative sum along ``axis`` (of the flattened array when ``None``)."""
    _check_out("cumsum", out)
    return _cumulative("cumsum", red.cumsum, a, axis, dtype)[0]


def cumprod(a: ArrayLike, axis: int | None = None, dtype: Any = None, out: Any = None) -> Any:
    """Cumulative product along ``axis`` (of the flattened array when ``None``)."""
    _check_out("cumprod", out)
    return _cumulative("cumprod", red.cumprod, a, axis, dtype)[0]


def _cumulative_api(name: str, prim_fn: Callable, identity: int, x: ArrayLike, axis: int | None,
                    dtype: Any, include_initial: bool) -> Any:
    x = ufuncs.asarray(x)
    nd = _aval(x).ndim
    if nd == 0:
        raise ShapeError(f"{name}: the input must have at least one dimension")
    if axis is None:
        if nd > 1:
            raise ShapeError(f"{name}: axis must be given for an input of rank {nd}")
        axis = 0
    y, ax = _cumulative(name, prim_fn, x, axis, dtype, flatten_none=False)
    if include_initial:
        ya = _aval(y)
        shape = tuple(1 if i == ax else d for i, d in enumerate(ya.shape))
        y = mv.concatenate([mv.full(shape, identity, ya.dtype), y], ax)
    return y


def cumulative_sum(x: ArrayLike, /, *, axis: int | None = None, dtype: Any = None,
                   include_initial: bool = False) -> Any:
    """Array-API cumulative sum; ``include_initial`` prepends a zero along ``axis``."""
    return _cumulative_api("cumulative_sum", red.cumsum, 0, x, axis, dtype, include_initial)


def cumulative_prod(x: ArrayLike, /, *, axis: int | None = None, dtype: Any = None,
                    include_initial: bool = False) -> Any:
    """Array-API cumulative product; ``include_initial`` prepends a one along ``axis``."""
    return _cumulative_api("cumulative_prod", red.cumprod, 1, x, axis, dtype, include_initial)


# ---------------------------------------------------------------------------------------------
# NaN-ignoring variants
# ---------------------------------------------------------------------------------------------


def _nan_to(x: Any, value: Any) -> Any:
    """``x`` with NaNs replaced by ``value`` (a no-op for non-float dtypes)."""
    if not dt.is_inexact(_aval(x).dtype):
        return x
    return ew.select(_isnan(x), _full(x, value), x)


def nansum(a: ArrayLike, axis: Axis = None, dtype: Any = None, out: Any = None,
           keepdims: bool = False, initial: Any = None, where: Any = None) -> Any:
    """Sum treating NaNs as zero."""
    _check_out("nansum", out)
    return sum(_nan_to(ufuncs.asarray(a), 0), axis, dtype, None, keepdims, initial, where)


def nanprod(a: ArrayLike, axis: Axis = None, dtype: Any = None, out: Any = None,
            keepdims: bool = False, initial: Any = None, where: Any = None) -> Any:
    """Product treating NaNs as one."""
    _check_out("nanprod", out)
    return prod(_nan_to(ufuncs.asarray(a), 1), axis, dtype, None, keepdims, initial, where)


def nancumsum(a: ArrayLike, axis: int | None = None, dtype: Any = None, out: Any = None) -> Any:
    """Cumulative sum treating NaNs as zero."""
    _check_out("nancumsum", out)
    return cumsum(_nan_to(ufuncs.asarray(a), 0), axis, dtype)


def nancumprod(a: ArrayLike, axis: int | None = None, dtype: Any = None, out: Any = None) -> Any:
    """Cumulative product treating NaNs as one."""
    _check_out("nancumprod", out)
    return cumprod(_nan_to(ufuncs.asarray(a), 1), axis, dtype)


def _nan_extreme(name: str, a: ArrayLike, axis: Axis, out: Any, keepdims: bool, initial: Any,
                 where: Any) -> Any:
    _check_out(name, out)
    x = ufuncs.asarray(a)
    d = _aval(x).dtype
    if not dt.is_inexact(d):
        return _reduction(name[3:], x, axis, None, None, keepdims, initial, where)
    nan = _isnan(x)
    y = _reduction(name[3:], _nan_to(x, _extreme_identity(name[3:], d)), axis, None, None, keepdims,
                   initial, where)
    if where is not None:
        nan = ew.bitwise_or(nan, ew.bitwise_not(_mask(name, where, _aval(x).shape)))
    all_nan = all(nan, axis, keepdims=keepdims)
    if initial is not None:
        return y  # an all-NaN slice gives `initial`, as in NumPy
    return ew.select(all_nan, _full(y, np.nan), y)


def nanmax(a: ArrayLike, axis: Axis = None, out: Any = None, keepdims: bool = False,
           initial: Any = None, where: Any = None) -> Any:
    """Maximum ignoring NaNs (NaN where a slice is all NaN)."""
    return _nan_extreme("nanmax", a, axis, out, keepdims, initial, where)


def nanmin(a: ArrayLike, axis: Axis = None, out: Any = None, keepdims: bool = False,
           initial: Any = None, where: Any = None) -> Any:
    """Minimum ignoring NaNs (NaN where a slice is all NaN)."""
    return _nan_extreme("nanmin", a, axis, out, keepdims, initial, where)


def _nan_arg(name: str, a: ArrayLike, axis: Any, out: Any, keepdims: bool) -> Any:
    _check_out(name, out)
    x = ufuncs.asarray(a)
    d = _aval(x).dtype
    fn = argmax if name == "nanargmax" else argmin
    if not dt.is_inexact(d):
        return fn(x, axis, keepdims=keepdims)
    nan = _isnan(x)
    y = fn(_nan_to(x, _extreme_identity(name[6:], d)), axis, keepdims=keepdims)
    # an all-NaN slice has no answer; as JAX, give -1 (NumPy raises, which tracing cannot)
    return ew.select(all(nan, axis, keepdims=keepdims), _full(y, -1), y)


def nanargmax(a: ArrayLike, axis: int | None = None, out: Any = None, keepdims: bool = False) -> Any:
    """Index of the maximum ignoring NaNs (-1 for an all-NaN slice, as JAX)."""
    return _nan_arg("nanargmax", a, axis, out, keepdims)


def nanargmin(a: ArrayLike, axis: int | None = None, out: Any = None, keepdims: bool = False) -> Any:
    """Index of the minimum ignoring NaNs (-1 for an all-NaN slice, as JAX)."""
    return _nan_arg("nanargmin", a, axis, out, keepdims)


def _nan_mask(name: str, x: Any, where: Any) -> Any:
    keep = ew.bitwise_not(_isnan(x))
    if where is not None:
        keep = ew.bitwise_and(keep, _mask(name, where, _aval(x).shape))
    return keep


def nanmean(a: ArrayLike, axis: Axis = None, dtype: Any = None, out: Any = None,
            keepdims: bool = False, *, where: Any = None) -> Any:
    """Mean ignoring NaNs (NaN for a slice with no numbers)."""
    _check_out("nanmean", out)
    x = ufuncs.asarray(a)
    if not dt.is_inexact(_aval(x).dtype):
        return mean(x, axis, dtype, None, keepdims, where=where)
    return mean(x, axis, dtype, None, keepdims, where=_nan_mask("nanmean", x, where))


def nanvar(a: ArrayLike, axis: Axis = None, dtype: Any = None, out: Any = None, ddof: int = 0,
           keepdims: bool = False, *, where: Any = None, correction: Any = None) -> Any:
    """Variance ignoring NaNs."""
    _check_out("nanvar", out)
    x = ufuncs.asarray(a)
    w = _nan_mask("nanvar", x, where) if dt.is_inexact(_aval(x).dtype) else where
    return _var("nanvar", x, axis, dtype, None, ddof, keepdims, w, correction)


def nanstd(a: ArrayLike, axis: Axis = None, dtype: Any = None, out: Any = None, ddof: int = 0,
           keepdims: bool = False, *, where: Any = None, correction: Any = None) -> Any:
    """Standard deviation ignoring NaNs."""
    return ew.sqrt(nanvar(a, axis, dtype, out, ddof, keepdims, where=where, correction=correction))


__all__ = [
    "all", "amax", "amin", "any", "argmax", "argmin", "average", "count_nonzero", "cumprod", "cumsum",
    "cumulative_prod", "cumulative_sum", "max", "mean", "min", "nanargmax", "nanargmin", "nancumprod",
    "nancumsum", "nanmax", "nanmean", "nanmin", "nanprod", "nanstd", "nansum", "nanvar", "prod", "ptp",
    "std", "sum", "var",
]

"""NumPy-level array creation: ``array``, ``zeros``/``ones``/``full``/``empty`` (and ``*_like``),
``arange``, ``linspace``/``logspace``/``geomspace``, ``eye``/``identity``, ``meshgrid``, ``indices``.

Python floats default to float32 and ints to int32; NumPy inputs keep their dtype. Shapes may hold
symbolic dims (:class:`ember._src.shapes.DimExpr`), so ``zeros((batch, 4))`` works inside a
program traced with a named axis. Every constructor builds its value from primitives
(``broadcast_in_dim`` of a scalar, ``iota``), so it records into a ``jit`` trace rather than
capturing a large constant.
"""

from __future__ import annotations

import builtins
import contextvars
import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember._src import core, devices
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.array import Array, aligned_copy, asarray_eager
from ember._src.dynamic import dimension_as_value
from ember._src.numpy import ufuncs
from ember._src.numpy.operands import _is_scalar
from ember._src.numpy.ufuncs import _convert
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember.errors import DTypeError, ShapeError

ArrayLike = Any
DTypeLike = Any
ShapeLike = Any

# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------

_PLACING: contextvars.ContextVar[bool] = contextvars.ContextVar("ember_placing", default=False)


def _placed(fn: Any, follow: bool = False) -> Any:
    """``fn``'s concrete result put on its ``device=`` argument, else (with ``follow``) on the
    device of a device array passed as the first argument, else on the default device
    (``ember.default_device``); only the outermost constructor call places (one copy)."""
    active = devices.GPU_DEFAULT_ACTIVE

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        on_dev = follow and args and getattr(type(args[0]), "_device_resident", False)
        if (not active[0] and not on_dev and kwargs.get("device") is None) or _PLACING.get():
            return fn(*args, **kwargs)  # (the host, or inside an outer constructor)
        src = args[0].device if on_dev else None
        token = _PLACING.set(True)
        try:
            out = fn(*args, **kwargs)
        finally:
            _PLACING.reset(token)
        dev = devices.parse_device(kwargs.get("device")) or src or devices.default_device_now()
        if dev is None or not isinstance(out, Array) or devices.on_device(out) == dev:
            return out
        if dev.platform == "cpu":
            return Array(out.value, out.weak_type) if devices.on_device(out) is not None else out
        return devices.platform(dev).put(out.value, out.weak_type)
    return wrapper


def _shape(shape: ShapeLike, what: str = "shape") -> tuple:
    """Canonical (possibly symbolic) shape; negative sizes are a :class:`ShapeError`."""
    if isinstance(shape, (core.Tracer, Array)):
        shape = core.concrete_or_error(shape, what).tolist()
    try:
        return sh.canonical_shape(shape)
    except ShapeError as e:
        raise type(e)(f"{what}: {e}") from None
    except TypeError:
        raise TypeError(f"{what} must be an int or a sequence of ints, got {shape!r}") from None


def _np_scalar(x: Any) -> Any:
    """NumPy scalars as 0-d arrays: ``np.float64`` subclasses ``float``, and must keep its dtype
    rather than be typed as a weak Python float."""
    return np.asarray(x) if isinstance(x, np.generic) else x


def _scalar_array(value: Any, dtype: np.dtype | None) -> Any:
    """``value`` (a Python/NumPy scalar or an ember value) as a 0-d-or-more ember value."""
    if isinstance(value, sh.DimExpr):
        value = dimension_as_value(value)
    if isinstance(value, (core.Tracer, Array)):
        return value if dtype is None else _convert(value, dtype)
    return asarray_eager(_np_scalar(value), dtype)


# ---------------------------------------------------------------------------------------------
# array
# ---------------------------------------------------------------------------------------------


def _contains_tracer(x: Any) -> bool:
    if isinstance(x, core.Tracer):
        return True
    if isinstance(x, (list, tuple)):
        return builtins.any(_contains_tracer(y) for y in x)
    return False


def _stack_nested(x: Any) -> Any:
    """A nested list/tuple holding tracers as one traced value (promoting dtypes as JAX)."""
    if not isinstance(x, (list, tuple)):
        return x
    items = [_stack_nested(_np_scalar(y)) for y in x]
    if not items:
        raise ShapeError("array: cannot build an array from an empty sequence holding traced values")
    shapes = {np.shape(y) if not isinstance(y, (core.Tracer, Array)) else core.get_aval(y).shape
              for y in items}
    if len(shapes) != 1:
        raise ShapeError(f"array: nested sequences have inhomogeneous shapes "
                         f"{', '.join(sh.shape_str(s) for s in sorted(shapes, key=str))}")
    items = ufuncs.promote_args("array", *items)
    expanded = [mv.reshape(y, (1, *core.get_aval(y).shape)) for y in items]
    return mv.concatenate(expanded, 0) if len(expanded) > 1 else expanded[0]


@functools.partial(_placed, follow=True)
def array(object: ArrayLike, dtype: DTypeLike = None, copy: bool = True,  # noqa: A002
          order: str | None = None, ndmin: int = 0, *, device: Any = None) -> Any:
    """An array from ``object`` (array, scalar, nested sequence, possibly holding tracers).

    ``copy=True`` gives a new array object even for an ember ``Array`` input (ember arrays are
    immutable, so ``copy=False`` may return the input itself). ``ndmin`` prepends size-1 dims.
    ``device``: put the result there (default: the default device, ``ember.default_device``).
    """
    ufuncs.check_device("array", device)
    if order not in (None, "K", "A", "C"):
        raise NotImplementedError(f"array: order={order!r} is not supported (ember arrays are C-order)")
    want = None if dtype is None else dt.user_dtype(dtype, "array")
    object = _np_scalar(object)  # noqa: A001
    if isinstance(object, core.Tracer):
        out = object if want is None else _convert(object, want)
    elif _contains_tracer(object):
        out = _stack_nested(object)
        if want is not None:
            out = _convert(out, want)
    elif isinstance(object, Array):
        out = asarray_eager(object, want)
        if copy and out is object:
            out = Array(aligned_copy(np.array(object.value)), object.weak_type)
    else:
        out = asarray_eager(object, want)
    nd = core.get_aval(out).ndim
    if ndmin > nd:
        out = mv.reshape(out, (1,) * (ndmin - nd) + tuple(core.get_aval(out).shape))
    return out


def from_dlpack(x: Any, /, *, device: Any = None, copy: bool | None = None) -> Any:
    """An Array from any object with ``__dlpack__`` (a PyTorch tensor, a JAX or NumPy array).

    Host memory is shared when the exporter's buffer is 64-byte aligned and C-contiguous (ember
    then treats it as immutable: the exporter must not write it while the Array lives); otherwise,
    or with ``copy=True``, the data is copied. ``copy=False`` raises ``BufferError`` when sharing
    is impossible.
    """
    ufuncs.check_device("from_dlpack", device)
    if isinstance(x, Array):
        return ufuncs.asarray(x, copy=copy)
    try:
        v = np.from_dlpack(x)
    except BufferError:
        if copy is False:
            raise
        v = np.from_dlpack(x, copy=True)
    shareable = v.flags.c_contiguous and (v.size == 0 or v.ctypes.data % 64 == 0)
    if copy is False and not shareable:
        raise BufferError("from_dlpack(copy=False): the buffer is not 64-byte aligned and C-contiguous")
    if shareable and not copy:
        view = v.view()
        view.flags.writeable = False
        return Array(view, False)
    return Array(aligned_copy(v, share=False), False)


# ---------------------------------------------------------------------------------------------
# zeros / ones / full / empty and their *_like forms
# ---------------------------------------------------------------------------------------------


@_placed
def full(shape: ShapeLike, fill_value: ArrayLike, dtype: DTypeLike = None, *, device: Any = None) -> Any:
    """An array of ``shape`` filled with ``fill_value`` (a scalar or an array broadcast to ``shape``).

    Without ``dtype`` the dtype is that of ``fill_value`` (Python scalars give weakly typed
    float32/int32 arrays, as JAX).
    """
    ufuncs.check_device("full", device)
    shp = _shape(shape)
    fill = _scalar_array(fill_value, None if dtype is None else dt.user_dtype(dtype, "full"))
    fa = core.get_aval(fill)
    if fa.ndim > len(shp) or sh.broadcast_shapes(shp, fa.shape, op="full") != shp:
        raise ShapeError(f"full: fill_value of shape {sh.shape_str(fa.shape)} does not broadcast to "
                         f"shape {sh.shape_str(shp)}")
    return mv.broadcast_to_rank_shape(fill, shp) if fa.shape != shp or fa.ndim == 0 else fill


@_placed
def zeros(shape: ShapeLike, dtype: DTypeLike = None, *, device: Any = None) -> Any:
    """An array of zeros (float32 by default); ``shape`` entries may be symbolic dims."""
    ufuncs.check_device("zeros", device)
    return mv.full(_shape(shape), 0, dt.float32 if dtype is None else dt.user_dtype(dtype, "zeros"))


@_placed
def ones(shape: ShapeLike, dtype: DTypeLike = None, *, device: Any = None) -> Any:
    """An array of ones (float32 by default); ``shape`` entries may be symbolic dims."""
    ufuncs.check_device("ones", device)
    return mv.full(_shape(shape), 1, dt.float32 if dtype is None else dt.user_dtype(dtype, "ones"))


@_placed
def empty(shape: ShapeLike, dtype: DTypeLike = None, *, device: Any = None) -> Any:
    """Like :func:`zeros` (ember arrays are immutable, so uninitialized memory is never exposed)."""
    return zeros(shape, dtype, device=device)


def _like(name: str, a: ArrayLike, fill_value: Any, dtype: DTypeLike, shape: ShapeLike) -> Any:
    x = a if isinstance(a, (core.Tracer, Array)) else ufuncs.asarray(a)
    aval = core.get_aval(x)
    out_dtype = aval.dtype if dtype is None else dt.user_dtype(dtype, name)
    weak = aval.weak_type and dtype is None
    shp = aval.shape if shape is None else _shape(shape, f"{name}: shape")
    fill = Array(aligned_copy(np.asarray(fill_value).astype(out_dtype)), weak)
    return mv.broadcast_to_rank_shape(fill, shp)


@_placed
def zeros_like(a: ArrayLike, dtype: DTypeLike = None, shape: ShapeLike = None, *, device: Any = None) -> Any:
    """Zeros with the shape and dtype of ``a`` (works on traced values)."""
    ufuncs.check_device("zeros_like", device)
    return _like("zeros_like", a, 0, dtype, shape)


@_placed
def ones_like(a: ArrayLike, dtype: DTypeLike = None, shape: ShapeLike = None, *, device: Any = None) -> Any:
    """Ones with the shape and dtype of ``a`` (works on traced values)."""
    ufuncs.check_device("ones_like", device)
    return _like("ones_like", a, 1, dtype, shape)


@_placed
def empty_like(a: ArrayLike, dtype: DTypeLike = None, shape: ShapeLike = None, *, device: Any = None) -> Any:
    """Like :func:`zeros_like`."""
    ufuncs.check_device("empty_like", device)
    return _like("empty_like", a, 0, dtype, shape)


@_placed
def full_like(a: ArrayLike, fill_value: ArrayLike, dtype: DTypeLike = None, shape: ShapeLike = None, *,
              device: Any = None) -> Any:
    """``fill_value`` broadcast to the shape of ``a`` with the dtype of ``a`` unless ``dtype`` is given."""
    ufuncs.check_device("full_like", device)
    x = a if isinstance(a, (core.Tracer, Array)) else ufuncs.asarray(a)
    aval = core.get_aval(x)
    out_dtype = aval.dtype if dtype is None else dt.user_dtype(dtype, "full_like")
    shp = aval.shape if shape is None else _shape(shape, "full_like: shape")
    if _is_scalar(fill_value) or isinstance(fill_value, np.generic):
        return _like("full_like", x, fill_value, dtype, shape)
    return full(shp, _convert(_scalar_array(fill_value, None), out_dtype))


# ---------------------------------------------------------------------------------------------
# arange / linspace / logspace / geomspace
# ---------------------------------------------------------------------------------------------


def _concrete_number(x: Any, what: str) -> Any:
    if isinstance(x, (int, float, bool, sh.DimExpr)) and not isinstance(x, np.generic):
        return x
    v = core.concrete_or_error(x, what)
    if v.ndim != 0:
        raise ShapeError(f"{what} must be a scalar, got shape {v.shape}")
    return v


def _arange_dtype(args: Sequence[Any]) -> np.dtype:
    typed = []
    for a in args:
        if isinstance(a, sh.DimExpr):
            typed.append((dt.int32, True))
        elif isinstance(a, np.ndarray):
            typed.append((dt.canonicalize(a.dtype), False))
        else:
            typed.append(dt.dtype_and_weak(a))
    d, _ = dt.promote(*typed)
    if d == dt.bool_:
        raise DTypeError("arange does not accept bool arguments")
    return d


def _symbolic_arange(start: Any, stop: Any, step: Any, dtype: Any) -> Any:
    """``arange`` with a symbolic start or stop and a nonzero integer step: ``ceil((stop - start) /
    step)`` elements (XLNet's ``arange(klen, -qlen, -1)``); a binding where that is negative breaks a
    shape constraint."""
    if isinstance(step, float) and step.is_integer():  # (torch's arange(k, -q, -1.0, dtype=int64))
        step = int(step)
    if not isinstance(step, int) or isinstance(step, bool) or step == 0 \
            or builtins.any(isinstance(v, float) for v in (start, stop)):
        raise ShapeError(f"arange with a symbolic bound needs integer bounds and a nonzero integer step, "
                         f"got arange({start}, {stop}, {step})")
    n = sh.floordiv(stop - start + (step - 1), step) if step > 0 else \
        sh.floordiv(start - stop + (-step - 1), -step)
    out = mv.iota(dtype, n)
    if step != 1:
        out = ew.mul(out, mv.full((n,), step, dtype))
    if not (isinstance(start, int) and start == 0):
        out = ew.add(out, mv.full((n,), start, dtype))  # (a symbolic start is read at run time)
    return out


@_placed
def arange(start: ArrayLike, stop: ArrayLike = None, step: ArrayLike = None, dtype: DTypeLike = None, *,
           device: Any = None) -> Any:
    """Evenly spaced values in ``[start, stop)``, as ``numpy.arange``.

    Arguments must be concrete (the length of the result depends on them); ``arange(n)`` with a
    symbolic dim ``n`` gives an ``iota`` of that length. Python ints give int32 and floats float32.
    """
    ufuncs.check_device("arange", device)
    if stop is None:
        start, stop = 0, start
    if step is None:
        step = 1
    vals = [_concrete_number(v, f"arange: argument {name!r}")
            for v, name in ((start, "start"), (stop, "stop"), (step, "step"))]
    out_dtype = dt.user_dtype(dtype, "arange") if dtype is not None else _arange_dtype(vals)
    start_v, stop_v, step_v = (v if isinstance(v, sh.DimExpr) else np.asarray(v).item() for v in vals)
    if isinstance(stop_v, sh.DimExpr) or isinstance(start_v, sh.DimExpr):
        return _symbolic_arange(start_v, stop_v, step_v, out_dtype)
    if step_v == 0:
        raise ValueError("arange: step must not be zero")
    if builtins.any(isinstance(v, complex) for v in (start_v, stop_v, step_v)):
        raise DTypeError("arange does not support complex arguments")
    n = builtins.max(int(math.ceil((stop_v - start_v) / step_v)), 0)
    if dt.is_integer(out_dtype) and builtins.all(isinstance(v, (int, bool)) for v in (start_v, step_v)):
        out = mv.iota(out_dtype, n)
        if step_v != 1:
            out = ew.mul(out, mv.full((n,), step_v, out_dtype))
        if start_v != 0:
            out = ew.add(out, mv.full((n,), start_v, out_dtype))
        return out
    # floats (or a float start/step with an integer dtype): start + i*step computed in the float
    # dtype of at least the result's precision, as NumPy does
    cdt = out_dtype if dt.is_inexact(out_dtype) else dt.float64
    out = mv.iota(cdt, n)
    out = ew.add(ew.mul(out, mv.full((n,), step_v, cdt)), mv.full((n,), start_v, cdt))
    if not dt.is_inexact(out_dtype):
        out = ew.floor(out)
    return _convert(out, out_dtype)


def _interp_dtypes(start: Any, stop: Any, dtype: DTypeLike) -> tuple[np.dtype, np.dtype]:
    """(result dtype, computation dtype) of linspace-like functions."""
    d, weak = dt.promote(dt.dtype_and_weak(_np_scalar(start)), dt.dtype_and_weak(_np_scalar(stop)))
    if not dt.is_inexact(d):
        d = dt.float32 if weak else dt.to_float(d)
    out = d if dtype is None else dt.user_dtype(dtype, "linspace")
    comp = d if dt.is_inexact(out) and not dt.is_inexact(d) else out
    if not dt.is_inexact(comp):
        comp = d
    return out, (dt.float32 if dt.is_low_precision(comp) else comp)


def _as_bound(x: ArrayLike, dtype: DTypeLike = None) -> Any:
    """``x`` as an ember value; a Python/NumPy scalar converts straight to ``dtype`` (so a float64
    bound is not rounded through float32 first)."""
    if isinstance(x, (core.Tracer, Array)):
        return x
    x = _np_scalar(x)
    if dtype is not None and isinstance(x, (int, float, complex)) and not isinstance(x, bool):
        return ufuncs.asarray(x, dtype=dtype)
    return ufuncs.asarray(x)


@_placed
def linspace(start: ArrayLike, stop: ArrayLike, num: int = 50, endpoint: bool = True,
             retstep: bool = False, dtype: DTypeLike = None, axis: int = 0, *, device: Any = None) -> Any:
    """``num`` evenly spaced samples over ``[start, stop]`` (or ``[start, stop)``).

    ``start``/``stop`` may be arrays (broadcast together); the samples run along ``axis`` of the
    result. With ``endpoint`` the last sample is exactly ``stop``.
    """
    ufuncs.check_device("linspace", device)
    num = int(core.concrete_or_error(num, "linspace: num")) if not isinstance(num, int) else num
    if num < 0:
        raise ValueError(f"linspace: number of samples, {num}, must be non-negative")
    out_dtype, cdt = _interp_dtypes(start, stop, dtype)
    s, e = (_convert(_as_bound(v, cdt), cdt) for v in (start, stop))
    bshape = sh.broadcast_shapes(core.get_aval(s).shape, core.get_aval(e).shape, op="linspace")
    s, e = mv.broadcast_to_rank_shape(s, bshape), mv.broadcast_to_rank_shape(e, bshape)
    nd = len(bshape) + 1
    ax = sh.normalize_axis(axis, nd, "axis")
    out_shape = (*bshape[:ax], num, *bshape[ax:])
    bdims = tuple(i for i in range(nd) if i != ax)
    div = (num - 1) if endpoint else num
    delta = ew.sub(e, s)
    s_b = mv.broadcast_in_dim(s, out_shape, bdims)
    if div > 0:
        step = ew.div(delta, mv.full(bshape, div, cdt))
        i = mv.broadcasted_iota(cdt, out_shape, ax)
        # interpolate as start + i * delta / div (exact at i = 0)
        out = ew.add(s_b, ew.div(ew.mul(i, mv.broadcast_in_dim(delta, out_shape, bdims)),
                                 mv.full(out_shape, div, cdt)))
        if endpoint and num > 1:
            idx = mv.broadcasted_iota(dt.int32, out_shape, ax)
            last = ew.eq(idx, mv.full(out_shape, num - 1, dt.int32))
            out = ew.select(last, mv.broadcast_in_dim(e, out_shape, bdims), out)
    else:
        step = mv.full(bshape, np.nan, cdt)
        out = s_b
    if dt.is_integer(out_dtype) and not dt.is_complex(cdt):
        out = ew.floor(out)
    out = _convert(out, out_dtype)
    if retstep:
        return out, _convert(step, out_dtype) if dt.is_inexact(out_dtype) else step
    return out


def logspace(start: ArrayLike, stop: ArrayLike, num: int = 50, endpoint: bool = True,
             base: ArrayLike = 10.0, dtype: DTypeLike = None, axis: int = 0) -> Any:
    """``base ** linspace(start, stop, ...)``, as ``numpy.logspace``."""
    out_dtype, cdt = _interp_dtypes(start, stop, dtype)
    exps = linspace(start, stop, num, endpoint, dtype=cdt, axis=axis)
    out_shape = core.get_aval(exps).shape
    b = _convert(_as_bound(base, cdt), cdt)
    ba = core.get_aval(b)
    ax = sh.normalize_axis(axis, len(out_shape), "axis")
    bshape = out_shape[:ax] + out_shape[ax + 1:]
    if ba.ndim > len(bshape) or sh.broadcast_shapes(bshape, ba.shape, op="logspace: base") != bshape:
        raise ShapeError(f"logspace: base of shape {sh.shape_str(ba.shape)} does not broadcast to the "
                         f"shape {sh.shape_str(bshape)} of start/stop")
    b = mv.broadcast_to_rank_shape(b, bshape)
    b = mv.broadcast_in_dim(b, out_shape, tuple(i for i in range(len(out_shape)) if i != ax))
    out = ew.pow(b, exps)
    if dt.is_integer(out_dtype):
        out = ew.floor(out)
    return _convert(out, out_dtype)


def geomspace(start: ArrayLike, stop: ArrayLike, num: int = 50, endpoint: bool = True,
              dtype: DTypeLike = None, axis: int = 0) -> Any:
    """Samples evenly spaced on a log scale, with ``start`` and ``stop`` exact (real inputs)."""
    out_dtype, cdt = _interp_dtypes(start, stop, dtype)
    if dt.is_complex(cdt):
        raise DTypeError("geomspace: complex bounds are not supported")
    s, e = (_convert(_as_bound(v, cdt), cdt) for v in (start, stop))
    for v, name in ((s, "start"), (e, "stop")):
        if not isinstance(v, core.Tracer) and np.any(np.asarray(v.value) == 0):
            raise ValueError(f"geomspace: a geometric sequence cannot include zero ({name} is 0)")
    bshape = sh.broadcast_shapes(core.get_aval(s).shape, core.get_aval(e).shape, op="geomspace")
    s, e = mv.broadcast_to_rank_shape(s, bshape), mv.broadcast_to_rank_shape(e, bshape)
    sign = ew.sign(s)  # NumPy requires start and stop to share a sign; the sign of start is used
    logs = linspace(ew.log(ew.abs(s)), ew.log(ew.abs(e)), num, endpoint, dtype=cdt, axis=axis)
    nd = len(bshape) + 1
    ax = sh.normalize_axis(axis, nd, "axis")
    out_shape = core.get_aval(logs).shape
    bdims = tuple(i for i in range(nd) if i != ax)
    out = ew.mul(mv.broadcast_in_dim(sign, out_shape, bdims), ew.exp(logs))
    if num > 0:
        idx = mv.broadcasted_iota(dt.int32, out_shape, ax)
        first = ew.eq(idx, mv.full(out_shape, 0, dt.int32))
        out = ew.select(first, mv.broadcast_in_dim(s, out_shape, bdims), out)
        if endpoint and num > 1:
            last = ew.eq(idx, mv.full(out_shape, num - 1, dt.int32))
            out = ew.select(last, mv.broadcast_in_dim(e, out_shape, bdims), out)
    if dt.is_integer(out_dtype):
        out = ew.floor(out)
    return _convert(out, out_dtype)


# ---------------------------------------------------------------------------------------------
# eye / identity / meshgrid / indices
# ---------------------------------------------------------------------------------------------


@_placed
def eye(N: Any, M: Any = None, k: Any = 0, dtype: DTypeLike = None, *, device: Any = None) -> Any:
    """A 2-D array with ones on the ``k``-th diagonal (``k`` may be traced) and zeros elsewhere."""
    ufuncs.check_device("eye", device)
    n = sh.canonical_dim(N)
    m = n if M is None else sh.canonical_dim(M)
    out_dtype = dt.float32 if dtype is None else dt.user_dtype(dtype, "eye")
    rows = mv.broadcasted_iota(dt.int32, (n, m), 0)
    cols = mv.broadcasted_iota(dt.int32, (n, m), 1)
    if isinstance(k, (int, np.integer)):
        # a diagonal outside the matrix selects nothing; clamping keeps extreme k in int32
        lim = (n if isinstance(n, int) else 2**30, m if isinstance(m, int) else 2**30)
        kk = mv.full((n, m), builtins.min(builtins.max(int(k), -lim[0] - 1), lim[1] + 1), dt.int32)
    else:
        ka = _convert(_as_bound(k), dt.int32)
        if core.get_aval(ka).shape != ():
            raise ShapeError(f"eye: k must be a scalar, got shape {sh.shape_str(core.get_aval(ka).shape)}")
        kk = mv.broadcast_in_dim(ka, (n, m), ())
    on = ew.eq(ew.sub(cols, rows), kk)
    return _convert(on, out_dtype)


@_placed
def identity(n: Any, dtype: DTypeLike = None) -> Any:
    """The ``n x n`` identity matrix."""
    return eye(n, dtype=dtype)


def meshgrid(*xi: ArrayLike, copy: bool = True, sparse: bool = False, indexing: str = "xy") -> list[Any]:
    """Coordinate matrices from coordinate vectors (``indexing='xy'`` swaps the first two axes)."""
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    vecs = []
    for x in xi:
        v = _as_bound(x)
        a = core.get_aval(v)
        if a.ndim != 1:
            v = mv.reshape(v, (sh.size(a.shape),))
        vecs.append(v)
    n = len(vecs)
    sizes = [core.get_aval(v).shape[0] for v in vecs]
    if indexing == "xy" and n >= 2:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    out = []
    for i, v in enumerate(vecs):
        pos = i
        if indexing == "xy" and n >= 2 and i < 2:
            pos = 1 - i
        if sparse:
            out.append(mv.reshape(v, tuple(sizes[pos] if j == pos else 1 for j in range(n))))
        else:
            out.append(mv.broadcast_in_dim(v, tuple(sizes), (pos,)))
    return out


def indices(dimensions: Sequence[Any], dtype: DTypeLike = None, sparse: bool = False) -> Any:
    """The index grid of ``dimensions``: shape ``(len(dimensions), *dimensions)`` (a tuple if sparse)."""
    dims = _shape(tuple(dimensions), "indices: dimensions")
    out_dtype = dt.int32 if dtype is None else dt.user_dtype(dtype, "indices")
    n = len(dims)
    if sparse:
        return tuple(mv.reshape(mv.iota(out_dtype, d), tuple(d if j == i else 1 for j in range(n)))
                     for i, d in enumerate(dims))
    if n == 0:
        return mv.full((0,), 0, out_dtype)
    grids = [mv.reshape(mv.broadcasted_iota(out_dtype, dims, i), (1, *dims)) for i in range(n)]
    return mv.concatenate(grids, 0)


_placing_asarray = _placed(ufuncs.asarray, follow=True)
_host_asarray = ufuncs.asarray
_ACTIVE = devices.GPU_DEFAULT_ACTIVE


def asarray(x: ArrayLike, dtype: Any = None, order: str | None = None, *, copy: bool | None = None,
            device: Any = None) -> Any:
    """An ember value for ``x``: tracers and Arrays pass through, everything else converts.

    As ``ufuncs.asarray`` (``copy`` as in ``jax.numpy.asarray``), and the result is put on
    ``device``, else on the device of a device array ``x``, else on the default device
    (``ember.default_device``); the host when none is given."""
    if device is None and not _ACTIVE[0] and not getattr(type(x), "_device_resident", False):
        return _host_asarray(x, dtype, order, copy=copy) if copy else _host_asarray(x, dtype, order)
    return _placing_asarray(x, dtype, order, copy=copy, device=device)

__all__ = [
    "arange", "array", "empty", "empty_like", "eye", "from_dlpack", "full", "full_like", "geomspace",
    "identity", "indices", "linspace", "logspace", "meshgrid", "ones", "ones_like", "zeros", "zeros_like",
]

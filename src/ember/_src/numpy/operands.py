"""Operand helpers shared by the numpy layer's modules (searching, statistics, polynomial,
histograms, bit packing): coercion to ember values, promotion without broadcasting, small
shape and counting building blocks over the primitives, and the static-size checks."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.array import Array, aligned_copy
from ember._src.core import get_aval as _aval
from ember._src.numpy import ufuncs
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember._src.prims import reductions as red
from ember.errors import ShapeError, TracerError

ArrayLike = Any
INDEX_DTYPE = dt.int32


def _arr(x: ArrayLike) -> Any:
    """An ember value (Array or tracer) for ``x``."""
    if isinstance(x, (Array, core.Tracer)):
        return x
    return ufuncs.asarray(x)


def _is_scalar(x: Any) -> bool:
    return isinstance(x, (bool, int, float, complex))


def _convert(x: Any, dtype: Any, weak: bool = False) -> Any:
    """``x`` as the canonical form of ``dtype`` (see ``ufuncs._convert``)."""
    return ufuncs._convert(x, dt.canonicalize(dtype), weak)


def _promote(name: str, *xs: ArrayLike, to: str | None = None) -> list[Any]:
    """Promote to a common dtype (JAX lattice, weak Python scalars) without broadcasting."""
    ops = [x if _is_scalar(x) else _arr(x) for x in xs]
    dtype, weak = dt.promote(*[dt.dtype_and_weak(o) for o in ops])
    if to == "inexact" and not dt.is_inexact(dtype):
        dtype = dt.to_float(dtype) if not weak else dt.float32
    out = []
    for o in ops:
        if _is_scalar(o):
            ufuncs._check_scalar_fits(o, dtype, name)
            o = Array(aligned_copy(np.asarray(o).astype(dtype)), weak)
        else:
            o = _convert(o, dtype, weak)
        out.append(o)
    return out


def _inexact(name: str, x: ArrayLike) -> Any:
    (x,) = _promote(name, x, to="inexact")
    return x


def _ravel(x: Any) -> Any:
    return mv.reshape(x, (sh.size(_aval(x).shape),))


def _full(shape: Sequence, value: Any, dtype: Any) -> Any:
    return mv.full(tuple(shape), value, dtype)


def _scalar(value: Any, dtype: Any) -> Any:
    """A 0-d array of ``dtype`` from a Python scalar or a (possibly traced) 0-d value."""
    if _is_scalar(value) or isinstance(value, (np.generic, np.ndarray)):
        return _full((), value, dtype)
    return _convert(mv.reshape(_arr(value), ()), dtype)


def _bcast(x: Any, shape: Sequence) -> Any:
    return mv.broadcast_to_rank_shape(x, tuple(shape)) if _aval(x).shape != tuple(shape) else x


def _select(c: Any, a: Any, b: Any) -> Any:
    """``where`` for operands of one dtype; scalars and 0-d values broadcast."""
    shape = sh.broadcast_shapes(*[_aval(v).shape for v in (c, a, b)], op="where")
    return ew.select(_bcast(c, shape), _bcast(a, shape), _bcast(b, shape))


_to_bool = ufuncs._to_bool


def _isnan(x: Any) -> Any:
    if not dt.is_inexact(_aval(x).dtype):
        return mv.full_like(x, False, dt.bool_)
    if dt.is_complex(_aval(x).dtype):
        return ew.bitwise_or(ew.ne(ew.real(x), ew.real(x)), ew.ne(ew.imag(x), ew.imag(x)))
    return ew.ne(x, x)


def _sum(x: Any, axis: int | None = None) -> Any:
    return red.reduce_sum(x, None if axis is None else (sh.normalize_axis(axis, _aval(x).ndim),))


def _count(mask: Any, axis: int | None = None) -> Any:
    """Number of True entries (int32)."""
    return _sum(_convert(mask, INDEX_DTYPE), axis)


def _iota(n: Any) -> Any:
    return mv.iota(INDEX_DTYPE, n)


def _slice1(x: Any, start: Any, stop: Any, axis: int = 0) -> Any:
    return mv.slice_in_dim(x, start, stop, 1, sh.normalize_axis(axis, _aval(x).ndim))


def _axis(name: str, axis: int, ndim: int) -> int:
    try:
        return sh.normalize_axis(axis, ndim)
    except ShapeError as e:
        raise type(e)(f"{name}: {e}") from None


def _concrete_int(v: Any, what: str) -> int:
    """A static integer from ``v`` (int, NumPy integer, concrete 0-d integer array); a traced
    value raises :class:`TracerError` naming ``what``."""
    if isinstance(v, core.Tracer):
        v = core.concrete_or_error(v, what)
    try:
        return operator.index(v)
    except TypeError:
        raise TypeError(f"{what} must be an integer, got {v!r}") from None


def _static_int(x: Any, what: str) -> int:
    try:
        return operator.index(x)
    except TracerError:
        raise TracerError(f"{what} must be a static Python int, got a traced value") from None


def _data_dependent(name: str, x: Any) -> np.ndarray:
    try:
        return core.concrete_or_error(x, f"the input of {name}")
    except TracerError:
        raise TracerError(
            f"{name}: the size of the result depends on the values of the input, which are not known "
            f"under jit/tracing. Pass a static `size=` (and optionally `fill_value=`) to "
            f"{name}(..., size=N): the result is truncated or padded to N entries.") from None

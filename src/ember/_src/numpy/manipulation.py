"""NumPy array manipulation: reshaping, transposing, joining, splitting, tiling, flipping and rolling
(padding is in :mod:`.padding`, triangles and diagonals in :mod:`.diagonals`).

Everything is written over the movement primitives (``reshape``, ``transpose``, ``slice``, ``rev``,
``concatenate``, ``pad``, ``broadcast_in_dim``, ...) so it works eagerly, under ``jit`` and under
every transformation. Shape arguments (axes, sizes, sections, pad widths) must be static; bad ones
raise :class:`~ember.errors.ShapeError` (a ``ValueError``) naming the argument or axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.array import Array, asarray_eager
from ember._src.numpy import ufuncs
from ember._src.numpy.indexing import _index
from ember._src.numpy.operands import _concrete_int
from ember._src.prims import dynamic_slicing as dsl
from ember._src.prims import elementwise as ew
from ember._src.prims import indexing as ix
from ember._src.prims import movement as mv
from ember._src.prims import reductions as red
from ember.errors import ShapeError, TracerError

ArrayLike = Any


def _arr(x: ArrayLike) -> Any:
    return x if isinstance(x, (Array, core.Tracer)) else ufuncs.asarray(x)


def _shape(x: Any) -> tuple:
    return core.get_aval(x).shape


def _ndim(x: Any) -> int:
    return core.get_aval(x).ndim


def _dim(v: Any, what: str) -> Any:
    if isinstance(v, sh.DimExpr):
        return v
    return _concrete_int(v, what)


def _axes_tuple(axis: Any) -> tuple:
    return tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)


def _seq(arrays: Any, name: str) -> list:
    if isinstance(arrays, (Array, core.Tracer)):
        if _ndim(arrays) == 0:
            raise ShapeError(f"{name}: expected a sequence of arrays, got a 0-d array")
        return [arrays[i] for i in range(_shape(arrays)[0])]
    return [_arr(x) for x in arrays]


def _promote(name: str, arrs: list, dtype: Any = None) -> list:
    if dtype is not None:
        d, weak = dt.user_dtype(dtype, name), False
    else:
        d, weak = dt.promote(*(dt.dtype_and_weak(x) for x in arrs))
    return [ew.convert_element_type(x, d, weak_type=weak) for x in arrs]


# ---------------------------------------------------------------------------------------------
# shapes and axes
# ---------------------------------------------------------------------------------------------


def _check_order(order: Any, name: str) -> None:
    if order in ("C", "A", None):
        return
    if order in ("F", "K"):
        raise NotImplementedError(f"{name}: order={order!r} is not supported; ember arrays are row-major "
                                  "(order='C')")
    raise ValueError(f"{name}: order must be 'C', 'F', 'A' or 'K', got {order!r}")


def reshape(a: ArrayLike, shape: Any = None, *args: Any, order: str = "C", copy: bool | None = None,
            newshape: Any = None) -> Any:
    """Reshape ``a`` (row-major); one dim may be ``-1``. Accepts ``reshape(a, (2, 3))``,
    ``reshape(a, 2, 3)`` (method style) and ``reshape(a, shape=(2, 3))``. ``copy`` is accepted
    for the Array API (ember arrays are immutable, so sharing or copying is unobservable)."""
    if args:
        if len(args) == 1 and isinstance(args[0], str):
            order = args[0]
        else:
            if newshape is not None:
                raise TypeError("reshape: the shape was given both positionally and by keyword")
            shape = (shape, *args)
    elif shape is None:
        shape = newshape
    elif newshape is not None:
        raise TypeError("reshape: the shape was given both as shape and as newshape")
    if shape is None:
        raise TypeError("reshape: missing the new shape")
    _check_order(order, "reshape")
    x = _arr(a)
    dims = [_dim(d, "reshape: a dimension of the new shape") for d in _axes_tuple(shape)] \
        if not isinstance(shape, (Array, np.ndarray)) or np.ndim(shape) == 0 else \
        [_concrete_int(d, "reshape: a dimension") for d in np.asarray(shape).reshape(-1)]
    return mv.reshape(x, dims)


def ravel(a: ArrayLike, order: str = "C") -> Any:
    """The elements of ``a`` as a 1-d array (row-major)."""
    _check_order(order, "ravel")
    x = _arr(a)
    return mv.reshape(x, (sh.size(_shape(x)),))


def flatten(a: ArrayLike, order: str = "C") -> Any:
    """``a.flatten()``: the elements as a 1-d array (the same as :func:`ravel` for ember arrays)."""
    _check_order(order, "flatten")
    return ravel(a)


def transpose(a: ArrayLike, *args: Any, axes: Any = None) -> Any:
    """Permute the axes (reverse them when ``axes`` is ``None``); method style ``x.transpose(1, 0)``
    works too."""
    if args:
        if axes is not None:
            raise TypeError("transpose: axes given both positionally and by keyword")
        axes = args[0] if len(args) == 1 else args
    x = _arr(a)
    nd = _ndim(x)
    if axes is None:
        return mv.transpose(x, tuple(reversed(range(nd))))
    axes = _axes_tuple(axes)
    if len(axes) != nd:
        raise ShapeError(f"transpose: axes {tuple(axes)} don't match an array of dimension {nd}")
    return mv.transpose(x, sh.normalize_axes(axes, nd, "transpose axis"))


def permute_dims(a: ArrayLike, /, axes: Sequence[int]) -> Any:
    """Array-API name of :func:`transpose` with explicit ``axes``."""
    return transpose(a, axes=tuple(axes))


def matrix_transpose(x: ArrayLike, /) -> Any:
    """Swap the last two axes."""
    x = _arr(x)
    nd = _ndim(x)
    if nd < 2:
        raise ShapeError(f"matrix_transpose: x must have at least 2 dimensions, got {nd}")
    return mv.transpose(x, (*range(nd - 2), nd - 1, nd - 2))


def swapaxes(a: ArrayLike, axis1: int, axis2: int) -> Any:
    """Interchange two axes."""
    x = _arr(a)
    nd = _ndim(x)
    i, j = sh.normalize_axis(axis1, nd, "axis1"), sh.normalize_axis(axis2, nd, "axis2")
    perm = list(range(nd))
    perm[i], perm[j] = perm[j], perm[i]
    return mv.transpose(x, perm)


def moveaxis(a: ArrayLike, source: int | Sequence[int], destination: int | Sequence[int]) -> Any:
    """Move axes ``source`` to positions ``destination`` (other axes keep their order)."""
    x = _arr(a)
    nd = _ndim(x)
    src = sh.normalize_axes(_axes_tuple(source), nd, "source axis")
    dst = sh.normalize_axes(_axes_tuple(destination), nd, "destination axis")
    if len(src) != len(dst):
        raise ShapeError(f"moveaxis: `source` ({len(src)} axes) and `destination` ({len(dst)} axes) must "
                         "have the same number of elements")
    order = [i for i in range(nd) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return mv.transpose(x, order)


def expand_dims(a: ArrayLike, axis: int | Sequence[int]) -> Any:
    """Insert size-1 axes at positions ``axis`` (an int or a tuple) of the result."""
    x = _arr(a)
    axes = _axes_tuple(axis)
    out_nd = _ndim(x) + len(axes)
    dims = sorted(sh.normalize_axes(axes, out_nd, "expand_dims axis"))
    shape = list(_shape(x))
    for d in dims:
        shape.insert(d, 1)
    return mv.reshape(x, shape)


def squeeze(a: ArrayLike, axis: int | Sequence[int] | None = None) -> Any:
    """Remove size-1 axes (all of them when ``axis`` is ``None``)."""
    x = _arr(a)
    shape = _shape(x)
    nd = len(shape)
    if axis is None:
        dims = tuple(i for i, d in enumerate(shape) if isinstance(d, int) and d == 1)
    else:
        if nd == 0:
            for ax in _axes_tuple(axis):
                sh.normalize_axis(ax, 0, "squeeze axis")
            return x
        dims = sh.normalize_axes(_axes_tuple(axis), nd, "squeeze axis")
        for d in dims:
            if not (isinstance(shape[d], int) and shape[d] == 1):
                raise ShapeError(f"squeeze: cannot squeeze axis {d} of size {shape[d]} (shape "
                                 f"{sh.shape_str(shape)}): only axes of size 1 can be removed")
    return mv.squeeze(x, dims) if dims else x


def _shape_arg(shape: Any, what: str) -> tuple:
    return tuple(_dim(d, what) for d in _axes_tuple(shape))


def broadcast_shapes(*shapes: Any) -> tuple:
    """The NumPy broadcast of several shapes (ints count as 1-d shapes)."""
    return sh.broadcast_shapes(*(_shape_arg(s, "broadcast_shapes: a dimension") for s in shapes),
                               op="broadcast_shapes")


def broadcast_to(array: ArrayLike, shape: Any) -> Any:
    """Broadcast ``array`` to ``shape`` (NumPy rules, trailing alignment)."""
    x = _arr(array)
    shape = _shape_arg(shape, "broadcast_to: a dimension")
    xs = _shape(x)
    bad = len(shape) < len(xs)
    if not bad:
        for s, t in zip(reversed(xs), reversed(shape)):
            if not (s == t or (isinstance(s, int) and s == 1)):
                bad = True
                break
    if bad or any(isinstance(d, int) and d < 0 for d in shape):
        raise ShapeError(f"broadcast_to: cannot broadcast an array of shape {sh.shape_str(xs)} to the "
                         f"requested shape {sh.shape_str(shape)}")
    return mv.broadcast_to_rank_shape(x, shape) if tuple(shape) != xs else x


def broadcast_arrays(*args: ArrayLike) -> list:
    """Broadcast all arguments to their common shape."""
    arrs = [_arr(a) for a in args]
    shape = sh.broadcast_shapes(*(_shape(a) for a in arrs), op="broadcast_arrays")
    return [broadcast_to(a, shape) for a in arrs]


# ---------------------------------------------------------------------------------------------
# joining
# ---------------------------------------------------------------------------------------------


def concatenate(arrays: Any, axis: int | None = 0, dtype: Any = None) -> Any:
    """Join arrays along an existing axis (flattened first when ``axis`` is ``None``); dtypes promote."""
    arrs = _seq(arrays, "concatenate")
    if not arrs:
        raise ShapeError("concatenate: need at least one array to concatenate")
    if axis is None:
        arrs = [ravel(x) for x in arrs]
        axis = 0
    arrs = _promote("concatenate", arrs, dtype)
    nd = _ndim(arrs[0])
    if nd == 0:
        raise ShapeError("concatenate: zero-dimensional arrays cannot be concatenated")
    for i, x in enumerate(arrs[1:], 1):
        if _ndim(x) != nd:
            raise ShapeError(f"concatenate: all the input arrays must have the same number of dimensions, "
                             f"but the array at index 0 has {nd} dimension(s) and the array at index {i} "
                             f"has {_ndim(x)}")
    axis = sh.normalize_axis(axis, nd, "concatenate axis")
    return mv.concatenate(arrs, axis)


def concat(arrays: Any, /, *, axis: int | None = 0) -> Any:
    """Array-API name of :func:`concatenate`."""
    return concatenate(arrays, axis=axis)


def stack(arrays: Any, axis: int = 0, out: None = None, dtype: Any = None) -> Any:
    """Join equally shaped arrays along a new axis."""
    if out is not None:
        raise NotImplementedError("stack: the 'out' argument is not supported")
    arrs = _seq(arrays, "stack")
    if not arrs:
        raise ShapeError("stack: need at least one array to stack")
    s0 = _shape(arrs[0])
    for i, x in enumerate(arrs[1:], 1):
        if _shape(x) != s0:
            raise ShapeError(f"stack: all input arrays must have the same shape, but the array at index 0 "
                             f"has shape {sh.shape_str(s0)} and the array at index {i} has "
                             f"{sh.shape_str(_shape(x))}")
    axis = sh.normalize_axis(axis, len(s0) + 1, "stack axis")
    arrs = _promote("stack", arrs, dtype)
    new_shape = (*s0[:axis], 1, *s0[axis:])
    return mv.concatenate([mv.reshape(x, new_shape) for x in arrs], axis)


def vstack(tup: Any, *, dtype: Any = None) -> Any:
    """Stack arrays row-wise (1-d arrays become rows)."""
    return concatenate([atleast_2d(x) for x in _seq(tup, "vstack")], axis=0, dtype=dtype)


def hstack(tup: Any, *, dtype: Any = None) -> Any:
    """Stack arrays column-wise (along axis 1; along axis 0 for 1-d arrays)."""
    arrs = [atleast_1d(x) for x in _seq(tup, "hstack")]
    axis = 0 if arrs and _ndim(arrs[0]) == 1 else 1
    return concatenate(arrs, axis=axis, dtype=dtype)


def dstack(tup: Any, *, dtype: Any = None) -> Any:
    """Stack arrays depth-wise (along axis 2)."""
    return concatenate([atleast_3d(x) for x in _seq(tup, "dstack")], axis=2, dtype=dtype)


def column_stack(tup: Any) -> Any:
    """Stack 1-d arrays as columns of a 2-d array (2-d arrays are stacked as they are)."""
    cols = []
    for x in _seq(tup, "column_stack"):
        nd = _ndim(x)
        if nd == 0:
            x = mv.reshape(x, (1, 1))
        elif nd == 1:
            x = mv.reshape(x, (_shape(x)[0], 1))
        cols.append(x)
    return concatenate(cols, axis=1)


# ---------------------------------------------------------------------------------------------
# splitting
# ---------------------------------------------------------------------------------------------


def _split(name: str, ary: ArrayLike, indices_or_sections: Any, axis: int, equal: bool) -> list:
    x = _arr(ary)
    nd = _ndim(x)
    axis = sh.normalize_axis(axis, nd, f"{name} axis")
    n = _shape(x)[axis]
    if not isinstance(n, int):
        raise ShapeError(f"{name}: cannot split the symbolic axis {axis} of size {n}")
    ios = indices_or_sections
    if isinstance(ios, core.Tracer):
        ios = core.concrete_or_error(ios, f"{name}: indices_or_sections")
    if isinstance(ios, Array):
        ios = ios.value
    if np.ndim(ios) == 0:
        s = _concrete_int(ios, f"{name}: sections")
        if s <= 0:
            raise ShapeError(f"{name}: number of sections must be larger than 0, got {s}")
        if equal and n % s:
            raise ShapeError(f"{name}: array split does not result in an equal division: axis {axis} of "
                             f"size {n} into {s} sections")
        q, r = divmod(n, s)
        sizes = [q + 1] * r + [q] * (s - r)
        points = list(np.cumsum(sizes)[:-1])
    else:
        points = [_concrete_int(i, f"{name}: a split index") for i in np.asarray(ios).reshape(-1)]
    bounds = [0, *points, n]
    pre = (slice(None),) * axis
    return [_index(x, (*pre, slice(int(st), int(end))), "raise") for st, end in zip(bounds[:-1], bounds[1:])]


def split(ary: ArrayLike, indices_or_sections: Any, axis: int = 0) -> list:
    """Split into equal sections (an int; the axis size must divide evenly) or at indices."""
    return _split("split", ary, indices_or_sections, axis, equal=True)


def array_split(ary: ArrayLike, indices_or_sections: Any, axis: int = 0) -> list:
    """Like :func:`split`, but ``n`` sections need not divide the axis evenly."""
    return _split("array_split", ary, indices_or_sections, axis, equal=False)


def hsplit(ary: ArrayLike, indices_or_sections: Any) -> list:
    """Split along axis 1 (axis 0 for 1-d arrays)."""
    x = _arr(ary)
    if _ndim(x) == 0:
        raise ShapeError("hsplit only works on arrays of 1 or more dimensions")
    return _split("hsplit", x, indices_or_sections, 1 if _ndim(x) > 1 else 0, equal=True)


def vsplit(ary: ArrayLike, indices_or_sections: Any) -> list:
    """Split along axis 0 (arrays of at least 2 dimensions)."""
    x = _arr(ary)
    if _ndim(x) < 2:
        raise ShapeError("vsplit only works on arrays of 2 or more dimensions")
    return _split("vsplit", x, indices_or_sections, 0, equal=True)


def dsplit(ary: ArrayLike, indices_or_sections: Any) -> list:
    """Split along axis 2 (arrays of at least 3 dimensions)."""
    x = _arr(ary)
    if _ndim(x) < 3:
        raise ShapeError("dsplit only works on arrays of 3 or more dimensions")
    return _split("dsplit", x, indices_or_sections, 2, equal=True)


def unstack(x: ArrayLike, /, *, axis: int = 0) -> tuple:
    """The slices of ``x`` along ``axis``, as a tuple."""
    x = _arr(x)
    nd = _ndim(x)
    if nd == 0:
        raise ShapeError("unstack: input must be at least 1-d")
    axis = sh.normalize_axis(axis, nd, "unstack axis")
    n = _concrete_int(_shape(x)[axis], "unstack: the axis size")
    pre = (slice(None),) * axis
    return tuple(_index(x, (*pre, i), "raise") for i in range(n))


# ---------------------------------------------------------------------------------------------
# tiling and repeating
# ---------------------------------------------------------------------------------------------


def tile(A: ArrayLike, reps: int | Sequence[int]) -> Any:
    """Repeat ``A`` ``reps`` times along each axis.

    A rep may be a named dynamic axis's size, as JAX's shape polymorphism allows:
    ``jnp.tile(v, (x.shape[0], 1))``."""
    x = _arr(A)
    reps = tuple(r if sh.is_symbolic(r) else _concrete_int(r, "tile: reps") for r in _axes_tuple(reps))
    if any(not sh.is_symbolic(r) and r < 0 for r in reps):
        raise ShapeError(f"tile: reps must be non-negative, got {reps}")
    shape = _shape(x)
    d = max(len(reps), len(shape))
    shape = (1,) * (d - len(shape)) + tuple(shape)
    reps = (1,) * (d - len(reps)) + reps
    x = mv.reshape(x, shape)
    if all(not sh.is_symbolic(r) and r == 1 for r in reps):
        return x
    inter = tuple(v for r, s in zip(reps, shape) for v in (r, s))
    b = mv.broadcast_in_dim(x, inter, tuple(range(1, 2 * d, 2)))
    return mv.reshape(b, tuple(r * s for r, s in zip(reps, shape)))


def _repeat_traced(x: Any, reps: Any, axis: int, n: int, total: int) -> Any:
    """Repeat with traced counts into a static length: index j takes element #{i: cumsum_i <= j}."""
    reps = ew.convert_element_type(reps, dt.int32)
    if _ndim(reps) == 0 or _shape(reps) != (n,):
        reps = broadcast_to(reps, (n,))
    cum = red.cumsum(reps, 0)
    j = mv.broadcasted_iota(dt.int32, (total, n), 0)
    le = ew.convert_element_type(ew.le(mv.broadcast_in_dim(cum, (total, n), (1,)), j), dt.int32)
    idx = red.reduce_sum(le, (1,))
    return ix.take(x, idx, axis=axis, mode="clip")


def repeat(a: ArrayLike, repeats: Any, axis: int | None = None, *,
           total_repeat_length: int | None = None) -> Any:
    """Repeat each element ``repeats`` times along ``axis`` (the flattened array when ``None``).

    ``repeats`` is an int or an array broadcastable to the axis; an array must be concrete unless
    ``total_repeat_length`` fixes the output length (extra positions repeat the last element,
    surplus repeats are cut, as in JAX).
    """
    x = _arr(a)
    if axis is None:
        x = ravel(x)
        axis = 0
    shape = _shape(x)
    axis = sh.normalize_axis(axis, len(shape), "repeat axis")
    n = shape[axis]
    if total_repeat_length is not None:
        total_repeat_length = _concrete_int(total_repeat_length, "repeat: total_repeat_length")
    traced = isinstance(repeats, core.Tracer)
    if traced:
        try:
            repeats = core.concrete_or_error(repeats, "repeat: repeats")
            traced = False
        except TracerError:
            if total_repeat_length is None:
                raise TracerError("repeat: traced `repeats` need a static total_repeat_length= (the output "
                                  "size depends on their values)") from None
    if traced:
        n = _concrete_int(n, "repeat: the axis size")
        return _repeat_traced(x, repeats, axis, n, total_repeat_length)
    r = np.asarray(repeats.value if isinstance(repeats, Array) else repeats)
    if r.dtype.kind not in "iub":
        raise TypeError(f"repeat: repeats must be integers, got {r.dtype}")
    if (r < 0).any():
        raise ShapeError("repeat: repeats may not contain negative values")
    if r.size == 1 and (total_repeat_length is None or total_repeat_length == int(r.reshape(())) * n):
        k = int(r.reshape(()))
        if k == 1:
            return x
        b = mv.broadcast_in_dim(x, (*shape[:axis + 1], k, *shape[axis + 1:]),
                                (*range(axis + 1), *range(axis + 2, len(shape) + 1)))
        return mv.reshape(b, (*shape[:axis], n * k, *shape[axis + 1:]))
    n = _concrete_int(n, "repeat: the axis size")
    try:
        r = np.broadcast_to(r.reshape(-1) if r.size == 1 else r, (n,))
    except ValueError:
        raise ShapeError(f"repeat: repeats of shape {r.shape} do not match axis {axis} of size {n}") from None
    idx = np.repeat(np.arange(n), r)
    if total_repeat_length is not None:
        if len(idx) >= total_repeat_length:
            idx = idx[:total_repeat_length]
        else:
            idx = np.concatenate([idx, np.full(total_repeat_length - len(idx), max(n - 1, 0))])
    if n == 0:
        return mv.full((*shape[:axis], len(idx), *shape[axis + 1:]), 0, core.get_aval(x).dtype) \
            if len(idx) == 0 else _raise_empty_repeat(axis)
    return ix.take(x, asarray_eager(idx.astype(np.int32)), axis=axis, mode="clip")


def _raise_empty_repeat(axis: int) -> Any:
    raise ShapeError(f"repeat: cannot fill total_repeat_length from the empty axis {axis}")


# ---------------------------------------------------------------------------------------------
# flipping and rolling
# ---------------------------------------------------------------------------------------------


def flip(m: ArrayLike, axis: int | Sequence[int] | None = None) -> Any:
    """Reverse the order of elements along ``axis`` (all axes when ``None``)."""
    x = _arr(m)
    axes = sh.normalize_axes(None if axis is None else _axes_tuple(axis), _ndim(x), "flip axis")
    return mv.rev(x, axes) if axes else x


def fliplr(m: ArrayLike) -> Any:
    """Reverse along axis 1 (needs at least 2 dimensions)."""
    x = _arr(m)
    if _ndim(x) < 2:
        raise ShapeError(f"fliplr: input must be at least 2-d, got {_ndim(x)}-d")
    return mv.rev(x, (1,))


def flipud(m: ArrayLike) -> Any:
    """Reverse along axis 0 (needs at least 1 dimension)."""
    x = _arr(m)
    if _ndim(x) < 1:
        raise ShapeError("flipud: input must be at least 1-d")
    return mv.rev(x, (0,))


def _roll_static(x: Any, s: int, axis: int) -> Any:
    n = _shape(x)[axis]
    if not isinstance(n, int):
        raise ShapeError(f"roll: cannot roll the symbolic axis {axis} of size {n}")
    if n == 0 or s % n == 0:
        return x
    s %= n
    return mv.concatenate([mv.slice_in_dim(x, n - s, n, 1, axis), mv.slice_in_dim(x, 0, n - s, 1, axis)],
                          axis)


def _roll_traced(x: Any, s: Any, axis: int) -> Any:
    n = _concrete_int(_shape(x)[axis], "roll: the axis size")
    if n == 0:
        return x
    start = ufuncs.remainder(ufuncs.subtract(n, ufuncs.remainder(s, n)), n)
    shape = list(_shape(x))
    starts: list[Any] = [0] * len(shape)
    starts[axis] = start
    return dsl.dynamic_slice(mv.concatenate([x, x], axis), starts, shape)


def roll(a: ArrayLike, shift: Any, axis: int | Sequence[int] | None = None) -> Any:
    """Roll elements along ``axis`` (the flattened array when ``None``); ``shift`` and ``axis`` may be
    tuples (broadcast against each other) and ``shift`` may be traced."""
    x = _arr(a)
    if axis is None:
        return mv.reshape(roll(ravel(x), shift, 0), _shape(x))
    nd = _ndim(x)
    axes = [sh.normalize_axis(ax, nd, "roll axis") for ax in _axes_tuple(axis)]
    if isinstance(shift, core.Tracer) or (isinstance(shift, (list, tuple)) and
                                          any(isinstance(s, core.Tracer) for s in shift)):
        s = _arr(shift) if not isinstance(shift, (list, tuple)) else stack(list(shift))
        if not dt.is_integer(core.get_aval(s).dtype):
            raise TypeError(f"roll: shift must be integers, got {core.get_aval(s).dtype}")
        k = max(len(axes), 1 if _ndim(s) == 0 else _shape(s)[0])
        if _ndim(s) > 1 or (_ndim(s) == 1 and _shape(s)[0] not in (1, k)) or len(axes) not in (1, k):
            raise ShapeError(f"roll: shift of shape {sh.shape_str(_shape(s))} and axis {tuple(axes)} do "
                             "not broadcast")
        for i in range(k):
            si = s if _ndim(s) == 0 else _index(s, min(i, _shape(s)[0] - 1), "raise")
            x = _roll_traced(x, si, axes[min(i, len(axes) - 1)])
        return x
    sv = np.asarray(shift.value if isinstance(shift, Array) else shift)
    if sv.dtype.kind not in "iu":
        raise TypeError(f"roll: shift must be integers, got {sv.dtype}")
    try:
        pairs = np.broadcast(sv, np.asarray(axes))
    except ValueError:
        raise ShapeError(f"roll: shift {sv.tolist()} and axis {tuple(axes)} do not broadcast") from None
    totals: dict[int, int] = {}
    for s, ax in pairs:
        totals[int(ax)] = totals.get(int(ax), 0) + int(s)
    for ax, s in totals.items():
        x = _roll_static(x, s, ax)
    return x


def rot90(m: ArrayLike, k: int = 1, axes: tuple[int, int] = (0, 1)) -> Any:
    """Rotate by 90 degrees ``k`` times in the plane of ``axes`` (from the first towards the second)."""
    x = _arr(m)
    nd = _ndim(x)
    axes = tuple(axes)
    if len(axes) != 2:
        raise ShapeError(f"rot90: axes must have 2 entries, got {axes}")
    if nd < 2:
        raise ShapeError(f"rot90: the array must be at least 2-d, got {nd}-d")
    a0, a1 = sh.normalize_axis(axes[0], nd, "rot90 axis"), sh.normalize_axis(axes[1], nd, "rot90 axis")
    if a0 == a1:
        raise ShapeError(f"rot90: axes must be different, got {axes}")
    k = _concrete_int(k, "rot90: k") % 4
    if k == 0:
        return x
    if k == 2:
        return mv.rev(x, (a0, a1))
    perm = list(range(nd))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    if k == 1:
        return mv.transpose(mv.rev(x, (a1,)), perm)
    return mv.rev(mv.transpose(x, perm), (a1,))


# ---------------------------------------------------------------------------------------------
# dimension helpers, dtype, copy
# ---------------------------------------------------------------------------------------------


def atleast_1d(*arys: ArrayLike) -> Any:
    """Views with at least one dimension (a list when given several arrays)."""
    out = [x if _ndim(x) >= 1 else mv.reshape(x, (1,)) for x in map(_arr, arys)]
    return out[0] if len(out) == 1 else out


def atleast_2d(*arys: ArrayLike) -> Any:
    """Views with at least two dimensions (1-d ``(n,)`` becomes ``(1, n)``)."""
    out = []
    for x in map(_arr, arys):
        nd = _ndim(x)
        out.append(x if nd >= 2 else mv.reshape(x, (1, *_shape(x)) if nd == 1 else (1, 1)))
    return out[0] if len(out) == 1 else out


def atleast_3d(*arys: ArrayLike) -> Any:
    """Views with at least three dimensions (``(n,)`` -> ``(1, n, 1)``, ``(m, n)`` -> ``(m, n, 1)``)."""
    out = []
    for x in map(_arr, arys):
        s = _shape(x)
        new = {0: (1, 1, 1), 1: (1, *s, 1), 2: (*s, 1)}.get(len(s), s)
        out.append(mv.reshape(x, new) if new != s else x)
    return out[0] if len(out) == 1 else out


def astype(x: ArrayLike, dtype: Any, /, *, copy: bool = False, device: Any = None) -> Any:
    """Cast to ``dtype`` (complex to real keeps the real part; float to int truncates)."""
    if dtype is None:
        raise TypeError("astype: dtype must be given")
    return ew.convert_element_type(_arr(x), dt.user_dtype(dtype, "astype"))


def copy(a: ArrayLike, order: str | None = None) -> Any:
    """A copy of ``a``."""
    _check_order(order, "copy")
    return ew.copy(_arr(a))


def ndim(a: ArrayLike) -> int:
    """Number of dimensions."""
    if isinstance(a, (Array, core.Tracer)):
        return _ndim(a)
    return int(np.ndim(a))


def shape(a: ArrayLike) -> tuple:
    """The shape, as a tuple."""
    if isinstance(a, (Array, core.Tracer)):
        return tuple(_shape(a))
    return tuple(np.shape(a))


def size(a: ArrayLike, axis: int | None = None) -> Any:
    """Number of elements (along ``axis`` when given)."""
    s = shape(a)
    if axis is None:
        return sh.size(s)
    return s[sh.normalize_axis(axis, len(s), "size axis")]


__all__ = [
    "array_split", "astype", "atleast_1d", "atleast_2d", "atleast_3d", "broadcast_arrays",
    "broadcast_shapes", "broadcast_to", "column_stack", "concat", "concatenate", "copy", "dsplit",
    "dstack", "expand_dims", "flatten", "flip", "fliplr", "flipud", "hsplit", "hstack",
    "matrix_transpose", "moveaxis", "ndim", "permute_dims", "ravel", "repeat", "reshape", "roll",
    "rot90", "shape", "size", "split", "squeeze", "stack", "swapaxes", "tile", "transpose", "unstack",
    "vsplit", "vstack",
]

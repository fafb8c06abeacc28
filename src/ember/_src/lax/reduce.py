"""Reductions with a user-given computation: ``lax.reduce`` and ``lax.reduce_window``.

Both recognize the monoids ``lax.add``/``mul``/``max``/``min``/``bitwise_and``/``bitwise_or`` and use
the matching ``reduce_*`` primitive (``reduce``) or a separable chain of strided slices combined
elementwise (``reduce_window``: ``sum(window)`` slices, one axis at a time, no window buffer). Any
other ``computation`` (also over pytrees of operands, e.g. a value/index pair for argmax) is applied
pairwise in a balanced tree (``log2(n)`` levels), vectorized with ``vmap``, so it may be written for
scalars. As in XLA, ``init_value`` enters each result once and padding/dilation holes are skipped
(the monoids fill them with their identity; a general computation gets ``init_value`` there, so it
should be an identity of the computation, as XLA assumes: the combination order is unspecified).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember._src import core
from ember._src import dtypes as dt
from ember._src import tree as tu
from ember._src.array import Array, asarray_eager
from ember._src.batching import vmap
from ember._src.lax.windows import (
    dilate_and_pad,
    dilate_dim,
    normalize_pads,
    out_size,
    padtype_to_pads,
    positive_ints,
    tap_bounds,
    window_taps,
)
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember._src.prims import reductions as red
from ember._src.shapes import normalize_axis, shape_str
from ember.errors import DTypeError, ShapeError

ArrayLike = Any

# computation -> (reduction primitive function, identity for a dtype)
_MONOIDS: dict[Any, tuple[Callable, Callable[[np.dtype], Any]]] = {
    ew.add: (red.reduce_sum, lambda d: 0),
    ew.mul: (red.reduce_prod, lambda d: 1),
    ew.max: (red.reduce_max, lambda d: _lowest(d)),
    ew.min: (red.reduce_min, lambda d: _highest(d)),
    ew.bitwise_and: (red.reduce_and, lambda d: True if d == dt.bool_ else -1),
    ew.bitwise_or: (red.reduce_or, lambda d: 0),
}


def _lowest(d: np.dtype) -> Any:
    if d == dt.bool_:
        return False
    return -np.inf if dt.is_inexact(d) else np.iinfo(d).min


def _highest(d: np.dtype) -> Any:
    if d == dt.bool_:
        return True
    return np.inf if dt.is_inexact(d) else np.iinfo(d).max


def _as_operand(x: ArrayLike) -> Any:
    return x if isinstance(x, (Array, core.Tracer)) else asarray_eager(x)


def _init_scalar(v: ArrayLike, d: np.dtype, name: str) -> Any:
    """``v`` as a 0-d value of dtype ``d`` (Python/NumPy scalars convert; arrays must match)."""
    if isinstance(v, (Array, core.Tracer)):
        a = core.get_aval(v)
        if a.shape != ():
            raise ShapeError(f"{name}: init_value must be a scalar, got shape {shape_str(a.shape)}")
        if a.dtype != d:
            raise DTypeError(f"{name}: init_value dtype {a.dtype} differs from operand dtype {d}")
        return v
    arr = np.asarray(v)
    if arr.ndim != 0:
        raise ShapeError(f"{name}: init_value must be a scalar, got shape {arr.shape}")
    return asarray_eager(arr.astype(d))


def _is_identity(init: Any, value: Any) -> bool:
    if isinstance(init, core.Tracer):
        return False
    v = np.asarray(init)
    with np.errstate(all="ignore"):
        return bool(v == np.asarray(value).astype(v.dtype))


def _combine_init(op: Callable, init: Any, r: Any, identity: Any) -> Any:
    if _is_identity(init, identity):
        return r
    return op(mv.broadcast_in_dim(init, core.get_aval(r).shape, ()), r)


def _vectorized(computation: Callable, treedef: Any) -> Callable[[list, list], list]:
    """``computation`` applied elementwise to two lists of equally shaped leaves (vmapped over their
    flattened elements, so a computation written for scalars works)."""

    def pair(a: list, b: list) -> list:
        out = computation(tu.unflatten(treedef, a), tu.unflatten(treedef, b))
        leaves, out_tree = tu.flatten(out)
        if out_tree != treedef:
            raise TypeError(f"the reduction computation must return the structure of its operands "
                            f"({treedef}), got {out_tree}")
        return leaves

    def apply(a: list, b: list) -> list:
        shape = core.get_aval(a[0]).shape
        n = 1
        for s in shape:
            n *= s
        if n == 0:
            return list(a)
        fa = [mv.reshape(v, (n,)) for v in a]
        fb = [mv.reshape(v, (n,)) for v in b]
        out = vmap(pair)(fa, fb)
        res = []
        for o, ref in zip(out, a):
            ra = core.get_aval(ref)
            if core.get_aval(o).dtype != ra.dtype:
                raise DTypeError(f"the reduction computation changed a dtype: {ra.dtype} -> "
                                 f"{core.get_aval(o).dtype}")
            res.append(mv.reshape(o, shape))
        return res

    return apply


def _tree_fold(leaves: list, axis: int, combine: Callable[[list, list], list]) -> list:
    """Reduce the non-empty ``axis`` (removed) of every leaf pairwise with ``combine`` in a balanced
    tree."""
    n = core.get_aval(leaves[0]).shape[axis]
    while n > 1:
        h = n // 2
        left = [mv.slice_in_dim(v, 0, h, 1, axis) for v in leaves]
        right = [mv.slice_in_dim(v, h, 2 * h, 1, axis) for v in leaves]
        merged = combine(left, right)
        if n % 2:
            merged = [mv.concatenate([m, mv.slice_in_dim(v, 2 * h, n, 1, axis)], axis)
                      for m, v in zip(merged, leaves)]
        leaves, n = merged, h + n % 2
    return [mv.squeeze(v, (axis,)) for v in leaves]


def _prepare(name: str, operands: Any, init_values: Any) -> tuple[list, list, Any]:
    leaves, treedef = tu.flatten(operands)
    init_leaves, init_tree = tu.flatten(init_values)
    if not leaves:
        raise ValueError(f"{name} needs at least one operand")
    if init_tree != treedef:
        raise ValueError(f"{name}: operands and init_values have different structures: {treedef} vs "
                         f"{init_tree}")
    leaves = [_as_operand(v) for v in leaves]
    shape = core.get_aval(leaves[0]).shape
    for v in leaves[1:]:
        if core.get_aval(v).shape != shape:
            raise ShapeError(f"{name}: operands have different shapes: {shape_str(shape)} and "
                             f"{shape_str(core.get_aval(v).shape)}")
    inits = [_init_scalar(i, core.get_aval(v).dtype, name) for i, v in zip(init_leaves, leaves)]
    return leaves, inits, treedef


def reduce(operands: Any, init_values: Any, computation: Callable, dimensions: Sequence[int]) -> Any:
    """Reduce ``dimensions`` of ``operands`` (an array or a pytree of equally shaped arrays) with
    ``computation``, as ``jax.lax.reduce``.

    ``lax.add``/``mul``/``max``/``min``/``bitwise_and``/``bitwise_or`` map to the reduction
    primitives (and are differentiable through them); any other binary ``computation`` over the
    operand pytree is applied pairwise in a balanced tree. The result is
    ``computation(init_values, reduced)``.
    """
    leaves, inits, treedef = _prepare("reduce", operands, init_values)
    nd = core.get_aval(leaves[0]).ndim
    dims = sorted({normalize_axis(d, nd, "reduce dimensions") for d in dimensions}, reverse=True)
    if len(dims) != len(list(dimensions)):
        raise ValueError(f"reduce: duplicate dimensions {tuple(dimensions)}")
    if not dims:  # nothing reduced: the operands unchanged (as JAX)
        return tu.unflatten(treedef, leaves)
    if len(leaves) == 1 and computation in _MONOIDS:
        fn, ident = _MONOIDS[computation]
        x, init = leaves[0], inits[0]
        d = core.get_aval(x).dtype
        if fn in (red.reduce_and, red.reduce_or) and not (d == dt.bool_ or dt.is_integer(d)):
            raise DTypeError(f"reduce with {computation.__name__} needs bool or integer operands, got {d}")
        out = fn(x, tuple(dims))
        return tu.unflatten(treedef, [_combine_init(computation, init, out, ident(d))])
    combine = _vectorized(computation, treedef)
    in_shape = core.get_aval(leaves[0]).shape
    if any(in_shape[ax] == 0 for ax in dims):  # nothing to combine: the init values
        shape = tuple(n for i, n in enumerate(in_shape) if i not in dims)
        return tu.unflatten(treedef, [mv.broadcast_in_dim(i, shape, ()) for i in inits])
    for ax in dims:
        leaves = _tree_fold(leaves, ax, combine)
    shape = core.get_aval(leaves[0]).shape
    out = combine([mv.broadcast_in_dim(i, shape, ()) for i in inits], leaves)
    return tu.unflatten(treedef, out)


def _window_config(name: str, shape: tuple, window_dimensions: Sequence[int], window_strides: Any,
                   padding: Any, base_dilation: Any, window_dilation: Any) -> tuple:
    nd = len(shape)
    window = tuple(int(k) for k in window_dimensions)
    if len(window) != nd:
        raise ValueError(f"{name}: window_dimensions has {len(window)} entries for an operand of rank {nd}")
    if any(k < 1 for k in window):
        raise ValueError(f"{name}: window_dimensions must be positive, got {window}")
    strides = positive_ints(window_strides, nd, name, "window_strides")
    bdil = positive_ints(base_dilation, nd, name, "base_dilation")
    wdil = positive_ints(window_dilation, nd, name, "window_dilation")
    if isinstance(padding, str):
        pads = padtype_to_pads(shape, [dilate_dim(k, r) for k, r in zip(window, wdil)], strides, padding)
    else:
        pads = normalize_pads(padding, nd, name)
    return window, strides, pads, bdil, wdil


def _separable_window(x: Any, op: Callable, window: tuple, strides: tuple, wdil: tuple) -> Any:
    for ax, (k, s, r) in enumerate(zip(window, strides, wdil)):
        if k == 1 and s == 1:
            continue
        n = core.get_aval(x).shape[ax]
        m = out_size(n, dilate_dim(k, r), s)
        acc = None
        for t in range(k):
            piece = mv.slice_in_dim(x, *tap_bounds(n, m, s, t * r), s, ax)
            acc = piece if acc is None else op(acc, piece)
        x = acc
    return x


def reduce_window(operand: Any, init_value: Any, computation: Callable, window_dimensions: Sequence[int],
                  window_strides: Sequence[int] | None = None, padding: Any = "VALID",
                  base_dilation: Sequence[int] | None = None,
                  window_dilation: Sequence[int] | None = None) -> Any:
    """Reduce every window of ``operand`` with ``computation``, as ``jax.lax.reduce_window``.

    The operand is dilated by ``base_dilation`` and padded (``"SAME"``, ``"SAME_LOWER"``,
    ``"VALID"`` or ``(low, high)`` pairs) with ``init_value``; windows of ``window_dimensions``
    (dilated by ``window_dilation``) step by ``window_strides``. Pooling is ``reduce_window`` with
    ``lax.max`` and ``-inf`` (max pool) or ``lax.add`` and ``0`` (sum pool).
    """
    leaves, inits, treedef = _prepare("reduce_window", operand, init_value)
    shape = core.get_aval(leaves[0]).shape
    window, strides, pads, bdil, wdil = _window_config("reduce_window", shape, window_dimensions,
                                                       window_strides, padding, base_dilation,
                                                       window_dilation)
    axes = tuple(range(len(shape)))
    if len(leaves) == 1 and computation in _MONOIDS:
        # padding and dilation holes are skipped (XLA): fill them with the monoid's identity
        _, ident = _MONOIDS[computation]
        x, init = leaves[0], inits[0]
        d = core.get_aval(x).dtype
        x = dilate_and_pad(x, mv.full((), ident(d), d), axes, pads, bdil)
        out = _separable_window(x, computation, window, strides, wdil)
        return tu.unflatten(treedef, [_combine_init(computation, init, out, ident(d))])
    leaves = [dilate_and_pad(v, i, axes, pads, bdil) for v, i in zip(leaves, inits)]
    combine = _vectorized(computation, treedef)
    taps = [window_taps(v, axes, window, strides, wdil) for v in leaves]
    nd = len(shape)
    for ax in reversed(range(nd, 2 * nd)):
        taps = _tree_fold(taps, ax, combine)
    out_shape = core.get_aval(taps[0]).shape
    out = combine([mv.broadcast_in_dim(i, out_shape, ()) for i in inits], taps)
    return tu.unflatten(treedef, out)


__all__ = ["reduce", "reduce_window"]

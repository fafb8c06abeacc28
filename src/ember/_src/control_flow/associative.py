"""``associative_scan``: a parallel prefix scan (Blelloch-style odd/even recursion), as
``jax.lax.associative_scan``. It is written over slicing, padding and the user's combine
function, so every transformation applies without a primitive of its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src import tree as tu
from ember._src.prims import elementwise as ew
from ember._src.prims.movement import concatenate, full, pad, rev, slice_in_dim

__all__ = ["associative_scan"]


def _interleave(a: Any, b: Any, axis: int) -> Any:
    """Interleave ``a`` and ``b`` along ``axis`` (``a`` has as many elements as ``b``, or one more)."""
    aa, ba = core.get_aval(a), core.get_aval(b)
    same = aa.shape[axis] == ba.shape[axis]
    a_cfg = [(0, 0, 0)] * aa.ndim
    b_cfg = [(0, 0, 0)] * ba.ndim
    a_cfg[axis] = (0, 1 if same else 0, 1)
    b_cfg[axis] = (1, 0 if same else 1, 1)
    zero = full((), 0, aa.dtype)
    op = ew.bitwise_or if aa.dtype == dt.bool_ else ew.add
    return op(pad(a, zero, a_cfg), pad(b, zero, b_cfg))


def associative_scan(fn: Callable, elems: Any, reverse: bool = False, axis: int = 0) -> Any:
    """Inclusive scan of the associative ``fn`` over ``axis`` of ``elems`` (a pytree of arrays with
    equal sizes along ``axis``), in ``O(log n)`` sequential depth. ``fn(a, b)`` combines two
    pytrees of arrays of the same structure elementwise along the scanned axis (it is called on
    slices holding many elements at once). ``reverse=True`` scans from the end."""
    leaves, tree = tu.flatten(elems)
    if not leaves:
        raise ValueError("associative_scan: elems has no arrays")
    avals = [core.get_aval(x) for x in leaves]
    axis = sh.normalize_axis(axis, avals[0].ndim)
    n = avals[0].shape[axis]
    for a in avals:
        if a.shape[axis] != n:
            raise ValueError(f"associative_scan: array inputs must have the same size along axis {axis}; "
                             f"got shapes {[x.shape for x in avals]}")
    if reverse:
        leaves = [rev(x, (axis,)) for x in leaves]

    def combine(a: list, b: list) -> list:
        c = fn(tu.unflatten(tree, a), tu.unflatten(tree, b))
        c_leaves, c_tree = tu.flatten(c)
        if c_tree != tree:
            raise TypeError(f"associative_scan: fn must return the structure of elems ({tree}), got {c_tree}")
        return c_leaves

    def scan_(xs: list) -> list:
        m = core.get_aval(xs[0]).shape[axis]
        if m < 2:
            return xs
        reduced = combine([slice_in_dim(x, 0, m - 1, 2, axis) for x in xs],
                          [slice_in_dim(x, 1, m, 2, axis) for x in xs])
        odd = scan_(reduced)
        if m % 2 == 0:
            even = combine([slice_in_dim(e, 0, core.get_aval(e).shape[axis] - 1, 1, axis) for e in odd],
                           [slice_in_dim(x, 2, m, 2, axis) for x in xs])
        else:
            even = combine(odd, [slice_in_dim(x, 2, m, 2, axis) for x in xs])
        even = [concatenate([slice_in_dim(x, 0, 1, 1, axis), e], axis) for x, e in zip(xs, even)]
        return [_interleave(e, o, axis) for e, o in zip(even, odd)]

    out = scan_(leaves)
    if reverse:
        out = [rev(x, (axis,)) for x in out]
    return tu.unflatten(tree, out)

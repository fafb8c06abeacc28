"""XLA-style general gather and scatter (``lax.gather``, ``lax.scatter``, ``lax.scatter_add``, ...) with
``GatherDimensionNumbers``/``ScatterDimensionNumbers`` and JAX's modes, plus ``lax.broadcast``.

Composed from the one-axis ``take``/``scatter`` primitives: for every output (resp. update) element
the operand coordinate ``start + window offset`` is built per operand axis from the index vectors
and ``broadcasted_iota``, flattened to one linear index, and the operand is gathered from (resp.
scattered into) its flattened view. So both differentiate (in the operand and updates), vmap and
compile like the primitives they are made of.

Modes (``mode=``), as JAX: ``"clip"`` clamps each start so the whole slice/window is in bounds;
``"fill"``/``"drop"`` gives ``fill_value`` for gathered slices and skips scattered windows that are
not entirely in bounds; ``"promise_in_bounds"`` (the gather default, ``None``) clamps when gathering
and skips when scattering (XLA's native behaviour); the scatter default is ``"fill"``/``"drop"``.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.array import Array, asarray_eager
from ember._src.prims import elementwise as ew
from ember._src.prims import indexing as ix
from ember._src.prims import movement as mv
from ember.errors import DTypeError, ShapeError

ArrayLike = Any


class GatherDimensionNumbers(NamedTuple):
    """How a gather maps index vectors to operand slices, as ``jax.lax.GatherDimensionNumbers``.

    ``offset_dims``: output axes holding the slice axes that are kept; ``collapsed_slice_dims``:
    operand axes with slice size 1 that are dropped; ``start_index_map``: the operand axis each
    entry of an index vector (the last axis of ``start_indices``) starts; ``operand_batching_dims``
    / ``start_indices_batching_dims``: operand and index axes that are matched one to one.
    """

    offset_dims: tuple[int, ...]
    collapsed_slice_dims: tuple[int, ...]
    start_index_map: tuple[int, ...]
    operand_batching_dims: tuple[int, ...] = ()
    start_indices_batching_dims: tuple[int, ...] = ()


class ScatterDimensionNumbers(NamedTuple):
    """How a scatter maps update windows into the operand, as ``jax.lax.ScatterDimensionNumbers``.

    ``update_window_dims``: axes of ``updates`` that are window axes; ``inserted_window_dims``:
    operand axes with window size 1 absent from ``updates``; ``scatter_dims_to_operand_dims``: the
    operand axis each entry of an index vector starts; ``operand_batching_dims`` /
    ``scatter_indices_batching_dims``: operand and index axes matched one to one.
    """

    update_window_dims: tuple[int, ...]
    inserted_window_dims: tuple[int, ...]
    scatter_dims_to_operand_dims: tuple[int, ...]
    operand_batching_dims: tuple[int, ...] = ()
    scatter_indices_batching_dims: tuple[int, ...] = ()


class GatherScatterMode(enum.Enum):
    """Out-of-bounds handling of gather/scatter, as ``jax.lax.GatherScatterMode``."""

    CLIP = "clip"
    FILL_OR_DROP = "fill"
    PROMISE_IN_BOUNDS = "promise_in_bounds"

    @staticmethod
    def from_any(s: Any) -> GatherScatterMode:
        """A mode from ``None`` (fill/drop), a string (``"clip"``, ``"fill"``, ``"drop"``,
        ``"promise_in_bounds"``) or a ``GatherScatterMode``."""
        if isinstance(s, GatherScatterMode):
            return s
        if s is None or s in ("fill", "drop"):
            return GatherScatterMode.FILL_OR_DROP
        if s == "clip":
            return GatherScatterMode.CLIP
        if s == "promise_in_bounds":
            return GatherScatterMode.PROMISE_IN_BOUNDS
        raise ValueError(f"unknown gather/scatter mode {s!r}; use 'clip', 'fill', 'drop' or "
                         f"'promise_in_bounds'")


def _as_operand(x: ArrayLike) -> Any:
    return x if isinstance(x, (Array, core.Tracer)) else asarray_eager(x)


def _ints(v: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(i) for i in v)


def _index_dtype(size: int) -> np.dtype:
    return dt.int64 if size >= 2**31 - 1 else dt.int32


def _check_axes(name: str, what: str, axes: Sequence[int], rank: int) -> None:
    if any(not 0 <= a < rank for a in axes) or len(set(axes)) != len(axes):
        raise ShapeError(f"{name}: {what} {tuple(axes)} must be distinct axes of a rank-{rank} array")


def _prepare_indices(name: str, indices: Any, n_map: int, idt: np.dtype) -> tuple[Any, tuple]:
    ia = core.get_aval(indices)
    if not dt.is_integer(ia.dtype):
        raise DTypeError(f"{name}: indices must be integers, got {ia.dtype}")
    if ia.ndim == 0:
        raise ShapeError(f"{name}: indices must have rank >= 1 (the last axis holds index vectors)")
    if ia.shape[-1] != n_map:
        raise ShapeError(f"{name}: index vectors have {ia.shape[-1]} entries but the dimension numbers map "
                         f"{n_map} operand axes")
    if ia.dtype != idt:
        indices = ew.convert_element_type(indices, idt)
    return indices, ia.shape[:-1]


def _start_column(indices: Any, j: int, batch_shape: tuple) -> Any:
    nb = len(batch_shape)
    col = mv.slice_in_dim(indices, j, j + 1, 1, nb)
    return mv.reshape(col, batch_shape)


def _starts_and_batching(name: str, operand_shape: tuple, indices: Any, batch_shape: tuple,
                         index_map: Sequence[int], operand_batching: Sequence[int],
                         index_batching: Sequence[int]) -> tuple[dict, dict]:
    """The start column of each operand axis named in ``index_map`` and the index batch axis of
    each operand batching axis (whose sizes must agree)."""
    for od, ib in zip(operand_batching, index_batching):
        if operand_shape[od] != batch_shape[ib]:
            raise ShapeError(f"{name}: operand batching axis {od} has size {operand_shape[od]} but index "
                             f"batching axis {ib} has {batch_shape[ib]}")
    starts = {d: _start_column(indices, j, batch_shape) for j, d in enumerate(index_map)}
    return starts, dict(zip(operand_batching, index_batching))


def _linear_index(name: str, operand_shape: tuple, out_shape: tuple, batch_pos: Sequence[int],
                  window_pos: dict, starts: dict, batching: dict, clip: bool, window_sizes: dict,
                  idt: np.dtype) -> tuple[Any, Any]:
    """The flat operand index of every element of ``out_shape`` and a validity mask over it.

    ``batch_pos``: the axes of ``out_shape`` that are the index batch axes; ``window_pos[d]``: the
    axis of ``out_shape`` of operand axis ``d``'s window offset; ``starts[d]``: start indices of
    operand axis ``d`` (shaped like the index batch); ``batching[d]``: the index batch axis matched
    with operand axis ``d``.
    """
    flat = mv.full(out_shape, 0, idt)
    ok = None
    stride = 1
    for d in reversed(range(len(operand_shape))):
        n, w = operand_shape[d], window_sizes[d]
        coord = None
        if d in starts:
            s = starts[d]
            bounds_ok = ew.bitwise_and(ew.ge(s, mv.full_like(s, 0)), ew.le(s, mv.full_like(s, n - w)))
            ok = bounds_ok if ok is None else ew.bitwise_and(ok, bounds_ok)
            if clip:
                s = ew.max(ew.min(s, mv.full_like(s, max(n - w, 0))), mv.full_like(s, 0))
            else:  # a masked-out slice reads from a safe place
                s = ew.select(bounds_ok, s, mv.full_like(s, 0))
            coord = mv.broadcast_in_dim(s, out_shape, tuple(batch_pos))
        elif d in batching:
            coord = mv.broadcasted_iota(idt, out_shape, batch_pos[batching[d]])
        if d in window_pos:
            off = mv.broadcasted_iota(idt, out_shape, window_pos[d])
            coord = off if coord is None else ew.add(coord, off)
        if coord is not None:
            term = coord if stride == 1 else ew.mul(coord, mv.full_like(coord, stride))
            flat = ew.add(flat, term)
        stride *= n
    if ok is not None:
        ok = mv.broadcast_in_dim(ok, out_shape, tuple(batch_pos))
    return flat, ok


def gather(operand: ArrayLike, start_indices: ArrayLike, dimension_numbers: GatherDimensionNumbers,
           slice_sizes: Sequence[int], *, unique_indices: bool = False, indices_are_sorted: bool = False,
           mode: Any = None, fill_value: Any = None) -> Any:
    """XLA's general gather, as ``jax.lax.gather``.

    Every index vector (the last axis of ``start_indices``) gives the start of a ``slice_sizes``
    slice of ``operand``; the output has the index batch axes and the kept slice axes (at
    ``offset_dims``). ``mode`` (see the module docstring) handles slices not entirely in bounds;
    ``fill_value`` defaults to NaN (inexact), the minimum (signed), the maximum (unsigned) or True.
    ``unique_indices``/``indices_are_sorted`` are accepted hints.
    """
    del unique_indices, indices_are_sorted
    name = "gather"
    x = _as_operand(operand)
    xa = core.get_aval(x)
    dn = GatherDimensionNumbers(*(_ints(f) for f in dimension_numbers))
    sizes = _ints(slice_sizes)
    m = GatherScatterMode.from_any(GatherScatterMode.PROMISE_IN_BOUNDS if mode is None else mode)
    if len(sizes) != xa.ndim:
        raise ShapeError(f"{name}: slice_sizes has {len(sizes)} entries for an operand of rank {xa.ndim}")
    for d, (s, n) in enumerate(zip(sizes, xa.shape)):
        if not 0 <= s <= n:
            raise ShapeError(f"{name}: slice size {s} on axis {d} must be in [0, {n}]")
    _check_axes(name, "collapsed_slice_dims", dn.collapsed_slice_dims, xa.ndim)
    _check_axes(name, "start_index_map", dn.start_index_map, xa.ndim)
    _check_axes(name, "operand_batching_dims", dn.operand_batching_dims, xa.ndim)
    if set(dn.collapsed_slice_dims) & set(dn.operand_batching_dims):
        raise ShapeError(f"{name}: collapsed_slice_dims and operand_batching_dims overlap")
    for d in (*dn.collapsed_slice_dims, *dn.operand_batching_dims):
        if sizes[d] != 1:
            raise ShapeError(f"{name}: collapsed/batching axis {d} must have slice size 1, got {sizes[d]}")
    if len(dn.operand_batching_dims) != len(dn.start_indices_batching_dims):
        raise ShapeError(f"{name}: operand_batching_dims and start_indices_batching_dims differ in length")
    idt = _index_dtype(sh.size(xa.shape))
    idx, batch_shape = _prepare_indices(name, _as_operand(start_indices), len(dn.start_index_map), idt)
    dropped = (*dn.collapsed_slice_dims, *dn.operand_batching_dims)
    kept = [d for d in range(xa.ndim) if d not in dropped]
    out_rank = len(batch_shape) + len(kept)
    if len(dn.offset_dims) != len(kept):
        raise ShapeError(f"{name}: offset_dims {dn.offset_dims} must name {len(kept)} output axes (one per "
                         f"kept slice axis)")
    _check_axes(name, "offset_dims", dn.offset_dims, out_rank)
    offset_dims = sorted(dn.offset_dims)
    batch_pos = [p for p in range(out_rank) if p not in offset_dims]
    _check_axes(name, "start_indices_batching_dims", dn.start_indices_batching_dims, len(batch_shape))
    out_shape = [0] * out_rank
    for p, b in zip(batch_pos, batch_shape):
        out_shape[p] = b
    window_pos = {}
    for p, d in zip(offset_dims, kept):
        out_shape[p] = sizes[d]
        window_pos[d] = p
    starts, batching = _starts_and_batching(name, xa.shape, idx, batch_shape, dn.start_index_map,
                                            dn.operand_batching_dims, dn.start_indices_batching_dims)
    flat, ok = _linear_index(name, xa.shape, tuple(out_shape), batch_pos, window_pos, starts, batching,
                             m is not GatherScatterMode.FILL_OR_DROP, dict(enumerate(sizes)), idt)
    total = sh.size(xa.shape)
    if total == 0:
        fv = ix.fill_value(xa.dtype) if fill_value is None else fill_value
        return mv.full(tuple(out_shape), fv, xa.dtype)
    out = ix.take(mv.reshape(x, (total,)), flat, 0, "clip")
    if m is GatherScatterMode.FILL_OR_DROP and ok is not None:
        fv = ix.fill_value(xa.dtype) if fill_value is None else fill_value
        out = ew.select(ok, out, mv.full_like(out, fv))
    return out


def _scatter_general(name: str, operand: ArrayLike, indices: ArrayLike, updates: ArrayLike,
                     dimension_numbers: ScatterDimensionNumbers, mode: Any, how: str) -> Any:
    x, u = _as_operand(operand), _as_operand(updates)
    xa, ua = core.get_aval(x), core.get_aval(u)
    if ua.dtype != xa.dtype:
        raise DTypeError(f"{name}: updates dtype {ua.dtype} differs from operand dtype {xa.dtype}")
    dn = ScatterDimensionNumbers(*(_ints(f) for f in dimension_numbers))
    m = GatherScatterMode.from_any(mode)
    _check_axes(name, "inserted_window_dims", dn.inserted_window_dims, xa.ndim)
    _check_axes(name, "scatter_dims_to_operand_dims", dn.scatter_dims_to_operand_dims, xa.ndim)
    _check_axes(name, "operand_batching_dims", dn.operand_batching_dims, xa.ndim)
    _check_axes(name, "update_window_dims", dn.update_window_dims, ua.ndim)
    if len(dn.operand_batching_dims) != len(dn.scatter_indices_batching_dims):
        raise ShapeError(f"{name}: operand_batching_dims and scatter_indices_batching_dims differ in length")
    idt = _index_dtype(sh.size(xa.shape) + 1)
    idx, batch_shape = _prepare_indices(name, _as_operand(indices), len(dn.scatter_dims_to_operand_dims), idt)
    window_dims = sorted(dn.update_window_dims)
    scatter_pos = [p for p in range(ua.ndim) if p not in window_dims]
    if len(scatter_pos) != len(batch_shape) or any(ua.shape[p] != b
                                                   for p, b in zip(scatter_pos, batch_shape)):
        raise ShapeError(f"{name}: updates {sh.shape_str(ua.shape)} do not match the index batch shape "
                         f"{sh.shape_str(batch_shape)} on their scatter axes {tuple(scatter_pos)}")
    _check_axes(name, "scatter_indices_batching_dims", dn.scatter_indices_batching_dims, len(batch_shape))
    inserted = (*dn.inserted_window_dims, *dn.operand_batching_dims)
    kept = [d for d in range(xa.ndim) if d not in inserted]
    if len(kept) != len(window_dims):
        raise ShapeError(f"{name}: update_window_dims {dn.update_window_dims} must name {len(kept)} axes "
                         f"(one per operand axis not inserted or batching)")
    window_pos, wsizes = {}, dict.fromkeys(range(xa.ndim), 1)
    for p, d in zip(window_dims, kept):
        if ua.shape[p] > xa.shape[d]:
            raise ShapeError(f"{name}: update window axis {p} has size {ua.shape[p]}, larger than operand "
                             f"axis {d} ({xa.shape[d]})")
        window_pos[d], wsizes[d] = p, ua.shape[p]
    starts, batching = _starts_and_batching(name, xa.shape, idx, batch_shape, dn.scatter_dims_to_operand_dims,
                                            dn.operand_batching_dims, dn.scatter_indices_batching_dims)
    clip = m is GatherScatterMode.CLIP
    flat, ok = _linear_index(name, xa.shape, ua.shape, scatter_pos, window_pos, starts, batching, clip,
                             wsizes, idt)
    total = sh.size(xa.shape)
    if ok is not None and not clip:  # dropped: send past the end
        flat = ew.select(ok, flat, mv.full_like(flat, total))
    n_upd = sh.size(ua.shape)
    out = ix.scatter(mv.reshape(x, (total,)), mv.reshape(flat, (n_upd,)), mv.reshape(u, (n_upd,)), 0, how)
    return mv.reshape(out, xa.shape)


def _is_scatter_dn(v: Any) -> bool:
    return isinstance(v, ScatterDimensionNumbers)


def _scatter_either(name: str, how: str, operand: ArrayLike, indices: ArrayLike, updates: ArrayLike,
                    dimension_numbers: Any, mode: Any, kwargs: dict, one_axis_mode: str) -> Any:
    """``scatter``/``scatter_add``: XLA's general form for :class:`ScatterDimensionNumbers`, else
    ember's one-axis form (``dimension_numbers`` or ``axis=`` is the axis, ``one_axis_mode`` how
    updates combine)."""
    if not _is_scatter_dn(dimension_numbers):
        axis = kwargs.pop("axis", dimension_numbers)
        if kwargs:
            raise TypeError(f"{name}: unexpected arguments {sorted(kwargs)}")
        return ix.scatter(_as_operand(operand), _as_operand(indices), _as_operand(updates), axis=axis,
                          mode=one_axis_mode)
    if kwargs:
        raise TypeError(f"{name}: unexpected arguments {sorted(kwargs)}")
    return _scatter_general(name, operand, indices, updates, dimension_numbers, mode, how)


def scatter(operand: ArrayLike, scatter_indices: ArrayLike, updates: ArrayLike, dimension_numbers: Any = 0,
            mode: Any = None, *, indices_are_sorted: bool = False, unique_indices: bool = False,
            **kwargs: Any) -> Any:
    """Replace windows of ``operand`` by ``updates``, as ``jax.lax.scatter`` (XLA scatter with
    :class:`ScatterDimensionNumbers`; with duplicate indices the last update wins).

    For compatibility with ember's earlier one-axis form, an integer ``dimension_numbers`` is an
    ``axis`` and ``mode`` then one of ``"set"``/``"add"``/``"mul"``/``"min"``/``"max"``
    (``updates`` shaped like ``operand`` with ``axis`` replaced by ``scatter_indices.shape``).
    """
    del indices_are_sorted, unique_indices
    return _scatter_either("scatter", "set", operand, scatter_indices, updates, dimension_numbers, mode,
                           kwargs, "set" if mode is None else mode)


def scatter_add(operand: ArrayLike, scatter_indices: ArrayLike, updates: ArrayLike,
                dimension_numbers: Any = 0, *, indices_are_sorted: bool = False,
                unique_indices: bool = False, mode: Any = None, **kwargs: Any) -> Any:
    """Add ``updates`` into windows of ``operand`` (duplicates accumulate), as ``jax.lax.scatter_add``.

    An integer ``dimension_numbers`` (or ``axis=``) selects ember's one-axis form: ``updates`` shaped
    like ``operand`` with that axis replaced by ``scatter_indices.shape``.
    """
    del indices_are_sorted, unique_indices
    return _scatter_either("scatter_add", "add", operand, scatter_indices, updates, dimension_numbers, mode,
                           kwargs, "add")


def _scatter_op(how: str, doc: str) -> Any:
    def fn(operand: ArrayLike, scatter_indices: ArrayLike, updates: ArrayLike,
           dimension_numbers: ScatterDimensionNumbers, *, indices_are_sorted: bool = False,
           unique_indices: bool = False, mode: Any = None) -> Any:
        del indices_are_sorted, unique_indices
        return _scatter_general(f"scatter_{how}", operand, scatter_indices, updates, dimension_numbers,
                                mode, how)

    fn.__name__ = fn.__qualname__ = f"scatter_{how}"
    fn.__doc__ = doc
    return fn


scatter_mul = _scatter_op("mul", "Multiply windows of ``operand`` by ``updates``, as "
                                 "``jax.lax.scatter_mul``.")
scatter_min = _scatter_op("min", "Elementwise minimum of windows of ``operand`` and ``updates``, as "
                                 "``jax.lax.scatter_min``.")
scatter_max = _scatter_op("max", "Elementwise maximum of windows of ``operand`` and ``updates``, as "
                                 "``jax.lax.scatter_max``.")


def broadcast(operand: ArrayLike, sizes: Sequence[int]) -> Any:
    """``operand`` broadcast with new leading axes of ``sizes``, as ``jax.lax.broadcast``."""
    x = _as_operand(operand)
    shape = core.get_aval(x).shape
    sizes = tuple(sizes)
    return mv.broadcast_in_dim(x, (*sizes, *shape), tuple(range(len(sizes), len(sizes) + len(shape))))


__all__ = ["GatherDimensionNumbers", "GatherScatterMode", "ScatterDimensionNumbers", "broadcast", "gather",
           "scatter", "scatter_add", "scatter_max", "scatter_min", "scatter_mul"]

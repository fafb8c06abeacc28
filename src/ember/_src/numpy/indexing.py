"""NumPy indexing: ``x[idx]``, ``x.at[idx].set/add/...``, ``take`` and ``take_along_axis``.

Basic indexing (integers, slices, ``None``, ``...``) lowers to ``slice``/``rev``/``reshape`` (and
``dynamic_slice`` for traced scalar indices), never to a gather. Advanced indexing (integer arrays,
lists, boolean masks) follows NumPy: the index arrays broadcast together, and their result dims
replace the indexed axes when those are adjacent in the index, else they move to the front. It
lowers to one ``take``: the indexed axes are brought together and flattened into one axis, and the
index arrays are combined into a flat index along it.

Out-of-bounds indices in ``x[idx]`` are clamped, as in JAX (not NumPy): a negative index is
wrapped once, then clamped into ``[0, n - 1]`` (``arange(10)[11]`` is 9, ``[-12]`` is 0), eager or
traced. Only an index into an empty axis raises :class:`IndexError`. Boolean masks need concrete
values (the result shape depends on them); under tracing they raise
:class:`~ember.errors.NonConcreteBooleanIndexError`.

``x.at[idx]`` computes the flat positions ``x[idx]`` refers to (by indexing an iota) and scatters
into the flattened array; out-of-bounds updates are dropped (or clamped with ``mode="clip"``).
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.array import Array, aligned_copy, asarray_eager
from ember._src.dynamic import dimension_as_value
from ember._src.numpy import ufuncs
from ember._src.prims import dynamic_slicing as dsl
from ember._src.prims import elementwise as ew
from ember._src.prims import indexing as ix
from ember._src.prims import movement as mv
from ember.errors import DTypeError, NonConcreteBooleanIndexError, ShapeError, TracerError

_INVALID_INDEX = ("only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) and integer "
                  "or boolean arrays are valid indices")
_MASK_TRACED = ("boolean mask indexing needs a concrete mask: the shape of the result depends on its "
                "values. Under jit/tracing use jnp.where(mask, x, fill) to keep the shape, or "
                "jnp.nonzero(mask, size=...) / jnp.argwhere(mask, size=...) for a static size.")


def _asarray(x: Any) -> Any:
    return x if isinstance(x, (Array, core.Tracer)) else ufuncs.asarray(x)


# ---------------------------------------------------------------------------------------------
# parsing an index into entries
# ---------------------------------------------------------------------------------------------
# Entries are tuples: ("none",), ("ell",), ("int", i), ("dyn", tracer), ("slice", s),
# ("adv", index_array), ("mask", bool_ndarray), ("bool0", b). Index arrays are NumPy arrays
# (concrete) or tracers.


def _static_int(v: Any, what: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, core.Tracer):
        try:
            val = core.concrete_or_error(v, what)
        except TracerError as e:
            raise TracerError(f"{e} Use lax.dynamic_slice for slices with traced start/stop.") from None
        v = val
    try:
        return operator.index(v)
    except TypeError:
        raise IndexError(f"slice indices must be integers or None, got {v!r}") from None


def _stack_traced(leaves: Any) -> Any:
    """A nested list holding tracers, as one traced array (for index lists like ``[i, j]``)."""
    from ember._src.numpy.manipulation import stack
    if isinstance(leaves, (list, tuple)):
        if not leaves:
            return asarray_eager(np.zeros((0,), dt.int32))
        return stack([_stack_traced(v) for v in leaves])
    return _asarray(leaves)


def _has_tracer(v: Any) -> bool:
    if isinstance(v, (list, tuple)):
        return any(_has_tracer(y) for y in v)
    return isinstance(v, core.Tracer)


def _entry_from_array(arr: np.ndarray) -> tuple:
    if arr.dtype == np.bool_:
        return ("bool0", bool(arr)) if arr.ndim == 0 else ("mask", arr)
    if arr.dtype.kind not in "iu":
        raise IndexError(f"{_INVALID_INDEX}; arrays used as indices must be of integer (or boolean) "
                         f"type, got {arr.dtype}")
    return ("int", int(arr)) if arr.ndim == 0 else ("adv", arr)


def _entry(v: Any) -> tuple:
    if v is None:
        return ("none",)
    if v is Ellipsis:
        return ("ell",)
    if isinstance(v, slice):
        return ("slice", v)
    if isinstance(v, (bool, np.bool_)):
        return ("bool0", bool(v))
    if isinstance(v, (int, np.integer)):
        return ("int", int(v))
    if isinstance(v, core.Tracer):
        a = v.aval
        if a.dtype == dt.bool_:
            raise NonConcreteBooleanIndexError(_MASK_TRACED)
        if not dt.is_integer(a.dtype):
            raise IndexError(f"{_INVALID_INDEX}; got a traced array of dtype {a.dtype}")
        return ("dyn", v) if a.ndim == 0 else ("adv", v)
    if isinstance(v, Array):
        return _entry_from_array(v.value)
    if isinstance(v, (np.ndarray, np.generic)):
        return _entry_from_array(np.asarray(v))
    if isinstance(v, (list, tuple)):
        if _has_tracer(v):
            return _entry(_stack_traced(v))
        arr = np.asarray([y.value if isinstance(y, Array) else y for y in v]) if v else \
            np.zeros((0,), np.int64)
        if arr.dtype == object:
            raise IndexError(f"{_INVALID_INDEX}; got a ragged or non-numeric list {v!r}")
        if arr.ndim == 0:  # pragma: no cover - a list is never 0-d
            arr = arr.reshape(1)
        return _entry_from_array(arr)
    raise IndexError(f"{_INVALID_INDEX}; got {type(v).__name__} {v!r}")


def _consumed(e: tuple) -> int:
    kind = e[0]
    if kind in ("int", "dyn", "slice", "adv"):
        return 1
    if kind == "mask":
        return e[1].ndim
    return 0


def _parse(idx: Any, ndim: int, ints_advanced: bool) -> list[tuple]:
    if not isinstance(idx, tuple):
        idx = (idx,)
    entries = [_entry(v) for v in idx]
    n_ell = sum(1 for e in entries if e[0] == "ell")
    if n_ell > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(_consumed(e) for e in entries)
    if used > ndim:
        raise IndexError(f"too many indices for array: array is {ndim}-dimensional, but {used} were indexed")
    fill = [("slice", slice(None))] * (ndim - used)
    if n_ell:
        i = next(i for i, e in enumerate(entries) if e[0] == "ell")
        # an ellipsis that expands to nothing still separates advanced indices (NumPy)
        entries = entries[:i] + (fill or [("ell0",)]) + entries[i + 1:]
    else:
        entries = entries + fill
    advanced = ints_advanced or any(e[0] in ("adv", "mask", "bool0") for e in entries)
    if advanced:  # NumPy: with any array index, integers act as 0-d index arrays
        entries = [("adv", np.asarray(e[1])) if e[0] == "int" else ("adv", e[1]) if e[0] == "dyn" else e
                   for e in entries]
    return entries


# ---------------------------------------------------------------------------------------------
# basic indexing
# ---------------------------------------------------------------------------------------------


def _slice_params(s: slice, n: Any, axis: int) -> tuple[Any, Any, int, bool]:
    """``(start, limit, stride, reverse)`` for the lax slice that realizes ``s`` on a size-``n`` axis."""
    start, stop, step = (_static_int(s.start, "a slice start"), _static_int(s.stop, "a slice stop"),
                         _static_int(s.step, "a slice step"))
    if step == 0:
        raise ValueError("slice step cannot be zero")
    if isinstance(n, int):
        start, stop, step = slice(start, stop, step).indices(n)
        length = len(range(start, stop, step))
        if length == 0:
            return 0, 0, 1, False
        if step > 0:
            return start, start + (length - 1) * step + 1, step, False
        last = start + (length - 1) * step
        return last, start + 1, -step, True
    step = 1 if step is None else step
    if step in (1, -1) and (step == 1 or (start is None and stop is None)):
        lo = 0 if start is None else (start if start >= 0 else n + start)
        hi = n if stop is None else (stop if stop >= 0 else n + stop)
        return lo, hi, 1, step == -1
    if step > 1 and (start is None or start >= 0) and stop is None:
        # x[s::k] over a symbolic axis: ceil((n - s) / k) elements (Swin's 2 x 2 patch merge)
        return start or 0, n, step, False
    raise ShapeError(f"slice {s} on axis {axis} of symbolic size {n} is not supported; only "
                     "unit-step slices with non-negative or end-relative bounds, and x[s::k] for k > 1, are")


def _wrap_scalar(t: Any, n: Any) -> Any:
    a = core.get_aval(t)
    if a.dtype.kind == "u":
        return t
    if not isinstance(n, int):
        raise ShapeError(f"a traced index into an axis of symbolic size {n} is not supported")
    return ew.select(ew.lt(t, mv.full_like(t, 0)), ew.add(t, mv.full_like(t, n)), t)


def _basic(x: Any, entries: list[tuple], clamp: bool = False) -> tuple[Any, list[tuple]]:
    """Apply the basic part of ``entries``; return the result and the advanced indices on it as
    ``(result_axis, index_array, x_axis, axis_size, entry_position)``. An out-of-bounds integer
    entry is clamped into the axis with ``clamp`` (JAX's ``x[i]``), else an :class:`IndexError`."""
    shape = core.get_aval(x).shape
    nd = len(shape)
    starts: list[Any] = [0] * nd
    limits: list[Any] = list(shape)
    strides = [1] * nd
    revs: list[int] = []
    dyn: list[tuple[int, Any]] = []
    layout: list[int | None] = []  # per result axis: the x axis it comes from, or None (new axis)
    adv: list[tuple] = []
    ax = 0
    for pos, e in enumerate(entries):
        kind = e[0]
        if kind == "none":
            layout.append(None)
        elif kind == "bool0":
            adv.append((len(layout), np.zeros((1 if e[1] else 0,), np.int64), None, 1, pos))
            layout.append(None)
        elif kind == "int":
            n, i = shape[ax], e[1]
            if isinstance(n, int):
                if not -n <= i < n:
                    if not clamp or n == 0:
                        raise IndexError(f"index {i} is out of bounds for axis {ax} with size {n}")
                    i = min(max(i + n if i < 0 else i, 0), n - 1)
                i = i % n
            elif i < 0:
                i = n + i
            starts[ax], limits[ax] = i, i + 1
            ax += 1
        elif kind == "dyn":
            dyn.append((ax, e[1]))
            ax += 1
        elif kind == "slice":
            st, lim, stride, rev = _slice_params(e[1], shape[ax], ax)
            starts[ax], limits[ax], strides[ax] = st, lim, stride
            if rev:
                revs.append(ax)
            layout.append(ax)
            ax += 1
        elif kind == "adv":
            adv.append((len(layout), e[1], ax, shape[ax], pos))
            layout.append(ax)
            ax += 1
        elif kind == "mask":
            mask = e[1]
            for j in range(mask.ndim):  # NumPy accepts any empty mask (it selects nothing)
                if shape[ax + j] != mask.shape[j] and mask.size:
                    raise IndexError(f"boolean index did not match indexed array along axis {ax + j}; "
                                     f"size of axis is {shape[ax + j]} but size of corresponding "
                                     f"boolean axis is {mask.shape[j]}")
            for j, nz in enumerate(np.nonzero(mask)):
                adv.append((len(layout), nz, ax + j, shape[ax + j], pos))
                layout.append(ax + j)
            ax += mask.ndim
    y = x
    if any(s != 0 for s in starts) or any(lim != d for lim, d in zip(limits, shape)) or \
            any(s != 1 for s in strides):
        y = mv.slice(y, starts, limits, strides)
    if revs:
        y = mv.rev(y, revs)
    if dyn:
        ys = core.get_aval(y).shape
        dstarts: list[Any] = [0] * nd
        sizes = list(ys)
        for axis, t in dyn:
            dstarts[axis] = _wrap_scalar(t, ys[axis])
            sizes[axis] = 1
        y = dsl.dynamic_slice(y, dstarts, sizes)
    ys = core.get_aval(y).shape
    out_shape = tuple(1 if a is None else ys[a] for a in layout)
    if out_shape != ys:
        y = mv.reshape(y, out_shape)
    return y, adv


# ---------------------------------------------------------------------------------------------
# advanced indexing
# ---------------------------------------------------------------------------------------------


def _index_shape(a: Any) -> tuple:
    return core.get_aval(a).shape if isinstance(a, core.Tracer) else a.shape


def _concrete_component(arr: np.ndarray, n: int, x_axis: Any, oob: str, wrap: bool) -> tuple[np.ndarray, Any]:
    a = arr.astype(np.int64)
    if wrap and arr.dtype.kind == "i":
        a = np.where(a < 0, a + n, a)
    bad = (a < 0) | (a >= n)
    valid = None
    if bad.any():
        if oob == "raise":
            v = arr.reshape(-1)[np.argmax(bad.reshape(-1))]
            where = f"axis {x_axis}" if x_axis is not None else "a new axis"
            raise IndexError(f"index {v} is out of bounds for {where} with size {n}")
        if oob == "clip":
            a = np.clip(a, 0, max(n - 1, 0))
        else:
            valid = ~bad
    return a, valid


def _full_size(like: Any, n: Any) -> Any:
    """The size ``n`` (an int, or a symbolic size of a named axis) as an array of ``like``'s shape
    and dtype."""
    if not sh.is_symbolic(n):
        return mv.full_like(like, n)
    a = core.get_aval(like)
    return mv.broadcast_to_rank_shape(dimension_as_value(n, a.dtype), a.shape)


def _traced_component(t: Any, n: Any, idx_dtype: np.dtype, oob: str, wrap: bool) -> tuple[Any, Any]:
    a = core.get_aval(t)
    signed = a.dtype.kind == "i"
    t = ew.convert_element_type(t, idx_dtype)
    if wrap and signed:
        t = ew.select(ew.lt(t, mv.full_like(t, 0)), ew.add(t, _full_size(t, n)), t)
    if oob == "fill":
        ok = ew.bitwise_and(ew.ge(t, mv.full_like(t, 0)), ew.lt(t, _full_size(t, n)))
        return t, ok
    top = _full_size(t, n - 1) if sh.is_symbolic(n) else mv.full_like(t, max(n - 1, 0))
    return ew.max(ew.min(t, top), mv.full_like(t, 0)), None


def _same_shape(a: Any, b: Any, shape: tuple) -> tuple[Any, Any]:
    fix = lambda v: mv.broadcast_to_rank_shape(v, shape) if core.get_aval(v).shape != shape else v
    return fix(a), fix(b)


def _gather(y: Any, adv: list[tuple], oob: str, wrap: bool) -> Any:
    shapes = [_index_shape(a[1]) for a in adv]
    try:
        bshape = sh.broadcast_shapes(*shapes, op="index")
    except ShapeError:
        raise IndexError("shape mismatch: indexing arrays could not be broadcast together with shapes "
                         + " ".join(sh.shape_str(s) for s in shapes)) from None
    sizes = [a[3] for a in adv]
    symbolic = any(sh.is_symbolic(n) for n in sizes)
    total = sh.prod(sizes)
    wide = (symbolic or total >= 2**31 - 1  # a symbolic total may pass 2**31 at run time
            or any(isinstance(a[1], core.Tracer)
                   and core.get_aval(a[1]).dtype in (dt.int64, dt.uint32, dt.uint64) for a in adv))
    idx_dtype = dt.int64 if wide else dt.int32
    strides = [sh.prod(sizes[i + 1:]) for i in range(len(sizes))]
    comps, valids = [], []
    for _, arr, xa, n, _ in adv:
        if isinstance(arr, core.Tracer) or symbolic:  # a symbolic size: bounds known only at run time,
            arr = arr if isinstance(arr, core.Tracer) else asarray_eager(np.asarray(arr))  # so clamped
            comp, ok = _traced_component(arr, n, idx_dtype, oob, wrap)
        else:
            comp, ok = _concrete_component(np.asarray(arr), n, xa, oob, wrap)
        comps.append(comp)
        if ok is not None:
            valids.append(ok)
    np_valid = [v for v in valids if not isinstance(v, core.Tracer)]
    valid = np.logical_and.reduce(np.broadcast_arrays(*np_valid)) if np_valid else None
    if not any(isinstance(c, core.Tracer) for c in comps):
        flat = sum(np.broadcast_to(c * s, bshape) for c, s in zip(comps, strides))
        flat = np.broadcast_to(flat, bshape)
        if valid is not None:
            flat = np.where(valid, flat, total)  # past the end: take fills, scatter drops
        flat = asarray_eager(flat.astype(idx_dtype))
    else:
        flat = None
        for c, s in zip(comps, strides):
            if isinstance(c, core.Tracer):
                c = c if (not sh.is_symbolic(s) and s == 1) else ew.mul(c, _full_size(c, s))
            else:
                c = asarray_eager((c * s).astype(idx_dtype))
            c = mv.broadcast_to_rank_shape(c, bshape) if core.get_aval(c).shape != bshape else c
            flat = c if flat is None else ew.add(flat, c)
        if valid is not None or len(valids) > len(np_valid):
            ok = None if valid is None else asarray_eager(valid)
            for v in valids:
                if isinstance(v, core.Tracer):
                    ok = v if ok is None else ew.bitwise_and(*_same_shape(ok, v, bshape))
            ok = mv.broadcast_to_rank_shape(ok, bshape) if core.get_aval(ok).shape != bshape else ok
            flat = ew.select(ok, flat, _full_size(flat, total))
    mode = "fill" if oob == "fill" else "clip"
    axes = [a[0] for a in adv]
    ys = core.get_aval(y).shape
    k = len(axes)
    p = axes[0]
    entry_pos = sorted({a[4] for a in adv})
    if entry_pos[-1] - entry_pos[0] + 1 == len(entry_pos):  # adjacent: result dims replace the axes
        assert axes == list(range(p, p + k))
        y = mv.reshape(y, (*ys[:p], total, *ys[p + k:]))
        return ix.take(y, flat, axis=p, mode=mode)
    rest = [i for i in range(len(ys)) if i not in axes]
    y = mv.transpose(y, axes + rest)
    y = mv.reshape(y, (total, *(ys[i] for i in rest)))
    return ix.take(y, flat, axis=0, mode=mode)


def _index(x: Any, idx: Any, oob: str = "raise", wrap: bool = True,
           ints_advanced: bool | None = None) -> Any:
    """``x[idx]``; ``oob`` is what concrete out-of-bounds indices do: raise, clip or fill. Integer
    entries are basic indices (a slice) unless ``ints_advanced`` (default: ``oob != "raise"``)."""
    x = _asarray(x)
    entries = _parse(idx, core.get_aval(x).ndim, ints_advanced=oob != "raise" if ints_advanced is None
                     else ints_advanced)
    y, adv = _basic(x, entries, clamp=oob == "clip")
    if not adv:
        return y
    return _gather(y, adv, oob, wrap)


_FULL = slice(None)


def _basic_item(v: Any) -> bool:
    """Whether ``v`` is a basic index entry the eager fast path takes: a Python int (not a bool),
    ``None``, ``...`` or a slice of Python ints and ``None``."""
    t = type(v)
    if t is int or v is None or v is Ellipsis:
        return True
    if t is slice:
        return all(b is None or type(b) is int for b in (v.start, v.stop, v.step))
    return False


def _eager_basic(x: Array, idx: Any) -> Any:
    """``x[idx]`` for a concrete Array outside any trace and a basic index (see
    :func:`_basic_item`) with NumPy's indexing, which these entries follow exactly; ``None`` when
    it does not apply or NumPy refuses the index (the general path then raises ember's error)."""
    if core.dynamic_trace_active() or not core.EAGER_FAST_PATH.value:
        return None
    if type(idx) is tuple:
        for v in idx:
            if not _basic_item(v):
                return None
    elif not _basic_item(idx):
        return None
    v = x._value
    if v is None:
        return None
    try:
        r = v[idx]
    except (IndexError, ValueError, TypeError):
        return None
    if all(e is Ellipsis or type(e) is slice and e == _FULL for e in (idx if type(idx) is tuple else (idx,))):
        return x  # the general path returns the array itself for x[...], x[:], x[:, ...]
    # the slice/reshape primitives keep the dtype and the weak type; wrapped as their results are
    return Array(aligned_copy(np.asarray(r), owned=True), x._weak)


def getitem(x: Any, idx: Any) -> Any:
    """``x[idx]`` with NumPy semantics, out-of-bounds indices clamped as in JAX (see the module
    docstring)."""
    if type(x) is Array and (r := _eager_basic(x, idx)) is not None:
        return r
    return _index(x, idx, "clip", ints_advanced=False)


# ---------------------------------------------------------------------------------------------
# x.at[idx]
# ---------------------------------------------------------------------------------------------

_MODES = (None, "promise_in_bounds", "clip", "drop", "fill")


def _check_mode(mode: Any) -> None:
    if mode not in _MODES:
        raise ValueError(f"at[]: mode must be one of {_MODES}, got {mode!r}")


def _positions(x: Any, idx: Any, oob: str, wrap: bool) -> Any:
    """Flat positions in ``x`` that ``x[idx]`` refers to (past-the-end or negative when dropped)."""
    a = core.get_aval(x)
    n = a.size
    pos_dtype = dt.int32 if not isinstance(n, int) or n < 2**31 - 1 else dt.int64
    iota = mv.reshape(mv.iota(pos_dtype, n), a.shape)
    return _index(iota, idx, oob, wrap)


def _prepare_updates(values: Any, a: core.ShapedArray, target: tuple, name: str) -> Any:
    if isinstance(values, (list, tuple)) and _has_tracer(values):
        values = _stack_traced(values)
    if isinstance(values, (Array, core.Tracer)):
        v = ew.convert_element_type(values, a.dtype, weak_type=False)
    else:
        v = asarray_eager(values, a.dtype)
    vs = core.get_aval(v).shape
    if len(vs) > len(target):  # NumPy assignment drops extra leading unit dims of the values
        extra = len(vs) - len(target)
        if any(d != 1 for d in vs[:extra]):
            raise ShapeError(f"at[].{name}: cannot broadcast updates of shape {sh.shape_str(vs)} to the "
                             f"indexed shape {sh.shape_str(target)}")
        v = mv.reshape(v, vs[extra:])
        vs = vs[extra:]
    try:
        ok = sh.broadcast_shapes(vs, target) == tuple(target)
    except ShapeError:
        ok = False
    if not ok:
        raise ShapeError(f"at[].{name}: cannot broadcast updates of shape {sh.shape_str(vs)} to the "
                         f"indexed shape {sh.shape_str(target)}")
    return mv.broadcast_to_rank_shape(v, target) if vs != tuple(target) else v


def _scatter_update(x: Any, idx: Any, values: Any, kind: str, mode: Any, wrap: bool, name: str) -> Any:
    _check_mode(mode)
    x = _asarray(x)
    a = core.get_aval(x)
    pos = _positions(x, idx, "clip" if mode == "clip" else "fill", wrap)
    target = core.get_aval(pos).shape
    v = _prepare_updates(values, a, target, name)
    m = sh.size(target)
    n = a.size
    out = ix.scatter(mv.reshape(x, (n,)), mv.reshape(pos, (m,)), mv.reshape(v, (m,)), axis=0, mode=kind)
    return mv.reshape(out, a.shape)


class _IndexUpdateRef:
    """``x.at[idx]``: functional versions of ``x[idx] = v``, ``x[idx] += v``, ... and ``x[idx]``.

    Out-of-bounds indices are dropped by the updates (``mode="clip"`` clamps them instead) and
    clamped by :meth:`get` (``mode="fill"`` returns ``fill_value`` for them). Repeated indices
    accumulate for ``add``/``multiply``/``min``/``max``; ``set`` keeps one of the values.
    """

    __slots__ = ("array", "index")

    def __init__(self, array: Any, index: Any):
        self.array = array
        self.index = index

    def __repr__(self) -> str:
        return f"_IndexUpdateRef({self.array!r}, {self.index!r})"

    def get(self, *, mode: str | None = None, fill_value: Any = None, indices_are_sorted: bool = False,
            unique_indices: bool = False, wrap_negative_indices: bool = True) -> Any:
        """``x[idx]``, with out-of-bounds indices clamped (or filled with ``mode="fill"``)."""
        _check_mode(mode)
        x = _asarray(self.array)
        if mode not in ("fill", "drop"):
            return _index(x, self.index, "clip", wrap_negative_indices)
        if fill_value is None:
            return _index(x, self.index, "fill", wrap_negative_indices)
        a = core.get_aval(x)
        pos = _positions(x, self.index, "fill", wrap_negative_indices)
        out = ix.take(mv.reshape(x, (a.size,)), pos, axis=0, mode="fill")
        ok = ew.ge(pos, mv.full_like(pos, 0))
        fill = fill_value if isinstance(fill_value, core.Tracer) else np.asarray(fill_value)
        return ew.select(ok, out, mv.full(core.get_aval(out).shape, fill, a.dtype))

    def set(self, values: Any, *, mode: str | None = None, indices_are_sorted: bool = False,
            unique_indices: bool = False, wrap_negative_indices: bool = True) -> Any:
        """Pure ``x[idx] = values`` (values are cast to ``x.dtype`` and broadcast)."""
        return _scatter_update(self.array, self.index, values, "set", mode, wrap_negative_indices, "set")

    def add(self, values: Any, *, mode: str | None = None, indices_are_sorted: bool = False,
            unique_indices: bool = False, wrap_negative_indices: bool = True) -> Any:
        """Pure ``x[idx] += values``; repeated indices accumulate."""
        return _scatter_update(self.array, self.index, values, "add", mode, wrap_negative_indices, "add")

    def subtract(self, values: Any, *, mode: str | None = None, indices_are_sorted: bool = False,
                 unique_indices: bool = False, wrap_negative_indices: bool = True) -> Any:
        """Pure ``x[idx] -= values``; repeated indices accumulate."""
        a = core.get_aval(_asarray(self.array))
        neg = ufuncs.negative(ufuncs.asarray(values, a.dtype) if not isinstance(values, core.Tracer)
                              else ew.convert_element_type(values, a.dtype))
        return _scatter_update(self.array, self.index, neg, "add", mode, wrap_negative_indices, "subtract")

    def multiply(self, values: Any, *, mode: str | None = None, indices_are_sorted: bool = False,
                 unique_indices: bool = False, wrap_negative_indices: bool = True) -> Any:
        """Pure ``x[idx] *= values``; repeated indices accumulate."""
        return _scatter_update(self.array, self.index, values, "mul", mode, wrap_negative_indices,
                               "multiply")

    mul = multiply

    def divide(self, values: Any, *, mode: str | None = None, indices_are_sorted: bool = False,
               unique_indices: bool = False, wrap_negative_indices: bool = True) -> Any:
        """Pure ``x[idx] /= values`` (``x`` divided by the scatter-product of the values)."""
        x = _asarray(self.array)
        ones = mv.full_like(x, 1)
        return ufuncs.divide(x, _scatter_update(ones, self.index, values, "mul", mode,
                                                wrap_negative_indices, "divide"))

    def power(self, values: Any, *, mode: str | None = None, indices_are_sorted: bool = False,
              unique_indices: bool = False, wrap_negative_indices: bool = True) -> Any:
        """Pure ``x[idx] **= values`` (repeated indices multiply the exponents)."""
        x = _asarray(self.array)
        ones = mv.full_like(x, 1)
        return ufuncs.power(x, _scatter_update(ones, self.index, values, "mul", mode,
                                               wrap_negative_indices, "power"))

    def min(self, values: Any, *, mode: str | None = None, indices_are_sorted: bool = False,
            unique_indices: bool = False, wrap_negative_indices: bool = True) -> Any:
        """Pure ``x[idx] = minimum(x[idx], values)``."""
        return _scatter_update(self.array, self.index, values, "min", mode, wrap_negative_indices, "min")

    def max(self, values: Any, *, mode: str | None = None, indices_are_sorted: bool = False,
            unique_indices: bool = False, wrap_negative_indices: bool = True) -> Any:
        """Pure ``x[idx] = maximum(x[idx], values)``."""
        return _scatter_update(self.array, self.index, values, "max", mode, wrap_negative_indices, "max")


class AtIndexer:
    """The ``x.at`` property: ``x.at[idx].set(v)``, ``.add(v)``, ``.get()``, ..."""

    __slots__ = ("array",)

    def __init__(self, array: Any):
        self.array = array

    def __getitem__(self, index: Any) -> _IndexUpdateRef:
        return _IndexUpdateRef(self.array, index)

    def __repr__(self) -> str:
        return f"AtIndexer({self.array!r})"


# ---------------------------------------------------------------------------------------------
# take / take_along_axis
# ---------------------------------------------------------------------------------------------


def _index_operand(indices: Any, name: str) -> Any:
    if isinstance(indices, (list, tuple)) and _has_tracer(indices):
        indices = _stack_traced(indices)
    if isinstance(indices, (list, tuple)) and len(indices) == 0:
        indices = np.zeros((0,), np.int32)
    ind = _asarray(indices)
    d = core.get_aval(ind).dtype
    if not dt.is_integer(d):
        raise DTypeError(f"{name}: indices must be integers, got {d}")
    return ind


def _normalize(ind: Any, n: int, mode: str) -> Any:
    """Wrap negative indices (``fill``), reduce modulo ``n`` (``wrap``) or leave them (``clip``)."""
    if mode == "clip" or core.get_aval(ind).dtype.kind == "u":
        return ind
    if mode == "wrap":
        return ufuncs.remainder(ind, n) if n else ind
    return ew.select(ew.lt(ind, mv.full_like(ind, 0)), ew.add(ind, mv.full_like(ind, n)), ind)


def _check_raise(ind: Any, n: int, axis: int, name: str) -> Any:
    val = core.concrete_or_error(ind, f"{name} indices with mode='raise'")
    bad = (val < -n) | (val >= n)
    if bad.any():
        raise IndexError(f"{name}: index {val.reshape(-1)[np.argmax(bad.reshape(-1))]} is out of bounds "
                         f"for axis {axis} with size {n}")
    return ind


def take(a: Any, indices: Any, axis: int | None = None, out: None = None, mode: str | None = None,
         unique_indices: bool = False, indices_are_sorted: bool = False, fill_value: Any = None) -> Any:
    """Take elements of ``a`` along ``axis`` (the flattened array when ``None``), as ``numpy.take``.

    ``mode``: ``None``/``"fill"`` (JAX default: negative indices wrap, out-of-bounds give
    ``fill_value``, NaN for floats), ``"clip"`` (clamp, no wrapping, as NumPy), ``"wrap"``
    (modulo the axis size) or ``"raise"`` (concrete indices only).
    """
    if out is not None:
        raise NotImplementedError("take: the 'out' argument is not supported (ember arrays are immutable)")
    a = _asarray(a)
    ind = _index_operand(indices, "take")
    if axis is None:
        a = mv.reshape(a, (sh.size(core.get_aval(a).shape),))
        axis = 0
    aa = core.get_aval(a)
    axis = sh.normalize_axis(axis, aa.ndim)
    n = aa.shape[axis]
    if mode not in (None, "fill", "clip", "wrap", "raise"):
        raise ValueError(f"take: invalid mode {mode!r}; use 'fill', 'clip', 'wrap' or 'raise'")
    ia = core.get_aval(ind)
    if isinstance(n, int) and n == 0:
        if ia.size != 0:
            raise IndexError(f"take: cannot take a non-empty set of indices from the empty axis {axis}")
        return mv.full((*aa.shape[:axis], *ia.shape, *aa.shape[axis + 1:]), 0, aa.dtype)
    if mode == "raise":
        ind = _check_raise(ind, n, axis, "take")
        mode = "fill"
    mode = mode or "fill"
    ind = _normalize(ind, n, mode)
    res = ix.take(a, ind, axis=axis, mode="clip" if mode in ("clip", "wrap") else "fill")
    if mode == "fill" and fill_value is not None:
        ok = ew.bitwise_and(ew.ge(ind, mv.full_like(ind, 0)), ew.lt(ind, mv.full_like(ind, n)))
        ra = core.get_aval(res)
        okb = mv.broadcast_in_dim(ok, ra.shape, tuple(range(axis, axis + ia.ndim)))
        res = ew.select(okb, res, mv.full(ra.shape, np.asarray(fill_value), ra.dtype))
    return res


def take_along_axis(arr: Any, indices: Any, axis: int | None = -1, mode: str | None = None,
                    fill_value: Any = None) -> Any:
    """``out[..., j, ...] = arr[..., indices[..., j, ...], ...]`` along ``axis``, as
    ``numpy.take_along_axis``; ``arr`` and ``indices`` broadcast against each other on the other
    axes. Negative indices wrap; ``mode`` is ``None``/``"fill"`` (out-of-bounds give ``fill_value``)
    or ``"clip"``."""
    a = _asarray(arr)
    ind = _index_operand(indices, "take_along_axis")
    if axis is None:
        if core.get_aval(ind).ndim != 1:
            raise ShapeError(f"take_along_axis: indices must be 1-d when axis=None, got shape "
                             f"{sh.shape_str(core.get_aval(ind).shape)}")
        a = mv.reshape(a, (sh.size(core.get_aval(a).shape),))
        axis = 0
    aa, ia = core.get_aval(a), core.get_aval(ind)
    if aa.ndim != ia.ndim:
        raise ShapeError(f"take_along_axis: indices and arr must have the same number of dimensions; "
                         f"indices have {ia.ndim}, arr has {aa.ndim}")
    axis = sh.normalize_axis(axis, aa.ndim)
    if mode not in (None, "fill", "clip"):
        raise ValueError(f"take_along_axis: invalid mode {mode!r}; use 'fill' or 'clip'")
    n = aa.shape[axis]
    a_other = tuple(1 if d == axis else s for d, s in enumerate(aa.shape))
    i_other = tuple(1 if d == axis else s for d, s in enumerate(ia.shape))
    try:
        common = sh.broadcast_shapes(a_other, i_other, op="take_along_axis")
    except ShapeError as e:
        raise ShapeError(f"take_along_axis: arr of shape {sh.shape_str(aa.shape)} and indices of shape "
                         f"{sh.shape_str(ia.shape)} do not broadcast outside axis {axis}") from e
    a_shape = tuple(n if d == axis else s for d, s in enumerate(common))
    i_shape = tuple(ia.shape[axis] if d == axis else s for d, s in enumerate(common))
    if aa.shape != a_shape:
        a = mv.broadcast_in_dim(a, a_shape, tuple(range(aa.ndim)))
    if ia.shape != i_shape:
        ind = mv.broadcast_in_dim(ind, i_shape, tuple(range(ia.ndim)))
    if isinstance(n, int) and n == 0:
        return mv.full(i_shape, 0, aa.dtype)
    ind = _normalize(ind, n, mode or "fill")
    res = ix.take_along_axis(a, ind, axis)
    if mode != "clip":
        ok = ew.bitwise_and(ew.ge(ind, mv.full_like(ind, 0)), ew.lt(ind, mv.full_like(ind, n)))
        fill = ix.fill_value(aa.dtype) if fill_value is None else fill_value
        res = ew.select(ok, res, mv.full(i_shape, np.asarray(fill), aa.dtype))
    return res


__all__ = ["take", "take_along_axis"]

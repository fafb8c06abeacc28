"""Movement primitives: broadcast, reshape, transpose, squeeze, rev, slice, pad, concatenate and
iota. All are linear in their array operands (the dynamic slices are in :mod:`.dynamic_slicing`).

Shape parameters may hold symbolic dims (:class:`ember._src.shapes.DimExpr`); abstract
evaluation works on them directly, implementations receive concrete sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ember._src import ad_util as ad
from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.array import asarray_eager
from ember._src.core import Primitive, ShapedArray
from ember._src.dynamic import dimension_as_value
from ember._src.prims import elementwise as ew
from ember.errors import DTypeError, ShapeError


def _linear_jvp(p: Primitive, n_linear: int | None = None) -> None:
    """JVP of a primitive linear in its first ``n_linear`` operands (all by default)."""

    def jvp(primals: list, tangents: list, **params: Any) -> tuple[list, list]:
        k = len(primals) if n_linear is None else n_linear
        out = p.bind(*primals, **params)
        if all(ad.is_zero(t) for t in tangents[:k]):
            return [out], [ad.Zero.from_value(out)]
        ts = [ad.instantiate(t) for t in tangents[:k]]
        return [out], [p.bind(*ts, *primals[k:], **params)]

    p.jvp = jvp


def _shape_tuple(shape: Any) -> tuple:
    if isinstance(shape, (int, np.integer, sh.DimExpr)):
        shape = (shape,)
    return sh.canonical_shape(shape)


# ---------------------------------------------------------------------------------------------
# broadcast_in_dim
# ---------------------------------------------------------------------------------------------

broadcast_in_dim_p = Primitive("broadcast_in_dim", linear=True)


def _bid_impl(x: np.ndarray, *, shape: tuple, broadcast_dimensions: tuple) -> np.ndarray:
    expanded = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        expanded[d] = x.shape[i]
    return np.broadcast_to(x.reshape(expanded), shape)


def _bid_abstract(x: ShapedArray, *, shape: tuple, broadcast_dimensions: tuple) -> ShapedArray:
    if len(broadcast_dimensions) != x.ndim:
        raise ShapeError(f"broadcast_in_dim: operand has {x.ndim} dims but broadcast_dimensions "
                         f"has {len(broadcast_dimensions)} entries")
    if any(not 0 <= d < len(shape) for d in broadcast_dimensions) or \
            list(broadcast_dimensions) != sorted(set(broadcast_dimensions)):
        raise ShapeError(f"broadcast_in_dim: broadcast_dimensions {broadcast_dimensions} must be "
                         f"strictly increasing and within rank {len(shape)}")
    for i, d in enumerate(broadcast_dimensions):
        src, dst = x.shape[i], shape[d]
        if not (src == 1 or src == dst):
            raise ShapeError(f"broadcast_in_dim: operand dim {i} of size {sh.dim_str(src)} cannot "
                             f"broadcast to size {sh.dim_str(dst)} (result dim {d})")
    return ShapedArray(shape, x.dtype, x.weak_type)


def _bid_transpose(ct: Any, x: Any, *, shape: tuple, broadcast_dimensions: tuple) -> list:
    if ad.is_zero(ct):
        return [ad.Zero(x.aval)]
    from ember._src.prims.reductions import reduce_sum
    sum_dims = [d for d in range(len(shape)) if d not in broadcast_dimensions]
    expanded = [d for i, d in enumerate(broadcast_dimensions) if x.aval.shape[i] == 1 and shape[d] != 1]
    out = reduce_sum(ct, tuple(sorted(sum_dims + expanded)))
    return [reshape(out, x.aval.shape)]


def _bid_batch(vals: list, dims: list, *, shape: tuple, broadcast_dimensions: tuple) -> tuple[list, list]:
    (x,), (d,) = vals, dims
    x = moveaxis(x, d, 0)
    size = core.get_aval(x).shape[0]
    return [broadcast_in_dim(x, (size, *shape), (0, *(b + 1 for b in broadcast_dimensions)))], [0]


broadcast_in_dim_p.impl = _bid_impl
broadcast_in_dim_p.abstract_eval = _bid_abstract
broadcast_in_dim_p.transpose = _bid_transpose
broadcast_in_dim_p.batch = _bid_batch
_linear_jvp(broadcast_in_dim_p)


def broadcast_in_dim(x: Any, shape: Sequence, broadcast_dimensions: Sequence[int]) -> Any:
    """Broadcast ``x`` into ``shape``; operand dim ``i`` maps to result dim ``broadcast_dimensions[i]``."""
    shape = _shape_tuple(shape)
    bd = tuple(int(d) for d in broadcast_dimensions)
    a = core.get_aval(x)
    if a.shape == shape and bd == tuple(range(len(shape))) and not isinstance(x, (int, float, complex)):
        return x
    return broadcast_in_dim_p.bind(x, shape=shape, broadcast_dimensions=bd)


def broadcast_to_rank_shape(x: Any, shape: Sequence) -> Any:
    """NumPy-style broadcast of ``x`` to ``shape`` (trailing alignment)."""
    a = core.get_aval(x)
    shape = _shape_tuple(shape)
    if len(shape) < a.ndim:
        raise ShapeError(f"cannot broadcast shape {sh.shape_str(a.shape)} to {sh.shape_str(shape)}")
    return broadcast_in_dim(x, shape, tuple(range(len(shape) - a.ndim, len(shape))))


def full(shape: Sequence, fill_value: Any, dtype: Any) -> Any:
    """An array of ``shape`` filled with ``fill_value`` (a scalar, possibly traced)."""
    dtype = dt.canonicalize(dtype)
    if isinstance(fill_value, sh.DimExpr):
        fill_value = dimension_as_value(fill_value)
    if isinstance(fill_value, (bool, int, float, complex, np.generic, np.ndarray)):
        fill_value = asarray_eager(np.asarray(fill_value).astype(dtype))
    else:
        fill_value = ew.convert_element_type(fill_value, dtype)
    return broadcast_in_dim(fill_value, _shape_tuple(shape), ())


def full_like(x: Any, fill_value: Any, dtype: Any = None) -> Any:
    a = core.get_aval(x)
    return full(a.shape, fill_value, a.dtype if dtype is None else dtype)


def zeros_like(x: Any) -> Any:
    return full_like(x, 0)


# ---------------------------------------------------------------------------------------------
# reshape
# ---------------------------------------------------------------------------------------------

reshape_p = Primitive("reshape", linear=True)


def _reshape_abstract(x: ShapedArray, *, new_sizes: tuple) -> ShapedArray:
    if sh.size(x.shape) != sh.size(new_sizes):
        raise ShapeError(f"reshape: cannot reshape {sh.shape_str(x.shape)} "
                         f"({sh.size(x.shape)} elements) into {sh.shape_str(new_sizes)} "
                         f"({sh.size(new_sizes)} elements)")
    return ShapedArray(new_sizes, x.dtype, x.weak_type)


def _reshape_batch(vals: list, dims: list, *, new_sizes: tuple) -> tuple[list, list]:
    x = moveaxis(vals[0], dims[0], 0)
    return [reshape(x, (core.get_aval(x).shape[0], *new_sizes))], [0]


reshape_p.impl = lambda x, *, new_sizes: np.reshape(x, new_sizes)
reshape_p.abstract_eval = _reshape_abstract
reshape_p.transpose = lambda ct, x, *, new_sizes: [ad.Zero(x.aval) if ad.is_zero(ct)
                                                   else reshape(ct, x.aval.shape)]
reshape_p.batch = _reshape_batch
_linear_jvp(reshape_p)


def reshape(x: Any, new_sizes: Sequence) -> Any:
    """Reshape ``x`` (row-major) to ``new_sizes``; one entry may be ``-1``."""
    a = core.get_aval(x)
    new = list(new_sizes) if isinstance(new_sizes, (list, tuple)) else [new_sizes]
    if sum(1 for d in new if isinstance(d, (int, np.integer)) and d == -1) > 1:
        raise ShapeError("reshape: only one dimension can be -1")
    if any(isinstance(d, (int, np.integer)) and d == -1 for d in new):
        known = sh.size([d for d in new if not (isinstance(d, (int, np.integer)) and d == -1)])
        total = sh.size(a.shape)
        if isinstance(known, int) and known == 0:
            raise ShapeError(f"reshape: cannot infer -1 for {sh.shape_str(a.shape)} with a zero-size dim")
        missing = sh.floordiv(total, known)
        new = [missing if isinstance(d, (int, np.integer)) and d == -1 else d for d in new]
    for d in new:
        if isinstance(d, (int, np.integer)) and d < 0:
            raise ShapeError(f"reshape: negative dimension {d} in {tuple(new_sizes)}")
    new_t = sh.canonical_shape(new)
    if new_t == a.shape and not isinstance(x, (int, float, complex)):
        return x
    return reshape_p.bind(x, new_sizes=new_t)


# ---------------------------------------------------------------------------------------------
# ensure_shape: the operand with its sizes restated, checked per binding
# ---------------------------------------------------------------------------------------------

ensure_shape_p = Primitive("ensure_shape", linear=True)


def _ensure_shape_abstract(x: ShapedArray, *, shape: tuple, reason: str = "") -> ShapedArray:
    what = f"ensure_shape ({reason})" if reason else "ensure_shape"
    if len(shape) != x.ndim:
        raise ShapeError(f"{what}: rank {x.ndim} value {sh.shape_str(x.shape)} restated with "
                         f"rank {len(shape)} {sh.shape_str(shape)}")
    for i, (a, b) in enumerate(zip(x.shape, shape)):
        d = a - b
        if isinstance(d, int) and d != 0:
            raise ShapeError(f"{what}: axis {i} is {a}, not {b} (shape {sh.shape_str(x.shape)} "
                             f"restated as {sh.shape_str(shape)})")
    return ShapedArray(tuple(shape), x.dtype, x.weak_type)


def _ensure_shape_batch(vals: list, dims: list, *, shape: tuple, reason: str = "") -> tuple[list, list]:
    x = moveaxis(vals[0], dims[0], 0)
    return [ensure_shape(x, (core.get_aval(x).shape[0], *shape), reason)], [0]


ensure_shape_p.impl = lambda x, *, shape, reason="": x
ensure_shape_p.abstract_eval = _ensure_shape_abstract
ensure_shape_p.transpose = lambda ct, x, *, shape, reason="": [
    ad.Zero(x.aval) if ad.is_zero(ct) else ensure_shape(ct, x.aval.shape, reason)]
ensure_shape_p.batch = _ensure_shape_batch
_linear_jvp(ensure_shape_p)


def ensure_shape(x: Any, shape: Sequence, reason: str = "") -> Any:
    """``x`` unchanged, its shape restated as ``shape`` (as TensorFlow's ``ensure_shape``): sizes
    that are equal for every binding of the named axes but that ember cannot prove equal (a
    reshape torch vouches for, ``h // 8`` against ``4 * (h // 32)`` where torch guarded ``h``).
    Sizes that differ for every binding raise ``ShapeError`` now; the others are compared each time
    a call binds its axes, and a binding where they differ raises ``ShapeError`` naming it and
    ``reason``."""
    a = core.get_aval(x)
    new = sh.canonical_shape(shape)
    if new == a.shape:
        return x
    return ensure_shape_p.bind(x, shape=new, reason=str(reason))


def require_equal_sizes(a: Any, b: Any, reason: str) -> None:
    """Make ``a == b`` (sizes) a constraint of the program being traced, checked once per binding of
    its named axes: an ``ensure_shape`` of an empty array, which computes nothing (the binding
    checks keep it even though no output uses it). ``require_equal_sizes(dmax(n, 1), n, ...)``
    requires ``n >= 1``."""
    ensure_shape(full((0, a), 0, np.int8), (0, b), reason)


# ---------------------------------------------------------------------------------------------
# transpose
# ---------------------------------------------------------------------------------------------

transpose_p = Primitive("transpose", linear=True)


def _transpose_abstract(x: ShapedArray, *, permutation: tuple) -> ShapedArray:
    if sorted(permutation) != list(range(x.ndim)):
        raise ShapeError(f"transpose: permutation {permutation} is not a permutation of "
                         f"{x.ndim} axes")
    return ShapedArray(tuple(x.shape[p] for p in permutation), x.dtype, x.weak_type)


def _transpose_transpose(ct: Any, x: Any, *, permutation: tuple) -> list:
    if ad.is_zero(ct):
        return [ad.Zero(x.aval)]
    return [transpose(ct, tuple(np.argsort(permutation)))]


def _transpose_batch(vals: list, dims: list, *, permutation: tuple) -> tuple[list, list]:
    x = moveaxis(vals[0], dims[0], 0)
    return [transpose(x, (0, *(p + 1 for p in permutation)))], [0]


transpose_p.impl = lambda x, *, permutation: np.transpose(x, permutation)
transpose_p.abstract_eval = _transpose_abstract
transpose_p.transpose = _transpose_transpose
transpose_p.batch = _transpose_batch
_linear_jvp(transpose_p)


def transpose(x: Any, permutation: Sequence[int]) -> Any:
    """Permute the axes of ``x``."""
    perm = tuple(int(p) for p in permutation)
    if perm == tuple(range(len(perm))) and not isinstance(x, (int, float, complex)):
        core.get_aval(x)  # still validates the operand
        if len(perm) == core.get_aval(x).ndim:
            return x
    return transpose_p.bind(x, permutation=perm)


def moveaxis(x: Any, src: int, dst: int) -> Any:
    nd = core.get_aval(x).ndim
    src, dst = sh.normalize_axis(src, nd), sh.normalize_axis(dst, nd)
    if src == dst:
        return x
    perm = [i for i in range(nd) if i != src]
    perm.insert(dst, src)
    return transpose(x, perm)


# ---------------------------------------------------------------------------------------------
# squeeze / expand_dims (expand is a reshape)
# ---------------------------------------------------------------------------------------------

squeeze_p = Primitive("squeeze", linear=True)


def _check_dims(name: str, dimensions: tuple, ndim: int) -> None:
    """Each of ``dimensions`` is an axis of a rank-``ndim`` operand (a ShapeError naming ``name``)."""
    for d in dimensions:
        if not 0 <= d < ndim:
            raise ShapeError(f"{name}: axis {d} out of range for rank {ndim}")


def _squeeze_abstract(x: ShapedArray, *, dimensions: tuple) -> ShapedArray:
    _check_dims("squeeze", dimensions, x.ndim)
    for d in dimensions:
        if x.shape[d] != 1:
            raise ShapeError(f"squeeze: cannot squeeze axis {d} of size {sh.dim_str(x.shape[d])} "
                             f"(shape {sh.shape_str(x.shape)})")
    return ShapedArray(tuple(s for i, s in enumerate(x.shape) if i not in dimensions), x.dtype,
                       x.weak_type)


def _squeeze_batch(vals: list, dims: list, *, dimensions: tuple) -> tuple[list, list]:
    x = moveaxis(vals[0], dims[0], 0)
    return [squeeze(x, tuple(d + 1 for d in dimensions))], [0]


squeeze_p.impl = lambda x, *, dimensions: np.squeeze(x, dimensions) if dimensions else x
squeeze_p.abstract_eval = _squeeze_abstract
squeeze_p.transpose = lambda ct, x, *, dimensions: [ad.Zero(x.aval) if ad.is_zero(ct)
                                                    else reshape(ct, x.aval.shape)]
squeeze_p.batch = _squeeze_batch
_linear_jvp(squeeze_p)


def squeeze(x: Any, dimensions: Sequence[int]) -> Any:
    nd = core.get_aval(x).ndim
    dims = tuple(sorted(sh.normalize_axis(d, nd) for d in dimensions))
    if not dims:
        return x
    return squeeze_p.bind(x, dimensions=dims)


def expand_dims(x: Any, dimensions: Sequence[int]) -> Any:
    a = core.get_aval(x)
    out_nd = a.ndim + len(dimensions)
    dims = sorted(sh.normalize_axis(d, out_nd) for d in dimensions)
    shape = list(a.shape)
    for d in dims:
        shape.insert(d, 1)
    return reshape(x, shape)


# ---------------------------------------------------------------------------------------------
# rev
# ---------------------------------------------------------------------------------------------

rev_p = Primitive("rev", linear=True)


def _rev_abstract(x: ShapedArray, *, dimensions: tuple) -> ShapedArray:
    _check_dims("rev", dimensions, x.ndim)
    return x


rev_p.impl = lambda x, *, dimensions: np.flip(x, dimensions) if dimensions else x
rev_p.abstract_eval = _rev_abstract
rev_p.transpose = lambda ct, x, *, dimensions: [ad.Zero(x.aval) if ad.is_zero(ct) else rev(ct, dimensions)]
rev_p.batch = lambda vals, dims, *, dimensions: (
    [rev(vals[0], tuple(d + (d >= dims[0]) for d in dimensions))], [dims[0]])
_linear_jvp(rev_p)


def rev(x: Any, dimensions: Sequence[int]) -> Any:
    nd = core.get_aval(x).ndim
    return rev_p.bind(x, dimensions=tuple(sorted(sh.normalize_axis(d, nd) for d in dimensions)))


# ---------------------------------------------------------------------------------------------
# slice
# ---------------------------------------------------------------------------------------------

slice_p = Primitive("slice", linear=True)


def _slice_out_dim(start: Any, limit: Any, stride: int) -> Any:
    n = limit - start
    if isinstance(n, int):
        return max(0, -(-n // stride))
    return sh.floordiv(n + (stride - 1), stride) if stride != 1 else n


def _slice_abstract(x: ShapedArray, *, start_indices: tuple, limit_indices: tuple,
                    strides: tuple | None) -> ShapedArray:
    strides = strides or (1,) * x.ndim
    if not (len(start_indices) == len(limit_indices) == len(strides) == x.ndim):
        raise ShapeError(f"slice: start/limit/strides must have one entry per axis ({x.ndim})")
    out = []
    for i, (s, l, st, d) in enumerate(zip(start_indices, limit_indices, strides, x.shape)):
        if st < 1:
            raise ShapeError(f"slice: stride {st} on axis {i} must be positive")
        if isinstance(s, int) and isinstance(l, int) and isinstance(d, int) and not (0 <= s <= l <= d):
            raise ShapeError(f"slice: axis {i}: bounds [{s}:{l}] out of range for size {d}")
        out.append(_slice_out_dim(s, l, st))
    return ShapedArray(tuple(out), x.dtype, x.weak_type)


def _slice_impl(x: np.ndarray, *, start_indices: tuple, limit_indices: tuple, strides: tuple | None) -> Any:
    strides = strides or (1,) * x.ndim
    return x[tuple(np.s_[s:l:st] for s, l, st in zip(start_indices, limit_indices, strides))]


def _slice_transpose(ct: Any, x: Any, *, start_indices: tuple, limit_indices: tuple,
                     strides: tuple | None) -> list:
    if ad.is_zero(ct):
        return [ad.Zero(x.aval)]
    strides = strides or (1,) * x.aval.ndim
    out_shape = core.get_aval(ct).shape
    config = []
    for s, st, n, d in zip(start_indices, strides, out_shape, x.aval.shape):
        # the high padding is what the pad's own size rule leaves of d, so a strided slice of a
        # symbolic axis (whose length may be 0 at some binding) pads back to exactly d
        config.append((s, d - s - _interior_extent(n, st - 1), st - 1))
    zero = full((), 0, core.get_aval(ct).dtype)
    return [pad(ct, zero, tuple(config))]


def _slice_batch(vals: list, dims: list, *, start_indices: tuple, limit_indices: tuple,
                 strides: tuple | None) -> tuple[list, list]:
    x = moveaxis(vals[0], dims[0], 0)
    n = core.get_aval(x).shape[0]
    st = (1, *strides) if strides else None
    return [slice(x, (0, *start_indices), (n, *limit_indices), st)], [0]


slice_p.impl = _slice_impl
slice_p.abstract_eval = _slice_abstract
slice_p.transpose = _slice_transpose
slice_p.batch = _slice_batch
_linear_jvp(slice_p)


def slice(x: Any, start_indices: Sequence, limit_indices: Sequence,  # noqa: A001
          strides: Sequence[int] | None = None) -> Any:
    """Static slice ``x[start:limit:stride]`` along every axis."""
    st = tuple(int(s) for s in strides) if strides is not None else None
    if st is not None and all(s == 1 for s in st):
        st = None
    return slice_p.bind(x, start_indices=sh.canonical_shape(start_indices),
                        limit_indices=sh.canonical_shape(limit_indices), strides=st)


def slice_in_dim(x: Any, start: Any, limit: Any, stride: int = 1, axis: int = 0) -> Any:
    a = core.get_aval(x)
    axis = sh.normalize_axis(axis, a.ndim)
    starts = [0] * a.ndim
    limits = list(a.shape)
    strides = [1] * a.ndim
    starts[axis], limits[axis], strides[axis] = start, limit, stride
    return slice(x, starts, limits, strides)


# ---------------------------------------------------------------------------------------------
# pad
# ---------------------------------------------------------------------------------------------

pad_p = Primitive("pad", linear=True)


def _interior_extent(d: Any, interior: int) -> Any:
    """The extent of ``d`` elements with ``interior`` padding between each two."""
    if isinstance(d, int):
        return d + (d - 1) * interior if d else 0
    # a symbolic size may be 0 for some binding: no interior padding then
    return d + sh.dmax(d - 1, 0) * interior if interior else d


def _pad_abstract(x: ShapedArray, v: ShapedArray, *, padding_config: tuple) -> ShapedArray:
    if v.shape != ():
        raise ShapeError(f"pad: padding value must be a scalar, got shape {sh.shape_str(v.shape)}")
    if v.dtype != x.dtype:
        raise DTypeError(f"pad: padding value dtype {v.dtype} differs from operand dtype {x.dtype}")
    if len(padding_config) != x.ndim:
        raise ShapeError(f"pad: padding_config has {len(padding_config)} entries for rank {x.ndim}")
    out = []
    for i, ((lo, hi, interior), d) in enumerate(zip(padding_config, x.shape)):
        if interior < 0:
            raise ShapeError(f"pad: negative interior padding on axis {i}")
        n = lo + hi + _interior_extent(d, interior)
        if isinstance(n, int) and n < 0:
            raise ShapeError(f"pad: axis {i} would have negative size {n}")
        out.append(n)
    return ShapedArray(tuple(out), x.dtype, x.weak_type and v.weak_type)


def _pad_impl(x: np.ndarray, v: np.ndarray, *, padding_config: tuple) -> np.ndarray:
    for ax, (lo, hi, interior) in enumerate(padding_config):
        n = x.shape[ax]
        if interior and n > 1:
            shape = list(x.shape)
            shape[ax] = n + (n - 1) * interior
            y = np.full(shape, v, dtype=x.dtype)
            idx = [np.s_[:]] * x.ndim
            idx[ax] = np.s_[::interior + 1]
            y[tuple(idx)] = x
            x = y
        if lo < 0:
            x = np.take(x, np.arange(-lo, x.shape[ax]), axis=ax)
        if hi < 0:
            x = np.take(x, np.arange(0, x.shape[ax] + hi), axis=ax)
        widths = [(0, 0)] * x.ndim
        widths[ax] = (max(lo, 0), max(hi, 0))
        x = np.pad(x, widths, constant_values=v)
    return x


def _pad_transpose(ct: Any, x: Any, v: Any, *, padding_config: tuple) -> list:
    from ember._src.prims.reductions import reduce_sum
    if ad.is_zero(ct):
        return [ad.Zero(x.aval) if isinstance(x, ad.UndefPrimal) else None,
                ad.Zero(v.aval) if isinstance(v, ad.UndefPrimal) else None]
    ca = core.get_aval(ct)
    # sh.dmax: a symbolic pad amount of unknown sign (max(a, b) - a) gives a max atom, not an error
    unneg = tuple((sh.dmax(-lo, 0), sh.dmax(-hi, 0), 0) for lo, hi, _ in padding_config)
    t = pad(ct, full((), 0, ca.dtype), unneg) if any(a != 0 or b != 0 for a, b, _ in unneg) else ct
    starts = [sh.dmax(lo, 0) for lo, _, _ in padding_config]
    ta = core.get_aval(t)
    xs = x.aval.shape
    limits = [s + ((d - 1) * (it + 1) + 1 if not (isinstance(d, int) and d == 0) else 0)
              for s, d, (_, _, it) in zip(starts, xs, padding_config)]
    del ta
    t_op = slice(t, starts, limits, [it + 1 for _, _, it in padding_config])
    res_x = t_op if isinstance(x, ad.UndefPrimal) else None
    res_v = None
    if isinstance(v, ad.UndefPrimal):
        all_axes = tuple(range(ca.ndim))
        res_v = ew.sub(reduce_sum(ct, all_axes), reduce_sum(t_op, all_axes))
    return [res_x, res_v]


def _pad_batch(vals: list, dims: list, *, padding_config: tuple) -> tuple[list, list]:
    x, v = vals
    dx, dv = dims
    cfg = ((0, 0, 0), *padding_config)
    if dv is None:
        return [pad_p.bind(moveaxis(x, dx, 0), v, padding_config=cfg)], [0]
    # a batched padding value: pad with zero, then select the value where the operand is absent
    va = core.get_aval(v)
    size = va.shape[dv]
    if dx is None:
        xa = core.get_aval(x)
        x = broadcast_in_dim(x, (size, *xa.shape), tuple(range(1, xa.ndim + 1)))
    else:
        x = moveaxis(x, dx, 0)
    padded = pad_p.bind(x, full((), 0, va.dtype), padding_config=cfg)
    inner = core.get_aval(x).shape[1:]
    mask = pad_p.bind(full(inner, True, dt.bool_), full((), False, dt.bool_), padding_config=padding_config)
    out_shape = core.get_aval(padded).shape
    maskb = broadcast_in_dim(mask, out_shape, tuple(range(1, len(out_shape))))
    vb = broadcast_in_dim(v, out_shape, (0,))
    return [ew.select(maskb, padded, vb)], [0]


pad_p.impl = _pad_impl
pad_p.abstract_eval = _pad_abstract
pad_p.transpose = _pad_transpose
pad_p.batch = _pad_batch
_linear_jvp(pad_p)


def pad(x: Any, padding_value: Any, padding_config: Sequence) -> Any:
    """Pad with ``(low, high, interior)`` per axis; negative low/high crop."""
    def dim(d: Any) -> Any:  # negative (cropping) padding is allowed here
        return int(d) if isinstance(d, (int, np.integer)) else sh.canonical_dim(d)

    cfg = tuple((dim(lo), dim(hi), int(it)) for lo, hi, it in padding_config)
    return pad_p.bind(x, padding_value, padding_config=cfg)


# ---------------------------------------------------------------------------------------------
# concatenate
# ---------------------------------------------------------------------------------------------

concatenate_p = Primitive("concatenate", linear=True)


def _concat_abstract(*xs: ShapedArray, dimension: int) -> ShapedArray:
    if not xs:
        raise ShapeError("concatenate needs at least one operand")
    nd = xs[0].ndim
    if not 0 <= dimension < nd:
        raise ShapeError(f"concatenate: axis {dimension} out of range for rank {nd}")
    core.check_same_dtypes("concatenate", list(xs))
    for i, a in enumerate(xs[1:], 1):
        if a.ndim != nd:
            raise ShapeError(f"concatenate: operand {i} has rank {a.ndim}, operand 0 has rank {nd}")
        for d in range(nd):
            if d != dimension and a.shape[d] != xs[0].shape[d]:
                raise ShapeError(f"concatenate: operand {i} has size {sh.dim_str(a.shape[d])} on axis "
                                 f"{d}, operand 0 has {sh.dim_str(xs[0].shape[d])}")
    total = sum((a.shape[dimension] for a in xs[1:]), xs[0].shape[dimension])
    shape = list(xs[0].shape)
    shape[dimension] = sh.canonical_dim(total)
    return ShapedArray(tuple(shape), xs[0].dtype, all(a.weak_type for a in xs))


def _concat_transpose(ct: Any, *xs: Any, dimension: int) -> list:
    res = []
    off: Any = 0
    for x in xs:
        a = x.aval if isinstance(x, ad.UndefPrimal) else core.get_aval(x)
        n = a.shape[dimension]
        if isinstance(x, ad.UndefPrimal):
            res.append(ad.Zero(a) if ad.is_zero(ct) else slice_in_dim(ct, off, off + n, 1, dimension))
        else:
            res.append(None)
        off = off + n
    return res


def _concat_batch(vals: list, dims: list, *, dimension: int) -> tuple[list, list]:
    vals = ew.bring_to_front(vals, dims)
    return [concatenate(vals, dimension + 1)], [0]


concatenate_p.impl = lambda *xs, dimension: np.concatenate(xs, axis=dimension)
concatenate_p.abstract_eval = _concat_abstract
concatenate_p.transpose = _concat_transpose
concatenate_p.batch = _concat_batch
_linear_jvp(concatenate_p)


def concatenate(operands: Sequence[Any], dimension: int) -> Any:
    ops = list(operands)
    if not ops:
        raise ShapeError("concatenate needs at least one operand")
    nd = core.get_aval(ops[0]).ndim
    if nd == 0:
        raise ShapeError("zero-dimensional arrays cannot be concatenated")
    if len(ops) == 1:
        return ops[0]
    return concatenate_p.bind(*ops, dimension=sh.normalize_axis(dimension, nd))


# ---------------------------------------------------------------------------------------------
# iota
# ---------------------------------------------------------------------------------------------

iota_p = Primitive("iota")


def _iota_impl(*, dtype: np.dtype, shape: tuple, dimension: int) -> np.ndarray:
    r = np.arange(shape[dimension], dtype=dtype)
    bshape = [1] * len(shape)
    bshape[dimension] = shape[dimension]
    return np.broadcast_to(r.reshape(bshape), shape)


def _iota_abstract(*, dtype: np.dtype, shape: tuple, dimension: int) -> ShapedArray:
    if not 0 <= dimension < len(shape):
        raise ShapeError(f"iota: dimension {dimension} out of range for shape {sh.shape_str(shape)}")
    return ShapedArray(shape, dtype, False)


iota_p.impl = _iota_impl
iota_p.abstract_eval = _iota_abstract
iota_p.jvp = lambda primals, tangents, **p: ([iota_p.bind(**p)], [ad.Zero(_iota_abstract(**p))])
iota_p.na("transpose", "iota has no operands")
iota_p.na("batch", "iota has no operands, so it is never batched")


def iota(dtype: Any, size: Any) -> Any:
    """``[0, 1, ..., size-1]`` with the given dtype."""
    return iota_p.bind(dtype=dt.canonicalize(dtype), shape=(sh.canonical_dim(size),), dimension=0)


def broadcasted_iota(dtype: Any, shape: Sequence, dimension: int) -> Any:
    shape = _shape_tuple(shape)
    return iota_p.bind(dtype=dt.canonicalize(dtype), shape=shape,
                       dimension=sh.normalize_axis(dimension, len(shape)))

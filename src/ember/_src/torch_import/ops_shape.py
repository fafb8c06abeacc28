"""ATen handlers that copy, pad, tile or write slices: ``copy``, ``fill``, ``repeat``, ``unfold``,
``diagonal``, reflection/replication padding, ``slice_scatter``/``select_scatter``/``masked_scatter``,
and the few creation and bookkeeping ops exports keep."""

from __future__ import annotations

import math

import numpy as np

import ember
import ember.lax as lax
import ember.numpy as jnp
from ember._src import dtypes
from ember._src.prims import indexing as ix
from ember._src.prims import movement as mv
from ember._src.prims.check import check
from ember._src.prims.indexing import check_index
from ember._src.torch_import.ops import _norm, _same, handler, size_value


@handler("aten.copy.default", doc="src broadcast into the shape and dtype of x")
def _copy(ctx, x, src, non_blocking=False):
    return jnp.broadcast_to(jnp.asarray(src), tuple(x.shape)).astype(x.dtype)


@handler("aten.fill.Scalar", "aten.fill.Tensor", doc="an array of x's shape filled with a value")
def _fill(ctx, x, value):
    return jnp.broadcast_to(jnp.asarray(value).astype(x.dtype), tuple(x.shape))


@handler("aten.empty_strided.default", doc="an uninitialized array (zeros here; strides do not matter)")
def _empty_strided(ctx, size, stride, **kw):
    return jnp.zeros(ctx.shape, ctx.dtype)


@handler("aten.as_strided.default", doc="a view of a contiguous input's storage: a reshape where the "
         "strides are row-major, else a gather (positions computed in the program for symbolic sizes)")
def _as_strided(ctx, x, size, stride, storage_offset=None, input_contiguous=False):
    """torch's strides index the input's storage; the export records whether the input is contiguous
    at offset 0 (``input_contiguous``), where that storage is ember's row-major value. A view whose
    strides are row-major for ``size`` (a size-1 dim's stride aside) over all of the input is a
    reshape (what decompositions restride, e.g. ``adaptive_avg_pool1d``); another view of static
    sizes gathers its elements; an input torch holds otherwise raises."""
    if not input_contiguous:
        raise NotImplementedError("as_strided of a tensor that torch does not hold contiguously at storage "
                                  "offset 0 (ember arrays have no strides or storage: values, not views)")
    size, stride, off = tuple(size), tuple(stride), storage_offset or 0
    row_major, acc = [], 1
    for d in reversed(size):
        row_major.append(acc)
        acc = acc * d
    if off == 0 and all(d == 1 or st == r for d, st, r in zip(size, stride, row_major[::-1])) \
            and math.prod(size) == math.prod(x.shape):
        return jnp.reshape(x, size)
    if not all(isinstance(d, int) for d in (*size, *stride, off, *x.shape)):
        return _strided_gather(x, size, stride, off)
    idx = np.full(size, off, np.int64)
    for k, (d, st) in enumerate(zip(size, stride)):
        idx += (np.arange(d, dtype=np.int64) * st).reshape((1,) * k + (d,) + (1,) * (len(size) - k - 1))
    total = math.prod(x.shape)
    if idx.size and (idx.min() < 0 or idx.max() >= total):
        raise IndexError(f"as_strided: size {size}, strides {stride} and offset {off} read storage element "
                         f"{int(idx.max() if idx.max() >= total else idx.min())} of a tensor of {total}")
    flat = jnp.reshape(x, (total,))
    return flat[jnp.asarray(idx.astype(np.int32) if total < 2**31 else idx)]


def _strided_gather(x, size: tuple, stride: tuple, off):
    """``as_strided`` with symbolic sizes or strides: the storage positions ``off + sum_k i_k *
    stride_k`` computed in the program (int64 where the storage may pass 2**31 elements and x64 is
    on), a gather
    from the flattened input. torch checks the view against its storage; here a position past the
    storage raises ``IndexError``."""
    total = math.prod(x.shape)
    big = not isinstance(total, int) or total >= 2 ** 31
    dt = np.int64 if big and dtypes.canonicalize(np.int64) == np.int64 else np.int32
    pos = size_value(off, dt) if not isinstance(off, int) else jnp.asarray(off, dt)
    for k, st in enumerate(stride):
        term = lax.broadcasted_iota(dt, size, k)
        pos = pos + term * (size_value(st, dt) if not isinstance(st, int) else st)
    pos = check_index(pos, total, f"aten.as_strided to size {size} with strides {stride}: "
                                  "storage position")
    return jnp.reshape(x, (total,))[pos]


@handler("aten.sym_numel.default", doc="x.numel()")
def _sym_numel(ctx, x):
    return math.prod(x.shape) if all(isinstance(d, int) for d in x.shape) else ember.dimension_as_value(
        math.prod(x.shape))


@handler("aten._assert_async.msg", "aten._assert_async.default",
         doc="a value check torch runs at run time: checked in the program (CheckError)")
def _assert_async(ctx, cond, msg="torch._assert_async: the condition is false"):
    check(jnp.asarray(cond).astype(np.bool_), f"{msg} (at {ctx.source})" if ctx.source else msg)
    return None


@handler("aten.native_dropout.default", doc="dropout (identity and an all-true mask unless training)")
def _native_dropout(ctx, x, p, train):
    if train and p > 0:
        raise NotImplementedError("native_dropout in training mode (torch's random mask)")
    return x, jnp.ones(tuple(x.shape), np.bool_)


@handler("aten.repeat.default", doc="tile x (leading dims added as torch)")
def _repeat(ctx, x, repeats):
    x = jnp.reshape(x, (1,) * (len(repeats) - x.ndim) + tuple(x.shape))
    return jnp.tile(x, tuple(repeats))


@handler("aten.unfold.default", doc="sliding windows of a dim as a new last dim (slices of chunks where the "
         "window is up to 8 whole steps, else a gather)")
def _unfold(ctx, x, dim, size, step):
    if x.ndim == 0:
        return jnp.reshape(x, (1,))
    dim = _norm(dim, x.ndim)
    return jnp.moveaxis(windows(x, dim, size, step), dim + 1, -1)


MAX_WINDOW_SLICES = 8  # windows of up to this many steps are slices of chunks; longer ones a gather


def windows(x, dim: int, size: int, step: int):
    """The windows ``x[..., i*step : i*step + size, ...]`` along ``dim`` as two axes ``[n, size]``
    in its place, ``n = (len - size) // step + 1`` (a symbolic length gives a symbolic ``n``). A
    window of ``r <= MAX_WINDOW_SLICES`` whole steps is ``r`` shifted slices of the axis cut into
    steps (copies a fused kernel makes); another window a gather."""
    length = x.shape[dim]
    if isinstance(length, int) and length < size:
        raise ValueError(f"unfold: a window of {size} is longer than axis {dim} of size {length}")
    n = (length - size) // step + 1
    lead, tail = tuple(x.shape[:dim]), tuple(x.shape[dim + 1:])
    if size % step == 0 and size // step <= MAX_WINDOW_SLICES:
        r = size // step
        chunks = jnp.reshape(lax.slice_in_dim(x, 0, (n - 1 + r) * step, axis=dim),
                             lead + (n - 1 + r, step) + tail)
        parts = [lax.slice_in_dim(chunks, j, j + n, axis=dim) for j in range(r)]
        return jnp.reshape(jnp.stack(parts, axis=dim + 1), lead + (n, size) + tail)
    pos = (lax.broadcasted_iota(np.int32, (n, size), 0) * step
           + lax.broadcasted_iota(np.int32, (n, size), 1))
    return jnp.take(x, pos, axis=dim)


@handler("aten.diagonal.default", doc="a diagonal as the last dim")
def _diagonal(ctx, x, offset=0, dim1=0, dim2=1):
    return jnp.diagonal(x, offset=offset, axis1=_norm(dim1, x.ndim), axis2=_norm(dim2, x.ndim))


def _pad(x, pad, mode):
    widths = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        widths[x.ndim - 1 - i] = (int(pad[2 * i]), int(pad[2 * i + 1]))
    return jnp.pad(x, widths, mode=mode)


@handler("aten.reflection_pad1d.default", "aten.reflection_pad2d.default", "aten.reflection_pad3d.default",
         doc="reflect padding of the last dims (the edge not repeated)")
def _reflection_pad(ctx, x, padding):
    return _pad(x, padding, "reflect")


@handler("aten.replication_pad1d.default", "aten.replication_pad2d.default", "aten.replication_pad3d.default",
         doc="edge padding of the last dims")
def _replication_pad(ctx, x, padding):
    return _pad(x, padding, "edge")


def _write_along(x, src, dim: int, positions: np.ndarray):
    """``x`` with ``src`` (x's shape with ``len(positions)`` along ``dim``) written at ``positions``."""
    if positions.size == 0:
        return x
    return ix.scatter(x, jnp.asarray(positions.astype(np.int32)), src.astype(x.dtype), axis=dim, mode="set")


@handler("aten.slice_scatter.default", doc="x with x[start:end:step] along dim replaced by src")
def _slice_scatter(ctx, x, src, dim=0, start=None, end=None, step=1):
    dim = _norm(dim, x.ndim)
    n = x.shape[dim]
    if isinstance(end, int) and (end >= 2 ** 62 or (isinstance(n, int) and end >= n)):
        end = None
    if (start or 0) == 0 and end is None and step == 1:  # the whole axis (x[:, i] = v writes through this)
        return jnp.broadcast_to(_restated(src.astype(x.dtype), x.shape), tuple(x.shape))
    if not isinstance(n, int):
        return _slice_scatter_dynamic(x, src.astype(x.dtype), dim, start, end, step)
    start, end, step = slice(start, end, step).indices(n)
    return _write_along(x, src, dim, np.arange(start, end, step))


def _slice_scatter_dynamic(x, src, dim, start, end, step):
    """``slice_scatter`` along an axis of symbolic size ``n`` with step 1: the part of ``x`` before
    ``start``, ``src``, and the part from ``end`` on, concatenated (an in-place op on a view, such
    as Funnel's ``positional_attn[..., :context_len] *= mask``, exports as this). Bounds are taken
    as torch recorded them (in range: its export checked them); the result's size along ``dim`` is
    restated as ``n``, so a binding where the parts do not add up to it raises ``ShapeError``."""
    if step != 1:
        raise NotImplementedError(f"slice_scatter with step {step} along a dynamic axis")
    n = x.shape[dim]
    start = start or 0
    if isinstance(start, int) and start < 0:
        start = start + n
    if isinstance(end, int) and end < 0:
        end = end + n
    parts = [lax.slice_in_dim(x, 0, start, axis=dim)] if not _is_zero(start) else []
    parts.append(src)
    if end is not None:
        parts.append(lax.slice_in_dim(x, end, n, axis=dim))
    out = jnp.concatenate(parts, axis=dim) if len(parts) > 1 else src
    return _restated(out, x.shape)


def _restated(src, shape):
    """``src`` with each size that torch recorded as equal to ``shape``'s but that ember cannot
    prove equal (``(s * (2 s - 1)) // (2 s - 1)`` against ``s``) restated as ``shape``'s
    (``ensure_shape``: checked when a call binds the axes); sizes of 1 stay, to broadcast."""
    if src.ndim != len(shape) or all(_same(a, 1) or _same(a, b) for a, b in zip(src.shape, shape)):
        return src
    return mv.ensure_shape(src, tuple(1 if _same(a, 1) else b for a, b in zip(src.shape, shape)),
                           "aten.slice_scatter")


def _is_zero(v) -> bool:
    return isinstance(v, int) and v == 0


@handler("aten.select_scatter.default", doc="x with x[..., index, ...] replaced by src")
def _select_scatter(ctx, x, src, dim, index):
    dim = _norm(dim, x.ndim)
    n = x.shape[dim]
    if index < 0:
        if not isinstance(n, int):
            raise NotImplementedError("select_scatter from the end of a dynamic axis")
        index += n
    return _write_along(x, jnp.expand_dims(src, dim), dim, np.array([index]))


@handler("aten.masked_scatter.default", doc="x, with src's leading elements in order where the mask is true")
def _masked_scatter(ctx, x, mask, src):
    mask = jnp.broadcast_to(mask, tuple(x.shape))
    flat = jnp.reshape(mask, (-1,))
    pos = jnp.cumsum(flat.astype(np.int32)) - 1  # the k-th true element takes src's k-th element
    vals = jnp.take(jnp.reshape(src, (-1,)), jnp.maximum(pos, 0), mode="clip")
    return jnp.where(mask, jnp.reshape(vals, tuple(x.shape)).astype(x.dtype), x)


@handler("aten.addmv.default", doc="beta * v + alpha * a @ x")
def _addmv(ctx, v, a, x, beta=1, alpha=1):
    out = jnp.matmul(a, x)
    if alpha != 1:
        out = out * alpha
    return out + (v if beta == 1 else v * beta)


@handler("aten._native_batch_norm_legit.no_stats", doc="batch/instance norm over the batch's statistics")
def _batch_norm_no_stats(ctx, x, w, b, training, momentum, eps):
    axes = (0,) + tuple(range(2, x.ndim))
    mean = jnp.mean(x, axis=axes, keepdims=True)
    xc = x - mean
    rstd = lax.rsqrt(jnp.mean(xc * xc, axis=axes, keepdims=True) + eps)
    out = xc * rstd
    shape = (1, -1) + (1,) * (x.ndim - 2)
    if w is not None:
        out = out * jnp.reshape(w, shape)
    if b is not None:
        out = out + jnp.reshape(b, shape)
    return out, jnp.reshape(mean, (-1,)), jnp.reshape(rstd, (-1,))

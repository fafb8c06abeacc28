"""VSLA kernels over runtime logical lengths (the representation ``vsla.jit`` traces).

A value is a pair ``(data, lengths)``: ``data`` is stored at a capacity per axis (a symbolic dim
under ``vsla.jit``, any int otherwise) with the slack held at zero, and ``lengths`` is an int32
vector of the logical sizes, a runtime value. Every kernel here works from the capacities (shape
arithmetic: ``dmax``, sums and products of dims) and from masks ``iota < length``, so one trace
serves every logical shape of a rank and dtype. Functions take and return raw pairs; the
``VArray`` wrappers live in ``varray.py``/``ops.py``.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import ember.numpy as enp
from ember import lax
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.custom_derivatives import custom_jvp, custom_vjp
from ember._src.dynamic import dimension_as_value
from ember._src.prims.fft import fft_conv as lax_fft_conv
from ember._src.vsla import accumulate as acc

Pair = tuple[Any, Any]


def lengths_const(shape: Sequence[int]) -> Any:
    """The logical sizes of a static shape as an int32 vector."""
    return enp.asarray(np.asarray(shape, dtype=np.int32).reshape(len(shape)))


def zero(dtype: Any) -> Any:
    """A zero scalar of ``dtype`` (padding and masking value)."""
    return np.zeros((), np.dtype(dtype))


def extend(data: Any, cap: Sequence[Any]) -> Any:
    """Zero-pad ``data`` at the end of every axis up to the capacities ``cap`` (each >= the stored one)."""
    cfg = [(0, c - d, 0) for c, d in zip(cap, data.shape)]
    if all(isinstance(hi, int) and hi == 0 for _, hi, _ in cfg):
        return data
    return lax.pad(data, zero(data.dtype), cfg)


def _joint_cap(a: Any, b: Any) -> list[Any]:
    return [sh.dmax(x, y) for x, y in zip(a.shape, b.shape)]


def axis_mask(cap: Sequence[Any], ax: int, n: Any) -> Any:
    """Boolean ``iota < n`` along axis ``ax`` of an array of capacities ``cap``, broadcastable to it."""
    io = lax.iota(np.int32, cap[ax]) < n
    return enp.reshape(io, [1] * ax + [cap[ax]] + [1] * (len(cap) - ax - 1))


def logical_mask(data: Any, lengths: Any, axes: Sequence[int] | None = None) -> Any:
    """Boolean mask of the logical region of ``data`` (on ``axes``, default all), broadcast to its shape."""
    cap = list(data.shape)
    m = enp.ones(cap, dtype=bool)
    for ax in range(len(cap)) if axes is None else axes:
        m = m & axis_mask(cap, ax, lengths[ax])
    return m


def binary(a: Pair, b: Pair, op: Callable[[Any, Any], Any]) -> Pair:
    """Ambient promotion: both operands zero-extended to the joint capacity, lengths the maximum."""
    (x, lx), (y, ly) = a, b
    cap = _joint_cap(x, y)
    return op(extend(x, cap), extend(y, cap)), enp.maximum(lx, ly)


CONV_METHODS = ("auto", "direct", "fft")


def conv(a: Pair, b: Pair, method: str, threshold: int) -> Pair:
    """Model A: convolution on the last axis; leading axes are batch (promoted).

    The output capacity is ``ca + cb - 1`` (it holds the longest result ``m + n - 1``); the slack of
    both operands is zero, so neither path needs length masks on its inputs. ``method="fft"`` is
    one ``fft_conv`` step (rows read straight from both operands, transformed at
    ``next_pow2(ca + cb - 1)``, multiplied and transformed back in one pass, leading axes
    zero-extended inside it); ``"auto"`` takes the FFT when ``ca * cb > threshold``: decided while
    tracing when the capacities are static, else a runtime branch (``lax.cond``) with both paths
    compiled into the one program. Complex and integer operands always take the direct path.
    """
    (x, lx), (y, ly) = a, b
    ca, cb = x.shape[-1], y.shape[-1]
    dtype = np.dtype(enp.result_type(x.dtype, y.dtype))
    m, n = lx[-1], ly[-1]
    last = enp.where((m > 0) & (n > 0), m + n - 1, 0)
    lengths = enp.concatenate([enp.maximum(lx[:-1], ly[:-1]), last[None]]).astype(np.int32)
    if method == "direct" or dtype not in (np.float32, np.float64):
        return _conv_direct(x, y, m, n, dtype), lengths
    if method == "fft":
        return _conv_fft(x, y, last, dtype), lengths
    big = ca * cb
    if not sh.is_symbolic(big):
        out = _conv_fft(x, y, last, dtype) if big > threshold else _conv_direct(x, y, m, n, dtype)
        return out, lengths
    pred = dimension_as_value(big, np.int32) > threshold
    out = lax.cond(pred, lambda u, v, t, p, q: _conv_fft(u, v, t, dtype),
                   lambda u, v, t, p, q: _conv_direct(u, v, p, q, dtype), x, y, last, m, n)
    return out, lengths


def _conv_direct(x: Any, y: Any, m: Any, n: Any, dtype: np.dtype) -> Any:
    batch = [sh.dmax(p, q) for p, q in zip(x.shape[:-1], y.shape[:-1])]
    x = extend(x, batch + [x.shape[-1]])
    y = extend(y, batch + [y.shape[-1]])
    return _direct(x, y, m, n).astype(dtype)


def _toeplitz_conv(x: Any, y: Any, m: Any, n: Any, compensated: bool = True) -> Any:
    """One fused multiply-and-sum over a Toeplitz gather of ``y`` (the ``co x ca`` matrix is never
    stored). Only the products of logical entries (``i < m``, ``0 <= k - i < n``) are summed, the
    others selected away rather than multiplied by zero, so a NaN or infinity reaches only the
    outputs it contributes to (as ``np.convolve``). ``compensated=False`` (a tangent, which must be
    linear in ``x`` for its transpose: the compensated sum's tests on the products are not) sums
    in the widened type (double under x64) without compensation."""
    dtype = enp.result_type(x.dtype, y.dtype)
    ca, cb = x.shape[-1], y.shape[-1]
    co = ca + cb - 1
    i = lax.iota(np.int32, ca)[None, :]
    k = lax.iota(np.int32, co)[:, None] - i
    valid = (k >= 0) & (k < cb)
    band = (k >= 0) & (k < n) & (i < m)
    # both factors selected to zero off the band (masking the product instead defeats the fused
    # multiply-and-sum loop: 10x slower at 512 rows of capacity 32)
    toe = enp.where(band, enp.take(y, enp.where(valid, k, 0), axis=-1), zero(y.dtype))
    xb = enp.where(band, x[..., None, :], zero(x.dtype))
    if not compensated:
        return enp.sum(acc.widen(xb) * acc.widen(toe), axis=-1).astype(dtype)
    return acc.dot_sum(xb, toe, -1).astype(dtype)  # wide accumulation (accumulate.py)


@custom_jvp
def _direct(x: Any, y: Any, m: Any, n: Any) -> Any:
    """The direct conv of the logical lengths ``m``, ``n`` (int32 scalars), whose derivative is
    written with the gathered operand held fixed: the tangent ``conv(tx, y) + conv(ty, x)`` (conv
    commutes) is linear in the multiplied operand only, so its transpose is a broadcast and a
    product, with no scatter (the transpose of the gather, which has no native lowering at
    symbolic sizes)."""
    return _toeplitz_conv(x, y, m, n)


@_direct.defjvp
def _direct_jvp(primals: tuple, tangents: tuple) -> tuple[Any, Any]:
    (x, y, m, n), (tx, ty, _, _) = primals, tangents
    return _direct(x, y, m, n), _toeplitz_conv(tx, y, m, n, False) + _toeplitz_conv(ty, x, n, m, False)


def fft_length(ca: sh.Dim, cb: sh.Dim) -> sh.Dim:
    """The FFT conv's transform length for capacities ``ca``, ``cb``: ``next_pow2(ca + cb - 1)``
    (chosen at run time by the ``fft_conv`` step when the capacities are symbolic, where this
    returns the bound ``2 * max(ca, cb)``: the same power of two for power-of-two capacities)."""
    if isinstance(ca, int) and isinstance(cb, int):
        return 1 << (ca + cb - 2).bit_length()
    return 2 * sh.dmax(ca, cb)


def _conv_fft(x: Any, y: Any, last: Any, dtype: np.dtype) -> Any:
    """One ``fft_conv`` step (leading axes zero-extended inside it, output capacity
    ``ca + cb - 1``); the columns from the logical length ``last`` on are written as zeros (the
    rounding noise of the transforms would be there)."""
    return lax_fft_conv(x.astype(dtype), y.astype(dtype), last)


def minimal_lengths(data: Any) -> Any:
    """Per axis, one past the last hyperplane holding a nonzero (the minimal representative's shape)."""
    nz = data != 0
    out = []
    for ax in range(data.ndim):
        others = tuple(i for i in range(data.ndim) if i != ax)
        row = enp.any(nz, axis=others) if others else nz
        pos = lax.iota(np.int32, data.shape[ax]) + 1
        out.append(enp.max(enp.where(row, pos, 0)))
    if not out:
        return enp.zeros((0,), np.int32)
    return enp.stack(out).astype(np.int32)


def kron(a: Pair, b: Pair) -> Pair:
    """Model B, any rank: ``out[..., i * n + j, ...] = a[..., i, ...] * b[..., j, ...]`` on every axis
    (``np.kron``), over the minimal lengths ``m``, ``n`` of each axis (runtime values), at capacity
    ``ca * cb`` per axis: each operand is gathered along every axis with the indices ``k // n``
    (``a``) or ``k % n`` (``b``), and the product masked to ``k < m * n`` per axis."""
    (x, _), (y, _) = a, b
    lm, ln = minimal_lengths(x), minimal_lengths(y)
    gx, gy, keep, lengths = x, y, None, []
    for ax in range(x.ndim):
        m, n = lm[ax], ln[ax]
        ca, cb = x.shape[ax], y.shape[ax]
        k = lax.iota(np.int32, ca * cb)
        step = enp.maximum(n, 1)
        gx = enp.take(gx, enp.minimum(k // step, ca - 1), axis=ax)
        gy = enp.take(gy, enp.minimum(k % step, cb - 1), axis=ax)
        total = m * n
        mask = axis_mask([d * e for d, e in zip(x.shape, y.shape)], ax, total)
        keep = mask if keep is None else keep & mask
        lengths.append(total)
    prod = gx * gy
    out = enp.where(keep, prod, zero(prod.dtype)) if keep is not None else prod
    return out, enp.stack(lengths).astype(np.int32) if lengths else enp.zeros((0,), np.int32)


def shrink(a: Pair) -> Pair:
    """The minimal representative: the same data, lengths cut at the last nonzero hyperplanes."""
    return a[0], minimal_lengths(a[0])


_WIDE = {np.dtype(np.float16): np.float64, np.dtype(np.float32): np.float64,
         np.dtype(np.complex64): np.complex128}
def wide_sum(x: Any, axis: int, keepdims: bool = False) -> Any:
    """Sum over ``axis`` with wide accumulation (the specification's precision policy: reductions
    accumulate in double). Under ``jax_enable_x64`` a float16/bfloat16/float32 (complex64) sum
    accumulates in float64 (complex128) and is rounded once on the way out. Without x64 there is
    no double type (float16/bfloat16 are summed in float32), and the sum is blocked instead: the
    whole blocks of ``_BLOCKS_OF`` entries of the axis are summed each, then their sums the same
    way (static sizes until at most ``_BLOCKS_OF`` are left; a symbolic size :data:`_SYMBOLIC_LEVELS`
    times), and each level's remainder is added, so no running sum adds more than ``_BLOCKS_OF``
    terms (``cap / _BLOCKS_OF ** _SYMBOLIC_LEVELS`` past 2^32 symbolic entries; slices and
    reshapes: no copy, no padding). Blocks of 4,096 with one level were not enough: the running
    sums of a vectorized row sum add 4,096 / lanes terms each, and 10^7 float32 copies of 0.1 came
    out 3.1e-6 too large with 16 lanes, -1e-6 with 8 (the blocks' rounding bias is systematic for
    equal terms); 256 gives 3.6e-7 and -6.4e-7. Integer and float64 sums are plain sums."""
    d = np.dtype(x.dtype)
    wide = _WIDE.get(d, np.float64 if d.name == "bfloat16" else None)
    if wide is None:
        return enp.sum(x, axis=axis, keepdims=keepdims)
    if dt.x64_enabled():
        return enp.sum(x.astype(wide), axis=axis, keepdims=keepdims).astype(d)
    if acc.is_half(d):  # float16/bfloat16 storage: blocked in float32, rounded once
        return wide_sum(x.astype(np.float32), axis, keepdims).astype(d)
    return _blocked_sum(x, axis % x.ndim, keepdims, _SYMBOLIC_LEVELS)


def _blocked_sum(x: Any, ax: int, keepdims: bool, levels: int) -> Any:
    """:func:`wide_sum`'s float32 sum over axis ``ax`` in blocks of ``_BLOCKS_OF``, recursively."""
    c = x.shape[ax]
    static = isinstance(c, int)
    if (static and c <= _BLOCKS_OF) or (not static and levels == 0):
        return enp.sum(x, axis=ax, keepdims=keepdims)
    nb = c // _BLOCKS_OF
    cut = nb * _BLOCKS_OF
    shape = list(x.shape)
    head = lax.slice(x, [0] * x.ndim, shape[:ax] + [cut] + shape[ax + 1:])
    tail = lax.slice(x, [0] * ax + [cut] + [0] * (x.ndim - ax - 1), shape)
    blocks = enp.sum(enp.reshape(head, (*shape[:ax], nb, _BLOCKS_OF, *shape[ax + 1:])), axis=ax + 1)
    return _blocked_sum(blocks, ax, keepdims, levels - 1) + enp.sum(tail, axis=ax, keepdims=keepdims)


_BLOCKS_OF = 1 << 8
_SYMBOLIC_LEVELS = 3  # a symbolic axis's levels of blocks (a static one's: as many as it takes)


def wide_mean(x: Any, n: Any, axis: int = -1) -> Any:
    """``wide_sum(x, axis, keepdims=True) / max(n, 1)`` (the mean over a logical extent ``n``)."""
    return wide_sum(x, axis, keepdims=True) / enp.maximum(n, 1).astype(x.dtype)


def reduce_sum(a: Pair, ax: int) -> Pair:
    x, lx = a
    keep = [i for i in range(x.ndim) if i != ax]
    return wide_sum(x, ax), _take_lengths(lx, keep)


def mean(a: Pair, ax: int) -> Pair:
    s, ls = reduce_sum(a, ax)
    n = enp.maximum(a[1][ax], 1).astype(s.dtype)
    return s / n, ls


def _take_lengths(lx: Any, keep: Sequence[int]) -> Any:
    if not keep:
        return enp.zeros((0,), np.int32)
    return enp.take(lx, enp.asarray(np.asarray(keep, np.int32)))


def transpose(a: Pair, axes: Sequence[int]) -> Pair:
    x, lx = a
    return enp.transpose(x, tuple(axes)), _take_lengths(lx, axes)


def matmul(a: Pair, b: Pair) -> Pair:
    """Product on the last two axes; the contracted axis is zero-extended to the joint capacity.

    Batch axes broadcast: where one operand's batch length is 1 (a runtime test) its single
    matrix is repeated along the joint capacity, otherwise the axis is zero-extended; the result's
    batch slack is masked back to zero."""
    (x, lx), (y, ly) = a, b
    nb = x.ndim - 2
    cap = [sh.dmax(p, q) for p, q in zip(x.shape[:-2], y.shape[:-2])]
    k = sh.dmax(x.shape[-1], y.shape[-2])
    x = extend(x, list(x.shape[:-2]) + [x.shape[-2], k])
    y = extend(y, list(y.shape[:-2]) + [k, y.shape[-1]])
    lb = []
    for i in range(nb):
        p, q = lx[i], ly[i]
        lb.append(enp.where(p == 1, q, enp.where(q == 1, p, enp.maximum(p, q))))
        x, y = _broadcast_axis(x, i, cap[i], p), _broadcast_axis(y, i, cap[i], q)
    out = acc.matmul(x, y)
    if nb:
        keep = logical_mask(out, enp.concatenate([enp.stack(lb), enp.asarray(np.zeros(2, np.int32))]),
                            axes=range(nb))
        out = enp.where(keep, out, zero(out.dtype))
    lengths = enp.concatenate([enp.stack(lb).astype(np.int32), lx[-2:-1], ly[-1:]]) if nb else \
        enp.concatenate([lx[-2:-1], ly[-1:]])
    return out, lengths


def _broadcast_axis(x: Any, ax: int, cap: Any, n: Any) -> Any:
    """``x`` brought to capacity ``cap`` on batch axis ``ax``: its first entry repeated when its
    length ``n`` is 1 (broadcast), else zero-extended."""
    shape = list(x.shape)
    shape[ax] = cap
    ext = extend(x, shape)
    first = x[(slice(None),) * ax + (slice(0, 1),)]
    return enp.where(n == 1, enp.broadcast_to(first, shape), ext)


def softmax(a: Pair, ax: int) -> Pair:
    """Softmax over the logical extent of ``ax``; slack (on every axis) stays zero."""
    x, lx = a
    mask = logical_mask(x, lx)
    neg = enp.where(mask, x, -np.inf)
    mx = enp.max(neg, axis=ax, keepdims=True)
    mx = enp.where(enp.isfinite(mx), mx, zero(x.dtype))
    e = enp.where(mask, enp.exp(x - mx), zero(x.dtype))
    s = wide_sum(e, ax, keepdims=True)
    return e / enp.where(s > 0, s, enp.ones_like(s)), lx


def _last_mean(x: Any, n: Any) -> Any:
    return wide_mean(x, n, -1)


def rms_norm(a: Pair, eps: float) -> Pair:
    """RMS normalisation over the logical last axis (slack is zero in and out)."""
    x, lx = a
    return x / enp.sqrt(_last_mean(x * x, lx[-1]) + eps), lx


def layer_norm(a: Pair, eps: float) -> Pair:
    """Layer normalisation over the logical last axis; the centred slack is masked back to zero."""
    x, lx = a
    c = enp.where(logical_mask(x, lx), x - _last_mean(x, lx[-1]), zero(x.dtype))
    return c / enp.sqrt(_last_mean(c * c, lx[-1]) + eps), lx


def stack(pairs: Sequence[Pair]) -> Pair:
    """Stack along a new leading axis of static size ``k``; every operand zero-extended to the joint
    capacity, the lengths ``[k, max lengths...]``."""
    datas = [x for x, _ in pairs]
    cap = list(datas[0].shape)
    for x in datas[1:]:
        cap = [sh.dmax(c, d) for c, d in zip(cap, x.shape)]
    data = enp.stack([extend(x, cap) for x in datas])
    k = enp.asarray(np.array([len(pairs)], np.int32))
    if not cap:
        return data, k
    top = pairs[0][1]
    for _, lx in pairs[1:]:
        top = enp.maximum(top, lx)
    return data, enp.concatenate([k, top.astype(np.int32)])


def slice_static(a: Pair, start: Sequence[int], stop: Sequence[int]) -> Pair:
    """Logical ``a[start:stop]`` per axis with static bounds: the data zero-extended to cover
    ``stop`` (past the logical shape the slack and the extension are zeros), then a static slice;
    the result's lengths are ``stop - start``."""
    x, _ = a
    x = extend(x, [sh.dmax(c, b) for c, b in zip(x.shape, stop)])
    out = x[tuple(slice(p, q) for p, q in zip(start, stop))]
    return out, lengths_const([q - p for p, q in zip(start, stop)])


def gather_static(a: Pair, idx: np.ndarray, ax: int) -> Pair:
    """Entries at the static ``idx`` along ``ax`` (an index past the logical size reads zero), as
    a :func:`select_sum` with the indices' one-hot matrix (differentiable at symbolic capacities)."""
    x, lx = a
    top = int(idx.max()) + 1 if idx.size else 0
    x = extend(x, [sh.dmax(c, top) if i == ax else c for i, c in enumerate(x.shape)])
    x = x[(slice(None),) * ax + (slice(0, top),)]
    out = select_sum(x, ax, np.arange(top)[:, None] == idx[None, :])
    lengths = enp.concatenate([lx[:ax], enp.asarray(np.array([idx.size], np.int32)), lx[ax + 1:]])
    return out, lengths


def reshape_static(a: Pair, shape: Sequence[int]) -> Pair:
    """Reshape the logical extent (runtime sizes) to the static ``shape``: output element ``f``
    (row-major) reads the source element whose logical multi-index is ``f`` unravelled over the
    runtime lengths, one gather from the flattened data. When the logical size differs from
    ``prod(shape)`` the data are zeros and every length is -1 (``vsla.jit`` reports it when the
    result comes back). The derivative is the inverse gather (each stored entry reads the output
    position its logical index ravels to), a ``custom_vjp``: the gather's own transpose would be a
    scatter, which has no native lowering at symbolic sizes."""
    x, lx = a
    shape = tuple(int(d) for d in shape)
    gather = custom_vjp(lambda u, ln: _reshape_gather(u, ln, shape))
    gather.defvjp(lambda u, ln: (_reshape_gather(u, ln, shape), (u, ln)),
                  lambda res, g: (_reshape_scatter(res[0], res[1], g), None))
    out = gather(x, lx)
    size = enp.prod(lx.astype(np.int32)) if x.ndim else enp.asarray(np.int32(1))
    ok = size == int(np.prod(shape, dtype=np.int64))
    lengths = enp.where(ok, lengths_const(shape), -enp.ones((len(shape),), np.int32))
    return out, lengths


def _reshape_gather(x: Any, lx: Any, shape: tuple[int, ...]) -> Any:
    n = int(np.prod(shape, dtype=np.int64))
    if n == 0:
        return enp.zeros(shape, x.dtype)
    rem = lax.iota(np.int32, n)
    src = enp.zeros((n,), np.int32)
    stride: Any = 1
    for d in reversed(range(x.ndim)):
        ln = enp.maximum(lx[d], 1)
        src = src + (rem % ln) * stride
        rem = rem // ln
        stride = stride * dimension_as_value(x.shape[d], np.int32)
    ok = (enp.prod(lx.astype(np.int32)) if x.ndim else enp.asarray(np.int32(1))) == n
    flat = enp.reshape(x, (-1,))
    return enp.reshape(enp.where(ok, enp.take(flat, enp.where(ok, src, 0)), zero(x.dtype)), shape)


def _reshape_scatter(x: Any, lx: Any, g: Any) -> Any:
    """The transpose of :func:`_reshape_gather`: stored entry ``q`` of ``x`` (capacities) takes
    ``g`` at the row-major position of its logical index when that index is inside the lengths."""
    n = int(np.prod(g.shape, dtype=np.int64))
    if n == 0 or x.ndim == 0:
        return enp.zeros_like(x) if n == 0 else enp.reshape(g, x.shape).astype(x.dtype)
    total: Any = 1
    for c in x.shape:
        total = total * c
    rem = lax.iota(np.int32, total)
    pos = enp.zeros_like(rem)
    inside = enp.ones(rem.shape, bool)
    mult: Any = enp.asarray(np.int32(1))
    for d in reversed(range(x.ndim)):
        i = rem % dimension_as_value(x.shape[d], np.int32)
        rem = rem // dimension_as_value(x.shape[d], np.int32)
        inside = inside & (i < lx[d])
        pos = pos + i * mult
        mult = mult * lx[d]
    valid = inside & (mult == n)
    flat = enp.reshape(g, (-1,))
    out = enp.where(valid, enp.take(flat, enp.where(valid, pos, 0)), zero(g.dtype))
    return enp.reshape(out, x.shape).astype(x.dtype)


def affine(a: Pair, g: Pair | None, b: Pair | None) -> Pair:
    """``a * g + b`` on the last axis with rank-1 ``g``/``b`` (either may be None), broadcast over
    the leading axes: the last axis zero-extended to the joint capacity, its length the largest of
    the three; a ``b`` is masked off the leading axes' slack (where ``a`` is zero, ``b`` is not)."""
    x, lx = a
    cap = x.shape[-1]
    for p in (g, b):
        if p is not None:
            cap = sh.dmax(cap, p[0].shape[0])
    out = extend(x, list(x.shape[:-1]) + [cap])
    last = lx[-1]
    for p, op in ((g, lambda u, w: u * w), (b, lambda u, w: u + w)):
        if p is not None:
            out = op(out, extend(p[0], [cap]).astype(out.dtype))
            last = enp.maximum(last, p[1][0])
    lengths = enp.concatenate([lx[:-1], last[None]]).astype(np.int32)
    if b is not None and x.ndim > 1:
        out = enp.where(logical_mask(out, lengths, axes=range(x.ndim - 1)), out, zero(out.dtype))
    return out, lengths


def scatter_static(a: Pair, idx: np.ndarray, size: int, ax: int) -> Pair:
    """Scatter-add of the first ``len(idx)`` entries along ``ax`` into ``size`` positions: a
    :func:`select_sum` with the static one-hot matrix of ``idx`` (symbolic capacities allowed; its
    derivative is the gather)."""
    x, lx = a
    k = int(idx.size)
    x = extend(x, [sh.dmax(c, k) if i == ax else c for i, c in enumerate(x.shape)])
    x = x[(slice(None),) * ax + (slice(0, k),)]
    out = select_sum(x, ax, idx[:, None] == np.arange(size)[None, :])
    lengths = enp.concatenate([lx[:ax], enp.asarray(np.array([size], np.int32)), lx[ax + 1:]])
    return out, lengths.astype(np.int32)


def select_sum(x: Any, ax: int, sel: np.ndarray) -> Any:
    """``out[..., o, ...] = sum_i x[..., i, ...]`` over the ``i`` with ``sel[i, o]`` (a static boolean
    ``(x.shape[ax], n_out)`` matrix): gather and scatter-add with static indices. The entries are
    selected before they are summed (a NaN reaches only the outputs it is selected for, which a
    product with a one-hot matrix would not give), and the derivative is a broadcast and the same
    selection, which runs at symbolic sizes (a scatter does not). Holds ``n_in x n_out`` entries per
    row of the other axes."""
    xm = enp.moveaxis(x, ax, -1)[..., :, None]
    picked = enp.where(enp.asarray(sel), xm, zero(x.dtype))
    return enp.moveaxis(enp.sum(picked, axis=-2), -1, ax)

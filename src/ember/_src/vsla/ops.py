"""Reductions, matmul, normalisations, transpose and streaming windows on VArrays."""
from __future__ import annotations

import builtins
import collections
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

import ember.numpy as enp
from ember._src.vsla import accumulate as acc
from ember._src.vsla import symbolic as sym
from ember._src.vsla.varray import VArray, _make, any_symbolic, array, stack

__all__ = ["sum", "mean", "matmul", "softmax", "rms_norm", "layer_norm", "transpose", "window", "pyramid",
           "reshape", "slice", "gather", "scatter"]

builtins_slice = builtins.slice


def _axis(v: VArray, axis: int) -> int:
    if not -v.ndim <= axis < v.ndim:
        raise ValueError(f"vsla: axis {axis} out of range for rank {v.ndim}")
    return axis % v.ndim


def _wrap(x: Any) -> VArray:
    return array(x)


def _pair(p: tuple[Any, Any]) -> VArray:
    return _make(p[0], None, p[1])


def _at_least_rank1(p: tuple[Any, Any]) -> VArray:
    """A reduction's result ``(data, lengths)`` as a VArray; a rank-0 result (the sum of a rank-1
    VArray) becomes the rank-1 ``[s]``: the specification reduces rank by one (§4.3) but shows no
    rank-0 tensor at the API boundary (§3.2), and ``[s]`` is the class of the scalar."""
    x, lengths = p
    if x.ndim == 0:
        return _make(enp.reshape(x, (1,)), None, enp.ones((1,), np.int32)) if lengths is not None \
            else array(x)
    return _pair(p) if lengths is not None else _wrap(x)


def sum(v: VArray, axis: int = -1) -> VArray:  # noqa: A001
    """Sum over ``axis`` of the logical extent, accumulated wide (float64 under ``jax_enable_x64``,
    blocked otherwise: :func:`ember._src.vsla.symbolic.wide_sum`). The rank drops by one, to no
    less than 1: the sum of a rank-1 VArray is the rank-1 ``[s]`` (§3.2)."""
    v = array(v)
    if v.symbolic:
        return _at_least_rank1(sym.reduce_sum(v.pair(), _axis(v, axis)))
    return _at_least_rank1((sym.wide_sum(v.logical(), _axis(v, axis)), None))


def mean(v: VArray, axis: int = -1) -> VArray:
    """Mean over the logical extent of ``axis`` (NaN-free: an empty axis gives zeros); rank as
    :func:`sum`."""
    v = array(v)
    ax = _axis(v, axis)
    if v.symbolic:
        return _at_least_rank1(sym.mean(v.pair(), ax))
    n = v.shape[ax]
    return _at_least_rank1((sym.wide_sum(v.logical(), ax) / max(n, 1), None))


def matmul(a: VArray, b: VArray) -> VArray:
    """Matrix product on the last two axes; the contracted axis is promoted to the larger size.

    Batch (leading) axes follow the specification's rule that they broadcast: a batch axis of
    size 1 is repeated against the other operand's size (as NumPy's ``matmul``); sizes that do
    not broadcast (neither is 1) are zero-extended, the ambient promotion of element-wise ops (a
    missing matrix is a zero matrix). float16/bfloat16/float32 products accumulate in double and
    are rounded once (the specification's double accumulation, §15): widened under
    ``jax_enable_x64``, the ``wide_matmul`` primitive (double inside its native step) without it."""
    a, b = array(a), array(b)
    if a.ndim != b.ndim or a.ndim < 2:
        raise ValueError(f"vsla.matmul: need equal ranks >= 2, got {a.ndim} and {b.ndim}")
    if any_symbolic(a, b):
        return _pair(sym.matmul(a.pair(), b.pair()))
    k = max(a.shape[-1], b.shape[-2])
    batch = tuple(_batch_size(x, y) for x, y in zip(a.shape[:-2], b.shape[:-2]))
    xa = _broadcast_batch(_logical_as(a, _own_batch(a, batch) + (a.shape[-2], k)), batch)
    xb = _broadcast_batch(_logical_as(b, _own_batch(b, batch) + (k, b.shape[-1])), batch)
    return _wrap(acc.matmul(xa, xb))


def _batch_size(x: int, y: int) -> int:
    """A matmul batch axis: 1 broadcasts against the other size, otherwise the larger size."""
    return y if x == 1 else x if y == 1 else max(x, y)


def _own_batch(v: VArray, batch: tuple[int, ...]) -> tuple[int, ...]:
    """The batch sizes ``v`` is zero-extended to before broadcasting (its size-1 axes stay 1)."""
    return tuple(1 if d == 1 else n for d, n in zip(v.shape[:-2], batch))


def _broadcast_batch(x: Any, batch: tuple[int, ...]) -> Any:
    """``x`` with its size-1 batch axes repeated to ``batch`` (the others already have that size)."""
    return enp.broadcast_to(x, batch + tuple(x.shape[len(batch):]))


def _logical_as(v: VArray, shape: tuple[int, ...]) -> Any:
    x = v.logical()
    return enp.pad(x, [(0, s - d) for s, d in zip(shape, v.shape)])


def _in_float32(v: VArray) -> VArray:
    """float16/bfloat16 data as float32 (they compute in float32, §15); other dtypes unchanged."""
    return v._with_data(v.data.astype(np.float32)) if acc.is_half(v.dtype) else v


def _stored(out: VArray, dtype: Any) -> VArray:
    """``out`` rounded once to the storage ``dtype``."""
    return out if np.dtype(out.dtype) == np.dtype(dtype) else out._with_data(out.data.astype(dtype))


def softmax(v: VArray, axis: int = -1) -> VArray:
    """Softmax over the logical extent of ``axis`` (trailing slack excluded, not treated as zeros)."""
    v = array(v)
    ax = _axis(v, axis)
    dtype, v = v.dtype, _in_float32(v)
    if v.symbolic:
        return _stored(_pair(sym.softmax(v.pair(), ax)), dtype)
    if v.shape[ax] == 0:
        return _stored(v, dtype)
    x = v.logical()
    e = enp.exp(x - enp.max(x, axis=ax, keepdims=True))
    return _stored(_wrap(e / sym.wide_sum(e, ax, keepdims=True)), dtype)


def rms_norm(v: VArray, eps: float = 1e-6, gamma: Any = None) -> VArray:
    """RMS normalisation over the logical last axis, times the gain ``gamma`` when given
    (``Y = X / rms(X) * gamma``, §9.4; ``gamma`` a rank-1 VArray over the last axis, zero-extended
    like any Hadamard factor, so entries past its length are zero)."""
    v = array(v)
    dtype, w = v.dtype, _in_float32(v)
    if w.symbolic:
        out = _pair(sym.rms_norm(w.pair(), eps))
    elif w.shape[-1] == 0:
        out = w
    else:
        x = w.logical()
        out = _wrap(x / enp.sqrt(sym.wide_mean(x * x, x.shape[-1]) + eps))
    return _stored(_affine(out, gamma, None), dtype)


def layer_norm(v: VArray, eps: float = 1e-5, gamma: Any = None, beta: Any = None) -> VArray:
    """Layer normalisation (zero mean, unit variance) over the logical last axis, then
    ``* gamma + beta`` when given (§9.4; rank-1 VArrays over the last axis, with the ambient
    promotion of ``*`` and ``+``: the result's last length is the largest of the three, and a
    ``beta`` longer than a row extends it). Leading axes broadcast ``gamma``/``beta``; their slack
    stays zero."""
    v = array(v)
    dtype, w = v.dtype, _in_float32(v)
    if w.symbolic:
        out = _pair(sym.layer_norm(w.pair(), eps))
    elif w.shape[-1] == 0:
        out = w
    else:
        x = w.logical()
        c = x - sym.wide_mean(x, x.shape[-1])
        out = _wrap(c / enp.sqrt(sym.wide_mean(c * c, x.shape[-1]) + eps))
    return _stored(_affine(out, gamma, beta), dtype)


def _affine(v: VArray, gamma: Any, beta: Any) -> VArray:
    """``v * gamma + beta`` on the last axis (either may be None)."""
    if gamma is None and beta is None:
        return v
    params = [None if p is None else _in_float32(array(p)) for p in (gamma, beta)]
    for p in params:
        if p is not None and p.ndim != 1:
            raise ValueError(f"vsla: gamma and beta must be rank-1 VArrays over the last axis, got rank "
                             f"{p.ndim}")
    if v.ndim == 0:
        raise ValueError("vsla: gamma/beta need an operand with at least one axis")
    g, b = params
    if any_symbolic(v, *(p for p in params if p is not None)):
        return _pair(sym.affine(v.pair(), None if g is None else g.pair(), None if b is None else b.pair()))
    data, _ = sym.affine(v.pair(), None if g is None else g.pair(), None if b is None else b.pair())
    last = max([v.shape[-1]] + [p.shape[0] for p in params if p is not None])
    return _make(data, v.shape[:-1] + (last,))


def transpose(v: VArray, axes: tuple[int, ...] | None = None) -> VArray:
    """Permute the axes of the logical shape."""
    v = array(v)
    axes = tuple(reversed(range(v.ndim))) if axes is None else tuple(_axis(v, a) for a in axes)
    if v.symbolic:
        return _pair(sym.transpose(v.pair(), axes))
    return _make(enp.transpose(v.data, axes), tuple(v.shape[a] for a in axes))


def window(stream: Iterable[Any], w: int, stride: int | None = None) -> Iterator[VArray]:
    """Over a stream of VArrays, emit the stack of the last ``w`` items every ``stride`` pushes
    (default ``stride = w``: disjoint windows): the windows start at items ``0, stride, 2 stride,
    ...`` and each is emitted when its last item arrives (``stride < w`` overlaps them, ``stride >
    w`` skips the items between)."""
    if w <= 0:
        raise ValueError(f"vsla.window: w must be positive, got {w}")
    stride = w if stride is None else int(stride)
    if stride <= 0:
        raise ValueError(f"vsla.window: stride must be positive, got {stride}")
    buf: collections.deque = collections.deque(maxlen=w)
    for i, item in enumerate(stream):
        buf.append(item)
        if i + 1 >= w and (i + 1 - w) % stride == 0:
            yield stack(list(buf))


def pyramid(stream: Iterable[Any], levels: int, w: int, stride: int | None = None) -> Iterator[VArray]:
    """Compose ``levels`` windows of width ``w`` (and ``stride``, default ``w``): each level stacks
    ``w`` outputs of the one below."""
    out: Iterable[Any] = stream
    for _ in range(levels):
        out = window(out, w, stride)
    return iter(out)




def reshape(v: VArray, shape: tuple[int, ...]) -> VArray:
    """Reshape the logical extent (sizes must multiply to the logical size).

    ``shape`` is static (Python integers), also under ``vsla.jit``: there the logical sizes are
    runtime values, so the result is one gather, a size mismatch is reported when the jitted
    function returns, and its gradient is the inverse gather (``symbolic.reshape_static``)."""
    v = array(v)
    shape = tuple(int(d) for d in shape)
    if v.symbolic:
        return _pair(sym.reshape_static(v.pair(), shape))
    return _wrap(enp.reshape(v.logical(), shape))


def slice(v: VArray, start: tuple[int, ...], stop: tuple[int, ...]) -> VArray:  # noqa: A001
    """Logical slice ``v[start:stop]`` per axis; indices past the logical shape read zeros.

    ``start``/``stop`` are Python integers (also under ``vsla.jit``, where the result's shape is
    ``stop - start``)."""
    v = array(v)
    if len(start) != v.ndim or len(stop) != v.ndim:
        raise ValueError(f"vsla.slice: start/stop need {v.ndim} entries")
    if any(a < 0 or b < a for a, b in zip(start, stop)):
        raise ValueError(f"vsla.slice: need 0 <= start <= stop, got {start}, {stop}")
    if v.symbolic:
        return _pair(sym.slice_static(v.pair(), [int(a) for a in start], [int(b) for b in stop]))
    full = _logical_as(v, tuple(max(d, b) for d, b in zip(v.shape, stop)))
    return _wrap(full[tuple(builtins_slice(a, b) for a, b in zip(start, stop))])


def gather(v: VArray, indices: Any, axis: int = 0) -> VArray:
    """Take logical entries at ``indices`` along ``axis``; an index past the logical size reads zero.

    ``indices`` are host integers (also under ``vsla.jit``, where they must be 1-D)."""
    v = array(v)
    ax = _axis(v, axis)
    idx = np.asarray(indices, dtype=np.int64)
    if idx.size and idx.min() < 0:
        raise ValueError("vsla.gather: negative indices are not defined on classes")
    if v.symbolic:
        if idx.ndim != 1:
            raise ValueError(f"vsla.gather: under vsla.jit the indices must be 1-D, got shape {idx.shape}")
        return _pair(sym.gather_static(v.pair(), idx, ax))
    top = int(idx.max()) + 1 if idx.size else 0
    full = _logical_as(v, tuple(max(d, top) if i == ax else d for i, d in enumerate(v.shape)))
    return _wrap(enp.take(full, enp.asarray(idx), axis=ax))


def scatter(updates: VArray, indices: Any, size: int | None = None, axis: int = 0) -> VArray:
    """Scatter-add: a VArray whose entry ``k`` along ``axis`` is the sum of the rows ``j`` of
    ``updates`` with ``indices[j] == k`` (zero where no index points), of length ``size`` on that
    axis (default ``max(indices) + 1``; the other axes are those of ``updates``). It is the
    transpose of :func:`gather` (the specification's ``gX = scatter(g_out, indices)``): entries of
    ``updates`` past ``len(indices)`` on ``axis`` are not read.

    ``indices`` are host integers (1-D), also under ``vsla.jit``: the scatter is one selection and
    sum with their static one-hot matrix (``symbolic.select_sum``), so it runs at symbolic
    capacities and is differentiable (its derivative is the gather)."""
    v = array(updates)
    ax = _axis(v, axis)
    idx = np.asarray(indices, dtype=np.int64)
    if idx.ndim != 1:
        raise ValueError(f"vsla.scatter: indices must be 1-D, got shape {idx.shape}")
    if idx.size and idx.min() < 0:
        raise ValueError("vsla.scatter: negative indices are not defined on classes")
    top = int(idx.max()) + 1 if idx.size else 0
    size = top if size is None else int(size)
    if size < top:
        raise ValueError(f"vsla.scatter: size {size} is below max(indices) + 1 = {top}")
    if v.symbolic:
        return _pair(sym.scatter_static(v.pair(), idx, size, ax))
    data, _ = sym.scatter_static(v.pair(), idx, size, ax)
    return _wrap(data[tuple(builtins_slice(0, d) for d in v.shape[:ax] + (size,) + v.shape[ax + 1:])])

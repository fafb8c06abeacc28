"""ATen handlers of image models: group norm and the 2-d upsampling ops (bilinear, bicubic, nearest) with
torch's source-coordinate rules (``align_corners`` both ways, explicit scale factors). Over static
sizes the source indices and weights are constants; over named dynamic axes they are computed at
run time from the sizes, in float32 as torch computes them."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import ember.lax as lax
import ember.numpy as jnp
from ember._src.prims import indexing as ix
from ember._src.torch_import.ops import handler, size_value
from ember._src.torch_import.ops_pool import _tup


@handler("aten.native_group_norm.default", doc="group norm (output, mean, rstd)")
def _group_norm(ctx, x, w, b, n, c, hw, group, eps):
    shape = tuple(x.shape)
    g = jnp.reshape(x, (shape[0], group, -1))
    mean = jnp.mean(g, axis=2, keepdims=True)
    xc = g - mean
    var = jnp.mean(xc * xc, axis=2, keepdims=True)
    rstd = lax.rsqrt(var + eps)
    out = jnp.reshape(xc * rstd, shape)
    cshape = (1, -1) + (1,) * (len(shape) - 2)
    if w is not None:
        out = out * jnp.reshape(w, cshape)
    if b is not None:
        out = out + jnp.reshape(b, cshape)
    return out, jnp.reshape(mean, (shape[0], group)), jnp.reshape(rstd, (shape[0], group))


@handler("aten._adaptive_avg_pool2d.default", "aten.adaptive_avg_pool1d.default",
         "aten._adaptive_avg_pool3d.default", doc="adaptive average pooling")
def _adaptive_avg_pool(ctx, x, output_size):
    """Bin ``j`` of ``o`` over an axis of size ``n`` averages ``[floor(j n / o), ceil((j + 1) n / o))``
    (torch's bins). A static axis is cut into its bins (a reshape where ``o`` divides ``n``); over an
    axis of symbolic size each bin is a masked sum (:func:`_bin_means`: its bounds are not sizes
    ember can slice at)."""
    nd = x.ndim - 2
    out = x
    for i, o in enumerate(_tup(output_size, nd)):
        ax, n = 2 + i, x.shape[2 + i]
        if o == 1:
            out = jnp.mean(out, axis=ax, keepdims=True)
        elif not isinstance(n, int):
            out = jnp.moveaxis(_bin_means(jnp.moveaxis(out, ax, -1), n, o), -1, ax)
        elif n % o == 0:
            shp = tuple(out.shape[:ax]) + (o, n // o) + tuple(out.shape[ax + 1:])
            out = jnp.mean(jnp.reshape(out, shp), axis=ax + 1)
        else:
            pieces = []
            for j in range(o):
                lo, hi = (j * n) // o, -((-(j + 1) * n) // o)
                idx = [slice(None)] * out.ndim
                idx[ax] = slice(lo, hi)
                pieces.append(jnp.mean(out[tuple(idx)], axis=ax, keepdims=True))
            out = jnp.concatenate(pieces, axis=ax)
    return out


def _bin_means(x: Any, n: Any, o: int) -> Any:
    """The means of ``x``'s last axis (of symbolic size ``n``) over its ``o`` adaptive bins: each
    bin's elements selected by a mask built at run time (a select, not a product with 0/1 weights,
    so a NaN or infinity stays in its own bins, as in torch)."""
    nv = size_value(n)
    j = lax.iota(jnp.int32, o)
    lo, hi = (j * nv) // o, -((-(j + 1) * nv) // o)
    h = lax.iota(jnp.int32, n)
    inside = (h[None, :] >= lo[:, None]) & (h[None, :] < hi[:, None])  # (o, n)
    sums = jnp.where(inside, x[..., None, :], jnp.zeros((), x.dtype)).sum(-1)
    return sums / (hi - lo).astype(x.dtype)


def _sizes(x: Any, output_size: Any, scale_factors: Any, nd: int) -> tuple[list, list]:
    """The output sizes (ints, or symbolic sizes under dynamic axes) and the per-dim scale torch
    passes on (``None``: from the sizes)."""
    if output_size is not None:
        return list(output_size), list(scale_factors or [None] * nd)
    outs = []
    for d, f in zip(x.shape[-nd:], scale_factors):
        if isinstance(d, int):
            outs.append(int(math.floor(d * f)))
        elif float(f).is_integer():
            outs.append(d * int(f))
        else:
            raise NotImplementedError(f"upsampling a dynamic axis by the scale factor {f}: floor({d} * {f}) "
                                      "is not a size ember can name (an integer factor or an output size is)")
    return outs, list(scale_factors)


def _scale(n_in: int, n_out: int, align_corners: bool, scale: float | None) -> float:
    """torch's ``area_pixel_compute_scale``."""
    if align_corners:
        return (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    return 1.0 / scale if scale is not None and scale > 0 else n_in / n_out


def _static(*sizes: Any) -> bool:
    return all(isinstance(d, (int, np.integer)) for d in sizes)


def _coords(x: Any) -> Any:
    """The dtype torch computes source coordinates and weights in for ``x``: its ``opmath`` type,
    float64 for float64 images and float32 otherwise."""
    return np.dtype(np.float64) if np.dtype(x.dtype) == np.float64 else np.dtype(np.float32)


_FLOAT32 = np.dtype(np.float32)


def _dynamic_scale(n_in: Any, n_out: Any, align_corners: bool, scale: float | None,
                   ct: Any = _FLOAT32) -> Any:
    """:func:`_scale` at run time in the coordinate dtype ``ct`` (as torch computes it)."""
    one = ct.type(1)
    if align_corners:
        den = size_value(n_out, ct) - one
        ratio = (size_value(n_in, ct) - one) / jnp.maximum(den, one)
        return jnp.where(den > 0, ratio, 0 * one)
    if scale is not None and scale > 0:
        return one * (1.0 / scale)
    return size_value(n_in, ct) / size_value(n_out, ct)


def _linear_axis(x: Any, axis: int, n_out: Any, align_corners: bool, scale: float | None) -> Any:
    n_in = x.shape[axis]
    shape: list[Any] = [1] * x.ndim
    shape[axis] = n_out
    if _static(n_in, n_out):
        s = _scale(n_in, n_out, align_corners, scale)
        dst = np.arange(n_out, dtype=np.float64)
        src = dst * s if align_corners else np.maximum((dst + 0.5) * s - 0.5, 0.0)
        i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
        i1, lam = np.minimum(i0 + 1, n_in - 1), (src - i0).astype(np.dtype(x.dtype))
        i0, i1, lam = (jnp.asarray(i0.astype(np.int32)), jnp.asarray(i1.astype(np.int32)),
                       jnp.asarray(lam.reshape(shape)))
    else:  # source coordinates computed at run time from the sizes
        ct = _coords(x)
        s = _dynamic_scale(n_in, n_out, align_corners, scale, ct)
        dst = lax.iota(ct, n_out)
        half = ct.type(0.5)
        src = dst * s if align_corners else jnp.maximum((dst + half) * s - half, 0)
        last = size_value(n_in) - 1
        i0 = jnp.minimum(jnp.floor(src).astype(jnp.int32), last)
        i1 = jnp.minimum(i0 + 1, last)
        lam = jnp.reshape((src - i0.astype(ct)).astype(x.dtype), shape)
    a = ix.take(x, i0, axis=axis, mode="clip")
    b = ix.take(x, i1, axis=axis, mode="clip")
    return a * (1 - lam) + b * lam  # torch's weighted sum (a lerp would turn an infinity into NaN)


def _nearest_axis(x: Any, axis: int, n_out: Any, scale: float | None) -> Any:
    n_in = x.shape[axis]
    if _static(n_in, n_out):
        s = _scale(n_in, n_out, False, scale)
        src = np.floor(np.arange(n_out, dtype=np.float32) * np.float32(s)).astype(np.int64)
        src = np.minimum(src, n_in - 1)
        return ix.take(x, jnp.asarray(src.astype(np.int32)), axis=axis, mode="clip")
    s = _dynamic_scale(n_in, n_out, False, scale)
    last = size_value(n_in) - 1
    src = jnp.minimum(jnp.floor(lax.iota(jnp.float32, n_out) * s).astype(jnp.int32), last)
    return ix.take(x, src, axis=axis, mode="clip")


def _resample(axis_fn, x, output_size, align_corners, scale_factors):
    """``x`` resampled along its two last axes, one axis at a time, by ``axis_fn``."""
    outs, scales = _sizes(x, output_size, scale_factors, 2)
    for i, (o, s) in enumerate(zip(outs, scales)):
        x = axis_fn(x, x.ndim - 2 + i, o, align_corners, s)
    return x


def _register_resampling(mode: str, axis_fn: Any) -> None:
    """The ``.vec`` (scale factors as a list) and ``.default`` (one per axis) forms of
    ``aten.upsample_<mode>2d``."""
    doc = f"{mode} 2-d upsampling (align_corners both ways)"

    @handler(f"aten.upsample_{mode}2d.vec", doc=doc)
    def vec(ctx, x, output_size, align_corners, scale_factors):
        return _resample(axis_fn, x, output_size, align_corners, scale_factors)

    @handler(f"aten.upsample_{mode}2d.default", doc=doc)
    def default(ctx, x, output_size, align_corners, scales_h=None, scales_w=None):
        return _resample(axis_fn, x, output_size, align_corners, [scales_h, scales_w])


_register_resampling("bilinear", _linear_axis)


@handler("aten.upsample_nearest2d.vec", doc="nearest-neighbour 2-d upsampling")
def _nearest_vec(ctx, x, output_size, scale_factors):
    outs, scales = _sizes(x, output_size, scale_factors, 2)
    for i, (o, s) in enumerate(zip(outs, scales)):
        x = _nearest_axis(x, x.ndim - 2 + i, o, s)
    return x


@handler("aten.upsample_nearest2d.default", doc="nearest-neighbour 2-d upsampling")
def _nearest(ctx, x, output_size, scales_h=None, scales_w=None):
    return _nearest_vec(ctx, x, output_size, [scales_h, scales_w])


_CUBIC_A = -0.75  # torch's bicubic convolution constant


def _cubic_weights(t: Any) -> list:
    """torch's four bicubic tap weights at fraction ``t`` (NumPy or ember arrays, float32)."""
    a = (t.dtype.type if hasattr(t, "dtype") else np.float32)(_CUBIC_A)

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _cubic_axis(x: Any, axis: int, n_out: Any, align_corners: bool, scale: float | None) -> Any:
    """Bicubic resampling of one axis as torch does it: source ``s (o + 0.5) - 0.5`` (not clamped at
    0, unlike bilinear), taps ``floor(src) - 1 .. + 2`` clamped into the axis, weights from the
    fraction clamped to [0, 1], all in float32."""
    n_in = x.shape[axis]
    shape: list[Any] = [1] * x.ndim
    shape[axis] = n_out
    if _static(n_in, n_out):
        ct = _coords(x)
        s = ct.type(_scale(n_in, n_out, align_corners, scale))
        dst = np.arange(n_out, dtype=ct)
        src = dst * s if align_corners else (dst + ct.type(0.5)) * s - ct.type(0.5)
        i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
        t = np.clip(src - i0.astype(ct), 0, 1).astype(ct)
        taps = [jnp.asarray(np.clip(i0 - 1 + k, 0, n_in - 1).astype(np.int32)) for k in range(4)]
        weights = [jnp.asarray(w.astype(np.dtype(x.dtype)).reshape(shape)) for w in _cubic_weights(t)]
    else:
        ct = _coords(x)
        s = _dynamic_scale(n_in, n_out, align_corners, scale, ct)
        dst = lax.iota(ct, n_out)
        src = dst * s if align_corners else (dst + ct.type(0.5)) * s - ct.type(0.5)
        last = size_value(n_in) - 1
        i0 = jnp.minimum(jnp.floor(src).astype(jnp.int32), last)
        t = jnp.clip(src - i0.astype(ct), 0, 1)
        taps = [jnp.clip(i0 - 1 + k, 0, last) for k in range(4)]
        weights = [jnp.reshape(w.astype(x.dtype), shape) for w in _cubic_weights(t)]
    out = None
    for i, w in zip(taps, weights):
        term = ix.take(x, i, axis=axis, mode="clip") * w
        out = term if out is None else out + term
    return out



_register_resampling("bicubic", _cubic_axis)

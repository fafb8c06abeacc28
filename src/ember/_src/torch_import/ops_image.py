"""ATen handlers of image models: group norm and the 2-d upsampling ops (bilinear, nearest) with
torch's source-coordinate rules (``align_corners`` both ways, explicit scale factors)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import ember.lax as lax
import ember.numpy as jnp
from ember._src.prims import indexing as ix
from ember._src.torch_import.ops import handler


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


def _sizes(x: Any, output_size: Any, scale_factors: Any, nd: int) -> tuple[list[int], list]:
    """The output sizes and the per-dim scale torch passes on (``None``: from the sizes)."""
    ins = [int(d) for d in x.shape[-nd:]]
    if output_size is not None:
        if not all(isinstance(o, (int, np.integer)) for o in output_size):
            raise NotImplementedError(f"upsampling to sizes {list(output_size)} that follow a named dynamic "
                                      "axis (the source indices are computed at import)")
        return [int(o) for o in output_size], list(scale_factors or [None] * nd)
    return [int(math.floor(i * s)) for i, s in zip(ins, scale_factors)], list(scale_factors)


def _scale(n_in: int, n_out: int, align_corners: bool, scale: float | None) -> float:
    """torch's ``area_pixel_compute_scale``."""
    if align_corners:
        return (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    return 1.0 / scale if scale is not None and scale > 0 else n_in / n_out


def _linear_axis(x: Any, axis: int, n_out: int, align_corners: bool, scale: float | None) -> Any:
    n_in = int(x.shape[axis])
    s = _scale(n_in, n_out, align_corners, scale)
    dst = np.arange(n_out, dtype=np.float64)
    src = dst * s if align_corners else np.maximum((dst + 0.5) * s - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    lam = (src - i0).astype(np.dtype(x.dtype))
    a = ix.take(x, jnp.asarray(i0.astype(np.int32)), axis=axis, mode="clip")
    b = ix.take(x, jnp.asarray(i1.astype(np.int32)), axis=axis, mode="clip")
    shape = [1] * x.ndim
    shape[axis] = n_out
    lam = jnp.asarray(lam.reshape(shape))
    return a + (b - a) * lam


def _nearest_axis(x: Any, axis: int, n_out: int, scale: float | None) -> Any:
    n_in = int(x.shape[axis])
    s = _scale(n_in, n_out, False, scale)
    src = np.minimum(np.floor(np.arange(n_out, dtype=np.float32) * np.float32(s)).astype(np.int64), n_in - 1)
    return ix.take(x, jnp.asarray(src.astype(np.int32)), axis=axis, mode="clip")


def _static(x: Any, nd: int) -> None:
    if not all(isinstance(d, int) for d in x.shape[-nd:]):
        raise NotImplementedError("upsampling over dynamic spatial axes (the source indices are computed "
                                  "at import)")


@handler("aten.upsample_bilinear2d.vec", doc="bilinear 2-d upsampling (align_corners both ways)")
def _bilinear_vec(ctx, x, output_size, align_corners, scale_factors):
    _static(x, 2)
    outs, scales = _sizes(x, output_size, scale_factors, 2)
    for i, (o, s) in enumerate(zip(outs, scales)):
        x = _linear_axis(x, x.ndim - 2 + i, o, align_corners, s)
    return x


@handler("aten.upsample_bilinear2d.default", doc="bilinear 2-d upsampling (align_corners both ways)")
def _bilinear(ctx, x, output_size, align_corners, scales_h=None, scales_w=None):
    return _bilinear_vec(ctx, x, output_size, align_corners, [scales_h, scales_w])


@handler("aten.upsample_nearest2d.vec", doc="nearest-neighbour 2-d upsampling")
def _nearest_vec(ctx, x, output_size, scale_factors):
    _static(x, 2)
    outs, scales = _sizes(x, output_size, scale_factors, 2)
    for i, (o, s) in enumerate(zip(outs, scales)):
        x = _nearest_axis(x, x.ndim - 2 + i, o, s)
    return x


@handler("aten.upsample_nearest2d.default", doc="nearest-neighbour 2-d upsampling")
def _nearest(ctx, x, output_size, scales_h=None, scales_w=None):
    return _nearest_vec(ctx, x, output_size, [scales_h, scales_w])

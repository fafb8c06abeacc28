"""ATen handlers of max and average pooling, with torch's ``ceil_mode`` and divisor rules, over
static sizes and named dynamic axes."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import ember.lax as lax
import ember.numpy as jnp
from ember._src.prims import movement as mv
from ember._src.torch_import.ops import handler, require_windows, size_value

# A window at least this long over a named dynamic axis with ``ceil_mode`` is the "pool the whole
# map with an oversized window" idiom (transformers' EfficientNet pools with a 1280-long window):
# the axis is reduced whole, and a size past one window raises when the call binds its sizes.
GLOBAL_WINDOW = 64


def _tup(v: Any, n: int) -> tuple:
    if isinstance(v, int):
        return (v,) * n
    v = tuple(v)
    return v * n if len(v) == 1 else v


def _window(x, init, op, kernel, stride, padding, dilation=None, extra=None):
    """reduce_window over the spatial dims, padded by ``padding`` on both sides and ``extra`` more on
    the right (ceil_mode's last windows)."""
    nd = len(kernel)
    dims = (1, 1) + tuple(kernel)
    strides = (1, 1) + tuple(stride or kernel)
    pads = ((0, 0), (0, 0)) + tuple((p, p + e) for p, e in zip(padding, extra or (0,) * nd))
    dil = (1, 1) + tuple(dilation or (1,) * nd)
    out = lax.reduce_window(x, init, op, dims, strides, pads, window_dilation=dil)
    require_windows(out, "pooling")
    return out


def _ceil_window(x, kernel, stride, padding, dilation, ceil_mode) -> tuple[tuple, tuple, tuple | None]:
    """``(kernel, extra, sizes)`` of torch's ``ceil_mode``: the right padding beyond ``padding`` per
    spatial dim (the output size rounds up, but a last window that would start in the right padding
    is dropped), and, where the window is longer than the padded input, the kernel cut to the taps
    inside it (its one window reads every element: EfficientNet pools a 2 x 2 image with a
    1280 x 1280 window, which padded out would be 1280 x 1280 elements per channel) with the output
    sizes the result is cut to (None: the window's own).

    Over a dynamic axis of size ``n`` the extra padding is ``stride - 1``: the floor-mode windows
    of ``n + 2 padding + stride - 1`` are torch's rounded-up count. Torch's dropped last window
    cannot occur when the window spans at least ``stride + padding``; a shorter one raises (torch's
    own export then asks to fix the size's remainder)."""
    nd = len(kernel)
    if not ceil_mode:
        return tuple(kernel), (0,) * nd, None
    ks, extra, outs = [], [], []
    for n, k, st, p, d in zip(x.shape[2:], kernel, stride, padding, dilation):
        span = d * (k - 1) + 1
        if not isinstance(n, int):
            if span < st + p:
                raise NotImplementedError(
                    f"pooling with ceil_mode=True over a named dynamic axis ({n}) with a window of {span} "
                    f"shorter than stride {st} + padding {p}: whether torch keeps the last window depends "
                    "on the size's remainder")
            ks.append(k)
            extra.append(st - 1)
            outs.append(None)
            continue
        o = -(-(n + 2 * p - span) // st) + 1
        if (o - 1) * st >= n + p:
            o -= 1
        if span > n + 2 * p:  # (one window: torch's output size is 1, or it raised)
            k = (n + 2 * p - 1) // d + 1
        ks.append(k)
        outs.append(o)
        extra.append(max(0, (o - 1) * st + d * (k - 1) + 1 - (n + 2 * p)))
    return tuple(ks), tuple(extra), tuple(outs)


def _cut(y, sizes):
    """``y`` cut to ``sizes`` along its spatial dims (see :func:`_ceil_window`; None: as it is)."""
    if sizes is None:
        return y
    sizes = tuple(y.shape[2 + i] if s is None else s for i, s in enumerate(sizes))
    if tuple(y.shape[2:]) == sizes:
        return y
    return lax.slice(y, (0,) * y.ndim, tuple(y.shape[:2]) + sizes)


def _whole_axes(x, kernel, stride, padding, dilation, ceil_mode) -> list[int]:
    """The spatial dims (0-based) pooled whole: a dynamic axis under an oversized ``ceil_mode``
    window (:data:`GLOBAL_WINDOW`)."""
    if not ceil_mode:
        return []
    return [i for i, (n, k, d) in enumerate(zip(x.shape[2:], kernel, dilation))
            if not isinstance(n, int) and d == 1 and k >= GLOBAL_WINDOW]


def _one_window(y, x, whole, kernel, stride, padding, op: str):
    """``y`` (size 1 along the ``whole`` dims) restated as torch's output size there,
    ``(n + 2 p - k + s - 1) // s + 1``: 1 while one window covers the axis; a size past it raises
    ``ShapeError`` when the call binds its sizes, never a wrong result."""
    shape = list(y.shape)
    for i in whole:
        n, k, s, p = x.shape[2 + i], kernel[i], stride[i], padding[i]
        shape[2 + i] = (n + 2 * p - k + s - 1) // s + 1
    why = (f"aten.{op} with ceil_mode over a named dynamic axis imported as one window of "
           f"{max(kernel[i] for i in whole)}: a larger input needs more windows")
    return mv.ensure_shape(y, tuple(shape), why)


def _flatten(kernel, stride, padding, whole):
    """The pooling parameters after the ``whole`` dims were reduced to size 1."""
    return tuple(tuple(1 if i in whole else v for i, v in enumerate(t)) for t in (kernel, stride)) + (
        tuple(0 if i in whole else v for i, v in enumerate(padding)),)


@handler("aten.max_pool2d_with_indices.default", "aten.max_pool1d_with_indices.default",
         "aten.max_pool3d_with_indices.default", doc="max pooling (indices not supported)")
def _max_pool(ctx, x, kernel, stride=None, padding=0, dilation=1, ceil_mode=False):
    nd = x.ndim - 2
    kernel, stride = _tup(kernel, nd), _tup(stride or kernel, nd)
    padding, dilation = _tup(padding, nd), _tup(dilation, nd)
    whole = _whole_axes(x, kernel, stride, padding, dilation, ceil_mode)
    y = jnp.max(x, axis=tuple(2 + i for i in whole), keepdims=True) if whole else x
    ks, ss, ps = _flatten(kernel, stride, padding, whole)
    ks, extra, sizes = _ceil_window(y, ks, ss, ps, dilation, ceil_mode)
    out = _cut(_window(y, -np.inf, lax.max, ks, ss, ps, dilation, extra), sizes)
    return (_one_window(out, x, whole, kernel, stride, padding, ctx.name) if whole else out), None


@handler("aten.avg_pool2d.default", "aten.avg_pool1d.default", "aten.avg_pool3d.default",
         doc="average pooling")
def _avg_pool(ctx, x, kernel, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
              divisor_override=None):
    nd = x.ndim - 2
    kernel, stride, padding = _tup(kernel, nd), _tup(stride or kernel, nd), _tup(padding, nd)
    whole = _whole_axes(x, kernel, stride, padding, (1,) * nd, ceil_mode)
    if whole:  # sums over the whole axes, divided by torch's count there (the window's extent)
        y = jnp.sum(x, axis=tuple(2 + i for i in whole), keepdims=True)
        if not divisor_override:
            for i in whole:
                n = x.shape[2 + i] + (2 * padding[i] if count_include_pad else 0)
                y = y / size_value(n, x.dtype)
        ks, ss, ps = _flatten(kernel, stride, padding, whole)
        out = _avg_pool(ctx, y, ks, ss, ps, ceil_mode, count_include_pad, divisor_override)
        return _one_window(out, x, whole, kernel, stride, padding, ctx.name)
    full = math.prod(kernel)  # (torch's divisor for a window inside the padded input)
    kernel, extra, sizes = _ceil_window(x, kernel, stride, padding, (1,) * nd, ceil_mode)
    s = _cut(_window(x, 0.0, lax.add, kernel, stride, padding, extra=extra), sizes)
    if divisor_override:
        return s / divisor_override
    if not any(extra) and (count_include_pad or not any(padding)) and math.prod(kernel) == full:
        return s / full
    # the window's elements inside the input (count_include_pad=False) or inside the padded input:
    # ceil_mode's extra right padding never counts (torch's divisor)
    if count_include_pad:
        ones = jnp.ones((1, 1) + tuple(n + 2 * p for n, p in zip(x.shape[2:], padding)), x.dtype)
        return s / _cut(_window(ones, 0.0, lax.add, kernel, stride, (0,) * nd, extra=extra), sizes)
    ones = jnp.ones((1, 1) + tuple(x.shape[2:]), x.dtype)
    return s / _cut(_window(ones, 0.0, lax.add, kernel, stride, padding, extra=extra), sizes)

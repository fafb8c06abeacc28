"""Model A convolution over the last ``k`` axes (Conv2D, Conv3D: §4.3), on top of the 1-D conv.

The full ``k``-dimensional convolution of ``a`` (sizes ``m_0 .. m_{k-1}``) and ``b`` (``n_0 ..``) has
the sizes ``m_i + n_i - 1``. Pad every axis but the first of the ``k`` to its output width
``W_i`` (capacities ``ca_i + cb_i - 1`` under ``vsla.jit``) and flatten the ``k`` axes C-ordered:
a 1-D conv of the flattened operands is then the flattened ``k``-D conv, because an index sum never
carries from one row into the next (each row has room for the whole row result). So the
``k``-D conv is one batched 1-D conv (its direct or FFT path, one ``fft_conv`` step) between a pad
and a reshape, eagerly and at symbolic capacities.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

import ember.numpy as enp
from ember import lax
from ember._src import shapes as sh
from ember._src.dynamic import dimension_as_value
from ember._src.vsla import symbolic as sym

__all__ = ["conv_nd_static", "conv_nd_pairs"]


def _flat(x: Any, widths: list[Any], k: int) -> Any:
    """``x`` with its last ``k - 1`` axes zero-extended to ``widths`` and its last ``k`` flattened."""
    lead = list(x.shape[:x.ndim - k + 1])
    x = sym.extend(x, lead + list(widths))
    size = x.shape[x.ndim - k]
    for w in widths:
        size = size * w
    return enp.reshape(x, tuple(x.shape[:x.ndim - k]) + (size,))


def _unflat(out: Any, first: Any, widths: list[Any]) -> Any:
    """The leading ``first * prod(widths)`` entries of the last axis of ``out`` as ``(first, *widths)``."""
    size = first
    for w in widths:
        size = size * w
    out = sym.extend(out, list(out.shape[:-1]) + [sh.dmax(out.shape[-1], size)])
    out = out[..., :size] if isinstance(size, int) else _cut(out, size)
    return enp.reshape(out, tuple(out.shape[:-1]) + (first, *widths))


def _cut(x: Any, size: Any) -> Any:
    return lax.slice(x, [0] * x.ndim, list(x.shape[:-1]) + [size])


def conv_nd_static(xa: Any, xb: Any, k: int, conv1d: Any) -> Any:
    """The ``k``-D conv of two arrays (their logical extents, leading batch axes already equal),
    through ``conv1d(flat_a, flat_b)`` (an array of the 1-D conv over the last axis)."""
    ms, ns = xa.shape[-k:], xb.shape[-k:]
    outs = [m + n - 1 for m, n in zip(ms, ns)]
    widths = outs[1:]
    fa, fb = _flat(xa, widths, k), _flat(xb, widths, k)
    full = conv1d(fa, fb)
    p = math.prod(widths)
    return enp.reshape(full[..., : outs[0] * p], tuple(full.shape[:-1]) + tuple(outs))


def conv_nd_pairs(a: sym.Pair, b: sym.Pair, k: int, method: str, threshold: int) -> sym.Pair:
    """The ``k``-D conv of runtime-length pairs (under ``vsla.jit``): output capacities ``ca_i +
    cb_i - 1`` on the last ``k`` axes, lengths ``m_i + n_i - 1`` (0 on every such axis when one
    operand is empty there)."""
    (x, lx), (y, ly) = a, b
    nb = x.ndim - k
    caps = [ca + cb - 1 for ca, cb in zip(x.shape[nb:], y.shape[nb:])]
    widths = caps[1:]
    fx, fy = _flat(x, widths, k), _flat(y, widths, k)
    # the flattened operands' whole capacity is their logical length: nothing past it is cut
    nx = dimension_as_value(fx.shape[-1], np.int32)
    ny = dimension_as_value(fy.shape[-1], np.int32)
    out, _ = sym.conv((fx, enp.concatenate([lx[:nb], nx[None]]).astype(np.int32)),
                      (fy, enp.concatenate([ly[:nb], ny[None]]).astype(np.int32)), method, threshold)
    out = _unflat(out, caps[0], widths)
    m, n = lx[nb:], ly[nb:]
    empty = enp.any(m == 0) | enp.any(n == 0)
    last = enp.where(empty, 0, m + n - 1)
    lengths = enp.concatenate([enp.maximum(lx[:nb], ly[:nb]), last]).astype(np.int32)
    # the FFT's rounding noise lands in the rows' slack too (the step cuts only the flat tail)
    keep = sym.logical_mask(out, lengths, axes=range(nb, out.ndim))
    return enp.where(keep, out, sym.zero(out.dtype)), lengths

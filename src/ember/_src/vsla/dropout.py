"""Dropout on VArrays (the specification's ``Y = X * M / (1 - p)``, §9.4).

The keep mask ``M`` is a function of the key and of each entry's *logical* multi-index (a counter
hash, no state), never of the stored capacity: a VArray gets the same mask eagerly, under
``vsla.jit`` (symbolic capacities) and stored at any capacity, and the slack stays zero. The mask is
computed once in the forward pass; the derivative ``g * M / (1 - p)`` reuses it (it is the
residual that ``ember.grad`` keeps of the ``where``), so backward never redraws it.
"""
from __future__ import annotations

from typing import Any

import numpy as np

import ember.numpy as enp
from ember import lax
from ember._src.vsla import symbolic as sym
from ember._src.vsla.varray import VArray, array

__all__ = ["dropout", "keep_mask"]

_GOLDEN = np.uint32(0x9E3779B9)


def _mix(h: Any) -> Any:
    """MurmurHash3's 32-bit finalizer (a bijection of uint32 with full avalanche)."""
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def _key_words(key: Any) -> tuple[Any, Any]:
    """Two uint32 words of an ``ember.random`` key (raw ``uint32[2]`` or a typed key)."""
    k = key
    if not (hasattr(k, "dtype") and np.dtype(k.dtype) == np.uint32):
        from ember import random

        k = random.key_data(k)
    k = enp.reshape(enp.asarray(k), (-1,))
    return k[0], k[-1]


def keep_mask(key: Any, cap: tuple, rate: float) -> Any:
    """Boolean keep mask of an array of capacities ``cap``: entry ``(i0, i1, ...)`` is kept when the
    hash of the key and its indices is at least ``rate * 2**32`` (so ``P(keep) = 1 - rate``)."""
    k0, k1 = _key_words(key)
    h: Any = _mix(k0.astype(np.uint32) ^ _GOLDEN)
    nd = len(cap)
    for ax, c in enumerate(cap):
        idx = lax.iota(np.uint32, c) * _GOLDEN + np.uint32(ax + 1)
        idx = enp.reshape(idx, [1] * ax + [c] + [1] * (nd - ax - 1))
        h = _mix((h * np.uint32(0x01000193)) ^ _mix(idx ^ k1.astype(np.uint32)))
    threshold = np.uint32(min(int(round(rate * 2.0**32)), 2**32 - 1))
    return enp.broadcast_to(h >= threshold, tuple(cap))


def dropout(v: VArray, rate: float, key: Any, *, deterministic: bool = False) -> VArray:
    """Inverted dropout: each logical entry is zeroed with probability ``rate`` and the others are
    scaled by ``1 / (1 - rate)``; ``deterministic=True`` (evaluation) or ``rate == 0`` returns ``v``.

    ``key`` is an ``ember.random`` key; the mask depends on it and on the logical indices only
    (module docstring), eagerly and under ``vsla.jit``."""
    v = array(v)
    rate = float(rate)
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"vsla.dropout: rate must be in [0, 1], got {rate}")
    if deterministic or rate == 0.0:
        return v
    data, lengths = v.pair()
    if rate == 1.0:
        return v._with_data(enp.zeros_like(data))
    keep = keep_mask(key, tuple(data.shape), rate)
    if v.symbolic or tuple(data.shape) != v.shape:
        keep = keep & sym.logical_mask(data, lengths)
    scale = np.asarray(1.0 / (1.0 - rate), dtype=np.dtype(data.dtype))
    return v._with_data(enp.where(keep, data * scale, sym.zero(data.dtype)))

"""``map_coordinates``: nearest (order 0) or linear (order 1) interpolation of an N-d array at points."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import ember.numpy as jnp


def _index(i: Any, n: int, mode: str) -> tuple[Any, Any]:
    """(index into the axis, validity) for integer positions ``i`` on an axis of length ``n``."""
    if mode == "constant":
        return jnp.clip(i, 0, n - 1), (i >= 0) & (i < n)
    if mode == "nearest":
        return jnp.clip(i, 0, n - 1), None
    if mode in ("wrap", "grid-wrap"):
        return jnp.mod(i, n), None
    if mode == "mirror":
        if n == 1:
            return jnp.zeros_like(i), None
        s = n - 1
        return s - jnp.abs(jnp.mod(i, 2 * s) - s), None
    if mode == "reflect":
        j = jnp.mod(i, 2 * n)
        return jnp.where(j < n, j, 2 * n - 1 - j), None
    raise ValueError(f"map_coordinates: mode must be one of constant, nearest, wrap, mirror, reflect; got "
                     f"{mode!r}")


def map_coordinates(input: Any, coordinates: Sequence[Any], order: int, mode: str = "constant",  # noqa: A002
                    cval: Any = 0.0) -> Any:
    """Values of ``input`` at ``coordinates`` (one array of positions per axis of ``input``).

    ``order`` 0 (nearest) or 1 (linear); ``mode`` says how positions outside the array are mapped
    (``constant`` uses ``cval`` for every out-of-range neighbour, as JAX).
    """
    x = jnp.asarray(input)
    coords = [jnp.asarray(c) for c in coordinates]
    if len(coords) != x.ndim:
        raise ValueError(f"map_coordinates: got {len(coords)} coordinate arrays for a {x.ndim}-d input")
    if order not in (0, 1):
        raise NotImplementedError(f"map_coordinates: order {order} is not supported (0 or 1, as JAX)")
    ftype = x.dtype if jnp.issubdtype(x.dtype, jnp.inexact) else jnp.float32
    coords = [c.astype(ftype) if not jnp.issubdtype(c.dtype, jnp.inexact) else c for c in coords]
    per_axis = []
    for c in coords:
        if order == 0:
            per_axis.append([(jnp.floor(c + 0.5).astype(jnp.int32), None)])
        else:
            lo = jnp.floor(c)
            w = c - lo
            lo = lo.astype(jnp.int32)
            per_axis.append([(lo, 1 - w), (lo + 1, w)])
    out = None
    for corner in itertools.product(*per_axis):
        idx, weight, valid = [], None, None
        for (i, w), n in zip(corner, x.shape):
            j, v = _index(i, n, mode)
            idx.append(j)
            if w is not None:
                weight = w if weight is None else weight * w
            if v is not None:
                valid = v if valid is None else valid & v
        val = x[tuple(idx)].astype(ftype)
        if valid is not None:
            val = jnp.where(valid, val, jnp.asarray(cval, ftype))
        term = val if weight is None else val * weight
        out = term if out is None else out + term
    if jnp.issubdtype(x.dtype, jnp.integer):
        return jnp.round(out).astype(x.dtype)
    return out.astype(x.dtype)


__all__ = ["map_coordinates"]

"""``jax.ops.segment_*``: reductions of ``data`` rows grouped by ``segment_ids`` (scatters)."""

from __future__ import annotations

from typing import Any

import numpy as np

import ember.numpy as jnp
from ember._src import core


def _identity(dtype: np.dtype, kind: str) -> Any:
    if kind in ("add", "mul"):
        return 0 if kind == "add" else 1
    if np.issubdtype(dtype, np.floating):
        return -np.inf if kind == "max" else np.inf
    if dtype == np.bool_:
        return kind == "min"
    info = np.iinfo(dtype)
    return info.min if kind == "max" else info.max


def _segment(kind: str, data: Any, segment_ids: Any, num_segments: int | None, indices_are_sorted: bool,
             unique_indices: bool, mode: str | None) -> Any:
    data = jnp.asarray(data)
    segment_ids = jnp.asarray(segment_ids)
    if not np.issubdtype(segment_ids.dtype, np.integer):
        raise TypeError(f"segment_{kind}: segment_ids must be integers, got {segment_ids.dtype}")
    if data.ndim < 1 or segment_ids.shape != data.shape[:segment_ids.ndim] or segment_ids.ndim != 1:
        raise ValueError(f"segment_{kind}: segment_ids of shape {tuple(segment_ids.shape)} must be 1-D and "
                         f"match the leading axis of data of shape {tuple(data.shape)}")
    if num_segments is None:
        ids = core.concrete_or_error(segment_ids, f"segment_{kind} without num_segments")
        num_segments = int(np.max(np.asarray(ids))) + 1 if ids.size else 0
    num_segments = int(num_segments)
    out = jnp.full((num_segments,) + tuple(data.shape[1:]), _identity(data.dtype, kind), data.dtype)
    ref = out.at[segment_ids]
    kw = dict(mode="drop" if mode is None else mode, indices_are_sorted=indices_are_sorted,
              unique_indices=unique_indices)
    return {"add": ref.add, "mul": ref.multiply, "max": ref.max, "min": ref.min}[kind](data, **kw)


def _make(kind: str, name: str, doc: str) -> Any:
    def segment(data: Any, segment_ids: Any, num_segments: int | None = None,
                indices_are_sorted: bool = False, unique_indices: bool = False,
                bucket_size: int | None = None, mode: str | None = None) -> Any:
        return _segment(kind, data, segment_ids, num_segments, indices_are_sorted, unique_indices, mode)
    segment.__name__ = segment.__qualname__ = name
    segment.__doc__ = doc
    return segment


segment_sum = _make("add", "segment_sum", "Sum of the rows of ``data`` per segment id "
                    "(ids outside ``[0, num_segments)`` are dropped).")
segment_prod = _make("mul", "segment_prod", "Product of the rows of ``data`` per segment (1 if empty).")
segment_max = _make("max", "segment_max", "Maximum of the rows of ``data`` per segment "
                    "(``-inf`` / the dtype's minimum when empty).")
segment_min = _make("min", "segment_min", "Minimum of the rows of ``data`` per segment "
                    "(``inf`` / the dtype's maximum when empty).")

__all__ = ["segment_max", "segment_min", "segment_prod", "segment_sum"]
